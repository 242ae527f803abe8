"""Networks over 72x80 Game Boy frames: shades 0..3 (K stacked, or packed 4 a byte) in.

Every model acts through one interface, so evaluation, plots and adapters need no trainer:
`initial_state(n, device)` (None for a feed-forward model), `policy_step(obs, state, done) -> (out, state)`
where `out` is action logits (kind "pg") or action values (kind "q"), and `done` (bool [N] or None) marks
envs whose previous step ended an episode (a recurrent state is reset there first)."""

from __future__ import annotations

import math

import torch
from torch import nn

from gbxcule.rl.goals import SHOWN_PX, unpack_shades

MODELS = ("nature", "small")
TORSO = {"nature": (32, 64, 64, 512), "small": (16, 32, 32, 256)}  # conv filters and hidden width
# what of the frame the torso sees: "full", every pixel (the second convolution pads its input by one, so it covers
# all 17x19 of the first's outputs); "cropped", the torso of checkpoints written before 2026-11-30, whose second
# convolution read only the first's top 16 rows and left 18 columns, so the frame's last 4 rows and last 4 columns
# (among them the shown milestones' row, env.show_milestones) never reached the features
VIEWS = ("full", "cropped")
VIEW_BEFORE = "cropped"  # the torso of a checkpoint whose model description names no view (rl/rundir.py)
CONV_OUT = {"full": ((17, 19), (8, 9), (6, 7)), "cropped": ((17, 19), (7, 8), (5, 6))}  # 72x80 through the convs
ROW = 80  # `milestone_row`: the newest frame's last row (env.show_milestones draws the flags there), as a vector


def _init(layer: nn.Module, gain: float = math.sqrt(2)) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def check_level_heads(level_heads) -> None:
    if isinstance(level_heads, bool) or not isinstance(level_heads, int) or level_heads < 0:
        raise ValueError(f"level_heads (head sets, one a level) must be an integer >= 0, got {level_heads!r}")


def shown_levels(obs: torch.Tensor, packed: bool, level_heads: int) -> torch.Tensor | None:
    """With `level_heads` L > 0: each observation's milestone level ([...] of obs [..., K, 72, W]), the milestones
    held as env.show_milestones draws them over the newest frame's last row (SHOWN_PX pixels of shade 3 each), at
    most L - 1; None with L = 0."""
    if not level_heads:
        return None
    row = obs[..., -1, -1, :]
    ink = (unpack_shades(row) if packed else row) == 3
    return (ink.sum(-1) // SHOWN_PX).clamp_(max=level_heads - 1)


def level_columns(out: torch.Tensor, level: torch.Tensor | None, level_heads: int) -> torch.Tensor:
    """Of a head's outputs for every level ([..., L x C], level-major), the C columns of each row's `level` ([...]);
    `out` itself with L = 0."""
    if not level_heads:
        return out
    if level is None:
        raise ValueError("a model with level_heads needs each observation's level (models.shown_levels)")
    per = out.shape[-1] // level_heads
    return out.gather(-1, level.unsqueeze(-1) * per + torch.arange(per, device=out.device))


class ActorCritic(nn.Module):
    """A Nature-DQN-style CNN ("nature": 32-64-64 filters, 512 hidden; "small": 16-32-32, 256) with a policy
    and a value head. Input uint8 [B, K, 72, 80] shades (or [B, K, 72, 20] packed with `packed=True`),
    scaled to [0, 1] inside. With `gru` the heads read a GRU's state over the CNN's features; with `gru_skip`
    they read the features too, beside it (what needs no memory can be learned as without the GRU). `view`: VIEWS;
    `milestone_row`: `cnn_torso`'s. With `level_heads` L the policy and value heads are L of each, one per milestone
    level (`levels`): each observation is read by its level's pair, so a level first reached late in training starts
    from heads no earlier level trained (the torso, and the GRU, stay shared)."""

    def __init__(self, num_actions: int, stack_k: int = 1, packed: bool = False, arch: str = "nature",
                 gru: int | None = None, gru_skip: bool = False, view: str = "full", milestone_row: bool = False,
                 level_heads: int = 0):
        super().__init__()
        check_level_heads(level_heads)
        if gru is not None and (isinstance(gru, bool) or not isinstance(gru, int) or gru < 1):
            raise ValueError(f"gru (the recurrent state's size) must be an integer >= 1 or none, got {gru!r}")
        if gru_skip and gru is None:
            raise ValueError("gru_skip needs a gru (the heads read the features beside its state)")
        self.num_actions, self.stack_k, self.packed, self.arch, self.gru = num_actions, stack_k, packed, arch, gru
        self.gru_skip, self.view, self.milestone_row = bool(gru_skip), view, bool(milestone_row)
        self.level_heads = level_heads
        self.body, hidden = cnn_torso(stack_k, arch, view=view, milestone_row=self.milestone_row)
        width = hidden + gru if self.gru_skip else (gru or hidden)
        self.pi = _init(nn.Linear(width, num_actions * max(1, level_heads)), 0.01)  # level-major columns
        self.v = _init(nn.Linear(width, max(1, level_heads)), 1.0)
        if gru is not None:  # a GRU over the CNN features: the policy and value read its state
            self.rnn = nn.GRUCell(hidden, gru)
            for name, w in self.rnn.named_parameters():
                nn.init.orthogonal_(w) if "weight" in name else nn.init.zeros_(w)

    def describe(self) -> dict:
        d = {"arch": self.arch, "num_actions": self.num_actions, "stack_k": self.stack_k, "packed": self.packed,
             "view": self.view, "params": sum(p.numel() for p in self.parameters())}
        if self.gru is not None:
            d["gru"] = self.gru
        if self.gru_skip:
            d["gru_skip"] = True
        if self.milestone_row:
            d["milestone_row"] = True
        if self.level_heads:
            d["level_heads"] = self.level_heads
        return d

    def levels(self, obs: torch.Tensor) -> torch.Tensor | None:
        """Each observation's milestone level (`shown_levels`); None without `level_heads`."""
        return shown_levels(obs, self.packed, self.level_heads)

    def at_level(self, out: torch.Tensor, level: torch.Tensor | None) -> torch.Tensor:
        """Each row's `level`'s columns of a head's outputs (`level_columns`); `out` without `level_heads`."""
        return level_columns(out, level, self.level_heads)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        return torso_features(self.body, scaled(obs, self.packed, next(self.parameters()).dtype), self.milestone_row)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, value) of a feed-forward model (a recurrent one steps through `forward_step`)."""
        return self.heads(self.features(obs), level=self.levels(obs))

    def head_input(self, feats: torch.Tensor, h: torch.Tensor | None = None) -> torch.Tensor:
        """What the heads read ([..., width]): the CNN's features `feats`; of a recurrent model its state `h` after
        them, with `gru_skip` the two side by side."""
        if h is None:
            return feats
        return torch.cat((feats, h.to(feats.dtype)), -1) if self.gru_skip else h

    def heads(self, feats: torch.Tensor, h: torch.Tensor | None = None,
              level: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, value) from the features and, of a recurrent model, its state after them (`head_input`); with
        `level_heads`, each row's level's (`levels`)."""
        x = self.head_input(feats, h)
        return self.at_level(self.pi(x), level), self.at_level(self.v(x), level).squeeze(-1)

    def value(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        f = self.features(obs)
        h = None if self.gru is None else self.rnn(f, state.to(f.dtype))
        return self.at_level(self.v(self.head_input(f, h)), self.levels(obs)).squeeze(-1)

    def forward_step(self, obs: torch.Tensor, state: torch.Tensor | None):
        """(logits, value, next state): one step of a recurrent model (state [N, gru]), or the feed-forward one
        (state None, returned as None)."""
        f = self.features(obs)
        if self.gru is not None:
            state = self.rnn(f, state.to(f.dtype))
        logits, value = self.heads(f, state, self.levels(obs))
        return logits, value, state

    kind = "pg"

    def initial_state(self, n: int, device) -> torch.Tensor | None:
        if self.gru is None:
            return None
        return torch.zeros(n, self.gru, device=device)

    def policy_step(self, obs: torch.Tensor, state=None, done: torch.Tensor | None = None):
        if state is not None and done is not None:
            state = state * (~done).unsqueeze(-1).to(state.dtype)
        logits, _, state = self.forward_step(obs, state)
        return logits, (None if state is None else state.float())


def cnn_torso(stack_k: int, arch: str, layer_norm: bool = False, view: str = "full",
              milestone_row: bool = False) -> tuple[nn.Sequential, int]:
    """The Nature-DQN-style CNN every model shares, and its output width. `layer_norm` normalises each conv
    layer's output over (C, H, W) (GroupNorm with one group) and the hidden layer (LayerNorm) before the ReLU;
    `view`: VIEWS; `milestone_row`: the hidden layer also reads the newest frame's last row, ROW shades, beside the
    flattened convolutions (`torso_features` runs it), so the milestones env.show_milestones draws there are an
    input of their own rather than one row of the picture."""
    if arch not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {arch!r}")
    if view not in VIEWS:
        raise ValueError(f"view must be one of {', '.join(VIEWS)}, got {view!r}")
    c1, c2, c3, hidden = TORSO[arch]
    h3, w3 = CONV_OUT[view][2]

    def norm(c: int, conv: bool) -> list[nn.Module]:
        return [(nn.GroupNorm(1, c) if conv else nn.LayerNorm(c))] if layer_norm else []

    body = nn.Sequential(
        _init(nn.Conv2d(stack_k, c1, 8, stride=4)), *norm(c1, True), nn.ReLU(),  # 72x80 -> 17x19
        _init(nn.Conv2d(c1, c2, 4, stride=2, padding=int(view == "full"))), *norm(c2, True), nn.ReLU(),
        _init(nn.Conv2d(c2, c3, 3, stride=1)), *norm(c3, True), nn.ReLU(),  # -> 8x9 -> 6x7 (cropped: 7x8 -> 5x6)
        nn.Flatten(), _init(nn.Linear(c3 * h3 * w3 + ROW * milestone_row, hidden)), *norm(hidden, False), nn.ReLU())
    return body, hidden


def torso_features(body: nn.Sequential, x: torch.Tensor, milestone_row: bool) -> torch.Tensor:
    """`cnn_torso`'s features of scaled frames x [B, K, 72, 80]; with `milestone_row` the newest frame's last row
    joins the flattened convolutions before the hidden layer (the body's modules run in order; its parameters'
    names are those of a body without it)."""
    if not milestone_row:
        return body(x)
    h = x
    for layer in body:
        h = layer(h)
        if isinstance(layer, nn.Flatten):
            h = torch.cat((h, x[:, -1, -1, :].to(h.dtype)), 1)
    return h


def activation_bytes(arch: str, stack_k: int, packed: bool, train: bool, layer_norm: bool = False,
                     gru: int | None = None, gru_skip: bool = False, view: str = "full") -> int:
    """Peak bytes of tensors one sample adds to a float32 pass of a model here: with `train` a forward and backward
    of a batch gathered from storage, else a forward under no_grad. The larger of: the shades' two float copies;
    the forward's kept tensors (the input, each ReLU's output, a norm's input); in backward, the first layer's kept
    tensors beside two gradients of its size. bf16 autocast keeps less (an upper bound there); cuDNN's own copies
    are core/memory.py's CUDA_WORKING_FACTOR. tests/test_memory.py measures it against torch's tensors."""
    c1, c2, c3, hidden = TORSO[arch]
    px = stack_k * 72 * 80
    outs = [c * h * w for c, (h, w) in zip((c1, c2, c3), CONV_OUT[view], strict=True)] + [hidden]
    copy = (px // 4 if packed else px) if train else 0  # the minibatch's uint8 copy
    cast = copy + (px if packed else 0) + 8 * px  # (unpacked) shades, converted then scaled
    gates = 4 * 8 * (gru or 0) + (4 * (hidden + gru) if gru_skip else 0)  # a GRU cell's gate products (and the
    # skip's features and state side by side)
    if not train:
        return max(cast, 4 * px + 8 * outs[0], 4 * outs[-1] + gates) + 1024
    keep = 2 if layer_norm else 1
    forward = copy + 4 * px + 4 * keep * sum(outs) + gates
    backward = copy + 4 * px + 4 * (2 + keep) * outs[0] + 4 * (gru or 0)
    return max(cast, forward, backward) + 1024  # 1 KiB: the heads, the loss and their gradients


def scaled(obs: torch.Tensor, packed: bool, dtype: torch.dtype) -> torch.Tensor:
    """uint8 shades (packed 4 a byte with `packed`) as `dtype` in [0, 1]."""
    if packed:
        obs = unpack_shades(obs)
    return obs.to(dtype) * (1.0 / 3.0)


class QNetwork(nn.Module):
    """Action values over the same CNN torso as ActorCritic (kind "q"): a linear head, or a dueling one
    (V + A - mean A); `layer_norm` for PQN. With `level_heads` L the head (and the dueling V) is L of each, one per
    milestone level, as ActorCritic's. Input as ActorCritic's; the parameters must be float32 (autocast may run the
    torso in bf16)."""

    kind = "q"

    def __init__(self, num_actions: int, stack_k: int = 1, packed: bool = False, arch: str = "nature",
                 dueling: bool = False, layer_norm: bool = False, view: str = "full", milestone_row: bool = False,
                 level_heads: int = 0):
        super().__init__()
        check_level_heads(level_heads)
        self.num_actions, self.stack_k, self.packed, self.arch = num_actions, stack_k, packed, arch
        self.dueling, self.layer_norm, self.view, self.milestone_row = dueling, layer_norm, view, bool(milestone_row)
        self.level_heads = level_heads
        self.body, hidden = cnn_torso(stack_k, arch, layer_norm, view, self.milestone_row)
        self.q = _init(nn.Linear(hidden, num_actions * max(1, level_heads)), 1.0)  # level-major columns
        self.v = _init(nn.Linear(hidden, max(1, level_heads)), 1.0) if dueling else None

    def describe(self) -> dict:
        d = {"arch": self.arch, "num_actions": self.num_actions, "stack_k": self.stack_k, "packed": self.packed,
             "view": self.view, "head": "dueling" if self.dueling else "q", "layer_norm": self.layer_norm,
             "params": sum(p.numel() for p in self.parameters())}
        if self.milestone_row:
            d["milestone_row"] = True
        if self.level_heads:
            d["level_heads"] = self.level_heads
        return d

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Action values [B, A], float32, each row's from its level's head: the head runs outside autocast (values
        of different actions often differ by less than bf16 resolves)."""
        h = torso_features(self.body, scaled(obs, self.packed, next(self.parameters()).dtype), self.milestone_row)
        level, k = shown_levels(obs, self.packed, self.level_heads), self.level_heads
        with torch.autocast(h.device.type, enabled=False):
            h = h.float()
            q = level_columns(self.q(h), level, k)
            if self.v is not None:
                q = level_columns(self.v(h), level, k) + q - q.mean(-1, keepdim=True)
        return q

    def initial_state(self, n: int, device) -> None:
        return None

    def policy_step(self, obs: torch.Tensor, state=None, done: torch.Tensor | None = None):
        return self(obs), None


def epsilon_greedy(q: torch.Tensor, epsilon: float | torch.Tensor) -> torch.Tensor:
    """Actions [B] from action values [B, A]: uniformly random with probability `epsilon` (one for all, or [B], one
    per row), else the argmax."""
    return epsilon_soft(q.argmax(-1), q.shape[1], epsilon)


def epsilon_soft(actions: torch.Tensor, num_actions: int, epsilon: float | torch.Tensor) -> torch.Tensor:
    """`actions` [B] with each replaced, with probability `epsilon` (one for all, or [B]), by one drawn uniformly
    from `num_actions` (the device's default generator)."""
    explore = torch.rand(actions.shape[0], device=actions.device) < epsilon
    random = torch.randint(num_actions, (actions.shape[0],), device=actions.device)
    return torch.where(explore, random, actions)


def epsilon_ladder(num_envs: int, alpha: float, device, rank: int = 0, world: int = 1) -> torch.Tensor:
    """Exponents [num_envs] of the epsilon ladder: env i of all N explores with epsilon ** (1 + alpha * i / (N - 1)),
    from epsilon itself at env 0 to epsilon ** (1 + alpha) at the last (Ape-X's actors, with epsilon 0.4 and alpha 7:
    0.4 to 0.00066). alpha 0: every env at epsilon. On several processes (`rank` of `world`, num_envs each) the
    ladder runs over every process's envs, rank 0's on its top rungs."""
    total = num_envs * world
    if total == 1:
        return torch.ones(num_envs, device=device)
    i = torch.arange(rank * num_envs, (rank + 1) * num_envs, device=device, dtype=torch.float32)
    return 1.0 + alpha * i / (total - 1)


def ladder_epsilons(epsilon: float, exponents: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Each env's epsilon (`epsilon` ** its ladder exponent) written into `out`, on the device."""
    return torch.pow(epsilon, exponents, out=out)
