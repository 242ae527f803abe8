"""DIV/TIMA/TMA/TAC (0xFF04-0xFF07) as Warp functions on the thread-local `Gb` state.

The timer is advanced lazily: `timer_advance(g, now)` catches it up to cycle `now` whenever the CPU touches
a timer register and at the end of every CPU batch. TIMA counts falling edges of one bit of the 16-bit
internal divider (bit 9, 3, 5 or 7 for TAC rates 0-3), so DIV writes and TAC writes can tick it
(the "glitches"). An overflow leaves TIMA reading 0 for 4 cycles, then reloads TMA and raises the
interrupt (`tima_reload` 1 -> 2 -> 0). `timer_cti` is the distance to the next event the CPU batch loop
must stop for (the overflow), exactly as the reference model keeps it.
"""

import warp as wp

from gbxcule.core.schema import BIG
from gbxcule.kernels.state import Gb


@wp.func
def timer_shift(tac: wp.int32) -> wp.int32:
    """log2 of TIMA's period in cycles at rate TAC & 3: 1024, 16, 64 or 256 cycles."""
    return wp.where((tac & 3) == 0, 10, 2 * (tac & 3) + 2)


@wp.func
def timer_bit(tac: wp.int32) -> wp.int32:
    """The divider bit whose falling edge ticks TIMA at rate TAC & 3 (bit 9, 3, 5 or 7)."""
    return 1 << (timer_shift(tac) - 1)


@wp.func
def timer_increase_tima(g: wp.ref[Gb]):
    g.tima = g.tima + 1
    if g.tima > 0xFF:
        g.tima = g.tma
        g.tima_reload = 1
        g.tima_counter = 4


@wp.func
def timer_schedule(g: wp.ref[Gb]):
    """Distance to the next TIMA overflow (or to the pending reload), for the batch loop."""
    if g.tac & 4:
        period = timer_bit(g.tac) * 2
        next_edge = ((g.div_counter & ~(period - 1)) + period) - g.div_counter
        g.timer_cti = next_edge + (0xFF - g.tima) * period
        if g.tima_reload == 1:
            g.timer_cti = wp.min(g.timer_cti, g.tima_counter)
    else:
        g.timer_cti = BIG


@wp.func
def timer_advance(g: wp.ref[Gb], now: wp.int32) -> wp.int32:
    """Catch the timer up to cycle `now`; returns 1 when the timer interrupt is raised."""
    cycles = now - g.timer_last
    if cycles == 0:
        return 0
    g.timer_last = now
    shift = timer_shift(g.tac)  # TIMA's period is 1 << shift cycles
    if g.tima_reload == 0:
        if g.tac & 4:
            period = 1 << shift
            start = g.div_counter
            end = start + cycles
            # falling edges of the bit in (start, end]: the period is a power of two, so shifts divide (rule 7
            # of docs/kernel_style.md); both are >= 0 (the timer is only ever advanced forwards)
            edges = (end >> shift) - (start >> shift)
            if g.tima + edges <= 0xFF:
                g.tima = g.tima + edges
                g.div_counter = end & 0xFFFF
                g.timer_cti = ((g.div_counter & ~(period - 1)) + period) - g.div_counter + (0xFF - g.tima) * period
                return 0
        else:
            g.div_counter = (g.div_counter + cycles) & 0xFFFF
            g.timer_cti = BIG
            return 0
    # A reload is pending or TIMA overflows within this span: go from event to event (a step of the reload
    # counter, or the falling edge that overflows TIMA), counting the edges in between at once. Within one
    # cycle the reload counter steps before the divider ticks, as in the reference's cycle-by-cycle loop.
    raised = wp.int32(0)
    on = wp.where((g.tac & 4) != 0, 1, 0)
    while cycles > 0:
        at = g.div_counter
        # cycles until the edge that takes TIMA past 0xFF: the next edge, then one a period per count left
        k = wp.where(on != 0, ((1 << shift) - (at & ((1 << shift) - 1))) + ((0xFF - g.tima) << shift), BIG)
        k = wp.min(wp.min(k, wp.where(g.tima_reload != 0, g.tima_counter, BIG)), cycles)
        if g.tima_reload != 0:
            g.tima_counter = g.tima_counter - k
            if g.tima_counter == 0:
                if g.tima_reload == 1:
                    g.tima_reload = 2
                    g.tima_counter = 4
                    raised = 1
                else:
                    g.tima_reload = 0
        n_edges = wp.where(on != 0, ((at + k) >> shift) - (at >> shift), 0)
        if n_edges > 0:
            g.tima = g.tima + n_edges - 1  # (k never goes past the overflowing edge: only the last can overflow)
            timer_increase_tima(g)
        g.div_counter = (at + k) & 0xFFFF
        cycles = cycles - k
    timer_schedule(g)
    return raised


@wp.func
def timer_write_div(g: wp.ref[Gb]):
    """A write to DIV clears the divider; a falling edge of the selected bit ticks TIMA."""
    if (g.tac & 4) != 0 and (g.div_counter & timer_bit(g.tac)) != 0:
        timer_increase_tima(g)
    g.div_counter = 0


@wp.func
def timer_write_tac(g: wp.ref[Gb], value: wp.int32):
    old_bit = timer_bit(g.tac)
    new_bit = timer_bit(value)
    if (g.tac & 4) != 0 and (g.div_counter & old_bit) != 0:
        if (value & 4) == 0 or (g.div_counter & new_bit) == 0:
            timer_increase_tima(g)
    g.tac = value & 7


@wp.func
def timer_write_tima(g: wp.ref[Gb], value: wp.int32):
    if g.tima_reload != 2:
        g.tima = value


@wp.func
def timer_write_tma(g: wp.ref[Gb], value: wp.int32):
    g.tma = value
    if g.tima_reload != 0:
        g.tima = value


@wp.func
def timer_read_tima(g: wp.ref[Gb]) -> wp.int32:
    value = g.tima
    if g.tima_reload == 1:
        value = 0
    return value
