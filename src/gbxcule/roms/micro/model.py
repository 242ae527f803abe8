"""Python models of SM83 instruction results, written from the Pan Docs definitions.

The micro-ROM signatures are computed with these, never by running a ROM. Every function takes the
operands and the incoming flags byte F (Z=$80 N=$40 H=$20 C=$10) and returns (result, new F).
"""

from __future__ import annotations

FZ, FN, FH, FC = 0x80, 0x40, 0x20, 0x10


def flags(z: bool, n: bool, h: bool, c: bool) -> int:
    return (FZ if z else 0) | (FN if n else 0) | (FH if h else 0) | (FC if c else 0)


def alu8(op: str, a: int, b: int, f: int) -> tuple[int, int]:
    """ADD ADC SUB SBC AND XOR OR CP on A and b. CP leaves A unchanged."""
    carry = 1 if op in ("adc", "sbc") and f & FC else 0
    if op in ("add", "adc"):
        r = a + b + carry
        fl = flags((r & 0xFF) == 0, False, (a & 0xF) + (b & 0xF) + carry > 0xF, r > 0xFF)
    elif op in ("sub", "sbc", "cp"):
        r = a - b - carry
        fl = flags((r & 0xFF) == 0, True, (a & 0xF) - (b & 0xF) - carry < 0, r < 0)
    elif op == "and":
        r = a & b
        fl = flags(r == 0, False, True, False)
    elif op == "xor":
        r = a ^ b
        fl = flags(r == 0, False, False, False)
    elif op == "or":
        r = a | b
        fl = flags(r == 0, False, False, False)
    else:
        raise ValueError(op)
    return (a if op == "cp" else r & 0xFF), fl


def inc8(v: int, f: int) -> tuple[int, int]:
    r = (v + 1) & 0xFF
    return r, flags(r == 0, False, (v & 0xF) == 0xF, bool(f & FC))


def dec8(v: int, f: int) -> tuple[int, int]:
    r = (v - 1) & 0xFF
    return r, flags(r == 0, True, (v & 0xF) == 0, bool(f & FC))


def daa(a: int, f: int) -> tuple[int, int]:
    """Decimal adjust after a BCD addition (N=0) or subtraction (N=1)."""
    carry = bool(f & FC)
    if f & FN:
        adj = (0x06 if f & FH else 0) | (0x60 if carry else 0)
        a = (a - adj) & 0xFF
    else:
        adj = 0
        if f & FH or (a & 0xF) > 9:
            adj |= 0x06
        if carry or a > 0x99:
            adj |= 0x60
            carry = True
        a = (a + adj) & 0xFF
    return a, flags(a == 0, bool(f & FN), False, carry)


def cb_shift(op: str, v: int, f: int) -> tuple[int, int]:
    """The CB rotates and shifts: RLC RRC RL RR SLA SRA SWAP SRL."""
    cin = 1 if f & FC else 0
    if op == "rlc":
        c, r = v >> 7, (v << 1 | v >> 7)
    elif op == "rrc":
        c, r = v & 1, (v >> 1 | v << 7)
    elif op == "rl":
        c, r = v >> 7, (v << 1 | cin)
    elif op == "rr":
        c, r = v & 1, (v >> 1 | cin << 7)
    elif op == "sla":
        c, r = v >> 7, v << 1
    elif op == "sra":
        c, r = v & 1, (v >> 1 | v & 0x80)
    elif op == "swap":
        c, r = 0, (v << 4 | v >> 4)
    elif op == "srl":
        c, r = v & 1, v >> 1
    else:
        raise ValueError(op)
    r &= 0xFF
    return r, flags(r == 0, False, False, bool(c))


def rot_a(op: str, a: int, f: int) -> tuple[int, int]:
    """RLCA RRCA RLA RRA ('rlc' 'rrc' 'rl' 'rr'): the CB result with Z always cleared."""
    r, fl = cb_shift(op, a, f)
    return r, fl & FC


def bit(n: int, v: int, f: int) -> int:
    """BIT n: the new F."""
    return flags(not (v >> n) & 1, False, True, bool(f & FC))


def cpl(a: int, f: int) -> tuple[int, int]:
    return a ^ 0xFF, f | FN | FH


def scf(f: int) -> int:
    return (f & FZ) | FC


def ccf(f: int) -> int:
    return (f & FZ) | (~f & FC)


def add16(hl: int, rr: int, f: int) -> tuple[int, int]:
    """ADD HL,rr: Z kept, H from bit 11, C from bit 15."""
    r = hl + rr
    return r & 0xFFFF, (f & FZ) | flags(False, False, (hl & 0xFFF) + (rr & 0xFFF) > 0xFFF, r > 0xFFFF)


def sp_plus(sp: int, e: int) -> tuple[int, int]:
    """ADD SP,e8 and LD HL,SP+e8 (e in -128..127): H and C from the unsigned low-byte addition."""
    u = e & 0xFF
    return (sp + e) & 0xFFFF, flags(False, False, (sp & 0xF) + (u & 0xF) > 0xF, (sp & 0xFF) + u > 0xFF)
