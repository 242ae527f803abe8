"""Wait loops that poll memory: run as many of their rounds at once as fit before the batch's end.

Games that do not HALT wait in loops such as `.w: ld a,[flag]; and a; jr z,.w` (a flag the VBlank handler sets),
`ldh a,[rLY]; cp 144; jr nz` or `ldh a,[rSTAT]; and 2; jr nz`. Airaki and Carazu spend four fifths of their
instructions in one (`scripts/profile/pc_profile.py`). Inside a CPU batch nothing but the CPU changes what such a
loop reads: interrupts are dispatched only at a batch's start, the PPU changes LY and STAT only at its events, which end
batches, and WRAM and HRAM change only by CPU writes (the loop makes none; an OAM DMA writes only OAM, and no
round is skipped while one runs). ("Batch" here is the reference's: `end` is `g.batch_end`, the next of its
batch ends, also where the kernel's batch goes on over them, frame.py `batch_boundary`.) So once one round leaves
the registers as they were (a fixed point: the byte read, put through the test, gives back the same A and F, and
the jump is taken), every further round in the batch does the same, and k rounds only add k times their cycles
to the cycle count and their 3k instructions (read, test, jump) to the instruction count. The round that reaches
the batch's end still runs instruction by instruction, so the batch ends on the same instruction as without the
skip, and the state at every batch end is the same, bit for bit, wherever launches split a frame (sort_parts).

The skipped instructions also go to `g.waited`, which the step kernel adds to a per-env counter outside the
state at its end: the `path` sort key (sortkeys.py) subtracts it, so it sees the work an env did between its
waits, not how long it waited (+3% median on nine games: commit 2271f86). That work count does depend on where
launches end (each end runs one round one by one), which is why it is kept out of the state. (Reads of
LY and STAT in the skipped rounds all fall before the batch's end, so before the PPU's next event.)

A loop found at a fixed point polling WRAM or HRAM sets `g.polling`: such a loop cannot see the PPU either,
so the next batch may run over whole PPU lines as a halted CPU's does (frame.py run_frame, `lcd_skip_lines`).

The loop shapes recognised: a read into A (LD A,[a16], LDH A,[a8], LD A,[HL], LD A,[DE], LD A,[BC]), one ALU
operation on A (with an immediate or with A itself: AND 2, CP 144, OR A...), and a JR (conditional or not)
back to the read; the code in ROM, the byte read from WRAM (or its echo), HRAM, LY or STAT."""

import warp as wp

from gbxcule.kernels.cpu import alu, condition
from gbxcule.kernels.mbc import rom_fetch4
from gbxcule.kernels.state import Gb, Mem


@wp.func
def idle_read(g: wp.ref[Gb], m: Mem, a: wp.int32) -> wp.int32:
    """The byte a read of `a` gives now, where only the CPU changes it within a batch; -1 elsewhere (and for
    a STAT read that would clear its one-time mode override)."""
    row = wp.where(a >= 0xC000 and a < 0xFE00, m.wram + ((a - 0xC000) & 0x1FFF),
                   wp.where(a >= 0xFF80 and a < 0xFFFF, m.hram + (a - 0xFF80), -1))
    if row >= 0:
        return wp.int32(m.ram[g.env, row])
    if a == 0xFF44:
        return g.ly
    if a == 0xFF41 and g.stat_mode_override == 0:
        return g.stat
    return -1


@wp.func
def idle_loop_skip(g: wp.ref[Gb], m: Mem, end: wp.int32, jr_at: wp.int32, jr_op: wp.int32):
    """Called right after a JR at `jr_at` (opcode `jr_op`) jumped back to g.pc: if g.pc..jr_at is a polling
    loop (module docstring) at a fixed point whose jump is taken, add the cycles of as many rounds as end
    before `end`, the batch's end (the round that reaches it runs as usual, reads included)."""
    head = g.pc
    if g.bootrom != 0 or head >= 0x8000 or (head & 0x3FFF) > 0x3FF8 or g.dma_active != 0 or g.ime_delay != 0:
        return
    w = rom_fetch4(g, m, head)
    b0 = w & 0xFF
    reads = wp.where(b0 == 0xFA, 3, wp.where(b0 == 0xF0, 2, wp.where(b0 == 0x7E or b0 == 0x1A or b0 == 0x0A, 1, 0)))
    t = (w >> (8 * reads)) & 0xFF  # the ALU opcode after the read
    imm_form = (t & 0xC7) == 0xC6
    if reads == 0 or not (imm_form or (t & 0xC7) == 0x87) or ((jr_at - head) & 0xFFFF) != reads + wp.where(
            imm_form, 2, 1):
        return  # (most backward JRs leave here, after one ROM load: copy loops and the like)
    # the ALU op's immediate, if it has one (byte 4 lies in the same 16 KiB window: head is at most 0x3FF8 in)
    n = wp.where(reads == 3, rom_fetch4(g, m, head + 4), w >> (8 * reads + 8)) & 0xFF
    hl = (g.h << 8) | g.l
    addr = wp.where(b0 == 0xFA, (w >> 8) & 0xFFFF, wp.where(b0 == 0xF0, 0xFF00 | ((w >> 8) & 0xFF), wp.where(
        b0 == 0x7E, hl, wp.where(b0 == 0x1A, (g.d << 8) | g.e, (g.b << 8) | g.c))))
    v = idle_read(g, m, addr)
    if v < 0:
        return
    period = (m.ops[b0] & 0x1F) + (m.ops[t] & 0x1F) + (m.ops[jr_op] & 0x1F)  # (pack_info: cycles in bits 0-4)
    rounds = wp.max(0, (end - 1 - g.cycles) / period)  # whole rounds that end before the batch does
    a0 = g.a
    f0 = g.f
    g.a = v
    alu(g, (t >> 3) & 7, wp.where(imm_form, n, v))
    if g.a == a0 and g.f == f0 and (jr_op == 0x18 or condition(g, (jr_op >> 3) & 3)):
        g.cycles = g.cycles + rounds * period
        g.instructions = g.instructions + 3 * rounds
        g.waited = g.waited + 3 * rounds
        g.polling = wp.where(addr < 0xFF00 or addr >= 0xFF80, 1, 0)  # (not LY or STAT, which the PPU changes)
    g.a = a0
    g.f = f0
