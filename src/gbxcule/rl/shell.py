"""The shell every trainer shares: configs as data, run folders, logs, checkpoints, RNG state, progress.

A trainer (one file per algorithm, e.g. `train_ppo.py`) builds its config from TOML and overrides, opens a
`Run`, and calls `run.log(update, metrics)` once per update and `run.save_checkpoint(...)` every N updates.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import platform
import random
import subprocess
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import write_output

CHECKPOINT_NAME = "checkpoint.pt"
CHECKPOINT_FORMAT = 1


class ConfigError(GbxculeError):
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
    num_envs: int = 64
    stack_k: int = 1
    obs: str = "pixels"
    max_steps: int | None = None
    reward: dict = field(default_factory=dict)
    backend: dict = field(default_factory=dict)  # emulator speed knobs: backends/warp_vec.py TUNING_OPTIONS


@dataclass
class RunConfig:
    seed: int = 0
    device: str = "auto"  # auto: cuda when torch sees a GPU, else cpu
    run_dir: str = "runs/ppo"
    checkpoint_every: int = 50  # updates
    checkpoint_env_state: str = "auto"  # auto: emulator state in checkpoints when it is under 512 MB
    progress: bool = True
    tensorboard: bool = True
    stop_after_updates: int | None = None  # end early (as a kill would), for tests and time-boxed runs
    time_limit_s: float | None = None  # end (with a checkpoint) after this much wall time
    eval_episodes: int = 64  # `gbxcule train` evaluates at the end: episodes from distinct start states (0: none)


def _merge(obj, values: dict, where: str):
    fields = {f.name: f for f in dataclasses.fields(obj)}
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
        else:
            setattr(obj, key, value)
    return obj


def parse_sets(items: list[str] | None) -> dict:
    """`--set SECTION.KEY=VALUE` items as nested overrides: `env.reward.tau=0.2` gives {"env": {"reward":
    {"tau": 0.2}}}. A value is read as TOML (numbers, true/false, "strings", [arrays]), else as a bare string."""
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


def load_config(cls, path: str | Path | None = None, overrides: dict | None = None):
    """A config dataclass from defaults, a TOML file, then overrides (nested dicts; None values skipped)."""
    cfg = cls()
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config {p}: {getattr(exc, 'strerror', None) or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config {p} is not valid TOML: {exc}") from None
        _merge(cfg, data, p.name)
    _merge(cfg, _drop_none(overrides or {}), "override")
    return cfg


def _drop_none(d: dict) -> dict:
    return {k: _drop_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise GbxculeError(f"device {device} needs an NVIDIA GPU that torch can use; none was found (use cpu)")
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
    if "cuda" in d and torch.cuda.is_available():
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


# --- the run ------------------------------------------------------------------------------------------------------
class Run:
    """A run folder: config.json, facts.json, metrics.jsonl, TensorBoard events, checkpoint.pt."""

    def __init__(self, run_dir: str | Path, config: dict, resume: bool = False, tensorboard: bool = True):
        self.dir = Path(run_dir)
        if resume:
            if not self.dir.is_dir():
                raise CheckpointError(f"--resume: run folder {self.dir} does not exist")
            if not (self.dir / CHECKPOINT_NAME).is_file():
                raise CheckpointError(f"--resume: {self.dir} has no {CHECKPOINT_NAME}")
        elif (self.dir / CHECKPOINT_NAME).exists():
            raise CheckpointError(f"run folder {self.dir} already holds a checkpoint: resume it with --resume "
                                  f"or choose another --run-dir")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise GbxculeError(f"cannot create run folder {self.dir}: {exc.strerror or exc}") from None
        self.config = config
        if not resume:
            write_output(self.dir / "config.json", json.dumps(config, indent=2, default=str) + "\n")
            write_output(self.dir / "facts.json", json.dumps(run_facts(), indent=2) + "\n")
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.dir / "tb"))
            except ImportError:
                self._tb = None

    def log(self, update: int, metrics: dict) -> None:
        """Append one line to metrics.jsonl (and scalars to TensorBoard)."""
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
        line = json.dumps({"update": update, **clean}, sort_keys=True) + "\n"
        with open(self.dir / "metrics.jsonl", "a") as f:
            f.write(line)
        if self._tb is not None:
            step = int(metrics.get("env_steps", update))
            for k, v in metrics.items():
                if isinstance(v, int | float) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def truncate_log(self, update: int) -> None:
        """On resume: drop log lines of updates after the checkpoint (a killed run wrote them)."""
        path = self.dir / "metrics.jsonl"
        if not path.is_file():
            return
        keep = [ln for ln in path.read_text().splitlines() if ln and json.loads(ln)["update"] <= update]
        write_output(path, "\n".join(keep) + "\n" if keep else "")

    def save_checkpoint(self, state: dict, name: str = CHECKPOINT_NAME) -> Path:
        import torch

        buf = io.BytesIO()
        torch.save({"format": CHECKPOINT_FORMAT, **state}, buf)
        path = self.dir / name
        write_output(path, buf.getvalue())
        return path

    def write_json(self, name: str, payload: dict) -> Path:
        path = self.dir / name
        write_output(path, json.dumps(payload, indent=2, default=str) + "\n")
        return path

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def load_checkpoint(path: str | Path) -> dict:
    """A checkpoint file (or a run folder's checkpoint.pt), checked to be whole."""
    import pickle
    import zipfile

    import torch

    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT_NAME
    if not p.is_file():
        raise CheckpointError(f"no checkpoint at {p}")
    try:
        ck = torch.load(p, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError,
            AttributeError, ModuleNotFoundError) as exc:
        raise CheckpointError(f"{p} is not a readable checkpoint ({type(exc).__name__})") from None
    if not isinstance(ck, dict) or ck.get("format") != CHECKPOINT_FORMAT or "model" not in ck:
        raise CheckpointError(f"{p} is not a gbxcule checkpoint of format {CHECKPOINT_FORMAT}")
    return ck


class Progress:
    """A rich progress bar with the latest SPS, return and success (silent when off or not a terminal)."""

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

    def update(self, update: int, m: dict) -> None:
        if self._p is None:
            return

        def fmt(v, spec):
            return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)

        msg = (f"sps {fmt(m.get('sps'), ',.0f')}  return {fmt(m.get('episode_return'), '.3f')}  "
               f"success {fmt(m.get('success_rate'), '.2f')}")
        self._p.update(self._task, completed=update, msg=msg)

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()
