"""A frame of one Game Boy: the instruction sequencer, CPU batches up to the next event, and the events.

`frame_func` builds `run_frame` for one instruction loop around the generated family dispatch (kernels/gen.py
`load_ops`); the step kernel (kernels/step.py) calls it once a frame. Its functions go into the Warp module of
the step kernel that calls them, so each variant is its own compiled module; `wp.static` switches decide the
variant's code when Warp generates it.

The loops of run_frame. "nested": each lane runs its batch to the end, and a warp goes on to the events once all
its lanes have (the lanes whose batch ended first idle meanwhile). "flat": a warp leaves the loop as soon as one
of its lanes has ended its batch (a warp vote, kernels/lanes.py); those lanes process their events and start
their next batch while the others go on with theirs, so a warp's lanes need not wait for its slowest batch, at
the price of walking the event code more often with fewer lanes (Tobu Tobu Girl +38% over nested, three other
games -10% to -24%: docs/divergence.md; backends/warp_vec.py `loop`). The nested loop keeps `cpu_batch`
around its own instruction loop: one loop built from the same pieces ran 3-5% slower on three games.
"""

from __future__ import annotations

from types import ModuleType

import warp as wp

from gbxcule.kernels.bus import (
    INT_SERIAL,
    INT_TIMER,
    bus_access,
    dma_copy_plain,
    dma_plain_source,
    dma_sync,
    serial_advance,
)
from gbxcule.kernels.cpu import check_interrupts, pending_interrupts
from gbxcule.kernels.lanes import lanes_ready
from gbxcule.kernels.mbc import rom_fetch4
from gbxcule.kernels.ppu import ST_ADVANCE_LY, lcd_advance, lcd_skip_lines, lcd_tick_light, sprite_bands_refresh
from gbxcule.kernels.state import BIG, Gb, Mem, Seq
from gbxcule.kernels.timer import timer_advance


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


def frame_func(module: str, ops: ModuleType, flat: bool):
    """`run_frame` with the flat or the nested instruction loop, and the sequencer (`run_op`) over the family
    dispatch `ops` (kernels/gen.py `load_ops`). Its functions are registered in the Warp module `module`.

    `flat` also decides two details of the batches: the batch cap at each line's mode 3 (batch_next) only in the
    nested loop (in the flat one, where lanes need not wait for each other's batch ends, it ran 2.3-5.9% slower
    than none, docs/divergence.md); and the OAM scan inside the batch (batch_boundary's lcd_tick_light,
    `scan`) only in the flat loop, whose batches do not stop at mode 3 (Tobu Tobu Girl +2.0%, commit 29665e3)."""
    nested = 0 if flat else 1  # captured: a literal in the generated code, whose tests the compiler folds
    seq_clear, op_pre, op_mid, op_post = ops.seq_clear, ops.op_pre, ops.op_mid, ops.op_post
    dispatch_family = ops.DISPATCH_FAMILY

    @wp.func(module=module, name="run_op")
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
        seq_clear(s)
        s.base = pc
        s.n_fetch = 1
        if dispatch != 0:
            s.n_fetch = 0
            s.fam = dispatch_family
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
                op_pre(g, s, m, pc, t0, end)
                s.ready = 1
            slot = k - s.n_fetch
            if s.ready != 0 and slot >= s.n_acc:
                break
            # The access of this round by selects, not branches: lanes fetching, in slot 0 and in slot 1 (each
            # slot's timing (a, k) from pack_info) stay together up to bus_access (docs/divergence.md).
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
                    op_mid(g, s, m, pc, t0, end)
            k = k + 1
        op_post(g, s, m, pc, t0, end)

    @wp.func(module=module, name="batch_boundary")
    def batch_boundary(g: wp.ref[Gb], m: Mem, halted_ok: wp.int32) -> wp.int32:
        """The reference ends a CPU batch here (g.batch_end reached, or the instruction bailed). Returns 1 when
        its end and the next batch's start are done right here and the batch goes on, 0 when the batch ends (the
        event code outside the instruction loop then does them).

        At a batch end the reference catches the timer, serial port, OAM DMA and PPU up, and the next batch's
        start checks interrupts and computes the batch's end. Where none of that can do more than the PPU's light
        transitions (`ppu.lcd_tick_light`), it is done here: within `g.batch_cap` (set by `batch_next`: -1 for
        batches that never go on), no OAM DMA, the CPU neither halted nor polling (`lcd_skip_lines` needs the
        event code), short of the next timer or serial event (whose catch-ups stay lazy, exact as at any access),
        and no interrupt the start would see (`check_interrupts`: nothing pending, or the EI delay running). The
        next end is then the reference's, from the same distances. So a busy CPU ends one batch a line (nested
        loop, `batch_next`) instead of four: the warp's lanes wait for each other, and walk the event code, that
        much less often. The sequence of batch ends, and every state, is the reference's, bit for bit
        (docs/timing.md).

        With `halted_ok` (a constant: 1 from `batch_next` only, so the instruction loop's copy has none of it) a
        halted CPU goes on too (no EI delay, nothing pending; the caller jumps it to the new end), except where
        `lcd_skip_lines` could skip whole lines from here (right after a visible line's mode 0 started, no STAT
        source on): on VBlank lines, and lines the skip refuses, it walked the event code at every transition."""
        y = g.cycles
        if y >= g.batch_cap or g.locked != 0 or g.polling != 0 or g.dma_active != 0 or g.frame_done != 0 or (
                g.halted != 0 and (halted_ok == 0 or g.ime_delay != 0)):
            return 0  # (frame_done: a PPU catch-up inside the batch ended the frame)
        # The next timer or serial event (cycle counts; cti <= BIG). A pending TIMA reload raises its interrupt
        # even with the timer stopped, which the prediction (the reference's) leaves out: the batch ends.
        events = wp.min(g.timer_last + g.timer_cti, g.serial_last + g.serial_cti)
        if y >= events or g.tima_reload != 0 or lcd_tick_light(g, m, y, 1 - nested) == 0:
            return 0
        if g.ime_delay == 0 and pending_interrupts(g) != 0:
            return 0
        if halted_ok != 0 and g.halted != 0 and g.stat_transition == ST_ADVANCE_LY and g.ly < 142 and (
                g.stat & 0x38) == 0:
            return 0  # lcd_skip_lines may skip lines from here
        g.bail = 0
        g.batch_end = y + wp.max(4, wp.min(events - y, wp.min(g.lcd_cti, g.lcd_ctf)))
        return 1

    @wp.func(module=module, name="batch_op")
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

    @wp.func(module=module, name="batch_next")
    def batch_next(g: wp.ref[Gb], m: Mem, stop_dot: wp.int32) -> wp.int32:
        """Between batches: a halted CPU that nothing can wake skips whole PPU lines at once (`lcd_skip_lines`;
        then no batch runs and 0 is returned), else the next batch starts (`batch_start`), up to the next event.
        A batch may go on over later batch ends (`batch_boundary`) up to the launch's stop (`stop_dot`,
        run_frame); on a drawn frame too, where each line's mode 0 start, which draws it, still ends the batch."""
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
            if nested != 0:
                # nested loop: up to the next mode 3's start at most (dot 80 of a line; where sprites are on the
                # line, the batch ends there anyway), so that the busy lanes of a warp end their batches together
                # (a lane on longer batches than its neighbours' would make them wait)
                g.batch_cap = wp.min(g.batch_cap, g.cycles + 456 - (g.lcd_clock + 376) % 456)
        budget = wp.min(wp.min(g.timer_cti, g.lcd_cti), wp.min(g.lcd_ctf, g.serial_cti))
        go = batch_start(g, m, wp.where(skipped != 0, skipped, wp.max(4, budget)))
        if go == 0 and g.halted != 0:
            while batch_boundary(g, m, 1) != 0:
                g.cycles = g.batch_end  # HALT: jump straight to the next end (as batch_start)
        return go

    @wp.func(module=module, name="cpu_batch")
    def cpu_batch(g: wp.ref[Gb], m: Mem):
        """Run the batch `batch_next` started to its end, one instruction after another (the nested loop)."""
        s = Seq()
        go = wp.int32(1)
        while go != 0:
            go = batch_op(g, s, m)

    @wp.func(module=module, name="run_frame")
    def run_frame(g: wp.ref[Gb], m: Mem, stop_at_boot_exit: wp.int32, fresh: wp.int32, stop_dot: wp.int32):
        """Emulate until the PPU ends a frame: CPU batches, each up to the next event, with the events processed
        between them. With stop_at_boot_exit, return right after the instruction that unmaps the boot ROM.
        A frame may run in parts (the backend's sort_parts): `fresh` 0 continues the frame an earlier part
        stopped (nothing, if it ended there), and a part stops between two batches once the PPU's dot count
        in the frame reaches `stop_dot` (BIG: run to the frame's end). Stopping between batches and
        going on later is the same computation, so results do not depend on the parts.
        The instruction loop is the nested or the flat one (`frame_func`); a lane runs the same computation
        either way."""
        if fresh != 0:
            g.frame_done = 0
        elif g.frame_done != 0:
            return  # the frame ended in an earlier part
        if wp.static(flat):
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
                    go = batch_next(g, m, stop_dot)
        else:
            while g.frame_done == 0:
                if stop_at_boot_exit != 0 and g.bootrom == 0:
                    return
                if batch_next(g, m, stop_dot) != 0:
                    cpu_batch(g, m)
                batch_events(g, m)
                if g.frame_done == 0 and g.lcd_clock >= stop_dot:
                    break
        if g.frame_done != 0:
            g.frames = g.frames + 1

    return run_frame
