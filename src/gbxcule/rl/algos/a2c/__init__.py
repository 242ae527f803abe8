"""Streaming A2C, the scale mode for very many envs: no rollout buffer; every env-step is a gradient step's
share (docs/training.md "A2C"). Its config and model for the registry; the math is in `loss.py`, the loop in
`train.py`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gbxcule.core.typed import knob
from gbxcule.rl.models import MODELS, ActorCritic
from gbxcule.rl.shell import AlgoSpec, ConfigError


@dataclass
class A2CConfig:
    update_every: int = knob(4, min=1)  # env-steps whose gradients are accumulated into one optimizer step
    n_step: int = knob(1, min=1)  # 1: TD(0) every env-step; n: lambda-returns over windows of n env-steps
    gae_lambda: float = knob(1.0, min=0, max=1)  # lambda within a window (1: n-step returns)
    minibatches: int = knob(1, min=1)  # optimizer steps per window (n_step > 1), each on a random share of it
    # share of the envs whose window is trained on (n_step > 1): every env acts, a block of ceil(share * num_envs)
    # envs that moves on each window feeds the learner (at 65,536 envs the learner is the bottleneck, not the env)
    learn_share: float = knob(1.0, gt=0, max=1)
    steps_per_update: int = knob(32, min=1)  # env-steps per logged update (a multiple of update_every)
    lr: float = knob(5e-4, gt=0)
    anneal_lr: bool = False
    # KL-adaptive learning rate (minibatches > 1), starting at lr: after each update it is divided by 1.5 where
    # the trained policy's mean KL from the policy that acted (approx_kl) exceeded twice this, multiplied by 1.5
    # where it stayed below half of it, within [lr / 100, lr * 10]
    target_kl: float | None = knob(None, gt=0)
    # PPO's ratio clip inside a window (minibatches > 1): the window's later optimizer steps stop pushing a sample
    # once its probability has moved more than this from the acting policy's (at the first step the ratio is 1)
    clip: float | None = knob(None, gt=0)
    clip_vloss: bool = False  # the value clipped alike, within clip of the acting value
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
    gru: int | None = knob(None, min=1)  # a GRU of this size over the CNN features (its state reset at episode ends)
    compile: bool = False
    channels_last: bool = False  # the CNN's weights and activations channels-last (NHWC): fewer cuDNN layout copies
    amp: str = knob("auto", choices=("auto", "bf16", "off"))  # auto: bf16 autocast on CUDA


def build_model(a: A2CConfig, num_actions: int, stack_k: int, packed: bool) -> ActorCritic:
    return ActorCritic(num_actions, stack_k, packed, a.model, gru=a.gru)


def learn_envs(cfg) -> int:
    """How many envs feed each window's training (all of them unless `a2c.learn_share` < 1)."""
    n = cfg.env.num_envs
    return n if cfg.a2c.learn_share >= 1 else max(1, math.ceil(cfg.a2c.learn_share * n))


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
    if a.minibatches > 1 and (a.n_step == 1 or a.update_every != a.n_step):
        raise ConfigError(f"a2c.minibatches ({a.minibatches}) splits a window of lambda-returns: it needs "
                          f"a2c.n_step > 1 and a2c.update_every = a2c.n_step (now {a.n_step} and {a.update_every})")
    if a.learn_share < 1 and a.n_step == 1:
        raise ConfigError(f"a2c.learn_share ({a.learn_share}) trains on a share of a window's envs: it needs "
                          f"a2c.n_step > 1")
    if a.minibatches > a.n_step * learn_envs(cfg):
        raise ConfigError(f"a2c.minibatches ({a.minibatches}) exceeds the window's "
                          f"{a.n_step * learn_envs(cfg)} samples")
    if a.target_entropy is not None and a.ent_coef_end is not None:
        raise ConfigError("a2c.target_entropy (an adaptive entropy weight) and a2c.ent_coef_end (a schedule) "
                          "exclude each other")
    if a.target_kl is not None and a.minibatches == 1:
        raise ConfigError("a2c.target_kl adapts lr to the KL the window's first optimizer steps put between the "
                          "policy that acted and the one trained: it needs a2c.minibatches > 1")
    if a.target_kl is not None and a.anneal_lr:
        raise ConfigError("a2c.target_kl (a KL-adaptive lr) and a2c.anneal_lr (a schedule) exclude each other")
    if a.clip is not None and a.minibatches == 1:
        raise ConfigError("a2c.clip bounds how far a window's later optimizer steps move the policy from the one "
                          "that acted: it needs a2c.minibatches > 1")
    if a.clip_vloss and a.clip is None:
        raise ConfigError("a2c.clip_vloss clips the value within a2c.clip of the acting value: set a2c.clip")
    if a.n_step > 1 and a.gru is not None:
        raise ConfigError("a2c.gru needs a2c.n_step = 1 (the recurrent state is carried step by step)")


ALGO = AlgoSpec("a2c", A2CConfig, build_model, steps_per_update, check=check,
                summary="streaming A2C: no rollout buffer, a gradient every update_every env-steps (scale mode)")
