"""FLAGS_DAA: the flags of the 8-bit ALU ops, INC/DEC, CPL/SCF/CCF and DAA over many (A, flags) inputs.

Every result is stored by PUSH AF with SP pointing into a WRAM results area (interrupts stay off), so
each area fills downwards with (F, A) pairs, the first result at its top.
"""

from __future__ import annotations

from gbxcule.roms.micro import model
from gbxcule.roms.micro.common import db, done, program, pushed, spec
from gbxcule.roms.spec import VerifySettings

OPS = ("add", "adc", "sub", "sbc", "and", "xor", "or", "cp")
VALUES = (0x00, 0x01, 0x0F, 0x10, 0x7F, 0x80, 0x99, 0xFF)
VALUES16 = (0x00, 0x01, 0x08, 0x0F, 0x10, 0x1F, 0x3A, 0x7F, 0x80, 0x8F, 0x99, 0x9A, 0xC3, 0xF0, 0xFE, 0xFF)
FLAGS_IN = (0x00, 0xF0)
IMM = 0x3C

# (a, flags in, operand) for the register-operand block; (a, flags in) for the others.
TRIPLES = [(a, f, b) for a in VALUES for b in VALUES for f in FLAGS_IN]
PAIRS = [(a, f) for a in VALUES16 for f in FLAGS_IN]

MISC_OPS = ("inc a", "dec a", "cpl", "scf", "ccf")
# Results areas (start, end): each holds 2 bytes per result.
AREA_REG = (0xC100, 0xC100 + 2 * len(TRIPLES) * len(OPS))  # $C100-$C8FF
AREA_AA = (0xC900, 0xC900 + 2 * len(PAIRS) * len(OPS))  # $C900-$CAFF
AREA_IMM = (0xCB00, 0xCB00 + 2 * len(PAIRS) * len(OPS))  # $CB00-$CCFF
AREA_MISC = (0xCD00, 0xCD00 + 2 * len(PAIRS) * len(MISC_OPS))  # $CD00-$CE3F
AREA_DAA = (0xD000, 0xE000)  # 8 (N, H, C) inputs x 256 values


def _areas() -> list[tuple[tuple[int, int], list[tuple[int, int]]]]:
    """((start, end), the (A, F) pairs pushed there in order) for each results area."""
    reg = [model.alu8(op, a, b, f) for a, f, b in TRIPLES for op in OPS]
    aa = [model.alu8(op, a, a, f) for a, f in PAIRS for op in OPS]
    imm = [model.alu8(op, a, IMM, f) for a, f in PAIRS for op in OPS]
    misc = []
    for a, f in PAIRS:
        misc += [model.inc8(a, f), model.dec8(a, f), model.cpl(a, f), (a, model.scf(f)), (a, model.ccf(f))]
    daa = [model.daa(a, f) for f in range(0x00, 0x80, 0x10) for a in range(256)]
    return [(AREA_REG, reg), (AREA_AA, aa), (AREA_IMM, imm), (AREA_MISC, misc), (AREA_DAA, daa)]


def signature() -> dict[int, bytes]:
    sig = done()
    for (start, end), pairs in _areas():
        assert end - start == 2 * len(pairs)
        sig[start] = pushed(pairs)
    return sig


def _each(ops_code: list[str]) -> str:
    """For each op: load A and F from B and C, run it, push the result."""
    return "\n".join(f"    push bc\n    pop af\n    {code}\n    push af" for code in ops_code)


def source() -> str:
    body = f"""
    ; register operand (E): TRIPLES of (a, flags, operand)
    ld sp, ${AREA_REG[1]:04X}
    ld hl, triples
    ld d, {len(TRIPLES)}
.reg:
    ld a, [hl+]
    ld b, a
    ld a, [hl+]
    ld c, a
    ld a, [hl+]
    ld e, a
{_each([f"{op} a, e" for op in OPS])}
    dec d
    jp nz, .reg

    ; operand A, then an immediate operand: PAIRS of (a, flags)
    ld sp, ${AREA_AA[1]:04X}
    ld hl, pairs
    ld d, {len(PAIRS)}
.aa:
    ld a, [hl+]
    ld b, a
    ld a, [hl+]
    ld c, a
{_each([f"{op} a, a" for op in OPS])}
    dec d
    jp nz, .aa

    ld sp, ${AREA_IMM[1]:04X}
    ld hl, pairs
    ld d, {len(PAIRS)}
.imm:
    ld a, [hl+]
    ld b, a
    ld a, [hl+]
    ld c, a
{_each([f"{op} a, ${IMM:02X}" for op in OPS])}
    dec d
    jp nz, .imm

    ld sp, ${AREA_MISC[1]:04X}
    ld hl, pairs
    ld d, {len(PAIRS)}
.misc:
    ld a, [hl+]
    ld b, a
    ld a, [hl+]
    ld c, a
{_each(list(MISC_OPS))}
    dec d
    jp nz, .misc

    ; DAA over every A for each of the 8 (N, H, C) inputs
    ld sp, ${AREA_DAA[1]:04X}
    ld c, $00
.daa_flags:
    ld b, 0
.daa:
    push bc
    pop af
    daa
    push af
    inc b
    jr nz, .daa
    ld a, c
    add a, $10
    ld c, a
    cp $80
    jr nz, .daa_flags

    ld sp, $FFFE
    jp finish

triples:
{db([x for t in TRIPLES for x in t])}
pairs:
{db([x for p in PAIRS for x in p])}
"""
    return program(body)


SPEC = spec(
    name="FLAGS_DAA",
    description="8-bit ALU, INC/DEC, CPL/SCF/CCF and DAA results and flags over many (A, F) inputs",
    covers=("alu8", "flags", "daa", "inc8", "dec8", "cpl", "scf", "ccf"),
    source=source,
    frames=76,
    signature=signature,
    verify=VerifySettings(frames_per_step=1, release_after_frames=1, steps=120),
)
