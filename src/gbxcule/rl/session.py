"""The training session every algorithm's loop runs inside: the imperative shell around the math.

    with Session(cfg, checkpoint, echo, device_bytes=...) as s:      # run folder, seeds, memory check, env
        model, optimizer = ..., ...
        extra = s.start(model, optimizer, state=lambda: {...})       # resume (or reset the env)
        while s.running:
            ... collect and learn, timing phases with s.timer ...
            s.end_update(env_steps, metrics)                         # log, eval, checkpoint, stop rules
    return s.summary

`end_update` reads the device once: the algorithm's metrics (device scalars or numbers, checked to be finite: the NaN
guard), the env's episode totals, percentiles of returns, lengths and goal distances. It logs one line to metrics.jsonl
and TensorBoard, updates the progress bar, runs the periodic greedy eval on its own small env (training envs untouched),
checkpoints every `run.checkpoint_every` updates or `run.checkpoint_every_s` seconds or when asked (a `checkpoint.now`
file in the run's folder, removed once written), and applies the stop rules (total steps, `run.time_limit_s`,
`run.stop_after_updates`, `run.stop_at_success`, SIGINT/SIGTERM: stop at the update's end with a checkpoint; a second
Ctrl-C quits at once).

On several processes (torchrun; `rl/dist.py`) the session is the distributed shell, and a trainer needs no change
to run on it: each process steps its own envs (seed + rank) on its own device, `apply_gradients` averages the
gradients over the processes (one flat all-reduce, or DistributedDataParallel where the trainer forwards through
`wrap(model)` and `run.grad_sync = "ddp"`), `start` gives every process rank 0's initial weights, and `end_update`
reduces the metrics so that rank 0, which alone writes the run folder, evaluates and prints, logs global figures:
env-steps and SPS of all processes, episode totals and rates summed, float metrics averaged, integer ones (counts,
histograms) summed, return/length/distance percentiles over every env. Stop rules and checkpoints are decided on
rank 0 and broadcast once per update; a checkpoint holds every process's env state, RNG and the algorithm's state
(gathered on rank 0), and resumes only on as many processes. A decision a trainer takes from its own data (an early
stop on approx_kl) must go through `all_mean`, so that every process takes it.
"""

from __future__ import annotations

import math
import os
import random
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gbxcule.core.errors import GbxculeError
from gbxcule.core.fmt import num, pct
from gbxcule.core.memory import CUDA_WORKING_FACTOR, MODEL_ALLOWANCE, MemoryLimitError, Need, gib, oom_summary
from gbxcule.core.outputs import write_output
from gbxcule.rl import explore
from gbxcule.rl.config import eval_device_name, make_env, obs_bytes, portable, resolve_device, to_dict
from gbxcule.rl.dist import RankFailure, World, quiet
from gbxcule.rl.evaluate import (
    BackgroundEval,
    acting_precision,
    env_input_files,
    evaluate_model,
    make_eval_env,
    model_for,
    periodic_eval_seed,
)
from gbxcule.rl.rundir import ARCHIVE_NAME, BEST_NAME, POLICY_NAME, SAVE_NOW_NAME, CheckpointError, Run, check_run_dir

ENV_STATE_AUTO_LIMIT = 512 * 2**20
QUANTILES = (0.1, 0.5, 0.9)


def cuda_algorithms(benchmark: bool, deterministic: bool) -> None:
    """How torch picks its CUDA algorithms for a run (`run.cudnn_benchmark`, `run.deterministic`). Deterministic:
    cuDNN's deterministic convolutions, and torch's deterministic algorithms for every op that has one, the others
    warning with their name instead of silently differing between runs; cuBLAS gets the fixed workspace its own
    determinism needs (read when its first handle is made, so set before the model's first step)."""
    torch.backends.cudnn.benchmark = benchmark
    torch.backends.cudnn.deterministic = deterministic
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)


def episode_quantiles(env, world: World | None = None) -> torch.Tensor:
    """p10/p50/p90 of the latest finished episode's return and length over the envs that finished one, and of
    the current goal distance over all envs (NaN where there is none): one [9] tensor, computed on the device.
    With a `world` of several processes: over every process's envs (one all-gather)."""
    scored = env.scorer is not None
    if world is None or world.size == 1:
        return quantiles_of(env.final_return, env.final_length, env.episodes > 0, env.distance if scored else None)
    dist = env.distance.float() if scored else torch.zeros_like(env.final_return, dtype=torch.float32)
    mine = torch.stack([env.final_return.float(), env.final_length.float(), (env.episodes > 0).float(), dist])
    every = world.all_gather(mine).transpose(0, 1).reshape(4, -1)  # [4, size * num_envs], rank-major envs
    return quantiles_of(every[0], every[1], every[2] > 0, every[3] if scored else None)


def quantiles_of(final_return: torch.Tensor, final_length: torch.Tensor, have: torch.Tensor,
                 distance: torch.Tensor | None) -> torch.Tensor:
    """`episode_quantiles` over per-env tensors (`have`: the envs that finished an episode)."""
    q = torch.tensor(QUANTILES, dtype=torch.float32, device=final_return.device)
    count = have.sum()

    def nearest_rank(values: torch.Tensor, valid: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        # invalid entries sort last; rank q*(k-1) among the k valid ones (no host sync, no boolean indexing)
        v = torch.where(valid, values.float(), torch.full_like(values, float("inf"), dtype=torch.float32))
        s = torch.sort(v).values
        idx = (q * (k - 1).clamp(min=0).float()).round().long()
        out = s.gather(0, idx)
        return torch.where(k > 0, out, torch.full_like(out, float("nan")))

    ret = nearest_rank(final_return, have, count)
    length = nearest_rank(final_length, have, count)
    if distance is not None:
        dist = nearest_rank(distance, torch.ones_like(have), torch.full_like(count, distance.numel()))
    else:
        dist = torch.full((3,), float("nan"), device=final_return.device)
    return torch.cat([ret, length, dist])


class Stop(Exception):
    """Raised inside a session to end it early with a reason (stops the loop like a stop rule)."""


STOPS = ("done", "interrupted", "stop_at_success", "stop_after_updates", "time_limit")


class Session:
    """One training run: see the module docstring. Attributes the loop uses: env, device, cuda, timer, update,
    global_step, running, num_updates, update_steps (env-steps of one update over all processes), cfg, world."""

    def __init__(self, cfg, checkpoint: dict | None = None, echo: Callable[[str], None] | None = None,
                 device_bytes: Callable[[int], int] | int = 0, host_bytes: int = 0, env_kwargs: dict | None = None,
                 steps_per_update: int = 1, checkpoint_bytes: int = 0, working_bytes: tuple[int, int] = (0, 0)):
        self.t_process = process_age_s()
        self.t_init = time.perf_counter()
        self.cfg, self.checkpoint = cfg, checkpoint
        # Ctrl-C and SIGTERM are taken from the first moment (a process started in the background inherits SIGINT
        # ignored: without this a signal during the set-up would be lost): one during the set-up stops the run at
        # the end of its first update, with a checkpoint
        self._stop_signal: str | None = None
        self._signals: dict = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._signals[sig] = signal.signal(sig, self._on_signal)
        try:
            device = resolve_device(cfg.run.device)
            self.world = World.join(device, cfg.run.dist_timeout_s)
        except BaseException:
            self._restore_signals()
            raise
        self.lead = self.world.lead
        self.echo = (echo or (lambda s: None)) if self.lead else (lambda s: None)
        self.run: Run | None = None
        self.env = self._eval_env = None
        self._background: BackgroundEval | None = None
        self.steps_per_update = steps_per_update  # this process's env-steps per update
        self.update_steps = steps_per_update * self.world.size
        self.num_updates = max(1, cfg.total_steps // self.update_steps)
        self.seed = cfg.run.seed + self.world.rank  # each process its own env and sampling streams
        try:
            self.world.agree(lambda: self._open(device, device_bytes, host_bytes, env_kwargs, checkpoint_bytes,
                                                working_bytes))
        except BaseException as exc:
            self._restore_signals()
            self._close_resources()
            self.world.close(clean=not isinstance(exc, RankFailure))
            raise
        self.timer = Timer(self.cuda, names=())
        self.update = self.global_step = 0
        self.wall_before = 0.0
        self.stopped = "done"
        self.last: dict = {}
        self.read: dict = {}  # the last update's metrics as read to the host (every process; see end_update)
        self.summary: dict = {}
        self._model = self._optimizer = self._state = None
        self._ddp: set[int] = set()
        self.grad_steps = 0  # optimizer steps taken over the whole run (a run that takes none has not trained)
        self._success = SuccessWindow(cfg.run.success_window)
        self.eval_every = eval_interval(cfg, self.update_steps)
        self._next_eval_step = self.eval_every
        self._policy_mark = 0.0  # run.policy_every_s: the last mark of training seconds whose weights were kept
        self._best_greedy: float | None = None  # the best periodic greedy success so far (best_policy.pt)
        self._best_step: int | None = None  # the env-steps of its weights
        self._last_eval_t = 0.0
        self._last_ckpt_t = 0.0
        self._progress = None
        self._t_update = 0.0
        self._saved_update = 0
        self._ended = 0  # the last update end_update finished
        if self.world.size > 1:
            self.echo(f"{self.world.size} processes ({self.world.backend}, gradients by {cfg.run.grad_sync}): "
                      f"{cfg.env.num_envs:,} envs each, {cfg.env.num_envs * self.world.size:,} in all; rank 0 on "
                      f"{self.device} writes {cfg.run.run_dir}")

    def _open(self, device: str, device_bytes, host_bytes: int, env_kwargs: dict | None, checkpoint_bytes: int,
              working_bytes: tuple[int, int]) -> None:
        """The checks and resources of one process (every process runs it; `World.agree` makes a failure on one
        a failure on all): the device, resume fits the world, memory, the run folder (rank 0), seeds, the env.
        `working_bytes`: (per env, fixed) bytes of the learner's peak working memory (its largest forward and
        backward, or acting for every env)."""
        cfg, ck = self.cfg, self.checkpoint
        self.device = self.world.place(device)
        self.cuda = self.device.startswith("cuda")
        if self.cuda and ":" in self.device:
            torch.cuda.set_device(self.device)
        if self.cuda:
            cuda_algorithms(self.cfg.run.cudnn_benchmark, self.cfg.run.deterministic)
        self.eval_device = eval_device_name(cfg.run.eval_device, self.device, self.world.local_size)
        if ck is not None and ck.get("world_size", 1) != self.world.size:
            n = ck.get("world_size", 1)
            raise CheckpointError(f"--resume: the run trained on {n} process(es), this start has {self.world.size}: "
                                  f"resume it on {n} (torchrun --nproc-per-node {n}, or gbxcule train --gpus {n}); "
                                  f"its checkpoint holds each process's envs")
        need = device_bytes(obs_bytes(cfg.env)) if callable(device_bytes) else int(device_bytes)
        self.storage_bytes = need
        per, fixed = (math.ceil(b * (CUDA_WORKING_FACTOR if self.cuda else 1)) for b in working_bytes)
        self.working_bytes = per * cfg.env.num_envs + fixed
        # the trainer's storage (taken to grow with the env count), model and learner's working memory, checked
        # with the env's own need before anything is allocated (core/memory.py); the run folder is touched only
        # once the env is built
        reserve = (Need.device("trainer storage", -(-need // cfg.env.num_envs), MODEL_ALLOWANCE if self.cuda else 0)
                   + Need.device("learner working memory", per, fixed)
                   + Need.host("trainer host buffers", 0, host_bytes))
        if self.lead:
            check_run_dir(cfg.run.run_dir, resume=ck is not None, inputs=env_input_files(to_dict(cfg.env)))
        seed_everything(self.seed)
        self.env = make_env(cfg.env, self.device, self.seed, keep_final_obs=True, info_mode="none",
                            memory_reserve=reserve, **(env_kwargs or {}))
        if self.eval_device != self.device:
            self.echo(f"evals on {self.eval_device} (run.eval_device), training on {self.device}")
        if self.env.archive is not None:
            self.echo(f"state archive: {self.env.archive.m:,} cells of {self.env.cell_mode} keys, "
                      f"{self.env.archive_bytes / 2**20:,.0f} MiB on {self.device}")
        self.emu_state = {"always": True, "never": False}.get(
            cfg.run.checkpoint_env_state, self.env.emulator_bytes() * self.world.size <= ENV_STATE_AUTO_LIMIT)
        # a checkpoint's copies on the host (its tensors, then their serialised bytes; on rank 0 every process's
        # env state): checked now, not found out by the kernel's OOM killer at the first save
        per_process = (self.env.emulator_bytes() if self.emu_state else 0) + self.env.archive_state_bytes() \
            + checkpoint_bytes
        check_checkpoint_memory(2 * per_process * (self.world.size if self.lead else 1), self.device)
        portable(cfg.env, self.env.rom.info.sha1)  # the run folder says where its files are, from anywhere
        if self.lead:
            self.run = Run(cfg.run.run_dir, to_dict(cfg), resume=ck is not None, tensorboard=cfg.run.tensorboard)
            if self.run.moved is not None:
                self.echo(f"{cfg.run.run_dir} held files of a run with no checkpoint: moved them to {self.run.moved}")

    # --- context: signals, failures, closing -------------------------------------------------------------
    def __enter__(self) -> Session:
        return self

    def _on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        world = getattr(self, "world", None)  # a signal may come before the process group is joined
        several = world is not None and world.size > 1  # the launcher passes a Ctrl-C on: no reason to quit at once
        if self._stop_signal is not None and not several:  # a second Ctrl-C or SIGTERM: quit now
            self._restore_signals()
            raise KeyboardInterrupt
        first = self._stop_signal is None
        self._stop_signal = name
        if (world is None or world.lead) and first:
            again = "" if several else " (Ctrl-C again to quit at once)"
            sys.stderr.write(f"\ngbxcule train: {name}: stopping at the end of this update with a checkpoint{again}\n")

    def _restore_signals(self) -> None:
        for sig, handler in self._signals.items():
            signal.signal(sig, handler)
        self._signals.clear()

    def _kept(self) -> str:
        return (f"the last good checkpoint (update {self._saved_update}) is kept" if self._saved_update
                else "no checkpoint was written yet")

    def __exit__(self, kind, exc, tb) -> bool:
        self._restore_signals()
        if self._progress is not None:
            self._progress.close()
        try:
            if isinstance(exc, NonFiniteError):
                if self.lead:
                    self.run.write_json("nonfinite.json", {"update": self.update, "config": to_dict(self.cfg),
                                                           "last_metrics": self.last, "batch_stats": exc.args[0]})
                err = GbxculeError(f"training stopped at update {self.update + 1}: a loss or gradient became "
                                   f"NaN/inf (snapshot in {Path(self.cfg.run.run_dir) / 'nonfinite.json'}; "
                                   f"{self._kept()})")
                raise (err if self.lead else quiet(err)) from None
            if isinstance(exc, RankFailure) and not getattr(exc, "quiet", False):
                err = RankFailure(f"training stopped at update {self._ended + 1}: {exc}; {self._kept()} in "
                                  f"{self.cfg.run.run_dir}")
                raise (err if self.lead else quiet(err)) from None
            if isinstance(exc, torch.OutOfMemoryError):  # the check at start-up passed, yet memory ran out
                where = "the GPU" if self.cuda else "the host"
                raise MemoryLimitError(
                    f"training stopped at update {self.update + 1}: {self.device} ran out of memory "
                    f"({oom_summary(str(exc))}): {where} is shared with other processes or too small for this run "
                    f"(learner working memory planned at {gib(self.working_bytes)}); {memory_hint(self.cfg)}; "
                    f"{self._kept()} in {self.cfg.run.run_dir}") from None
        finally:
            self._close_resources()
            self.world.close(clean=not isinstance(exc, RankFailure))
        return False

    def _close_resources(self) -> None:
        if self.run is not None:
            self.run.close()
        if self._background is not None:  # an eval beside training still in flight: its launches run out first
            self._background.abandon()
            self.env.after_step = None
        if self._eval_env is not None:
            from gbxcule.backends import on_device

            with on_device(self.eval_device):
                self._eval_env.close()
        if self.env is not None:
            self.env.close()

    # --- start and resume ----------------------------------------------------------------------------------
    def start(self, model, optimizer, state: Callable[[], dict] | None = None, describe: str = "") -> dict | None:
        """Attach the model and optimizer (and `state`, the algorithm's own checkpointed state); on resume load
        everything (each process its own env, RNG and state) and return the algorithm's state, else reset the
        env and return None. Every process then holds rank 0's weights."""
        self._model, self._optimizer, self._state = model, optimizer, state
        extra = None
        if self.checkpoint is not None:
            extra = self.world.agree(lambda: self._resume(model, optimizer))
        else:
            self.env.reset(seed=self.seed)
        self.world.broadcast_module(model)
        if describe:
            self.echo(f"{describe}; learner working memory {gib(self.working_bytes)}")
        if not self.cuda:
            self.echo(f"{self.num_updates - self.update} updates of {self.update_steps:,} env-steps planned on "
                      f"the CPU device (an estimate of the time follows the first update)")
        self._progress = Progress(self.num_updates, self.cfg.run.progress, self.update) if self.lead else None
        now = time.perf_counter()
        self.startup_s = self.t_process + now - self.t_init
        self.t_start = self._last_ckpt_t = self._last_eval_t = self._t_update = now
        return extra

    def plan_line(self, model) -> str:
        """The start-up line of a rollout learner (`start`'s describe): its storage, updates and model size."""
        return (f"rollout storage {self.storage_bytes / 2**20:,.0f} MiB on {self.device}; {self.num_updates} updates "
                f"of {self.update_steps:,} env-steps; model {model.describe()['params']:,} parameters")

    def _resume(self, model, optimizer) -> dict:
        ck = self.checkpoint
        mine = ck if self.world.rank == 0 else ck["ranks"][self.world.rank - 1]
        if ck.get("model_desc") != model.describe():
            raise CheckpointError(f"checkpoint model {ck.get('model_desc')} does not fit {model.describe()}")
        model.load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizer"])
        self.update, self.global_step = ck["update"], ck["global_step"]
        self._saved_update = self._ended = self.update
        self.wall_before = ck.get("wall_s", 0.0)
        self.env.load_state_dict(mine["env"])
        set_rng_state(mine["rng"])
        extra = mine.get("extra", {"sampler": mine["sampler"]} if "sampler" in mine else {})
        loop = ck.get("loop", {})
        self._next_eval_step = loop.get("next_eval_step", self._next_eval_step)
        self._best_greedy, self._best_step = loop.get("best_greedy"), loop.get("best_step")
        self.grad_steps = loop.get("grad_steps", self.update)  # older checkpoints: at least one per update
        self._policy_mark = loop.get("policy_mark", 0.0)
        self._success.rows.extend(tuple(r) for r in loop.get("success_window", ()))
        self.last = ck.get("metrics", {})
        if self.lead:
            self.run.truncate_log(self.update, warn=self.echo)
            if self.grad_steps and self.run.policy_ahead(ck["global_step"]):  # a kill between a save's two writes
                self.run.write_torch(POLICY_NAME, self._policy_state(ck))
        return extra

    @property
    def running(self) -> bool:
        return self.update < self.num_updates and self.summary == {}

    def autocast(self, amp: str):
        """bf16 autocast for an algorithm's `amp` setting: "bf16", "auto" (on CUDA) or "off"; none on the CPU
        (`evaluate.acting_precision`: evaluations act under the same)."""
        return acting_precision(self.device, amp)

    def wrap(self, model):
        """What the trainer runs its training forwards through: with `run.grad_sync = "ddp"` on several
        processes, DistributedDataParallel over `model` (gradients then averaged during backward, and
        `apply_gradients` leaves them as they are); otherwise `model` itself."""
        if self.world.size == 1 or self.cfg.run.grad_sync != "ddp":
            return model
        self._ddp.add(id(model))
        return self.world.data_parallel(model, self.cuda)

    def all_mean(self, t: torch.Tensor) -> torch.Tensor:
        """`t` averaged over the processes: for a decision every process must take alike (itself on one)."""
        return self.world.all_mean(t)

    def apply_gradients(self, model, optimizer, max_grad_norm: float | None) -> torch.Tensor:
        """The one place gradients become a step: averaged over the processes when training on several (one
        all-reduce of the flat gradients, unless DDP did it during backward), clipped to `max_grad_norm` (None:
        not clipped), applied. Returns the gradient norm before clipping (a device scalar)."""
        params = [p for p in model.parameters() if p.grad is not None]
        if self.world.size > 1 and id(model) not in self._ddp:
            self.world.average_gradients(params)
        if max_grad_norm is None:
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
        else:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        self.grad_steps += 1
        return norm

    def train_wall(self) -> float:
        return self.wall_before + time.perf_counter() - self.t_start

    # --- the end of an update --------------------------------------------------------------------------------
    def end_update(self, env_steps: int, metrics: dict, guard=()) -> None:
        """Count, read, check, log, evaluate, checkpoint and apply the stop rules (see the module docstring).
        `env_steps`: this process's env-steps in the update. `metrics`: numbers (the same on every process), or
        device tensors (scalars, or vectors logged as lists) read in one transfer; over several processes float
        tensors are averaged and integer ones summed; the ones named in `guard` must be finite (else
        NonFiniteError: nonfinite.json, the run stops). `read` then holds `metrics` as read to the host (the same on
        every process), set before this update's checkpoint is written."""
        if self.cfg.run.check_sync:
            self._check_sync()
        keys = [k for k, v in metrics.items() if isinstance(v, torch.Tensor)]
        signalled = self._stop_signal is not None
        if self.world.size == 1:
            qs = episode_quantiles(self.env)
            flat = [metrics[k].detach().float().reshape(-1).to(qs.device) for k in keys]
            values = torch.cat([*flat, qs]).tolist()  # the one read of the device this update
        else:
            flat, tail = self._reduce(keys, metrics, env_steps, signalled)
            qs = episode_quantiles(self.env, self.world)
            values = torch.cat([*flat, qs.double(), tail]).tolist()
            env_steps, signalled = int(values[-2]), values[-1] > 0
            values = values[:-2]
        host = {k: v for k, v in metrics.items() if k not in keys}
        at = 0
        for k, f in zip(keys, flat, strict=True):
            chunk = values[at:at + f.numel()]
            if not metrics[k].dtype.is_floating_point:
                chunk = [int(x) for x in chunk]
            host[k] = chunk[0] if metrics[k].dim() == 0 else chunk
            at += f.numel()
        q = values[at:]
        self.read = host
        bad = {k: host[k] for k in guard if isinstance(host.get(k), float) and not math.isfinite(host[k])}
        if bad:
            raise NonFiniteError(host)
        self.update += 1
        self.global_step += env_steps
        times = self.timer.read()
        ep = self.env.episode_stats()  # over every process: _reduce summed the env's totals
        now = time.perf_counter()
        dt = now - self._t_update
        self._t_update = now
        stopped, due = "done", False
        if self.lead:
            if self.env.archive is None:
                eps, rate, ret = ep["episodes"], ep["success_rate"], ep["episode_return"]
                self._success.add(eps, 0.0 if eps == 0 or rate != rate else rate * eps, 0.0 if eps == 0 else ret * eps)
            else:  # the headline is the success from the task's own start: episodes started from cells are easier
                eps, rate = ep["start_episodes"], ep["success_from_start"]
                self._success.add(eps, 0.0 if not eps or rate is None else rate * eps)
            running, window = self._success.read()
            names = ("return", "length", "dist")
            quant = {f"{n}_p{int(100 * p)}": q[3 * i + j] for i, n in enumerate(names)
                     for j, p in enumerate(QUANTILES)}
            row = {"env_steps": self.global_step, **host, "sps": env_steps / dt if dt > 0 else None,
                   "updates_per_s": 1.0 / dt if dt > 0 else None,
                   **{f"time_{k}_s": v for k, v in times.items()}, "wall_s": self.train_wall(),
                   "running_success": running, "running_return": self._success.mean_return(),
                   "running_episodes": window, **quant, **{k: v for k, v in ep.items() if k != "env_steps"},
                   **{f"milestone/{name}": rate for name, rate in zip(self.env.milestone_names,
                                                                      ep.get("milestone_rates") or (), strict=False)}}
            self._maybe_eval(row, now)
            self._maybe_keep_policy(row)
            self.last = row
            self.run.log(self.update, row)
            if self._progress is not None:
                self._progress.update(self.update, row)
            if self.update == 1 + (self.checkpoint["update"] if self.checkpoint else 0) and not self.cuda:
                left = (self.num_updates - self.update) * dt
                self.echo(f"update {self.update} took {dt:.1f} s: about {left / 60:.1f} min for the "
                          f"{self.num_updates - self.update} left")
            every = self.cfg.run.image_every
            if every is not None and self.update % every == 0:  # exploration you can see (rl/explore.py)
                self.run.images(self.global_step, explore.images(explore.snapshot(self.env)))
            stopped = self._stop_rule(now, signalled)
            every_s = self.cfg.run.checkpoint_every_s
            due = (self.update % self.cfg.run.checkpoint_every == 0 or self.update >= self.num_updates
                   or stopped in ("interrupted", "stop_at_success", "time_limit")
                   or (every_s is not None and now - self._last_ckpt_t >= every_s)
                   or (Path(self.cfg.run.run_dir) / SAVE_NOW_NAME).exists())  # asked for one (rundir.py)
        if self.world.size > 1 and self.env.archive is not None and self.env.archive_cfg.share:
            self._share_cells()
        code, save = self.world.decide([STOPS.index(stopped), int(due)])  # rank 0 decides for all
        self.stopped = STOPS[code]
        if save:  # stop_after_updates ends as a kill would: only a checkpoint that was due anyway
            self.save()
            if self.lead:  # the asked-for checkpoint is written
                (Path(self.cfg.run.run_dir) / SAVE_NOW_NAME).unlink(missing_ok=True)
        if self.stopped != "done" or self.update >= self.num_updates:
            self._finish()
        self._ended = self.update

    def _reduce(self, keys: list, metrics: dict, env_steps: int, signalled: bool):
        """One all-reduce (float64, on the device) of: the metric tensors (floats divided by the process count
        first: their mean; integers: their sum), the env's episode totals (written back: `episode_stats` then
        reads every process's), this process's env-steps and whether it got a stop signal. Returns the metric
        parts and the [env-steps, signals] tail, still on the device."""
        dev, size = self.env.device, self.world.size
        parts = [metrics[k].detach().reshape(-1).to(device=dev, dtype=torch.float64) for k in keys]
        parts = [p / size if metrics[k].dtype.is_floating_point else p for k, p in zip(keys, parts, strict=True)]
        stats = self.env.stat_tensors()
        tail = torch.tensor([float(env_steps), float(signalled)], dtype=torch.float64).to(dev)
        buf = self.world.all_reduce_sum_(torch.cat([*parts, *(s.reshape(-1).double() for s in stats), tail]))
        out, at = [], 0
        for p in parts:
            out.append(buf[at:at + p.numel()])
            at += p.numel()
        for s in stats:
            s.copy_(buf[at:at + s.numel()].view_as(s))
            at += s.numel()
        return out, buf[at:]

    def _share_cells(self) -> None:
        """One archive over the processes: each offers its new or improved cells (states included) and takes the
        others' (`env.archive.share` each per update; one all-gather per part, on the device)."""
        mine = self.env.archive_outbox()
        rank, size = self.world.rank, self.world.size
        every = [self.world.all_gather(part) for part in mine]  # [size, share, ...] each
        self.env.archive_inbox([torch.cat([g[r] for r in range(size) if r != rank]) for g in every])

    def _check_sync(self) -> None:
        """`run.check_sync`: every process's parameters must equal rank 0's to the bit after every update."""
        bad = self.world.differing_ranks(self._model)
        if bad:
            err = GbxculeError(f"after update {self.update + 1} the parameters of rank(s) {bad} differ from rank "
                               f"0's: the processes fell out of step")
            raise err if self.lead else quiet(err)

    def _stop_rule(self, now: float, signalled: bool) -> str:
        r = self.cfg.run
        start = self.checkpoint["update"] if self.checkpoint else 0
        if signalled:
            return "interrupted"
        if r.stop_at_success is not None and (self.last.get("eval/greedy_success") or 0.0) >= r.stop_at_success:
            return "stop_at_success"
        if r.stop_after_updates is not None and self.update - start >= r.stop_after_updates:
            return "stop_after_updates"
        if r.time_limit_s is not None and now - self.t_start >= r.time_limit_s:
            return "time_limit"
        return "done"

    # --- periodic greedy eval --------------------------------------------------------------------------------
    def _maybe_eval(self, row: dict, now: float) -> None:
        r = self.cfg.run
        if r.eval_episodes < 1 or (self.eval_every is None and r.eval_every_s is None):
            return
        last = self.update >= self.num_updates
        bg = self._background
        if bg is not None and bg.busy:  # the eval beside training: read once it has ended (at the end: wait)
            ending = last or (r.time_limit_s is not None and now - self.t_start >= r.time_limit_s)
            rep = bg.finish() if ending else bg.poll()
            if rep is not None:
                self._log_eval(row, rep, bg.started_step, time.perf_counter() - bg.started_t, bg.model)
        nxt = self._next_eval_step
        due = self.eval_every is not None and nxt is not None and self.global_step >= nxt
        due = due or (r.eval_every_s is not None and now - self._last_eval_t >= r.eval_every_s)
        due = due or last
        if not due or (bg is not None and bg.busy):  # (a due eval starts once the one in flight has ended)
            return
        if self.eval_every is not None:
            while self._next_eval_step <= self.global_step:
                self._next_eval_step += self.eval_every
        if not last and self.cfg.run.eval_background:
            if bg is None:
                bg = self._background = BackgroundEval(self._model, self._make_eval_env(), self.cfg.section.amp,
                                                       r.eval_background_steps)
                self.env.after_step = bg.tick
            bg.start(self._model, self.global_step)
            self._last_eval_t = now
            return
        t0 = time.perf_counter()
        rep = self.evaluate()
        self._last_eval_t = self._t_update = time.perf_counter()  # the next update's SPS leaves the eval out
        self._log_eval(row, rep, self.global_step, self._last_eval_t - t0, self._model)
        row["time_eval_s"] = self._last_eval_t - t0

    def _maybe_keep_policy(self, row: dict) -> None:
        """run.policy_every_s = S: at the end of the first update at or past each multiple of S seconds of training,
        the weights as `policies/policy_<mark>s.pt` (one file for the latest mark where an update passed several)."""
        every = self.cfg.run.policy_every_s
        mark = 0.0 if every is None else math.floor(self.train_wall() / every) * every
        if mark <= self._policy_mark:
            return
        self._policy_mark = mark
        self.run.write_torch(f"policies/policy_{mark:g}s.pt", self._policy_state(self._policy_fields(
            self._model, self.global_step, row)))

    def _log_eval(self, row: dict, rep: dict, env_steps: int, seconds: float, model) -> None:
        """An eval's figures in this update's row: `eval/env_steps` are those of the weights evaluated (`model`),
        `eval/wall_s` the training time at which the result was known. A greedy success above every earlier
        one writes those weights to best_policy.pt (a policy flickers: the best is kept)."""
        rate = rep["success_rate"]
        if rate is not None and (self._best_greedy is None or rate > self._best_greedy):
            self._best_greedy, self._best_step = rate, env_steps
            self.run.write_torch(BEST_NAME, self._policy_state(self._policy_fields(
                model, env_steps, {"eval/greedy_success": rate, "eval/env_steps": env_steps})))
        if rep.get("milestone_rates") is not None:  # how far the greedy policy gets from the task's start
            row.update({"eval/mean_deepest": rep["mean_deepest"],
                        **{f"eval/milestone/{k}": v for k, v in rep["milestone_rates"].items()}})
        row.update({"eval/greedy_success": rep["success_rate"], "eval/greedy_return": rep["mean_return"],
                    "eval/stuck": rep.get("stuck_rate"), "eval/cycling": rep.get("cycle_rate"),
                    "eval/median_steps": rep["median_steps"], "eval/starts_skipped": rep["starts_skipped"],
                    "eval/env_steps": env_steps, "eval/wall_s": self.train_wall(),
                    "eval/elapsed_s": self.startup_s + self.train_wall(), "eval/seconds": seconds,
                    "eval/best_greedy": self._best_greedy})
        if "held_ticks" in rep:  # beside training: the share of training steps after which it queued nothing
            row["eval/held_ticks"] = rep["held_ticks"]

    def _make_eval_env(self):
        from gbxcule.backends import on_device

        if self._eval_env is None:
            with on_device(self.eval_device):  # (on another GPU, the training's stays the current device)
                self._eval_env = make_eval_env(self.cfg.env, self.cfg.run.eval_episodes, self.eval_device,
                                               periodic_eval_seed(self.cfg.run.seed))
        return self._eval_env

    def evaluate(self) -> dict:
        """The live model's greedy success over `run.eval_episodes` episodes from their own start states, on an
        env of its own on `run.eval_device` (built once; the training envs are not touched). Rank 0 alone
        evaluates."""
        from gbxcule.backends import on_device

        self._make_eval_env()
        rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state(self.device) if self.cuda else None
        try:
            with on_device(self.eval_device):
                return evaluate_model(model_for(self._model, self.eval_device), self._eval_env, modes=("greedy",),
                                      seed=periodic_eval_seed(self.cfg.run.seed), amp=self.cfg.section.amp)
        finally:  # the eval draws nothing from the training's random streams
            torch.set_rng_state(rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng, self.device)

    # --- checkpoints --------------------------------------------------------------------------------------------
    def _local_state(self) -> dict:
        """What each process checkpoints of its own: RNG, the algorithm's state, the env."""
        return {"rng": rng_state(), "extra": self._state() if self._state else {},
                "env": self.env.state_dict(emulator=self.emu_state)}

    def _policy_fields(self, model, global_step: int, metrics: dict) -> dict:
        """What a checkpoint and a policy file share: `model`'s weights at `global_step`, and what `gbxcule eval`
        needs to rebuild its env and model."""
        env = self.env
        return {"algo": self.cfg.algo, "model": model.state_dict(), "update": self.update, "global_step": global_step,
                "config": to_dict(self.cfg), "model_desc": self._model.describe(), "codec": env.codec.name,
                "obs_shape": list(env.single_obs_shape), "wall_s": self.train_wall(), "metrics": metrics}

    def _checkpoint_state(self, mine: dict, others: list) -> dict:
        state = {**self._policy_fields(self._model, self.global_step, self.last),
                 "optimizer": self._optimizer.state_dict(), **mine,
                 "loop": {"next_eval_step": self._next_eval_step, "success_window": list(self._success.rows),
                          "best_greedy": self._best_greedy, "best_step": self._best_step,
                          "grad_steps": self.grad_steps, "policy_mark": self._policy_mark},
                 "world_size": self.world.size}
        if others:
            state["ranks"] = others  # ranks 1..size-1: their rng, extra and env
        return state

    @staticmethod
    def _policy_state(state: dict) -> dict:
        """policy.pt: what `gbxcule eval` needs and nothing else (fp16 weights, no optimizer or env state)."""
        slim = {k: state.get(k) for k in ("update", "global_step", "config", "model_desc", "codec", "obs_shape",
                                          "wall_s", "metrics")}
        slim["algo"] = state.get("algo", state["config"].get("algo"))
        slim["model"] = {k: v.half() if v.is_floating_point() else v for k, v in state["model"].items()}
        return slim

    def save(self) -> None:
        """Checkpoint (every process calls it: rank 0 gathers the others' own state and writes)."""
        mine = self._local_state()
        every = self.world.gather_objects(mine)
        if self.lead:
            state = self._checkpoint_state(mine, every[1:])
            if self.env.archive is not None:  # the cells and screens `gbxcule plot` draws
                write_output(self.run.dir / ARCHIVE_NAME, explore.to_bytes(explore.snapshot(self.env)))
            self.run.save_checkpoint(state, self._policy_state(state) if self.grad_steps else None)
        self._saved_update = self.update
        self._last_ckpt_t = time.perf_counter()

    # --- the end -------------------------------------------------------------------------------------------------
    def _finish(self) -> None:
        if self._progress is not None:
            self._progress.close()
            self._progress = None
        completed = self.stopped in ("done", "time_limit", "stop_at_success")
        final = self._final_policy() if completed and self.lead else None
        self.summary = {"run_dir": str(Path(self.cfg.run.run_dir)), "algo": self.cfg.algo, "updates": self.update,
                        "num_updates": self.num_updates, "env_steps": self.global_step, "stopped": self.stopped,
                        "device": self.device, "world_size": self.world.size, "rank": self.world.rank,
                        "wall_s": self.train_wall(), "startup_s": self.startup_s, "grad_steps": self.grad_steps,
                        "checkpoint_update": self._saved_update, "final_policy": final, "last": self.last,
                        "signal": self._stop_signal}  # also one that came after the last update's stop check
        if completed and self.grad_steps == 0:  # nothing was learned: no policy, no eval, a non-zero exit
            self.summary["stopped"] = "no_learning"
            if self.lead:
                self.run.write_json("summary.json", self.summary)
            err = NoLearningError(f"the run took no gradient step in {self.global_step:,} env-steps "
                                  f"({self.cfg.algo}: {no_learning_hint(self.cfg)}): nothing was learned and no "
                                  f"policy was written; the checkpoint is kept")
            raise err if self.lead else quiet(err)
        if not self.lead:
            return
        self.run.write_json("summary.json", self.summary)
        if self.stopped == "interrupted":
            by = self._stop_signal or "a signal to another process"
            self.echo(f"stopped by {by} after update {self.update}: checkpoint saved; continue with "
                      f"gbxcule train --resume {self.run.dir}")
        greedy = self.last.get("eval/greedy_success")
        if greedy is not None:
            self.echo(f"last periodic eval: greedy success {pct(greedy)} at "
                      f"{self.last.get('eval/env_steps', self.global_step):,} env-steps")
        if final is not None and final["source"] == "best_eval":
            self.echo(f"final policy: the weights of the best periodic eval ({pct(final['greedy'])} greedy at "
                      f"{final['env_steps']:,} env-steps), not the last ones ({pct(final['last_greedy'])}); "
                      f"policy.pt holds them, checkpoint.pt the last weights")

    def _final_policy(self) -> dict | None:
        """Which weights the run ends with in policy.pt: the last ones, or the best periodic eval's where a greedy
        eval of the last weights did worse (a value-based policy flickers between evals). The last weights are
        evaluated here when no eval saw them. None without periodic evals."""
        r = self.cfg.run
        if r.eval_episodes < 1 or (self.eval_every is None and r.eval_every_s is None) or self.grad_steps == 0:
            return None
        if self.last.get("eval/env_steps") != self.global_step:  # the last weights, unseen by an eval
            if self._background is not None and self._background.busy:
                self._background.finish()
            t0 = time.perf_counter()
            self._log_eval(self.last, self.evaluate(), self.global_step, time.perf_counter() - t0, self._model)
        last = self.last.get("eval/greedy_success")
        best = self._best_greedy
        if best is None or last is None or last >= best or not (self.run.dir / BEST_NAME).is_file():
            return {"source": "last", "greedy": last, "env_steps": self.global_step}
        write_output(self.run.dir / POLICY_NAME, (self.run.dir / BEST_NAME).read_bytes())
        return {"source": "best_eval", "greedy": best, "env_steps": self._best_step, "last_greedy": last}


# --- what the session is made of ---------------------------------------------------------------------------
class NonFiniteError(GbxculeError):
    """A loss or gradient became NaN or infinite."""


class NoLearningError(GbxculeError):
    """A run that ended without taking a gradient step."""


def no_learning_hint(cfg) -> str:
    """Why an algorithm may take no gradient step in a run (the setting to look at)."""
    section = cfg.section
    if hasattr(section, "learning_starts"):
        return (f"{cfg.algo}.learning_starts is {section.learning_starts:,} transitions and the run made "
                f"{cfg.total_steps:,} env-steps")
    return "the run ended before its first update's learning step"


def memory_hint(cfg) -> str:
    """The settings that lower a run's memory: its env count, and its learner's batch."""
    s, algo = cfg.section, cfg.algo
    hint = "lower env.num_envs"
    if hasattr(s, "minibatches"):
        hint += f" or raise {algo}.minibatches"
    if hasattr(s, "batch_size"):
        hint += f" or {algo}.batch_size"
    return hint


def eval_interval(cfg, update_steps: int) -> int | None:
    """Env-steps between periodic greedy evals: `run.eval_every`, else `run.evals` of them spread over the run
    (None: none by env-steps)."""
    r = cfg.run
    if r.eval_every is not None:
        return r.eval_every
    if r.eval_every_s is not None or r.evals == 0:
        return None
    return max(update_steps, cfg.total_steps // r.evals)


def check_checkpoint_memory(need: int, device: str) -> None:
    """Refuse (one line) a run whose checkpoints' host copies (`need` bytes) do not fit in the host's memory now."""
    from gbxcule.backends import memory_available

    host, _ = memory_available(device)
    if host is not None and need > host.bytes:
        raise MemoryLimitError(f"a checkpoint of this run takes {need / 2**30:.2f} GiB of host memory (its state, "
                               f"then its bytes) but {host.bytes / 2**30:.2f} GiB is free ({host.source}): set "
                               f"run.checkpoint_env_state = \"never\" or keep less in it (e.g. dqn.checkpoint_buffer "
                               f"= false), or use fewer envs")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    d = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        d["cuda"] = torch.cuda.get_rng_state_all()
    return d


def set_rng_state(d: dict) -> None:
    random.setstate(d["python"])
    np.random.set_state(d["numpy"])
    torch.set_rng_state(d["torch"])
    if "cuda" in d and torch.cuda.is_available() and len(d["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(d["cuda"])


def process_age_s() -> float:
    """Seconds since this process started (Linux: /proc), so start-up counts in "time to X"; 0 if unknown."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


class Timer:
    """Time spent per phase (env, inference, update, ...): CUDA events read once per update, or the host clock."""

    def __init__(self, cuda: bool, names=("env", "inference", "update")):
        self.cuda = cuda
        self.acc = dict.fromkeys(names, 0.0)
        self._events: list[tuple[str, object, object]] = []
        self._pool: list = []

    def start(self, name: str):
        if self.cuda:
            if len(self._pool) < 2:
                self._pool += [torch.cuda.Event(enable_timing=True) for _ in range(64)]
            a, b = self._pool.pop(), self._pool.pop()
            a.record()
            return (name, a, b)
        return (name, time.perf_counter(), None)

    def stop(self, mark) -> None:
        name, a, b = mark
        if self.cuda:
            b.record()
            self._events.append((name, a, b))
        else:
            self.acc[name] = self.acc.get(name, 0.0) + time.perf_counter() - a

    def read(self) -> dict[str, float]:
        """Seconds per phase since the last read (on CUDA waits for the stream the events were recorded on, once
        per update; not the device: an eval's steps queued beside training on a stream of their own run on)."""
        if self.cuda:
            for _, _, b in self._events:
                b.synchronize()
            for name, a, b in self._events:
                self.acc[name] = self.acc.get(name, 0.0) + a.elapsed_time(b) / 1000.0
                self._pool += [a, b]
            self._events.clear()
        out, self.acc = self.acc, dict.fromkeys(self.acc, 0.0)
        return out


class SuccessWindow:
    """Success and mean return over the last >= `size` ended episodes, from per-update totals (the bar's running
    figures, and the closing line's: both over the same episodes)."""

    def __init__(self, size: int):
        self.size = size
        self.rows: deque[tuple] = deque()  # (episodes, successes, return sum or None)

    def add(self, episodes: int, successes: float, return_sum: float | None = None) -> None:
        if episodes:
            self.rows.append((episodes, successes, return_sum))
        while len(self.rows) > 1 and sum(r[0] for r in list(self.rows)[1:]) >= self.size:
            self.rows.popleft()

    def read(self) -> tuple[float | None, int]:
        eps = sum(r[0] for r in self.rows)
        return (sum(r[1] for r in self.rows) / eps if eps else None), eps

    def mean_return(self) -> float | None:
        """The mean return over the window's episodes (None where a row has none: rows from older checkpoints, or
        archive runs, whose window counts the episodes from the task's start only)."""
        if not self.rows or any(len(r) < 3 or r[2] is None for r in self.rows):
            return None
        return sum(r[2] for r in self.rows) / sum(r[0] for r in self.rows)


class Progress:
    """A rich progress bar: SPS, return, the running success of the last N ended episodes (with N), and the
    latest periodic greedy eval. Silent when off or when rich is missing."""

    def __init__(self, total_updates: int, enabled: bool, start: int = 0):
        self._p = None
        if enabled:
            try:
                from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
                from rich.progress import Progress as RichProgress

                self._p = RichProgress(TextColumn("[bold]train"), BarColumn(), TextColumn("{task.completed}/"
                                       "{task.total}"), TimeRemainingColumn(), TextColumn("{task.fields[msg]}"),
                                       transient=False)
                self._p.start()
                self._task = self._p.add_task("train", total=total_updates, completed=start, msg="")
            except ImportError:
                self._p = None

    def update(self, update: int, m: dict, total: int | None = None) -> None:
        if self._p is None:
            return
        self._p.update(self._task, completed=update, total=total, msg=progress_line(m))

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()
            self._p = None


def success_label(source: str | None) -> str:
    """"success", or "success (template)" where it is the goal template's verdict (the task has no RAM goal)."""
    return "success (template)" if source == "template" else "success"


def progress_line(m: dict) -> str:
    """The bar's text: SPS, mean return, running success with its episode count, greedy eval when there is one."""
    sps = m.get("sps")
    line = (f"sps {'-' if sps is None else format(sps, ',.0f')}  return {num(m.get('episode_return'))}  "
            f"{success_label(m.get('success_source'))} {pct(m.get('running_success'))} of last "
            f"{m.get('running_episodes', 0)} ep")
    if m.get("eval/greedy_success") is not None:
        line += f"  greedy {pct(m['eval/greedy_success'])}"
    return line


@dataclass(frozen=True)
class AlgoSpec:
    """An algorithm as the trainer room knows it (each `rl/algos/NAME.py` ends with one; `rl/algos/__init__.py`
    lists them).

    config: its section's dataclass (TOML `[NAME]`; what `--resume` may change is its fields' metadata);
    build_model(section, num_actions, stack_k, packed) -> a `rl/models.py` model; steps_per_update(cfg) -> this
    process's env-steps per logged update; train(cfg, checkpoint, echo) -> the summary (its loop inside a
    `Session`); check(cfg): cross-field checks of a whole config (one ConfigError line); summary: one line for
    --help; env_defaults: env settings it prefers under the user's; working_bytes(cfg) -> (per env, fixed) device
    bytes of its learner's peak working memory (`rl/models.py activation_bytes`; its train passes them to the
    `Session`'s memory check); explorers: its loop leaves the state archive's explorer envs out of learning
    (`env.archive.explorers`; a config with them is refused where it does not); cell_memory: its recurrent policy
    starts episodes from the archive's cells with the state kept with them (`env.archive.memory = "cell"`; refused
    elsewhere)."""

    name: str
    config: type
    build_model: Any
    steps_per_update: Any
    train: Any
    summary: str
    check: Any = None
    env_defaults: dict = field(default_factory=dict)
    working_bytes: Any = None
    explorers: bool = False
    cell_memory: bool = False
