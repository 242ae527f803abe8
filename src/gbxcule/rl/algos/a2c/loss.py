"""A2C's math as pure torch functions (no env, no I/O): the one-step bootstrap observation, the loss of a
batch of (log-prob, entropy, value, target), advantage normalisation, and the adaptive entropy weight.
Tests: tests/test_a2c.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


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
    loss 0.5 (V - target)^2, entropy bonus; means over the batch. Returns (loss, device scalars)."""
    adv = (target - value).detach()
    raw_adv = adv
    if c.norm_adv and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg = -(logp * adv).mean()
    v_loss = 0.5 * ((value - target.detach()) ** 2).mean()
    ent = entropy.mean()
    loss = pg + c.vf_coef * v_loss - c.ent_coef * ent
    return loss, {"pg_loss": pg.detach(), "v_loss": v_loss.detach(), "entropy": ent.detach(),
                  "adv_mean": raw_adv.mean(), "adv_std": raw_adv.std() if raw_adv.numel() > 1 else raw_adv.sum() * 0,
                  "value_mean": value.detach().mean()}


def adapt_ent_coef(log_coef: torch.Tensor, entropy: torch.Tensor, target: float, lr: float,
                   lo: float = 1e-4, hi: float = 1.0) -> torch.Tensor:
    """One step of the adaptive entropy weight, in place on the device (no host sync): log(coef) rises by `lr`
    per nat that the policy's mean entropy lies below `target`, falls as much above it, and stays within
    [lo, hi]. Returns `log_coef`."""
    return log_coef.add_(lr * (target - entropy.detach().float())).clamp_(math.log(lo), math.log(hi))
