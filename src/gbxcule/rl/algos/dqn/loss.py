"""DQN's math as pure torch functions (no env, no I/O): the (Double) DQN target and the TD loss. n-step
returns are in `gbxcule.rl.returns` (the replay buffer's writer computes them). Tests: tests/test_dqn.py."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def q_target(ret: torch.Tensor, discount: torch.Tensor, next_q_online: torch.Tensor | None,
             next_q_target: torch.Tensor) -> torch.Tensor:
    """ret + discount * Q_target(next, a*): a* = argmax of the online network's values (Double DQN), or of the
    target network's own when `next_q_online` is None (DQN). discount is gamma^k, or 0 past a terminal step."""
    chooser = next_q_target if next_q_online is None else next_q_online
    best = chooser.argmax(-1, keepdim=True)
    return ret + discount * next_q_target.gather(-1, best).squeeze(-1)


def td_loss(q_taken: torch.Tensor, target: torch.Tensor, weights: torch.Tensor | None = None,
            kind: str = "huber") -> tuple[torch.Tensor, torch.Tensor]:
    """The mean (importance-weighted) Huber or squared (halved) TD error; returns (loss, TD errors)."""
    td = q_taken - target
    if kind == "huber":
        per = F.smooth_l1_loss(q_taken, target, reduction="none")
    elif kind == "mse":
        per = 0.5 * td * td
    else:
        raise ValueError(f"loss must be huber or mse, got {kind!r}")
    if weights is not None:
        per = per * weights
    return per.mean(), td.detach()


def soft_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """target <- tau * online + (1 - tau) * target, parameter by parameter (tau=1: a copy)."""
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters(), strict=True):
            if tau >= 1.0:
                t.copy_(o)
            else:
                t.lerp_(o, tau)
