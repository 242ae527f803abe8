"""The algorithms `gbxcule train --algo NAME` knows. Each is one module of this folder, read top to bottom: its
config section, model, loss and loop, ending with its `AlgoSpec` (`rl/session.py`). Adding one is a new module and
one entry in `ALGOS`."""

from __future__ import annotations

from gbxcule.rl.algos import a2c, dqn, ppo, pqn
from gbxcule.rl.config import ConfigError
from gbxcule.rl.session import AlgoSpec

ALGOS: dict[str, AlgoSpec] = {spec.name: spec for spec in (ppo.ALGO, a2c.ALGO, dqn.ALGO, pqn.ALGO)}
DEFAULT_ALGO = "ppo"


def get(name: str) -> AlgoSpec:
    if name not in ALGOS:
        raise ConfigError(f"unknown algo {name!r}; known: {', '.join(ALGOS)}")
    return ALGOS[name]
