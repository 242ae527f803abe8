"""Assembly shared by the micro-ROMs: hardware names, vectors and entry, the done protocol, routines.

Conventions (docs/microroms.md): results go to WRAM; when a ROM's work is complete it writes
``DONE_VALUE`` ($A5) to ``DONE_ADDR`` ($C0FF) and either stops for good (`finish`: IE=0, DI, HALT, which
nothing can wake) or repeats its work idempotently. The stack lives in HRAM (SP=$FFFE); the HRAM below
it from $FF80 holds the OAM DMA routine where a ROM installs one.
"""

from __future__ import annotations

from gbxcule.asm import CartridgeHeader
from gbxcule.roms.spec import RomSpec

DONE_ADDR = 0xC0FF
DONE_VALUE = 0xA5
STACK_TOP = 0xFFFE
HRAM_DMA = 0xFF80

# Interrupt flag / enable bits.
INT_VBLANK, INT_STAT, INT_TIMER, INT_SERIAL, INT_JOYPAD = 0x01, 0x02, 0x04, 0x08, 0x10

# Shared by every ROM gbxcule builds (and the tests' small ROMs).
MEMCPY = """; memcpy: copy BC (> 0) bytes from HL to DE.
memcpy:
    ld a, [hl+]
    ld [de], a
    inc de
    dec bc
    ld a, b
    or c
    jr nz, memcpy
    ret
"""

# The OAM DMA routine (source page in A): copied to HRAM and run there while the DMA blocks the bus.
DMA_ROUTINE = """; dma_code: the OAM DMA routine (source page in A), copied to HRAM and run there.
dma_code:
    ldh [rDMA], a
    ld a, 40
.wait:
    dec a
    jr nz, .wait
    ret
dma_code_end:
"""

HARDWARE = """
rJOYP EQU $FF00
rSB   EQU $FF01
rSC   EQU $FF02
rDIV  EQU $FF04
rTIMA EQU $FF05
rTMA  EQU $FF06
rTAC  EQU $FF07
rIF   EQU $FF0F
rLCDC EQU $FF40
rSTAT EQU $FF41
rSCY  EQU $FF42
rSCX  EQU $FF43
rLY   EQU $FF44
rLYC  EQU $FF45
rDMA  EQU $FF46
rBGP  EQU $FF47
rOBP0 EQU $FF48
rOBP1 EQU $FF49
rWY   EQU $FF4A
rWX   EQU $FF4B
rIE   EQU $FFFF
"""

# The done marker's write (A is clobbered).
MARK_DONE = f"""    ld a, ${DONE_VALUE:02X}
    ld [${DONE_ADDR:04X}], a"""

LIBRARY = f"""
; finish: write the done marker, then stop for good (IE=0 and DI, so nothing wakes the HALT).
finish:
{MARK_DONE}
    di
    xor a
    ldh [rIE], a
.stop:
    halt
    jr .stop

{MEMCPY}
; memset: fill BC (> 0) bytes from HL with E.
memset:
    ld a, e
    ld [hl+], a
    dec bc
    ld a, b
    or c
    jr nz, memset
    ret

; wait_vblank: return at the start of line 144 (the LCD must be on).
wait_vblank:
    ldh a, [rLY]
    cp 143
    jr nz, wait_vblank
.in143:
    ldh a, [rLY]
    cp 144
    jr nz, .in143
    ret

; lcd_off: switch the LCD off during VBlank (no-op when it is already off).
lcd_off:
    ldh a, [rLCDC]
    bit 7, a
    ret z
    call wait_vblank
    xor a
    ldh [rLCDC], a
    ret

{DMA_ROUTINE}
install_dma:
    ld hl, dma_code
    ld de, ${HRAM_DMA:04X}
    ld bc, dma_code_end - dma_code
    jp memcpy
"""


def header(title: str, cartridge_type: int = 0x00, rom_size: int = 0, ram_size: int = 0) -> CartridgeHeader:
    """A DMG-only, non-SGB header."""
    return CartridgeHeader(title=title, cartridge_type=cartridge_type, rom_size=rom_size, ram_size=ram_size)


def spec(name: str, title: str | None = None, **fields) -> RomSpec:
    """A micro-ROM's `RomSpec` with the standard header, titled `title` (default: the ROM's name)."""
    return RomSpec(name=name, header=lambda: header(title or name), **fields)


def program(body: str, vectors: dict[int, str] | None = None) -> str:
    """A whole ROM: hardware names, vectors, the entry at $0100, the shared routines from $0150, then
    `main`, which does the standard init (DI, SP=$FFFE, IE=IF=0) and runs into ``body``.

    ``vectors`` maps an RST or interrupt vector address to its code (at most 8 bytes, e.g. ``jp label``);
    interrupt vectors not given get a lone RETI. ``body`` must never run off its end (end it with
    ``jp finish`` or a loop); it may open further sections.
    """
    slots = {addr: "reti" for addr in (0x40, 0x48, 0x50, 0x58, 0x60)} | (vectors or {})
    vec = "".join(f'SECTION "vec_{addr:02X}", ROM0[${addr:04X}]\n{code}\n'
                  for addr, code in sorted(slots.items()))
    return f"""{HARDWARE}
{vec}
SECTION "entry", ROM0[$0100]
    nop
    jp main

SECTION "library", ROM0[$0150]
{LIBRARY}

SECTION "main", ROM0
main:
    di
    ld sp, ${STACK_TOP:04X}
    xor a
    ldh [rIE], a
    ldh [rIF], a
{body}
"""


def store(addr: int, regs: str) -> str:
    """Store registers (one letter each, e.g. "hl") to consecutive bytes from `addr`, through A."""
    return "\n".join(f"    ld a, {r}\n    ld [${addr + i:04X}], a" for i, r in enumerate(regs))


def done() -> dict[int, bytes]:
    """The done marker's part of a signature."""
    return {DONE_ADDR: bytes([DONE_VALUE])}


def pushed(pairs: list[tuple[int, int]]) -> bytes:
    """Memory image left by pushing (high, low) byte pairs in order: the last push at the lowest address."""
    return b"".join(bytes([lo, hi]) for hi, lo in reversed(pairs))


def db(data: bytes | list[int], per_line: int = 16) -> str:
    """`db` lines for a block of bytes."""
    data = bytes(data)
    return "\n".join("    db " + ", ".join(f"${b:02X}" for b in data[i:i + per_line])
                     for i in range(0, len(data), per_line))
