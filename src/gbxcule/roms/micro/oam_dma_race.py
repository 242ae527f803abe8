"""OAM_DMA_RACE: what the CPU does while an OAM DMA runs, from HRAM routines, LCD on.

The reference catches the DMA up at every access to FF00-FFFF (HRAM instruction fetches included) and reads
each source byte then; gbxcule copies a ROM or WRAM source lazily (kernels/bus.py `bus_access`). This ROM
makes every difference between the two visible:

- A (WRAM source, from line 66, where a sprite it copies starts): after a long HRAM wait loop it writes a
  source byte the copy has passed during the loop (OAM keeps the old byte) and one it has not reached (OAM
  gets the new one), polls STAT (the PPU's mode 3 length depends on the sprites copied so far) and reads OAM
  (0xFF while the DMA runs).
- B (ROM source): it switches the ROM bank halfway through the copy: OAM holds bank 1's bytes then bank 2's.
- C (VRAM source, mid-frame): bytes the PPU blocks read 0xFF.
- D (WRAM source started at the last visible line): the VBlank interrupt arrives during the copy; its
  handler (in ROM) increments a source byte.

OAM is copied to WRAM in VBlank after each part. Signature: part A's and B's OAM, except the bytes whose
value depends on the exact cycle (B's bank boundary), and the OAM byte A read during the copy.
"""

from __future__ import annotations

from gbxcule.roms.micro.common import HRAM_DMA, db, done, header, program
from gbxcule.roms.spec import RomSpec, VerifySettings

SOURCE = 0xC100  # WRAM source page
COPY_A, COPY_B, COPY_C, COPY_D = 0xC200, 0xC300, 0xC400, 0xC500
MISC = 0xC000  # A's OAM read during the copy, A's STAT sum, D's handler count
PATTERN = bytes((i * 5 + 3) & 0xFF for i in range(160))
BANK1 = bytes((i * 3 + 0x10) & 0xFF for i in range(160))
BANK2 = bytes((0xA0 - i * 7) & 0xFF for i in range(160))
WRITE_PASSED, WRITE_AHEAD = 0x40, 0x70  # A's source bytes written after the copy passed / before it reaches
B_KEPT = 64  # B: bytes [0, 64) surely come from bank 1 and [100, 160) from bank 2 (the switch is near 80)


def signature() -> dict[int, bytes]:
    oam_a = bytearray(PATTERN)
    oam_a[WRITE_AHEAD] = 0x44
    return done() | {COPY_A: bytes(oam_a), COPY_B: BANK1[:B_KEPT], COPY_B + 100: BANK2[100:], MISC: b"\xff"}


def _copy_oam(dest: int) -> str:
    """Copy OAM to `dest` during the next VBlank (160 bytes fit in VBlank's 4560 cycles)."""
    return f"""    call wait_vblank
    ld hl, $FE00
    ld de, ${dest:04X}
    ld bc, 160
    call memcpy"""


def _run_in_hram(label: str) -> str:
    return f"""    ld hl, {label}
    ld de, ${HRAM_DMA:04X}
    ld bc, {label}_end - {label}
    call memcpy"""


def _wait_line(ly: int) -> str:
    return f"""    call wait_vblank
.wait_ly{ly}:
    ldh a, [rLY]
    cp {ly}
    jr nz, .wait_ly{ly}"""


def source() -> str:
    return program(f"""
    ld hl, pattern
    ld de, ${SOURCE:04X}
    ld bc, 160
    call memcpy
    ldh a, [rLCDC]
    or $02  ; sprites on
    ldh [rLCDC], a
{_run_in_hram("race_a")}
{_wait_line(66)}
    call ${HRAM_DMA:04X}
{_copy_oam(COPY_A)}
    ldh a, [$F0]
    ld [${MISC:04X}], a
    ldh a, [$F1]
    ld [${MISC + 1:04X}], a
{_run_in_hram("race_b")}
    call ${HRAM_DMA:04X}
{_copy_oam(COPY_B)}
    call install_dma
{_wait_line(60)}
    ld a, $80
    call ${HRAM_DMA:04X}
{_copy_oam(COPY_C)}
    ld hl, pattern
    ld de, ${SOURCE:04X}
    ld bc, 160
    call memcpy
{_wait_line(143)}
    xor a
    ldh [rIF], a
    ld a, $01
    ldh [rIE], a
    ei
    ld a, ${SOURCE >> 8:02X}
    call ${HRAM_DMA:04X}
    di
{_copy_oam(COPY_D)}
    jp finish

; the VBlank handler: increments a WRAM source byte (part D runs it during the copy)
vblank:
    push af
    ld a, [${SOURCE + 0x60:04X}]
    inc a
    ld [${SOURCE + 0x60:04X}], a
    ld a, [${MISC + 2:04X}]
    inc a
    ld [${MISC + 2:04X}], a
    pop af
    reti

; race_a, run from HRAM: a DMA from the WRAM source page, raced by writes, STAT polls and an OAM read
race_a:
    ld a, ${SOURCE >> 8:02X}
    ldh [rDMA], a
    ld a, 20
.w1:
    dec a
    jr nz, .w1  ; about 330 cycles: some 75 bytes copied
    ld hl, ${SOURCE + WRITE_PASSED:04X}
    ld [hl], $33  ; passed: OAM keeps the old byte
    ld l, ${WRITE_AHEAD:02X}
    ld [hl], $44  ; not reached yet: OAM gets $44
    ld b, 0
    ld a, 4
.w2:
    ld c, a
    ldh a, [rSTAT]
    and 3
    add a, b
    ld b, a
    ld a, c
    dec a
    jr nz, .w2
    ld a, [$FE00]  ; about 580 cycles in, the copy still runs: $FF
    ldh [$F0], a
    ld a, b
    ldh [$F1], a
    ld a, 30
.w3:
    dec a
    jr nz, .w3
    ret
race_a_end:

; race_b, run from HRAM: a DMA from ROM $4000 that switches from bank 1 to bank 2 halfway
race_b:
    ld a, $40
    ldh [rDMA], a
    ld a, 20
.w1:
    dec a
    jr nz, .w1
    ld hl, $2000
    ld [hl], $02
    ld a, 30
.w2:
    dec a
    jr nz, .w2
    ld [hl], $01
    ret
race_b_end:

pattern:
{db(PATTERN)}

SECTION "bank1", ROMX[$4000], BANK[1]
{db(BANK1)}

SECTION "bank2", ROMX[$4000], BANK[2]
{db(BANK2)}
""", vectors={0x40: "jp vblank"})


SPEC = RomSpec(
    name="OAM_DMA_RACE",
    header=lambda: header("OAM_DMA_RACE", cartridge_type=0x01, rom_size=1),
    description="OAM DMA raced by source writes, a bank switch, STAT polls, OAM reads and an interrupt",
    covers=("oam_dma", "hram", "oam", "mbc1", "stat", "vblank_irq"),
    source=source,
    frames=80,
    signature=signature,
    verify=VerifySettings(frames_per_step=1, release_after_frames=1, steps=120),
)
