"""The `VecBackend` protocol every emulator backend implements, and what it reports.

A backend owns `num_envs` Game Boys that all run the same ROM. `step(actions)` advances every env by
one step of the action schedule (`schedule.frames_per_step` frames, the action's buttons held for the
first `schedule.release_after_frames`). Introspection (`get_cpu_state`, `read_memory`) may be slow: it is
for verification and debugging, never for the hot path.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from gbxcule.core.action_codec import ActionCodec
from gbxcule.core.schedule import ActionSchedule

REGISTERS = ("a", "f", "b", "c", "d", "e", "h", "l", "sp", "pc")


@dataclass(frozen=True)
class CpuState:
    """The SM83's architectural state of one env."""

    a: int
    f: int
    b: int
    c: int
    d: int
    e: int
    h: int
    l: int
    sp: int
    pc: int
    ime: bool
    halted: bool

    def to_dict(self) -> dict:
        return asdict(self)


@runtime_checkable
class VecBackend(Protocol):
    name: str
    num_envs: int
    codec: ActionCodec
    schedule: ActionSchedule
    device: str

    def reset(self, seed: int | None = None) -> None:
        """Put every env in the start state (the same for all envs)."""
        ...

    def step(self, actions: np.ndarray) -> None:
        """Advance every env one step; `actions` is an int array of shape [num_envs]."""
        ...

    def get_cpu_state(self, env: int) -> CpuState: ...

    def read_memory(self, env: int, lo: int, hi: int) -> np.ndarray:
        """Bytes [lo, hi) of env's address space as the CPU would read them (uint8 array)."""
        ...

    def close(self) -> None: ...


def check_env(backend: VecBackend, env: int) -> int:
    if not 0 <= env < backend.num_envs:
        raise IndexError(f"env {env} out of range for {backend.name} with {backend.num_envs} envs")
    return env


def check_actions(backend: VecBackend, actions) -> np.ndarray:
    """Validate a step's actions: shape [num_envs], each in the codec's range."""
    arr = np.asarray(actions)
    if arr.shape != (backend.num_envs,):
        raise ValueError(f"{backend.name} expects actions of shape ({backend.num_envs},), got {arr.shape}")
    return backend.codec.check_array(arr)
