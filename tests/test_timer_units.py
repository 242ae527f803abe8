"""The timer (kernels/timer.py) against a plain cycle-by-cycle Python model of DIV/TIMA/TMA/TAC: spans with
no overflow, overflows, pending reloads, TMA 0xFF (an overflow every period) and every rate, on the CPU
device. `timer_advance` jumps from event to event; the model steps every cycle."""

import numpy as np
import warp as wp

from gbxcule.core.schema import BIG
from gbxcule.kernels import init_warp
from gbxcule.kernels.state import Gb
from gbxcule.kernels.timer import timer_advance

FIELDS = ("div_counter", "tac", "tima", "tma", "tima_reload", "tima_counter", "cycles")
OUT = ("div_counter", "tima", "tma", "tima_reload", "tima_counter", "raised", "timer_cti")


@wp.kernel(enable_backward=False)
def _advance(cases: wp.array2d(dtype=wp.int32), out: wp.array2d(dtype=wp.int32)):
    i = wp.tid()
    g = Gb()
    g.div_counter = cases[i, 0]
    g.tac = cases[i, 1]
    g.tima = cases[i, 2]
    g.tma = cases[i, 3]
    g.tima_reload = cases[i, 4]
    g.tima_counter = cases[i, 5]
    g.timer_last = 100
    raised = timer_advance(g, 100 + cases[i, 6])
    out[i, 0] = g.div_counter
    out[i, 1] = g.tima
    out[i, 2] = g.tma
    out[i, 3] = g.tima_reload
    out[i, 4] = g.tima_counter
    out[i, 5] = raised
    out[i, 6] = g.timer_cti


def model(div: int, tac: int, tima: int, tma: int, reload: int, counter: int, cycles: int) -> tuple[int, ...]:
    """One cycle at a time: the reload counter steps first, then the divider ticks; a falling edge of the
    rate's bit increments TIMA, and an overflow loads TMA and starts the 4 + 4 cycle reload (interrupt
    after the first 4)."""
    bit = 1 << ({0: 10, 1: 4, 2: 6, 3: 8}[tac & 3] - 1)
    raised = 0
    for _ in range(cycles):
        if reload:
            counter -= 1
            if counter == 0:
                if reload == 1:
                    reload, counter, raised = 2, 4, 1
                else:
                    reload = 0
        new = (div + 1) & 0xFFFF
        if tac & 4 and div & bit and not new & bit:
            tima += 1
            if tima > 0xFF:
                tima, reload, counter = tma, 1, 4
        div = new
    if tac & 4:
        period = bit * 2
        cti = ((div & ~(period - 1)) + period) - div + (0xFF - tima) * period
        if reload == 1:
            cti = min(cti, counter)
    else:
        cti = BIG
    return div, tima, tma, reload, counter, raised, cti


def test_timer_advance_matches_the_cycle_by_cycle_model():
    init_warp()
    rng = np.random.default_rng(7)
    n = 6000
    reload = rng.integers(0, 3, n)
    cases = np.stack([
        rng.integers(0, 0x10000, n),  # divider
        rng.integers(0, 8, n),  # TAC: every rate, on and off
        np.where(rng.random(n) < 0.6, rng.integers(0xF0, 0x100, n), rng.integers(0, 0x100, n)),  # TIMA
        np.where(rng.random(n) < 0.3, 0xFF, rng.integers(0, 0x100, n)),  # TMA (0xFF: overflow every period)
        reload,
        np.where(reload != 0, rng.integers(1, 5, n), 0),  # the reload's counter
        np.where(rng.random(n) < 0.5, rng.integers(1, 40, n), rng.integers(1, 5000, n)),  # span in cycles
    ], axis=1).astype(np.int32)
    out = wp.zeros((n, len(OUT)), dtype=wp.int32, device="cpu")
    wp.launch(_advance, dim=n, inputs=[wp.array(cases, dtype=wp.int32, device="cpu"), out], device="cpu")
    got = out.numpy()
    overflowed = 0
    for row, res in zip(cases, got, strict=True):
        want = model(*(int(v) for v in row))
        assert tuple(int(v) for v in res) == want, (dict(zip(FIELDS, row.tolist(), strict=True)), res.tolist(), want)
        overflowed += want[5]
    assert overflowed > n // 10  # the cases reach the slow path (an interrupt raised) often
