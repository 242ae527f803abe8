"""The per-env state schema: the one description of everything a Game Boy env holds.

Two kinds of state:
- **Fields**: int32 scalars (CPU registers, IO registers, timer, PPU, serial, DMA, MBC and RTC state).
  In a kernel they live in the thread-local `Gb` struct; between launches they live in one int32 device
  array `fields[f * num_envs + env]` (field-major, so lanes touching the same field coalesce).
- **RAM regions**: bytes of the address space that belong to an env (VRAM, WRAM, OAM, IO, HRAM,
  cartridge RAM), interleaved across envs in one [bytes, num_envs] array: byte `o` of env `e` is
  `ram[o, e]` (flat offset `o * num_envs + e`, 64-bit in Warp's indexing, so the array may pass 2 GiB),
  where `o` is the region's base in `ram_layout()` plus the offset inside the region. The ROM is not here: it is
  stored once and shared by all envs.

Kernel arguments, reset and state I/O are all derived from `FIELDS` and `ram_layout()`; nothing else
lists them. docs/step_abi.md describes the layout for readers.
"""

from __future__ import annotations

from dataclasses import dataclass

import warp as wp

# (name, meaning). Order is the order in the fields array.
FIELDS: tuple[tuple[str, str], ...] = (
    # CPU
    ("a", "A"), ("f", "F (low nibble always 0)"), ("b", "B"), ("c", "C"), ("d", "D"), ("e", "E"),
    ("h", "H"), ("l", "L"), ("sp", "SP"), ("pc", "PC (stays on a HALT while halted)"),
    ("ime", "interrupt master enable"),
    ("ime_delay", "EI delay: 2 after EI, IME set when it counts down to 0"),
    ("halted", "CPU is halted"), ("halted_during_ei", "HALT executed in EI's shadow"),
    ("stopped", "STOP executed (kept for state I/O; DMG STOP runs on like PyBoy)"),
    ("intr_queued", "interrupt queued flag of the reference model (0 between batches)"),
    ("halt_bug", "the next opcode fetch does not advance PC (HALT with IME=0 and a pending interrupt)"),
    ("locked", "an illegal opcode locked the CPU; the rest of the machine runs on"),
    ("if_", "IF (0xFF0F), low 5 bits"), ("ie", "IE (0xFFFF)"),
    ("cycles", "T-cycles since the start of the current step"),
    ("bail", "end the current CPU batch after this instruction"),
    ("bootrom", "boot ROM mapped at 0x0000-0x00FF"),
    # timer
    ("div_counter", "16-bit internal divider; DIV is its high byte"), ("tima", "TIMA"), ("tma", "TMA"),
    ("tac", "TAC (3 bits)"), ("tima_reload", "TIMA overflow reload state: 0 none, 1 pending, 2 reloaded"),
    ("tima_counter", "cycles left in the current reload state"),
    ("timer_last", "cycle count the timer was last advanced to"), ("timer_cti", "cycles to timer event"),
    # PPU
    ("lcdc", "LCDC"), ("stat", "STAT value incl. mode and coincidence bits"), ("stat_mode", "PPU mode 0-3"),
    ("stat_irq_line", "STAT interrupt line (for STAT blocking)"), ("ly", "LY"), ("lyc", "LYC"),
    ("scy", "SCY"), ("scx", "SCX"), ("wy", "WY"), ("wx", "WX"), ("bgp", "BGP"), ("obp0", "OBP0"),
    ("obp1", "OBP1"), ("lcd_clock", "dots into the frame"), ("lcd_target", "dot of the next PPU transition"),
    ("lcd_last", "cycle count the PPU was last advanced to"), ("lcd_cti", "cycles to the next transition"),
    ("lcd_ctf", "cycles to the end of the frame"), ("next_mode", "mode the next transition enters"),
    ("stat_transition", "pending sub-step of a line change"), ("first_frame", "first frame after LCD on"),
    ("lcd_reset", "LCD was switched on: restart at the next advance"), ("frame_done", "a frame ended"),
    ("mode3_adj", "extra mode-3 dots of the current line"), ("stat_mode_override", "next STAT read shows mode 0"),
    ("lyc_changed_off", "LYC written while the LCD was off"), ("wy_latch", "window Y condition met this frame"),
    ("win_line", "window line counter, mod 256 (-1 after line 143 is drawn)"),
    ("screen_fill", "1 + the shade the whole screen was blanked to, until a line is drawn; else 0"),
    # serial
    ("sb", "SB"), ("sc", "SC"), ("serial_on", "transfer in progress"), ("serial_internal", "internal clock"),
    ("serial_left", "cycles until the transfer in progress completes"), ("serial_last", "cycle count last seen"),
    ("serial_cti", "cycles to serial event"), ("serial_count", "bytes written to SB so far"),
    # OAM DMA
    ("dma_active", "OAM DMA running"), ("dma_source", "source page"), ("dma_index", "bytes copied"),
    ("dma_start", "cycle count the first byte is due"),
    # joypad
    ("joy_dpad", "d-pad lines, 1 = released (bit0 right, 1 left, 2 up, 3 down)"),
    ("joy_buttons", "button lines, 1 = released (bit0 A, 1 B, 2 select, 3 start)"),
    ("joyp", "JOYP as last computed (on write, like the reference)"),
    # cartridge
    ("rom_bank", "ROM bank at 0x4000-0x7FFF"), ("rom_bank_low", "ROM bank at 0x0000-0x3FFF"),
    ("ram_bank", "RAM bank (or RTC register 8-12)"), ("ram_enabled", "cartridge RAM enabled"),
    ("mbc_mode", "MBC1 banking mode"), ("mbc_reg1", "MBC1 bank register 1"), ("mbc_reg2", "MBC1 register 2"),
    ("rtc_s", "RTC seconds"), ("rtc_m", "RTC minutes"), ("rtc_h", "RTC hours"), ("rtc_dl", "RTC day low"),
    ("rtc_dh", "RTC day high bit"), ("rtc_halt", "RTC halted"), ("rtc_carry", "RTC day carry"),
    ("rtc_cycles", "cycles into the current RTC second"), ("rtc_last", "cycle count the RTC was last advanced to"),
    ("rtc_latch_on", "latch command armed"), ("rtc_ls", "latched seconds"), ("rtc_lm", "latched minutes"),
    ("rtc_lh", "latched hours"), ("rtc_ldl", "latched day low"), ("rtc_ldh", "latched day high"),
    # bookkeeping
    ("frames", "frames completed since reset"), ("instructions", "instructions executed (wraps)"),
)
FIELD_INDEX: dict[str, int] = {name: i for i, (name, _) in enumerate(FIELDS)}
NUM_FIELDS = len(FIELDS)

# Fields that hold absolute cycle counts; rebased to 0 with `cycles` at the start of every step.
CYCLE_FIELDS = ("cycles", "timer_last", "lcd_last", "serial_last", "dma_start", "rtc_last")

BIG = 0x3FFFFFFF  # "never" in cycle arithmetic

# Per-env RAM regions: (name, size). Cartridge RAM comes last; its size depends on the ROM.
FIXED_REGIONS: tuple[tuple[str, int], ...] = (
    ("vram", 0x2000), ("wram", 0x2000), ("oam", 0xA0), ("unusable", 0x60), ("io", 0x80), ("hram", 0x7F),
)
SERIAL_CAPTURE = 4096  # bytes of SB writes kept per env (a ring)


@dataclass(frozen=True)
class RamLayout:
    bases: dict[str, int]
    sizes: dict[str, int]
    total: int


def ram_layout(cart_ram_size: int) -> RamLayout:
    bases, sizes, off = {}, {}, 0
    for name, size in (*FIXED_REGIONS, ("cart", cart_ram_size)):
        bases[name], sizes[name] = off, size
        off += size
    return RamLayout(bases, sizes, off)


# Per-thread values that are not state: which env this thread is, how many envs there are, and whether
# the current frame is drawn into the frame buffer.
TRANSIENT = ("env", "n", "render")

# The instruction sequencer's per-instruction scratch (kernels/gen.py run_op): not state, never stored.
SEQ_FIELDS = ("base", "n_fetch", "ready", "fam", "info", "op", "imm", "nxt", "cyc_nt", "a0", "k0", "a1", "k1",
              "n_acc", "wmask", "ad0", "ad1", "wv0", "wv1", "rv0", "rv1", "taken", "tmp",
              "addr", "value", "write", "when", "mao")


def _int_struct(name: str, names) -> type:
    cls = type(name, (), {"__annotations__": {n: wp.int32 for n in names}, "__module__": __name__})
    return wp.struct(cls)


Gb = _int_struct("Gb", [name for name, _ in FIELDS] + list(TRANSIENT))
Seq = _int_struct("Seq", SEQ_FIELDS)


@wp.struct
class Mem:
    """Everything a kernel thread reads or writes besides its Gb struct. Warp functions take it by value,
    so every field costs on every call: keep it small."""

    rom: wp.array(dtype=wp.uint8)  # shared by all envs
    rom_banks: wp.int32  # number of 16 KiB banks in rom
    boot: wp.array(dtype=wp.uint8)  # 256-byte boot ROM (or 1 dummy byte)
    ram: wp.array2d(dtype=wp.uint8)  # per-env regions, [bytes, envs]: interleaved
    serial: wp.array(dtype=wp.uint8)  # per-env SB capture ring, interleaved
    ops: wp.array(dtype=wp.int32)  # per opcode (512: base, then CB): family, then at +512 packed info
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
