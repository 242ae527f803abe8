"""PQN (parallel Q-learning: a Q-network with LayerNorm, Q(lambda) targets over short on-policy rollouts of
all envs, epsilon-greedy acting, no replay buffer and no target network): its config and model, for the
registry. The math is in `loss.py` and `rl/returns.py` (`lambda_returns`), the loop in `train.py`."""

from __future__ import annotations

from dataclasses import dataclass

from gbxcule.core.typed import knob
from gbxcule.rl.models import MODELS, QNetwork
from gbxcule.rl.shell import AlgoSpec, ConfigError


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
    layer_norm: bool = True  # normalisation in the torso: what lets PQN learn without a target network
    dueling: bool = False
    model: str = knob("nature", choices=MODELS)
    compile: bool = False  # torch.compile the network
    amp: str = knob("auto", choices=("auto", "bf16", "off"))  # auto: bf16 autocast on CUDA


def build_model(p: PQNConfig, num_actions: int, stack_k: int, packed: bool) -> QNetwork:
    return QNetwork(num_actions, stack_k, packed, p.model, dueling=p.dueling, layer_norm=p.layer_norm)


def steps_per_update(cfg) -> int:
    return cfg.env.num_envs * cfg.pqn.rollout_steps


def check(cfg) -> None:
    if cfg.pqn.minibatches > steps_per_update(cfg):
        raise ConfigError(f"pqn.minibatches ({cfg.pqn.minibatches}) exceeds the batch ({steps_per_update(cfg)})")


ALGO = AlgoSpec("pqn", PQNConfig, build_model, steps_per_update, check=check,
                summary="PQN: Q(lambda) over rollouts of rollout_steps x num_envs, LayerNorm, no replay or target")
