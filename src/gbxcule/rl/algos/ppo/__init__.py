"""PPO (clipped surrogate, GAE, minibatch epochs over a rollout): its config and model, for the registry.
The math is in `loss.py`, the loop in `train.py`."""

from __future__ import annotations

from dataclasses import dataclass

from gbxcule.core.typed import knob
from gbxcule.rl.models import MODELS, ActorCritic
from gbxcule.rl.shell import AlgoSpec, ConfigError


@dataclass
class PPOConfig:
    rollout_steps: int = knob(32, min=1)
    epochs: int = knob(4, min=1)
    minibatches: int = knob(4, min=1)
    lr: float = knob(2.5e-4, gt=0)
    anneal_lr: bool = True
    gamma: float = knob(0.99, min=0, max=1)
    gae_lambda: float = knob(0.95, min=0, max=1)
    clip: float = knob(0.1, gt=0)
    clip_vloss: bool = True
    ent_coef: float = knob(0.01, min=0)
    vf_coef: float = knob(0.5, min=0)
    max_grad_norm: float = knob(0.5, gt=0)
    norm_adv: bool = True
    target_kl: float | None = knob(None, gt=0)
    model: str = knob("nature", choices=MODELS)
    compile: bool = False
    amp: str = knob("auto", choices=("auto", "bf16", "off"))  # auto: bf16 autocast on CUDA


def build_model(p: PPOConfig, num_actions: int, stack_k: int, packed: bool) -> ActorCritic:
    return ActorCritic(num_actions, stack_k, packed, p.model)


def steps_per_update(cfg) -> int:
    return cfg.env.num_envs * cfg.ppo.rollout_steps


def check(cfg) -> None:
    if cfg.ppo.minibatches > steps_per_update(cfg):
        raise ConfigError(f"ppo.minibatches ({cfg.ppo.minibatches}) exceeds the batch ({steps_per_update(cfg)})")


ALGO = AlgoSpec("ppo", PPOConfig, build_model, steps_per_update, check=check,
                summary="PPO: rollouts of rollout_steps x num_envs, minibatch epochs (the default)")
