"""Cartridge headers: parsing, validation and the tables behind them (pure Python).

The header lives at 0x0100-0x014F of every ROM (Pan Docs, "The Cartridge Header"). `load_rom` is the one
gate every backend and command uses to read a ROM file: it refuses what no backend can run with a
`RomError` whose message is one clear line. Malformed but runnable files (shorter than the header
declares, not whole 16 KiB banks, an unknown ROM size code) load with warnings instead: the bytes every
backend runs are the file padded with 0xFF to whole banks, at least two (docs/hardware.md, "Malformed ROM
files").
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from gbxcule.core.errors import GbxculeError
from gbxcule.core.pyboy_state import PYBOY_RAM_BANKS

HEADER_END = 0x150
MAX_ROM_SIZE = 8 * 1024 * 1024
ROM_BANK_SIZE = 0x4000
PAD_BYTE = 0xFF  # what the bytes past the end of a short file read as (erased flash; SameBoy pads so too)

NINTENDO_LOGO = bytes.fromhex(
    "CEED6666CC0D000B03730083000C000D0008111F8889000EDCCC6EE6DDDDD999"
    "BBBB67636E0EECCCDDDC999FBBB9333E"
)

# Cartridge type byte (0x147) -> (description, mbc kind, has ram, has battery, has rtc).
# mbc kind is None for types gbxcule cannot run.
CARTRIDGE_TYPES: dict[int, tuple[str, str | None, bool, bool, bool]] = {
    0x00: ("ROM ONLY", "none", False, False, False),
    0x01: ("MBC1", "mbc1", False, False, False),
    0x02: ("MBC1+RAM", "mbc1", True, False, False),
    0x03: ("MBC1+RAM+BATTERY", "mbc1", True, True, False),
    0x05: ("MBC2", "mbc2", True, False, False),
    0x06: ("MBC2+BATTERY", "mbc2", True, True, False),
    0x08: ("ROM+RAM", "none", True, False, False),
    0x09: ("ROM+RAM+BATTERY", "none", True, True, False),
    0x0B: ("MMM01", None, False, False, False),
    0x0C: ("MMM01+RAM", None, True, False, False),
    0x0D: ("MMM01+RAM+BATTERY", None, True, True, False),
    0x0F: ("MBC3+TIMER+BATTERY", "mbc3", False, True, True),
    0x10: ("MBC3+TIMER+RAM+BATTERY", "mbc3", True, True, True),
    0x11: ("MBC3", "mbc3", False, False, False),
    0x12: ("MBC3+RAM", "mbc3", True, False, False),
    0x13: ("MBC3+RAM+BATTERY", "mbc3", True, True, False),
    0x19: ("MBC5", "mbc5", False, False, False),
    0x1A: ("MBC5+RAM", "mbc5", True, False, False),
    0x1B: ("MBC5+RAM+BATTERY", "mbc5", True, True, False),
    0x1C: ("MBC5+RUMBLE", "mbc5", False, False, False),
    0x1D: ("MBC5+RUMBLE+RAM", "mbc5", True, False, False),
    0x1E: ("MBC5+RUMBLE+RAM+BATTERY", "mbc5", True, True, False),
    0x20: ("MBC6", None, True, True, False),
    0x22: ("MBC7+SENSOR+RUMBLE+RAM+BATTERY", None, True, True, False),
    0xFC: ("POCKET CAMERA", None, True, True, False),
    0xFD: ("BANDAI TAMA5", None, True, True, False),
    0xFE: ("HuC3", None, True, True, True),
    0xFF: ("HuC1+RAM+BATTERY", None, True, True, False),
}

# RAM size byte (0x149) -> bytes of cartridge RAM.
RAM_SIZES: dict[int, int] = {0x00: 0, 0x01: 2 * 1024, 0x02: 8 * 1024, 0x03: 32 * 1024,
                             0x04: 128 * 1024, 0x05: 64 * 1024}
MBC2_RAM_SIZE = 512  # MBC2's built-in 512 x 4-bit RAM


class RomError(GbxculeError):
    """A ROM file gbxcule cannot run."""


def rom_size_from_code(code: int) -> int | None:
    """Bytes declared by the ROM size byte (0x148), or None for an unknown code."""
    return (32 * 1024) << code if 0 <= code <= 8 else None


def header_checksum(rom: bytes) -> int:
    """The checksum the boot ROM verifies: x = x - byte - 1 over 0x134..0x14C, low 8 bits."""
    x = 0
    for b in rom[0x134:0x14D]:
        x = (x - b - 1) & 0xFF
    return x


def global_checksum(rom: bytes) -> int:
    """16-bit sum of every ROM byte except the two checksum bytes at 0x14E-0x14F."""
    return (sum(rom) - rom[0x14E] - rom[0x14F]) & 0xFFFF


@dataclass(frozen=True)
class CartridgeInfo:
    """What the header of a ROM says, and whether the file agrees with it."""

    title: str
    cgb_flag: int
    cgb_mode: str  # "dmg", "cgb-enhanced" or "cgb-only"
    sgb_flag: int
    cartridge_type: int
    cartridge_name: str
    mbc: str | None
    has_ram: bool
    has_battery: bool
    has_rtc: bool
    rom_size_code: int
    rom_size: int | None
    ram_size_code: int
    ram_size: int | None
    file_size: int
    header_checksum: int
    header_checksum_valid: bool
    global_checksum: int
    global_checksum_valid: bool
    logo_valid: bool
    sha1: str  # of the file as given, before any padding
    warnings: tuple[str, ...] = ()  # what is malformed but runnable about the file, one line each

    def to_dict(self) -> dict:
        return asdict(self)


def padded_size(file_size: int) -> int:
    """Bytes the emulator runs for a file of `file_size`: whole 16 KiB banks, at least two."""
    return max(2, -(-file_size // ROM_BANK_SIZE)) * ROM_BANK_SIZE


def rom_mirror(data: bytes) -> bytes:
    """The ROM as the kernels hold it: its banks repeated up to the next power of two in length, so that byte
    i of the result is byte i mod len(data) of the ROM and a bank number is kept in range by one mask."""
    size = 1 << max(0, len(data) - 1).bit_length()
    return (bytes(data) * -(-size // max(1, len(data))))[:size]


def rom_words(mirrored: bytes) -> np.ndarray:
    """uint32 [len]: word i holds bytes i, i+1, i+2, i+3 of `mirrored` (wrapping at its end), byte i in the
    low byte. The kernels keep the ROM this way, so an instruction's bytes come in one load."""
    b = np.frombuffer(mirrored, dtype=np.uint8).astype(np.uint32)
    return b | (np.roll(b, -1) << 8) | (np.roll(b, -2) << 16) | (np.roll(b, -3) << 24)


def size_warnings(file_size: int, declared: int | None, code: int) -> tuple[str, ...]:
    """One line per way the file's length is malformed but runnable (empty when it is well formed)."""
    out = []
    padded = padded_size(file_size)
    banks = padded // ROM_BANK_SIZE
    if padded != file_size:
        why = ("not a whole number of 16 KiB banks" if file_size % ROM_BANK_SIZE
               else "less than the two banks a cartridge maps")
        out.append(f"ROM file has {file_size} bytes, {why}: padded with $FF to {padded} bytes, "
                   "which every backend runs (PyBoy included)")
    if declared is None:
        out.append(f"unknown ROM size code ${code:02X} in the header: the file's {banks} banks are mapped "
                   "(as PyBoy does)")
    elif declared != padded:
        more = (f"bank numbers wrap at the {banks} banks present" if padded < declared
                else f"all {banks} banks are mapped")
        out.append(f"the header declares {declared} bytes of ROM, the file has {file_size}: {more} "
                   "(as PyBoy does)")
    return tuple(out)


def parse_header(rom: bytes) -> CartridgeInfo:
    """Describe a ROM from its header, with warnings about its length. Needs at least 0x150 bytes."""
    if not rom:
        raise RomError("ROM file is empty")
    if len(rom) < HEADER_END:
        raise RomError(f"ROM is truncated: {len(rom)} bytes, a cartridge header needs at least {HEADER_END}")
    cgb = rom[0x143]
    title_end = 0x143 if cgb & 0x80 else 0x144
    title = bytes(rom[0x134:title_end]).split(b"\0", 1)[0].decode("ascii", "replace")
    ctype = rom[0x147]
    name, mbc, has_ram, battery, rtc = CARTRIDGE_TYPES.get(ctype, (f"UNKNOWN ${ctype:02X}", None, False,
                                                                   False, False))
    ram_size = RAM_SIZES.get(rom[0x149])
    if mbc == "mbc2":
        ram_size = MBC2_RAM_SIZE
    elif not has_ram and ram_size is not None:
        ram_size = 0
    stored_global = (rom[0x14E] << 8) | rom[0x14F]
    return CartridgeInfo(
        title=title,
        cgb_flag=cgb,
        cgb_mode="cgb-only" if cgb == 0xC0 else "cgb-enhanced" if cgb & 0x80 else "dmg",
        sgb_flag=rom[0x146],
        cartridge_type=ctype,
        cartridge_name=name,
        mbc=mbc,
        has_ram=has_ram,
        has_battery=battery,
        has_rtc=rtc,
        rom_size_code=rom[0x148],
        rom_size=rom_size_from_code(rom[0x148]),
        ram_size_code=rom[0x149],
        ram_size=ram_size,
        file_size=len(rom),
        header_checksum=rom[0x14D],
        header_checksum_valid=header_checksum(rom) == rom[0x14D],
        global_checksum=stored_global,
        global_checksum_valid=global_checksum(rom) == stored_global,
        logo_valid=bytes(rom[0x104:0x134]) == NINTENDO_LOGO,
        sha1=hashlib.sha1(rom).hexdigest(),
        warnings=size_warnings(len(rom), rom_size_from_code(rom[0x148]), rom[0x148]),
    )


def check_runnable(info: CartridgeInfo) -> None:
    """Raise RomError unless a backend can run a ROM with this header."""
    if info.mbc is None:
        raise RomError(f"unsupported cartridge type ${info.cartridge_type:02X} ({info.cartridge_name}); "
                       "gbxcule runs ROM ONLY, ROM+RAM, MBC1, MBC2, MBC3 and MBC5 cartridges")
    if info.ram_size is None:
        raise RomError(f"unknown RAM size code ${info.ram_size_code:02X} in the header")
    if not info.header_checksum_valid:
        raise RomError(f"bad header checksum: header says ${info.header_checksum:02X}, bytes 0x134-0x14C "
                       "give a different value (a real Game Boy refuses to boot it)")


@dataclass(frozen=True)
class Rom:
    """A validated ROM image and its header. `data` is what the emulators run: the file, padded with 0xFF
    to whole 16 KiB banks (at least two) when it is short; `file_bytes` is the file as given."""

    data: bytes
    info: CartridgeInfo
    path: str

    @property
    def file_bytes(self) -> bytes:
        return self.data[:self.info.file_size]

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.info.warnings

    @property
    def num_banks(self) -> int:
        return max(2, len(self.data) // ROM_BANK_SIZE)


def read_rom_bytes(path: str | Path) -> bytes:
    """Read a ROM file, refusing missing, empty and oversized files with one clear line."""
    p = Path(path)
    if not p.is_file():
        raise RomError(f"ROM not found: {p}")
    size = p.stat().st_size
    if size > MAX_ROM_SIZE:
        raise RomError(f"ROM is oversized: {p} has {size} bytes, a DMG cartridge holds at most {MAX_ROM_SIZE}")
    return p.read_bytes()


def load_rom(path: str | Path) -> Rom:
    """Read and validate a ROM file; the only way backends and commands get ROM bytes."""
    data = read_rom_bytes(path)
    info = parse_header(data)
    check_runnable(info)
    data += bytes([PAD_BYTE]) * (padded_size(len(data)) - len(data))
    return Rom(data=data, info=info, path=str(path))


MBC_KINDS = {"none": 0, "mbc1": 1, "mbc2": 2, "mbc3": 3, "mbc5": 5}  # the kernels' `Mem.mbc` codes


@dataclass(frozen=True)
class CartConfig:
    """How the kernels run a cartridge: MBC code (`MBC_KINDS`; 30 for MBC30), 16 KiB ROM banks, 8 KiB RAM
    banks as PyBoy allocates them, RTC, always-enabled RAM (ROM+RAM carts), MBC1 multicart wiring."""

    mbc: int
    rom_banks: int
    ram_banks: int
    has_rtc: bool
    sram: bool
    mbc1_multicart: bool


def cart_config(rom: Rom) -> CartConfig:
    info = rom.info
    banks = len(rom.data) // ROM_BANK_SIZE
    if len(rom.data) % ROM_BANK_SIZE:
        raise GbxculeError(f"ROM size {len(rom.data)} is not a whole number of 16 KiB banks")
    ram_banks = PYBOY_RAM_BANKS[info.ram_size_code]
    mbc = MBC_KINDS[info.mbc or "none"]
    if mbc == 3 and (ram_banks > 4 or banks > 128):
        mbc = 30
    multicart = mbc == 1 and banks == 64 and all(
        rom.data[b * 0x4000 + 0x104:b * 0x4000 + 0x134] == rom.data[0x104:0x134] for b in range(1, banks))
    sram = mbc == 0 and info.has_ram
    return CartConfig(mbc, banks, ram_banks, info.has_rtc, sram, multicart)
