"""DQN from pixels with the whole loop on the device: epsilon-greedy acting for all envs in one forward, an
n-step replay buffer on the device (`rl/replay.py`), Double DQN targets from a target network, `replay_ratio`
gradient steps per step of all envs. One file, CleanRL-style; the math is in `loss.py` and `rl/returns.py`, the
shell (run folder, logs, eval, checkpoints, stop rules) in `rl/loop.py`.

    gbxcule train --algo dqn --config configs/leave_house_dqn.toml --device cuda
"""

from __future__ import annotations

import copy
import math
from fractions import Fraction

import torch

from gbxcule.rl import returns
from gbxcule.rl.algos.dqn import build_model, replay_plan, steps_per_update
from gbxcule.rl.algos.dqn import loss as dqn
from gbxcule.rl.loop import Session
from gbxcule.rl.models import epsilon_greedy
from gbxcule.rl.replay import ReplayBuffer, check_memory
from gbxcule.rl.shell import resolve_device

STAT_NAMES = ("loss", "q_mean", "target_mean", "td_abs", "grad_norm")


def train(cfg, checkpoint: dict | None = None, echo=None) -> dict:
    """Train (or continue from `checkpoint`) in cfg.run.run_dir; returns the summary."""
    d = cfg.dqn
    plan = replay_plan(cfg)
    check_memory(plan, resolve_device(cfg.run.device), what="dqn.buffer_size")  # one line, before any allocation
    with Session(cfg, checkpoint, echo, device_bytes=plan.bytes, steps_per_update=steps_per_update(cfg)) as s:
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
            y = dqn.q_target(ret, discount, next_online, next_target)
            loss, td = dqn.td_loss(q, y, weights, d.loss)
            return loss, td, q.detach(), y

        act = torch.compile(model) if d.compile else model
        compute = torch.compile(losses) if d.compile else losses
        ratio = Fraction(d.replay_ratio).limit_denominator(10**6)
        decay_steps = d.exploration_fraction * cfg.total_steps
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
                action = epsilon_greedy(q.float(), eps)
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
                        dqn.soft_update(target, model, d.tau)
                    stats += torch.stack([loss.detach(), qt.mean(), y.mean(), td.abs().mean(), norm.float()])
                    updates += 1
                timer.stop(mark)
            metrics = {"lr": lr, "epsilon": eps, "grad_steps": updates, "grad_steps_total": grad_steps,
                       "buffer_size": buf.size, "actions": actions, **dict.fromkeys(STAT_NAMES)}
            if updates:  # else the losses are null: no gradient step yet (learning_starts) in this update
                metrics.update(zip(STAT_NAMES, (stats / updates).unbind(0), strict=True))
            s.end_update(d.log_every * n, metrics, guard=STAT_NAMES if updates else ())
    return s.summary
