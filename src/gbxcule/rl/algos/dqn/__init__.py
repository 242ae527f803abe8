"""DQN (Double DQN with n-step returns, a target network and a device replay buffer): its config and model,
for the registry. The math is in `loss.py`, the loop in `train.py`, the buffer in `rl/replay.py`."""

from __future__ import annotations

from dataclasses import dataclass

from gbxcule.core.typed import knob
from gbxcule.rl.models import MODELS, QNetwork
from gbxcule.rl.shell import AlgoSpec, ConfigError, obs_bytes


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
    loss: str = knob("huber", choices=("huber", "mse"))
    dueling: bool = False
    prioritized: bool = False  # proportional prioritized replay (a sum-tree on the device)
    priority_alpha: float = knob(0.6, min=0)
    priority_beta: float = knob(0.4, min=0, max=1)  # importance-weight exponent, annealed to 1 over the run
    checkpoint_buffer: bool = False  # keep the buffer in checkpoints (bit-exact resume; else resume refills it)
    model: str = knob("nature", choices=MODELS)
    compile: bool = False  # torch.compile the network and the loss
    amp: str = knob("auto", choices=("auto", "bf16", "off"))  # auto: bf16 autocast on CUDA


def build_model(d: DQNConfig, num_actions: int, stack_k: int, packed: bool) -> QNetwork:
    return QNetwork(num_actions, stack_k, packed, d.model, dueling=d.dueling)


def steps_per_update(cfg) -> int:
    return cfg.env.num_envs * cfg.dqn.log_every


def episode_limit(env_cfg) -> int:
    """The episode step limit an env config gives (its max_steps, else its task's)."""
    if env_cfg.max_steps is not None:
        return env_cfg.max_steps
    from gbxcule.rl.tasks import load_task

    return load_task(env_cfg.task).step_limit


def replay_plan(cfg):
    """The replay buffer's sizes for a config (one line if too small for its n-step and stack)."""
    from gbxcule.rl.replay import plan

    e = cfg.env
    return plan(cfg.dqn.buffer_size, e.num_envs, (72, obs_bytes(e) // (72 * e.stack_k)), e.stack_k, cfg.dqn.n_step,
                episode_limit(e), cfg.dqn.prioritized, what="dqn.buffer_size")


def check(cfg) -> None:
    d = cfg.dqn
    limit = episode_limit(cfg.env)
    if d.n_step > limit:
        raise ConfigError(f"dqn.n_step ({d.n_step}) is larger than the episode limit ({limit} steps)")
    from gbxcule.rl.replay import ReplayError

    try:
        p = replay_plan(cfg)
    except ReplayError as exc:
        raise ConfigError(str(exc)) from None
    if d.learning_starts > p.capacity:
        raise ConfigError(f"dqn.learning_starts ({d.learning_starts:,}) exceeds what the buffer holds "
                          f"({p.capacity:,} transitions): learning would never start")


ALGO = AlgoSpec("dqn", DQNConfig, build_model, steps_per_update, check=check,
                summary="Double DQN with n-step returns and a device replay buffer")
