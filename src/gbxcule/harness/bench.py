"""Benchmarks: throughput of a backend on a ROM, as a table and a JSON artifact.

Each measurement constructs the backend, resets it (then loads `state` when given), runs `warmup` steps
(not timed: kernel compilation and caches), then times `steps` steps, synchronising once at the end (and
every `sync_every` steps if given: each such stretch is then also reported on its own, as a window, since random
play spreads the envs apart and later steps can run slower than the first).
Reported: env-steps/s (SPS), frames/s, emulated instructions/s where the backend counts them (and of those,
the instructions executed one by one: skipped wait-loop rounds, kernels/idle.py, count as emulated but cost almost
nothing), ms per step.
Every artifact records what was measured and on what: backend, ROM sha1, codec, schedule, env count,
device, package versions and git revision.

`measure_split` runs one measurement on several processes at once (one per GPU), the envs split evenly: each
warms up, then all start their timed steps together (a barrier), and the aggregate is every process's env-steps
over the slowest one's seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import platform
import queue
import subprocess
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from gbxcule.backends import load_start_state, make_backend
from gbxcule.core.action_codec import get_codec
from gbxcule.core.cartridge import Rom
from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import write_output
from gbxcule.core.schedule import ActionSchedule
from gbxcule.harness.actions import make_action_gen
from gbxcule.roms.micro.joy_diverge import MODE as JOY_MODE


@dataclass
class BenchResult:
    backend: str
    rom: str
    envs: int
    steps: int
    frames_per_step: int
    seconds: float
    env_steps_per_s: float
    frames_per_s: float
    instructions_per_s: float | None
    ms_per_step: float
    distinct_pcs: int | None
    device_bytes_per_env: int | None = None
    mode_histogram: dict[str, int] | None = None  # JOY_DIVERGE_PERSIST: envs per inner loop (mode & 3)
    block_dim: int | None = None  # warp backends on CUDA: threads per block of the step kernel
    sort_trials: list[dict[str, float]] | None = None  # sort_parts "auto": each trial's ms per step by choice
    windows: list[dict] | None = None  # sync_every > 0: each stretch of sync_every steps (its first step, SPS...)
    executed_per_s: float | None = None  # instructions/s executed one by one: instructions_per_s less skipped rounds


def _offered(backend, method: str, *args):
    """`backend.method(*args)` where the backend offers that method (the warp backends), else None."""
    f = getattr(backend, method, None)
    return None if f is None else f(*args)


def _instruction_counts(backend) -> np.ndarray | None:
    """Per-env wrapping instruction counters, where the backend keeps them."""
    counts = _offered(backend, "field_values", "instructions")
    return None if counts is None else counts.astype(np.uint32)


def _skipped_counts(backend) -> np.ndarray | None:
    """Per-env wrapping counters of the instructions of skipped wait-loop rounds, where the backend keeps them."""
    counts = _offered(backend, "skipped_instructions")
    return None if counts is None else counts.astype(np.uint32)


def _window(first: int, steps: int, seconds: float, envs: int, before, after) -> dict:
    """One timed stretch: its first step (counting the warmup), steps, seconds, SPS and instructions/s."""
    w = {"first_step": first, "steps": steps, "seconds": seconds, "env_steps_per_s": envs * steps / seconds}
    if before is not None and after is not None:
        w["instructions_per_s"] = float((after - before).astype(np.int64).sum()) / seconds
    return w


def _distinct_pcs(backend) -> int | None:
    pcs = _offered(backend, "field_values", "pc")
    return None if pcs is None else int(np.unique(pcs).size)


def _mode_histogram(backend, rom: Rom) -> dict[str, int] | None:
    """For JOY_DIVERGE_PERSIST, how many envs run each of its four inner loops (its mode byte & 3)."""
    modes = _offered(backend, "wram_bytes", JOY_MODE) if rom.info.title == "JOY_DIVERGE" else None
    return None if modes is None else {str(k): int(((modes & 3) == k).sum()) for k in range(4)}


def measure(backend_name: str, rom: Rom, envs: int, steps: int, schedule: ActionSchedule, codec: str,
            actions: str = "seeded_random", seed: int = 0, warmup: int = 2, sync_every: int = 0,
            state=None, ready=None, **backend_kwargs) -> BenchResult:
    """One measurement (module docstring); `ready`: called after the warm-up, before the clock starts."""
    cdc = get_codec(codec)
    backend = make_backend(backend_name, rom, num_envs=envs, codec=cdc, schedule=schedule, **backend_kwargs)
    gen = make_action_gen(actions, cdc, envs, seed)
    try:
        backend.reset(seed)
        if state:
            load_start_state(backend, state)
        for k in range(warmup):
            backend.step(gen(k))
        _offered(backend, "synchronize")
        plan = [gen(warmup + k) for k in range(steps)]
        if ready is not None:
            ready()
        before, skipped_before = _instruction_counts(backend), _skipped_counts(backend)
        seconds, windows, mark, start = 0.0, [], before, 0
        t0 = time.perf_counter()
        for k, acts in enumerate(plan):
            backend.step(acts)
            if sync_every and ((k + 1) % sync_every == 0 or k + 1 == steps):
                _offered(backend, "synchronize")
                dt = time.perf_counter() - t0
                seconds += dt
                counts = _instruction_counts(backend)  # read off the clock
                windows.append(_window(warmup + start, k + 1 - start, dt, envs, mark, counts))
                mark, start = counts, k + 1
                t0 = time.perf_counter()
        if not sync_every:
            _offered(backend, "synchronize")
            seconds = time.perf_counter() - t0
        after, skipped_after = _instruction_counts(backend), _skipped_counts(backend)
        instr = executed = None
        if before is not None and after is not None:
            instr = float((after - before).astype(np.int64).sum()) / seconds  # uint32 difference: wrap-safe
            if skipped_before is not None and skipped_after is not None:
                executed = instr - float((skipped_after - skipped_before).astype(np.int64).sum()) / seconds
        return BenchResult(backend_name, rom.path, envs, steps, schedule.frames_per_step, seconds,
                           envs * steps / seconds, envs * steps * schedule.frames_per_step / seconds, instr,
                           1000 * seconds / steps, _distinct_pcs(backend), _offered(backend, "device_bytes_per_env"),
                           _mode_histogram(backend, rom), getattr(backend, "block_dim", None),
                           _offered(backend, "sort_trials"), windows or None, executed)
    finally:
        backend.close()


def _split_worker(rank: int, args: tuple, kwargs: dict, barrier, out) -> None:
    """One process of `measure_split`: its share of the envs, its own action seed (seed + rank)."""
    try:
        kwargs = {**kwargs, "seed": kwargs.get("seed", 0) + rank, "ready": barrier.wait}
        out.put((rank, asdict(measure(*args, **kwargs)), None))
    except BaseException as exc:  # reported by the parent as one line
        barrier.abort()
        out.put((rank, None, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"))


def inherited_gpus() -> list[str] | None:
    """The GPUs this process's CUDA_VISIBLE_DEVICES names (None where it is unset or empty)."""
    inherited = os.environ.get("CUDA_VISIBLE_DEVICES")
    return [x.strip() for x in inherited.split(",") if x.strip()] if inherited else None


def child_gpus(indices) -> str:
    """CUDA_VISIBLE_DEVICES for a child process given these of this process's GPUs (0-based): entries of the
    inherited CUDA_VISIBLE_DEVICES where one is set (so job runners nest), else the host's GPU numbers."""
    ids = inherited_gpus()
    if ids is not None and any(i >= len(ids) for i in indices):
        raise GbxculeError(f"GPU(s) {list(indices)} asked for, but CUDA_VISIBLE_DEVICES names {len(ids)}")
    return ",".join(ids[i] if ids is not None else str(i) for i in indices)


def measure_split(backend_name: str, rom: Rom, envs: int, processes: int, steps: int, schedule: ActionSchedule,
                  codec: str, timeout_s: float = 3600.0, **kwargs) -> tuple[BenchResult, list[BenchResult]]:
    """`measure` on `processes` processes at once, `envs` split evenly (module docstring): process r sees only
    GPU r (CUDA_VISIBLE_DEVICES; the r-th of the parent's list where it has one). Returns the aggregate (all
    env-steps and frames over the slowest process's seconds; instructions likewise) and each process's result."""
    if envs % processes:
        raise GbxculeError(f"{envs} envs do not split evenly over {processes} processes")
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(processes), ctx.Queue()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = [child_gpus([r]) for r in range(processes)]  # before the loop below changes the variable
    procs = []
    try:
        for r in range(processes):
            os.environ["CUDA_VISIBLE_DEVICES"] = gpus[r]  # a spawned process takes the environment of its start
            p = ctx.Process(target=_split_worker, args=(r, (backend_name, rom, envs // processes, steps, schedule,
                                                              codec), kwargs, barrier, out), daemon=True)
            p.start()
            procs.append(p)
    finally:
        if visible is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
    got: dict[int, dict] = {}
    errors: list[str] = []
    try:
        while len(got) + len(errors) < processes:
            try:
                rank, res, err = out.get(timeout=timeout_s if all(p.is_alive() for p in procs) else 5.0)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if not p.is_alive() and r not in got]
                raise GbxculeError(f"bench process(es) {dead or '?'} of {processes} ended without a result") from None
            if err is None:
                got[rank] = res
            else:
                errors.append(f"process {rank}: {err}")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    if errors:  # a process that failed first breaks the others' barrier: name its own error
        real = [e for e in errors if "BrokenBarrierError" not in e]
        raise GbxculeError("; ".join(real or errors))
    parts = [BenchResult(**got[r]) for r in range(processes)]
    secs = max(r.seconds for r in parts)
    total = sum(r.envs for r in parts) * steps
    instr = None
    if all(r.instructions_per_s is not None for r in parts):
        instr = sum(r.instructions_per_s * r.seconds for r in parts) / secs
    executed = None
    if all(r.executed_per_s is not None for r in parts):
        executed = sum(r.executed_per_s * r.seconds for r in parts) / secs
    agg = BenchResult(backend_name, rom.path, envs, steps, schedule.frames_per_step, secs, total / secs,
                      total * schedule.frames_per_step / secs, instr, 1000 * secs / steps, None,
                      parts[0].device_bytes_per_env, executed_per_s=executed)
    return agg, parts


def environment() -> dict:
    """What the numbers were measured with."""
    versions = {}
    for pkg in ("gbxcule", "warp-lang", "pyboy", "numpy", "torch", "pufferlib"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[pkg] = metadata.version(pkg)
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        sha = None
    return {"host": platform.node(), "machine": platform.machine(), "processor": platform.processor(),
            "python": platform.python_version(), "packages": versions, "git_sha": sha,
            "source_sha1": source_digest(), "emulator_sha1": source_digest(parts=EMULATOR_PARTS),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


# the package's folders that emulation and its timing run through (not the trainers, the tasks or the CLI)
EMULATOR_PARTS = ("core", "kernels", "backends", "harness")


def source_digest(root: Path | None = None, parts: tuple[str, ...] | None = None) -> str:
    """SHA-1 over the package's Python sources (relative paths and contents), or over those under the folders
    `parts` only: names the code that ran even where `git_sha` cannot (a copied working tree whose .git is stale
    or absent)."""
    root = root or Path(__file__).resolve().parents[1]
    h = hashlib.sha1()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if parts is None or rel.parts[0] in parts:
            h.update(rel.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def artifact(results: list[BenchResult], rom: Rom, codec: str, schedule: ActionSchedule, actions: str) -> dict:
    return {
        "rom": {"path": rom.path, "sha1": rom.info.sha1, "title": rom.info.title},
        "codec": get_codec(codec).describe(), "schedule": schedule.describe(), "actions": actions,
        "environment": environment(), "results": [asdict(r) for r in results],
    }


def write_artifact(data: dict, path: str | Path) -> Path:
    return write_output(path, json.dumps(data, indent=2) + "\n")


def table(results: list[BenchResult]) -> str:
    head = f"{'backend':16s} {'envs':>6s} {'SPS':>10s} {'frames/s':>11s} {'instr/s':>10s} {'ms/step':>9s} {'PCs':>5s}"
    rows = [head, "-" * len(head)]
    for r in results:
        instr = f"{r.instructions_per_s / 1e6:8.1f}M" if r.instructions_per_s is not None else f"{'-':>9s}"
        pcs = str(r.distinct_pcs) if r.distinct_pcs is not None else "-"
        rows.append(f"{r.backend:16s} {r.envs:6d} {r.env_steps_per_s:10.1f} {r.frames_per_s:11.0f} {instr:>10s} "
                    f"{r.ms_per_step:9.2f} {pcs:>5s}")
    return "\n".join(rows)


def split_table(results: list[BenchResult], parts: list[list[BenchResult]]) -> str:
    """`table` of the aggregates, each followed by its processes' own rows (sum of their SPS, and the aggregate
    as a share of that: below 100% where the processes ran at different speeds)."""
    rows = table(results).splitlines()
    out = rows[:2]
    for r, ps in zip(results, parts, strict=True):
        out.append(table([r]).splitlines()[2] + f"   {len(ps)} processes")
        for k, p in enumerate(ps):
            out.append(f"{f'  process {k}':16s} {p.envs:6d} {p.env_steps_per_s:10.1f} {p.frames_per_s:11.0f} "
                       f"{'':>10s} {p.ms_per_step:9.2f}")
        total = sum(p.env_steps_per_s for p in ps)
        out.append(f"{'  sum':16s} {'':6s} {total:10.1f}   aggregate / sum {r.env_steps_per_s / total:.1%}")
    return "\n".join(out)


def scaling_plot(results: list[BenchResult], path: str | Path) -> Path:
    """Env-steps/s against env count, one line per backend, log-log, as a PNG (Pillow only)."""
    import math

    from PIL import Image, ImageDraw

    w, h, pad = 720, 440, 60
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    xs = [math.log2(r.envs) for r in results] or [0.0]
    ys = [math.log10(max(r.env_steps_per_s, 1e-3)) for r in results] or [0.0]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = math.floor(min(ys)), math.ceil(max(max(ys), min(ys) + 1))

    def at(x: float, y: float) -> tuple[float, float]:
        return pad + (x - x0) / (x1 - x0) * (w - 2 * pad), h - pad - (y - y0) / (y1 - y0) * (h - 2 * pad)

    d.rectangle([pad, pad, w - pad, h - pad], outline="black")
    for y in range(int(y0), int(y1) + 1):
        px, py = at(x0, y)
        d.line([px, py, w - pad, py], fill=(220, 220, 220))
        d.text((8, py - 6), f"1e{y}", fill="black")
    for x in sorted(set(xs)):
        px, py = at(x, y0)
        d.text((px - 10, h - pad + 6), str(2 ** int(round(x))), fill="black")
    d.text((w // 2 - 40, h - 24), "envs (log2)", fill="black")
    d.text((8, 8), "env-steps/s (log10)", fill="black")
    colours = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14)]
    for i, name in enumerate(dict.fromkeys(r.backend for r in results)):
        pts = [at(math.log2(r.envs), math.log10(max(r.env_steps_per_s, 1e-3)))
               for r in sorted(results, key=lambda r: r.envs) if r.backend == name]
        colour = colours[i % len(colours)]
        if len(pts) > 1:
            d.line(pts, fill=colour, width=2)
        for px, py in pts:
            d.ellipse([px - 3, py - 3, px + 3, py + 3], fill=colour)
        d.text((pad + 10, pad + 10 + 14 * i), name, fill=colour)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    img.save(p)
    return p
