"""Emulator backends behind the one `VecBackend` protocol (see `base.py`)."""

from __future__ import annotations

from gbxcule.backends.base import CpuState, VecBackend
from gbxcule.core.errors import GbxculeError

BACKENDS = ("pyboy_single", "pyboy_vec_mp", "pyboy_puffer_vec", "warp_vec_cpu", "warp_vec_cuda")


def make_backend(name: str, rom, **kwargs) -> VecBackend:
    """Construct a backend by name; kwargs are num_envs, codec, schedule and backend-specific options."""
    if name == "pyboy_single":
        from gbxcule.backends.pyboy_single import PyBoySingleBackend

        return PyBoySingleBackend(rom, **kwargs)
    if name == "pyboy_vec_mp":
        from gbxcule.backends.pyboy_vec_mp import PyBoyVecMpBackend

        return PyBoyVecMpBackend(rom, **kwargs)
    if name == "pyboy_puffer_vec":  # options: mode ("sync"/"async"), num_workers, vec, obs_window
        from gbxcule.backends.pyboy_puffer_vec import PyBoyPufferVecBackend

        return PyBoyPufferVecBackend(rom, **kwargs)
    if name in ("warp_vec_cpu", "warp_vec_cuda"):
        from gbxcule.backends.warp_vec import WarpVecBackend

        return WarpVecBackend(rom, device="cuda" if name == "warp_vec_cuda" else "cpu", **kwargs)
    raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


def load_start_state(backend: VecBackend, state) -> None:
    """Put every env of `backend` in a saved state: a PyBoy `.state` or a native snapshot, as bytes or a
    file path (docs/state_format.md). Backends that cannot load states refuse."""
    if not hasattr(backend, "load_state"):
        raise GbxculeError(f"{backend.name} cannot start from a save state")
    backend.load_state(state)


__all__ = ["BACKENDS", "CpuState", "VecBackend", "load_start_state", "make_backend"]
