"""SM83 building blocks shared by the instruction templates: register access by opcode field, the ALU,
the CB rotate/shift unit, and the interrupt checks. Memory accesses are not made here: templates
describe them and the sequencer (frame.py `run_op`) performs them.

Registers are fields of the thread-local `Gb` struct. An 8-bit register operand is selected by the
3-bit field of the opcode (B C D E H L (HL) A = 0..7; index 6, memory, is handled by the templates), a
16-bit pair by the 2-bit field (BC DE HL SP, or AF for PUSH/POP). Flags: Z=0x80 N=0x40 H=0x20 C=0x10.
"""

import warp as wp

from gbxcule.kernels.state import Gb

FLAG_Z = wp.constant(0x80)
FLAG_N = wp.constant(0x40)
FLAG_H = wp.constant(0x20)
FLAG_C = wp.constant(0x10)


@wp.func
def get_r8(g: wp.ref[Gb], r: wp.int32) -> wp.int32:
    """Selects, not branches: lanes of a warp that decode different registers stay converged."""
    lo = wp.where(r == 0, g.b, wp.where(r == 1, g.c, wp.where(r == 2, g.d, g.e)))
    return wp.where(r < 4, lo, wp.where(r == 4, g.h, wp.where(r == 5, g.l, g.a)))


@wp.func
def set_r8(g: wp.ref[Gb], r: wp.int32, v: wp.int32):
    """Every register is written (with itself unless selected): no branches, so no divergence."""
    g.b = wp.where(r == 0, v, g.b)
    g.c = wp.where(r == 1, v, g.c)
    g.d = wp.where(r == 2, v, g.d)
    g.e = wp.where(r == 3, v, g.e)
    g.h = wp.where(r == 4, v, g.h)
    g.l = wp.where(r == 5, v, g.l)
    g.a = wp.where(r == 7, v, g.a)


@wp.func
def get_rr(g: wp.ref[Gb], p: wp.int32) -> wp.int32:
    """BC, DE, HL, SP for p = 0..3."""
    hi = wp.where(p == 0, g.b, wp.where(p == 1, g.d, g.h))
    lo = wp.where(p == 0, g.c, wp.where(p == 1, g.e, g.l))
    return wp.where(p == 3, g.sp, (hi << 8) | lo)


@wp.func
def set_rr(g: wp.ref[Gb], p: wp.int32, v: wp.int32):
    w = v & 0xFFFF
    g.b = wp.where(p == 0, w >> 8, g.b)
    g.c = wp.where(p == 0, w & 0xFF, g.c)
    g.d = wp.where(p == 1, w >> 8, g.d)
    g.e = wp.where(p == 1, w & 0xFF, g.e)
    g.h = wp.where(p == 2, w >> 8, g.h)
    g.l = wp.where(p == 2, w & 0xFF, g.l)
    g.sp = wp.where(p == 3, w, g.sp)


@wp.func
def flag_bit(cond: wp.bool, bit: wp.int32) -> wp.int32:
    return wp.where(cond, bit, 0)


@wp.func
def condition(g: wp.ref[Gb], cc: wp.int32) -> wp.bool:
    """NZ, Z, NC, C for cc = 0..3."""
    bit = wp.where(cc < 2, FLAG_Z, FLAG_C)
    return ((g.f & bit) != 0) == ((cc & 1) != 0)


@wp.func
def alu_result(g: wp.ref[Gb], kind: wp.int32, t: wp.int32, f: wp.int32):
    r = t & 0xFF
    g.f = f | flag_bit(r == 0, FLAG_Z)
    if kind != 7:
        g.a = r


@wp.func
def alu(g: wp.ref[Gb], kind: wp.int32, b: wp.int32):
    """ADD ADC SUB SBC AND XOR OR CP (kind 0..7) of A and b, into A and F. Each case stores its own result
    (see docs/kernel_style.md: a local assigned in a branch costs a select on every path)."""
    a = g.a
    carry = wp.where((g.f & FLAG_C) != 0, 1, 0)
    if kind == 0:
        alu_result(g, kind, a + b, flag_bit((a & 0xF) + (b & 0xF) > 0xF, FLAG_H) | flag_bit(a + b > 0xFF, FLAG_C))
    elif kind == 1:
        alu_result(g, kind, a + b + carry,
                   flag_bit((a & 0xF) + (b & 0xF) + carry > 0xF, FLAG_H) | flag_bit(a + b + carry > 0xFF, FLAG_C))
    elif kind == 2 or kind == 7:
        alu_result(g, kind, a - b, FLAG_N | flag_bit((a & 0xF) - (b & 0xF) < 0, FLAG_H) | flag_bit(a - b < 0, FLAG_C))
    elif kind == 3:
        alu_result(g, kind, a - b - carry,
                   FLAG_N | flag_bit((a & 0xF) - (b & 0xF) - carry < 0, FLAG_H) | flag_bit(a - b - carry < 0, FLAG_C))
    elif kind == 4:
        alu_result(g, kind, a & b, FLAG_H)
    elif kind == 5:
        alu_result(g, kind, a ^ b, 0)
    else:
        alu_result(g, kind, a | b, 0)


@wp.func
def incdec8(g: wp.ref[Gb], v: wp.int32, dec: wp.int32) -> wp.int32:
    """INC (dec 0) or DEC (dec 1) of a byte: Z, N, H set, C kept. The flags depend only on v and C, so
    computing it twice on the same byte (the (HL) forms do) sets them the same way."""
    t = (v + 1 - 2 * dec) & 0xFF
    half = wp.where(dec != 0, (v & 0xF) == 0, (v & 0xF) == 0xF)
    g.f = (g.f & FLAG_C) | flag_bit(dec != 0, FLAG_N) | flag_bit(t == 0, FLAG_Z) | flag_bit(half, FLAG_H)
    return t


@wp.func
def rotate_result(g: wp.ref[Gb], t: wp.int32, c: wp.int32) -> wp.int32:
    g.f = flag_bit(t == 0, FLAG_Z) | flag_bit(c != 0, FLAG_C)
    return t


@wp.func
def rotate(g: wp.ref[Gb], kind: wp.int32, v: wp.int32) -> wp.int32:
    """CB RLC RRC RL RR SLA SRA SWAP SRL (kind 0..7); sets Z, clears N and H, C = bit shifted out."""
    carry = wp.where((g.f & FLAG_C) != 0, 1, 0)
    if kind == 0:
        return rotate_result(g, ((v << 1) | (v >> 7)) & 0xFF, v >> 7)
    if kind == 1:
        return rotate_result(g, (v >> 1) | ((v & 1) << 7), v & 1)
    if kind == 2:
        return rotate_result(g, ((v << 1) | carry) & 0xFF, v >> 7)
    if kind == 3:
        return rotate_result(g, (v >> 1) | (carry << 7), v & 1)
    if kind == 4:
        return rotate_result(g, (v << 1) & 0xFF, v >> 7)
    if kind == 5:
        return rotate_result(g, (v >> 1) | (v & 0x80), v & 1)
    if kind == 6:
        return rotate_result(g, ((v << 4) | (v >> 4)) & 0xFF, 0)
    return rotate_result(g, v >> 1, v & 1)


@wp.func
def cb_op(g: wp.ref[Gb], op: wp.int32, v: wp.int32) -> wp.int32:
    """The CB-prefixed operation op (the byte after 0xCB) on the byte v: rotate/shift, BIT (flags only;
    returns v), RES or SET. Returns the byte to write back."""
    y = (op >> 3) & 7
    kind = op >> 6
    if kind == 0:
        return rotate(g, y, v)
    if kind == 1:
        g.f = (g.f & FLAG_C) | FLAG_H | flag_bit(((v >> y) & 1) == 0, FLAG_Z)
        return v
    return wp.where(kind == 2, v & ~(1 << y), v | (1 << y))


@wp.func
def daa(g: wp.ref[Gb]):
    t = g.a
    corr = 0
    if (g.f & FLAG_H) != 0:
        corr = corr | 0x06
    if (g.f & FLAG_C) != 0:
        corr = corr | 0x60
    if (g.f & FLAG_N) != 0:
        t = t - corr
    else:
        if (t & 0x0F) > 0x09:
            corr = corr | 0x06
        if t > 0x99:
            corr = corr | 0x60
        t = t + corr
    g.f = (g.f & FLAG_N) | flag_bit((t & 0xFF) == 0, FLAG_Z) | flag_bit((corr & 0x60) != 0, FLAG_C)
    g.a = t & 0xFF


@wp.func
def sp_offset(g: wp.ref[Gb], raw: wp.int32) -> wp.int32:
    """SP + signed byte, with ADD SP,e8 / LD HL,SP+e8 flags (from the unsigned low bytes)."""
    e = raw - ((raw & 0x80) << 1)
    g.f = flag_bit((g.sp & 0xF) + (raw & 0xF) > 0xF, FLAG_H) | flag_bit((g.sp & 0xFF) + (raw & 0xFF) > 0xFF, FLAG_C)
    return (g.sp + e) & 0xFFFF


@wp.func
def pending_interrupts(g: wp.ref[Gb]) -> wp.int32:
    return g.if_ & g.ie & 0x1F


@wp.func
def interrupt_vector(pending: wp.int32) -> wp.int32:
    """The IF bit of the highest-priority pending interrupt in bits 0-4, its vector in bits 8-15."""
    out = 0x1000 | 16
    if (pending & 1) != 0:
        out = 0x4000 | 1
    elif (pending & 2) != 0:
        out = 0x4800 | 2
    elif (pending & 4) != 0:
        out = 0x5000 | 4
    elif (pending & 8) != 0:
        out = 0x5800 | 8
    else:
        out = 0x6000 | 16
    return out


@wp.func
def check_interrupts(g: wp.ref[Gb]) -> wp.int32:
    """At a batch start: 0 nothing to do, 1 an enabled interrupt is pending (wake from HALT), 2 pending
    and IME set (dispatch it)."""
    if g.intr_queued != 0 or g.ime_delay != 0:
        return 0
    if pending_interrupts(g) == 0:
        g.intr_queued = 0
        return 0
    if g.halted != 0 and g.halted_during_ei == 0:
        g.pc = (g.pc + 1) & 0xFFFF  # leave the HALT
    g.halted_during_ei = 0
    g.intr_queued = 1
    return wp.where(g.ime != 0, 2, 1)
