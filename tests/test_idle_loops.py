"""`kernels/idle.py`: which wait loops skip rounds, and by how much (exactness: the IDLE_LOOPS micro-ROM's
lockstep against PyBoy, tests/test_lockstep.py)."""

import numpy as np
import pytest
import warp as wp

from gbxcule.kernels.idle import idle_loop_skip
from gbxcule.kernels.state import Gb, Mem
from test_warp_core import backend, build

# loops at known addresses after `main` ($0150): read, ALU op, JR back
LOOPS = """
    jp main2
w_a16:  ; $0153: ld a,[$C010] / and a / jr z   (16 + 4 + 12 cycles)
    ld a, [$C010]
    and a
    jr z, w_a16
w_ldh:  ; $0159: ldh a,[$90] / cp 3 / jr nz      (12 + 8 + 12)
    ldh a, [$90]
    cp 3
    jr nz, w_ldh
w_hl:   ; $015F: ld a,[hl] / or a / jr z          (8 + 4 + 12)
    ld a, [hl]
    or a
    jr z, w_hl
w_ly:   ; $0163: ldh a,[rLY] / cp 100 / jr c      (12 + 8 + 12)
    ldh a, [$44]
    cp 100
    jr c, w_ly
w_io:   ; $0169: ldh a,[rJOYP] / and 1 / jr nz    (not a place that keeps still)
    ldh a, [$00]
    and 1
    jr nz, w_io
w_two:  ; $016F: two instructions between read and jump: not a recognised shape
    ld a, [$C010]
    and a
    nop
    jr z, w_two
main2:
    jr main2
"""
# head, jr_at, jr opcode, period (cycles of one round)
A16, LDH, HL, LY, IO, TWO = (0x153, 0x157, 0x28, 32), (0x159, 0x15D, 0x20, 32), (0x15F, 0x161, 0x28, 24), \
    (0x163, 0x167, 0x38, 32), (0x169, 0x16D, 0x20, 32), (0x16F, 0x174, 0x28, 36)
# per case: head, jr_at, jr_op, a, f, hl, end - cycles, ly, dma_active, ime_delay, wram[$C010], hram[$90]
COLS = 12


@wp.kernel(enable_backward=False)
def skip_cases(cases: wp.array2d(dtype=wp.int32), m: Mem, out: wp.array2d(dtype=wp.int32)):
    i = wp.tid()
    g = Gb()
    g.env = 0
    g.n = 1
    g.rom_bank = 1
    g.pc = cases[i, 0]
    g.a = cases[i, 3]
    g.f = cases[i, 4]
    g.h = cases[i, 5] >> 8
    g.l = cases[i, 5] & 0xFF
    g.cycles = 1000
    g.ly = cases[i, 7]
    g.dma_active = cases[i, 8]
    g.ime_delay = cases[i, 9]
    m.ram[0, m.wram + 0x10] = wp.uint8(cases[i, 10])
    m.ram[0, m.hram + 0x10] = wp.uint8(cases[i, 11])
    idle_loop_skip(g, m, 1000 + cases[i, 6], cases[i, 1], cases[i, 2])
    out[i, 0] = g.cycles - 1000
    out[i, 1] = g.instructions
    out[i, 5] = g.waited
    out[i, 2] = g.a
    out[i, 3] = g.f
    out[i, 4] = g.polling


def run(cases):
    b = backend(build(LOOPS))
    c = wp.array(np.array([list(x) for x in cases], dtype=np.int32), dtype=wp.int32, device="cpu")
    out = wp.zeros((len(cases), 6), dtype=wp.int32, device="cpu")
    for i in range(len(cases)):  # one at a time: the cases share env 0's RAM
        wp.launch(skip_cases, dim=1, inputs=[c[i:i + 1], b.mem, out[i:i + 1]], device="cpu")
    return out.numpy()


def case(loop, a=0, f=0x80, hl=0xC010, budget=1000, ly=0, dma=0, ime_delay=0, wram=0, hram=0):
    head, jr_at, jr_op, _ = loop
    return (head, jr_at, jr_op, a, f, hl, budget, ly, dma, ime_delay, wram, hram)


def test_fixed_points_skip_every_round_that_ends_before_the_batch():
    # (loop, registers that one round leaves as they are, expected period)
    cases = [case(A16, a=0, f=0xA0), case(LDH, a=1, f=0x70, hram=1), case(HL, a=0, f=0x80, hl=0xFF90),
             case(HL, a=0, f=0x80, hl=0xE010), case(HL, a=0, f=0x80, hl=0xFF44), case(LY, a=7, f=0x50, ly=7),
             case(A16, a=0, f=0xA0, budget=33), case(A16, a=0, f=0xA0, budget=64), case(A16, a=0, f=0xA0, budget=65)]
    periods = [A16[3], LDH[3], HL[3], HL[3], HL[3], LY[3], A16[3], A16[3], A16[3]]
    budgets = [1000] * 6 + [33, 64, 65]
    out = run(cases)
    for (cycles, instructions, a, f, _, waited), c, p, budget in zip(out, cases, periods, budgets, strict=True):
        rounds = (budget - 1) // p  # whole rounds that end before the batch does
        # each round's three instructions count, and go to `waited` too (the path key leaves them out)
        assert cycles == rounds * p and instructions == waited == 3 * rounds and (a, f) == (c[3], c[4])
    # polling: WRAM, HRAM and echo loops may run over whole PPU lines (frame.py run_frame); LY and STAT may not
    assert [int(x) for x in out[:, 4]] == [1, 1, 1, 1, 0, 0, 1, 1, 1]
    assert [int(x) for x in out[6:, 0]] == [32, 32, 64] and out[0, 0] == 31 * 32


@pytest.mark.parametrize("c", [
    case(A16, a=0, f=0x80),  # `and a` sets H: F=0x80 is not what a round leaves
    case(A16, a=1, f=0xA0),  # A is not the byte read (an interrupt changed the flag after the read)
    case(LDH, a=3, f=0xC0, hram=3),  # a fixed point, but the counter reached 3: JR NZ falls through
    case(HL, hl=0x8010),  # [HL] in VRAM: the PPU may block it
    case(IO, a=0, f=0xA0),  # the joypad register
    case(TWO, a=0, f=0xA0),  # not the shape
    case(A16, a=0, f=0xA0, dma=1),  # an OAM DMA runs
    case(A16, a=0, f=0xA0, ime_delay=1),  # EI's delay counts instructions
    case(A16, a=0, f=0xA0, budget=32),  # no whole round fits before the batch's end
])
def test_what_does_not_skip(c):
    cycles, instructions, a, f, polling, waited = run([c])[0]
    assert (cycles, instructions, a, f, waited) == (0, 0, c[3], c[4], 0)
    assert polling == (c[6] == 32)  # only the short batch is a fixed point (skipping no round)


def test_the_benchmark_counts_executed_instructions_apart_from_skipped_rounds():
    """harness/bench.py: `executed_per_s` is the emulated instructions/s less the skipped rounds' (IDLE_LOOPS
    waits in polling loops, so fewer are executed one by one than are counted); the backend's per-env counter of
    skipped instructions is the one the measure reads."""
    from gbxcule.core.cartridge import load_rom
    from gbxcule.core.schedule import ActionSchedule
    from gbxcule.harness.bench import measure
    from gbxcule.roms import resolve_rom

    rom = load_rom(str(resolve_rom("IDLE_LOOPS")))
    r = measure("warp_vec_cpu", rom, 2, 2, ActionSchedule(24, 8), "pokemonred_puffer_v1", warmup=1)
    assert 0 < r.executed_per_s < r.instructions_per_s
    b = backend(str(resolve_rom("IDLE_LOOPS")), 2, frames=24)
    b.step(np.zeros(2, dtype=np.int32))
    instructions, skipped = b.field_values("instructions"), b.skipped_instructions()
    assert (skipped > 0).all() and (skipped < instructions).all()
