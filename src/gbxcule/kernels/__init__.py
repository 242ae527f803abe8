"""Warp kernels: each GPU (or CPU) thread is one complete Game Boy.

Importing this package configures Warp for gbxcule: kernel cache in the project cache folder, no
gradient code, no start-up banner on stdout. `state.py` is the state schema, `bus.py` the memory map,
`cpu.py` + `templates.py` the SM83, `timer.py`, `ppu.py`, `mbc.py` the rest of the machine, and `gen.py`
assembles the step kernel from the ISA table.
"""

import ctypes.util
import os

import warp as wp

from gbxcule.core.paths import cache_dir

wp.config.kernel_cache_dir = str(cache_dir() / "warp")
wp.config.enable_backward = False
wp.config.log_level = wp.LOG_ERROR


def _nvidia_driver_present() -> bool:
    return os.path.exists("/proc/driver/nvidia/version") or ctypes.util.find_library("cuda") is not None


def init_warp() -> None:
    """Initialise Warp once. Without an NVIDIA driver, Warp's native "no CUDA driver" notice is
    silenced: on a CPU-only machine it is expected, and it would break one-line error messages."""
    if _nvidia_driver_present():
        wp.init()
        return
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        wp.init()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
