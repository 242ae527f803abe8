"""IDLE_LOOPS: wait loops that poll memory, each shape gbxcule runs many rounds of at once (kernels/idle.py).

Every loop waits for something an interrupt handler or the PPU changes, and right after it the ROM records
DIV and LY, so lockstep against the reference catches any skipped round too many or too few:

1. a WRAM flag the VBlank handler sets: `ld a,[a16] / and a / jr z`, six times; the interrupt lands at every
   point of the loop, including between the read and the test (the handler returns to a stale A);
2. an HRAM counter the timer handler increments: `ldh a,[a8] / cp 3 / jr nz`;
3. `ld a,[hl] / or a / jr z` and 4. `ld a,[de] / cp 2 / jr c` on a WRAM copy of that counter;
5. a fixed point that needs the carry: `ld a,[a16] / adc a,$FF / jr nz` (A=1, carry in and out set) until the
   timer handler clears the byte;
6. LY: `ldh a,[rLY] / cp 100 / jr c`, interrupts off;
7. STAT: `ldh a,[rSTAT] / and 3 / jr nz` (until HBlank), then `jr z` (until it ends), three times;
8. copy loops that poll `ldh a,[rSTAT] / and 2 / jr nz` before every byte (as Corrib75 copies to VRAM): 160
   bytes into OAM, then, with sprites on and the timer interrupt landing in them, 512 bytes into VRAM; then
   `ldh a,[rLY] / cp 140 / jr c` with those sprites on the lines (mode 3's length varies by line).

Signature: the handlers' counts and the loops' last values (the DIV/LY records are checked by lockstep).
"""

from __future__ import annotations

from gbxcule.roms.micro.common import INT_TIMER, INT_VBLANK, db, done, program, spec
from gbxcule.roms.spec import VerifySettings

RECORDS = 0xC000  # DIV, LY after every loop
FLAG, VCOUNT, COPY, CARRY_X = 0xC080, 0xC081, 0xC082, 0xC083
TCOUNT = 0xFF90  # HRAM: timer interrupts since the last reset
SUMMARY = 0xC0F0  # VCOUNT, COPY, TCOUNT and part 5's A at the end


def _record() -> str:
    return """    ldh a, [rDIV]
    ld [hl+], a
    ldh a, [rLY]
    ld [hl+], a"""


def _timer_on() -> str:
    """Reset the timer counter and start a timer interrupt every 16 TIMA ticks of 256 cycles."""
    return f"""    di
    xor a
    ldh [${TCOUNT & 0xFF:02X}], a
    ld [${COPY:04X}], a
    ld a, $F0
    ldh [rTMA], a
    ldh [rTIMA], a
    ld a, $07
    ldh [rTAC], a
    ld a, {INT_TIMER}
    ldh [rIE], a
    xor a
    ldh [rIF], a
    ei"""


def _oam_source() -> bytes:
    """512 bytes: 40 OAM entries (some sprites sharing lines or X values, some off screen), then a pattern."""
    oam = []
    for i in range(40):
        y = (16 + (i * 37) % 150) if i % 7 else 0  # every 7th entry off screen (Y 0)
        x = (i * 29) % 176  # some X values off screen (168 and up), some repeated
        oam += [y, x, i, 0]
    return bytes(oam + [(i * 13 + 5) & 0xFF for i in range(512 - 160)])


def signature() -> dict[int, bytes]:
    return done() | {SUMMARY: bytes([6, 3, 3, 0])}


def source() -> str:
    stat_waits = "\n".join(f""".hb{i}:
    ldh a, [rSTAT]
    and 3
    jr nz, .hb{i}
{_record()}
.nb{i}:
    ldh a, [rSTAT]
    and 3
    jr z, .nb{i}
{_record()}""" for i in range(3))
    return program(f"""
    ld hl, ${RECORDS:04X}
    ; 1: a WRAM flag set by the VBlank handler
    xor a
    ld [${VCOUNT:04X}], a
    ld a, {INT_VBLANK}
    ldh [rIE], a
    xor a
    ldh [rIF], a
    ei
    ld b, 6
.frame:
    xor a
    ld [${FLAG:04X}], a
.w1:
    ld a, [${FLAG:04X}]
    and a
    jr z, .w1
{_record()}
    dec b
    jr nz, .frame
    ; 2: an HRAM counter the timer handler increments
{_timer_on()}
.w2:
    ldh a, [${TCOUNT & 0xFF:02X}]
    cp 3
    jr nz, .w2
{_record()}
    ; 3 and 4: its WRAM copy, through HL and DE
{_timer_on()}
    push hl
    ld hl, ${COPY:04X}
.w3:
    ld a, [hl]
    or a
    jr z, .w3
    pop hl
{_record()}
    ld de, ${COPY:04X}
.w4:
    ld a, [de]
    cp 2
    jr c, .w4
{_record()}
    ; 5: a fixed point through the carry, until the timer handler clears the byte
    ld a, 1
    ld [${CARRY_X:04X}], a
    scf
.w5:
    ld a, [${CARRY_X:04X}]
    adc a, $FF
    jr nz, .w5
    ld [${SUMMARY + 3:04X}], a
{_record()}
    ; 6 and 7: LY and STAT, interrupts off
    di
    xor a
    ldh [rTAC], a
.w6:
    ldh a, [rLY]
    cp 100
    jr c, .w6
{_record()}
{stat_waits}
    ld a, [${VCOUNT:04X}]
    ld [${SUMMARY:04X}], a
    ld a, [${COPY:04X}]
    ld [${SUMMARY + 1:04X}], a
    ldh a, [${TCOUNT & 0xFF:02X}]
    ld [${SUMMARY + 2:04X}], a
    ; 8: copy loops polling STAT before every byte
    push hl
    ld hl, oam_src
    ld de, $FE00
    ld b, 160
.c8a:
    ldh a, [rSTAT]
    and 2
    jr nz, .c8a
    ld a, [hl+]
    ld [de], a
    inc de
    dec b
    jr nz, .c8a
    ldh a, [rLCDC]
    or 2
    ldh [rLCDC], a
{_timer_on()}
    ld hl, oam_src
    ld de, $8800
    ld c, 2
.c8o:
    ld b, 0
.c8b:
    ldh a, [rSTAT]
    and 2
    jr nz, .c8b
    ld a, [hl+]
    ld [de], a
    inc de
    dec b
    jr nz, .c8b
    dec c
    jr nz, .c8o
    di
    pop hl
{_record()}
.w8:
    ldh a, [rLY]
    cp 140
    jr c, .w8
{_record()}
    jp finish

vblank:
    push af
    ld a, [${FLAG:04X}]
    inc a
    ld [${FLAG:04X}], a
    ld a, [${VCOUNT:04X}]
    inc a
    ld [${VCOUNT:04X}], a
    pop af
    reti

oam_src:  ; 40 sprites (Y, X, tile, flags) spread over the lines and X fine offsets, then more bytes
{db(_oam_source())}

timer:
    push af
    ldh a, [${TCOUNT & 0xFF:02X}]
    inc a
    ldh [${TCOUNT & 0xFF:02X}], a
    ld [${COPY:04X}], a
    xor a
    ld [${CARRY_X:04X}], a
    pop af
    reti
""", vectors={0x40: "jp vblank", 0x50: "jp timer"})


SPEC = spec(
    name="IDLE_LOOPS",
    description="wait loops polling WRAM, HRAM, LY and STAT, ended by VBlank and timer interrupts or the PPU",
    covers=("idle_loops", "vblank_irq", "timer_interrupt", "ly", "stat", "hram", "flags"),
    source=source,
    frames=80,
    signature=signature,
    verify=VerifySettings(frames_per_step=1, release_after_frames=1, steps=120),
)
