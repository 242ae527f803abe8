"""A2C's math as pure torch functions (no env, no I/O): the one-step bootstrap observation, the loss of a
batch of (log-prob, entropy, value, target), optionally clipped against the acting policy as PPO clips,
advantage normalisation, and the adaptive entropy weight.
Tests: tests/test_a2c.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gbxcule.rl import returns


@dataclass(frozen=True)
class A2CCoefs:
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    norm_adv: bool = True
    clip: float | None = None  # PPO's ratio clip (and value clip with clip_vloss) against the acting policy
    clip_vloss: bool = False


def bootstrap_obs(next_obs: torch.Tensor, final_obs: torch.Tensor, truncated: torch.Tensor,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """The observation a step's target bootstraps from: the finished episode's last observation where the step
    was truncated (truncation is not terminal), else the next observation (`out`: a buffer to write into)."""
    mask = truncated.view(-1, *([1] * (next_obs.dim() - 1)))
    return torch.where(mask, final_obs, next_obs, out=out) if out is not None else torch.where(mask, final_obs,
                                                                                                   next_obs)


def a2c_loss(logp: torch.Tensor, entropy: torch.Tensor, value: torch.Tensor, target: torch.Tensor,
             c: A2CCoefs, old_logp: torch.Tensor | None = None,
             old_value: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Policy-gradient loss with advantage target - V (no gradient through the target or the advantage), value
    loss 0.5 (V - target)^2, entropy bonus; means over the batch. With `c.clip` (and the acting policy's
    `old_logp`) the policy loss is PPO's clipped surrogate, the same gradient while the ratio stays within
    1 +- clip; with `c.clip_vloss` (and the acting `old_value`) the value loss is clipped alike. Returns (loss,
    device scalars)."""
    adv = (target - value).detach()
    raw_adv = adv
    if c.norm_adv and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    clipping = c.clip is not None and old_logp is not None
    pg = returns.clipped_surrogate(logp - old_logp, adv, c.clip) if clipping else -(logp * adv).mean()
    if c.clip_vloss and c.clip is not None and old_value is not None:
        v_loss = returns.clipped_value_loss(value, old_value, target.detach(), c.clip)
    else:
        v_loss = 0.5 * ((value - target.detach()) ** 2).mean()
    ent = entropy.mean()
    loss = pg + c.vf_coef * v_loss - c.ent_coef * ent
    stats = {"pg_loss": pg.detach(), "v_loss": v_loss.detach(), "entropy": ent.detach(),
             "adv_mean": raw_adv.mean(), "adv_std": raw_adv.std() if raw_adv.numel() > 1 else raw_adv.sum() * 0,
             "value_mean": value.detach().mean()}
    if clipping:
        stats["clipfrac"] = returns.clip_fraction(logp.detach() - old_logp, c.clip)
    return loss, stats


def adapt_ent_coef(log_coef: torch.Tensor, entropy: torch.Tensor, target: float, lr: float,
                   lo: float = 1e-4, hi: float = 1.0) -> torch.Tensor:
    """One step of the adaptive entropy weight, in place on the device (no host sync): log(coef) rises by `lr`
    per nat that the policy's mean entropy lies below `target`, falls as much above it, and stays within
    [lo, hi]. Returns `log_coef`."""
    return log_coef.add_(lr * (target - entropy.detach().float())).clamp_(math.log(lo), math.log(hi))
