"""Networks over 72x80 Game Boy frames: shades 0..3 (K stacked, or packed 4 a byte) in.

Every model acts through one interface, so evaluation, plots and adapters need no trainer:
`initial_state(n, device)` (None for a feed-forward model), `policy_step(obs, state, done) -> (out, state)`
where `out` is action logits (kind "pg") or action values (kind "q"), and `done` (bool [N] or None) marks
envs whose previous step ended an episode (a recurrent state is reset there first)."""

from __future__ import annotations

import math

import torch
from torch import nn

from gbxcule.rl.goals import unpack_shades

MODELS = ("nature", "small")


def _init(layer: nn.Module, gain: float = math.sqrt(2)) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    """A Nature-DQN-style CNN ("nature": 32-64-64 filters, 512 hidden; "small": 16-32-32, 256) with a policy
    and a value head. Input uint8 [B, K, 72, 80] shades (or [B, K, 72, 20] packed with `packed=True`),
    scaled to [0, 1] inside."""

    def __init__(self, num_actions: int, stack_k: int = 1, packed: bool = False, arch: str = "nature"):
        super().__init__()
        if arch not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, got {arch!r}")
        c1, c2, c3, hidden = (32, 64, 64, 512) if arch == "nature" else (16, 32, 32, 256)
        self.num_actions, self.stack_k, self.packed, self.arch = num_actions, stack_k, packed, arch
        self.body = nn.Sequential(
            _init(nn.Conv2d(stack_k, c1, 8, stride=4)), nn.ReLU(),  # 72x80 -> 17x19
            _init(nn.Conv2d(c1, c2, 4, stride=2)), nn.ReLU(),  # -> 7x8
            _init(nn.Conv2d(c2, c3, 3, stride=1)), nn.ReLU(),  # -> 5x6
            nn.Flatten(), _init(nn.Linear(c3 * 5 * 6, hidden)), nn.ReLU())
        self.pi = _init(nn.Linear(hidden, num_actions), 0.01)
        self.v = _init(nn.Linear(hidden, 1), 1.0)

    def describe(self) -> dict:
        return {"arch": self.arch, "num_actions": self.num_actions, "stack_k": self.stack_k, "packed": self.packed,
                "params": sum(p.numel() for p in self.parameters())}

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        if self.packed:
            obs = unpack_shades(obs)
        dtype = next(self.parameters()).dtype
        return self.body(obs.to(dtype) * (1.0 / 3.0))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.features(obs)
        return self.pi(h), self.v(h).squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(self.features(obs)).squeeze(-1)

    kind = "pg"

    def initial_state(self, n: int, device) -> None:
        return None

    def policy_step(self, obs: torch.Tensor, state=None, done: torch.Tensor | None = None):
        return self.pi(self.features(obs)), None
