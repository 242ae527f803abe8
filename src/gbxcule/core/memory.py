"""The memory model: the bytes N envs will take, from the state schema, checked against the real limit before
anything is allocated (pure Python; the callers pass in what they measured).

- `emulator_bytes` is one emulator env of `backends/warp_vec.py` (fields, RAM layout, serial ring, actions,
  stage outputs, observation, frame buffer, sort buffers); `env_bytes` what `rl/env.py GameEnv` adds per env
  (frame ring, final observation, counters, novelty tables); `slot_bytes` its start-slot store (fixed).
- `Need` adds them up per env and fixed, on the host and on the device; a trainer adds its rollout or replay
  storage and its learner's working memory (`rl/models.py activation_bytes`). On the CPU device, device bytes
  are host bytes (`Need.on`).
- `host_available` is the smallest of MemAvailable and what the process's cgroup may still take (cgroup v2
  `memory.max` less usage, v1 `memory.limit_in_bytes` less usage, over the cgroup and its parents);
  free device memory comes from the caller (cudaMemGetInfo).
- `check` raises one line with the numbers and the largest env count that fits; `oom_summary` shortens an
  allocator's out-of-memory message for the line that reports one after all.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from gbxcule.core.errors import GbxculeError
from gbxcule.core.schema import NUM_FIELDS, SERIAL_CAPTURE

FRAME_BYTES = 144 * 160  # the drawn screen, one byte a pixel
OBS_ROWS = 72
OBS_WIDTH = {"pixels": 80, "packed": 20}  # bytes of an observation row
PYBOY_BYTES_PER_ENV = 2 << 20  # a PyBoy instance with its buffers (~1 MB on PyBoy 2.8), doubled
ENV_COUNTER_BYTES = 128  # GameEnv's per-env counters and flags (steps, returns, slots, distances, ...)
MODEL_ALLOWANCE = 1 << 30  # a trainer's model, optimizer state and CUDA context on a GPU
# a learner's bytes on a GPU over its tensors' own (rl/models.py activation_bytes): cuDNN's layout copies and
# workspace; float32 passes of the nature model at 131,072 and 16,384 samples took 1.20x and 1.24x on an H200
CUDA_WORKING_FACTOR = 1.25
NO_LIMIT = 1 << 60  # cgroup "unlimited" values are near 2**63
STILL_HASH_CHUNK = 256  # the screen words the `still` reward's hash multiplies at once (rl/goals.py ScreenHash)


class MemoryLimitError(GbxculeError):
    """The envs asked for do not fit in the memory available."""


def emulator_bytes(ram_bytes: int, obs: str | None = "pixels", render: bool = True, rewards: bool = True,
                   sort: bool = False) -> int:
    """Device bytes of one emulator env: fields, RAM (`ram_layout(...).total`), serial ring, action and
    wait-counter words, reward, observation (`obs`: pixels, packed or None), frame buffer (`render`) and
    the sort's key, value and previous-order words."""
    return (4 * NUM_FIELDS + ram_bytes + SERIAL_CAPTURE + 4 + 4 + (4 if rewards else 0)
            + (OBS_ROWS * OBS_WIDTH[obs] if obs else 0) + (FRAME_BYTES if render else 0) + (20 if sort else 0))


def env_bytes(obs: str = "pixels", stack_k: int = 1, keep_final_obs: bool = False, novelty_tables: int = 0,
              novelty_size: int = 0, still: int = 0) -> int:
    """Device bytes one GameEnv env adds to its emulator: the frame ring (2K frames when K > 1; the
    emulator's observation is the ring when K = 1), the finished episodes' last observation, counters, the
    novelty tables' per-env bitmaps, and with the `still` reward the hashes of the screens its last `still` steps
    were taken on, their compare masks and the hash's working words."""
    frame = OBS_ROWS * OBS_WIDTH[obs]
    return ((2 * stack_k * frame if stack_k > 1 else 0) + (stack_k * frame if keep_final_obs else 0)
            + ENV_COUNTER_BYTES + novelty_tables * novelty_size + still_bytes(still))


def still_bytes(still: int) -> int:
    """Device bytes per env of the `still` reward over `still` steps (0: off): an int64 hash per screen, two
    compare masks of a byte each, this step's hash and the hash's partial sums and working words."""
    return 10 * still + 8 * (2 + STILL_HASH_CHUNK) if still else 0


def slot_bytes(num_slots: int, ram_bytes: int, obs: str = "pixels") -> int:
    """Device bytes of a start-slot store: each slot's fields and RAM words, first observation and screen."""
    return num_slots * (4 * NUM_FIELDS + 4 * ((ram_bytes + 3) // 4) + OBS_ROWS * OBS_WIDTH[obs] + FRAME_BYTES + 16)


@dataclass(frozen=True)
class Need:
    """Bytes a command will allocate: `*_per_env` grow with the env count, `*_fixed` do not; `parts` names
    the pieces for the message: (name, "host" or "device", bytes per env, fixed bytes)."""

    device_per_env: int = 0
    device_fixed: int = 0
    host_per_env: int = 0
    host_fixed: int = 0
    parts: tuple[tuple[str, str, int, int], ...] = field(default=(), compare=False)

    @classmethod
    def device(cls, name: str, per_env: int, fixed: int = 0) -> Need:
        return cls(device_per_env=per_env, device_fixed=fixed, parts=((name, "device", per_env, fixed),))

    @classmethod
    def host(cls, name: str, per_env: int, fixed: int = 0) -> Need:
        return cls(host_per_env=per_env, host_fixed=fixed, parts=((name, "host", per_env, fixed),))

    def __add__(self, other: Need) -> Need:
        return Need(self.device_per_env + other.device_per_env, self.device_fixed + other.device_fixed,
                    self.host_per_env + other.host_per_env, self.host_fixed + other.host_fixed,
                    self.parts + other.parts)

    def on(self, device: str) -> Need:
        """The need on `device`: on the CPU device every byte is host memory."""
        if device.startswith("cuda"):
            return self
        return Need(0, 0, self.host_per_env + self.device_per_env, self.host_fixed + self.device_fixed,
                    tuple((name, "host", b, f) for name, _, b, f in self.parts))


@dataclass(frozen=True)
class Available:
    """Bytes that may still be allocated, and what limits them (for the message)."""

    bytes: int
    source: str


def gib(n: float) -> str:
    """Bytes as GiB with two decimals, or MiB under 1 GiB."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def meminfo_available(path: str | Path = "/proc/meminfo") -> int | None:
    """MemAvailable in bytes, or None if the file does not say."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _stat(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (OSError, ValueError):
        pass
    return 0


def cgroup_available(proc_cgroup: str | Path = "/proc/self/cgroup",
                     root: str | Path = "/sys/fs/cgroup") -> Available | None:
    """What this process's cgroup may still allocate: over the cgroup and each parent up to `root`, the
    smallest of limit less usage (reclaimable inactive file pages not counted as used). cgroup v2:
    `memory.max`, `memory.current`; v1 (the `memory` controller under `root/memory`): `memory.limit_in_bytes`,
    `memory.usage_in_bytes`. None when no limit is set."""
    root = Path(root)
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    places = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":
            places.append((root, rel, "memory.max", "memory.current", "inactive_file"))
        elif "memory" in controllers.split(","):
            places.append((root / "memory", rel, "memory.limit_in_bytes", "memory.usage_in_bytes",
                           "total_inactive_file"))
    best: Available | None = None
    for base, rel, limit_name, usage_name, inactive in places:
        d = base / rel.lstrip("/")
        if not d.is_dir():  # a cgroup namespace: the process's cgroup is the root of the view
            d = base
        while True:
            limit = _read_int(d / limit_name)
            if limit is not None and limit < NO_LIMIT:
                used = max(0, (_read_int(d / usage_name) or 0) - _stat(d / "memory.stat", inactive))
                left = max(0, limit - used)
                if best is None or left < best.bytes:
                    best = Available(left, f"cgroup limit {gib(limit)} in {d / limit_name}, {gib(used)} used")
            if d == base or base not in d.parents:
                break
            d = d.parent
    return best


def host_available(meminfo: str | Path = "/proc/meminfo", proc_cgroup: str | Path = "/proc/self/cgroup",
                   cgroup_root: str | Path = "/sys/fs/cgroup") -> Available | None:
    """Host bytes that may still be allocated: the smaller of MemAvailable and the cgroup's room."""
    mem = meminfo_available(meminfo)
    cg = cgroup_available(proc_cgroup, cgroup_root)
    if cg is not None and (mem is None or cg.bytes < mem):
        return cg
    return None if mem is None else Available(mem, "MemAvailable")


def most_envs(per_env: int, fixed: int, available: int) -> int:
    return max(0, (available - fixed) // per_env) if per_env > 0 else 0


def check(envs: int, need: Need, host: Available | None, device: Available | None = None,
          what: str = "envs") -> None:
    """Raise MemoryLimitError (one line: the bytes needed, of what, the bytes available and from where, and
    the largest env count that fits) unless `envs` envs of `need` fit on the device and the host. An unknown
    limit (None) is not checked."""
    most = None
    lines = []
    fixed_too_big = False
    for where, per, fixed, avail in (("device", need.device_per_env, need.device_fixed, device),
                                     ("host", need.host_per_env, need.host_fixed, host)):
        total = fixed + envs * per
        if avail is None or total <= avail.bytes or total == 0:
            continue
        fixed_too_big = fixed_too_big or fixed > avail.bytes
        fit = most_envs(per, fixed, avail.bytes)
        most = fit if most is None else min(most, fit)
        pieces = [f"{name} {gib(envs * b + f)}" for name, w, b, f in need.parts
                  if w == where and 100 * (envs * b + f) >= total]
        named = sum(f for _, w, _, f in need.parts if w == where)
        if 100 * (fixed - named) >= total:
            pieces.append(f"fixed {gib(fixed - named)}")
        detail = f" ({', '.join(pieces)})" if pieces else ""
        lines.append(f"{gib(total)} of {where} memory{detail} but {gib(avail.bytes)} is available ({avail.source})")
    if lines:
        tail = (f"at most {most:,} {what} fit" if not fixed_too_big
                else "what does not grow with the env count does not fit alone")
        raise MemoryLimitError(f"{envs:,} {what} need " + "; and ".join(lines) + "; " + tail)



def oom_summary(text: str) -> str:
    """An allocator's out-of-memory message in a few words ("tried to allocate 2.81 GiB; 1.05 GiB free of
    139.72 GiB"), or its first sentence."""
    asked = re.search(r"[Tt]ried to allocate ([\d.]+ ?[KMGT]i?B|\d+ bytes)", text)
    free = re.search(r"total capacity of ([\d.]+ ?[KMGT]i?B) of which ([\d.]+ ?[KMGT]i?B) is free", text)
    if asked is None:
        return (text.strip().splitlines() or ["out of memory"])[0].split(". ")[0]
    size = gib(int(asked[1].split()[0])) if asked[1].endswith("bytes") else asked[1]
    return f"tried to allocate {size}" + (f"; {free[2]} free of {free[1]}" if free else "")
