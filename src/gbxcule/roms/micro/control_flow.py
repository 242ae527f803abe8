"""CONTROL_FLOW: jumps, calls, returns and RSTs, taken and not taken, recorded as a trace in WRAM.

HL is the trace pointer throughout: every visited point appends its id with LD (HL+),A. Conditional
JR/JP/CALL/RET run under each of the four (Z, C) flag states for each condition; the unconditional
forms, JP HL, RETI, nested CALLs, all eight RST vectors and PUSH/POP follow. The trace, its end pointer,
SP seen three calls deep and a return address pushed by CALL are the signature.
"""

from __future__ import annotations

from gbxcule.asm import assemble
from gbxcule.roms.micro.common import done, program, spec
from gbxcule.roms.spec import VerifySettings

TRACE = 0xC100
RESULTS = 0xC000  # trace end (2), SP three calls deep (2), a return address (2)
CONDS = ("nz", "z", "nc", "c")
# (Z, C) flag states and the code that produces them.
SETUPS = (((True, False), "xor a"), ((False, False), "ld a, 1\n    or a"),
          ((False, True), "ld a, 1\n    cp 2"), ((True, True), "xor a\n    scf"))
KINDS = ("jr", "jp", "call", "ret")
AFTER = 0x7F  # the id recorded after every conditional CALL / RET case


def _holds(cc: str, z: bool, c: bool) -> bool:
    return {"nz": not z, "z": z, "nc": not c, "c": c}[cc]


def _conditional() -> tuple[str, list[int]]:
    """Code and expected trace for every conditional form, condition and flag state."""
    code, trace = [], []
    for ki, kind in enumerate(KINDS):
        for ci, cc in enumerate(CONDS):
            for si, ((z, c), setup) in enumerate(SETUPS):
                case = ki << 4 | ci << 2 | si
                taken = _holds(cc, z, c)
                lbl = f"cf_{kind}_{cc}_{si}"
                if kind in ("jr", "jp"):
                    code.append(f"""    {setup}
    {kind} {cc}, {lbl}
    ld a, ${case:02X}
    ld [hl+], a
    jr {lbl}_end
{lbl}:
    ld a, ${case | 0x80:02X}
    ld [hl+], a
{lbl}_end:""")
                    trace.append(case | 0x80 if taken else case)
                elif kind == "call":
                    code.append(f"""    {setup}
    ld b, ${case | 0x80:02X}
    call {cc}, mark_b
    ld a, ${AFTER:02X}
    ld [hl+], a""")
                    trace += [case | 0x80, AFTER] if taken else [AFTER]
                else:
                    code.append(f"""    {setup}
    ld b, ${case:02X}
    call ret_{cc}
    ld a, ${AFTER:02X}
    ld [hl+], a""")
                    trace += [AFTER] if taken else [case, AFTER]
    return "\n".join(code), trace


def _rst_vectors() -> dict[int, str]:
    return {v: f"ld a, ${0xD0 + v // 8:02X}\n    ld [hl+], a\n    ret" for v in range(0, 0x40, 8)}


UNCONDITIONAL = """
    jr .fwd
    ld a, $EE
    ld [hl+], a
.back:
    ld a, $02
    ld [hl+], a
    jr .after_jr
.fwd:
    ld a, $01
    ld [hl+], a
    jr .back
.after_jr:
    jp .far
    ld a, $EE
    ld [hl+], a
.far:
    ld a, $03
    ld [hl+], a
    push hl
    ld hl, .via_hl
    jp hl
    ld a, $EE
    ld [hl+], a
.via_hl:
    pop hl
    ld a, $04
    ld [hl+], a
    call level1
    ld a, $08
    ld [hl+], a
    call do_reti
    di
    ld a, $09
    ld [hl+], a
    rst $00
    rst $08
    rst $10
    rst $18
    rst $20
    rst $28
    rst $30
    rst $38
    ld bc, $1234
    ld de, $5678
    push bc
    push de
    pop bc
    pop de
    ld a, b
    ld [hl+], a
    ld a, c
    ld [hl+], a
    ld a, d
    ld [hl+], a
    ld a, e
    ld [hl+], a
    call get_return
return_here:
    ld a, e
    ld [$C004], a
    ld a, d
    ld [$C005], a
    ld a, l
    ld [$C000], a
    ld a, h
    ld [$C001], a
    jp finish

level1:
    ld a, $05
    ld [hl+], a
    call level2
    ret
level2:
    ld a, $06
    ld [hl+], a
    call level3
    ret
level3:
    ld [$C002], sp
    ld a, $07
    ld [hl+], a
    ret
do_reti:
    reti
get_return:
    pop de
    push de
    ret
mark_b:
    ld a, b
    ld [hl+], a
    ret
"""
UNCONDITIONAL_TRACE = [1, 2, 3, 4, 5, 6, 7, 8, 9, *range(0xD0, 0xD8), 0x56, 0x78, 0x12, 0x34]


def _ret_subroutines() -> str:
    return "\n".join(f"ret_{cc}:\n    ret {cc}\n    ld a, b\n    ld [hl+], a\n    ret" for cc in CONDS)


def source() -> str:
    code, _ = _conditional()
    return program(f"""
    ld hl, {TRACE}
{code}
{UNCONDITIONAL}
{_ret_subroutines()}
""", vectors=_rst_vectors())


def signature() -> dict[int, bytes]:
    _, trace = _conditional()
    trace += UNCONDITIONAL_TRACE
    end = TRACE + len(trace)
    # The return address CALL pushes is the address after the CALL: the label the ROM puts there.
    ret_addr = assemble(source()).symbols["return_here"]
    results = end.to_bytes(2, "little") + (0xFFFE - 6).to_bytes(2, "little") + ret_addr.to_bytes(2, "little")
    return done() | {TRACE: bytes(trace), RESULTS: results}


SPEC = spec(
    name="CONTROL_FLOW",
    description="CALL/RET/RET cc/RETI/RST/JR/JR cc/JP/JP cc/JP HL/PUSH/POP, taken and not, as a WRAM trace",
    covers=("jr", "jr_cc", "jp", "jp_cc", "jp_hl", "call", "call_cc", "ret", "ret_cc", "reti", "rst",
            "push", "pop"),
    source=source,
    frames=72,
    signature=signature,
    verify=VerifySettings(frames_per_step=1, release_after_frames=1, steps=100),
)
