"""CB_BITS: every CB-prefixed op (RLC..SRL, SWAP, BIT, RES, SET) on B C D E H L (HL) A, with flags.

Each case loads A and F from a constant pair (PUSH/POP AF), moves A into the target, runs the op,
moves the target back into A and pushes AF into the results area, so each case leaves (value, F).
"""

from __future__ import annotations

from gbxcule.roms.micro import model
from gbxcule.roms.micro.common import done, program, pushed, spec
from gbxcule.roms.spec import VerifySettings

TARGETS = ("b", "c", "d", "e", "h", "l", "[hl]", "a")
SHIFTS = ("rlc", "rrc", "rl", "rr", "sla", "sra", "swap", "srl")
SHIFT_INPUTS = ((0x81, 0x00), (0x42, 0xF0), (0x00, 0x10), (0x01, 0x00), (0x80, 0x00))
BIT_INPUTS = ((0x55, 0xF0), (0xAA, 0x00))
RES_SET_INPUTS = ((0xFF, 0xF0), (0x00, 0x00))
SCRATCH = 0xC0F0  # the (HL) operand
RESULTS = 0xC100


def _cases() -> list[tuple[str, str, int, int]]:
    """(op text without target, target, value in, flags in), in ROM order."""
    cases = [(op, t, v, f) for op in SHIFTS for t in TARGETS for v, f in SHIFT_INPUTS]
    cases += [(f"bit {n},", t, v, f) for n in range(8) for t in TARGETS for v, f in BIT_INPUTS]
    cases += [(f"{op} {n},", t, v, f) for op in ("res", "set") for n in range(8) for t in TARGETS
              for v, f in RES_SET_INPUTS]
    return cases


def _expect(op: str, value: int, f: int) -> tuple[int, int]:
    name, _, n = op.rstrip(",").partition(" ")
    if name in SHIFTS:
        return model.cb_shift(name, value, f)
    if name == "bit":
        return value, model.bit(int(n), value, f)
    mask = 1 << int(n)
    return (value & ~mask if name == "res" else value | mask), f


def signature() -> dict[int, bytes]:
    return done() | {RESULTS: pushed([_expect(op, v, f) for op, _, v, f in _cases()])}


def _case(op: str, target: str, value: int, f: int) -> str:
    pair = "bc" if target in ("d", "e") else "de"
    lines = [f"ld hl, ${SCRATCH:04X}"] if target == "[hl]" else []
    lines += [f"ld {pair}, ${value << 8 | f:04X}", f"push {pair}", "pop af"]
    if target != "a":
        lines.append(f"ld {target}, a")
    lines.append(f"{op} {target}")
    if target != "a":
        lines.append(f"ld a, {target}")
    lines.append("push af")
    return "\n".join("    " + x for x in lines)


def source() -> str:
    cases = _cases()
    body = "\n".join(_case(*c) for c in cases)
    return program(f"""
    ld sp, ${RESULTS + 2 * len(cases):04X}
{body}
    ld sp, $FFFE
    jp finish
""")


SPEC = spec(
    name="CB_BITS",
    description="every CB op (rotates, shifts, SWAP, BIT, RES, SET) on each register and (HL), with flags",
    covers=("cb", "rotate", "shift", "swap", "bit", "res", "set", "flags"),
    source=source,
    frames=72,
    signature=signature,
    verify=VerifySettings(frames_per_step=1, release_after_frames=1, steps=100),
)
