"""The Warp side of the state schema: the `Gb` struct every kernel thread holds, built from
`gbxcule.core.schema` (fields, then the transient per-thread values), the sequencer's scratch `Seq`, and
`Mem`, everything else a thread touches. The schema itself (field names, RAM regions, power-on values) is
pure Python in `core/schema.py`.
"""

from __future__ import annotations

import warp as wp

from gbxcule.core.schema import BIG, FIELDS, TRANSIENT

__all__ = ["BIG", "SEQ_FIELDS", "Gb", "Mem", "Seq"]  # BIG: kernels/frame.py and step.py import it from here

# The instruction sequencer's per-instruction scratch (kernels/frame.py run_op): not state, never stored.
SEQ_FIELDS = ("base", "n_fetch", "ready", "fam", "info", "op", "imm", "nxt", "n_acc", "wmask", "ad0", "ad1", "wv0",
              "wv1", "rv0", "rv1", "taken", "tmp", "addr", "value", "write", "when", "mao")


def _int_struct(name: str, names) -> type:
    cls = type(name, (), {"__annotations__": {n: wp.int32 for n in names}, "__module__": __name__})
    return wp.struct(cls)


Gb = _int_struct("Gb", [name for name, _ in FIELDS] + list(TRANSIENT))
Seq = _int_struct("Seq", SEQ_FIELDS)


@wp.struct
class Mem:
    """Everything a kernel thread reads or writes besides its Gb struct. Warp functions take it by value,
    so every field costs on every call: keep it small."""

    rom: wp.array(dtype=wp.uint32)  # shared by all envs: word i = mirrored ROM bytes i..i+3 (rom_words)
    rom_banks: wp.int32  # number of 16 KiB banks of the cartridge
    rom_mask: wp.int32  # rom's length - 1: rom holds the banks mirrored up to a power of two (rom_mirror)
    boot: wp.array(dtype=wp.uint8)  # 256-byte boot ROM (or 1 dummy byte)
    ram: wp.array2d(dtype=wp.uint8)  # per-env regions, [envs, bytes]: env-major
    serial: wp.array(dtype=wp.uint8)  # per-env SB capture ring, interleaved
    ops: wp.array(dtype=wp.int32)  # per opcode (512: base, then CB): packed info and family (gen.op_table)
    n_envs: wp.int32
    cart_ram_banks: wp.int32  # 8 KiB banks of cartridge RAM
    mbc: wp.int32  # 0 none, 1 MBC1, 2 MBC2, 3 MBC3, 5 MBC5
    has_rtc: wp.int32
    sram: wp.int32  # ROM+RAM carts: RAM always enabled
    mbc1_multicart: wp.int32
    vram: wp.int32  # region bases (see ram_layout)
    wram: wp.int32
    oam: wp.int32
    unusable: wp.int32
    io: wp.int32
    hram: wp.int32
    cart: wp.int32
    frame: wp.array(dtype=wp.uint32)  # frame buffer, 40 words a line (render.py); 1 word when unused
