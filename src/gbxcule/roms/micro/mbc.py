"""MBC1_RAM, MBC3_RAM, MBC5_RAM: ROM bank switching and banked cartridge RAM.

Every ROM bank n holds the marker (n, n ^ $5A) at its start ($0000 for bank 0). The ROM switches to a
list of bank numbers (edge cases included: 0, values above the bank count or the register width) and
copies the marker seen at $4000 for each to $C100. It then enables the RAM, writes 4 bytes into every RAM
bank, reads them back from the last bank to the first into $C200 and checks the disabled value ($FF),
that writes are ignored while disabled, and (MBC1) that mode 0 pins the RAM to bank 0. Misc results
from $C000. All code runs from bank 0; the RAM is disabled again at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gbxcule.roms.micro.common import done, header, program
from gbxcule.roms.spec import RomSpec, VerifySettings

MISC, ROM_MARKS, RAM_READS = 0xC000, 0xC100, 0xC200
RAM_OFFSETS = (0xA000, 0xA001, 0xA002, 0xBFFF)


def marker(bank: int) -> bytes:
    return bytes([bank & 0xFF, (bank ^ 0x5A) & 0xFF])


def pattern(bank: int, k: int) -> int:
    return (bank * 0x11 + k * 0x40 + 0x05) & 0xFF


@dataclass(frozen=True)
class Mbc:
    """One cartridge: its header codes, the bank switches to try and how the MBC maps them."""

    name: str
    cartridge_type: int
    rom_size: int  # header code: 32 KiB << code
    ram_size: int  # header code
    ram_banks: int
    rom_switches: tuple[tuple[tuple[int, int], ...], ...]  # per switch: the (address, value) writes
    rom_bank: Callable[[list[tuple[int, int]]], int]  # (address, value) writes so far -> bank at $4000
    enable_value: int  # the value that re-enables the RAM (MBC1 and MBC3 look at the low nibble only)

    @property
    def rom_banks(self) -> int:
        return 2 << self.rom_size


def _last(writes: list[tuple[int, int]], lo: int, hi: int, default: int) -> int:
    """The value last written to the register at addresses lo..hi."""
    return next((v for a, v in reversed(writes) if lo <= a <= hi), default)


def _mbc1_bank(writes: list[tuple[int, int]]) -> int:
    return (_last(writes, 0x2000, 0x3FFF, 1) & 0x1F or 1) & 7  # 5-bit register, 0 reads as 1; 8 banks


def _mbc3_bank(writes: list[tuple[int, int]]) -> int:
    return (_last(writes, 0x2000, 0x3FFF, 1) & 0x7F or 1) & 15  # 7-bit register, 0 reads as 1; 16 banks


def _mbc5_bank(writes: list[tuple[int, int]]) -> int:
    return ((_last(writes, 0x3000, 0x3FFF, 0) & 1) << 8 | _last(writes, 0x2000, 0x2FFF, 1)) & 31  # 9 bits


MBC1 = Mbc("MBC1_RAM", 0x03, 2, 0x03, 4, tuple(((0x2000, n),) for n in (*range(1, 8), 0, 0x20, 9, 0x1F)),
           _mbc1_bank, 0x3A)
MBC3 = Mbc("MBC3_RAM", 0x13, 3, 0x03, 4, tuple(((0x2000, n),) for n in (*range(1, 16), 0, 0x80, 0x11)),
           _mbc3_bank, 0x3A)
MBC5 = Mbc("MBC5_RAM", 0x1B, 4, 0x04, 16,
           (*(((0x2000, n),) for n in range(32)), ((0x3000, 1), (0x2000, 3)), ((0x3000, 0), (0x2FFF, 5))),
           _mbc5_bank, 0x0A)


def _rom_marks(mbc: Mbc) -> bytes:
    writes: list[tuple[int, int]] = []
    out = b""
    for switch in mbc.rom_switches:
        writes += switch
        out += marker(mbc.rom_bank(writes))
    return out


def _misc(mbc: Mbc) -> bytes:
    last = mbc.ram_banks - 1
    misc = [0xFF, pattern(last, 1)]  # read while disabled; a write while disabled did not land
    if mbc is MBC1:
        misc += [pattern(0, 0), 0x77, pattern(2, 2)]  # mode 0 reads bank 0; its write went to bank 0
    return bytes(misc)


def _signature(mbc: Mbc) -> dict[int, bytes]:
    reads = bytes(pattern(b, k) for b in reversed(range(mbc.ram_banks)) for k in range(4))
    return done() | {ROM_MARKS: _rom_marks(mbc), RAM_READS: reads, MISC: _misc(mbc)}


def _source(mbc: Mbc) -> str:
    code = []
    for i, writes in enumerate(mbc.rom_switches):
        for addr, value in writes:
            code.append(f"ld a, ${value:02X}\n    ld [${addr:04X}], a")
        code.append(f"ld a, [$4000]\n    ld [${ROM_MARKS + 2 * i:04X}], a\n"
                    f"    ld a, [$4001]\n    ld [${ROM_MARKS + 2 * i + 1:04X}], a")
    code.append("ld a, $0A\n    ld [$0000], a")
    if mbc is MBC1:
        code.append("ld a, 1\n    ld [$6000], a  ; mode 1: $4000-$5FFF selects the RAM bank")
    for b in range(mbc.ram_banks):
        code.append(f"ld a, {b}\n    ld [$4000], a")
        code += [f"ld a, ${pattern(b, k):02X}\n    ld [${addr:04X}], a" for k, addr in enumerate(RAM_OFFSETS)]
    for i, b in enumerate(reversed(range(mbc.ram_banks))):
        code.append(f"ld a, {b}\n    ld [$4000], a")
        code += [f"ld a, [${addr:04X}]\n    ld [${RAM_READS + 4 * i + k:04X}], a"
                 for k, addr in enumerate(RAM_OFFSETS)]
    last = mbc.ram_banks - 1
    code.append(f"""ld a, {last}
    ld [$4000], a
    xor a
    ld [$0000], a
    ld a, [$A000]
    ld [${MISC:04X}], a
    ld a, $55
    ld [$A001], a
    ld a, ${mbc.enable_value:02X}
    ld [$0000], a
    ld a, [$A001]
    ld [${MISC + 1:04X}], a""")
    if mbc is MBC1:
        code.append(f"""ld a, 3
    ld [$4000], a
    xor a
    ld [$6000], a  ; mode 0: the RAM is bank 0 whatever $4000-$5FFF holds
    ld a, [$A000]
    ld [${MISC + 2:04X}], a
    ld a, $77
    ld [$A002], a
    ld a, 1
    ld [$6000], a
    xor a
    ld [$4000], a
    ld a, [$A002]
    ld [${MISC + 3:04X}], a
    ld a, 2
    ld [$4000], a
    ld a, [$A002]
    ld [${MISC + 4:04X}], a""")
    code.append("xor a\n    ld [$0000], a\n    jp finish")
    banks = "\n".join(f'SECTION "bank{n}", ROMX[$4000], BANK[{n}]\n    db ${n:02X}, ${n ^ 0x5A:02X}'
                      for n in range(1, mbc.rom_banks))
    return program("\n".join("    " + c for c in code) + f"""

SECTION "bank0_marker", ROM0[$0000]
    db $00, $5A
{banks}
""")


def _spec(mbc: Mbc, description: str, covers: tuple[str, ...]) -> RomSpec:
    return RomSpec(
        name=mbc.name,
        description=description,
        covers=covers,
        source=lambda: _source(mbc),
        header=lambda: header(mbc.name, mbc.cartridge_type, mbc.rom_size, mbc.ram_size),
        frames=72,
        signature=lambda: _signature(mbc),
        verify=VerifySettings(frames_per_step=1, release_after_frames=1, steps=100),
    )


MBC1_SPEC = _spec(MBC1, "MBC1 ($03): 8 ROM banks incl. 0/$20 remaps, 4 RAM banks in mode 1, mode 0, RAM off",
                  ("mbc1", "rom_banking", "ram_banking", "ram_enable", "banking_mode"))
MBC3_SPEC = _spec(MBC3, "MBC3 ($13): 16 ROM banks incl. 0/$80 remaps, 4 RAM banks, RAM enable/disable",
                  ("mbc3", "rom_banking", "ram_banking", "ram_enable"))
MBC5_SPEC = _spec(MBC5, "MBC5 ($1B): 32 ROM banks incl. bank 0 and bit 8, 16 RAM banks, RAM enable/disable",
                  ("mbc5", "rom_banking", "ram_banking", "ram_enable"))
