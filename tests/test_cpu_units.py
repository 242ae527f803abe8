"""The CPU building blocks (kernels/cpu.py) against plain Python models of the SM83, exhaustively: the 8-bit
ALU for every operation, A, operand and carry, INC/DEC, the CB shift unit and every CB opcode, and register
access by opcode field (by selects, so that lanes decoding different registers stay converged)."""

import numpy as np
import warp as wp

from gbxcule.kernels import init_warp
from gbxcule.kernels.cpu import alu, cb_op, get_r8, get_rr, incdec8, set_r8, set_rr
from gbxcule.kernels.state import Gb

Z, N, H, C = 0x80, 0x40, 0x20, 0x10


def run_cases(kernel, axes, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Every combination of the `axes` values as int32 rows, run through `kernel(cases, out)` on the CPU
    device; returns the cases and the kernel's [cases, width] output."""
    init_warp()
    grids = np.meshgrid(*axes, indexing="ij")
    cases = np.stack([a.ravel() for a in grids], axis=1).astype(np.int32)
    out = wp.zeros((len(cases), width), dtype=wp.int32, device="cpu")
    wp.launch(kernel, dim=len(cases), inputs=[wp.array(cases, dtype=wp.int32, device="cpu"), out], device="cpu")
    return cases, out.numpy()


def alu_model(kind: int, a: int, b: int, f: int) -> tuple[int, int]:
    """(A, F) after ADD ADC SUB SBC AND XOR OR CP (kind 0..7), as the SM83 manual describes them."""
    c = 1 if f & C else 0
    if kind in (0, 1):
        ci = c if kind == 1 else 0
        t = a + b + ci
        flags = (H if (a & 0xF) + (b & 0xF) + ci > 0xF else 0) | (C if t > 0xFF else 0)
    elif kind in (2, 3, 7):
        ci = c if kind == 3 else 0
        t = a - b - ci
        flags = N | (H if (a & 0xF) - (b & 0xF) - ci < 0 else 0) | (C if t < 0 else 0)
    else:
        t = {4: a & b, 5: a ^ b, 6: a | b}[kind]
        flags = H if kind == 4 else 0
    r = t & 0xFF
    return (a if kind == 7 else r), flags | (Z if r == 0 else 0)


@wp.kernel(enable_backward=False)
def alu_kernel(cases: wp.array2d(dtype=wp.int32), out: wp.array2d(dtype=wp.int32)):
    i = wp.tid()
    g = Gb()
    g.a = cases[i, 1]
    g.f = cases[i, 3]
    alu(g, cases[i, 0], cases[i, 2])
    out[i, 0] = g.a
    out[i, 1] = g.f


def test_alu_matches_the_model_for_every_operation_operand_and_carry():
    cases, got = run_cases(alu_kernel, (np.arange(8), np.arange(256), np.arange(256), np.array([0, C | Z | N | H])), 2)
    want = np.array([alu_model(*map(int, c)) for c in cases], dtype=np.int32)
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"{bad.size} cases differ, first {cases[bad[0]]}: got {got[bad[0]]}, want {want[bad[0]]}"


def rotate_model(kind: int, v: int, f: int) -> tuple[int, int]:
    """(result, F) of CB RLC RRC RL RR SLA SRA SWAP SRL (kind 0..7)."""
    c = 1 if f & C else 0
    t, out = {0: ((v << 1 | v >> 7) & 0xFF, v >> 7), 1: (v >> 1 | (v & 1) << 7, v & 1),
              2: ((v << 1 | c) & 0xFF, v >> 7), 3: (v >> 1 | c << 7, v & 1), 4: ((v << 1) & 0xFF, v >> 7),
              5: (v >> 1 | (v & 0x80), v & 1), 6: ((v << 4 | v >> 4) & 0xFF, 0), 7: (v >> 1, v & 1)}[kind]
    return t, (Z if t == 0 else 0) | (C if out else 0)


@wp.kernel(enable_backward=False)
def incdec_kernel(cases: wp.array2d(dtype=wp.int32), out: wp.array2d(dtype=wp.int32)):
    i = wp.tid()
    g = Gb()
    g.f = cases[i, 2]
    out[i, 0] = incdec8(g, cases[i, 0], cases[i, 1])
    out[i, 1] = g.f
    out[i, 2] = incdec8(g, cases[i, 0], cases[i, 1])  # again on the same byte: the (HL) forms do this
    out[i, 3] = g.f


def test_inc_dec_match_the_model_and_repeat_the_same_flags():
    cases, got = run_cases(incdec_kernel, (np.arange(256), np.arange(2), np.array([0, 0xF0, C, Z | N | H])), 4)
    want = []
    for v, dec, f in cases.tolist():
        t = (v - 1 if dec else v + 1) & 0xFF
        half = (v & 0xF) == (0 if dec else 0xF)
        want.append((t, (f & C) | (N if dec else 0) | (Z if t == 0 else 0) | (H if half else 0)))
    want = np.array(want, dtype=np.int32)
    assert np.array_equal(got[:, :2], want) and np.array_equal(got[:, 2:], want)


@wp.kernel(enable_backward=False)
def cb_kernel(cases: wp.array2d(dtype=wp.int32), out: wp.array2d(dtype=wp.int32)):
    i = wp.tid()
    g = Gb()
    g.f = cases[i, 2]
    out[i, 0] = cb_op(g, cases[i, 0], cases[i, 1])
    out[i, 1] = g.f


def test_every_cb_opcode_on_every_byte():
    """cb_op, which also runs RLCA/RRCA/RLA/RRA: the shifter (rotate) for every kind, BIT, RES and SET."""
    cases, got = run_cases(cb_kernel, (np.arange(256), np.arange(256), np.array([0, 0xF0])), 2)
    want = []
    for op, v, f in cases.tolist():
        kind, y = op >> 6, (op >> 3) & 7
        if kind == 0:
            want.append(rotate_model(y, v, f))
        elif kind == 1:  # BIT: Z = bit clear, H set, N clear, C kept; the byte is unchanged
            want.append((v, (f & C) | H | (0 if (v >> y) & 1 else Z)))
        else:
            want.append((v & ~(1 << y) if kind == 2 else v | (1 << y), f))
    want = np.array(want, dtype=np.int32)
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"{bad.size} cases differ, first {cases[bad[0]]}: got {got[bad[0]]}, want {want[bad[0]]}"


@wp.kernel(enable_backward=False)
def regs_kernel(sel: wp.array(dtype=wp.int32), out: wp.array2d(dtype=wp.int32)):
    i = wp.tid()
    r = sel[i]
    g = Gb()
    g.b = 0x10
    g.c = 0x21
    g.d = 0x32
    g.e = 0x43
    g.h = 0x54
    g.l = 0x65
    g.a = 0x76
    g.sp = 0xFEDC
    out[i, 0] = get_r8(g, r)
    out[i, 1] = get_rr(g, r & 3)
    set_r8(g, r, 0xAB)
    out[i, 2] = (g.b << 24) | (g.c << 16) | (g.d << 8) | g.e
    out[i, 3] = (g.h << 16) | (g.l << 8) | g.a
    set_rr(g, r & 3, 0x1ABCD)
    out[i, 4] = (g.b << 24) | (g.c << 16) | (g.d << 8) | g.e
    out[i, 5] = (g.h << 24) | (g.l << 16) | g.sp
    set_rr(g, 4, 0)  # pair 4 is none: the templates use it to write no pair
    out[i, 6] = (g.b << 24) | (g.c << 16) | (g.d << 8) | g.e
    out[i, 7] = (g.h << 24) | (g.l << 16) | g.sp


def test_register_access_by_opcode_field():
    init_warp()
    out = wp.zeros((8, 8), dtype=wp.int32, device="cpu")
    wp.launch(regs_kernel, dim=8, inputs=[wp.array(np.arange(8, dtype=np.int32), device="cpu"), out], device="cpu")
    got = out.numpy().astype(np.int64) & 0xFFFFFFFF  # words packed from the top byte down
    names = ["b", "c", "d", "e", "h", "l", None, "a"]
    for r in range(8):
        regs = dict(b=0x10, c=0x21, d=0x32, e=0x43, h=0x54, l=0x65, a=0x76, sp=0xFEDC)
        assert got[r, 0] == regs[names[r] or "a"]  # field 6, memory, is the templates' business
        pair = r & 3
        assert got[r, 1] == ((regs["sp"]) if pair == 3 else (regs["bdh"[pair]] << 8 | regs["cel"[pair]]))
        if names[r]:
            regs[names[r]] = 0xAB
        assert got[r, 2] == (regs["b"] << 24 | regs["c"] << 16 | regs["d"] << 8 | regs["e"])
        assert got[r, 3] == (regs["h"] << 16 | regs["l"] << 8 | regs["a"])
        if pair == 3:
            regs["sp"] = 0xABCD
        else:
            regs["bdh"[pair]], regs["cel"[pair]] = 0xAB, 0xCD
        assert got[r, 4] == (regs["b"] << 24 | regs["c"] << 16 | regs["d"] << 8 | regs["e"])
        assert got[r, 5] == (regs["h"] << 24 | regs["l"] << 16 | regs["sp"])
        assert got[r, 6] == got[r, 4] and got[r, 7] == got[r, 5]
