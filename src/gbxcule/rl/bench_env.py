"""Throughput of the RL env (`gbxcule.rl.GameEnv`) beside the raw backend, and its memory after warm-up.

Each measurement runs warm-up steps, then `steps` timed steps with actions generated on the device before the
clock starts (as a sampler would hand them over), synchronising only at the end. Kinds:

- `backend`: `WarpVecBackend` at stage "full_step" (emulation, the observation and the backend's reward).
- `env`: the full env step (obs into the frame ring, template distance, RAM goal, reward, counters, info),
  with no episode ending (terminate_on="none", no step limit).
- `env_reset`: the same with max_steps=1, so every env is restored from a start slot on every step.
- `env_task`: the env as its task defines it (goals, step limit: episodes end and restart as in training), with
  `env_options` (e.g. a state archive, spread clocks); scripts/bench/bench_archive.py compares it with and without.

On CUDA, torch's allocator is read before and after the timed steps: `alloc_delta` (bytes still allocated),
`peak_delta` (the peak above the start) and `reserved_delta` (new memory torch took from the driver).

With `count_work`, the emulated work of the timed steps is counted too (`StepWork`): `instructions_per_step`
(emulated instructions per env-step, skipped wait-loop rounds included, as scripts/bench/bench_games.py's
`instr/step`) and `executed_per_step` (those executed one by one, its `exec/step`). The same on every device,
so two variants' work compares where their timings may not. It adds four small device ops a step to the clock.
"""

from __future__ import annotations

import gc
import time

KINDS = ("backend", "env", "env_reset", "env_task")
# the NVTX range (CUDA only) around measure_env's timed steps: `ncu --nvtx --nvtx-include "gbxcule_timed/"`
NVTX_TIMED = "gbxcule_timed"


def _sync(device: str) -> None:
    import torch
    import warp as wp

    if device.startswith("cuda"):
        wp.synchronize_device(device)
        torch.cuda.synchronize(device)


def _mem(device: str) -> dict | None:
    import torch

    if not device.startswith("cuda"):
        return None
    return {"allocated": torch.cuda.memory_allocated(device), "reserved": torch.cuda.memory_reserved(device)}


class StepWork:
    """The emulated instructions that a warp backend's `step` calls run, counted on the device with no host
    synchronisation: every env's `instructions` field just before and just after each call. Restores, saves and
    clones between steps move that field (it is machine state, restored from a slot) but run nothing, so they
    are left out; a count over the field alone would take a restore for work. The instructions of wait-loop
    rounds skipped at once (kernels/idle.py; counted as emulated) come from the backend's own counter, which
    no restore touches, read at `start` and `stop` (host reads: keep them off the clock).

    `with StepWork(backend) as work:` wraps this backend instance's `step` for the block; `work.start()` after
    the warm-up, `work.stop()` after the timed steps, then `work.instructions` and `work.skipped`."""

    def __init__(self, backend):
        import torch
        import warp as wp

        from gbxcule.core.schema import FIELD_INDEX, NUM_FIELDS

        self.backend = backend
        n = backend.num_envs
        self._instr = wp.to_torch(backend.fields).view(n, NUM_FIELDS)[:, FIELD_INDEX["instructions"]]
        self._before = torch.zeros(n, dtype=torch.int32, device=self._instr.device)
        self._total = torch.zeros((), dtype=torch.int64, device=self._instr.device)
        self._skipped0 = None
        self.instructions = self.skipped = None

    def __enter__(self) -> StepWork:
        step = type(self.backend).step

        def counted(*args, **kwargs):
            self._before.copy_(self._instr)
            step(self.backend, *args, **kwargs)
            self._total.add_((self._instr - self._before).sum(dtype=self._total.dtype))  # int32 wraps: a step's
            # count per env is far below 2**31, so the difference is right across a wrap

        self.backend.step = counted
        return self

    def __exit__(self, *exc) -> None:
        del self.backend.step  # the class's method again

    def start(self) -> None:
        self._total.zero_()
        self._skipped0 = self.backend.skipped_instructions()

    def stop(self) -> None:
        import numpy as np

        skipped = (self.backend.skipped_instructions() - self._skipped0).astype(np.uint32)  # wrap-safe
        self.instructions, self.skipped = int(self._total.item()), int(skipped.astype(np.int64).sum())


def measure_env(kind: str, n: int, steps: int, warmup: int, rom, codec, schedule, device: str = "cpu", task=None,
                stack_k: int = 1, obs: str = "pixels", info_mode: str = "stats", seed: int = 0,
                env_options: dict | None = None, count_work: bool = False) -> dict:
    """One measurement (see the module docstring): env-steps/s and, on CUDA, the allocation deltas. `rom`: a
    `Rom`; `codec`/`schedule`: the task's (the backend runs under the same); `env_options`: more GameEnv
    arguments for `env_task`; `count_work`: also the emulated instructions per env-step (`StepWork`)."""
    from contextlib import nullcontext

    import torch

    from gbxcule.rl.env import GameEnv
    from gbxcule.rl.starts import device_names

    tdev, wdev = device_names(device)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    env = backend = None
    try:
        if kind == "backend":
            from gbxcule.backends.warp_vec import WarpVecBackend

            backend = WarpVecBackend(rom, n, codec, schedule, device=wdev, stage="full_step")
            backend.reset()
            num_actions = backend.codec.num_actions
            acts = torch.randint(0, num_actions, (warmup + steps, n), generator=gen, dtype=torch.int32).to(tdev)

            def step(i):
                backend.step(acts[i])
        elif kind in ("env", "env_reset", "env_task"):
            reward = {"terminate_on": "none"} if kind == "env" else None
            limit = {"env": 10**9, "env_reset": 1, "env_task": None}[kind]
            env = GameEnv(rom, n, tdev, task=task, stack_k=stack_k, obs=obs, info_mode=info_mode, seed=seed,
                          codec=codec.name, frames_per_step=schedule.frames_per_step,
                          release_after_frames=schedule.release_after_frames, max_steps=limit, reward=reward,
                          **((env_options or {}) if kind == "env_task" else {}))
            env.reset()
            acts = torch.randint(0, env.num_actions, (warmup + steps, n), generator=gen).to(tdev)

            def step(i):
                env.step(acts[i])
        else:
            raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
        with StepWork(backend if env is None else env.backend) if count_work else nullcontext() as work:
            for i in range(warmup):
                step(i)
            _sync(tdev)
            if work is not None:
                work.start()
            if tdev.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats(tdev)
            before = _mem(tdev)
            # an NVTX range around the timed steps, so a profiler can take its launches only (gpu.sh ncu_cost)
            timed = torch.cuda.nvtx.range(NVTX_TIMED) if tdev.startswith("cuda") else nullcontext()
            t0 = time.perf_counter()
            with timed:
                for i in range(warmup, warmup + steps):
                    step(i)
                _sync(tdev)
            seconds = time.perf_counter() - t0
            after = _mem(tdev)
            if work is not None:
                work.stop()
        out = {"kind": kind, "envs": n, "stack_k": stack_k if kind != "backend" else None,
               "obs": obs if kind != "backend" else None, "steps": steps, "seconds": seconds,
               "env_steps_per_s": n * steps / seconds if seconds > 0 else 0.0,
               "ms_per_step": 1000 * seconds / steps, "alloc_delta": None, "peak_delta": None,
               "reserved_delta": None}
        if before is not None and after is not None:
            out.update(alloc_delta=after["allocated"] - before["allocated"],
                       peak_delta=torch.cuda.max_memory_allocated(tdev) - before["allocated"],
                       reserved_delta=after["reserved"] - before["reserved"])
        if work is not None:
            out.update(instructions_per_step=work.instructions / (n * steps),
                       executed_per_step=(work.instructions - work.skipped) / (n * steps))
        if env is not None and kind in ("env_reset", "env_task"):
            s = env.episode_stats()
            out["resets_per_step"] = s["episodes"] / max(steps + warmup, 1)
            if "archive/cells" in s:
                out["archive_cells"] = s["archive/cells"]
        return out
    finally:
        if env is not None:
            env.close()
        env = backend = None
        gc.collect()
        if tdev.startswith("cuda"):
            torch.cuda.empty_cache()


def table(results: list[dict]) -> str:
    head = (f"{'kind':10s} {'envs':>7s} {'k':>3s} {'SPS':>12s} {'ms/step':>9s} {'vs backend':>10s} "
            f"{'alloc d':>9s} {'reserved d':>10s}")
    rows = [head, "-" * len(head)]
    base = {r["envs"]: r["env_steps_per_s"] for r in results if r["kind"] == "backend"}
    for r in results:
        rel = (f"{r['env_steps_per_s'] / base[r['envs']]:9.2f}x" if r["kind"] != "backend" and base.get(r["envs"])
               else f"{'-':>10s}")
        mem = lambda v: f"{v:9d}" if v is not None else f"{'-':>9s}"  # noqa: E731
        k = str(r["stack_k"]) if r["stack_k"] is not None else "-"
        rows.append(f"{r['kind']:10s} {r['envs']:7d} {k:>3s} {r['env_steps_per_s']:12.1f} {r['ms_per_step']:9.2f} "
                    f"{rel} {mem(r['alloc_delta'])} {mem(r['reserved_delta']):>10s}")
    return "\n".join(rows)
