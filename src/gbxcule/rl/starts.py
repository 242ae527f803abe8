"""What an env starts from: the emulators a task runs on, and the start states its episodes begin in.

- `open_backend`: the `WarpVecBackend` for a task (its ROM, checked; its codec and schedule, each
  overridable when it does not contradict the task) with the observation stage the RL env reads.
- `start_spec`: the task's start, or the `start_states=` override (files, a generator, "power_on").
- `build_starts`: the reset cache, K start slots in the backend's slot store, each with its first frame and
  screen (docs/rl_env.md "Start states").
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import numpy as np

from gbxcule.core.action_codec import DEFAULT_CODEC
from gbxcule.core.cartridge import Rom, load_rom
from gbxcule.core.errors import GbxculeError
from gbxcule.rl.tasks import START_GENERATORS, StartSpec, Task, TaskError

DEFAULT_SCHEDULE = (24, 8)  # frames per step, release after frames
OBS_MODES = ("pixels", "packed")  # the env's observation formats: a shade a byte, or 4 shades a byte


class EnvConfigError(GbxculeError, ValueError):
    """A GameEnv argument that cannot work (bad count, unknown mode, task that does not fit the ROM)."""


def device_names(device: str) -> tuple[str, str]:
    """(torch device, warp device) names for "cpu", "cuda" or "cuda:N"."""
    d = str(device)
    if d == "cpu":
        return "cpu", "cpu"
    if d == "cuda" or d.startswith("cuda:"):
        idx = d.split(":")[1] if ":" in d else "0"
        return f"cuda:{idx}", f"cuda:{idx}"
    raise EnvConfigError(f"device must be cpu, cuda or cuda:N, got {device!r}")


def check_count(what: str, value) -> int:
    """`value` as an int >= 1, else an EnvConfigError."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise EnvConfigError(f"{what} must be an integer >= 1, got {value!r}")
    return int(value)


def check_obs(stack_k, obs: str) -> None:
    """An EnvConfigError unless `stack_k` is an int >= 1 and `obs` one of `OBS_MODES`."""
    check_count("stack_k", stack_k)
    if obs not in OBS_MODES:
        raise EnvConfigError(f"obs must be one of {', '.join(OBS_MODES)}, got {obs!r}")


def task_value(task: Task | None, what: str, given, default):
    """A setting of the env: `given`, else the task's, else `default`; a given value that contradicts the
    task is an EnvConfigError."""
    from_task = getattr(task, what) if task is not None else None
    if task is not None and given is not None and from_task is not None and given != from_task:
        raise EnvConfigError(f"task {task.id} is defined with {what}={from_task!r}, not {given!r}")
    return given if given is not None else (from_task if from_task is not None else default)


def task_rom(task: Task | None, rom: str | Path | Rom | None) -> Rom:
    """The ROM: `rom` (a file, a built-in ROM's name or a `Rom`), else the task's; checked against the
    task's SHA-1 (a built-in ROM's is computed from its build). A malformed but runnable dump's warnings are
    given where the file is loaded (not again for a `Rom`: the env checks its ROM before its backend does)."""
    loaded = not isinstance(rom, Rom)
    if rom is None:
        if task is None or task.rom is None:
            raise EnvConfigError("give a ROM (a file or a built-in ROM's name)" +
                                 (f": task {task.id} names no built-in ROM" if task else ""))
        rom = task.rom
    if not isinstance(rom, Rom):
        from gbxcule.roms import resolve_rom

        rom = load_rom(resolve_rom(str(rom)))
    want = None
    if task is not None:
        if task.rom_sha1:
            want = task.rom_sha1
        elif task.rom:
            from gbxcule.roms import build_rom, get_spec

            want = hashlib.sha1(build_rom(get_spec(task.rom).name)).hexdigest()
    for note in getattr(rom, "warnings", ()) if loaded else ():  # malformed but runnable dumps (docs/hardware.md)
        warnings.warn(f"ROM {rom.path}: {note}", stacklevel=3)
    if task is not None and want and rom.info.sha1 != want:
        raise TaskError(f"task {task.id} is for the ROM with SHA-1 {want}, not {rom.info.sha1} ({rom.path})")
    return rom


def open_backend(task: Task | None, rom, num_envs: int, device: str, *, packed: bool = False,
                 codec: str | None = None, frames_per_step: int | None = None,
                 release_after_frames: int | None = None, obs_view: str = "stride",
                 backend_options: dict | None = None):
    """The backend `num_envs` envs of `task` run on (`device`: a Warp device name), writing the 72x80
    observation (`packed`: 4 pixels a byte) after each step. On CUDA, Warp then launches on torch's current
    stream, so torch ops and kernels never race."""
    from gbxcule.backends.warp_vec import WarpVecBackend
    from gbxcule.core.action_codec import get_codec
    from gbxcule.core.schedule import ActionSchedule

    schedule = ActionSchedule(task_value(task, "frames_per_step", frames_per_step, DEFAULT_SCHEDULE[0]),
                              task_value(task, "release_after_frames", release_after_frames, DEFAULT_SCHEDULE[1]))
    be = WarpVecBackend(task_rom(task, rom), num_envs, get_codec(task_value(task, "codec", codec, DEFAULT_CODEC)),
                        schedule, device=device, stage="obs_only", obs_mode=obs_view, obs_packed=packed,
                        **dict(backend_options or {}))
    if device.startswith("cuda"):
        import torch
        import warp as wp

        wp.set_stream(wp.stream_from_torch(torch.device(device)), device=device)
    return be


def start_spec(task: Task | None, start_states) -> StartSpec:
    """Where episodes start: the task's start, or `start_states` (a state file or folder, a list of them,
    (GENERATOR, K) or (GENERATOR, K, max_len), or "power_on")."""
    if start_states is None:
        return task.start if task is not None else StartSpec()
    if start_states == "power_on":
        return StartSpec()
    script = task.start.script if task is not None else ()
    if isinstance(start_states, tuple | list) and start_states and start_states[0] in START_GENERATORS:
        if len(start_states) not in (2, 3):
            raise EnvConfigError(f"start_states=({start_states[0]!r}, K[, max_len])")
        base = task.start if task is not None else StartSpec()
        prefix = (task.solution or ()) if task is not None and start_states[0] == "solution" else ()
        try:
            return StartSpec(script, base.states, start_states[0], int(start_states[1]),
                             int(start_states[2]) if len(start_states) == 3 else 8, prefix)
        except TaskError as exc:
            raise EnvConfigError(str(exc)) from None
    if isinstance(start_states, str | Path):
        start_states = [start_states]
    if isinstance(start_states, list | tuple) and start_states:
        return StartSpec((), tuple(str(p) for p in start_states))
    raise EnvConfigError(f"start_states must be a path, a list of paths, (GENERATOR, K[, max_len]) or "
                         f"'power_on', got {start_states!r}")


def load_start_files(paths, rom: Rom, base_dir: str | Path = ".") -> list:
    """The `EnvState`s in state files and folders (a relative path that does not exist is looked up under
    `base_dir`, the task's pack folder)."""
    from gbxcule.backends.warp_vec import load_env_states

    base = Path(base_dir)
    files: list[Path] = []
    for p in paths:
        q = Path(p)
        if not q.is_absolute() and not q.exists() and (base / q).exists():
            q = base / q
        if q.is_dir():
            found = sorted(f for f in q.iterdir() if f.is_file() and not f.name.startswith("."))
            if not found:
                raise EnvConfigError(f"start-state folder {q} holds no state files")
            files += found
        elif q.is_file():
            files.append(q)
        else:
            raise EnvConfigError(f"start state not found: {q}")
    states = []
    for f in files:
        try:
            states += load_env_states(f, rom)
        except GbxculeError as exc:
            raise EnvConfigError(f"start state {f}: {exc}") from None
    return states


def build_starts(backend, spec: StartSpec, seed: int, base_dir: str | Path = ".", extra_slots: int = 0,
                 host_slots: bool = False) -> int:
    """Give `backend` a slot store of K + `extra_slots` slots (in host memory with `host_slots`: the backend's
    `alloc_slots`) and fill slots 0..K-1 with the start states of
    `spec`, each with its first frame and screen; returns K. A start slot is the state reached from its
    source (power-on, a state file) by the spec's script and one NOOP step (so every slot has a drawn
    frame), then for a generator a random number of extra steps (`seed` draws them). The backend's envs are
    used as scratch, K at a time."""
    be, n = backend, backend.num_envs
    states = load_start_files(spec.states, be.rom, base_dir) if spec.states else None
    k = spec.count if spec.generator else (len(states) if states else 1)
    be.alloc_slots(k + extra_slots, host=host_slots)
    rng = np.random.default_rng([seed, 0x5EED])
    for first in range(0, k, n):
        count = min(n, k - first)
        be.reset()
        if states:
            be.put_states([states[(first + j) % len(states)] for j in range(count)], envs=range(count))
        for a in spec.script:
            be.step(np.full(n, a, dtype=np.int32))
        be.step(np.zeros(n, dtype=np.int32))  # one NOOP step: every slot starts with a drawn frame
        if not spec.generator:
            _save(be, range(count), first)
            continue
        lengths = rng.integers(0, spec.max_len + 1, size=n)  # env j is saved after lengths[j] extra steps
        if spec.generator == "random_noops":
            extra = np.zeros((spec.max_len, n), dtype=np.int32)
        else:
            extra = rng.integers(0, be.codec.num_actions, size=(spec.max_len, n)).astype(np.int32)
        # demonstration starts: slot i first replays the first i/k of the solution (p[j] steps)
        p = ((np.arange(first, first + n) * len(spec.prefix)) // k if spec.generator == "solution"
             else np.zeros(n, dtype=np.int64))
        span = int(p[:count].max()) + spec.max_len
        plan = np.zeros((span, n), dtype=np.int32)
        for j in range(count):
            plan[:p[j], j] = spec.prefix[:p[j]]
            plan[p[j]:p[j] + spec.max_len, j] = extra[:, j]
        for s in range(span + 1):
            _save(be, [j for j in range(count) if p[j] + lengths[j] == s], first)
            if s < span and (p[:count] + lengths[:count] > s).any():
                be.step(plan[s])
    return k


def _save(backend, envs, first: int) -> None:
    """Backend envs `envs` into slots first + env, with their observation and screen (one masked save)."""
    envs = list(envs)
    if envs:
        mask = np.zeros(backend.num_envs, dtype=np.int32)
        mask[envs] = 1
        backend.save_slots(mask, first + np.arange(backend.num_envs, dtype=np.int32))
