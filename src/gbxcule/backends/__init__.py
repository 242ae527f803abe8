"""Emulator backends behind the one `VecBackend` protocol (see `base.py`)."""

from __future__ import annotations

from contextlib import contextmanager

from gbxcule.backends.base import CpuState, VecBackend
from gbxcule.core import memory
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


def emulator_need(name: str, rom, render: bool = True, obs: str | None = None, rewards: bool = False,
                  num_envs: int = 1) -> memory.Need:
    """The memory `num_envs` envs of backend `name` take (core/memory.py): a warp env's arrays on its device
    (and its host action word; fixed: the ROM, twice at most when mirrored, and the start state), or a PyBoy
    instance on the host. `obs`/`rewards`: the stage writes them; `render`: a frame buffer."""
    if name.startswith("warp"):
        from gbxcule.core.cartridge import cart_config
        from gbxcule.core.schema import ram_layout

        ram = ram_layout(cart_config(rom).ram_banks * 0x2000).total
        sort = name == "warp_vec_cuda" and num_envs > 32  # warp_vec.default_sort_envs
        fixed = 2 * len(rom.data) + memory.emulator_bytes(ram, None, False, False) + (1 << 16)
        return (memory.Need.device("emulators", memory.emulator_bytes(ram, obs, render, rewards, sort), fixed)
                + memory.Need.host("action buffer", 4))
    return memory.Need.host("PyBoy instances", memory.PYBOY_BYTES_PER_ENV)


def memory_available(device: str) -> tuple[memory.Available | None, memory.Available | None]:
    """(host, device) bytes that may still be allocated: `memory.host_available()`, and on a CUDA device its
    free memory (cudaMemGetInfo, through Warp); None where unknown."""
    host = memory.host_available()
    if not device.startswith("cuda"):
        return host, None
    try:
        import warp as wp

        from gbxcule.kernels import init_warp

        init_warp()
        if not wp.is_cuda_available():
            return host, None
        return host, memory.Available(int(wp.get_device(device).free_memory), f"free on {device}")
    except Exception:  # no driver or no such device: the backend says so with its own line
        return host, None


_WP_STREAMS: dict = {}  # Warp streams of the torch streams `on_stream` has run on, by CUDA handle


def new_stream(device: str):
    """A CUDA stream of its own for work beside the current stream's (`on_stream`); None on a CPU device."""
    if not device.startswith("cuda"):
        return None
    import torch

    return torch.cuda.Stream(torch.device(device))


@contextmanager
def on_device(device: str):
    """Work on `device` inside, and the current CUDA device of before current again after. Warp's calls on a GPU
    make its context current and leave it so, which moves torch's current device (`current_stream()`, events,
    RNG state) to that GPU: work on a GPU other than the training's (`run.eval_device`) goes in here. Nothing
    changes on a CPU device."""
    if not device.startswith("cuda"):
        yield
        return
    import torch

    with torch.cuda.device(torch.device(device)):
        yield


@contextmanager
def on_stream(device: str, stream, after_current: bool = False):
    """Launch what runs inside on `stream` (from `new_stream`): torch ops and the backends' Warp kernels alike,
    free to run beside the work of the stream in use before; `after_current`: first wait for that work. Nothing
    changes on a CPU device (`stream` None)."""
    if stream is None or not device.startswith("cuda"):
        yield
        return
    import torch
    import warp as wp

    if after_current:
        stream.wait_stream(torch.cuda.current_stream(stream.device))
    with torch.cuda.stream(stream):  # (torch's device of before is current again after, whatever Warp made current)
        wp_stream = _WP_STREAMS.get(stream.cuda_stream)
        if wp_stream is None:  # Warp's handle on the stream, made once (on_stream runs every env-step)
            wp_stream = _WP_STREAMS[stream.cuda_stream] = wp.stream_from_torch(stream)
        with wp.ScopedStream(wp_stream, sync_enter=False):
            yield


def join_stream(stream) -> None:
    """The current stream waits for the work queued on `stream` (from `new_stream`) so far; nothing for None."""
    if stream is not None:
        import torch

        torch.cuda.current_stream(stream.device).wait_stream(stream)


def check_memory(num_envs: int, need: memory.Need, device: str, what: str = "envs") -> None:
    """Refuse (one line, MemoryLimitError) before anything is allocated unless `num_envs` envs of `need` fit
    in the host's and `device`'s memory now (on the CPU device, device bytes are host bytes)."""
    host, dev = memory_available(device)
    memory.check(num_envs, need.on(device), host, dev, what)


def load_start_state(backend: VecBackend, state) -> None:
    """Put every env of `backend` in a saved state: a PyBoy `.state` or a native snapshot, as bytes or a
    file path (docs/state_format.md). Backends that cannot load states refuse."""
    if not hasattr(backend, "load_state"):
        raise GbxculeError(f"{backend.name} cannot start from a save state")
    backend.load_state(state)


__all__ = ["BACKENDS", "CpuState", "VecBackend", "check_memory", "emulator_need", "load_start_state", "make_backend",
           "memory_available", "on_device"]
