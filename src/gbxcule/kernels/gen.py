"""Kernel generation: what the step kernel takes from the ISA table and the state schema, as Warp source.

`family(op)` puts each of the 512 opcodes of `gbxcule.core.isa` into an instruction family;
`templates.TEMPLATES` holds each family's body. The generator numbers the families and emits a small module
(`ops_source`): one two-level dispatch (family group, then family) per template part, with the bodies pasted
in (`op_pre`, `op_mid`, `op_post`, which the sequencer in kernels/frame.py calls), and the field-wise code
that follows the schema (the scratch reset, the fields' load and store, the cycle fields' rebase). The
per-opcode table the kernel reads at run time (family id, length, cycles, access timing) is `op_table`.
Everything else of the step kernel is ordinary Warp code: kernels/frame.py and kernels/step.py. The
module is written under the cache folder named by its hash and imported from there (`load_ops`): Warp
reads a function's source from its file.

Access timing: the reference model (PyBoy 2.8.1) lets the timer and serial port see a memory access at
`t0 + a` and the PPU at `t0 + a + k`, with per-opcode offsets listed in `access_timing`; matching them is
what keeps STAT/LY/DIV/TIMA reads in lockstep. docs/timing.md explains the model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
import textwrap
from functools import cache
from types import ModuleType

import numpy as np

from gbxcule.core.isa import BASE, CB, R8, ROTATES, Opcode
from gbxcule.core.outputs import write_output
from gbxcule.core.paths import cache_dir
from gbxcule.core.schema import CYCLE_FIELDS, FIELDS, NUM_FIELDS, TRANSIENT
from gbxcule.kernels.instructions import MERGED, TEMPLATES
from gbxcule.kernels.state import SEQ_FIELDS

_PAIRS = ("BC", "DE", "HL", "SP", "AF")
_MEM_PAIRS = ("(BC)", "(DE)", "(HL+)", "(HL-)")
_ALIASES = {
    "LD (rr),r": "LD (rr),A", "LD r,(rr)": "LD A,(rr)", "LD (a16),r": "LD (a16),A", "LD r,(a16)": "LD A,(a16)",
    "LDH (a8),r": "LDH (a8),A", "LDH r,(a8)": "LDH A,(a8)", "LDH (C),r": "LDH (C),A", "LDH r,(C)": "LDH A,(C)",
    "ADD rr,rr": "ADD HL,rr", "ADD rr,e8": "ADD SP,e8", "LD rr,SP+e8": "LD HL,SP+e8", "LD rr,rr": "LD SP,HL",
    "JP rr": "JP HL", "LD (a16),rr": "LD (a16),SP",
}


def _norm(operand: str) -> str:
    if operand in R8 and operand != "(HL)":
        return "r"
    if operand in _PAIRS:
        return "rr"
    if operand in _MEM_PAIRS:
        return "(rr)"
    if operand.startswith("cc:"):
        return "cc"
    return operand


def shape(op: Opcode) -> str | None:
    """The opcode's operand shape ("LD r,(HL)", "JR cc,e8"...), which decides its access timing; None for
    the CB prefix (decoded at fetch)."""
    mn, ops = op.mnemonic, op.operands
    if op.prefixed:
        mem = "(HL)" if ops[-1] == "(HL)" else "r"
        return f"ROT {mem}" if mn in ROTATES else f"{mn} b,{mem}"
    if mn == "PREFIX":
        return None
    if mn in ("ADD", "ADC", "SUB", "SBC", "AND", "XOR", "OR", "CP") and ops and ops[0] == "A":
        return {"(HL)": "ALU A,(HL)", "n8": "ALU A,n8"}.get(ops[1], "ALU A,r")
    if mn in ("RLCA", "RRCA", "RLA", "RRA"):
        return "ROTATE A"
    if mn == "RST":
        return "RST"
    key = f"{mn} {','.join(_norm(o) for o in ops)}" if ops else mn
    return _ALIASES.get(key, key)


def family(op: Opcode) -> str | None:
    """The template an opcode runs: shapes that differ only in operand selection share one (`MERGED`)."""
    sh = shape(op)
    return None if sh is None else MERGED.get(sh, sh)


def access_timing(op: Opcode) -> tuple[tuple[int, int], ...]:
    """(cycle offset, extra PPU offset) of each memory access after the opcode fetch, per the reference."""
    fam = shape(op)
    if op.prefixed:
        if not fam or "(HL)" not in fam:
            return ()
        return ((4, 0),) if fam.startswith("BIT") else ((4, 0), (8, 0))
    ppu4 = 4 if op.code in (0x12, 0x1A, 0x7E) else 0  # LD (DE),A, LD A,(DE), LD A,(HL)
    table: dict[str, tuple[tuple[int, int], ...]] = {
        "LD (a16),SP": ((0, 0), (0, 0)),
        "LD (rr),A": ((0, ppu4),), "LD A,(rr)": ((0, ppu4),), "LD r,(HL)": ((0, ppu4),),
        "LD (HL),r": ((0, 0),), "ALU A,(HL)": ((0, 0),), "LD (HL),n8": ((4, 0),),
        "INC (HL)": ((0, 0), (4, 0)), "DEC (HL)": ((0, 0), (4, 0)),
        "POP rr": ((0, 0), (4, 0)), "RET": ((4, 0), (8, 0)), "RETI": ((4, 0), (8, 0)),
        "RET cc": ((8, 0), (12, 0)), "PUSH rr": ((8, 0), (12, 0)), "RST": ((8, 0), (12, 0)),
        "CALL a16": ((16, 0), (20, 0)), "CALL cc,a16": ((16, 0), (20, 0)),
        "LDH (a8),A": ((4, 0),), "LDH A,(a8)": ((4, 0),), "LDH (C),A": ((0, 0),), "LDH A,(C)": ((0, 0),),
        "LD (a16),A": ((8, 0),), "LD A,(a16)": ((8, 0),),
    }
    return table.get(fam or "", ())


DISPATCH = "DISPATCH"  # the interrupt dispatch: not an opcode, run by the same sequencer


def family_ids() -> dict[str, int]:
    """Families numbered in table order (base opcodes first, then CB), then DISPATCH."""
    ids: dict[str, int] = {}
    for op in (*BASE, *CB):
        fam = family(op)
        if fam is not None and fam not in ids:
            ids[fam] = len(ids)
    ids[DISPATCH] = len(ids)
    return ids


def pack_info(op: Opcode, fam: int) -> int:
    """The opcode's entry in the kernel's table, as int32: cycles | cycles_not_taken << 5 | a0/4 << 10 |
    k0/4 << 14 | a1/4 << 16 | k1/4 << 20 | length << 22 | family << 24 (signed: -1 for the prefix), so one
    load decodes an opcode."""
    acc = list(access_timing(op)) + [(0, 0)] * 2
    (a0, k0), (a1, k1) = acc[0], acc[1]
    nt = op.cycles_not_taken if op.cycles_not_taken is not None else op.cycles
    assert op.cycles < 32 and nt < 32 and a0 < 64 and a1 < 64 and k0 < 16 and k1 < 16 and -1 <= fam < 128
    word = (op.cycles | nt << 5 | (a0 // 4) << 10 | (k0 // 4) << 14 | (a1 // 4) << 16 | (k1 // 4) << 20
            | op.length << 22 | (fam & 0xFF) << 24)
    return word - (1 << 32) if word >= 1 << 31 else word


def op_table() -> np.ndarray:
    """int32 [512], base opcodes then CB opcodes: `pack_info` of each with its family id (-1: the prefix)."""
    ids = family_ids()
    return np.array([pack_info(op, ids.get(family(op) or "", -1)) for op in (*BASE, *CB)], dtype=np.int32)


# Template names of the sequencer's scratch values become fields of its `Seq` struct (frame.py run_op).
_SEQ_NAME = re.compile(rf"(?<![.\w])({'|'.join(SEQ_FIELDS)})(?!\w)")


def _tree(part: str, fams: list[tuple[str, int]]) -> str:
    """A two-level if-tree (family group, then family) over the families that have `part`."""
    groups: dict[int, list[tuple[int, str]]] = {}
    for fam, i in fams:
        if TEMPLATES[fam].get(part, "").strip():
            groups.setdefault(i >> 3, []).append((i, fam))
    lines = []
    for gi, (group, members) in enumerate(sorted(groups.items())):
        lines.append(f"{'if' if gi == 0 else 'elif'} (s.fam >> 3) == {group}:")
        for mi, (i, fam) in enumerate(members):
            lines.append(f"    {'if' if mi == 0 else 'elif'} s.fam == {i}:  # {fam}")
            lines.append(textwrap.indent(_SEQ_NAME.sub(r"s.\1", TEMPLATES[fam][part].strip("\n")), " " * 8))
    return textwrap.indent("\n".join(lines) or "pass", " " * 4)


@cache
def ops_source() -> str:
    """The generated module's source (`_OPS_MODULE` filled in)."""
    ids = family_ids()
    missing = sorted(set(ids) - set(TEMPLATES))
    if missing:
        raise RuntimeError(f"no template for instruction families: {missing}")
    fams = sorted(ids.items(), key=lambda kv: kv[1])
    # env-major: env e's fields are the consecutive words fields[e * NUM_FIELDS ...] (core/schema.py)
    parts = {
        "$PRE": _tree("pre", fams), "$MID": _tree("mid", fams), "$POST": _tree("post", fams),
        "$DISPATCH_FAMILY": str(ids[DISPATCH]),
        "$SEQ_CLEAR": "\n".join(f"    s.{name} = 0" for name in SEQ_FIELDS),
        "$LOAD": "\n".join(f"    g.{name} = fields[e * {NUM_FIELDS} + {i}]" for i, (name, _) in enumerate(FIELDS)),
        "$STORE": "\n".join(f"    fields[e * {NUM_FIELDS} + {i}] = g.{name}" for i, (name, _) in enumerate(FIELDS)),
        "$SHIFT": "\n".join(f"    g.{f} = g.{f} - c" for f in CYCLE_FIELDS),
    }
    src = _OPS_MODULE
    for key, text in parts.items():
        src = src.replace(key, text)
    return src


_OPS_MODULE = '''"""Generated by gbxcule.kernels.gen from gbxcule.core.isa, gbxcule.core.schema and
gbxcule.kernels.instructions. Do not edit. kernels/frame.py's sequencer (run_op) calls seq_clear and the family
trees op_pre, op_mid and op_post; kernels/step.py's step kernel calls load_fields, store_fields and shift_cycles."""
import warp as wp

from gbxcule.kernels.cpu import (FLAG_C, FLAG_H, FLAG_N, FLAG_Z, alu, cb_op, condition, daa, flag_bit, get_r8, get_rr,
                                 incdec8, interrupt_vector, pending_interrupts, set_r8, set_rr, sp_offset)
from gbxcule.kernels.idle import idle_loop_skip
from gbxcule.kernels.state import Gb, Mem, Seq

DISPATCH_FAMILY = $DISPATCH_FAMILY  # the family id of the interrupt dispatch


@wp.func
def seq_clear(s: wp.ref[Seq]):
    """Every scratch value of the sequencer to 0, at an instruction's start."""
$SEQ_CLEAR


@wp.func
def op_pre(g: wp.ref[Gb], s: wp.ref[Seq], m: Mem, pc: wp.int32, t0: wp.int32, end: wp.int32):
    """The `pre` part of the instruction family s.fam (two-level tree: family group, then family)."""
$PRE


@wp.func
def op_mid(g: wp.ref[Gb], s: wp.ref[Seq], m: Mem, pc: wp.int32, t0: wp.int32, end: wp.int32):
    """The `mid` part of the instruction family s.fam."""
$MID


@wp.func
def op_post(g: wp.ref[Gb], s: wp.ref[Seq], m: Mem, pc: wp.int32, t0: wp.int32, end: wp.int32):
    """The `post` part of the instruction family s.fam."""
$POST


@wp.func
def load_fields(g: wp.ref[Gb], fields: wp.array(dtype=wp.int32), e: wp.int32):
    """Env e's fields into g."""
$LOAD


@wp.func
def store_fields(g: wp.ref[Gb], fields: wp.array(dtype=wp.int32), e: wp.int32):
    """g's fields into env e's."""
$STORE


@wp.func
def shift_cycles(g: wp.ref[Gb], c: wp.int32):
    """Every absolute cycle field less c."""
$SHIFT
'''


@cache
def load_ops() -> ModuleType:
    """Write the generated module into the cache (named by its hash) and import it."""
    src = ops_source()
    digest = hashlib.sha1((src + "|" + ",".join(TRANSIENT)).encode()).hexdigest()[:16]
    name = f"gbxcule_ops_{digest}"
    path = cache_dir() / "kernels" / f"{name}.py"
    if not path.is_file() or path.read_text() != src:
        write_output(path, src)  # a temporary file of its own: processes building the same module never collide
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
