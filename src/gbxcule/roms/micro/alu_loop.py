"""ALU_LOOP (benchmark): an ALU-heavy loop, 8/16-bit arithmetic, logic, shifts and flags, forever.

Each pass starts from the same registers, runs ITERATIONS iterations, writes the registers and F to
RESULTS and the done marker, and starts over: the signature is fixed once first written while the CPU
never idles.
"""

from __future__ import annotations

from gbxcule.roms.micro import model
from gbxcule.roms.micro.common import MARK_DONE, done, program, spec, store
from gbxcule.roms.micro.model import FC
from gbxcule.roms.spec import VerifySettings

RESULTS = 0xC000  # H L D E C A F
ITERATIONS = 256
INIT = {"hl": 0x1D0F, "de": 0x2B71, "c": 0x5A}


def _model() -> bytes:
    """One pass of the loop below, instruction by instruction."""
    h, l = INIT["hl"] >> 8, INIT["hl"] & 0xFF
    d, e = INIT["de"] >> 8, INIT["de"] & 0xFF
    c, f, b = INIT["c"], 0, ITERATIONS % 256
    for _ in range(ITERATIONS):
        a, f = model.alu8("add", c, e, f)
        a, f = model.alu8("adc", a, d, f)
        c = a
        a, f = model.alu8("xor", a, h, f)
        a, f = model.rot_a("rlc", a, f)
        d = a
        a, f = model.alu8("sub", a, l, f)
        a, f = model.alu8("sbc", a, b, f)
        a, f = model.alu8("and", a, 0xF7, f)
        a, f = model.alu8("or", a, e, f)
        a, f = model.rot_a("rr", a, f)
        e = a
        a, f = model.cpl(a, f)
        a, f = model.inc8(a, f)
        _, f = model.alu8("cp", a, c, f)
        if f & FC:  # JR NC skips the DEC
            d, f = model.dec8(d, f)
        hl, f = model.add16(h << 8 | l, d << 8 | e, f)
        h, l = hl >> 8, hl & 0xFF
        a, f = model.daa(a, f)
        a, f = model.cb_shift("swap", a, f)
        a, f = model.cb_shift("srl", a, f)
        l, f = model.cb_shift("rl", l, f)
        h, f = model.cb_shift("sra", h, f)
        e, f = model.cb_shift("rrc", e, f)
        hl, de = ((h << 8 | l) + 1) & 0xFFFF, ((d << 8 | e) - 1) & 0xFFFF
        h, l, d, e = hl >> 8, hl & 0xFF, de >> 8, de & 0xFF
        a, f = model.alu8("xor", a, c, f)
        c = a
        b, f = model.dec8(b, f)
    return bytes([h, l, d, e, c, a, f])


def signature() -> dict[int, bytes]:
    return done() | {RESULTS: _model()}


def source() -> str:
    return program(f"""
pass:
    ld hl, ${INIT["hl"]:04X}
    ld de, ${INIT["de"]:04X}
    ld c, ${INIT["c"]:02X}
    ld b, {ITERATIONS % 256}
.loop:
    ld a, c
    add a, e
    adc a, d
    ld c, a
    xor h
    rlca
    ld d, a
    sub l
    sbc a, b
    and $F7
    or e
    rra
    ld e, a
    cpl
    inc a
    cp c
    jr nc, .skip
    dec d
.skip:
    add hl, de
    daa
    swap a
    srl a
    rl l
    sra h
    rrc e
    inc hl
    dec de
    xor c
    ld c, a
    dec b
    jr nz, .loop
    push af
{store(RESULTS, "hldec")}
    pop de
{store(RESULTS + 5, "de")}
{MARK_DONE}
    jp pass
""")


SPEC = spec(
    name="ALU_LOOP",
    description="benchmark: ALU-heavy loop (8/16-bit arithmetic, logic, shifts, flags), checksum, forever",
    covers=("benchmark", "alu8", "alu16", "rotate", "shift", "daa", "flags", "jr_cc"),
    source=source,
    frames=72,
    signature=signature,
    verify=VerifySettings(frames_per_step=24, release_after_frames=8, steps=100),
)
