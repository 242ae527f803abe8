"""PPO's math as pure torch functions (no I/O, no env): advantages, losses, minibatches, statistics.

The trainer (`gbxcule.rl.train_ppo`) calls these; tests check them on tiny tensors by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, last_value: torch.Tensor,
        gamma: float, lam: float, truncated: torch.Tensor | None = None,
        final_values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a rollout of T steps and N envs ([T, N] tensors).

    `values[t]` is V(obs_t), the obs the action of step t was chosen from; `dones[t]` says step t ended an
    episode (terminated or truncated), so obs_{t+1} is the next episode's first; `last_value` is V(obs_T).
    A truncated episode is not a terminal one: where `truncated[t]`, the step bootstraps from
    `final_values[t]`, the value of the finished episode's last observation. Returns (advantages, returns)."""
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
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1).abs() > c.clip).float().mean()
    return loss, {"pg_loss": pg.detach(), "v_loss": v_loss.detach(), "entropy": ent.detach(),
                  "approx_kl": approx_kl, "clipfrac": clipfrac}


def minibatches(batch_size: int, num_minibatches: int, generator: torch.Generator, device) -> list[torch.Tensor]:
    """A random permutation of the batch split into `num_minibatches` index tensors (the last ones one
    shorter when the batch does not divide)."""
    if not 1 <= num_minibatches <= batch_size:
        raise ValueError(f"minibatches must be in [1, batch size {batch_size}], got {num_minibatches}")
    perm = torch.randperm(batch_size, generator=generator).to(device)
    return list(perm.tensor_split(num_minibatches))


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """1 - Var(returns - values) / Var(returns) (NaN when the returns do not vary)."""
    var = returns.var()
    return torch.where(var > 0, 1 - (returns - values).var() / var, torch.full_like(var, float("nan")))


def linear_lr(lr: float, update: int, num_updates: int, anneal: bool) -> float:
    """The learning rate of update `update` (0-based): annealed linearly to 0 over the run, or constant."""
    return lr * (1.0 - update / num_updates) if anneal else lr
