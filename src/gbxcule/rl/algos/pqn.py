"""PQN from pixels with the whole loop on the device (parallel Q-learning): a Q-network with LayerNorm, Q(lambda)
targets over short on-policy rollouts of all envs (bootstrap on truncation) from the values seen while acting,
epsilon-greedy acting, minibatch epochs; no replay buffer and no target network. One file, CleanRL's unit:
config, model, loss, loop; the targets are `rl/returns.py`'s `lambda_returns`, the shell `rl/session.py`.

    gbxcule train --algo pqn --config configs/leave_house_pqn.toml --device cuda
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gbxcule.core.typed import knob
from gbxcule.rl import returns
from gbxcule.rl.config import ConfigError
from gbxcule.rl.models import MODELS, VIEWS, QNetwork, activation_bytes, epsilon_greedy, epsilon_ladder, ladder_epsilons
from gbxcule.rl.session import AlgoSpec, Session


@dataclass
class PQNConfig:
    rollout_steps: int = knob(32, min=1)
    epochs: int = knob(2, min=1)
    minibatches: int = knob(32, min=1)
    lr: float = knob(2.5e-4, gt=0)
    anneal_lr: bool = True
    gamma: float = knob(0.99, min=0, max=1)
    q_lambda: float = knob(0.65, min=0, max=1)  # 0: one-step Q-learning targets; 1: returns to the rollout's end
    max_grad_norm: float | None = knob(10.0, gt=0)
    epsilon_start: float = knob(1.0, min=0, max=1)
    epsilon_end: float = knob(0.01, min=0, max=1)
    exploration_fraction: float = knob(0.1, gt=0, max=1)  # of total_steps, over which epsilon falls linearly
    # Ape-X's ladder: env i of N explores with epsilon ** (1 + epsilon_ladder * i / (N - 1)), epsilon the schedule's
    # (with epsilon_end 0.4 and 7: from 0.4 to 0.00066 at the end); 0: every env at epsilon
    epsilon_ladder: float = knob(0.0, min=0, max=16)
    layer_norm: bool = True  # normalisation in the torso: what lets PQN learn without a target network
    dueling: bool = False
    model: str = knob("nature", choices=MODELS)
    view: str = knob("full", choices=VIEWS)  # what of the frame the CNN sees (rl/models.py VIEWS)
    milestone_row: bool = False  # the hidden layer also reads the shown milestones' row as a vector (rl/models.py)
    level_heads: int = knob(0, min=0, max=21)  # a Q head per shown milestone level (rl/models.py)
    compile: bool = False  # torch.compile the network
    amp: str = knob("auto", choices=("auto", "bf16", "off"))  # auto: bf16 autocast on CUDA


def build_model(p: PQNConfig, num_actions: int, stack_k: int, packed: bool) -> QNetwork:
    return QNetwork(num_actions, stack_k, packed, p.model, dueling=p.dueling, layer_norm=p.layer_norm, view=p.view,
                    milestone_row=p.milestone_row, level_heads=p.level_heads)


def steps_per_update(cfg) -> int:
    return cfg.env.num_envs * cfg.pqn.rollout_steps


def check(cfg) -> None:
    if cfg.pqn.minibatches > steps_per_update(cfg):
        raise ConfigError(f"pqn.minibatches ({cfg.pqn.minibatches}) exceeds the batch ({steps_per_update(cfg)})")


# --- the loss --------------------------------------------------------------------------------------------------
def q_loss(q_taken: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Half the mean squared error between Q(obs, action) and its Q(lambda) target."""
    return 0.5 * (q_taken - targets).pow(2).mean()


# --- the loop --------------------------------------------------------------------------------------------------
def rollout_bytes(cfg, obs_bytes: int) -> int:
    """Device bytes of the rollout storage: observations twice (the obs and the finished episodes' last obs,
    for truncation bootstraps), plus actions, values at acting time, rewards, flags and targets."""
    t, n = cfg.pqn.rollout_steps, cfg.env.num_envs
    return t * n * (2 * obs_bytes + 8 + 4 * 4 + 2)


def working_bytes(cfg) -> tuple[int, int]:
    """(per env, fixed) device bytes of the learner's peak: a minibatch's forward and backward, or acting for
    every env at once."""
    p, e = cfg.pqn, cfg.env
    kw = (p.model, e.stack_k, e.obs == "packed")
    peak = max(-(-steps_per_update(cfg) // p.minibatches) * activation_bytes(*kw, True, p.layer_norm, view=p.view),
               e.num_envs * activation_bytes(*kw, False, p.layer_norm, view=p.view))
    return -(-peak // e.num_envs), 0


def train(cfg, checkpoint: dict | None = None, echo=None) -> dict:
    """Train (or continue from `checkpoint`) in cfg.run.run_dir; returns the summary."""
    p = cfg.pqn
    with Session(cfg, checkpoint, echo, device_bytes=lambda ob: rollout_bytes(cfg, ob),
                 steps_per_update=steps_per_update(cfg), working_bytes=working_bytes(cfg)) as s:
        env = s.env
        model = build_model(p, env.num_actions, env.stack_k, env.obs_mode == "packed").to(s.device)
        optimizer = torch.optim.Adam(model.parameters(), lr=p.lr)
        fwd = torch.compile(model) if p.compile else model
        sampler = torch.Generator().manual_seed(cfg.run.seed)
        extra = s.start(model, optimizer, state=lambda: {"sampler": sampler.get_state()},
                        describe=s.plan_line(model))
        if extra:
            sampler.set_state(extra["sampler"])

        t_len, n, dev, obs_shape = p.rollout_steps, env.num_envs, env.device, env.single_obs_shape
        batch = t_len * n
        obs_buf = torch.zeros((t_len, n, *obs_shape), dtype=torch.uint8, device=dev)
        final_buf = torch.zeros_like(obs_buf)
        act_buf = torch.zeros((t_len, n), dtype=torch.int64, device=dev)
        qmax_buf = torch.zeros((t_len, n), dtype=torch.float32, device=dev)
        qsel_buf = torch.zeros((t_len, n), dtype=torch.float32, device=dev)
        rew_buf = torch.zeros((t_len, n), dtype=torch.float32, device=dev)
        term_buf = torch.zeros((t_len, n), dtype=torch.bool, device=dev)
        trunc_buf = torch.zeros((t_len, n), dtype=torch.bool, device=dev)
        decay_steps = p.exploration_fraction * cfg.total_steps
        ladder = (epsilon_ladder(n, p.epsilon_ladder, dev, s.world.rank, s.world.size)
                  if p.epsilon_ladder else None)
        env_eps = torch.empty(n, device=dev) if ladder is not None else None
        timer = s.timer

        while s.running:
            lr = returns.linear_lr(p.lr, s.update, s.num_updates, p.anneal_lr)
            for g in optimizer.param_groups:
                g["lr"] = lr
            eps = p.epsilon_start
            for t in range(t_len):
                eps = returns.linear_decay(p.epsilon_start, p.epsilon_end, s.global_step + t * n, decay_steps)
                mark = timer.start("inference")
                obs_buf[t].copy_(env.obs)
                with torch.no_grad(), s.autocast(p.amp):
                    q = fwd(obs_buf[t]).float()
                action = epsilon_greedy(q, eps if ladder is None else ladder_epsilons(eps, ladder, env_eps))
                act_buf[t] = action
                qmax_buf[t] = q.max(-1).values
                qsel_buf[t] = q.gather(1, action[:, None]).squeeze(1)
                timer.stop(mark)
                mark = timer.start("env")
                _, reward, term, trunc, _ = env.step(action)
                rew_buf[t] = reward
                term_buf[t] = term
                trunc_buf[t] = trunc
                final_buf[t].copy_(env.final_obs)
                timer.stop(mark)
            mark = timer.start("update")
            with torch.no_grad(), s.autocast(p.amp):
                last = fwd(env.obs).float().max(-1).values
                # one sync an update; the sizes vary: the plain model, not the compiled one
                final_values = returns.truncated_values(lambda o: model(o).float().max(-1).values, final_buf,
                                                        trunc_buf)
                targets = returns.lambda_returns(rew_buf, qmax_buf, term_buf | trunc_buf, last, p.gamma, p.q_lambda,
                                                 trunc_buf, final_values)
            b_obs = obs_buf.reshape(batch, *obs_shape)
            b_act, b_tgt = act_buf.reshape(-1), targets.reshape(-1)
            stats = []
            for _epoch in range(p.epochs):
                for mb in returns.minibatches(batch, p.minibatches, sampler, dev):
                    with s.autocast(p.amp):
                        q_all = fwd(b_obs[mb])
                    q = q_all.float().gather(1, b_act[mb][:, None]).squeeze(1)
                    loss = q_loss(q, b_tgt[mb])
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    norm = s.apply_gradients(model, optimizer, p.max_grad_norm)
                    stats.append(torch.stack([loss.detach(), q.detach().mean(), norm.float()]))
            timer.stop(mark)
            mean = torch.stack(stats).mean(0)
            names = ("loss", "q_mean", "grad_norm")
            metrics = {"lr": lr, "epsilon": eps, **dict(zip(names, mean.unbind(0), strict=True)),
                       "target_mean": targets.mean(), "target_std": targets.std(),
                       "explained_variance": returns.explained_variance(qsel_buf.reshape(-1), b_tgt),
                       "actions": returns.action_counts(b_act, env.num_actions)}
            s.end_update(batch, metrics, guard=names)
    return s.summary


ALGO = AlgoSpec("pqn", PQNConfig, build_model, steps_per_update, train, check=check, working_bytes=working_bytes,
                summary="PQN: Q(lambda) over rollouts of rollout_steps x num_envs, LayerNorm, no replay or target")
