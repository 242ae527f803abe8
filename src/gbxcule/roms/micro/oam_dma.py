"""OAM_DMA: OAM DMA from WRAM (LCD on) and from ROM (LCD off), run from a routine copied to HRAM.

The WRAM source is filled with a pattern and copied at the start of a VBlank; OAM is read back in the
next VBlanks (80 bytes each, well inside the 4560 cycles of VBlank) into $C200. The LCD is then switched
off, a ROM page is copied and read back into $C300, and the CPU overwrites OAM's last 4 bytes. Signature:
both read-backs, the final OAM, the routine in HRAM.
"""

from __future__ import annotations

from gbxcule.roms.micro.common import HRAM_DMA, db, done, program, spec
from gbxcule.roms.spec import VerifySettings

WRAM_SOURCE = 0xC100
COPY1, COPY2 = 0xC200, 0xC300
ROM_SOURCE = 0x3E00  # page-aligned
OAM = 0xFE00
WRAM_PATTERN = bytes((i * 7 + 1) & 0xFF for i in range(160))
ROM_PATTERN = bytes((0xF0 - i * 3) & 0xFF ^ (i >> 3) for i in range(160))
CPU_TAIL = bytes([0xDE, 0xAD, 0xBE, 0xEF])
# The DMA routine as encoded in HRAM: ldh [$46],a / ld a,40 / dec a / jr nz,-3 / ret
DMA_ROUTINE = bytes([0xE0, 0x46, 0x3E, 40, 0x3D, 0x20, 0xFD, 0xC9])


def signature() -> dict[int, bytes]:
    return done() | {COPY1: WRAM_PATTERN, COPY2: ROM_PATTERN, OAM: ROM_PATTERN[:156] + CPU_TAIL,
                     HRAM_DMA: DMA_ROUTINE}


def _read_oam(first: int) -> str:
    """Copy 80 OAM bytes from `first` to COPY1 during a fresh VBlank."""
    return f"""    call wait_vblank
    ld hl, ${OAM + first:04X}
    ld de, ${COPY1 + first:04X}
    call copy80"""


def source() -> str:
    tail = "\n".join(f"    ld [hl], ${b:02X}\n    inc l" for b in CPU_TAIL)
    return program(f"""
    call install_dma
    ld hl, ${WRAM_SOURCE:04X}
    ld b, 160
    ld a, 1
.fill:
    ld [hl+], a
    add a, 7
    dec b
    jr nz, .fill
    call wait_vblank
    ld a, ${WRAM_SOURCE >> 8:02X}
    call ${HRAM_DMA:04X}
{_read_oam(0)}
{_read_oam(80)}
    call lcd_off
    ld a, ${ROM_SOURCE >> 8:02X}
    call ${HRAM_DMA:04X}
    ld hl, ${OAM:04X}
    ld de, ${COPY2:04X}
    ld bc, 160
    call memcpy
    ld hl, ${OAM + 156:04X}
{tail}
    jp finish

; copy80: 80 bytes from HL to DE (DE's low byte must not wrap)
copy80:
    ld b, 80
.loop:
    ld a, [hl+]
    ld [de], a
    inc e
    dec b
    jr nz, .loop
    ret

SECTION "rom_source", ROM0[${ROM_SOURCE:04X}]
{db(ROM_PATTERN)}
""")


SPEC = spec(
    name="OAM_DMA",
    description="OAM DMA from WRAM and ROM via an HRAM routine; OAM read back in VBlank / with the LCD off",
    covers=("oam_dma", "hram", "oam", "vblank_timing", "lcd_off"),
    source=source,
    frames=76,
    signature=signature,
    verify=VerifySettings(frames_per_step=1, release_after_frames=1, steps=120),
)
