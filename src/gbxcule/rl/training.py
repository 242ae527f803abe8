"""The trainer room's front door: a whole config for an algorithm (`make_config`), a fresh or resumed run
(`prepare`, `resume_config`), training it (`train`) and loading what it learned (`load_model`, `evaluate`).

Settings are read in the documented order: defaults, the algorithm's env defaults, `--config`, the flags (an
algorithm's own flags such as `--lr` go into its section), then `--set` over all of them. What `--resume` may
change is each field's own metadata (`core/typed.py` CHANGE and ONCE); everything else must equal the run's value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from gbxcule.core.errors import GbxculeError
from gbxcule.core.typed import CHANGE, ONCE
from gbxcule.rl.algos import ALGOS, DEFAULT_ALGO, get
from gbxcule.rl.archive import explorer_envs, keeps_memory
from gbxcule.rl.config import (
    ConfigError,
    check_env_config,
    drop_none,
    leaves,
    load_config,
    merge_overrides,
    read_toml,
    resolve_device,
    resume_rule,
    setting_paths,
    to_dict,
    train_config_class,
)
from gbxcule.rl.evaluate import EVAL_SEED
from gbxcule.rl.rundir import CHECKPOINT_NAME, CheckpointError, dumps, final_policy, load_checkpoint
from gbxcule.rl.tasks import load_task

if TYPE_CHECKING:
    from gbxcule.rl.tasks import Task


class RunFinished(GbxculeError):
    """`--resume` of a run that already trained all its steps (nothing is changed)."""


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
    update = spec.steps_per_update(cfg)
    if update > cfg.total_steps:
        raise ConfigError(f"one update of {cfg.algo} is {update:,} env-steps ({cfg.env.num_envs:,} envs), more than "
                          f"total_steps ({cfg.total_steps:,}): lower the update's steps or raise total_steps")
    if explorer_envs(cfg.env.archive, cfg.env.num_envs) and not spec.explorers:
        raise ConfigError(f"env.archive.explorers: {algo} would store the action it chose for an explorer, not the "
                          f"random one taken (only ppo leaves explorers out); set it to 0 or train ppo")
    if keeps_memory(cfg.env.archive) and not spec.cell_memory:
        raise ConfigError(f"env.archive.memory = 'cell' keeps a recurrent policy's state with the cells: {algo} does "
                          f"not (ppo with ppo.gru does); set it to 'zero' or train ppo")
    shown_for_model(cfg)
    if spec.check is not None:
        spec.check(cfg)
    return cfg


def shown_for_model(cfg) -> None:
    """Sets cfg.env.show_milestones as the model's knobs that read its row (`<algo>.milestone_row`,
    `<algo>.level_heads`; every algorithm has both) need it: with it "off" they are refused (one line); "auto" on a
    task that names no milestones becomes "on", a blank row (no milestone held, level 0), so one config trains tasks
    with milestones and tasks without (the row would otherwise be the screen's). At a config's check (config.json
    records it, so evals and resumes draw the same row) and at an eval on another task (`eval_env`)."""
    env = cfg.env
    for row_knob in ("milestone_row", "level_heads"):
        if not getattr(cfg.section, row_knob, False):
            continue
        if env.show_milestones == "off":
            raise ConfigError(f"{cfg.algo}.{row_knob} reads the milestones env.show_milestones draws in the last row: "
                              f"set env.show_milestones to \"auto\" or \"on\"")
        if env.show_milestones == "auto" and not load_task(env.task).milestones:
            env.show_milestones = "on"


def eval_env(cfg, episodes: int, device: str, seed: int, task: str | Task | None = None):
    """`evaluate.make_eval_env` for a run's config `cfg`, on its task or `task` (then the row its model reads is
    drawn as that task needs it: `shown_for_model`; `cfg` is changed)."""
    from gbxcule.rl.evaluate import make_eval_env

    if task is not None:
        cfg.env.task = task
        shown_for_model(cfg)
    return make_eval_env(cfg.env, episodes, device, seed)


# The windowed, clipped, minibatched learner that was `--algo a2c` is PPO with one epoch: the names of its old
# `[a2c]` settings in `[ppo]` (a checkpoint of it is read for evaluation; resuming it is refused).
_WINDOWED_A2C = {"n_step": "rollout_steps", "minibatches": "minibatches", "learn_share": "learn_share",
                 "clip": "clip", "clip_vloss": "clip_vloss", "gae_lambda": "gae_lambda", "lr": "lr",
                 "anneal_lr": "anneal_lr", "gamma": "gamma", "ent_coef": "ent_coef", "vf_coef": "vf_coef",
                 "max_grad_norm": "max_grad_norm", "norm_adv": "norm_adv", "model": "model",
                 "channels_last": "channels_last", "compile": "compile", "amp": "amp", "view": "view"}
_GONE_A2C = ("minibatches", "learn_share", "clip", "clip_vloss", "target_kl", "channels_last")


def config_from_dict(d: dict, evaluate_only: bool = False):
    """The config a checkpoint recorded. A run of the windowed A2C of before it became PPO (`[a2c]` with
    minibatches, clip, learn_share or channels_last) reads as the PPO config it is, for evaluation only."""
    if not isinstance(d, dict):
        raise CheckpointError("the checkpoint's config is not a table")
    d = dict(d)
    section = d.get("a2c")
    if d.get("algo") == "a2c" and isinstance(section, dict) and any(k in section for k in _GONE_A2C):
        if not evaluate_only:
            raise CheckpointError("this run was trained by the windowed A2C (a2c.minibatches, a2c.clip) that is now "
                                  "PPO with one epoch (docs/training.md): it can be evaluated, not resumed; start a "
                                  "new run with --algo ppo --set ppo.epochs=1")
        d["algo"] = "ppo"
        d["ppo"] = {new: section[old] for old, new in _WINDOWED_A2C.items() if old in section} | {"epochs": 1}
        del d["a2c"]
    return make_config(None, {"algo": d.get("algo", DEFAULT_ALGO), **d})


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
    return merge_overrides(over, {algo: knobs})


def _get(tree, path: str):
    node = tree
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
    return node


def _same(a, b) -> bool:
    """Equal as settings: lists and tuples alike, a bool never equal to a number."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def resume_config(checkpoint: dict, given: dict):
    """The run's own config with the changes `--resume` allows taken from `given` (overrides, and a --config
    file's values); a setting that may not change and differs is refused with one line."""
    stored = config_from_dict(checkpoint["config"])
    stored_dict = to_dict(stored)
    for path in setting_paths(stored, ONCE):  # settings of one invocation: not kept
        node = stored_dict
        *parents, last = path.split(".")
        for part in parents:
            node = node[part]
        node[last] = None
    changes: dict = {}
    for path, value in leaves(drop_none(given)):
        if resume_rule(stored, path) in (CHANGE, ONCE):
            node = changes
            parts = path.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = value
            continue
        have = _get(stored_dict, path)
        if _same(have, value):
            continue
        raise ConfigError(f"--resume: {path} is {have!r} in the run, not {value!r}; a resumed run keeps its algo, "
                          f"env and model (only total_steps and run settings such as time_limit_s, eval_episodes, "
                          f"device may change; start a new run for the rest)")
    if changes.get("env", {}).get("archive") and not stored.env.archive:
        raise ConfigError("--resume: the run has no state archive, so env.archive settings have nothing to apply to "
                          "(start a new run with one)")
    cfg = make_config(None, merge_overrides(stored_dict, changes))
    if _task_name(cfg.env.task) != _task_name(stored.env.task):
        raise ConfigError(f"--resume: the run's task is {_task_name(stored.env.task)!r}, not "
                          f"{_task_name(cfg.env.task)!r} (--task may only say where its pack is now)")
    spec = get(cfg.algo)
    num_updates = max(1, cfg.total_steps // (spec.steps_per_update(cfg) * checkpoint.get("world_size", 1)))
    if checkpoint["update"] >= num_updates:
        raise RunFinished(f"run {cfg.run.run_dir} already finished: {checkpoint['update']} updates, "
                          f"{checkpoint['global_step']:,} env-steps (total_steps {cfg.total_steps:,}); nothing "
                          f"changed. Pass a larger --total-steps to train on.")
    return cfg


def _task_name(task: str) -> str:
    """A task setting's name part (`pack.toml:NAME` -> NAME, `pack:NAME` -> NAME)."""
    return task.rpartition(":")[2] if ":" in task else task


def _algo_of(*sources: dict) -> str:
    for src in sources:
        if "algo" in src:
            return src["algo"] if isinstance(src["algo"], str) else ""
    return DEFAULT_ALGO


def prepare(config_path=None, overrides: dict | None = None, resume: str | Path | None = None,
            knobs: dict | None = None, sets: dict | None = None):
    """(config, checkpoint or None) for `gbxcule train`: a fresh config, or the run's own with the allowed
    changes (`resume`: the run folder). `overrides`: the flags' settings; `knobs`: the algorithm's own flags (put
    into whichever algorithm trains); `sets`: `--set` settings, over all of them."""
    flags = drop_none(overrides or {})
    sets = drop_none(sets or {})
    if resume is None:
        data = read_toml(config_path) if config_path is not None else {}
        algo = _algo_of(sets, flags, data)
        return make_config(config_path, merge_overrides(place_knobs(flags, knobs, algo), sets)), None
    folder = Path(resume)
    if folder.is_file():
        raise CheckpointError(f"--resume takes a run folder, and {folder} is a file (its folder is {folder.parent})")
    if not folder.is_dir():
        raise CheckpointError(f"--resume: run folder {folder} does not exist")
    given = merge_overrides(flags, sets)
    run_dir = given.get("run", {}).get("run_dir")
    if run_dir is not None and Path(run_dir).resolve() != folder.resolve():
        raise ConfigError(f"--resume {folder} and --run-dir {run_dir} name two folders; a resumed run continues "
                          f"in its own folder")
    if not (folder / CHECKPOINT_NAME).is_file():
        raise CheckpointError(f"--resume: {folder} has no {CHECKPOINT_NAME}")
    ck = load_checkpoint(folder, need_training=True)
    check_own_checkpoint(folder, ck)
    if config_path is not None:
        flags = merge_overrides(read_toml(config_path), flags)
    flags.setdefault("run", {})["run_dir"] = str(folder)
    algo = ck["config"].get("algo", DEFAULT_ALGO)
    return resume_config(ck, merge_overrides(place_knobs(flags, knobs, algo), sets)), ck


def check_own_checkpoint(folder: Path, ck: dict) -> None:
    """A run folder's checkpoint must be its own run's: the algorithm config.json names (a checkpoint copied in
    from another run is refused, not resumed as whatever it holds)."""
    try:
        own = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return  # no readable config.json (a folder of an older layout): the checkpoint's config rules
    if isinstance(own, dict) and own.get("algo", DEFAULT_ALGO) != ck["config"].get("algo", DEFAULT_ALGO):
        raise CheckpointError(f"--resume: {folder / CHECKPOINT_NAME} is a {ck['config'].get('algo')} run's, but "
                              f"{folder / 'config.json'} is a {own.get('algo')} run's: the checkpoint is not this "
                              f"folder's; nothing changed")


def train(cfg, resume: bool = False, echo=None, *, checkpoint: dict | None = None, final_eval: bool = False) -> dict:
    """Train `cfg` with its algorithm; returns the summary. `resume`: continue the run in cfg.run.run_dir (cfg may
    differ from the run's config only where `--resume` allows); `checkpoint`: one already loaded by `prepare`.
    `final_eval`: then evaluate the policy over `run.eval_episodes` episodes into eval.json (when the run reached
    its end, time limit or success). Under torchrun every process calls it (`rl/session.py`); rank 0's summary is
    the run's."""
    if resume and checkpoint is None:
        checkpoint = load_checkpoint(cfg.run.run_dir, need_training=True)
        cfg = resume_config(checkpoint, to_dict(cfg))
    summary = get(cfg.algo).train(cfg, checkpoint, echo)
    if (final_eval and summary["stopped"] in ("done", "time_limit", "stop_at_success") and cfg.run.eval_episodes > 0
            and summary.get("rank", 0) == 0):  # on several processes rank 0 alone evaluates
        if summary.get("signal"):  # a stop asked for while the run ended (its last eval, say): no more waiting
            if echo is not None:
                echo(f"{summary['signal']} as the run ended: no final eval (eval.json); gbxcule eval "
                     f"{summary['run_dir']} plays its policy")
            return summary
        from gbxcule.core.outputs import write_output

        summary["eval"] = evaluate(summary["run_dir"], episodes=cfg.run.eval_episodes, device=summary["device"])
        write_output(Path(summary["run_dir"]) / "eval.json", dumps(summary["eval"]) + "\n")
    return summary


def load_model(checkpoint: dict, env, device: str):
    """The checkpoint's model (its algorithm's network with its weights) for `env`, in eval mode."""
    cfg = config_from_dict(checkpoint["config"], evaluate_only=True)
    spec = get(cfg.algo)
    model = spec.build_model(cfg.section, env.num_actions, env.stack_k, env.obs_mode == "packed").to(device)
    if checkpoint.get("model_desc") != model.describe():
        raise CheckpointError(f"checkpoint model {checkpoint.get('model_desc')} does not fit this env's "
                              f"{model.describe()}")
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in checkpoint["model"].items()})
    model.eval()
    return model


def evaluate(source: str | Path, episodes: int = 64, device: str = "auto", task: str | Task | None = None,
             modes=("greedy", "sampled"), gif: str | Path | None = None, gif_envs: int = 16, seed: int = EVAL_SEED,
             random_baseline: bool = False, rom: str | None = None) -> dict:
    """Evaluate the policy at `source` (a run folder: its final policy.pt; a checkpoint or a policy file) over
    `episodes` episodes from `episodes` start states (reached by random prefixes from the task's start; starts at
    the goal skipped)."""
    from gbxcule.rl.evaluate import evaluate_model

    if episodes < 1:
        raise GbxculeError(f"episodes must be >= 1, got {episodes}")
    device = resolve_device(device)
    ck = load_checkpoint(final_policy(source))
    cfg = config_from_dict(ck["config"], evaluate_only=True)
    if rom is not None:  # where the run's ROM is now (its SHA-1 is checked)
        cfg.env.rom = rom
    env = eval_env(cfg, episodes, device, seed, task)
    try:
        if env.codec.name != ck.get("codec") or list(env.single_obs_shape) != list(ck.get("obs_shape", [])):
            raise CheckpointError(f"checkpoint is for codec {ck.get('codec')} and observations {ck.get('obs_shape')}, "
                                  f"the env has {env.codec.name} and {list(env.single_obs_shape)}")
        model = load_model(ck, env, device)
        report = evaluate_model(model, env, modes, seed, random_baseline, gif, gif_envs, amp=cfg.section.amp)
    finally:
        env.close()
    return {"checkpoint": str(source), "algo": cfg.algo, "env_steps_trained": ck.get("global_step"), **report}
