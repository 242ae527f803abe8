"""INTERRUPTS: dispatch of all five sources, EI delay, DI, HALT wake-up with IME=1 and IME=0, priority.

Every vector runs a common handler that counts the dispatch per source, keeps B (the main code's
marker at that moment) and appends (``$10 | source``, LY) to a log page; the main code appends its own
marks ($F1...) to the same log, so the log records the exact order. The VBlank and STAT (LYC) tests run
with the LCD on; the rest run with it off, so no PPU event can raise a flag behind the test's back.
"""

from __future__ import annotations

from gbxcule.roms.micro.common import (
    INT_JOYPAD,
    INT_SERIAL,
    INT_STAT,
    INT_TIMER,
    INT_VBLANK,
    done,
    program,
    spec,
)
from gbxcule.roms.spec import VerifySettings

RESULTS = 0xC000  # 10 read-back values
COUNTS = 0xC010  # dispatches per source (5)
LAST_B = 0xC018  # B at the last dispatch, per source (5)
LOG = 0xC100  # one page
LOG_PTR = 0xFF80  # HRAM: the log's next free low byte
LYC_LINE = 64
VBLANK, STAT, TIMER, SERIAL, JOYPAD = range(5)


def _expected() -> tuple[bytes, list[int], list[int], list[int]]:
    """(results, log, counts, last B), following the test sequence in `source`."""
    log: list[int] = []
    counts, last_b = [0] * 5, [0] * 5

    def irq(src: int, ly: int, b: int) -> None:
        log.extend([0x10 | src, ly])
        counts[src] += 1
        last_b[src] = b

    log.append(0xF1)
    irq(VBLANK, 144, 0x11)
    log.append(0xF2)
    irq(VBLANK, 144, 0x12)
    log.append(0xF3)
    irq(STAT, LYC_LINE, 0x21)
    log.append(0xF4)
    # LCD off from here: LY reads 0
    irq(TIMER, 0, 0x31)
    log.append(0xF5)
    irq(SERIAL, 0, 0x41)
    log.append(0xF6)
    irq(TIMER, 0, 1)  # EI lets exactly one more instruction (INC B) run first
    log += [0xF7, 0xF8, 0xF9]  # EI;DI: no dispatch.  HALT with IME=0: wakes, no dispatch
    for src in range(5):  # all five pending at once, in priority order, RETI chaining them
        irq(src, 0, 0x51)
    log.append(0xFA)
    irq(TIMER, 0, 0x61)  # IE masks VBlank, STAT and serial
    irq(JOYPAD, 0, 0x61)
    log.append(0xFB)
    results = bytes([0x1F, 0xEA, 0xE0, 0xFF, 0x7F, 2, 0xE0 | INT_TIMER, 0xE0 | INT_TIMER, 0xE0,
                     0xE0 | INT_VBLANK | INT_STAT | INT_SERIAL])
    return results, log, counts, last_b


def signature() -> dict[int, bytes]:
    results, log, counts, last_b = _expected()
    return done() | {RESULTS: results, COUNTS: bytes(counts), LAST_B: bytes(last_b), LOG: bytes(log),
                     LOG_PTR: bytes([len(log)])}


def _mark(code: int) -> str:
    return f"    ld a, ${code:02X}\n    call log_a"


def source() -> str:
    r = RESULTS
    body = f"""
    xor a
    ldh [${LOG_PTR & 0xFF:02X}], a
    ldh [rSTAT], a
    ld hl, ${RESULTS:04X}
    ld bc, $0030
    ld e, 0
    call memset
    ld hl, ${LOG:04X}
    ld bc, $0100
    call memset

    ; VBlank: start at line 144 with the flag cleared; HALT with IME=1 wakes into the handler
    call wait_vblank
    xor a
    ldh [rIF], a
    ld a, {INT_VBLANK}
    ldh [rIE], a
    ld b, $11
    ei
    nop
{_mark(0xF1)}
    halt
    nop
{_mark(0xF2)}
    ld b, $12
    halt
    nop
{_mark(0xF3)}

    ; STAT on LY=LYC. IF is cleared after the STAT write (a DMG writes STAT as $FF for a moment,
    ; which can raise a STAT flag in VBlank); IE enables STAT only after that.
    di
    ld a, {LYC_LINE}
    ldh [rLYC], a
    ld a, $40
    ldh [rSTAT], a
    xor a
    ldh [rIF], a
    ld a, {INT_STAT}
    ldh [rIE], a
    ld b, $21
    ei
    nop
    halt
    nop
{_mark(0xF4)}
    di
    xor a
    ldh [rSTAT], a
    ldh [rIE], a
    call lcd_off

    ; IE and IF read-back (IF's top 3 bits read as 1)
    ld a, $1F
    ldh [rIE], a
    ldh a, [rIE]
    ld [${r:04X}], a
    xor a
    ldh [rIE], a
    ld a, $0A
    ldh [rIF], a
    ldh a, [rIF]
    ld [${r + 1:04X}], a
    xor a
    ldh [rIF], a
    ldh a, [rIF]
    ld [${r + 2:04X}], a

    ; timer: TIMA $F0 at 16 cycles per tick overflows long after the HALT
    xor a
    ldh [rTAC], a
    ldh [rTMA], a
    ld a, $F0
    ldh [rTIMA], a
    ld a, {INT_TIMER}
    ldh [rIE], a
    ld b, $31
    ld a, 5
    ldh [rTAC], a
    ei
    nop
    halt
    nop
{_mark(0xF5)}
    di
    xor a
    ldh [rTAC], a

    ; serial, internal clock: the transfer ends with the serial interrupt
    xor a
    ldh [rIF], a
    ld a, {INT_SERIAL}
    ldh [rIE], a
    ld a, $5A
    ldh [rSB], a
    ld b, $41
    ld a, $81
    ldh [rSC], a
    ei
    nop
    halt
    nop
{_mark(0xF6)}
    di
    ldh a, [rSB]
    ld [${r + 3:04X}], a
    ldh a, [rSC]
    ld [${r + 4:04X}], a

    ; EI delay: with the timer flag already pending, one instruction runs before the dispatch
    ld a, {INT_TIMER}
    ldh [rIE], a
    ldh [rIF], a
    ld b, 0
    ei
    inc b
    inc b
    ld a, b
    ld [${r + 5:04X}], a
{_mark(0xF7)}
    di

    ; EI then DI: no dispatch, the flag stays set
    ld a, {INT_TIMER}
    ldh [rIF], a
    ei
    di
{_mark(0xF8)}
    ldh a, [rIF]
    ld [${r + 6:04X}], a

    ; HALT with IME=0 and nothing pending: wakes on the timer flag, no dispatch, runs on
    xor a
    ldh [rIF], a
    ld a, $F0
    ldh [rTIMA], a
    ld a, 5
    ldh [rTAC], a
    halt
    nop
{_mark(0xF9)}
    ldh a, [rIF]
    ld [${r + 7:04X}], a
    xor a
    ldh [rTAC], a

    ; all five pending at once: dispatched in priority order, each RETI letting the next in
    ld a, $1F
    ldh [rIE], a
    ld b, $51
    ldh [rIF], a
    ei
    nop
{_mark(0xFA)}
    di
    ldh a, [rIF]
    ld [${r + 8:04X}], a

    ; all five pending, IE selecting timer and joypad: only those two dispatch
    ld a, {INT_TIMER | INT_JOYPAD}
    ldh [rIE], a
    ld b, $61
    ld a, $1F
    ldh [rIF], a
    ei
    nop
{_mark(0xFB)}
    di
    ldh a, [rIF]
    ld [${r + 9:04X}], a
    xor a
    ldh [rIF], a
    jp finish

; log_a: append A to the log (keeps BC, DE, HL)
log_a:
    push hl
    push af
    ld h, ${LOG >> 8:02X}
    ldh a, [${LOG_PTR & 0xFF:02X}]
    ld l, a
    inc a
    ldh [${LOG_PTR & 0xFF:02X}], a
    pop af
    ld [hl], a
    pop hl
    ret

; irq_common: A = source (0-4), AF pushed by the vector
irq_common:
    push hl
    push af
    add a, ${COUNTS & 0xFF:02X}
    ld l, a
    ld h, ${COUNTS >> 8:02X}
    inc [hl]
    ld a, l
    add a, ${LAST_B - COUNTS:02X}
    ld l, a
    ld [hl], b
    pop af
    or $10
    call log_a
    ldh a, [rLY]
    call log_a
    pop hl
    pop af
    reti
"""
    vectors = {0x40 + 8 * src: f"push af\n    ld a, {src}\n    jp irq_common" for src in range(5)}
    return program(body, vectors=vectors)


SPEC = spec(
    name="INTERRUPTS",
    description="VBlank/STAT/timer/serial/joypad dispatch, EI delay, DI, HALT with IME=1/0, priority, IF/IE",
    covers=("interrupts", "vblank", "stat_lyc", "timer_interrupt", "serial_interrupt", "ei_delay", "di",
            "halt", "reti", "priority", "if_ie"),
    source=source,
    frames=76,
    signature=signature,
    verify=VerifySettings(frames_per_step=1, release_after_frames=1, steps=120),
)
