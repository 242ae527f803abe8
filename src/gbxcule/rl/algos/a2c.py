"""A2C from pixels, the scale mode for very many envs: no rollout buffer. One file, CleanRL's unit: config, model,
loss, loop; the shared math is `rl/returns.py`, the shell `rl/session.py` (docs/training.md "A2C").

Streaming (`n_step = 1`, the default): each env-step, the logits and value of the current observations, sample,
step the env, bootstrap from the next observation's value under no_grad (the finished episode's last observation
where the step was truncated: truncation is not terminal), policy, value and entropy losses, backward; the
optimizer steps every `update_every` env-steps (gradient accumulation). Memory per env is one observation.

Windows (`n_step = n` > 1): act without gradients for n env-steps, lambda-returns over the window, then one forward
and backward over it: the synchronous A2C of the literature. PPO's update with one epoch (clipped, minibatched,
`ppo.learn_share`) is PPO, not this (rl/algos/ppo.py).

    gbxcule train --algo a2c --task leave_house --num-envs 16384       # streaming TD(0)
    gbxcule train --config configs/leave_house_a2c.toml                # windows of n-step returns
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gbxcule.core.typed import knob
from gbxcule.rl import returns
from gbxcule.rl.config import ConfigError
from gbxcule.rl.models import MODELS, VIEWS, ActorCritic, activation_bytes
from gbxcule.rl.session import AlgoSpec, Session

STAT_NAMES = ("pg_loss", "v_loss", "entropy", "adv_mean", "adv_std", "value_mean")


@dataclass
class A2CConfig:
    update_every: int = knob(4, min=1)  # env-steps whose gradients are accumulated into one optimizer step
    n_step: int = knob(1, min=1)  # 1: TD(0) every env-step; n: lambda-returns over windows of n env-steps
    gae_lambda: float = knob(1.0, min=0, max=1)  # lambda within a window (1: n-step returns)
    steps_per_update: int = knob(32, min=1)  # env-steps per logged update (a multiple of update_every)
    lr: float = knob(5e-4, gt=0)
    anneal_lr: bool = False
    gamma: float = knob(0.99, min=0, max=1)
    ent_coef: float = knob(0.01, min=0)
    ent_coef_end: float | None = knob(None, min=0)  # linear schedule from ent_coef to this over the run
    # adaptive entropy weight (starts at ent_coef): after each update log(ent_coef) moves by ent_lr per nat that
    # the mean entropy lies below (up) or above (down) this share of the uniform policy's log(num_actions)
    target_entropy: float | None = knob(None, gt=0, max=1)
    ent_lr: float = knob(0.05, gt=0)
    vf_coef: float = knob(0.5, min=0)
    max_grad_norm: float = knob(0.5, gt=0)
    norm_adv: bool = True  # advantages normalised over each optimizer step's batch
    model: str = knob("nature", choices=MODELS)
    view: str = knob("full", choices=VIEWS)  # what of the frame the CNN sees (rl/models.py VIEWS)
    milestone_row: bool = False  # the hidden layer also reads the shown milestones' row as a vector (rl/models.py)
    level_heads: int = knob(0, min=0, max=21)  # a policy and value head per shown milestone level (rl/models.py)
    gru: int | None = knob(None, min=1, max=4096)  # a GRU of this size over the CNN features (reset at episode ends)
    compile: bool = False
    amp: str = knob("auto", choices=("auto", "bf16", "off"))  # auto: bf16 autocast on CUDA


def build_model(a: A2CConfig, num_actions: int, stack_k: int, packed: bool) -> ActorCritic:
    return ActorCritic(num_actions, stack_k, packed, a.model, gru=a.gru, view=a.view, milestone_row=a.milestone_row,
                       level_heads=a.level_heads)


def steps_per_update(cfg) -> int:
    return cfg.env.num_envs * cfg.a2c.steps_per_update


def check(cfg) -> None:
    a = cfg.a2c
    if a.steps_per_update % a.update_every:
        raise ConfigError(f"a2c.steps_per_update ({a.steps_per_update}) must be a multiple of a2c.update_every "
                          f"({a.update_every})")
    if a.n_step > a.update_every or a.update_every % a.n_step:
        raise ConfigError(f"a2c.n_step ({a.n_step}) must divide the window of a2c.update_every ({a.update_every}) "
                          f"env-steps")
    if a.ent_coef_end is not None and a.target_entropy is not None:
        raise ConfigError("a2c.ent_coef_end (a schedule) and a2c.target_entropy (an adaptive weight) exclude each "
                          "other")
    if a.n_step > 1 and a.gru is not None:
        raise ConfigError("a2c.gru needs a2c.n_step = 1 (the recurrent state is carried step by step)")


def storage_bytes(cfg, obs_bytes: int) -> int:
    """Device bytes besides the env and the model: the bootstrap observations (streaming), or the window's
    observations, final observations and per-step scalars (n_step > 1)."""
    a, n = cfg.a2c, cfg.env.num_envs
    if a.n_step == 1:
        return n * (obs_bytes + 64 + 4 * (a.gru or 0))
    return a.n_step * n * (2 * obs_bytes + 8 + 4 * 4 + 2)


def working_bytes(cfg) -> tuple[int, int]:
    """(per env, fixed) device bytes of the learner's peak: streaming, a forward and backward over every env with
    the bootstrap value's forward beside it; windows, a window's forward and backward, or acting."""
    a, e = cfg.a2c, cfg.env
    kw = (a.model, e.stack_k, e.obs == "packed")
    net = {"gru": a.gru, "view": a.view}
    train, act = activation_bytes(*kw, True, **net), activation_bytes(*kw, False, **net)
    return (train + act if a.n_step == 1 else max(a.n_step * train, act)), 0


# --- the loss ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class A2CCoefs:
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    norm_adv: bool = True


def bootstrap_obs(next_obs: torch.Tensor, final_obs: torch.Tensor, truncated: torch.Tensor,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """The observation a step's target bootstraps from: the finished episode's last observation where the step
    was truncated (truncation is not terminal), else the next observation (`out`: a buffer to write into)."""
    mask = truncated.view(-1, *([1] * (next_obs.dim() - 1)))
    return torch.where(mask, final_obs, next_obs, out=out) if out is not None else torch.where(mask, final_obs,
                                                                                                   next_obs)


def a2c_loss(logp: torch.Tensor, entropy: torch.Tensor, value: torch.Tensor, target: torch.Tensor,
             c: A2CCoefs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Policy-gradient loss with advantage target - V (no gradient through the target or the advantage), value
    loss 0.5 (V - target)^2, entropy bonus; means over the batch. Returns (loss, device scalars).
    Tests: tests/test_a2c.py."""
    adv = (target - value).detach()
    raw_adv = adv
    if c.norm_adv and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg = -(logp * adv).mean()
    v_loss = 0.5 * ((value - target.detach()) ** 2).mean()
    ent = entropy.mean()
    loss = pg + c.vf_coef * v_loss - c.ent_coef * ent
    stats = {"pg_loss": pg.detach(), "v_loss": v_loss.detach(), "entropy": ent.detach(),
             "adv_mean": raw_adv.mean(), "adv_std": raw_adv.std() if raw_adv.numel() > 1 else raw_adv.sum() * 0,
             "value_mean": value.detach().mean()}
    return loss, stats


def adapt_ent_coef(log_coef: torch.Tensor, entropy: torch.Tensor, target: float, lr: float,
                   lo: float = 1e-4, hi: float = 1.0) -> torch.Tensor:
    """One step of the adaptive entropy weight, in place on the device (no host sync): log(coef) rises by `lr`
    per nat that the policy's mean entropy lies below `target`, falls as much above it, and stays within
    [lo, hi]. Returns `log_coef`."""
    return log_coef.add_(lr * (target - entropy.detach().float())).clamp_(math.log(lo), math.log(hi))


# --- the loop ------------------------------------------------------------------------------------------------------
def train(cfg, checkpoint: dict | None = None, echo=None) -> dict:
    """Train (or continue from `checkpoint`) in cfg.run.run_dir; returns the summary."""
    a = cfg.a2c
    with Session(cfg, checkpoint, echo, device_bytes=lambda ob: storage_bytes(cfg, ob),
                 steps_per_update=steps_per_update(cfg), working_bytes=working_bytes(cfg)) as s:
        env = s.env
        n, dev, obs_shape = env.num_envs, env.device, env.single_obs_shape
        model = build_model(a, env.num_actions, env.stack_k, env.obs_mode == "packed").to(s.device)
        optimizer = torch.optim.Adam(model.parameters(), lr=a.lr, eps=1e-5)
        step_fn = torch.compile(model.forward_step) if a.compile else model.forward_step
        state = model.initial_state(n, dev)
        # the adaptive entropy weight's log, on the device (target_entropy), and the entropy it aims at
        log_coef = (torch.tensor(math.log(max(a.ent_coef, 1e-4)), device=dev)
                    if a.target_entropy is not None else None)
        ent_target = None if a.target_entropy is None else a.target_entropy * math.log(env.num_actions)
        extra = s.start(model, optimizer, state=lambda: {"state": state.cpu().clone() if state is not None
                                                         and s.emu_state else None,
                                                         "log_coef": None if log_coef is None else log_coef.cpu()},
                        describe=f"a2c: {s.storage_bytes / 2**20:,.0f} MiB of step storage on {s.device}; "
                                 f"{s.num_updates} updates of {s.update_steps:,} env-steps, an optimizer "
                                 f"step every {a.update_every} env-steps ({a.update_every * n:,} samples); model "
                                 f"{model.describe()['params']:,} parameters")
        if extra and state is not None:  # restarted envs: new episodes, each its start's state
            env.restart_policy_state(state) if env.restarted else state.copy_(extra["state"])
        if extra and extra.get("log_coef") is not None and log_coef is not None:
            log_coef.copy_(extra["log_coef"])

        timer = s.timer
        hist = torch.zeros(env.num_actions, dtype=torch.int64, device=dev)
        ones = torch.ones(a.n_step * n, dtype=torch.int64, device=dev)  # the trained samples' actions
        sums = torch.zeros(len(STAT_NAMES), dtype=torch.float32, device=dev)
        gn_sum = torch.zeros((), dtype=torch.float32, device=dev)
        boot = torch.zeros((n, *obs_shape), dtype=torch.uint8, device=dev) if a.n_step == 1 else None
        t_len = a.n_step
        if t_len > 1:
            obs_buf = torch.zeros((t_len, n, *obs_shape), dtype=torch.uint8, device=dev)
            final_buf = torch.zeros_like(obs_buf)
            act_buf = torch.zeros((t_len, n), dtype=torch.int64, device=dev)
            val_buf = torch.zeros((t_len, n), dtype=torch.float32, device=dev)
            rew_buf = torch.zeros((t_len, n), dtype=torch.float32, device=dev)
            term_buf = torch.zeros((t_len, n), dtype=torch.bool, device=dev)
            trunc_buf = torch.zeros((t_len, n), dtype=torch.bool, device=dev)
        windows_per_step = a.update_every // t_len
        windows_per_update = a.steps_per_update // t_len

        while s.running:
            lr = returns.linear_lr(a.lr, s.update, s.num_updates, a.anneal_lr)
            for g in optimizer.param_groups:
                g["lr"] = lr
            ent_coef = (returns.linear_schedule(a.ent_coef, a.ent_coef_end, s.update, s.num_updates)
                        if log_coef is None else log_coef.exp())
            coefs = A2CCoefs(a.vf_coef, ent_coef, a.norm_adv)
            sums.zero_()
            gn_sum.zero_()
            hist.zero_()
            by_level = returns.LevelMeans(model.level_heads, dev)  # each level head's entropy
            for k in range(windows_per_update):
                if t_len == 1:
                    mark = timer.start("forward")
                    with s.autocast(a.amp):
                        logits, value, new_state = step_fn(env.obs, state)
                    dist = torch.distributions.Categorical(logits=logits.float(), validate_args=False)
                    action = dist.sample()
                    logp, ent = dist.log_prob(action), dist.entropy()
                    by_level.tally(model.levels(env.obs), ent)
                    timer.stop(mark)
                    mark = timer.start("env")
                    _, reward, term, trunc, _ = env.step(action)
                    timer.stop(mark)
                    mark = timer.start("backward")
                    with torch.no_grad(), s.autocast(a.amp):
                        bootstrap_obs(env.obs, env.final_obs, trunc, out=boot)
                        v_next = model.value(boot, None if new_state is None else new_state.detach()).float()
                    target = returns.td_target(reward, term, v_next, a.gamma)
                    loss, m = a2c_loss(logp, ent, value.float(), target, coefs)
                    (loss / a.update_every).backward()
                    if state is not None:  # carried on, reset where the episode ended
                        state = new_state.detach().float() * (~(term | trunc)).unsqueeze(-1).float()
                else:
                    with torch.no_grad():
                        for t in range(t_len):
                            mark = timer.start("forward")
                            with s.autocast(a.amp):
                                logits, value = model(env.obs)
                            action = torch.distributions.Categorical(logits=logits.float(),
                                                                     validate_args=False).sample()
                            obs_buf[t].copy_(env.obs)
                            act_buf[t] = action
                            val_buf[t] = value.float()
                            timer.stop(mark)
                            mark = timer.start("env")
                            _, reward, term, trunc, _ = env.step(action)
                            rew_buf[t], term_buf[t], trunc_buf[t] = reward, term, trunc
                            final_buf[t].copy_(env.final_obs)
                            timer.stop(mark)
                    mark = timer.start("backward")
                    with torch.no_grad(), s.autocast(a.amp):
                        last_value = model.value(env.obs).float()
                        final_values = returns.truncated_values(model.value, final_buf, trunc_buf)  # one sync
                        _, ret = returns.gae(rew_buf, val_buf, term_buf | trunc_buf, last_value, a.gamma,
                                             a.gae_lambda, trunc_buf, final_values)
                    action = act_buf.reshape(-1)
                    with s.autocast(a.amp):
                        logits, value = model(flat := obs_buf.reshape(t_len * n, *obs_shape))
                    dist = torch.distributions.Categorical(logits=logits.float(), validate_args=False)
                    loss, m = a2c_loss(dist.log_prob(action), ent := dist.entropy(), value.float(), ret.reshape(-1),
                                       coefs)
                    by_level.tally(model.levels(flat), ent)
                    (loss / windows_per_step).backward()
                sums.add_(torch.stack([m[name].float() for name in STAT_NAMES]))
                hist.index_add_(0, action, ones)
                timer.stop(mark)
                if (k + 1) % windows_per_step == 0:
                    mark = timer.start("optimizer")
                    gn_sum.add_(s.apply_gradients(model, optimizer, a.max_grad_norm))
                    optimizer.zero_grad(set_to_none=True)
                    timer.stop(mark)
            mean = sums / windows_per_update
            if log_coef is not None:  # next update's weight, from this one's mean entropy
                adapt_ent_coef(log_coef, mean[STAT_NAMES.index("entropy")], ent_target, a.ent_lr)
            metrics = {"lr": lr, "ent_coef": ent_coef, **dict(zip(STAT_NAMES, mean.unbind(0), strict=True)),
                       "grad_norm": gn_sum / (a.steps_per_update // a.update_every), "actions": hist,
                       **by_level.read("entropy")}
            s.end_update(a.steps_per_update * n, metrics, guard=("pg_loss", "v_loss", "grad_norm"))
    return s.summary


ALGO = AlgoSpec("a2c", A2CConfig, build_model, steps_per_update, train, check=check, working_bytes=working_bytes,
                summary="A2C: streaming TD(0) or n-step windows, one gradient per update_every env-steps")
