"""PPO from pixels with the whole loop on the device (docs/training.md): env stepping, policy, rollout storage
and updates. One file, CleanRL-style; the math is in `ppo.py`, the shell (config, logs, checkpoints) in
`shell.py`.

    gbxcule train --task leave_house --num-envs 4096 --total-steps 20000000
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from gbxcule.backends.warp_vec import TUNING_OPTIONS as BACKEND_OPTIONS
from gbxcule.core.errors import GbxculeError
from gbxcule.core.memory import fit, host_available
from gbxcule.rl import ppo
from gbxcule.rl.env import GameEnv
from gbxcule.rl.models import ActorCritic
from gbxcule.rl.shell import (
    CheckpointError,
    ConfigError,
    EnvConfig,
    NonFiniteError,
    Progress,
    Run,
    RunConfig,
    load_checkpoint,
    load_config,
    resolve_device,
    rng_state,
    seed_everything,
    set_rng_state,
    to_dict,
)

ENV_STATE_AUTO_LIMIT = 512 * 2**20
POLICY_NAME = "policy.pt"


@dataclass
class PPOConfig:
    rollout_steps: int = 32
    epochs: int = 4
    minibatches: int = 4
    lr: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.1
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    norm_adv: bool = True
    target_kl: float | None = None
    model: str = "nature"
    compile: bool = False
    amp: str = "auto"  # "bf16", "off", or auto: bf16 autocast on CUDA


@dataclass
class TrainConfig:
    algo: str = "ppo"
    total_steps: int = 1_000_000
    env: EnvConfig = field(default_factory=EnvConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def check(self) -> None:
        p, e = self.ppo, self.env
        if self.algo != "ppo":
            raise ConfigError(f"algo {self.algo!r} is not available; this trainer runs ppo")
        for name, v in (("total_steps", self.total_steps), ("env.num_envs", e.num_envs),
                        ("ppo.rollout_steps", p.rollout_steps), ("ppo.epochs", p.epochs),
                        ("ppo.minibatches", p.minibatches), ("run.checkpoint_every", self.run.checkpoint_every)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {v!r}")
        if p.minibatches > e.num_envs * p.rollout_steps:
            raise ConfigError(f"ppo.minibatches ({p.minibatches}) exceeds the batch ({e.num_envs * p.rollout_steps})")
        for name, v in (("lr", p.lr), ("clip", p.clip), ("max_grad_norm", p.max_grad_norm)):
            if not (isinstance(v, int | float) and v > 0 and math.isfinite(v)):
                raise ConfigError(f"ppo.{name} must be a positive number, got {v!r}")
        for name, v in (("gamma", p.gamma), ("gae_lambda", p.gae_lambda)):
            if not (isinstance(v, int | float) and 0 <= v <= 1):
                raise ConfigError(f"ppo.{name} must be in [0, 1], got {v!r}")
        if p.amp not in ("auto", "bf16", "off"):
            raise ConfigError(f"ppo.amp must be auto, bf16 or off, got {p.amp!r}")
        if self.run.checkpoint_env_state not in ("auto", "always", "never"):
            raise ConfigError("run.checkpoint_env_state must be auto, always or never")
        unknown = sorted(set(e.backend) - set(BACKEND_OPTIONS)) if isinstance(e.backend, dict) else ["(not a table)"]
        if unknown:
            raise ConfigError(f"env.backend: unknown option(s) {', '.join(unknown)}; "
                              f"known: {', '.join(BACKEND_OPTIONS)}")

    @property
    def batch_size(self) -> int:
        return self.env.num_envs * self.ppo.rollout_steps

    @property
    def num_updates(self) -> int:
        return max(1, self.total_steps // self.batch_size)


def make_config(path=None, overrides: dict | None = None) -> TrainConfig:
    cfg = load_config(TrainConfig, path, overrides)
    cfg.check()
    return cfg


def config_from_dict(d: dict) -> TrainConfig:
    """The config a checkpoint recorded (None values keep the defaults, which are None where that can occur)."""
    return make_config(None, d)


def make_env(e: EnvConfig, device: str, seed: int, num_envs: int | None = None, **kw) -> GameEnv:
    start = e.start_states
    try:
        return GameEnv(e.rom, num_envs or e.num_envs, device, task=e.task, start_states=start, stack_k=e.stack_k,
                       obs=e.obs, max_steps=e.max_steps, reward=e.reward, goal=e.goal, seed=seed,
                       backend_options=e.backend, **kw)
    except (TypeError, ValueError) as exc:  # a backend option of the wrong type or value
        if isinstance(exc, GbxculeError):
            raise
        raise ConfigError(f"env: {exc}") from None


def make_model(env: GameEnv, p: PPOConfig, device: str) -> ActorCritic:
    return ActorCritic(env.num_actions, env.stack_k, env.obs_mode == "packed", p.model).to(device)


def rollout_bytes(cfg: TrainConfig, obs_bytes: int) -> int:
    """Device bytes of the rollout storage: observations twice (the obs and the finished episodes' last obs,
    for truncation bootstraps), plus actions, log-probs, values, rewards, flags, advantages, returns."""
    t, n = cfg.ppo.rollout_steps, cfg.env.num_envs
    return t * n * (2 * obs_bytes + 8 + 4 * 6 + 2)


class _Timer:
    """Time spent in env steps, inference and updates: CUDA events (read once per update) or the host clock."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.acc = {"env": 0.0, "inference": 0.0, "update": 0.0}
        self._events: list[tuple[str, object, object]] = []
        self._pool: list = []

    def start(self, name: str):
        if self.cuda:
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
            self.acc[name] += time.perf_counter() - a

    def read(self) -> dict[str, float]:
        if self.cuda:
            torch.cuda.synchronize()
            for name, a, b in self._events:
                self.acc[name] += a.elapsed_time(b) / 1000.0
                self._pool += [a, b]
            self._events.clear()
        out, self.acc = self.acc, dict.fromkeys(self.acc, 0.0)
        return out


def train(cfg: TrainConfig, resume: bool = False, echo=None) -> dict:
    """Train (or, with `resume`, continue the run in cfg.run.run_dir); returns the summary."""
    checkpoint = None
    if resume:
        from pathlib import Path

        folder = Path(cfg.run.run_dir)
        if not folder.is_dir():
            raise CheckpointError(f"--resume: run folder {folder} does not exist")
        if not (folder / "checkpoint.pt").is_file():
            raise CheckpointError(f"--resume: {folder} has no checkpoint.pt")
        checkpoint = load_checkpoint(folder)
        stored = config_from_dict(checkpoint["config"])
        stored.run.progress, stored.run.run_dir = cfg.run.progress, cfg.run.run_dir
        stored.run.time_limit_s, stored.run.stop_after_updates = cfg.run.time_limit_s, cfg.run.stop_after_updates
        cfg = stored
    device = resolve_device(cfg.run.device)
    cuda = device.startswith("cuda")
    run = Run(cfg.run.run_dir, to_dict(cfg), resume=resume, tensorboard=cfg.run.tensorboard)
    seed_everything(cfg.run.seed)
    env = make_env(cfg.env, device, cfg.run.seed, keep_final_obs=True, info_mode="none")
    model = make_model(env, cfg.ppo, device)
    obs_shape = env.single_obs_shape
    obs_bytes = int(np.prod(obs_shape))
    need = rollout_bytes(cfg, obs_bytes)
    if cuda:
        free, _ = torch.cuda.mem_get_info()
        fit(1, need + 2**30, free, "device")  # plus ~1 GiB for the model, optimizer and activations
    else:
        fit(1, need, host_available(), "host")
    if echo:
        echo(f"rollout storage {need / 2**20:,.0f} MiB on {device}; {cfg.num_updates} updates of "
             f"{cfg.batch_size:,} env-steps; model {model.describe()['params']:,} parameters")
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.ppo.lr, eps=1e-5)
    amp = cfg.ppo.amp == "bf16" or (cfg.ppo.amp == "auto" and cuda)
    fwd = torch.compile(model) if cfg.ppo.compile else model
    sampler = torch.Generator().manual_seed(cfg.run.seed)
    emu_state = cfg.run.checkpoint_env_state == "always" or (
        cfg.run.checkpoint_env_state == "auto" and env.emulator_bytes() <= ENV_STATE_AUTO_LIMIT)

    start_update, global_step, wall_before = 0, 0, 0.0
    if checkpoint is not None:
        if checkpoint.get("model_desc") != model.describe():
            raise CheckpointError(f"checkpoint model {checkpoint.get('model_desc')} does not fit {model.describe()}")
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        start_update, global_step = checkpoint["update"], checkpoint["global_step"]
        wall_before = checkpoint.get("wall_s", 0.0)
        env.load_state_dict(checkpoint["env"])
        sampler.set_state(checkpoint["sampler"])
        set_rng_state(checkpoint["rng"])
        run.truncate_log(start_update)
    else:
        env.reset(seed=cfg.run.seed)

    t_len, n = cfg.ppo.rollout_steps, env.num_envs
    dev = env.device
    obs_buf = torch.zeros((t_len, n, *obs_shape), dtype=torch.uint8, device=dev)
    final_buf = torch.zeros_like(obs_buf)
    act_buf = torch.zeros((t_len, n), dtype=torch.int64, device=dev)
    logp_buf = torch.zeros((t_len, n), dtype=torch.float32, device=dev)
    val_buf = torch.zeros((t_len, n), dtype=torch.float32, device=dev)
    rew_buf = torch.zeros((t_len, n), dtype=torch.float32, device=dev)
    term_buf = torch.zeros((t_len, n), dtype=torch.bool, device=dev)
    trunc_buf = torch.zeros((t_len, n), dtype=torch.bool, device=dev)
    coefs = ppo.LossCoefs(cfg.ppo.clip, cfg.ppo.vf_coef, cfg.ppo.ent_coef, cfg.ppo.clip_vloss)
    timer = _Timer(cuda)
    progress = Progress(cfg.num_updates, cfg.run.progress, start_update)
    t_start = time.perf_counter()
    last: dict = {}
    update = start_update
    stopped = "done"

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp) if cuda else torch.autocast(
            "cpu", enabled=False)

    def save(name: str = "checkpoint.pt"):
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "update": update,
                 "global_step": global_step, "rng": rng_state(), "sampler": sampler.get_state(),
                 "env": env.state_dict(emulator=emu_state), "config": to_dict(cfg), "model_desc": model.describe(),
                 "codec": env.codec.name, "obs_shape": list(obs_shape), "wall_s": wall_before + time.perf_counter()
                 - t_start, "metrics": last}
        run.save_checkpoint(state, name)
        # policy.pt: what `gbxcule eval` needs and nothing else (fp16 weights, no optimizer or env state)
        slim = {k: state[k] for k in ("update", "global_step", "config", "model_desc", "codec", "obs_shape",
                                      "wall_s", "metrics")}
        slim["model"] = {k: v.half() if v.is_floating_point() else v for k, v in model.state_dict().items()}
        run.save_checkpoint(slim, POLICY_NAME)

    try:
        while update < cfg.num_updates:
            lr = ppo.linear_lr(cfg.ppo.lr, update, cfg.num_updates, cfg.ppo.anneal_lr)
            for g in optimizer.param_groups:
                g["lr"] = lr
            t0 = time.perf_counter()
            for t in range(t_len):
                mark = timer.start("inference")
                obs_buf[t].copy_(env.obs)
                with torch.no_grad(), autocast():
                    logits, value = fwd(obs_buf[t])
                dist = torch.distributions.Categorical(logits=logits.float(), validate_args=False)
                action = dist.sample()
                act_buf[t] = action
                logp_buf[t] = dist.log_prob(action)
                val_buf[t] = value.float()
                timer.stop(mark)
                mark = timer.start("env")
                _, reward, term, trunc, _ = env.step(action)
                rew_buf[t] = reward
                term_buf[t] = term
                trunc_buf[t] = trunc
                final_buf[t].copy_(env.final_obs)
                timer.stop(mark)
            global_step += t_len * n
            mark = timer.start("update")
            with torch.no_grad(), autocast():
                last_value = model.value(env.obs).float()
                final_values = torch.zeros_like(val_buf)
                idx = trunc_buf.nonzero()  # one sync per update: the truncated steps, usually few
                for chunk in idx.split(8192):
                    final_values[chunk[:, 0], chunk[:, 1]] = model.value(final_buf[chunk[:, 0], chunk[:, 1]]).float()
                dones = term_buf | trunc_buf
                adv, ret = ppo.gae(rew_buf, val_buf, dones, last_value, cfg.ppo.gamma, cfg.ppo.gae_lambda,
                                   trunc_buf, final_values)
            b_obs = obs_buf.reshape(t_len * n, *obs_shape)
            b_act, b_logp = act_buf.reshape(-1), logp_buf.reshape(-1)
            b_adv, b_ret, b_val = adv.reshape(-1), ret.reshape(-1), val_buf.reshape(-1)
            stats = []
            for _epoch in range(cfg.ppo.epochs):
                for mb in ppo.minibatches(cfg.batch_size, cfg.ppo.minibatches, sampler, dev):
                    with autocast():
                        logits, new_v = fwd(b_obs[mb])
                    dist = torch.distributions.Categorical(logits=logits.float(), validate_args=False)
                    a = b_adv[mb]
                    if cfg.ppo.norm_adv:
                        a = ppo.normalize(a)
                    loss, m = ppo.ppo_loss(dist.log_prob(b_act[mb]), b_logp[mb], a, new_v.float(), b_val[mb],
                                           b_ret[mb], dist.entropy(), coefs)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    m["grad_norm"] = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.ppo.max_grad_norm)
                    m["loss"] = loss.detach()
                    optimizer.step()
                    stats.append(torch.stack([v.float() for v in m.values()]))
                    names = list(m)
                epoch_stats = torch.stack(stats).mean(0)
                if not bool(torch.isfinite(epoch_stats).all()):  # once per epoch
                    raise NonFiniteError(dict(zip(names, epoch_stats.tolist(), strict=True)))
                if cfg.ppo.target_kl is not None and float(epoch_stats[names.index("approx_kl")]) > cfg.ppo.target_kl:
                    break
            timer.stop(mark)
            # --- once per update: read the device, log, checkpoint -----------------------------------------
            mean = dict(zip(names, torch.stack(stats).mean(0).tolist(), strict=True))
            ev = float(ppo.explained_variance(b_val, b_ret))
            hist = torch.bincount(b_act, minlength=env.num_actions).tolist()
            times = timer.read()
            ep = env.episode_stats()
            update += 1
            dt = time.perf_counter() - t0
            last = {"env_steps": global_step, "lr": lr, **mean, "explained_variance": ev,
                    "sps": t_len * n / dt, "time_env_s": times["env"], "time_inference_s": times["inference"],
                    "time_update_s": times["update"], "wall_s": wall_before + time.perf_counter() - t_start,
                    "actions": hist, **{k: v for k, v in ep.items() if k != "env_steps"}}
            run.log(update, last)
            progress.update(update, last)
            if update % cfg.run.checkpoint_every == 0 or update == cfg.num_updates:
                save()
            if cfg.run.stop_after_updates is not None and update - start_update >= cfg.run.stop_after_updates:
                stopped = "stop_after_updates"
                break
            if cfg.run.time_limit_s is not None and time.perf_counter() - t_start >= cfg.run.time_limit_s:
                stopped = "time_limit"
                save()
                break
    except NonFiniteError as exc:
        run.write_json("nonfinite.json", {"update": update, "config": to_dict(cfg), "last_metrics": last,
                                          "batch_stats": exc.args[0]})
        progress.close()
        run.close()
        raise GbxculeError(f"training stopped at update {update + 1}: a loss or gradient became NaN/inf "
                           f"(snapshot in {run.dir / 'nonfinite.json'}; the last good checkpoint is kept)") from None
    progress.close()
    summary = {"run_dir": str(run.dir), "updates": update, "num_updates": cfg.num_updates, "env_steps": global_step,
               "stopped": stopped, "device": device, "wall_s": wall_before + time.perf_counter() - t_start,
               "last": last}
    run.write_json("summary.json", summary)
    run.close()
    env.close()
    return summary
