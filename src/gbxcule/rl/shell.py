"""What every trainer shares, as data and small pieces: configs (typed, from TOML and overrides), the run
folder (logs, TensorBoard, atomic checkpoints), RNG state, the device timer, the progress bar.

`rl/loop.py` puts these together into the training session an algorithm's loop runs inside; `rl/algos/`
holds the algorithms and their registry (docs/training.md, docs/architecture.md "Where to add an algorithm").
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import platform
import random
import subprocess
import time
import tomllib
import typing
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gbxcule.core.errors import GbxculeError
from gbxcule.core.fmt import json_safe, num, pct
from gbxcule.core.outputs import write_output
from gbxcule.core.typed import SettingError, check_fields, knob, unsettable

CHECKPOINT_NAME = "checkpoint.pt"
POLICY_NAME = "policy.pt"
BEST_NAME = "best_policy.pt"  # the weights of the best periodic greedy eval so far (policy.pt's format)
CHECKPOINT_FORMAT = 1
ARCHIVE_NAME = "archive.npz"  # the state archive's cells and screens, written with each checkpoint
RUN_FILES = ("config.json", "facts.json", "metrics.jsonl", "summary.json", "eval.json", "nonfinite.json",
             CHECKPOINT_NAME, POLICY_NAME, BEST_NAME, ARCHIVE_NAME, "tb")


class ConfigError(SettingError):
    """A config file or override that does not fit the config's fields."""


class CheckpointError(GbxculeError):
    """A checkpoint that cannot be read or does not fit the run."""


class NonFiniteError(GbxculeError):
    """A loss or gradient became NaN or infinite."""


# --- configs --------------------------------------------------------------------------------------------------
@dataclass
class EnvConfig:
    rom: str | None = None  # default: the task's built-in ROM
    task: str = "leave_house"
    goal: str | None = None  # a goal template file over the task's
    start_states: Any = None  # path(s), [GENERATOR, K(, max_len)] (random_noops|random_actions|solution), power_on
    num_envs: int = knob(64, min=1)
    stack_k: int = knob(1, min=1)
    obs: str = knob("pixels", choices=("pixels", "packed"))
    max_steps: int | None = knob(None, min=1)
    reward: dict = field(default_factory=dict)
    backend: dict = field(default_factory=dict)  # emulator speed knobs: backends/warp_vec.py TUNING_OPTIONS
    archive: dict = field(default_factory=dict)  # the state archive's knobs (rl/archive.py ArchiveConfig); {}: none
    spread_clocks: bool = False  # first episodes end at seeded steps, so truncations do not all fall on one step


@dataclass
class RunConfig:
    seed: int = knob(0, min=0)
    device: str = "auto"  # auto: cuda when torch sees a GPU, else cpu
    run_dir: str | None = None  # default runs/ALGO
    checkpoint_every: int = knob(50, min=1)  # updates
    checkpoint_every_s: float | None = knob(300.0, gt=0)  # and at least this often in seconds (None: only by count)
    checkpoint_env_state: str = knob("auto", choices=("auto", "always", "never"))  # auto: when under 512 MB
    progress: bool = True
    tensorboard: bool = True
    stop_after_updates: int | None = knob(None, min=1)  # end early (as a kill would), for tests and time-boxed runs
    time_limit_s: float | None = knob(None, gt=0)  # end (with a checkpoint) after this much training time
    eval_episodes: int = knob(64, min=0)  # greedy episodes from distinct start states at the end and periodically
    eval_every: int | None = knob(None, min=1)  # periodic greedy eval every this many env-steps
    eval_every_s: float | None = knob(None, gt=0)  # ... or every this many seconds of training
    stop_at_success: float | None = knob(None, gt=0, max=1)  # stop once a periodic greedy eval reaches this rate
    # the periodic eval beside training (one eval step after each training step, on a CUDA stream of its own;
    # logged when it ends, at the env-steps of its weights) instead of training waiting for it (docs/training.md)
    eval_background: bool = False
    cudnn_benchmark: bool = False  # CUDA: cuDNN times its conv algorithms once per batch shape, keeps the fastest
    deterministic: bool = False  # CUDA: torch's and cuDNN's deterministic algorithms (ops without one warn)
    success_window: int = knob(256, min=1)  # the progress bar's success: over at least this many last episodes
    image_every: int | None = knob(None, min=1)  # TensorBoard images (screens, exploration maps) every N updates
    # several processes (torchrun; docs/training.md "Several GPUs"): env.num_envs is per process
    grad_sync: str = knob("allreduce", choices=("allreduce", "ddp"))  # one flat all-reduce per step, or DDP
    dist_timeout_s: float = knob(300.0, gt=0)  # a collective that waits longer ends the run (a process died)
    check_sync: bool = False  # debug: after every update check every process's parameters equal rank 0's


_TRAIN_CONFIGS: dict[str, type] = {}


def train_config_class(algo: str, section: type) -> type:
    """The top-level config dataclass of an algorithm: algo, total_steps, env, run and the algorithm's own
    section named after it (`[ppo]`, `[a2c]`, ...)."""
    key = f"{algo}:{section.__module__}.{section.__qualname__}"
    if key not in _TRAIN_CONFIGS:
        cls = dataclasses.make_dataclass(f"TrainConfig_{algo}", [
            ("algo", str, knob(algo, choices=(algo,))),
            ("total_steps", int, knob(1_000_000, min=1)),
            ("env", EnvConfig, field(default_factory=EnvConfig)),
            ("run", RunConfig, field(default_factory=RunConfig)),
            (algo, section, field(default_factory=section))])
        cls.section = property(lambda self: getattr(self, self.algo))
        _TRAIN_CONFIGS[key] = cls
    return _TRAIN_CONFIGS[key]


def _merge(obj, values: dict, where: str):
    fields = {f.name: f for f in dataclasses.fields(obj)}
    hints = typing.get_type_hints(type(obj))
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(f"{where}: unknown setting {key!r}; known: {', '.join(fields)}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.{key} must be a table")
            _merge(current, value, f"{where}.{key}")
        elif isinstance(current, dict) and isinstance(value, dict):  # a table (reward, backend): key by key
            setattr(obj, key, {**current, **value})
        elif value == "none" and unsettable(hints.get(key, Any)):  # TOML has no null: `none` unsets
            setattr(obj, key, None)
        else:
            setattr(obj, key, value)
    return obj


def parse_sets(items: list[str] | None) -> dict:
    """`--set SECTION.KEY=VALUE` items as nested overrides: `env.reward.tau=0.2` gives {"env": {"reward":
    {"tau": 0.2}}}. A value is read as TOML (numbers, true/false, "strings", [arrays]), else as a bare string
    (`none` unsets a setting that may be unset, such as `a2c.clip=none`)."""
    out: dict = {}
    for item in items or ():
        path, sep, text = item.partition("=")
        keys = path.strip().split(".")
        if not sep or not all(keys):
            raise ConfigError(f"--set {item!r}: use SECTION.KEY=VALUE, e.g. env.reward.tau=0.2")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text.strip()
        node = out
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {k} is set to a value and a table at once")
        node[keys[-1]] = value
    return out


def merge_overrides(base: dict, extra: dict) -> dict:
    """`extra` over `base`, tables merged key by key."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge_overrides(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def drop_none(d: dict) -> dict:
    """The overrides actually given: None values (flags not passed) dropped, tables kept."""
    return {k: drop_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}


def read_toml(path: str | Path) -> dict:
    p = Path(path)
    try:
        return tomllib.loads(p.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config {p}: {getattr(exc, 'strerror', None) or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {p} is not valid TOML: {exc}") from None


def load_config(cls, path: str | Path | None = None, overrides: dict | None = None, defaults: dict | None = None):
    """A config dataclass from its defaults, `defaults` (an algorithm's), a TOML file, then overrides (nested
    dicts; None values skipped); every field then checked against its type and limits."""
    cfg = cls()
    if defaults:
        _merge(cfg, defaults, "defaults")
    if path is not None:
        _merge(cfg, read_toml(path), Path(path).name)
    _merge(cfg, drop_none(overrides or {}), "override")
    try:
        check_fields(cfg, "")
    except SettingError as exc:
        raise ConfigError(str(exc)) from None
    return cfg


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise GbxculeError(f"device {device} needs an NVIDIA GPU that torch can use; none was found (use cpu)")
    if device != "cpu" and not device.startswith("cuda"):
        raise ConfigError(f"run.device must be auto, cpu, cuda or cuda:N, got {device!r}")
    return device


# --- RNG state --------------------------------------------------------------------------------------------------
def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    import torch

    d = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        d["cuda"] = torch.cuda.get_rng_state_all()
    return d


def set_rng_state(d: dict) -> None:
    import torch

    random.setstate(d["python"])
    np.random.set_state(d["numpy"])
    torch.set_rng_state(d["torch"])
    if "cuda" in d and torch.cuda.is_available() and len(d["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(d["cuda"])


# --- environment facts ------------------------------------------------------------------------------------------
def run_facts() -> dict:
    """Package versions, GPU, host and git revision, recorded at the start of every run."""
    import torch

    facts: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                             "host": platform.node(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        import warp

        facts["warp"] = warp.__version__
    except ImportError:  # pragma: no cover
        pass
    from gbxcule import __version__

    facts["gbxcule"] = __version__
    facts["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    try:
        root = Path(__file__).resolve().parents[3]
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
        facts["git"] = rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "") if rev.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        facts["git"] = None
    return facts


def process_age_s() -> float:
    """Seconds since this process started (Linux: /proc), so start-up counts in "time to X"; 0 if unknown."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def dumps(payload: Any, indent: int | None = 2) -> str:
    """Strict JSON (NaN and infinities as null), the only way run files are written."""
    return json.dumps(json_safe(payload), indent=indent, default=str, allow_nan=False, sort_keys=indent is None)


# --- the run folder -------------------------------------------------------------------------------------------------
def check_run_dir(run_dir: str | Path, resume: bool) -> None:
    """Refuse a run folder that cannot take the run (changing nothing): a resumed one must hold a checkpoint, a
    fresh one must not (it would bury a run that can be resumed)."""
    d = Path(run_dir)
    if resume:
        if not d.is_dir():
            raise CheckpointError(f"--resume: run folder {d} does not exist")
        if not (d / CHECKPOINT_NAME).is_file():
            raise CheckpointError(f"--resume: {d} has no {CHECKPOINT_NAME}")
    elif (d / CHECKPOINT_NAME).exists():
        raise CheckpointError(f"run folder {d} already holds a checkpoint: resume it with --resume or choose "
                              f"another --run-dir")
    elif d.exists() and not d.is_dir():
        raise GbxculeError(f"run folder {d} is a file")


class Run:
    """A run folder: config.json, facts.json, metrics.jsonl, TensorBoard events, checkpoint.pt, policy.pt.

    A fresh run never writes into an old run's files: a folder holding a checkpoint is refused (resume it),
    and the files of a run killed before its first checkpoint are moved aside into `previous-N/` (`moved`
    says where). Stale temporary files of a killed write are removed when the folder is opened."""

    def __init__(self, run_dir: str | Path, config: dict, resume: bool = False, tensorboard: bool = True):
        self.dir = Path(run_dir)
        self.moved: Path | None = None
        check_run_dir(self.dir, resume)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise GbxculeError(f"cannot create run folder {self.dir}: {exc.strerror or exc}") from None
        self.remove_stale_temps()
        if not resume:
            self.moved = self._move_old_files()
        self.config = config
        if not resume:
            write_output(self.dir / "config.json", dumps(config) + "\n")
            write_output(self.dir / "facts.json", dumps(run_facts()) + "\n")
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.dir / "tb"))
            except ImportError:
                self._tb = None

    def remove_stale_temps(self) -> list[Path]:
        """Delete the temporary files (`.NAME.*`) a write killed before its rename left behind."""
        gone = []
        for p in self.dir.iterdir():
            if p.is_file() and any(p.name.startswith(f".{n}.") for n in RUN_FILES):
                p.unlink(missing_ok=True)
                gone.append(p)
        return gone

    def _move_old_files(self) -> Path | None:
        old = [self.dir / n for n in RUN_FILES if (self.dir / n).exists()]
        if not old:
            return None
        k = 1
        while (self.dir / f"previous-{k}").exists():
            k += 1
        dest = self.dir / f"previous-{k}"
        dest.mkdir()
        for p in old:
            p.rename(dest / p.name)
        return dest

    def log(self, update: int, metrics: dict) -> None:
        """Append one line to metrics.jsonl (and scalars to TensorBoard)."""
        line = dumps({"update": update, **metrics}, indent=None) + "\n"
        with open(self.dir / "metrics.jsonl", "a") as f:
            f.write(line)
        if self._tb is not None:
            step = int(metrics.get("env_steps", update))
            for k, v in metrics.items():
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def truncate_log(self, update: int, warn=None) -> None:
        """On resume: drop log lines of updates after the checkpoint (a killed run wrote them), and a torn last
        line (a kill during the write), with a warning naming the file."""
        path = self.dir / "metrics.jsonl"
        if not path.is_file():
            return
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
        keep = []
        for i, ln in enumerate(lines):
            try:
                row = json.loads(ln)
            except json.JSONDecodeError:
                if i != len(lines) - 1:
                    raise CheckpointError(f"{path}: line {i + 1} is not JSON (not a torn last line: the log is "
                                          f"damaged; move it aside to resume)") from None
                if warn:
                    warn(f"{path}: dropped a torn last line (a kill during a write)")
                continue
            if row.get("update", 0) <= update:
                keep.append(ln)
        write_output(path, "\n".join(keep) + "\n" if keep else "")

    def save_checkpoint(self, state: dict, policy: dict) -> Path:
        """Write policy.pt, then checkpoint.pt, each atomically: a kill leaves both of the last save, or the new
        policy beside the previous checkpoint (resume writes policy.pt again from the checkpoint)."""
        self.write_torch(POLICY_NAME, policy)
        return self.write_torch(CHECKPOINT_NAME, state)

    def write_torch(self, name: str, state: dict) -> Path:
        import torch

        buf = io.BytesIO()
        torch.save({"format": CHECKPOINT_FORMAT, **state}, buf)
        return write_output(self.dir / name, buf.getvalue())

    def images(self, step: int, images: dict) -> None:
        """RGB images (uint8 [H, W, 3]) to TensorBoard under their names."""
        if self._tb is not None:
            for name, img in images.items():
                self._tb.add_image(name, img, step, dataformats="HWC")
            self._tb.flush()

    def write_json(self, name: str, payload: dict) -> Path:
        return write_output(self.dir / name, dumps(payload) + "\n")

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def load_checkpoint(path: str | Path, need_training: bool = False) -> dict:
    """A checkpoint file (or a run folder's checkpoint.pt, else its policy.pt), checked to be whole; with
    `need_training` it must be a full checkpoint (optimizer, counters), not a policy file."""
    import pickle
    import zipfile

    import torch

    p = Path(path)
    if p.is_dir():
        p = p / (CHECKPOINT_NAME if (p / CHECKPOINT_NAME).is_file() or need_training else POLICY_NAME)
    if not p.is_file():
        raise CheckpointError(f"no checkpoint at {p}")
    try:
        ck = torch.load(p, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError,
            AttributeError, ModuleNotFoundError, TypeError, KeyError) as exc:
        raise CheckpointError(f"{p} is not a readable checkpoint ({type(exc).__name__})") from None
    if not isinstance(ck, dict) or ck.get("format") != CHECKPOINT_FORMAT or "model" not in ck:
        raise CheckpointError(f"{p} is not a gbxcule checkpoint of format {CHECKPOINT_FORMAT}")
    if not isinstance(ck.get("config"), dict):
        raise CheckpointError(f"{p} holds no config")
    if need_training and not all(k in ck for k in ("optimizer", "update", "global_step", "rng", "env")):
        raise CheckpointError(f"{p} is a policy file (weights only), not a training checkpoint: it cannot be "
                              f"resumed")
    return ck


# --- timing and progress ----------------------------------------------------------------------------------------
class Timer:
    """Time spent per phase (env, inference, update, ...): CUDA events read once per update, or the host clock."""

    def __init__(self, cuda: bool, names=("env", "inference", "update")):
        self.cuda = cuda
        self.acc = dict.fromkeys(names, 0.0)
        self._events: list[tuple[str, object, object]] = []
        self._pool: list = []

    def start(self, name: str):
        if self.cuda:
            import torch

            if len(self._pool) < 2:
                self._pool += [torch.cuda.Event(enable_timing=True) for _ in range(64)]
            a, b = self._pool.pop(), self._pool.pop()
            a.record()
            return (name, a, b)
        return (name, time.perf_counter(), None)

    def stop(self, mark) -> None:
        name, a, b = mark
        if self.cuda:
            b.record()
            self._events.append((name, a, b))
        else:
            self.acc[name] = self.acc.get(name, 0.0) + time.perf_counter() - a

    def read(self) -> dict[str, float]:
        """Seconds per phase since the last read (synchronises on CUDA: once per update)."""
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            for name, a, b in self._events:
                self.acc[name] = self.acc.get(name, 0.0) + a.elapsed_time(b) / 1000.0
                self._pool += [a, b]
            self._events.clear()
        out, self.acc = self.acc, dict.fromkeys(self.acc, 0.0)
        return out


class SuccessWindow:
    """Success over the last >= `size` ended episodes, from per-update totals (the bar's running success)."""

    def __init__(self, size: int):
        self.size = size
        self.rows: deque[tuple[int, float]] = deque()

    def add(self, episodes: int, successes: float) -> None:
        if episodes:
            self.rows.append((episodes, successes))
        while len(self.rows) > 1 and sum(e for e, _ in list(self.rows)[1:]) >= self.size:
            self.rows.popleft()

    def read(self) -> tuple[float | None, int]:
        eps = sum(e for e, _ in self.rows)
        return (sum(s for _, s in self.rows) / eps if eps else None), eps


class Progress:
    """A rich progress bar: SPS, return, the running success of the last N ended episodes (with N), and the
    latest periodic greedy eval. Silent when off or when rich is missing."""

    def __init__(self, total_updates: int, enabled: bool, start: int = 0):
        self._p = None
        if enabled:
            try:
                from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
                from rich.progress import Progress as RichProgress

                self._p = RichProgress(TextColumn("[bold]train"), BarColumn(), TextColumn("{task.completed}/"
                                       "{task.total}"), TimeRemainingColumn(), TextColumn("{task.fields[msg]}"),
                                       transient=False)
                self._p.start()
                self._task = self._p.add_task("train", total=total_updates, completed=start, msg="")
            except ImportError:
                self._p = None

    def update(self, update: int, m: dict, total: int | None = None) -> None:
        if self._p is None:
            return
        self._p.update(self._task, completed=update, total=total, msg=progress_line(m))

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()
            self._p = None


def success_label(source: str | None) -> str:
    """"success", or "success (template)" where it is the goal template's verdict (the task has no RAM goal)."""
    return "success (template)" if source == "template" else "success"


def progress_line(m: dict) -> str:
    """The bar's text: SPS, mean return, running success with its episode count, greedy eval when there is one."""
    sps = m.get("sps")
    line = (f"sps {'-' if sps is None else format(sps, ',.0f')}  return {num(m.get('episode_return'))}  "
            f"{success_label(m.get('success_source'))} {pct(m.get('running_success'))} of last "
            f"{m.get('running_episodes', 0)} ep")
    if m.get("eval/greedy_success") is not None:
        line += f"  greedy {pct(m['eval/greedy_success'])}"
    return line



# --- the env and the algorithm ------------------------------------------------------------------------------
def make_env(e: EnvConfig, device: str, seed: int, num_envs: int | None = None, **kw):
    """The GameEnv an env config describes (kw: GameEnv's own knobs, e.g. keep_final_obs, info_mode)."""
    from gbxcule.rl.env import GameEnv

    try:
        return GameEnv(e.rom, num_envs or e.num_envs, device, task=e.task, start_states=e.start_states,
                       stack_k=e.stack_k, obs=e.obs, max_steps=e.max_steps, reward=e.reward, goal=e.goal, seed=seed,
                       backend_options=e.backend, archive=e.archive, spread_clocks=e.spread_clocks, **kw)
    except (TypeError, ValueError) as exc:  # a backend option of the wrong type or value
        if isinstance(exc, GbxculeError):
            raise
        raise ConfigError(f"env: {exc}") from None


def obs_bytes(e: EnvConfig) -> int:
    """Bytes of one env's observation under an env config (uint8 shades, or 4 a byte packed)."""
    return e.stack_k * 72 * (80 if e.obs == "pixels" else 20)


@dataclass(frozen=True)
class AlgoSpec:
    """What the registry (`rl/algos/__init__.py`) knows of an algorithm without importing its trainer.

    config: its section's dataclass (TOML `[NAME]`); build_model(section, num_actions, stack_k, packed) -> a
    `rl/models.py` model; steps_per_update(cfg) -> env-steps one logged update covers; env_defaults: env
    settings it prefers under the user's (e.g. A2C's scale mode); check(cfg): cross-field checks of a whole
    config (one ConfigError line); summary: one line for --help."""

    name: str
    config: type
    build_model: Any
    steps_per_update: Any
    summary: str
    env_defaults: dict = field(default_factory=dict)
    check: Any = None
