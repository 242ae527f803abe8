"""Returns, advantages and targets every algorithm shares, as pure torch functions over [T, N] tensors (no env,
no I/O): GAE / lambda-returns with bootstrap on truncation, one-step TD targets, explained variance, schedules.

Conventions: step t's action was chosen from obs_t; `dones[t]` (terminated or truncated) says obs_{t+1} is the
next episode's first; a truncated episode is not a terminal one and bootstraps from the value of its last
observation (`final_values[t]`). Tests: tests/test_returns.py (and tests/test_ppo.py for GAE).
"""

from __future__ import annotations

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, last_value: torch.Tensor,
        gamma: float, lam: float, truncated: torch.Tensor | None = None,
        final_values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a rollout of T steps and N envs ([T, N] tensors).

    `values[t]` is V(obs_t); `last_value` is V(obs_T). Where `truncated[t]`, the step bootstraps from
    `final_values[t]`. Returns (advantages, returns = advantages + values); with lam=1 the returns are the
    n-step returns up to the rollout's end (or the episode's)."""
    t_len = rewards.shape[0]
    adv = torch.zeros_like(values)
    last = torch.zeros_like(last_value)
    notdone = 1.0 - dones.to(values.dtype)
    r = rewards.to(values.dtype)
    if truncated is not None:
        if final_values is None:
            raise ValueError("truncated steps need final_values to bootstrap from")
        r = r + gamma * truncated.to(values.dtype) * final_values
    for t in reversed(range(t_len)):
        next_v = last_value if t == t_len - 1 else values[t + 1]
        delta = r[t] + gamma * next_v * notdone[t] - values[t]
        last = delta + gamma * lam * notdone[t] * last
        adv[t] = last
    return adv, adv + values


def td_target(reward: torch.Tensor, terminated: torch.Tensor, next_value: torch.Tensor, gamma: float) -> torch.Tensor:
    """One-step target r + gamma * (1 - terminated) * V(s'). For a truncated step `next_value` must be the value
    of the finished episode's last observation (not the next episode's first): truncation is not terminal."""
    return reward + gamma * (~terminated).to(next_value.dtype) * next_value


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """1 - Var(returns - values) / Var(returns) (NaN when the returns do not vary)."""
    var = returns.var()
    return torch.where(var > 0, 1 - (returns - values).var() / var, torch.full_like(var, float("nan")))


def linear_lr(lr: float, update: int, num_updates: int, anneal: bool) -> float:
    """The learning rate of update `update` (0-based): annealed linearly to 0 over the run, or constant."""
    return lr * (1.0 - update / num_updates) if anneal else lr


def linear_schedule(start: float, end: float | None, update: int, num_updates: int) -> float:
    """`start` moved linearly to `end` over the run (update 0-based); constant when `end` is None."""
    if end is None or num_updates <= 1:
        return start
    return start + (end - start) * min(1.0, update / (num_updates - 1))
