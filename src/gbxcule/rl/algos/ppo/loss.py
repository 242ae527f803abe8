"""PPO's own math as pure torch functions (no I/O, no env): the clipped objective, advantage normalisation.
Advantages, returns, schedules and minibatches that other algorithms share are in `gbxcule.rl.returns`.
Tests: tests/test_ppo.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gbxcule.rl.returns import approx_kl as kl_estimate
from gbxcule.rl.returns import clip_fraction, clipped_surrogate, clipped_value_loss


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
    pg = clipped_surrogate(logratio, adv, c.clip)
    if c.clip_vloss:
        v_loss = clipped_value_loss(new_values, old_values, returns, c.clip)
    else:
        v_loss = 0.5 * ((new_values - returns) ** 2).mean()
    ent = entropy.mean()
    loss = pg - c.ent_coef * ent + c.vf_coef * v_loss
    with torch.no_grad():
        approx_kl = kl_estimate(logratio)
        clipfrac = clip_fraction(logratio, c.clip)
    return loss, {"pg_loss": pg.detach(), "v_loss": v_loss.detach(), "entropy": ent.detach(),
                  "approx_kl": approx_kl, "clipfrac": clipfrac}
