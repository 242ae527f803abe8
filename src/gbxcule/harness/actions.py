"""Action generators: deterministic per-step action vectors for verify, bench and play."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from gbxcule.core.action_codec import ActionCodec

ActionGen = Callable[[int], np.ndarray]
ACTION_GENERATORS = ("seeded_random", "shared_random", "striped", "fixed")
SOLUTION = "solution"  # a task's start script and solution (`script_action_gen`; verify and play take it with --task)


def make_action_gen(kind: str, codec: ActionCodec, num_envs: int, seed: int = 0,
                    fixed_action: int = 0) -> ActionGen:
    """Return gen(step) -> int32 [num_envs]; the same (kind, seed, step) always gives the same actions.

    seeded_random: independent uniform actions per env and step, from `seed`.
    shared_random: one uniform action per step, from `seed`, taken by every env: envs from one state play one
        game in lockstep (the no-divergence bound on the same kind of work as seeded_random).
    striped: env e takes action (e + step) mod num_actions, so neighbouring envs always differ.
    fixed: every env takes `fixed_action` every step.
    """
    n = codec.num_actions
    if kind == "seeded_random":
        def gen(step: int) -> np.ndarray:
            rng = np.random.default_rng([seed, step])
            return rng.integers(0, n, size=num_envs, dtype=np.int32)
    elif kind == "shared_random":
        def gen(step: int) -> np.ndarray:
            rng = np.random.default_rng([seed, step])
            return np.full(num_envs, rng.integers(0, n), dtype=np.int32)
    elif kind == "striped":
        lanes = np.arange(num_envs, dtype=np.int64)

        def gen(step: int) -> np.ndarray:
            return ((lanes + step) % n).astype(np.int32)
    elif kind == "fixed":
        a = codec.check(fixed_action)

        def gen(step: int) -> np.ndarray:
            return np.full(num_envs, a, dtype=np.int32)
    else:
        raise ValueError(f"unknown action generator {kind!r}; choose one of {', '.join(ACTION_GENERATORS)}")
    return gen


def script_action_gen(actions: Sequence[int], codec: ActionCodec, num_envs: int) -> ActionGen:
    """gen(step) -> int32 [num_envs]: every env takes `actions[step]`, and NOOP (action 0) once they run out: a
    button script (a task's start and solution) played in lockstep, e.g. by `gbxcule verify --actions solution`."""
    acts = np.asarray([codec.check(int(a)) for a in actions], dtype=np.int32)
    if not acts.size:
        raise ValueError("a scripted action source needs at least one action")

    def gen(step: int) -> np.ndarray:
        return np.full(num_envs, acts[step] if step < acts.size else 0, dtype=np.int32)
    return gen
