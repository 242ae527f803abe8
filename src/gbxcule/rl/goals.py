"""Goals and reward terms evaluated on the device: pixel goal templates, RAM conditions, novelty tables.

Everything here is pure torch on the env's device (no host work per step) plus the template file format.

- **Goal template**: one or more 72x80 goal frames of shade indices 0..3, a mask of the pixels that count,
  and the config the frames were captured under (ROM SHA-1, codec, schedule, stack_k, obs mode). The distance
  of an observation to the template is the smallest, over its frames, of the mean absolute shade difference
  over the masked pixels divided by 3: 0 is identical, 1 is every counted pixel black against white.
  Packed observations (4 pixels a byte) are scored through a lookup table, never unpacked.
- **RAM condition**: `(byte at addr & mask) OP value` on a WRAM/HRAM byte; a goal is a conjunction.
- **Novelty table**: a per-env bitmap of hashed keys (RAM bytes or a coarse frame hash) seen this episode.
- **Screen hash**: an exact hash per env of a screen's bytes (the `still` reward's memory of earlier screens).
- **Lives**: a RAM byte counting lives or losses, read before and after a step: whether a life was lost.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from gbxcule.core.errors import GbxculeError
from gbxcule.core.memory import STILL_HASH_CHUNK
from gbxcule.core.screen import OBS_VIEWS
from gbxcule.core.typed import SettingError, check_fields, knob

OBS_H, OBS_W = 72, 80
TEMPLATE_FORMAT = 1
_META_KEYS = ("rom_sha1", "codec", "codec_version", "frames_per_step", "release_after_frames", "stack_k", "obs",
              "view")


class TemplateError(GbxculeError, ValueError):
    """A goal template that cannot be read or does not fit the env."""


class GoalError(GbxculeError, ValueError):
    """A goal or reward setting that does not fit the ROM or the env."""


@dataclass(frozen=True)
class TemplateMeta:
    """The config a template's frames were captured under; an env refuses a template whose meta differs."""

    rom_sha1: str
    codec: str
    codec_version: int
    frames_per_step: int
    release_after_frames: int
    stack_k: int
    obs: str  # "pixels" or "packed"
    task: str = ""
    tau: float | None = None  # suggested by `gbxcule goal calibrate`
    k_consecutive: int | None = None
    note: str = ""
    view: str = knob("stride", choices=OBS_VIEWS)  # how the frame samples the screen

    def mismatches(self, other: TemplateMeta) -> list[str]:
        return [f"{k} {getattr(self, k)!r} (env: {getattr(other, k)!r})" for k in _META_KEYS
                if getattr(self, k) != getattr(other, k)]


@dataclass
class GoalTemplate:
    frames: np.ndarray  # uint8 [M, 72, 80], shades 0..3
    mask: np.ndarray  # bool [72, 80]: the pixels that count
    meta: TemplateMeta

    def __post_init__(self) -> None:
        f = np.asarray(self.frames)
        if f.ndim == 2:
            f = f[None]
        if f.ndim != 3 or f.shape[1:] != (OBS_H, OBS_W) or len(f) < 1:
            raise TemplateError(f"template frames must be [M, {OBS_H}, {OBS_W}], got {list(f.shape)}")
        if f.dtype != np.uint8 or int(f.max(initial=0)) > 3:
            raise TemplateError("template frames must be uint8 shade indices 0..3")
        m = np.asarray(self.mask, dtype=bool)
        if m.shape != (OBS_H, OBS_W):
            raise TemplateError(f"template mask must be [{OBS_H}, {OBS_W}], got {list(m.shape)}")
        if not m.any():
            raise TemplateError("template mask selects no pixel")
        self.frames, self.mask = np.ascontiguousarray(f), m

    def check_fits(self, env_meta: TemplateMeta) -> None:
        bad = self.meta.mismatches(env_meta)
        if bad:
            raise TemplateError("goal template does not fit this env: " + "; ".join(bad))

    # --- file format: a .npz (zip) of frames, mask and meta.json; no pickles ----------------------------
    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        meta = json.dumps({"format": TEMPLATE_FORMAT, **asdict(self.meta)}, sort_keys=True).encode()
        np.savez_compressed(buf, frames=self.frames, mask=self.mask, meta=np.frombuffer(meta, dtype=np.uint8))
        return buf.getvalue()

    def save(self, path: str | Path) -> Path:
        from gbxcule.core.snapshot import write_snapshot

        write_snapshot(path, self.to_bytes())
        return Path(path)

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "template") -> GoalTemplate:
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                frames, mask, raw = z["frames"], z["mask"], z["meta"].tobytes()
            meta = json.loads(raw.decode())
            if not isinstance(meta, dict):
                what = "null" if meta is None else type(meta).__name__
                raise TemplateError(f"{where}: its metadata is {what}, not a JSON object")
            if meta.pop("format", None) != TEMPLATE_FORMAT:
                raise TemplateError(f"{where}: unknown template format")
            tm = TemplateMeta(**meta)
            check_fields(tm, "metadata")
            return cls(frames, mask, tm)
        except SettingError as exc:
            raise TemplateError(f"{where}: {exc}") from None
        except TemplateError:
            raise
        except (zipfile.BadZipFile, OSError, EOFError, KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
            raise TemplateError(f"{where} is not a readable goal template ({type(exc).__name__})") from None

    @classmethod
    def load(cls, path: str | Path) -> GoalTemplate:
        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise TemplateError(f"cannot read goal template {p}: {exc.strerror or exc}") from None
        return cls.from_bytes(data, str(p))


# --- distances on the device ------------------------------------------------------------------------------
def _pack_lut():
    """uint8 [256 * 4096]: sum over the 4 pixels of |obs - goal| where the mask nibble is set, indexed by
    obs_byte << 12 | mask_nibble << 8 | goal_byte (first pixel in bits 7-6, mask bit 3 for it)."""
    b = np.arange(256)
    px = np.stack([(b >> (6 - 2 * i)) & 3 for i in range(4)], axis=1)  # [256, 4]
    nib = np.arange(16)
    mbits = np.stack([(nib >> (3 - i)) & 1 for i in range(4)], axis=1)  # [16, 4]
    d = np.abs(px[:, None, None, :] - px[None, None, :, :]) * mbits[None, :, None, :]  # [obs, mask, goal, 4]
    return d.sum(-1).astype(np.uint8).reshape(-1)


class TemplateScorer:
    """Distance of observations to a template on the device. `obs`: "pixels" ([N, 72, 80]) or "packed"
    ([N, 72, 20]). Integer sums, then one float division: the same bits on every device."""

    def __init__(self, template: GoalTemplate, obs: str, device):
        import torch

        self.obs = obs
        frames = template.frames.astype(np.int16)
        self.count = int(template.mask.sum())
        if obs == "pixels":
            self.goal = torch.tensor(frames.reshape(len(frames), -1), dtype=torch.int16, device=device)
            self.mask = torch.tensor(template.mask.reshape(-1), dtype=torch.int16, device=device)
        else:
            packed = pack_shades(template.frames).astype(np.int32)  # [M, 72, 20]
            m = template.mask.reshape(OBS_H, OBS_W // 4, 4).astype(np.int32)
            nib = (m[..., 0] << 3) | (m[..., 1] << 2) | (m[..., 2] << 1) | m[..., 3]
            self.key = torch.tensor((nib[None] << 8 | packed).reshape(len(frames), -1), dtype=torch.int64,
                                    device=device)
            self.lut = torch.tensor(_pack_lut(), dtype=torch.uint8, device=device)

    def distance_sum(self, latest):
        """int32 [N]: the smallest, over the template's frames, masked sum of |shade - goal| of each env's
        latest frame (uint8 [N, 72, W]). Integer math: the same on every device."""
        import torch

        n = latest.shape[0]
        best = None
        if self.obs == "pixels":
            flat = latest.reshape(n, -1).to(torch.int16)
            for g in self.goal:
                d = ((flat - g).abs_() * self.mask).sum(1, dtype=torch.int32)
                best = d if best is None else torch.minimum(best, d)
        else:
            flat = latest.reshape(n, -1).to(torch.int64) << 12
            for k in self.key:
                d = self.lut[flat + k].sum(1, dtype=torch.int32)
                best = d if best is None else torch.minimum(best, d)
        assert best is not None
        return best

    @property
    def scale(self) -> float:
        """Distance per unit of `distance_sum` (multiply, never divide: CUDA divides by a scalar through its
        reciprocal, the CPU does not, and the bits would differ)."""
        return 1.0 / float(3 * self.count)

    def threshold(self, tau: float) -> int:
        """The integer sum below which the distance is below `tau`."""
        import math

        return math.ceil(tau * 3 * self.count)

    def distance(self, latest):
        """float32 [N]: distance of each env's latest frame to the template."""
        import torch

        return self.distance_sum(latest).to(torch.float32) * self.scale


SHOWN_PX = 4  # env.show_milestones: the pixels each milestone takes in a frame's last row (shade 3 where held)


def pack_shades(frames: np.ndarray) -> np.ndarray:
    """Pack shade indices [..., 80] into [..., 20] bytes, first pixel in bits 7-6 (the backend's format)."""
    f = np.asarray(frames, dtype=np.uint8).reshape(*np.shape(frames)[:-1], -1, 4)
    return ((f[..., 0] << 6) | (f[..., 1] << 4) | (f[..., 2] << 2) | f[..., 3]).astype(np.uint8)


def unpack_shades(packed):
    """Torch or numpy: [..., 20] packed bytes -> [..., 80] shades."""
    if isinstance(packed, np.ndarray):
        shifts = np.array([6, 4, 2, 0], dtype=np.uint8)
        return ((packed[..., None] >> shifts) & 3).reshape(*packed.shape[:-1], 4 * packed.shape[-1])
    import torch

    shifts = torch.tensor([6, 4, 2, 0], dtype=torch.uint8, device=packed.device)
    return ((packed.unsqueeze(-1) >> shifts) & 3).reshape(*packed.shape[:-1], 4 * packed.shape[-1])  # 0 rows too


# --- RAM conditions -----------------------------------------------------------------------------------------
OPS = ("eq", "ne", "ge", "gt", "le", "lt")


@dataclass(frozen=True)
class RamCondition:
    """`(byte at addr & mask) OP value`, on WRAM (0xC000-0xDFFF, its echo to 0xFDFF) or HRAM (0xFF80-0xFFFE)."""

    addr: int
    value: int
    mask: int = 0xFF
    op: str = "eq"

    def __post_init__(self) -> None:
        ram_offset(self.addr, "RAM condition")
        if not 0 <= self.mask <= 0xFF or not 0 <= self.value <= 0xFF:
            raise GoalError(f"RAM condition at {self.addr:#06x}: mask and value must be bytes")
        if self.op not in OPS:
            raise GoalError(f"RAM condition op must be one of {', '.join(OPS)}, got {self.op!r}")

    def holds(self, read) -> bool:
        """The same test on the host (`read(addr) -> byte`), for tests and tools."""
        v = read(self.addr) & self.mask
        return {"eq": v == self.value, "ne": v != self.value, "ge": v >= self.value, "gt": v > self.value,
                "le": v <= self.value, "lt": v < self.value}[self.op]


def ram_offset(addr: int, what: str = "address") -> tuple[str, int]:
    """(region, offset) of a WRAM or HRAM address; anything else is a GoalError."""
    if 0xC000 <= addr <= 0xFDFF:
        return "wram", (addr - 0xC000) & 0x1FFF
    if 0xFF80 <= addr <= 0xFFFE:
        return "hram", addr - 0xFF80
    raise GoalError(f"{what}: {addr:#06x} is not a WRAM (0xC000-0xDFFF) or HRAM (0xFF80-0xFFFE) address")


def ram_rows(addrs, layout) -> list[int]:
    """Row indices into the [bytes, envs] view of the backend's RAM (the env's `_ram`) for the given addresses."""
    rows = []
    for a in addrs:
        region, off = ram_offset(int(a))
        rows.append(layout.bases[region] + off)
    return rows


class RamGoal:
    """A conjunction of RAM conditions, evaluated on the backend's device RAM ([bytes, N] uint8 tensor)."""

    def __init__(self, conditions, layout, device):
        import torch

        self.conditions = tuple(conditions)
        if not self.conditions:
            raise GoalError("a RAM goal needs at least one condition")
        c = self.conditions
        self.rows = torch.tensor(ram_rows([x.addr for x in c], layout), dtype=torch.int64, device=device)
        self.mask = torch.tensor([x.mask for x in c], dtype=torch.int16, device=device)[:, None]
        self.value = torch.tensor([x.value for x in c], dtype=torch.int16, device=device)[:, None]
        self.ops = [x.op for x in c]

    def each(self, ram):
        """bool [C, N]: whether each condition holds in each env."""
        import torch

        v = ram.index_select(0, self.rows).to(self.mask.dtype) & self.mask
        # OPS are torch's comparison names: one comparison per condition (not all six, then one picked)
        return torch.stack([getattr(torch, op)(col, val) for col, val, op in zip(v, self.value, self.ops, strict=True)])

    def evaluate(self, ram):
        """bool [N]: whether every condition holds in each env."""
        return self.each(ram).all(0)

    def holds(self, read) -> bool:
        return all(c.holds(read) for c in self.conditions)


class LivesByte:
    """A task's lives byte (`tasks.Lives`) on the device: `before(ram)` keeps it before a step, `lost(ram, out)`
    writes (bool [N]) in which envs it moved the way that loses a life since, modulo 256: a change of 1..127 that
    way (a counter's wrap from 255 to 0 is a rise of 1)."""

    def __init__(self, lives, layout, num_envs: int, device):
        import torch

        self.row = ram_rows([lives.addr], layout)[0]
        self.sign = 1 if lives.lost == "up" else -1
        self._before = torch.zeros(num_envs, dtype=torch.int16, device=device)
        self._change = torch.zeros(num_envs, dtype=torch.int16, device=device)

    def before(self, ram) -> None:
        self._before.copy_(ram[self.row])

    def lost(self, ram, out):
        import torch

        torch.sub(ram[self.row], self._before, out=self._change)
        self._change.mul_(self.sign).sub_(1).bitwise_and_(0xFF)  # the change the losing way, less 1, modulo 256
        return torch.lt(self._change, 127, out=out)


class Milestones:
    """A task's milestones in chain order, each a RAM condition (an event flag) or a screen: a `TemplateScorer`
    and the integer distance sum under which its template holds (`threshold`). `each(ram, frame)`: bool [K, N],
    which hold now in each env (a screen on `frame`, uint8 [N, 72, W]: the newest frame without a drawn row).
    `ram`: the RAM ones' `RamGoal` (None where there are none), what the state archive keys progress cells by."""

    def __init__(self, conditions, screens, layout, device):
        import torch

        if len(conditions) != len(screens) or any((c is None) == (s is None) for c, s in zip(conditions, screens,
                                                                                          strict=True)):
            raise GoalError("each milestone is either a RAM condition or a screen")
        ram_at = [i for i, c in enumerate(conditions) if c is not None]
        screen_at = [i for i, s in enumerate(screens) if s is not None]
        self.k = len(conditions)
        self.ram = RamGoal([conditions[i] for i in ram_at], layout, device) if ram_at else None
        self.is_screen = torch.tensor([s is not None for s in screens], dtype=torch.bool, device=device)[:, None]
        self.screens = [screens[i] for i in screen_at]
        self.ram_at = torch.tensor(ram_at, dtype=torch.int64, device=device)
        stacked = ram_at + screen_at  # the chain position of each row of the stacked tests
        pos = [stacked.index(i) for i in range(len(stacked))]
        self.order = None if pos == list(range(len(pos))) else torch.tensor(pos, dtype=torch.int64, device=device)

    def each(self, ram, frame):
        """bool [K, N]: whether each milestone holds now in each env."""
        import torch

        parts = [] if self.ram is None else [self.ram.each(ram)]
        if self.screens:
            parts.append(torch.stack([scorer.distance_sum(frame) < limit for scorer, limit in self.screens]))
        held = parts[0] if len(parts) == 1 else torch.cat(parts)
        return held if self.order is None else held.index_select(0, self.order)

    def flags(self, ram, held=None):
        """bool [K, N]: each env's milestone flags, what `show_milestones` draws and progress-aware cells key by: a
        RAM milestone as it holds now, a screen as `held` (bool [K, N], the episode's: a screen holds only while
        shown, its progress stays; not needed where there is no screen)."""
        if self.ram is None:
            return held
        if not self.screens:
            return self.ram.each(ram)
        return held.index_copy(0, self.ram_at, self.ram.each(ram))


# --- novelty ------------------------------------------------------------------------------------------------
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)  # splitmix64's finaliser constants, as int64
_MIX2 = 0x94D049BB133111EB - (1 << 64)


def mix64(keys):
    """int64 [N] -> well-mixed int64 [N] (splitmix64's finaliser; wrapping int64 math, the same bits on every
    device). Shifts are logical (masked), so each step is a bijection and distinct keys stay distinct."""
    import torch

    def shr(x, s: int):
        return (x >> s) & ((1 << (64 - s)) - 1)

    h = keys.to(torch.int64)
    h = (h ^ shr(h, 30)) * _MIX1
    h = (h ^ shr(h, 27)) * _MIX2
    return h ^ shr(h, 31)


class NoveltyTable:
    """Per-env bitmaps of `size` hashed keys seen this episode (bool [N, size]). `visit(keys)` marks each env's
    key and returns whether it was new. Two keys that hash alike count as one (a bitmap, like a 1-hash Bloom
    filter): size it well above the number of distinct keys an episode meets."""

    def __init__(self, num_envs: int, size: int, device):
        import torch

        if size < 1:
            raise GoalError(f"novelty table size must be >= 1, got {size}")
        self.size = size
        self.seen = torch.zeros(num_envs, size, dtype=torch.bool, device=device)
        self.env_ids = torch.arange(num_envs, device=device)

    def visit(self, keys):
        """bool [N]: whether each env's key (int64 [N]) is new this episode; marks it seen."""
        import torch

        idx = torch.remainder(mix64(keys), self.size)
        flat = self.env_ids * self.size + idx
        new = ~self.seen.view(-1)[flat]
        self.seen.view(-1).index_fill_(0, flat, True)  # (a Python True assigned would wait for the device)
        return new

    def clear(self, done) -> None:
        self.seen.masked_fill_(done[:, None], False)


def ram_key(ram, rows):
    """int64 [N]: the bytes at `rows` of the [bytes, N] RAM tensor packed into one integer per env."""
    import torch

    v = ram.index_select(0, rows).to(torch.int64)
    key = torch.zeros_like(v[0])
    for i in range(v.shape[0]):  # at most 8 bytes (checked by the env)
        key = key | (v[i] << (8 * i))
    return key


def frame_key(latest, cell: int = 8, levels: int = 4):
    """int64 [N]: a coarse hash of each env's latest frame: the mean shade of each `cell`x`cell` block,
    quantised to `levels` levels, hashed. Packed frames are unpacked first."""
    import torch

    x = latest
    if x.shape[-1] == OBS_W // 4:
        x = unpack_shades(x)
    n = x.shape[0]
    blocks = x.reshape(n, OBS_H // cell, cell, OBS_W // cell, cell).to(torch.int32).sum((2, 4))
    q = (blocks * levels) // (3 * cell * cell + 1)  # 0..levels-1
    flat = q.reshape(n, -1).to(torch.int64)
    weights = _frame_weights(flat.shape[1], flat.device)
    return (flat * weights).sum(1)


_WEIGHTS: dict = {}


def _frame_weights(count: int, device):
    import torch

    key = (count, str(device))
    if key not in _WEIGHTS:
        g = np.random.default_rng(12345).integers(1, 2**40, size=count, dtype=np.int64)
        _WEIGHTS[key] = torch.tensor(g, dtype=torch.int64, device=device)
    return _WEIGHTS[key]


SCREEN_HASH_P = (1 << 61) - 1  # a prime: a screen hash is a residue modulo it


class ScreenHash:
    """Exact hashes of `num_envs` screens at once, in a buffer each: a screen's bytes read as int32 words w_j
    (`words` of them) give sum_j w_j r_j mod SCREEN_HASH_P, with fixed pseudo-random weights 1 <= r_j < 2**22.
    No product or partial sum leaves int64, so every device gives the same bits. Two screens that differ in one
    word never share a hash (no product reaches the prime); any two distinct ones do only where their words'
    differences, weighted, sum to a multiple of it. `STILL_HASH_CHUNK` words are multiplied at a time, into
    buffers made once: nothing is allocated per call."""

    def __init__(self, num_envs: int, words: int, device):
        import torch

        self.torch = torch
        g = np.random.default_rng(0x5C4EE7).integers(1, 1 << 22, size=words, dtype=np.int64)
        self.weights = torch.tensor(g, dtype=torch.int64, device=device)
        self._prod = torch.zeros(num_envs, min(words, STILL_HASH_CHUNK), dtype=torch.int64, device=device)
        self._part = torch.zeros(num_envs, dtype=torch.int64, device=device)

    def __call__(self, screens, out):
        """Hash each env's screen (uint8 [N, ...], each env's bytes one run in memory, `4 * words` of them) into
        `out` (int64 [N]); returns `out`."""
        torch, r = self.torch, self.weights
        words = screens.view(screens.shape[0], -1).view(torch.int32)  # (a view: a copy would raise here)
        out.zero_()
        for j in range(0, len(r), STILL_HASH_CHUNK):
            c = min(STILL_HASH_CHUNK, len(r) - j)
            prod = self._prod[:, :c]
            torch.mul(words[:, j:j + c], r[j:j + c], out=prod)  # |w r| < 2**53; c of them sum below 2**61
            out.add_(torch.sum(prod, 1, out=self._part)).remainder_(SCREEN_HASH_P)
        return out


@dataclass
class RewardConfig:
    """Reward = step_cost + alpha * (prev_dist - dist) + goal_bonus * (the goal ended it) + novelty terms +
    milestone * (milestones first held this step) + dead_end * (the task became unwinnable this step) +
    life_lost * (a life was lost this step: the task's lives byte) + still * (the step's screen is one the episode's
    last `still_steps` steps were taken on: 1, the step left the screen as it was)."""

    step_cost: float = -0.01
    alpha: float = 1.0
    goal_bonus: float = 1.0
    tau: float | None = None  # template distance below which the goal counts (None: the template's suggestion)
    k_consecutive: int = 1
    novelty_ram: float = 0.0  # bonus for the first visit of the task's novelty RAM key in an episode
    novelty_pixels: float = 0.0  # bonus for the first visit of a coarse frame hash in an episode
    novelty_size: int = 4096
    milestone: float = 1.0  # bonus for each of the task's milestones the first time it holds in an episode
    dead_end: float = 0.0  # added once when the task's fail_ram holds (the episode then ends, unsuccessful)
    life_lost: float = 0.0  # added at each life lost (the task's `lives` byte; needs a task that names one)
    still: float = 0.0  # added at each step whose screen (all but its last row) is one of the still_steps below
    still_steps: int = 1  # with still: the screens the episode's last this many steps were taken on (1: this step's)
    terminate_on: str = "auto"  # "template", "ram", "none" (only max_steps) or "auto" (template if any, else RAM)
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            check_fields(self, "reward")
        except SettingError as exc:
            raise GoalError(str(exc)) from None
        if self.k_consecutive < 1:
            raise GoalError(f"k_consecutive must be >= 1, got {self.k_consecutive}")
        if self.terminate_on not in ("auto", "template", "ram", "none"):
            raise GoalError(f"terminate_on must be auto, template, ram or none, got {self.terminate_on!r}")
        if self.tau is not None and not 0 <= self.tau <= 1:
            raise GoalError(f"tau must be in [0, 1], got {self.tau}")
        if self.still_steps < 1:
            raise GoalError(f"still_steps must be >= 1, got {self.still_steps}")
        if self.novelty_size < 1:
            raise GoalError(f"novelty_size must be >= 1, got {self.novelty_size}")

    @classmethod
    def from_dict(cls, d: dict | None) -> RewardConfig:
        d = dict(d or {})
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise GoalError(f"unknown reward setting(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**d)
