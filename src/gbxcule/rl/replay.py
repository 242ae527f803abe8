"""The replay buffer of the value-based trainers (DQN), all on the device, with its n-step writer.

Layout: a ring of `rows` time steps x N envs (capacity = rows x N transitions). Row t holds, for every env, the
newest frame of the observation acted on at t (uint8, as the env gives it: shades or packed), how many of the
frames before it belong to the same episode (`depth`, at most K - 1), the action, and, once the n steps after
it are in, the n-step return, the bootstrap's discount and where the bootstrap observation is. A frame is
stored once: a stack of K frames is rebuilt by index (rows t - K + 1 .. t, clamped at the episode's first
frame, which is what the env's frame ring holds there). A truncated episode's last observation is not the
next row's (that is the next episode's first): its newest frame goes to a small per-env ring of final frames
(`final_slots` entries, enough for every truncation the rows can still refer to, as episodes last at most
`max_steps`).

The n-step writer keeps the last n steps' rewards and end flags of all N envs; `add` (one call per step of all
envs, no host synchronisation) writes the step and completes the transition of the step n back
(`returns.nstep_returns`: cut at an end; terminated: no bootstrap; truncated: bootstrap from the final
observation). Sampling draws uniformly (`torch.randint`, batches gathered on the device) or, with
`prioritized`, proportionally to priority^alpha from a sum-tree on the device, with importance weights.

Memory (bytes): capacity x (F + 17) + N x final_slots x F, F = 72 x 80 (or 72 x 20 packed), plus 16 x the
next power of two >= capacity for the sum-tree (`ReplayPlan.bytes`). Tests: tests/test_replay.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gbxcule.core.errors import GbxculeError
from gbxcule.rl import returns

ROW_BYTES = 17  # per transition beside its frame: depth 1, action 2, return 4, discount 4, k 1, final 1, slot 4


class ReplayError(GbxculeError):
    """A replay buffer that cannot work: too few rows for its n-step and stack, or more than memory holds."""


@dataclass(frozen=True)
class ReplayPlan:
    """Sizes of a replay buffer, known before anything is allocated."""

    rows: int
    num_envs: int
    frame_shape: tuple[int, int]
    stack_k: int
    n_step: int
    final_slots: int
    prioritized: bool

    @property
    def capacity(self) -> int:
        return self.rows * self.num_envs

    @property
    def frame_bytes(self) -> int:
        return self.frame_shape[0] * self.frame_shape[1]

    @property
    def tree_leaves(self) -> int:
        return 1 << max(0, (self.capacity - 1).bit_length())

    @property
    def bytes(self) -> int:
        n = self.num_envs
        total = self.capacity * (self.frame_bytes + ROW_BYTES) + n * self.final_slots * self.frame_bytes
        total += n * (self.n_step * 6 + 10)  # the writer's ring, pointers and depths
        if self.prioritized:
            total += 16 * self.tree_leaves
        return total

    def describe(self) -> str:
        kind = "prioritized" if self.prioritized else "uniform"
        return (f"replay buffer {self.capacity:,} transitions ({self.rows:,} steps x {self.num_envs:,} envs, "
                f"{kind}, {self.n_step}-step): {self.bytes / 2**20:,.0f} MiB")


def plan(capacity: int, num_envs: int, frame_shape: tuple[int, int], stack_k: int, n_step: int, max_steps: int,
         prioritized: bool = False, what: str = "buffer_size") -> ReplayPlan:
    """The sizes of a buffer of about `capacity` transitions (rounded down to whole steps of all envs); one
    ReplayError line if it is too small to hold an n-step transition with its frame stack."""
    rows = capacity // num_envs
    need = n_step + stack_k
    if rows < need:
        raise ReplayError(f"{what} {capacity:,} holds {rows} steps of {num_envs:,} envs; n-step {n_step} with "
                          f"{stack_k}-frame stacks needs at least {need} ({need * num_envs:,} transitions)")
    slots = (rows + n_step) // max(1, max_steps) + 2
    return ReplayPlan(rows, num_envs, (int(frame_shape[0]), int(frame_shape[1])), stack_k, n_step, slots,
                      prioritized)


def check_memory(p: ReplayPlan, device: str, reserve: int = 2**30, what: str = "buffer_size") -> None:
    """One ReplayError line if the buffer does not fit in the device's free memory (less `reserve` on CUDA for
    the env, the model and activations), before anything is allocated."""
    from gbxcule.backends import memory_available

    host, dev = memory_available(str(device))
    room = dev if str(device).startswith("cuda") else host
    if room is None:
        return
    free, where = room.bytes - (reserve if room is dev else 0), ("device" if room is dev else "host")
    if p.bytes <= free:
        return
    per = p.bytes / p.capacity
    most = max(0, int(free // per) // p.num_envs * p.num_envs)
    raise ReplayError(f"the replay buffer ({what} {p.capacity:,}) needs {p.bytes / 2**30:.2f} GiB of {where} memory "
                      f"but {max(free, 0) / 2**30:.2f} GiB is free ({room.source}); at most about {most:,} "
                      f"transitions fit")


class SumTree:
    """Priorities of `size` leaves in a binary tree of sums on the device (float64): set leaves (a contiguous
    range, or any indices), read the total, sample leaves proportionally to their priority. No host sync."""

    def __init__(self, size: int, device):
        self.leaves = 1 << max(0, (size - 1).bit_length())
        self.depth = self.leaves.bit_length() - 1
        self.tree = torch.zeros(2 * self.leaves, dtype=torch.float64, device=device)

    @property
    def total(self) -> torch.Tensor:
        return self.tree[1]

    def set_range(self, lo: int, hi: int, value) -> None:
        """Leaves lo..hi-1 = value (a number or a device scalar)."""
        t, a, b = self.tree, self.leaves + lo, self.leaves + hi - 1
        t[a:b + 1] = value
        while a > 1:
            a, b = a // 2, b // 2
            t[a:b + 1] = t[2 * a:2 * b + 2:2] + t[2 * a + 1:2 * b + 2:2]

    def set(self, index: torch.Tensor, values: torch.Tensor) -> None:
        """Leaves `index` = `values`; a leaf named more than once takes the largest of its values, so the result does
        not hang on the order of the writes (which CUDA leaves open: a batch that samples one transition twice can
        give it two TD errors a rounding apart)."""
        t = self.tree
        i = index + self.leaves
        t.scatter_reduce_(0, i, values.to(t.dtype), reduce="amax", include_self=False)
        for _ in range(self.depth):
            i = i // 2
            t[i] = t[2 * i] + t[2 * i + 1]

    def get(self, index: torch.Tensor) -> torch.Tensor:
        return self.tree[index + self.leaves]

    def sample(self, batch: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """`batch` leaf indices, stratified (one uniform draw in each of `batch` equal slices of the total) and
        proportional to priority; never a leaf of priority 0 while the total is positive."""
        t = self.tree
        u = (torch.arange(batch, device=t.device, dtype=t.dtype)
             + torch.rand(batch, device=t.device, dtype=t.dtype, generator=generator)) * (t[1] / batch)
        i = torch.ones(batch, dtype=torch.int64, device=t.device)
        for _ in range(self.depth):
            left, right = t[2 * i], t[2 * i + 1]
            go = (left <= 0) | ((u >= left) & (right > 0))
            u = torch.where(go, u - left, u)
            i = 2 * i + go.to(torch.int64)
        return i - self.leaves


@dataclass
class Batch:
    """A sampled batch on the device: obs and next_obs uint8 [B, K, 72, W], action int64 [B], ret and discount
    float32 [B] (target = ret + discount * V(next_obs)), weights (importance weights, or None for uniform),
    index (leaf ids, for priority updates)."""

    obs: torch.Tensor
    action: torch.Tensor
    ret: torch.Tensor
    discount: torch.Tensor
    next_obs: torch.Tensor
    weights: torch.Tensor | None
    index: torch.Tensor


_STATE = ("frames", "depth", "action", "ret", "discount", "k", "final", "slot", "final_frames", "final_ptr", "age",
          "ring_r", "ring_term", "ring_trunc", "max_priority")


class ReplayBuffer:
    """A replay buffer and n-step writer for N envs on one device (see the module docstring).

        buf = ReplayBuffer(plan(...), gamma, device)
        buf.begin(env.obs)                                   # after a reset (or a resume without the buffer)
        obs, ... = env.step(action)
        buf.add(action, reward, terminated, truncated, env.final_obs, env.obs)   # once per step of all envs
        if buf.size >= learning_starts: batch = buf.sample(256)
    """

    def __init__(self, p: ReplayPlan, gamma: float, device, alpha: float = 0.6):
        self.plan, self.gamma, self.device, self.alpha = p, float(gamma), torch.device(device), float(alpha)
        r, n, h, w = p.rows, p.num_envs, *p.frame_shape
        dev = self.device
        self.frames = torch.zeros((r, n, h, w), dtype=torch.uint8, device=dev)
        self.depth = torch.zeros((r, n), dtype=torch.uint8, device=dev)
        self.action = torch.zeros((r, n), dtype=torch.int16, device=dev)
        self.ret = torch.zeros((r, n), dtype=torch.float32, device=dev)
        self.discount = torch.zeros((r, n), dtype=torch.float32, device=dev)
        self.k = torch.zeros((r, n), dtype=torch.uint8, device=dev)
        self.final = torch.zeros((r, n), dtype=torch.bool, device=dev)
        self.slot = torch.zeros((r, n), dtype=torch.int32, device=dev)
        self.final_frames = torch.zeros((p.final_slots, n, h, w), dtype=torch.uint8, device=dev)
        self.final_ptr = torch.zeros(n, dtype=torch.int64, device=dev)
        self.age = torch.zeros(n, dtype=torch.uint8, device=dev)
        self.ring_r = torch.zeros((p.n_step, n), dtype=torch.float32, device=dev)
        self.ring_term = torch.zeros((p.n_step, n), dtype=torch.bool, device=dev)
        self.ring_trunc = torch.zeros((p.n_step, n), dtype=torch.bool, device=dev)
        self.max_priority = torch.ones((), dtype=torch.float64, device=dev)
        self.tree = SumTree(p.capacity, dev) if p.prioritized else None
        self._env_ids = torch.arange(n, device=dev)
        self._back = torch.arange(p.stack_k - 1, -1, -1, device=dev)  # frames back from the newest, oldest first
        self._orders = [torch.tensor([(j + i) % p.n_step for i in range(p.n_step)], device=dev)
                        for j in range(p.n_step)]
        self.t = self.first = self.steps = 0
        self.started = False

    # --- writing ---------------------------------------------------------------------------------------------
    def begin(self, obs: torch.Tensor) -> None:
        """Start (or start over) from the envs' current observations [N, K, 72, W]: their K frames go into the
        first K rows, so the first stack rebuilds exactly; nothing is sampleable until n steps are in."""
        k = self.plan.stack_k
        for j in range(k):
            self.frames[j].copy_(obs[:, j])
            self.depth[j].fill_(j)
        self.age.fill_(k - 1)
        self.final_ptr.zero_()
        self.t = self.first = k - 1
        self.steps = 0
        if self.tree is not None:
            self.tree.tree.zero_()
            self.max_priority.fill_(1.0)
        self.started = True

    def add(self, action: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
            final_obs: torch.Tensor, next_obs: torch.Tensor) -> None:
        """One step of all envs: the action taken from the current observation, the step's reward and ends, the
        finished episodes' last observations (GameEnv.final_obs) and the observations now (GameEnv.obs)."""
        p = self.plan
        rows, n_step, k_max = p.rows, p.n_step, p.stack_k - 1
        row = self.t % rows
        self.action[row] = action
        slot = self.final_ptr % p.final_slots
        self.slot[row] = slot
        self.final_frames[slot, self._env_ids] = final_obs[:, -1]  # committed only where truncated
        self.final_ptr += truncated
        j = self.steps % n_step
        self.ring_r[j] = reward
        self.ring_term[j] = terminated
        self.ring_trunc[j] = truncated
        nxt = (self.t + 1) % rows
        self.frames[nxt] = next_obs[:, -1]
        self.age.add_(1).clamp_(max=k_max).masked_fill_(terminated | truncated, 0)
        self.depth[nxt] = self.age
        self.t += 1
        self.steps += 1
        if self.steps >= n_step:  # the step n back now has its n steps: complete its transition
            c = (self.t - n_step) % rows
            order = self._orders[self.steps % n_step]
            ret, disc, k, final = returns.nstep_returns(self.ring_r[order], self.ring_term[order],
                                                        self.ring_trunc[order], self.gamma)
            self.ret[c] = ret
            self.discount[c] = disc
            self.k[c] = k.to(torch.uint8)
            self.final[c] = final
            if self.tree is not None:
                n = p.num_envs
                self.tree.set_range(c * n, (c + 1) * n, self.max_priority)
        if self.tree is not None:  # the row whose stack history was just overwritten leaves the sampleable set
            gone = self.t - rows + k_max
            if gone >= self.first:
                g = gone % rows
                self.tree.set_range(g * p.num_envs, (g + 1) * p.num_envs, 0.0)

    # --- reading ---------------------------------------------------------------------------------------------
    def bounds(self) -> tuple[int, int]:
        """The first and last step (absolute row numbers) whose transitions can be sampled (lo > hi: none)."""
        p = self.plan
        return max(self.first, self.t - p.rows + p.stack_k), self.t - p.n_step

    @property
    def size(self) -> int:
        """Transitions that can be sampled now (a host number; no device read)."""
        lo, hi = self.bounds()
        return max(0, hi - lo + 1) * self.plan.num_envs

    def _stack(self, row: torch.Tensor, env: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
        rows = (row[:, None] - torch.minimum(self._back[None], depth[:, None].long())) % self.plan.rows
        return self.frames[rows, env[:, None]]

    def sample(self, batch: int, beta: float = 0.4) -> Batch:
        """`batch` transitions, uniformly or (prioritized) by priority with importance weights
        (N_sampleable x P(i))^-beta scaled to a batch maximum of 1."""
        p = self.plan
        n, size = p.num_envs, self.size
        if size < 1:
            raise ReplayError("the replay buffer holds no complete transition yet")
        weights = None
        if self.tree is None:
            lo, _ = self.bounds()
            i = torch.randint(size, (batch,), device=self.device)
            row, env = (lo + i // n) % p.rows, i % n
            leaf = None
        else:
            leaf = self.tree.sample(batch)
            row, env = leaf // n, leaf % n
            prob = self.tree.get(leaf) / self.tree.total
            w = (size * prob).pow(-beta)
            weights = (w / w.max()).float()
        return self.gather(row, env, weights, leaf)

    def gather(self, row: torch.Tensor, env: torch.Tensor, weights: torch.Tensor | None = None,
               index: torch.Tensor | None = None) -> Batch:
        """The transitions at ring rows `row` (physical: absolute step % rows) of envs `env`, stacks rebuilt."""
        p = self.plan
        k = self.k[row, env].long()
        final = self.final[row, env]
        nxt = (row + k) % p.rows
        last = (nxt - 1) % p.rows
        depth_next = torch.where(final, (self.depth[last, env].long() + 1).clamp(max=p.stack_k - 1),
                                 self.depth[nxt, env].long())
        next_obs = self._stack(nxt, env, depth_next)
        final_frame = self.final_frames[self.slot[last, env].long(), env]
        next_obs[:, -1] = torch.where(final[:, None, None], final_frame, next_obs[:, -1])
        return Batch(self._stack(row, env, self.depth[row, env]), self.action[row, env].long(), self.ret[row, env],
                     self.discount[row, env], next_obs, weights, row * p.num_envs + env if index is None else index)

    def update_priorities(self, index: torch.Tensor, td_abs: torch.Tensor, eps: float = 1e-6) -> None:
        """New priorities (|TD error| + eps)^alpha for sampled leaves; new transitions get the largest seen."""
        if self.tree is None:
            return
        pri = (td_abs.detach().double() + eps).pow(self.alpha)
        self.tree.set(index, pri)
        torch.maximum(self.max_priority, pri.max(), out=self.max_priority)

    # --- checkpoints -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        d = {name: getattr(self, name).cpu().clone() for name in _STATE}
        d.update(t=self.t, first=self.first, steps=self.steps, started=self.started, rows=self.plan.rows,
                 num_envs=self.plan.num_envs, final_slots=self.plan.final_slots)
        if self.tree is not None:
            d["tree"] = self.tree.tree.cpu().clone()
        return d

    def load_state_dict(self, d: dict) -> None:
        p = self.plan
        if (d["rows"], d["num_envs"], d["final_slots"]) != (p.rows, p.num_envs, p.final_slots):
            raise ReplayError(f"the checkpoint's replay buffer has {d['rows']} steps x {d['num_envs']} envs, this one "
                              f"{p.rows} x {p.num_envs}")
        for name in _STATE:
            getattr(self, name).copy_(d[name])
        if self.tree is not None:
            self.tree.tree.copy_(d["tree"])
        self.t, self.first, self.steps, self.started = d["t"], d["first"], d["steps"], d["started"]
