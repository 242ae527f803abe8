"""Checks every command runs on its arguments before doing any work: one clear line, the same everywhere.

A command calls `rom_path`/`rom_file` for its ROM, `positive`/`schedule` for counts and frames,
`env_memory` for the memory its envs will need (host and device, before anything is allocated),
`rom_warnings`/`cgb_warning` to say when a ROM file is malformed but runnable or a CGB-only ROM will run
as a DMG game, and `check_outputs`/`check_output_dir` on the files it will write, then `write_output` to write
them (never over one of its inputs, a run's files or another of its outputs; core/outputs.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from gbxcule.core.cartridge import CartridgeInfo, Rom, load_rom
from gbxcule.core.errors import GbxculeError
from gbxcule.core.memory import Need
from gbxcule.core.outputs import (  # noqa: F401  (re-exported for commands)
    check_output,
    check_output_dir,
    check_outputs,
    write_output,
)
from gbxcule.core.schedule import ActionSchedule


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


def env_memory(backend: str, envs: int, rom: Rom, render: bool = True, host_per_env: int = 0,
               stage: str = "emulate_only") -> None:
    """Check before allocating that `envs` envs of `backend` (its arrays for `stage`, a frame buffer with
    `render`) fit in the host's and the device's memory now (core/memory.py). `host_per_env` adds host bytes
    per env the command keeps itself (e.g. frames it copies back)."""
    from gbxcule.backends import check_memory, emulator_need

    obs = "pixels" if stage in ("obs_only", "full_step") else None
    rewards = "reward" in stage or stage == "full_step"
    need = emulator_need(backend, rom, render or obs is not None, obs, rewards, envs)
    if host_per_env:
        need += Need.host("frames kept", host_per_env)
    check_memory(envs, need, "cuda" if backend == "warp_vec_cuda" else "cpu")

