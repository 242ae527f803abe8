"""Kernel generation: one ISA table + instruction templates -> the step kernel's source.

`family(op)` puts each of the 512 opcodes of `gbxcule.core.isa` into an instruction family;
`templates.TEMPLATES` holds each family's body. The generator numbers the families, emits one two-level
dispatch (family group, then family) with the bodies pasted in, and per-opcode tables (family id, length,
cycles, access timing) that the kernel reads at run time. The source is written under the cache folder
named by its hash and imported from there, so Warp's own cache (keyed by source) stays warm across runs.

Access timing: the reference model (PyBoy 2.8.1) lets the timer and serial port see a memory access at
`t0 + a` and the PPU at `t0 + a + k`, with per-opcode offsets listed in `access_timing`; matching them is
what keeps STAT/LY/DIV/TIMA reads in lockstep. docs/timing.md explains the model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import textwrap
from functools import cache
from types import ModuleType

import numpy as np

from gbxcule.core.isa import BASE, CB, R8, ROTATES, Opcode
from gbxcule.core.paths import cache_dir
from gbxcule.kernels.state import FIELDS, TRANSIENT
from gbxcule.kernels.templates import TEMPLATES

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


def family(op: Opcode) -> str | None:
    """The template an opcode runs; None for the CB prefix (decoded at fetch)."""
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


def access_timing(op: Opcode) -> tuple[tuple[int, int], ...]:
    """(cycle offset, extra PPU offset) of each memory access after the opcode fetch, per the reference."""
    fam = family(op)
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


def family_ids() -> dict[str, int]:
    """Families numbered in table order (base opcodes first, then CB)."""
    ids: dict[str, int] = {}
    for op in (*BASE, *CB):
        fam = family(op)
        if fam is not None and fam not in ids:
            ids[fam] = len(ids)
    return ids


def pack_info(op: Opcode) -> int:
    """cycles | cycles_not_taken << 8 | a0/4 << 16 | k0/4 << 20 | a1/4 << 22 | k1/4 << 26 | length << 28."""
    acc = list(access_timing(op)) + [(0, 0)] * 2
    (a0, k0), (a1, k1) = acc[0], acc[1]
    nt = op.cycles_not_taken if op.cycles_not_taken is not None else op.cycles
    return (op.cycles | nt << 8 | (a0 // 4) << 16 | (k0 // 4) << 20 | (a1 // 4) << 22 | (k1 // 4) << 26
            | op.length << 28)


def op_tables() -> tuple[np.ndarray, np.ndarray]:
    """int32 [512] family ids (-1 for the prefix) and packed info, base opcodes then CB opcodes."""
    ids = family_ids()
    fams = np.array([ids.get(family(op) or "", -1) for op in (*BASE, *CB)], dtype=np.int32)
    info = np.array([pack_info(op) for op in (*BASE, *CB)], dtype=np.int32)
    return fams, info


def _dispatch_source() -> str:
    ids = family_ids()
    missing = sorted(set(ids) - set(TEMPLATES))
    if missing:
        raise RuntimeError(f"no template for instruction families: {missing}")
    groups: dict[int, list[tuple[int, str]]] = {}
    for fam, i in ids.items():
        groups.setdefault(i >> 3, []).append((i, fam))
    lines = []
    for gi, (group, members) in enumerate(sorted(groups.items())):
        lines.append(f"{'if' if gi == 0 else 'elif'} (fam >> 3) == {group}:")
        for mi, (i, fam) in enumerate(members):
            lines.append(f"    {'if' if mi == 0 else 'elif'} fam == {i}:  # {fam}")
            lines.append(textwrap.indent(TEMPLATES[fam].strip("\n"), " " * 8))
    return textwrap.indent("\n".join(lines), " " * 4)


def _field_io_source() -> tuple[str, str]:
    load = "\n".join(f"    g.{name} = fields[{i} * n + e]" for i, (name, _) in enumerate(FIELDS))
    store = "\n".join(f"    fields[{i} * n + e] = g.{name}" for i, (name, _) in enumerate(FIELDS))
    return load, store


_MODULE = '''"""Generated by gbxcule.kernels.gen from gbxcule.core.isa and gbxcule.kernels.templates. Do not edit."""
import warp as wp

from gbxcule.kernels.bus import INT_JOYPAD, INT_SERIAL, INT_TIMER, dma_sync, read8, serial_advance, write8
from gbxcule.kernels.cpu import (FLAG_C, FLAG_H, FLAG_N, FLAG_Z, alu, check_interrupts, condition, daa, dec8,
                                 flag_bit, get_r8, get_rr, inc8, pending_interrupts, pop16, push16, rotate,
                                 set_r8, set_rr, sp_offset)
from gbxcule.kernels.ppu import lcd_advance
from gbxcule.kernels.render import fill_frame
from gbxcule.kernels.state import BIG, Gb, Mem
from gbxcule.kernels.timer import timer_advance


@wp.func
def execute(g: wp.ref[Gb], m: Mem, op: wp.int32, fam: wp.int32, info: wp.int32, pc: wp.int32,
            nxt: wp.int32, imm: wp.int32, t0: wp.int32):
    cyc_nt = (info >> 8) & 0xFF
    a0 = ((info >> 16) & 15) * 4
    k0 = ((info >> 20) & 3) * 4
    a1 = ((info >> 22) & 15) * 4
    k1 = ((info >> 26) & 3) * 4
$DISPATCH


@wp.func
def step_instruction(g: wp.ref[Gb], m: Mem):
    """Fetch, decode and execute one instruction, then count down EI's delay."""
    t0 = g.cycles
    pc = g.pc
    op = read8(g, m, pc, t0, 0)
    base = pc
    if g.halt_bug != 0:
        g.halt_bug = 0
        base = (pc - 1) & 0xFFFF  # the byte after HALT is read again
    idx = op
    if op == 0xCB:
        op = read8(g, m, (base + 1) & 0xFFFF, t0, 4)
        idx = 256 + op
    fam = m.ops[idx]
    info = m.ops[512 + idx]
    length = (info >> 28) & 3
    imm = 0
    if idx < 256 and length >= 2:
        imm = read8(g, m, (base + 1) & 0xFFFF, t0, 4)
        if length == 3:
            imm = imm | (read8(g, m, (base + 2) & 0xFFFF, t0, 8) << 8)
    nxt = (base + length) & 0xFFFF
    g.pc = nxt
    g.cycles = t0 + (info & 0xFF)
    execute(g, m, op, fam, info, base, nxt, imm, t0)
    g.instructions = g.instructions + 1
    if g.ime_delay != 0:
        g.ime_delay = g.ime_delay - 1
        if g.ime_delay == 0:
            g.ime = 1
            g.bail = wp.where(pending_interrupts(g) != 0, 1, 0)


@wp.func
def cpu_batch(g: wp.ref[Gb], m: Mem, budget: wp.int32):
    """Run instructions for at least `budget` cycles (or until one ends the batch early)."""
    end = g.cycles + budget
    if g.locked != 0:
        g.cycles = end
        return
    if check_interrupts(g, m):
        g.halted = 0
    if g.halted != 0 and g.intr_queued != 0:
        g.halted = 0
        g.pc = (g.pc + 1) & 0xFFFF
    elif g.halted != 0:
        g.cycles = g.cycles + budget  # HALT: jump straight to the next event
    g.intr_queued = 0
    g.bail = 0
    while g.cycles < end and g.locked == 0:
        step_instruction(g, m)
        if g.bail != 0:
            break


@wp.func
def run_frame(g: wp.ref[Gb], m: Mem, stop_at_boot_exit: wp.int32):
    """Emulate until the PPU ends a frame; events are processed between CPU batches. With
    stop_at_boot_exit, return right after the instruction that unmaps the boot ROM."""
    g.frame_done = 0
    while g.frame_done == 0:
        if stop_at_boot_exit != 0 and g.bootrom == 0:
            return
        budget = wp.min(wp.min(g.timer_cti, g.lcd_cti), wp.min(g.lcd_ctf, g.serial_cti))
        cpu_batch(g, m, wp.max(4, budget))
        if g.dma_active != 0:
            dma_sync(g, m, g.cycles, 0)
        if serial_advance(g, g.cycles) != 0:
            g.if_ = g.if_ | INT_SERIAL
        if timer_advance(g, g.cycles) != 0:
            g.if_ = g.if_ | INT_TIMER
        g.if_ = g.if_ | lcd_advance(g, m, g.cycles)
    g.frames = g.frames + 1


@wp.func
def rebase(g: wp.ref[Gb]):
    """Keep cycle counts small: shift every absolute cycle field so that g.cycles is 0."""
    c = g.cycles
$REBASE


@wp.kernel(enable_backward=False)
def step_kernel(fields: wp.array(dtype=wp.int32), mem: Mem, actions: wp.array(dtype=wp.int32),
                masks: wp.array(dtype=wp.int32), num_actions: wp.int32, frames_per_step: wp.int32,
                release_after: wp.int32, stop_at_boot_exit: wp.int32, render: wp.int32):
    """Run every env one step. render: 0 draw nothing, 1 draw the step's last frame, 2 every frame."""
    e = wp.tid()
    n = mem.n_envs
    g = Gb()
$LOAD
    g.env = e
    g.n = n
    g.render = 0
    rebase(g)
    action = actions[e]
    if action < 0 or action >= num_actions:
        action = 0
    dpad = masks[action * 2]
    buttons = masks[action * 2 + 1]
    for frame in range(frames_per_step):
        if frame == 0:
            if release_after > 0 and (dpad | buttons) != 0:
                g.if_ = g.if_ | INT_JOYPAD  # buttons go down at the start of the step
            if release_after > 0:
                g.joy_dpad = 15 & ~dpad
                g.joy_buttons = 15 & ~buttons
            else:
                g.joy_dpad = 15
                g.joy_buttons = 15
        elif frame == release_after:
            g.joy_dpad = 15
            g.joy_buttons = 15
        draw = wp.where(render == 2 or (render == 1 and frame == frames_per_step - 1), 1, 0)
        if draw != 0 and g.render == 0 and g.screen_fill != 0:
            fill_frame(g, mem, g.screen_fill - 1)  # the screen was blanked while nothing was drawn
        g.render = draw
        run_frame(g, mem, stop_at_boot_exit)
        if stop_at_boot_exit != 0 and g.bootrom == 0:
            break
$STORE
'''


@cache
def kernel_source() -> str:
    load, store = _field_io_source()
    from gbxcule.kernels.state import CYCLE_FIELDS

    rebase = "\n".join(f"    g.{f} = g.{f} - c" for f in CYCLE_FIELDS)
    return (_MODULE.replace("$DISPATCH", _dispatch_source()).replace("$LOAD", load)
            .replace("$STORE", store).replace("$REBASE", rebase))


@cache
def load_kernels() -> ModuleType:
    """Write the generated module into the cache (named by its hash) and import it."""
    src = kernel_source()
    digest = hashlib.sha1((src + "|" + ",".join(TRANSIENT)).encode()).hexdigest()[:16]
    name = f"gbxcule_step_{digest}"
    folder = cache_dir() / "kernels"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    if not path.is_file() or path.read_text() != src:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(src)
        tmp.replace(path)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
