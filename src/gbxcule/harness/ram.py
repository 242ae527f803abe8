"""Recording RAM over played traces for `gbxcule ram` (the search itself: core/ramsearch.py).

Every trace plays in its own env of one warp backend, all from the same start: power-on, a button script from
power-on, and/or a saved state; a start that came from a task also takes the one NOOP step every start slot
of the RL env takes (rl/env.py), so moment 0 is the RL episode's first state. After each step the WRAM and
HRAM bytes of every env are copied to the host (`core.ramsearch.ADDRESSES` order).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gbxcule.core.action_codec import ActionCodec
from gbxcule.core.cartridge import Rom
from gbxcule.core.ramsearch import HRAM, MAX_CELLS, WRAM, RamSearchError
from gbxcule.core.schedule import ActionSchedule


def ram_columns(layout) -> np.ndarray:
    """Columns of the backend's per-env RAM ([envs, bytes]) that hold `ADDRESSES`, in their order."""
    w, h = layout.bases["wram"], layout.bases["hram"]
    return np.concatenate([w + np.arange(WRAM[1] - WRAM[0]), h + np.arange(HRAM[1] - HRAM[0])]).astype(np.int64)


def record(rom: Rom, codec: ActionCodec, schedule: ActionSchedule, traces: Sequence[Sequence[int]], *,
           prefix: Sequence[int] = (), states: Sequence | None = None, settle: bool = False,
           device: str = "cpu") -> list[np.ndarray]:
    """RAM after every step of each trace: one uint8 [len(trace) + 1, len(ADDRESSES)] array per trace.

    Each env starts from power-on, or from `states[i % len(states)]` (EnvStates, e.g. `load_env_states`),
    then plays `prefix` and, with `settle`, one NOOP step; row 0 is RAM there. Shorter traces idle on NOOP
    while the longest finishes (their rows stop at their own end)."""
    from gbxcule.backends.warp_vec import WarpVecBackend

    n = len(traces)
    longest = max((len(t) for t in traces), default=0)
    if n < 1 or longest < 1:
        raise RamSearchError("record needs at least one trace of at least one action")
    if n * longest > MAX_CELLS:
        raise RamSearchError(f"{n} traces of up to {longest} steps hold more than {MAX_CELLS:,} steps of RAM: "
                             f"record fewer or shorter traces")
    for t in traces:
        codec.check_array(np.asarray(t, dtype=np.int64))
    plan = np.zeros((longest, n), dtype=np.int32)
    for j, t in enumerate(traces):
        plan[:len(t), j] = t
    be = WarpVecBackend(rom, n, codec, schedule, device=device)
    try:
        be.reset()
        if states:
            be.put_states(list(states))
        for a in prefix:
            be.step(np.full(n, a, dtype=np.int32))
        if settle:
            be.step(np.zeros(n, dtype=np.int32))
        cols = ram_columns(be.layout)
        out = np.empty((longest + 1, n, len(cols)), dtype=np.uint8)
        out[0] = be.ram.numpy()[:, cols]
        for s in range(longest):
            be.step(plan[s])
            out[s + 1] = be.ram.numpy()[:, cols]
    finally:
        be.close()
    return [np.ascontiguousarray(out[:len(t) + 1, j]) for j, t in enumerate(traces)]
