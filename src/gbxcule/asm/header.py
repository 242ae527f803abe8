"""Building the cartridge header (0x104-0x14F) of an assembled ROM.

The logo bytes and the checksum formulas come from `gbxcule.core.cartridge`, which also reads headers.
"""

from __future__ import annotations

from dataclasses import dataclass

from gbxcule.asm.errors import AsmError
from gbxcule.core.cartridge import NINTENDO_LOGO, global_checksum, header_checksum, rom_size_from_code

HEADER_START = 0x104
HEADER_END = 0x150


def _declared_rom_size(code: int) -> int:
    size = rom_size_from_code(code)
    if size is None:
        raise AsmError(f"cartridge header: ROM size code {code} is not 0-8")
    return size


@dataclass(frozen=True)
class CartridgeHeader:
    """The header fields a program declares; checksums and the logo are filled in by the assembler.

    ``title`` may hold 16 ASCII characters, 15 when ``cgb_flag`` is set (it shares byte 0x143) and 11
    when a 4-character ``manufacturer`` code is given. ``new_licensee`` is two ASCII characters (or empty
    for two zero bytes); it counts when ``old_licensee`` is 0x33. ``rom_size`` is the code at 0x148
    (32 KiB << code) and fixes the size of the output ROM.
    """

    title: str = ""
    manufacturer: str = ""
    cgb_flag: int = 0x00
    new_licensee: str = "00"
    sgb_flag: int = 0x00
    cartridge_type: int = 0x00
    rom_size: int = 0x00
    ram_size: int = 0x00
    destination: int = 0x01
    old_licensee: int = 0x33
    version: int = 0x00

    @property
    def rom_bytes(self) -> int:
        """Size of the ROM this header declares."""
        return _declared_rom_size(self.rom_size)

    def to_bytes(self) -> bytes:
        """Bytes 0x104-0x14C (logo through version), without the checksums."""
        max_title = 11 if self.manufacturer else 15 if self.cgb_flag else 16
        for field, text, sizes, allowed in (("title", self.title, range(max_title + 1), f"up to {max_title}"),
                                            ("manufacturer", self.manufacturer, (0, 4), "0 or 4"),
                                            ("new_licensee", self.new_licensee, (0, 2), "0 or 2")):
            if not text.isascii() or len(text) not in sizes:
                raise AsmError(f"cartridge header: {field} {text!r} must be {allowed} ASCII characters")
        for field in ("cgb_flag", "sgb_flag", "cartridge_type", "ram_size", "destination", "old_licensee",
                      "version"):
            if not 0 <= getattr(self, field) <= 0xFF:
                raise AsmError(f"cartridge header: {field} must be a byte, got {getattr(self, field)}")
        _declared_rom_size(self.rom_size)
        out = bytearray(0x14D - HEADER_START)
        out[0:48] = NINTENDO_LOGO

        def put(addr: int, data: bytes) -> None:
            out[addr - HEADER_START:addr - HEADER_START + len(data)] = data

        put(0x134, self.title.encode("ascii"))
        if self.manufacturer:
            put(0x13F, self.manufacturer.encode("ascii"))
        if self.cgb_flag:
            put(0x143, bytes([self.cgb_flag]))
        put(0x144, self.new_licensee.encode("ascii"))
        put(0x146, bytes([self.sgb_flag, self.cartridge_type, self.rom_size, self.ram_size, self.destination,
                          self.old_licensee, self.version]))
        return bytes(out)


def write_header(rom: bytearray, header: CartridgeHeader) -> None:
    """Write the header fields, the logo and both checksums into a complete ROM image."""
    rom[HEADER_START:0x14D] = header.to_bytes()
    rom[0x14D] = header_checksum(bytes(rom[:HEADER_END]))
    total = global_checksum(bytes(rom))
    rom[0x14E] = total >> 8
    rom[0x14F] = total & 0xFF
