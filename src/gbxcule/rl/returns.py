"""Returns, advantages and targets every algorithm shares, as pure torch functions over [T, N] tensors (no env,
no I/O): GAE and lambda-returns (PQN's Q(lambda) targets) with bootstrap on truncation, n-step returns (the
replay buffer's writer), one-step TD targets, the clipped policy and value losses (PPO's),
explained variance, schedules, the minibatch split.

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


def lambda_returns(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, last_value: torch.Tensor,
                   gamma: float, lam: float, truncated: torch.Tensor | None = None,
                   final_values: torch.Tensor | None = None) -> torch.Tensor:
    """Lambda-returns over a rollout ([T, N] tensors, the conventions of `gae`, whose returns they are): G_t = r_t
    + gamma * (1 - done_t) * ((1 - lam) * values[t + 1] + lam * G_{t+1}), with values[T] = G_T = `last_value`; a
    truncated step adds gamma * final_values[t]. With values = max_a Q these are PQN's Q(lambda) targets (lam=0:
    one-step Q-learning targets; lam=1: the discounted return to the rollout's end, bootstrapped there)."""
    return gae(rewards, values, dones, last_value, gamma, lam, truncated, final_values)[1]


def nstep_returns(rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
                  gamma: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The n-step return of the first of n steps ([n, N] tensors, oldest step first), cut where an episode
    ends. Returns ([N] each): the discounted reward sum R, the discount of the bootstrap (gamma^k, or 0 where
    the episode terminated), k (the steps covered: n, or up to and including the ending step) and `final`
    (the episode was truncated at step k: bootstrap from its final observation, not the next episode's
    first). The target is R + discount * V(next), next being obs k steps on (or that final observation)."""
    n = rewards.shape[0]
    done = terminated | truncated
    alive = torch.ones_like(rewards)
    if n > 1:
        alive[1:] = torch.cumprod((~done[:-1]).to(rewards.dtype), 0)
    powers = gamma ** torch.arange(n, dtype=rewards.dtype, device=rewards.device)
    ret = (alive * powers[:, None] * rewards).sum(0)
    first = done.to(torch.uint8).argmax(0)  # the first ending step (0 where none: masked below)
    ended = done.any(0)
    k = torch.where(ended, first + 1, n)
    term = ended & terminated.gather(0, first[None]).squeeze(0)
    final = ended & ~term
    discount = torch.where(term, torch.zeros_like(ret), gamma ** k.to(rewards.dtype))
    return ret, discount, k, final


def td_target(reward: torch.Tensor, terminated: torch.Tensor, next_value: torch.Tensor, gamma: float) -> torch.Tensor:
    """One-step target r + gamma * (1 - terminated) * V(s'). For a truncated step `next_value` must be the value
    of the finished episode's last observation (not the next episode's first): truncation is not terminal."""
    return reward + gamma * (~terminated).to(next_value.dtype) * next_value


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """1 - Var(returns - values) / Var(returns) (NaN when the returns do not vary)."""
    var = returns.var()
    return torch.where(var > 0, 1 - (returns - values).var() / var, torch.full_like(var, float("nan")))


def approx_kl(logratio: torch.Tensor) -> torch.Tensor:
    """KL(old || new) from samples of the old policy, `logratio` = log new(a|s) - log old(a|s): the mean of
    (r - 1) - log r, r = exp(logratio) (non-negative per sample, unbiased). A device scalar."""
    return (logratio.exp() - 1 - logratio).mean()


def action_counts(actions: torch.Tensor, num_actions: int) -> torch.Tensor:
    """int64 [num_actions]: how often each action was taken (torch.bincount's counts, without its read of the
    device for the largest value)."""
    flat = actions.reshape(-1)
    return torch.zeros(num_actions, dtype=torch.int64, device=flat.device).scatter_add_(0, flat, torch.ones_like(flat))


class LevelMeans:
    """A per-sample figure's mean over each milestone level's samples of an update (`entropy_by_level`):
    `num_levels` (0: no levels, nothing kept); `add(rows, values)` for each minibatch's rows of a batch whose levels
    (int64 [B]) were given as `levels` (PPO), or `tally(levels, values)` for values with their own levels (A2C's
    windows, each of new observations; None: none); `read(name)` the device tensors to log ({} without levels)."""

    def __init__(self, num_levels: int, device, levels: torch.Tensor | None = None):
        self.levels = levels
        self.sums = torch.zeros((num_levels, 2), device=device) if num_levels else None

    def add(self, rows: torch.Tensor, values: torch.Tensor) -> None:
        if self.sums is not None:
            self.tally(self.levels[rows], values)

    def tally(self, levels: torch.Tensor | None, values: torch.Tensor) -> None:
        if self.sums is not None and levels is not None:  # each level's sum and count, one index_add
            v = values.detach().float()
            self.sums.index_add_(0, levels, torch.stack([v, torch.ones_like(v)], 1))

    def read(self, name: str) -> dict[str, torch.Tensor]:
        """{`name`_by_level: the mean over each level's samples (0 where none), samples_by_level: their count}."""
        if self.sums is None:
            return {}
        return {f"{name}_by_level": self.sums[:, 0] / self.sums[:, 1].clamp(min=1),
                "samples_by_level": self.sums[:, 1].long()}


def policy_over(net, obs: torch.Tensor, actions: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 (log-probabilities of `actions` [B], values [B]) of a feed-forward actor-critic `net` (obs ->
    (logits, values)) over a batch, `chunk` samples at a time, without gradients."""
    logp, val = (torch.empty(actions.shape, dtype=torch.float32, device=actions.device) for _ in range(2))
    with torch.no_grad():
        for i in range(0, len(actions), chunk):
            logits, v = net(obs[i:i + chunk])
            logits = logits.float()  # normalised as torch.distributions.Categorical does: the same bits
            logits = logits - logits.logsumexp(-1, keepdim=True)
            logp[i:i + chunk] = logits.gather(-1, actions[i:i + chunk, None])[:, 0]
            val[i:i + chunk] = v.float()
    return logp, val


def clipped_surrogate(logratio: torch.Tensor, adv: torch.Tensor, clip: float) -> torch.Tensor:
    """PPO's clipped policy loss, mean over the batch: max(-A r, -A clip(r, 1 - clip, 1 + clip)), r =
    exp(logratio). At r = 1 its gradient is the plain policy gradient -A grad log p; a sample whose ratio has
    left the range in the direction its advantage pushes gives none."""
    ratio = logratio.exp()
    return torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()


def clip_fraction(logratio: torch.Tensor, clip: float) -> torch.Tensor:
    """The share of samples whose ratio exp(logratio) lies more than `clip` from 1 (a device scalar)."""
    return ((logratio.exp() - 1).abs() > clip).float().mean()


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip: float) -> torch.Tensor:
    """0.5 max((V - R)^2, (V_clipped - R)^2), mean over the batch, V_clipped = old V + clip(V - old V, +-clip):
    the value moves at most `clip` from the one that acted before its loss stops counting the move."""
    v_clipped = old_values + (values - old_values).clamp(-clip, clip)
    return 0.5 * torch.max((values - returns) ** 2, (v_clipped - returns) ** 2).mean()


def linear_lr(lr: float, update: int, num_updates: int, anneal: bool) -> float:
    """The learning rate of update `update` (0-based): annealed linearly to 0 over the run, or constant."""
    return lr * (1.0 - update / num_updates) if anneal else lr


def linear_schedule(start: float, end: float | None, update: int, num_updates: int) -> float:
    """`start` moved linearly to `end` over the run (update 0-based); constant when `end` is None."""
    if end is None or num_updates <= 1:
        return start
    return start + (end - start) * min(1.0, update / (num_updates - 1))


def linear_decay(start: float, end: float, step: int, steps: int) -> float:
    """`start` moved linearly to `end` over the first `steps` steps, then `end` (an epsilon schedule)."""
    return end + (start - end) * max(0.0, 1.0 - step / steps) if steps > 0 else end


def minibatches(batch_size: int, num_minibatches: int, generator: torch.Generator, device) -> list[torch.Tensor]:
    """A random permutation of the batch split into `num_minibatches` index tensors (the last ones one
    shorter when the batch does not divide)."""
    if not 1 <= num_minibatches <= batch_size:
        raise ValueError(f"minibatches must be in [1, batch size {batch_size}], got {num_minibatches}")
    perm = torch.randperm(batch_size, generator=generator).to(device)
    return list(perm.tensor_split(num_minibatches))


def truncated_values(value_fn, final_obs: torch.Tensor, truncated: torch.Tensor, chunk: int = 8192,
                     states: torch.Tensor | None = None) -> torch.Tensor:
    """float32 [T, N]: `value_fn` of the finished episode's last observation (`final_obs[t, n]`) where step t of
    env n was truncated, 0 elsewhere: the `final_values` of `gae` and `lambda_returns`. Only the truncated steps
    are evaluated, at most `chunk` at a time (finding them is one host sync: call it once per rollout). A recurrent
    model's `states[t, n]` (the state step t left) go with them: `value_fn(obs, state)`."""
    out = torch.zeros(truncated.shape, dtype=torch.float32, device=truncated.device)
    for part in truncated.nonzero().split(chunk):
        at = part[:, 0], part[:, 1]
        out[at] = (value_fn(final_obs[at]) if states is None else value_fn(final_obs[at], states[at])).float()
    return out
