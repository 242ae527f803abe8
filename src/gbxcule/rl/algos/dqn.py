"""DQN from pixels with the whole loop on the device: Double DQN with n-step returns, a target network, an n-step
replay buffer on the device (`rl/replay.py`), epsilon-greedy acting for all envs in one forward, `replay_ratio`
gradient steps per step of all envs. One file, CleanRL's unit: config, model, loss, loop; the shared math is
`rl/returns.py`, the shell (run folder, logs, eval, checkpoints, stop rules) `rl/session.py`.

    gbxcule train --algo dqn --config configs/leave_house_dqn.toml --device cuda
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from fractions import Fraction

import torch
import torch.nn.functional as F

from gbxcule.core.typed import knob
from gbxcule.rl import returns
from gbxcule.rl.config import ConfigError, obs_bytes, resolve_device
from gbxcule.rl.models import MODELS, VIEWS, QNetwork, activation_bytes, epsilon_greedy, epsilon_ladder, ladder_epsilons
from gbxcule.rl.replay import ReplayBuffer, ReplayError, check_memory, plan
from gbxcule.rl.session import AlgoSpec, Session
from gbxcule.rl.tasks import load_task


@dataclass
class DQNConfig:
    buffer_size: int = knob(100_000, min=1)  # transitions held (rounded down to whole steps of all envs)
    batch_size: int = knob(256, min=1)
    replay_ratio: float = knob(1.0, gt=0)  # gradient steps per step of all envs (0.25: one every 4 steps)
    learning_starts: int = knob(10_000, min=1)  # sampleable transitions before the first gradient step
    log_every: int = knob(32, min=1)  # steps of all envs per logged update
    n_step: int = knob(3, min=1)
    gamma: float = knob(0.99, min=0, max=1)
    lr: float = knob(1e-4, gt=0)
    anneal_lr: bool = False
    adam_eps: float = knob(1.5e-4, gt=0)
    max_grad_norm: float | None = knob(10.0, gt=0)
    double: bool = True  # Double DQN: the online network picks the next action, the target network rates it
    target_every: int = knob(250, min=1)  # gradient steps between target-network updates
    tau: float = knob(1.0, gt=0, max=1)  # target <- tau * online + (1 - tau) * target (1: a hard copy)
    epsilon_start: float = knob(1.0, min=0, max=1)
    epsilon_end: float = knob(0.01, min=0, max=1)
    exploration_fraction: float = knob(0.1, gt=0, max=1)  # of total_steps, over which epsilon falls linearly
    # Ape-X's ladder: env i of N explores with epsilon ** (1 + epsilon_ladder * i / (N - 1)), epsilon the schedule's
    # (with epsilon_end 0.4 and 7: from 0.4 to 0.00066 at the end); 0: every env at epsilon
    epsilon_ladder: float = knob(0.0, min=0, max=16)
    loss: str = knob("huber", choices=("huber", "mse"))
    dueling: bool = False
    prioritized: bool = False  # proportional prioritized replay (a sum-tree on the device)
    priority_alpha: float = knob(0.6, min=0)
    priority_beta: float = knob(0.4, min=0, max=1)  # importance-weight exponent, annealed to 1 over the run
    checkpoint_buffer: bool = False  # keep the buffer in checkpoints (bit-exact resume; else resume refills it)
    model: str = knob("nature", choices=MODELS)
    view: str = knob("full", choices=VIEWS)  # what of the frame the CNN sees (rl/models.py VIEWS)
    milestone_row: bool = False  # the hidden layer also reads the shown milestones' row as a vector (rl/models.py)
    level_heads: int = knob(0, min=0, max=21)  # a Q head per shown milestone level (rl/models.py)
    compile: bool = False  # torch.compile the network and the loss
    amp: str = knob("auto", choices=("auto", "bf16", "off"))  # auto: bf16 autocast on CUDA


def build_model(d: DQNConfig, num_actions: int, stack_k: int, packed: bool) -> QNetwork:
    return QNetwork(num_actions, stack_k, packed, d.model, dueling=d.dueling, view=d.view,
                    milestone_row=d.milestone_row, level_heads=d.level_heads)


def steps_per_update(cfg) -> int:
    return cfg.env.num_envs * cfg.dqn.log_every


def episode_limit(env_cfg) -> int:
    """The episode step limit an env config gives (its max_steps, else its task's)."""
    if env_cfg.max_steps is not None:
        return env_cfg.max_steps
    return load_task(env_cfg.task).step_limit


def replay_plan(cfg):
    """The replay buffer's sizes for a config (one line if too small for its n-step and stack)."""
    e = cfg.env
    return plan(cfg.dqn.buffer_size, e.num_envs, (72, obs_bytes(e) // (72 * e.stack_k)), e.stack_k, cfg.dqn.n_step,
                episode_limit(e), cfg.dqn.prioritized, what="dqn.buffer_size")


def check(cfg) -> None:
    d = cfg.dqn
    limit = episode_limit(cfg.env)
    if d.n_step > limit:
        raise ConfigError(f"dqn.n_step ({d.n_step}) is larger than the episode limit ({limit} steps)")
    try:
        p = replay_plan(cfg)
    except ReplayError as exc:
        raise ConfigError(str(exc)) from None
    if d.learning_starts > p.capacity:
        raise ConfigError(f"dqn.learning_starts ({d.learning_starts:,}) exceeds what the buffer holds "
                          f"({p.capacity:,} transitions): learning would never start")
    if d.learning_starts >= cfg.total_steps:
        raise ConfigError(f"dqn.learning_starts ({d.learning_starts:,} transitions) is not below total_steps "
                          f"({cfg.total_steps:,}): the run would end before its first gradient step")
    if d.batch_size > p.capacity:
        raise ConfigError(f"dqn.batch_size ({d.batch_size:,}) exceeds what the buffer holds ({p.capacity:,} "
                          f"transitions)")


def working_bytes(cfg) -> tuple[int, int]:
    """(per env, fixed) device bytes of the learner's peak: acting for every env at once, and a batch's forward
    and backward with the next observations' forwards beside it."""
    d, e = cfg.dqn, cfg.env
    kw = (d.model, e.stack_k, e.obs == "packed")
    act = activation_bytes(*kw, False, view=d.view)
    return act, d.batch_size * (activation_bytes(*kw, True, view=d.view) + act)


# --- the loss --------------------------------------------------------------------------------------------------
def q_target(ret: torch.Tensor, discount: torch.Tensor, next_q_online: torch.Tensor | None,
             next_q_target: torch.Tensor) -> torch.Tensor:
    """ret + discount * Q_target(next, a*): a* = argmax of the online network's values (Double DQN), or of the
    target network's own when `next_q_online` is None (DQN). discount is gamma^k, or 0 past a terminal step."""
    chooser = next_q_target if next_q_online is None else next_q_online
    best = chooser.argmax(-1, keepdim=True)
    return ret + discount * next_q_target.gather(-1, best).squeeze(-1)


def td_loss(q_taken: torch.Tensor, target: torch.Tensor, weights: torch.Tensor | None = None,
            kind: str = "huber") -> tuple[torch.Tensor, torch.Tensor]:
    """The mean (importance-weighted) Huber or squared (halved) TD error; returns (loss, TD errors)."""
    td = q_taken - target
    if kind == "huber":
        per = F.smooth_l1_loss(q_taken, target, reduction="none")
    elif kind == "mse":
        per = 0.5 * td * td
    else:
        raise ValueError(f"loss must be huber or mse, got {kind!r}")
    if weights is not None:
        per = per * weights
    return per.mean(), td.detach()


def soft_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """target <- tau * online + (1 - tau) * target, parameter by parameter (tau=1: a copy)."""
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters(), strict=True):
            if tau >= 1.0:
                t.copy_(o)
            else:
                t.lerp_(o, tau)


# --- the loop --------------------------------------------------------------------------------------------------
STAT_NAMES = ("loss", "q_mean", "target_mean", "td_abs", "grad_norm")


def train(cfg, checkpoint: dict | None = None, echo=None) -> dict:
    """Train (or continue from `checkpoint`) in cfg.run.run_dir; returns the summary."""
    d = cfg.dqn
    plan = replay_plan(cfg)
    check_memory(plan, resolve_device(cfg.run.device), what="dqn.buffer_size")  # one line, before any allocation
    with Session(cfg, checkpoint, echo, device_bytes=plan.bytes, steps_per_update=steps_per_update(cfg),
                 checkpoint_bytes=plan.bytes if d.checkpoint_buffer else 0, working_bytes=working_bytes(cfg)) as s:
        env = s.env
        n, num_actions = env.num_envs, env.num_actions
        model = build_model(d, num_actions, env.stack_k, env.obs_mode == "packed").to(s.device)
        target = copy.deepcopy(model).requires_grad_(False)
        optimizer = torch.optim.Adam(model.parameters(), lr=d.lr, eps=d.adam_eps)
        buf = ReplayBuffer(plan, d.gamma, s.device, d.priority_alpha)
        grad_steps = 0

        def state() -> dict:
            out = {"target": target.state_dict(), "grad_steps": grad_steps}
            if d.checkpoint_buffer:
                out["buffer"] = buf.state_dict()
            return out

        extra = s.start(model, optimizer, state=state,
                        describe=f"{plan.describe()} on {s.device}; {s.num_updates} updates of "
                                 f"{s.update_steps:,} env-steps; model {model.describe()['params']:,} "
                                 f"parameters")
        if extra:
            target.load_state_dict(extra["target"])
            grad_steps = extra["grad_steps"]
        if extra and "buffer" in extra:
            buf.load_state_dict(extra["buffer"])
        else:  # a fresh run, or a resume without the buffer: it refills from here
            buf.begin(env.obs)

        def losses(obs, action, ret, discount, next_obs, weights):
            with s.autocast(d.amp):
                q_all = model(obs)
                with torch.no_grad():
                    next_target = target(next_obs).float()
                    next_online = model(next_obs).float() if d.double else None
            q = q_all.float().gather(1, action[:, None]).squeeze(1)
            y = q_target(ret, discount, next_online, next_target)
            loss, td = td_loss(q, y, weights, d.loss)
            return loss, td, q.detach(), y

        act = torch.compile(model) if d.compile else model
        compute = torch.compile(losses) if d.compile else losses
        ratio = Fraction(d.replay_ratio).limit_denominator(10**6)
        decay_steps = d.exploration_fraction * cfg.total_steps
        ladder = (epsilon_ladder(n, d.epsilon_ladder, s.device, s.world.rank, s.world.size)
                  if d.epsilon_ladder else None)
        env_eps = torch.empty(n, device=s.device) if ladder is not None else None
        ones = torch.ones(n, dtype=torch.int64, device=s.device)
        timer = s.timer

        while s.running:
            lr = returns.linear_lr(d.lr, s.update, s.num_updates, d.anneal_lr)
            for g in optimizer.param_groups:
                g["lr"] = lr
            actions = torch.zeros(num_actions, dtype=torch.int64, device=s.device)
            stats = torch.zeros(len(STAT_NAMES), dtype=torch.float32, device=s.device)
            updates = 0
            eps = d.epsilon_start
            for i in range(d.log_every):
                env_steps = s.global_step + i * n
                eps = returns.linear_decay(d.epsilon_start, d.epsilon_end, env_steps, decay_steps)
                mark = timer.start("inference")
                with torch.no_grad(), s.autocast(d.amp):
                    q = act(env.obs)
                action = epsilon_greedy(q.float(), eps if ladder is None else ladder_epsilons(eps, ladder, env_eps))
                actions.scatter_add_(0, action, ones)  # bincount would read the device (its size)
                timer.stop(mark)
                mark = timer.start("env")
                _, reward, term, trunc, _ = env.step(action)
                timer.stop(mark)
                mark = timer.start("replay")
                buf.add(action, reward, term, trunc, env.final_obs, env.obs)
                timer.stop(mark)
                step = env_steps // n
                due = math.floor((step + 1) * ratio) - math.floor(step * ratio)
                if due == 0 or buf.size < d.learning_starts:
                    continue
                mark = timer.start("update")
                beta = d.priority_beta + (1.0 - d.priority_beta) * min(1.0, env_steps / cfg.total_steps)
                for _ in range(due):
                    b = buf.sample(d.batch_size, beta)
                    loss, td, qt, y = compute(b.obs, b.action, b.ret, b.discount, b.next_obs, b.weights)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    norm = s.apply_gradients(model, optimizer, d.max_grad_norm)
                    buf.update_priorities(b.index, td.abs())
                    grad_steps += 1
                    if grad_steps % d.target_every == 0:
                        soft_update(target, model, d.tau)
                    stats += torch.stack([loss.detach(), qt.mean(), y.mean(), td.abs().mean(), norm.float()])
                    updates += 1
                timer.stop(mark)
            metrics = {"lr": lr, "epsilon": eps, "grad_steps": updates, "grad_steps_total": grad_steps,
                       "buffer_size": buf.size, "actions": actions, **dict.fromkeys(STAT_NAMES)}
            if updates:  # else the losses are null: no gradient step yet (learning_starts) in this update
                metrics.update(zip(STAT_NAMES, (stats / updates).unbind(0), strict=True))
            s.end_update(d.log_every * n, metrics, guard=STAT_NAMES if updates else ())
    return s.summary


ALGO = AlgoSpec("dqn", DQNConfig, build_model, steps_per_update, train, check=check, working_bytes=working_bytes,
                summary="Double DQN with n-step returns and a device replay buffer")
