"""Checks every command runs on its arguments before doing any work: one clear line, the same everywhere.

A command calls `rom_path`/`rom_file` for its ROM, `positive`/`schedule` for counts and frames,
`env_memory` for the memory its envs will need (host and device, before anything is allocated),
`rom_warnings`/`cgb_warning` to say when a ROM file is malformed but runnable or a CGB-only ROM will run
as a DMG game, and `output`/`write_output` for files it writes (never over one of its inputs;
core/outputs.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from gbxcule.core.cartridge import CartridgeInfo, Rom, load_rom
from gbxcule.core.errors import GbxculeError
from gbxcule.core.memory import fit, host_available
from gbxcule.core.outputs import check_not_input, write_output  # noqa: F401  (re-exported for commands)
from gbxcule.core.schedule import ActionSchedule

PYBOY_BYTES_PER_ENV = 2 << 20  # a PyBoy instance with its buffers, measured ~1 MB on PyBoy 2.8; doubled
OBS_BYTES = 72 * 80
FRAME_BYTES = 144 * 160


def rom_path(arg: str) -> Path:
    """The ROM file a ROM argument names (built-in names are built), checked to be a readable file."""
    from gbxcule.roms import resolve_rom

    path = resolve_rom(arg)
    if path.is_dir():
        raise GbxculeError(f"{path} is a directory, not a ROM file")
    if not path.exists():
        raise GbxculeError(f"ROM not found: {path}")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise GbxculeError(f"cannot read ROM {path}: {exc.strerror or exc}") from None
    return path


def rom_file(arg: str, command: str | None = None) -> Rom:
    """Load and validate the ROM a ROM argument names; with `command`, print its warnings (malformed file,
    CGB-only) on stderr, one line each."""
    rom = load_rom(rom_path(arg))
    if command:
        rom_warnings(rom.info, command)
        cgb_warning(rom.info, command)
    return rom


def rom_warnings(info: CartridgeInfo, command: str) -> None:
    """One stderr line per way the ROM file is malformed but runnable (see core/cartridge.py)."""
    for w in info.warnings:
        sys.stderr.write(f"gbxcule {command}: warning: {w}\n")


def cgb_only_note(info: CartridgeInfo) -> str | None:
    """Why a ROM may not run as intended on gbxcule's DMG, or None."""
    if info.cgb_mode != "cgb-only":
        return None
    return (f"this ROM is CGB-only (header byte $0143 = ${info.cgb_flag:02X}); gbxcule emulates a DMG, where "
            "such games show a 'needs a Game Boy Color' screen at best")


def cgb_warning(info: CartridgeInfo, command: str) -> None:
    note = cgb_only_note(info)
    if note:
        sys.stderr.write(f"gbxcule {command}: warning: {note}\n")


def positive(**values: int | None) -> None:
    """Require each named count (None: not given) to be >= 1, e.g. positive(envs=..., steps=...)."""
    for name, v in values.items():
        if v is not None and v < 1:
            raise GbxculeError(f"--{name.replace('_', '-')} must be >= 1, got {v}")


def schedule(frames_per_step: int, release_after_frames: int) -> ActionSchedule:
    """The action schedule, refused with the flags' names unless 0 <= release <= frames-per-step >= 1."""
    if frames_per_step < 1:
        raise GbxculeError(f"--frames-per-step must be >= 1, got {frames_per_step}")
    if not 0 <= release_after_frames <= frames_per_step:
        raise GbxculeError(f"--release-after-frames must be in 0..{frames_per_step} (--frames-per-step), "
                           f"got {release_after_frames}")
    return ActionSchedule(frames_per_step, release_after_frames)


def warp_bytes_per_env(rom: Rom, render: bool = True, obs: bool = True) -> int:
    """Device bytes one warp env needs: state fields, RAM, serial ring, actions/rewards, obs, frame buffer."""
    from gbxcule.core.schema import NUM_FIELDS, SERIAL_CAPTURE, ram_layout

    cart = rom.info.ram_size or 0
    return (NUM_FIELDS * 4 + ram_layout(cart).total + SERIAL_CAPTURE + 4 * 4 + 16
            + (OBS_BYTES if obs else 0) + (FRAME_BYTES if render else 0))


def device_available() -> int | None:
    """Free bytes on the default CUDA device, or None without one."""
    try:
        import warp as wp

        from gbxcule.kernels import init_warp

        init_warp()
        if not wp.is_cuda_available():
            return None
        return int(wp.get_device("cuda").free_memory)
    except Exception:  # no driver, no device: the backend will say so with its own line
        return None


def env_memory(backend: str, envs: int, rom: Rom, render: bool = True, host_per_env: int = 0) -> None:
    """Check before allocating that `envs` envs of `backend` fit in free host (and device) memory.
    `host_per_env` adds host bytes per env the command keeps itself (e.g. frames it copies back)."""
    if backend.startswith("warp"):
        per_env = warp_bytes_per_env(rom, render)
        if backend == "warp_vec_cuda":
            fit(envs, per_env, device_available(), "device")
            fit(envs, host_per_env + 64, host_available(), "host")
        else:
            fit(envs, per_env + host_per_env, host_available(), "host")
    else:
        fit(envs, PYBOY_BYTES_PER_ENV + host_per_env, host_available(), "host")

