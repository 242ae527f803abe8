"""Training settings as data: the `[env]` and `[run]` sections every algorithm shares, the top-level config of
one algorithm (`algo`, `total_steps`, env, run and the algorithm's own section), and how settings are read.

Order: defaults, an algorithm's env defaults, a TOML file, then overrides (the flags, then `--set
SECTION.KEY=VALUE`); every field is then checked against its type and `knob` limits (one ConfigError line).
What `--resume` may do with a setting is the field's own metadata (`knob(..., resume=CHANGE)`: a new value is
taken; `ONCE`: a setting of one invocation, not kept by the run; none: it must stay as the run has it), read
with `resume_rule`. This module knows no algorithm: `rl/training.py` puts an algorithm's section in.
"""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gbxcule.core.errors import GbxculeError
from gbxcule.core.screen import OBS_VIEWS
from gbxcule.core.typed import CHANGE, ONCE, SettingError, check_fields, field_rule, knob, unsettable
from gbxcule.rl.tasks import START_GENERATORS


class ConfigError(SettingError):
    """A config file or override that does not fit the config's fields."""


@dataclass
class EnvConfig:
    # where the ROM and the task pack are: a run records absolute paths and the ROM's SHA-1, so its folder works
    # from anywhere; --resume and eval may say where they are now (the ROM must have the recorded SHA-1)
    rom: str | None = knob(None, resume=CHANGE)  # default: the task's built-in ROM
    task: str = knob("leave_house", resume=CHANGE)
    rom_sha1: str | None = None  # the ROM's SHA-1, recorded when a run starts
    goal: str | None = None  # a goal template file over the task's
    start_states: Any = None  # path(s), [GENERATOR, K(, max_len)] (random_noops|random_actions|solution), power_on
    num_envs: int = knob(64, min=1)
    stack_k: int = knob(1, min=1)
    obs: str = knob("pixels", choices=("pixels", "packed"))
    # how the 72x80 frame samples the 160x144 screen: pixel (2r, 2c), or the 2x2 block's mean (small text stays legible)
    obs_view: str = knob("stride", choices=OBS_VIEWS)
    max_steps: int | None = knob(None, min=1)
    reward: dict = knob(default_factory=dict)
    # emulator speed knobs (backends/warp_vec.py TUNING_OPTIONS): the same bits whatever their values
    backend: dict = knob(default_factory=dict, resume=CHANGE)
    # the state archive's knobs (rl/archive.py ArchiveConfig, whose fields say what --resume may change); {}: none
    archive: dict = knob(default_factory=dict, table="gbxcule.rl.archive:ArchiveConfig")
    spread_clocks: bool = False  # first episodes end at seeded steps, so truncations do not all fall on one step
    # the task's milestone flags drawn over each observation's last row (GameEnv); auto: where the task has some
    show_milestones: str = knob("off", choices=("off", "on", "auto"))
    # a life lost (the task's lives byte: a fight lost) ends the training episode, terminated; evals play on
    life_ends: bool = False


@dataclass
class RunConfig:
    seed: int = knob(0, min=0, max=2**63 - 1)
    device: str = knob("auto", resume=CHANGE)  # auto: cuda when torch sees a GPU, else cpu
    run_dir: str | None = knob(None, resume=CHANGE)  # default runs/ALGO
    checkpoint_every: int = knob(50, min=1, resume=CHANGE)  # updates
    checkpoint_every_s: float | None = knob(300.0, gt=0, resume=CHANGE)  # and at least this often (None: by count)
    checkpoint_env_state: str = knob("auto", choices=("auto", "always", "never"))  # auto: when under 512 MB
    progress: bool = knob(True, resume=CHANGE)
    tensorboard: bool = knob(True, resume=CHANGE)
    stop_after_updates: int | None = knob(None, min=1, resume=ONCE)  # end early (as a kill would), for tests
    time_limit_s: float | None = knob(None, gt=0, resume=ONCE)  # end (with a checkpoint) after this much training
    eval_episodes: int = knob(64, min=0, resume=CHANGE)  # greedy episodes from distinct starts, periodic and final
    eval_every: int | None = knob(None, min=1, resume=CHANGE)  # periodic greedy eval every this many env-steps
    eval_every_s: float | None = knob(None, gt=0, resume=CHANGE)  # ... or every this many seconds of training
    evals: int = knob(10, min=0, resume=CHANGE)  # with neither set: this many periodic evals over the run (0: none)
    stop_at_success: float | None = knob(None, gt=0, max=1, resume=CHANGE)  # stop once a periodic eval reaches it
    # the periodic eval beside training (one eval step after each training step, on a CUDA stream of its own;
    # logged when it ends, at the env-steps of its weights) instead of training waiting for it (docs/training.md)
    eval_background: bool = knob(False, resume=CHANGE)
    # eval steps played after each training step: an eval of a long step limit beside a large training env (whose
    # step takes several times the eval's) ends that many times sooner, the eval's small launches filling the GPU
    eval_background_steps: int = knob(1, min=1, max=64, resume=CHANGE)
    # where the periodic and final evals run (their env and a copy of the weights): a GPU no process trains on keeps
    # their launches off the training's (docs/training.md "Periodic evals"); none: the training's device
    eval_device: str | None = knob(None, resume=CHANGE)
    # keep the weights at every this many seconds of training (policies/policy_<S>s.pt, policy.pt's format): the
    # greedy rate at 5, 10 or 20 minutes, measured after the run with `gbxcule eval` (none: not kept)
    policy_every_s: float | None = knob(None, gt=0, resume=CHANGE)
    cudnn_benchmark: bool = knob(False, resume=CHANGE)  # CUDA: cuDNN times its conv algorithms, keeps the fastest
    deterministic: bool = knob(False, resume=CHANGE)  # CUDA: deterministic algorithms (ops without one warn)
    success_window: int = knob(256, min=1, resume=CHANGE)  # the progress bar's success: over >= this many episodes
    image_every: int | None = knob(None, min=1, resume=CHANGE)  # TensorBoard images every N updates
    # several processes (torchrun; docs/training.md "Several GPUs"): env.num_envs is per process
    grad_sync: str = knob("allreduce", choices=("allreduce", "ddp"), resume=CHANGE)  # one flat all-reduce, or DDP
    dist_timeout_s: float = knob(300.0, gt=0, max=86400.0, resume=CHANGE)  # a collective waiting longer ends the run
    check_sync: bool = knob(False, resume=CHANGE)  # debug: after every update every process equals rank 0


_TRAIN_CONFIGS: dict[str, type] = {}


def train_config_class(algo: str, section: type) -> type:
    """The top-level config dataclass of an algorithm: algo, total_steps, env, run and the algorithm's own
    section named after it (`[ppo]`, `[a2c]`, ...)."""
    key = f"{algo}:{section.__module__}.{section.__qualname__}"
    if key not in _TRAIN_CONFIGS:
        cls = dataclasses.make_dataclass(f"TrainConfig_{algo}", [
            ("algo", str, knob(algo, choices=(algo,))),
            ("total_steps", int, knob(1_000_000, min=1, max=2**62, resume=CHANGE)),
            ("env", EnvConfig, dataclasses.field(default_factory=EnvConfig)),
            ("run", RunConfig, dataclasses.field(default_factory=RunConfig)),
            (algo, section, dataclasses.field(default_factory=section))])
        cls.section = property(lambda self: getattr(self, self.algo))
        _TRAIN_CONFIGS[key] = cls
    return _TRAIN_CONFIGS[key]


def resume_rule(cfg, path: str) -> str | None:
    """What `--resume` may do with the setting at dotted `path` of a config (class or instance): CHANGE, ONCE or
    None (it must stay)."""
    return field_rule(cfg if isinstance(cfg, type) else type(cfg), path, "resume")


def setting_paths(cfg, rule: str) -> list[str]:
    """Dotted paths of the settings of a config (class or instance) whose resume rule is `rule`."""
    cls = cfg if isinstance(cfg, type) else type(cfg)
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("resume") == rule:
            out.append(f.name)
        elif dataclasses.is_dataclass(hints.get(f.name)):
            out += [f"{f.name}.{p}" for p in setting_paths(hints[f.name], rule)]
    return out


# --- reading settings -------------------------------------------------------------------------------------------
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
    (`none` unsets a setting that may be unset, such as `ppo.target_kl=none`)."""
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


def leaves(d: dict, prefix: str = ""):
    """(dotted path, value) of every setting in nested overrides (an empty table gives none)."""
    for k, v in d.items():
        if isinstance(v, dict):
            yield from leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def read_toml(path: str | Path, _within: tuple = ()) -> dict:
    """A config file's settings. A top-level `base = "OTHER.toml"` (a path from this file's folder) reads that
    file first and sets this one's over it, tables merged key by key (a base may name a base of its own)."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config {p}: {getattr(exc, 'strerror', None) or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {p} is not valid TOML: {exc}") from None
    if "base" not in data:
        return data
    base = data.pop("base")
    if not isinstance(base, str) or not base:
        raise ConfigError(f"config {p}: base must name a config file, got {base!r}")
    chain = (*_within, p.resolve())
    parent = p.parent / base
    if parent.resolve() in chain:
        names = " -> ".join(x.name for x in (*chain, parent))
        raise ConfigError(f"config {p}: base {base} makes a loop of bases ({names})")
    return merge_overrides(read_toml(parent, chain), data)


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


def eval_device_name(value: str | None, train_device: str, local_processes: int = 1,
                     gpus: int | None = None) -> str:
    """The device of the periodic and final evals (`run.eval_device`) for a process training on `train_device`:
    `train_device` itself for none or that device, else "cpu" or "cuda:N". A ConfigError (one line) names an
    unknown device, a GPU this host lacks (`gpus`: its count, default torch's) or, where `local_processes` > 1
    processes train on this host's cuda:0.., one of theirs."""
    if value is None:
        return train_device
    name = str(value)
    if name != "cpu" and name != "cuda" and not (name.startswith("cuda:") and name[5:].isdigit()):
        raise ConfigError(f"run.eval_device must be cpu, cuda or cuda:N, got {value!r}")
    if name == "cpu":
        return train_device if train_device == "cpu" else "cpu"
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < 1:
        raise ConfigError(f"run.eval_device {name} needs an NVIDIA GPU that torch can use; none was found")
    from gbxcule.rl.starts import device_names

    want = device_names(name)[0]  # "cuda:N"
    index = int(want[5:])
    if index >= gpus:
        raise ConfigError(f"run.eval_device {name}: this host shows {gpus} GPU(s), cuda:0 to cuda:{gpus - 1}")
    if train_device != "cpu" and device_names(train_device)[0] == want:
        return train_device
    if local_processes > 1 and index < local_processes:
        raise ConfigError(f"run.eval_device {name}: process {index} of this host trains there; name a GPU none of "
                          f"the {local_processes} processes trains on (they take cuda:0 to cuda:{local_processes - 1})")
    return want


# --- the env section ---------------------------------------------------------------------------------------------
def check_env_config(e: EnvConfig) -> None:
    """The env section's tables: reward knobs, backend options and the archive's table by name, type and range."""
    from gbxcule.backends.warp_vec import TUNING_OPTIONS
    from gbxcule.rl.archive import ArchiveConfig
    from gbxcule.rl.goals import GoalError, RewardConfig
    from gbxcule.rl.starts import EnvConfigError

    unknown = sorted(set(e.backend) - set(TUNING_OPTIONS))
    if unknown:
        raise ConfigError(f"env.backend: unknown option(s) {', '.join(unknown)}; known: {', '.join(TUNING_OPTIONS)}")
    try:
        ArchiveConfig.from_dict(e.archive)
    except EnvConfigError as exc:
        raise ConfigError(f"env.{exc}" if str(exc).startswith("archive") else f"env.archive: {exc}") from None
    try:
        RewardConfig.from_dict(e.reward)
    except GoalError as exc:
        raise ConfigError(f"env.reward: {exc}") from None


def make_env(e: EnvConfig, device: str, seed: int, num_envs: int | None = None, **kw):
    """The GameEnv an env config describes (kw: GameEnv's own knobs, e.g. keep_final_obs, info_mode); its ROM
    must have the SHA-1 the config recorded, if it recorded one."""
    from gbxcule.rl.env import GameEnv

    try:
        env = GameEnv(e.rom, num_envs or e.num_envs, device, task=e.task, start_states=e.start_states,
                      stack_k=e.stack_k, obs=e.obs, obs_view=e.obs_view, max_steps=e.max_steps, reward=e.reward,
                      goal=e.goal, seed=seed, backend_options=e.backend, archive=e.archive,
                      spread_clocks=e.spread_clocks, show_milestones=e.show_milestones,
                      life_ends=e.life_ends, **kw)
    except (TypeError, ValueError) as exc:  # a backend option of the wrong type or value
        if isinstance(exc, GbxculeError):
            raise
        raise ConfigError(f"env: {exc}") from None
    if e.rom_sha1 is not None and env.rom.info.sha1 != e.rom_sha1:
        env.close()
        raise ConfigError(f"the ROM {env.rom.path} has SHA-1 {env.rom.info.sha1}, but the run was trained on the "
                          f"ROM with SHA-1 {e.rom_sha1}: give that ROM (--rom)")
    return env


def portable(e: EnvConfig, rom_sha1: str) -> None:
    """Make an env section say where its files are from anywhere: the ROM, task pack, goal template and start-state
    files as absolute paths (built-in ROMs and tasks stay names), and the ROM's SHA-1."""
    def absolute(value):
        if isinstance(value, str) and value not in ("power_on",) and Path(value).exists():
            return str(Path(value).resolve())
        return value

    e.rom = absolute(e.rom)
    if isinstance(e.task, str) and ".toml" in e.task:
        path, sep, name = e.task.rpartition(":") if e.task.rfind(":") > e.task.rfind(".toml") else (e.task, "", "")
        e.task = absolute(path) + sep + name
    e.goal = absolute(e.goal)
    if isinstance(e.start_states, str):
        e.start_states = absolute(e.start_states)
    elif isinstance(e.start_states, list) and e.start_states and e.start_states[0] not in START_GENERATORS:
        e.start_states = [absolute(x) for x in e.start_states]
    e.rom_sha1 = rom_sha1


def obs_bytes(e: EnvConfig) -> int:
    """Bytes of one env's observation under an env config (uint8 shades, or 4 a byte packed)."""
    return e.stack_k * 72 * (80 if e.obs == "pixels" else 20)
