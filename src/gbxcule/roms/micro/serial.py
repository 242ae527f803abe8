"""SERIAL: sends a text over the link port with the internal clock, first polling SC bit 7, then by
the serial interrupt (HALT until it arrives), counting serial interrupts.

With no link partner each transfer shifts in $FF, so SB reads $FF afterwards. The LCD is switched off
first so IF holds the serial flag alone. Results: $C000 bytes sent, $C001 serial interrupts handled,
$C002 IF after the polled half (serial flag set, not dispatched), $C003 SC at the end; from $C100 the byte
sent for each transfer (copied from the ROM text), from $C200 SB after each transfer.
"""

from __future__ import annotations

from gbxcule.roms.micro.common import INT_SERIAL, db, done, program, spec
from gbxcule.roms.spec import VerifySettings

TEXT = b"GBXCULE SERIAL OK\n"
POLLED = 9  # bytes sent by polling; the rest by interrupt
RESULTS, SENT, RECEIVED = 0xC000, 0xC100, 0xC200
COUNT = 0xC001


def signature() -> dict[int, bytes]:
    results = bytes([len(TEXT), len(TEXT) - POLLED, 0xE0 | INT_SERIAL, 0x7F])
    return done() | {RESULTS: results, SENT: TEXT, RECEIVED: b"\xff" * len(TEXT)}


def source() -> str:
    return program(f"""
    call lcd_off
    xor a
    ld [${RESULTS:04X}], a
    ld [${COUNT:04X}], a
    ldh [rIF], a
    ld hl, text
    ld de, ${SENT:04X}
    ld bc, {len(TEXT)}
    call memcpy
    ld hl, ${SENT:04X}
    ld de, ${RECEIVED:04X}
    ld c, {POLLED}
.polled:
    ld a, [hl+]
    ldh [rSB], a
    ld a, $81
    ldh [rSC], a
.busy:
    ldh a, [rSC]
    bit 7, a
    jr nz, .busy
    call received
    dec c
    jr nz, .polled
    ldh a, [rIF]
    ld [${RESULTS + 2:04X}], a
    xor a
    ldh [rIF], a
    ld a, {INT_SERIAL}
    ldh [rIE], a
    ei
    ld c, {len(TEXT) - POLLED}
.by_irq:
    ld a, [hl+]
    ldh [rSB], a
    ld a, $81
    ldh [rSC], a
    halt
    nop
    call received
    dec c
    jr nz, .by_irq
    di
    ldh a, [rSC]
    ld [${RESULTS + 3:04X}], a
    jp finish

; received: store SB at DE++ and count the byte
received:
    ldh a, [rSB]
    ld [de], a
    inc de
    ld a, [${RESULTS:04X}]
    inc a
    ld [${RESULTS:04X}], a
    ret

serial_handler:
    push af
    ld a, [${COUNT:04X}]
    inc a
    ld [${COUNT:04X}], a
    pop af
    reti

text:
{db(TEXT)}
""", vectors={0x58: "jp serial_handler"})


SPEC = spec(
    name="SERIAL",
    description="serial text out (SB, SC=$81) by polling SC bit 7 and by the serial interrupt, counted",
    covers=("serial", "sb", "sc", "serial_interrupt", "halt"),
    source=source,
    frames=76,
    signature=signature,
    verify=VerifySettings(frames_per_step=1, release_after_frames=1, steps=120),
)
