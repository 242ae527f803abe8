"""The algorithm registry: `--algo NAME` -> its config section, model and trainer (docs/training.md).

Each algorithm is a package here: `__init__.py` holds its config dataclass, model builder and `ALGO` spec (no
trainer import), its math module holds pure torch functions, `train.py` its CleanRL-style loop over the
shared session (`rl/loop.py`). This module is the only one that knows them all: configs (`make_config`,
resume rules), training (`train`), and loading a policy for evaluation (`load_model`, `evaluate`) without
importing a trainer. An algorithm imports the env and the shell, never another algorithm or this registry.
"""

from __future__ import annotations

from pathlib import Path

from gbxcule.core.errors import GbxculeError
from gbxcule.rl.algos import a2c, dqn, ppo, pqn
from gbxcule.rl.shell import (
    CHECKPOINT_NAME,
    AlgoSpec,
    CheckpointError,
    ConfigError,
    drop_none,
    load_checkpoint,
    load_config,
    read_toml,
    resolve_device,
    to_dict,
    train_config_class,
)

ALGOS: dict[str, AlgoSpec] = {spec.name: spec for spec in (ppo.ALGO, a2c.ALGO, dqn.ALGO, pqn.ALGO)}
DEFAULT_ALGO = "ppo"

# What `--resume` may change (anything else given must equal the run's value, or it is refused).
MAY_CHANGE = ("total_steps", "run.time_limit_s", "run.eval_episodes", "run.progress", "run.device",
              "run.stop_after_updates", "run.checkpoint_every", "run.checkpoint_every_s", "run.tensorboard",
              "run.eval_every", "run.eval_every_s", "run.stop_at_success", "run.success_window", "run.run_dir",
              "run.grad_sync", "run.dist_timeout_s", "run.check_sync", "run.image_every",
              "run.eval_background", "run.cudnn_benchmark", "run.deterministic")
MAY_CHANGE_TABLES = ("env.backend.",)  # emulator speed knobs: the same bits whatever their values
PER_INVOCATION = ("stop_after_updates", "time_limit_s")  # run settings of one invocation: not kept on resume


def get(name: str) -> AlgoSpec:
    if name not in ALGOS:
        raise ConfigError(f"unknown algo {name!r}; known: {', '.join(ALGOS)}")
    return ALGOS[name]


def trainer(name: str):
    """The algorithm's `train(cfg, checkpoint, echo)`, imported only when training."""
    get(name)
    if name == "ppo":
        from gbxcule.rl.algos.ppo.train import train as run
    elif name == "a2c":
        from gbxcule.rl.algos.a2c.train import train as run
    elif name == "dqn":
        from gbxcule.rl.algos.dqn.train import train as run
    elif name == "pqn":
        from gbxcule.rl.algos.pqn.train import train as run
    return run


# --- configs ----------------------------------------------------------------------------------------------------
def make_config(path=None, overrides: dict | None = None):
    """A whole training config: defaults, the algorithm's env defaults, a TOML file, then overrides; typed and
    checked (one ConfigError line) before anything runs."""
    overrides = drop_none(overrides or {})
    data = read_toml(path) if path is not None else {}
    algo = overrides.get("algo", data.get("algo", DEFAULT_ALGO))
    if not isinstance(algo, str):
        raise ConfigError(f"algo must be a string, got {algo!r}")
    spec = get(algo)
    for other in ALGOS:
        if other != algo and (other in data or other in overrides):
            raise ConfigError(f"section [{other}] is for algo {other}, but this config trains {algo} "
                              f"(set algo = \"{other}\" to train {other})")
    cls = train_config_class(algo, spec.config)
    cfg = load_config(cls, path, overrides, defaults={"env": dict(spec.env_defaults)})
    if cfg.run.run_dir is None:
        cfg.run.run_dir = f"runs/{algo}"
    check_env_config(cfg.env)
    if cfg.run.deterministic and cfg.run.cudnn_benchmark:  # timing may pick another deterministic algorithm
        raise ConfigError("run.deterministic and run.cudnn_benchmark exclude each other: cuDNN's timing can pick "
                          "a different convolution algorithm, with other bits, on each run")
    if spec.check is not None:
        spec.check(cfg)
    return cfg


def check_env_config(e) -> None:
    """The env section's tables: reward knobs and backend options by name and type."""
    from gbxcule.backends.warp_vec import TUNING_OPTIONS
    from gbxcule.rl.goals import GoalError, RewardConfig

    if not isinstance(e.backend, dict):
        raise ConfigError("env.backend must be a table")
    unknown = sorted(set(e.backend) - set(TUNING_OPTIONS))
    if unknown:
        raise ConfigError(f"env.backend: unknown option(s) {', '.join(unknown)}; known: {', '.join(TUNING_OPTIONS)}")
    if not isinstance(e.reward, dict):
        raise ConfigError("env.reward must be a table")
    from gbxcule.rl.archive import ArchiveConfig
    from gbxcule.rl.starts import EnvConfigError

    try:
        ArchiveConfig.from_dict(e.archive)
    except EnvConfigError as exc:
        raise ConfigError(f"env.{exc}" if str(exc).startswith("archive") else f"env.archive: {exc}") from None
    try:
        RewardConfig.from_dict(e.reward)
    except GoalError as exc:
        raise ConfigError(f"env.reward: {exc}") from None


def config_from_dict(d: dict):
    """The config a checkpoint recorded."""
    if not isinstance(d, dict):
        raise CheckpointError("the checkpoint's config is not a table")
    return make_config(None, {"algo": d.get("algo", DEFAULT_ALGO), **d})


def _leaves(d: dict, prefix: str = ""):
    """(dotted path, value) of every setting given; an empty table (the CLI's flags of a section, none given)
    gives none."""
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _get(cfg, path: str):
    node = cfg
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
    return node


class RunFinished(GbxculeError):
    """`--resume` of a run that already trained all its steps (nothing is changed)."""


def resume_config(checkpoint: dict, given: dict):
    """The run's own config with the changes `--resume` allows taken from `given` (overrides, and a --config
    file's values); a setting that may not change and differs is refused with one line."""
    stored = config_from_dict(checkpoint["config"])
    stored_dict = to_dict(stored)
    for name in PER_INVOCATION:
        stored_dict["run"][name] = None
    changes: dict = {}
    for path, value in _leaves(drop_none(given)):
        if path in MAY_CHANGE or path.startswith(MAY_CHANGE_TABLES):
            node = changes
            parts = path.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = value
            continue
        have = _get(stored_dict, path)
        if _same(have, value):
            continue
        what = "algo" if path == "algo" else path
        raise ConfigError(f"--resume: {what} is {have!r} in the run, not {value!r}; a resumed run keeps its algo, "
                          f"env and model (only total_steps and run settings such as time_limit_s, eval_episodes, "
                          f"device may change; start a new run for the rest)")
    cfg = make_config(None, {**stored_dict, **_merge_dicts(stored_dict, changes)})
    num_updates = max(1, cfg.total_steps // (get(cfg.algo).steps_per_update(cfg) * checkpoint.get("world_size", 1)))
    if checkpoint["update"] >= num_updates:
        raise RunFinished(f"run {cfg.run.run_dir} already finished: {checkpoint['update']} updates, "
                          f"{checkpoint['global_step']:,} env-steps (total_steps {cfg.total_steps:,}); nothing "
                          f"changed. Pass a larger --total-steps to train on.")
    return cfg


def _same(a, b) -> bool:
    """Equal as settings: lists and tuples alike, a bool never equal to a number."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def _merge_dicts(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge_dicts(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def place_knobs(over: dict, knobs: dict | None, algo: str) -> dict:
    """`over` with `knobs` (settings named without their section, as command-line flags give them) put into
    the algorithm's section; a knob the algorithm does not have is one error line."""
    knobs = drop_none(knobs or {})
    if not knobs:
        return over
    fields = get(algo).config.__dataclass_fields__
    for name in knobs:
        if name not in fields:
            raise ConfigError(f"--{name.replace('_', '-')} is not a setting of {algo}")
    return _merge_dicts(over, {algo: knobs})


def prepare(config_path=None, overrides: dict | None = None, resume: str | Path | None = None,
            knobs: dict | None = None):
    """(config, checkpoint or None) for `gbxcule train`: a fresh config, or the run's own with the allowed
    changes (`resume`: the run folder). `knobs`: settings of whichever algorithm trains (flags)."""
    given = drop_none(overrides or {})
    if resume is None:
        data = read_toml(config_path) if config_path is not None else {}
        algo = given.get("algo", data.get("algo", DEFAULT_ALGO))
        return make_config(config_path, place_knobs(given, knobs, algo if isinstance(algo, str) else "")), None
    folder = Path(resume)
    if folder.is_file():
        raise CheckpointError(f"--resume takes a run folder, and {folder} is a file (its folder is {folder.parent})")
    if not folder.is_dir():
        raise CheckpointError(f"--resume: run folder {folder} does not exist")
    run_dir = given.get("run", {}).get("run_dir")
    if run_dir is not None and Path(run_dir).resolve() != folder.resolve():
        raise ConfigError(f"--resume {folder} and --run-dir {run_dir} name two folders; a resumed run continues "
                          f"in its own folder")
    if not (folder / CHECKPOINT_NAME).is_file():
        raise CheckpointError(f"--resume: {folder} has no {CHECKPOINT_NAME}")
    ck = load_checkpoint(folder, need_training=True)
    if config_path is not None:
        given = _merge_dicts(read_toml(config_path), given)
    given.setdefault("run", {})["run_dir"] = str(folder)
    given = place_knobs(given, knobs, ck["config"].get("algo", DEFAULT_ALGO))
    return resume_config(ck, given), ck


# --- training and evaluation ------------------------------------------------------------------------------------
def train(cfg, resume: bool = False, echo=None, *, checkpoint: dict | None = None, final_eval: bool = False) -> dict:
    """Train `cfg` with its algorithm's trainer; returns the summary. `resume`: continue the run in
    cfg.run.run_dir (cfg may differ from the run's config only where `--resume` allows); `checkpoint`: one
    already loaded by `prepare`. `final_eval`: then evaluate the policy over `run.eval_episodes` episodes into
    eval.json (when the run reached its end, time limit or success). Under torchrun every process calls it
    (`rl/loop.py`: the distributed shell); rank 0's summary is the run's."""
    if resume and checkpoint is None:
        checkpoint = load_checkpoint(cfg.run.run_dir, need_training=True)
        cfg = resume_config(checkpoint, to_dict(cfg))
    summary = trainer(cfg.algo)(cfg, checkpoint, echo)
    if (final_eval and summary["stopped"] in ("done", "time_limit", "stop_at_success") and cfg.run.eval_episodes > 0
            and summary.get("rank", 0) == 0):  # on several processes rank 0 alone evaluates
        from gbxcule.core.outputs import write_output
        from gbxcule.rl.shell import dumps

        summary["eval"] = evaluate(summary["run_dir"], episodes=cfg.run.eval_episodes, device=summary["device"])
        write_output(Path(summary["run_dir"]) / "eval.json", dumps(summary["eval"]) + "\n")
    return summary


def load_model(checkpoint: dict, env, device: str):
    """The checkpoint's model (its algorithm's network with its weights) for `env`, in eval mode."""
    cfg = config_from_dict(checkpoint["config"])
    spec = get(cfg.algo)
    model = spec.build_model(cfg.section, env.num_actions, env.stack_k, env.obs_mode == "packed").to(device)
    if checkpoint.get("model_desc") != model.describe():
        raise CheckpointError(f"checkpoint model {checkpoint.get('model_desc')} does not fit this env's "
                              f"{model.describe()}")
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in checkpoint["model"].items()})
    model.eval()
    return model


def evaluate(source: str | Path, episodes: int = 64, device: str = "auto", task: str | None = None,
             modes=("greedy", "sampled"), gif: str | Path | None = None, gif_envs: int = 16, seed: int = 1,
             random_baseline: bool = False) -> dict:
    """Evaluate the policy at `source` (a run folder, a checkpoint or a policy file) over `episodes` episodes from
    `episodes` start states (reached by random prefixes from the task's start; starts at the goal skipped)."""
    from gbxcule.rl.evaluate import evaluate_model, make_eval_env

    if episodes < 1:
        raise GbxculeError(f"episodes must be >= 1, got {episodes}")
    device = resolve_device(device)
    ck = load_checkpoint(source)
    cfg = config_from_dict(ck["config"])
    env = make_eval_env(cfg.env, episodes, device, seed, task)
    try:
        if env.codec.name != ck.get("codec") or list(env.single_obs_shape) != list(ck.get("obs_shape", [])):
            raise CheckpointError(f"checkpoint is for codec {ck.get('codec')} and observations {ck.get('obs_shape')}, "
                                  f"the env has {env.codec.name} and {list(env.single_obs_shape)}")
        model = load_model(ck, env, device)
        report = evaluate_model(model, env, modes, seed, random_baseline, gif, gif_envs)
    finally:
        env.close()
    return {"checkpoint": str(source), "algo": cfg.algo, "env_steps_trained": ck.get("global_step"), **report}
