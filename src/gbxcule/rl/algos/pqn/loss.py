"""PQN's loss as a pure torch function. Its Q(lambda) targets are `gbxcule.rl.returns.lambda_returns` over the
greedy values max_a Q(obs_t, a) recorded while acting. Tests: tests/test_pqn.py."""

from __future__ import annotations

import torch


def q_loss(q_taken: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Half the mean squared error between Q(obs, action) and its Q(lambda) target."""
    return 0.5 * (q_taken - targets).pow(2).mean()
