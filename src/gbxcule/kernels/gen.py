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


# Template names of the sequencer's scratch values become fields of its `Seq` struct (see run_op).
_SEQ_NAME = re.compile(rf"(?<![.\w])({'|'.join(SEQ_FIELDS)})(?!\w)")


def _tree(part: str, fams: list[tuple[str, int]], indent: int) -> str:
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
    return textwrap.indent("\n".join(lines) or "pass", " " * indent)


def _template_sources() -> dict[str, str]:
    ids = family_ids()
    missing = sorted(set(ids) - set(TEMPLATES))
    if missing:
        raise RuntimeError(f"no template for instruction families: {missing}")
    fams = sorted(ids.items(), key=lambda kv: kv[1])
    return {"$PRE": _tree("pre", fams, 12), "$MID": _tree("mid", fams, 16), "$POST": _tree("post", fams, 4),
            "$DISPATCH_FAM": str(ids[DISPATCH]),
            "$SEQ_INIT": "\n".join(f"    s.{name} = 0" for name in SEQ_FIELDS)}


def _field_io_source() -> tuple[str, str]:
    # env-major: env e's fields are the consecutive words fields[e * NUM_FIELDS ...] (core/schema.py)
    load = "\n".join(f"    g.{name} = fields[e * {NUM_FIELDS} + {i}]" for i, (name, _) in enumerate(FIELDS))
    store = "\n".join(f"    fields[e * {NUM_FIELDS} + {i}] = g.{name}" for i, (name, _) in enumerate(FIELDS))
    return load, store


_MODULE = '''"""Generated by gbxcule.kernels.gen from gbxcule.core.isa and gbxcule.kernels.templates. Do not edit."""
import warp as wp

from gbxcule.kernels.bus import (
    INT_JOYPAD,
    INT_SERIAL,
    INT_TIMER,
    bus_access,
    dma_copy_plain,
    dma_plain_source,
    dma_sync,
    serial_advance,
)
from gbxcule.kernels.cpu import (FLAG_C, FLAG_H, FLAG_N, FLAG_Z, alu, cb_op, check_interrupts, condition, daa,
                                 flag_bit, get_r8, get_rr, incdec8, interrupt_vector, pending_interrupts,
                                 set_r8, set_rr, sp_offset)
from gbxcule.kernels.idle import idle_loop_skip
from gbxcule.kernels.lanes import lanes_ready
from gbxcule.kernels.mbc import rom_fetch4, rtc_advance
from gbxcule.kernels.ppu import ST_ADVANCE_LY, lcd_advance, lcd_skip_lines, lcd_tick_light, sprite_bands_refresh
from gbxcule.kernels.render import fill_frame
from gbxcule.kernels.state import BIG, Gb, Mem, Seq
from gbxcule.kernels.timer import timer_advance


@wp.func
def run_op(g: wp.ref[Gb], s: wp.ref[Seq], m: Mem, dispatch: wp.int32, end: wp.int32):
    """Execute one instruction at PC, or (dispatch != 0) the interrupt dispatch.

    One loop performs every memory access of the operation through the single bus path: first the
    opcode fetch (1-3 bytes; 0xCB fetches its second byte), then the template's access slots. The
    template's `pre` part runs once the fetch is complete, `mid` between the slots, `post` at the end.

    The values the templates and the loop set inside branches live in the scratch struct `s` (by
    reference), not in locals: Warp merges a local assigned in a branch with a select that runs on every
    path, and the family tree made hundreds of them (docs/kernel_style.md)."""
    t0 = g.cycles
    pc = g.pc
$SEQ_INIT
    s.base = pc
    s.n_fetch = 1
    if dispatch != 0:
        s.n_fetch = 0
        s.fam = $DISPATCH_FAM
    elif g.halt_bug != 0:
        g.halt_bug = 0
        s.base = (pc - 1) & 0xFFFF  # the byte after HALT is read again
    elif g.bootrom == 0 and pc < 0x8000 and (pc & 0x3FFF) < 0x3FFE:
        # Fast path: the whole instruction lies in one ROM bank window, whose reads have no side effects to
        # time: its bytes come in one load (before the opcode's length is known).
        word = rom_fetch4(g, m, pc)
        b1 = (word >> 8) & 0xFF
        s.op = wp.where((word & 0xFF) == 0xCB, b1, word & 0xFF)
        s.info = m.ops[wp.where((word & 0xFF) == 0xCB, 256 + b1, s.op)]
        s.fam = s.info >> 24
        s.imm = wp.where(((s.info >> 22) & 3) == 3, (word >> 8) & 0xFFFF, b1)
        s.n_fetch = 0
    k = wp.int32(0)
    while True:
        if s.ready == 0 and k >= s.n_fetch:
            if dispatch == 0:
                s.nxt = (s.base + ((s.info >> 22) & 3)) & 0xFFFF
                g.pc = s.nxt
                g.cycles = t0 + (s.info & 0x1F)
$PRE
            s.ready = 1
        slot = k - s.n_fetch
        if s.ready != 0 and slot >= s.n_acc:
            break
        # The access of this round by selects, not branches: lanes fetching, in slot 0 and in slot 1 (each
        # slot's timing (a, k) from pack_info) stay together up to bus_access (commit d9d30ac).
        acc = s.ready != 0
        first = slot == 0
        s.addr = wp.where(acc, wp.where(first, s.ad0, s.ad1), wp.where(k == 0, pc, (s.base + k) & 0xFFFF))
        s.value = wp.where(acc, wp.where(first, s.wv0, s.wv1), 0)
        s.write = wp.where(acc, wp.where(first, s.wmask, s.wmask >> 1) & 1, 0)
        s.when = t0 + wp.where(acc, ((s.info >> wp.where(first, 10, 16)) & 15) * 4, 0)
        s.mao = wp.where(acc, ((s.info >> wp.where(first, 14, 20)) & 3) * 4, 4 * k)
        r = bus_access(g, m, s.addr, s.value, s.write, s.when, s.mao)
        s.rv0 = wp.where(acc and first, r, s.rv0)
        s.rv1 = wp.where(acc and not first, r, s.rv1)
        if s.ready == 0:
            if k == 0:
                s.op = r
                if r == 0xCB:
                    s.n_fetch = 2
                else:
                    s.info = m.ops[r]
                    s.fam = s.info >> 24
                    s.n_fetch = (s.info >> 22) & 3
            elif k == 1 and s.op == 0xCB:
                s.op = r
                s.info = m.ops[256 + r]
                s.fam = s.info >> 24
            elif k == 1:
                s.imm = r
            else:
                s.imm = s.imm | (r << 8)
        elif first:
            if s.n_acc > 1:
$MID
        k = k + 1
$POST


@wp.func
def batch_start(g: wp.ref[Gb], m: Mem, budget: wp.int32) -> wp.int32:
    """Start a CPU batch of at least `budget` cycles (it ends at g.batch_end, or earlier when an instruction
    ends it): a pending interrupt is dispatched first (g.dispatch), and a halted CPU jumps straight to the
    batch's end. Returns 1 when instructions follow (`batch_op`), 0 when the batch is already over."""
    g.batch_end = g.cycles + budget
    g.dispatch = 0
    if g.locked != 0:
        g.cycles = g.batch_end
        return 0
    woke = check_interrupts(g)
    if woke != 0:
        g.halted = 0
    g.dispatch = wp.where(woke == 2, 1, 0)
    if g.halted != 0 and g.intr_queued != 0:
        g.halted = 0
        g.pc = (g.pc + 1) & 0xFFFF
    elif g.halted != 0:
        g.cycles = g.cycles + budget  # HALT: jump straight to the next event
    g.intr_queued = 0
    g.bail = 0
    g.polling = 0
    return wp.where(g.dispatch != 0 or (g.cycles < g.batch_end and g.locked == 0), 1, 0)


@wp.func
def batch_op(g: wp.ref[Gb], s: wp.ref[Seq], m: Mem) -> wp.int32:
    """Run the batch's next instruction (or its interrupt dispatch); returns 1 when the batch goes on."""
    run_op(g, s, m, g.dispatch, g.batch_end)
    if g.dispatch != 0:
        g.dispatch = 0
        g.bail = 0  # writes made by the dispatch do not end the batch
    else:
        g.instructions = g.instructions + 1
        if g.ime_delay != 0:
            g.ime_delay = g.ime_delay - 1
            if g.ime_delay == 0:
                g.ime = 1
                g.bail = wp.where(pending_interrupts(g) != 0, 1, 0)
    if g.bail == 0 and g.cycles < g.batch_end and g.locked == 0:
        return 1
    return batch_boundary(g, m, 0)  # the reference's batch ends here: go on when that changes nothing


@wp.func
def batch_boundary(g: wp.ref[Gb], m: Mem, halted_ok: wp.int32) -> wp.int32:
    """The reference ends a CPU batch here (g.batch_end reached, or the instruction bailed). Returns 1 when its
    end and the next batch's start are done right here and the batch goes on, 0 when the batch ends (the event
    code outside the instruction loop then does them).

    At a batch end the reference catches the timer, serial port, OAM DMA and PPU up, and the next batch's start
    checks interrupts and computes the batch's end. Where none of that can do more than the PPU's light
    transitions (`ppu.lcd_tick_light`), it is done here: within `g.batch_cap` (set by `batch_next`: -1 for
    batches that never go on), no OAM DMA, the CPU neither halted nor polling (`lcd_skip_lines` needs the
    event code), short of the next timer or serial event (whose catch-ups stay lazy, exact as at any access),
    and no interrupt the start would see (`check_interrupts`: nothing pending, or the EI delay running). The
    next end is then the reference's, from the same distances. So a busy CPU ends one batch a line (nested loop,
    `batch_next`) instead of four: the warp's lanes wait for each other, and walk the event code, that much less
    often. The sequence of batch ends, and every state, is the reference's, bit for bit (docs/timing.md).

    With `halted_ok` (a constant: 1 from `batch_next` only, so the instruction loop's copy has none of it) a
    halted CPU goes on too (no EI delay, nothing pending; the caller jumps it to the new end), except where
    `lcd_skip_lines` could skip whole lines from here (right after a visible line's mode 0 started, no STAT
    source on): on VBlank lines, and lines the skip refuses, it walked the event code at every transition."""
    y = g.cycles
    if y >= g.batch_cap or g.locked != 0 or g.polling != 0 or g.dma_active != 0 or g.frame_done != 0 or (
            g.halted != 0 and (halted_ok == 0 or g.ime_delay != 0)):
        return 0  # (frame_done: a PPU catch-up inside the batch ended the frame)
    # The next timer or serial event (cycle counts; cti <= BIG). A pending TIMA reload raises its interrupt even
    # with the timer stopped, which the prediction (the reference's) leaves out: the batch ends.
    events = wp.min(g.timer_last + g.timer_cti, g.serial_last + g.serial_cti)
    if y >= events or g.tima_reload != 0 or lcd_tick_light(g, m, y, 1 - $NESTED) == 0:
        return 0
    if g.ime_delay == 0 and pending_interrupts(g) != 0:
        return 0
    if halted_ok != 0 and g.halted != 0 and g.stat_transition == ST_ADVANCE_LY and g.ly < 142 and (
            g.stat & 0x38) == 0:
        return 0  # lcd_skip_lines may skip lines from here
    g.bail = 0
    g.batch_end = y + wp.max(4, wp.min(events - y, wp.min(g.lcd_cti, g.lcd_ctf)))
    return 1


@wp.func
def batch_next(g: wp.ref[Gb], m: Mem, stop_dot: wp.int32) -> wp.int32:
    """Between batches: a halted CPU that nothing can wake skips whole PPU lines at once (`lcd_skip_lines`;
    then no batch runs and 0 is returned), else the next batch starts (`batch_start`), up to the next event.
    A batch may go on over later batch ends (`batch_boundary`) up to the launch's stop (`stop_dot`, run_frame);
    on a drawn frame too, where each line's mode 0 start, which draws it, still ends the batch."""
    skipped = wp.int32(0)
    if (g.halted != 0 or g.polling != 0) and g.dma_active == 0 and g.ime_delay == 0 and (
            pending_interrupts(g) == 0):
        skipped = lcd_skip_lines(g, m, wp.min(g.timer_cti, g.serial_cti))  # HALT (or a wait loop): lines
    if skipped != 0 and g.halted != 0:
        g.cycles = g.cycles + skipped
        return 0
    # (a CPU in a wait loop that polls WRAM or HRAM, which the PPU cannot change, runs up to the skipped
    # lines' end in one batch: kernels/idle.py)
    g.batch_cap = -1
    if skipped == 0 and g.dma_active == 0 and g.bootrom == 0:
        g.batch_cap = wp.where(stop_dot < BIG, g.cycles + wp.max(0, stop_dot - g.lcd_clock), BIG)
        if $NESTED != 0:
            # nested loop: up to the next mode 3's start at most (dot 80 of a line; where sprites are on the line,
            # the batch ends there anyway), so that the busy lanes of a warp end their batches together (a lane on
            # longer batches than its neighbours' would make them wait)
            g.batch_cap = wp.min(g.batch_cap, g.cycles + 456 - (g.lcd_clock + 376) % 456)
    budget = wp.min(wp.min(g.timer_cti, g.lcd_cti), wp.min(g.lcd_ctf, g.serial_cti))
    go = batch_start(g, m, wp.where(skipped != 0, skipped, wp.max(4, budget)))
    if go == 0 and g.halted != 0:
        while batch_boundary(g, m, 1) != 0:
            g.cycles = g.batch_end  # HALT: jump straight to the next end (as batch_start)
    return go


@wp.func
def batch_events(g: wp.ref[Gb], m: Mem):
    """After a batch: OAM DMA, the serial port, the timer and the PPU catch up to the CPU."""
    if g.dma_active != 0 and dma_plain_source(g):
        dma_copy_plain(g, m, wp.max(g.cycles, g.dma_mark))  # (with any bytes owed to HRAM accesses)
    elif g.dma_active != 0:
        dma_sync(g, m, g.cycles, 0, 0)
    if serial_advance(g, g.cycles) != 0:
        g.if_ = g.if_ | INT_SERIAL
    if timer_advance(g, g.cycles) != 0:
        g.if_ = g.if_ | INT_TIMER
    sprite_bands_refresh(g, m)  # (after OAM writes and DMA: the bands mode 3's start looks up)
    lcd_advance(g, m, g.cycles, 1)


@wp.func
def cpu_batch(g: wp.ref[Gb], m: Mem):
    """Run the batch `batch_next` started to its end, one instruction after another (the nested loop)."""
    s = Seq()
    go = wp.int32(1)
    while go != 0:
        go = batch_op(g, s, m)


@wp.func
def run_frame(g: wp.ref[Gb], m: Mem, stop_at_boot_exit: wp.int32, fresh: wp.int32, stop_dot: wp.int32):
    """Emulate until the PPU ends a frame: CPU batches, each up to the next event, with the events processed
    between them. With stop_at_boot_exit, return right after the instruction that unmaps the boot ROM.
    A frame may run in parts (the backend's sort_parts): `fresh` 0 continues the frame an earlier part
    stopped (nothing, if it ended there), and a part stops between two batches once the PPU's dot count
    in the frame reaches `stop_dot` (BIG: run to the frame's end). Stopping between batches and
    going on later is the same computation, so results do not depend on the parts.
    The instruction loop is "$LOOP" (kernel_source's `flat`); a lane runs the same computation either way."""
    if fresh != 0:
        g.frame_done = 0
    elif g.frame_done != 0:
        return  # the frame ended in an earlier part
$FRAME_LOOP
    if g.frame_done != 0:
        g.frames = g.frames + 1


@wp.func
def thread_env(perm: wp.array(dtype=wp.int32), t: wp.int32, n: wp.int32) -> wp.int32:
    """The env thread t runs: perm[t] when the backend sorted the envs (perm holds n entries), else t."""
    e = t
    if perm.shape[0] == n:
        e = perm[t]
        if e < 0 or e >= n:
            e = t
    return e


@wp.func
def rebase(g: wp.ref[Gb]):
    """Keep cycle counts small: shift every absolute cycle field so that g.cycles is 0. The RTC's
    last-access count is the one that can lag far behind (it moves only on RTC accesses): past 2^30
    cycles (256 s) it is caught up first, so the int32 difference never wraps."""
    if g.cycles - g.rtc_last > 0x40000000:
        rtc_advance(g, g.cycles)
    c = g.cycles
$REBASE


@wp.kernel(enable_backward=False$KERNEL_OPTIONS)
def step_kernel(fields: wp.array(dtype=wp.int32), mem: Mem, actions: wp.array(dtype=wp.int32),
                masks: wp.array(dtype=wp.int32), num_actions: wp.int32, frame_begin: wp.int32,
                frame_end: wp.int32, frames_per_step: wp.int32, release_after: wp.int32,
                stop_at_boot_exit: wp.int32, render: wp.int32,
                rewards: wp.array(dtype=wp.float32), reward_lo: wp.int32,
                reward_hi: wp.int32, perm: wp.array(dtype=wp.int32), resume: wp.int32, stop_dot: wp.int32,
                waited: wp.array(dtype=wp.int32)):
    """Run frames [frame_begin, frame_end) of a step of frames_per_step frames in every env (a step may
    take several launches). render: 0 draw nothing, 1 draw the step's last frame, 2 every frame.
    Thread t runs env perm[t] when perm holds n entries (envs grouped by state share warps), else env t.
    A frame may take several launches too: `resume` 1 continues frame_begin where the last launch left it,
    and the last frame stops at PPU dot `stop_dot` (BIG: at its end; see run_frame).
    Epilogue "$STAGE": after the step's last frame it writes $STAGE_WRITES."""
    t = wp.tid()
    n = mem.n_envs
    e = thread_env(perm, t, n)
    g = Gb()
$LOAD
    g.env = e
    g.n = n
    g.render = 0
    g.dma_mark = -1
    g.polling = 0
    g.waited = 0
    g.spr_ok = 0
    if frame_begin == 0 and resume == 0:
        rebase(g)  # cycle fields count from the start of the step, however many launches it takes
    action = actions[e]
    if action < 0 or action >= num_actions:
        action = 0
    dpad = masks[action * 2]
    buttons = masks[action * 2 + 1]
    for frame in range(frame_begin, frame_end):
        fresh = wp.where(resume != 0 and frame == frame_begin, 0, 1)
        if fresh == 0:
            pass  # the frame's start ran in an earlier launch
        elif frame == 0:
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
        draw = $DRAW
        if fresh != 0 and draw != 0 and g.render == 0 and g.screen_fill != 0:
            fill_frame(g, mem, g.screen_fill - 1)  # the screen was blanked while nothing was drawn
        g.render = draw
        run_frame(g, mem, stop_at_boot_exit, fresh, wp.where(frame == frame_end - 1, stop_dot, BIG))
        if stop_at_boot_exit != 0 and g.bootrom == 0:
            break
$EPILOGUE
    # The env index again, from memory: store addresses computed afresh here cost less than keeping the
    # load's 64-bit addresses live (spilled) through the whole step.
    e = thread_env(perm, t, n)
$STORE
    if g.waited != 0:
        waited[e] = waited[e] + g.waited  # (wraps, as `instructions` does)
'''


# The step kernel's epilogue per stage. The observation of `obs_only` and `full_step` is not written here:
# the backend launches `render.obs_kernel` after the step, one thread per 4 pixels, whose loads and stores
# coalesce (inside the step kernel, a thread per env read its own frame 23 KB from its neighbours': a
# quarter of the drawn launch's time on OVERWORLD, commit a4a51fb). Stages that differ only in
# the observation share one kernel.
_REWARD_V0 = """
    # reward v0: (A + the bytes of WRAM[reward_lo, reward_hi)) mod 256, scaled to [0, 1]
    acc = g.a
    i = reward_lo
    while i < reward_hi:
        acc = acc + wp.int32(mem.ram[g.env, mem.wram + ((i - 0xC000) & 0x1FFF)])
        i = i + 1
    rewards[e] = wp.float32(acc & 0xFF) / 255.0"""
_EPILOGUES: dict[str, tuple[str, str]] = {"none": ("", "nothing"), "reward": (_REWARD_V0, "rewards")}
STAGES: dict[str, str] = {"emulate_only": "none", "reward_only": "reward", "obs_only": "none", "full_step": "reward"}


_DRAW = "wp.where(render == 2 or (render == 1 and frame == frames_per_step - 1), 1, 0)"


# The loops of run_frame. "nested": each lane runs its batch to the end, and a warp goes on to the
# events once all its lanes have (the lanes whose batch ended first idle meanwhile). "flat": a warp leaves the
# loop as soon as one of its lanes has ended its batch (a warp vote, kernels/lanes.py); those lanes process their
# events and start their next batch while the others go on with theirs, so a warp's lanes need not wait for
# its slowest batch, at the price of walking the event code more often with fewer lanes (commit 9ca8808: Tobu
# Tobu Girl +38% over nested, three other games -10% to -24%; docs/divergence.md; backends/warp_vec.py `loop`).
# The nested loop keeps `cpu_batch` around its own instruction loop: one loop built from the same pieces ran 3-5%
# slower on three games.
_FRAME_LOOPS = {
    False: ("nested", """
    while g.frame_done == 0:
        if stop_at_boot_exit != 0 and g.bootrom == 0:
            return
        if batch_next(g, m, stop_dot) != 0:
            cpu_batch(g, m)
        batch_events(g, m)
        if g.frame_done == 0 and g.lcd_clock >= stop_dot:
            break"""),
    True: ("flat", """
    if stop_at_boot_exit != 0 and g.bootrom == 0:
        return
    s = Seq()
    go = batch_next(g, m, stop_dot)
    while True:
        while lanes_ready(go) == 0:  # every lane of the warp leaves together, once one has ended its batch
            if go != 0:
                go = batch_op(g, s, m)
        if go == 0:
            batch_events(g, m)
            if g.frame_done != 0 or g.lcd_clock >= stop_dot:
                break
            if stop_at_boot_exit != 0 and g.bootrom == 0:
                return
            go = batch_next(g, m, stop_dot)"""),
}


@cache
def kernel_source(max_registers: int | None = None, stage: str = "emulate_only", draws: bool = True,
                  flat: bool = False) -> str:
    """The generated module for one stage (stages with the same epilogue give the same source).
    `max_registers` caps the CUDA registers per thread (None: the compiler's choice); lower caps trade
    spills for occupancy, and lose (BENCHMARKS.md, "Tried and not kept"). `draws=False` builds
    the lean kernel for frames that draw nothing: the render argument is ignored, `g.render` is always
    0, and the compiler drops the renderer (on CUDA 30% of the code and three quarters of the spill stack).
    `flat` picks run_frame's instruction loop (`_FRAME_LOOPS`)."""
    epilogue, writes = _EPILOGUES[STAGES[stage]]
    load, store = _field_io_source()
    rebase = "\n".join(f"    g.{f} = g.{f} - c" for f in CYCLE_FIELDS)
    src = _MODULE.replace("$LOAD", load).replace("$STORE", store).replace("$REBASE", rebase)
    src = src.replace("$KERNEL_OPTIONS", f", cuda_max_registers={max_registers}" if max_registers else "")
    if epilogue:  # only the launch that ends the step writes the stage outputs
        epilogue = "    if frame_end >= frames_per_step and stop_dot == BIG:" + textwrap.indent(epilogue, "    ")
    src = src.replace("$DRAW", _DRAW if draws else "0")
    loop, frame_loop = _FRAME_LOOPS[bool(flat)]
    src = src.replace("$LOOP", loop).replace("$FRAME_LOOP", frame_loop.strip("\n"))
    # $NESTED: the batch cap at each line's mode 3 (batch_next) only in the nested loop (in the flat one, where lanes
    # need not wait for each other's batch ends, it ran 2.3-5.9% slower than none: docs/divergence.md, "What did not
    # work"); and the OAM scan inside the batch (batch_boundary's lcd_tick_light, `scan`) only in the flat loop, whose
    # batches do not stop at mode 3 (Tobu Tobu Girl +2.0%: commit 29665e3).
    src = src.replace("$NESTED", "0" if flat else "1")
    src = src.replace("$EPILOGUE", epilogue).replace("$STAGE_WRITES", writes).replace("$STAGE", STAGES[stage])
    for key, text in _template_sources().items():
        src = src.replace(key, text)
    return src


@cache
def load_kernels(max_registers: int | None = None, stage: str = "emulate_only", draws: bool = True,
                 flat: bool = False) -> ModuleType:
    """Write the generated module into the cache (named by its hash) and import it."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
    first = next(s for s in STAGES if STAGES[s] == STAGES[stage])  # one module per epilogue
    if first != stage:
        return load_kernels(max_registers, first, draws, flat)
    src = kernel_source(max_registers, stage, draws, flat)
    digest = hashlib.sha1((src + "|" + ",".join(TRANSIENT)).encode()).hexdigest()[:16]
    name = f"gbxcule_step_{digest}"
    path = cache_dir() / "kernels" / f"{name}.py"
    if not path.is_file() or path.read_text() != src:
        write_output(path, src)  # a temporary file of its own: processes building the same module never collide
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
