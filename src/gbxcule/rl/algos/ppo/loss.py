"""PPO's own math as pure torch functions (no I/O, no env): the clipped objective, advantage normalisation.
Advantages, returns, schedules and minibatches that other algorithms share are in `gbxcule.rl.returns`.
Tests: tests/test_ppo.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gbxcule.rl.returns import approx_kl as kl_estimate


def normalize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    return (x - x.mean()) / (x.std() + eps)


@dataclass(frozen=True)
class LossCoefs:
    clip: float = 0.1
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    clip_vloss: bool = True


def ppo_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, new_values: torch.Tensor,
             old_values: torch.Tensor, returns: torch.Tensor, entropy: torch.Tensor,
             c: LossCoefs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped PPO objective for one minibatch. Returns (loss, device scalars: pg_loss, v_loss,
    entropy, approx_kl (the (r - 1) - log r estimator), clipfrac)."""
    logratio = new_logp - old_logp
    ratio = logratio.exp()
    pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - c.clip, 1 + c.clip)).mean()
    if c.clip_vloss:
        v_clipped = old_values + (new_values - old_values).clamp(-c.clip, c.clip)
        v_loss = 0.5 * torch.max((new_values - returns) ** 2, (v_clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * ((new_values - returns) ** 2).mean()
    ent = entropy.mean()
    loss = pg - c.ent_coef * ent + c.vf_coef * v_loss
    with torch.no_grad():
        approx_kl = kl_estimate(logratio)
        clipfrac = ((ratio - 1).abs() > c.clip).float().mean()
    return loss, {"pg_loss": pg.detach(), "v_loss": v_loss.detach(), "entropy": ent.detach(),
                  "approx_kl": approx_kl, "clipfrac": clipfrac}
