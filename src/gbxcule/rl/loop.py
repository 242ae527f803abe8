"""The training session every algorithm's loop runs inside: the imperative shell around the math.

    with Session(cfg, checkpoint, echo, device_bytes=...) as s:      # run folder, seeds, memory check, env
        model, optimizer = ..., ...
        extra = s.start(model, optimizer, state=lambda: {...})       # resume (or reset the env)
        while s.running:
            ... collect and learn, timing phases with s.timer ...
            s.end_update(env_steps, metrics)                         # log, eval, checkpoint, stop rules
    return s.summary

`end_update` reads the device once: the algorithm's metrics (device scalars or numbers, checked to be finite:
the NaN guard), the env's episode totals, percentiles of returns, lengths and goal distances. It logs one line
to metrics.jsonl and TensorBoard, updates the progress bar, runs the periodic greedy eval on its own small env
(training envs untouched), checkpoints every `run.checkpoint_every` updates or `run.checkpoint_every_s`
seconds, and applies the stop rules (total steps, `run.time_limit_s`, `run.stop_after_updates`,
`run.stop_at_success`, SIGINT/SIGTERM: stop at the update's end with a checkpoint; a second Ctrl-C quits at once).
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from collections.abc import Callable

import torch

from gbxcule.core.errors import GbxculeError
from gbxcule.core.fmt import pct
from gbxcule.core.memory import fit, host_available
from gbxcule.core.outputs import write_output
from gbxcule.rl import explore
from gbxcule.rl.evaluate import evaluate_model, make_eval_env
from gbxcule.rl.shell import (
    ARCHIVE_NAME,
    POLICY_NAME,
    CheckpointError,
    NonFiniteError,
    Progress,
    Run,
    SuccessWindow,
    Timer,
    make_env,
    obs_bytes,
    process_age_s,
    resolve_device,
    rng_state,
    seed_everything,
    set_rng_state,
    to_dict,
)

ENV_STATE_AUTO_LIMIT = 512 * 2**20
QUANTILES = (0.1, 0.5, 0.9)


def episode_quantiles(env) -> torch.Tensor:
    """p10/p50/p90 of the latest finished episode's return and length over the envs that finished one, and of
    the current goal distance over all envs (NaN where there is none): one [9] tensor, computed on the device."""
    q = torch.tensor(QUANTILES, dtype=torch.float32, device=env.device)
    have = env.episodes > 0
    count = have.sum()

    def nearest_rank(values: torch.Tensor, valid: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        # invalid entries sort last; rank q*(k-1) among the k valid ones (no host sync, no boolean indexing)
        v = torch.where(valid, values.float(), torch.full_like(values, float("inf"), dtype=torch.float32))
        s = torch.sort(v).values
        idx = (q * (k - 1).clamp(min=0).float()).round().long()
        out = s.gather(0, idx)
        return torch.where(k > 0, out, torch.full_like(out, float("nan")))

    ret = nearest_rank(env.final_return, have, count)
    length = nearest_rank(env.final_length, have, count)
    if env.scorer is not None:
        dist = nearest_rank(env.distance, torch.ones_like(have), torch.full_like(count, env.num_envs))
    else:
        dist = torch.full((3,), float("nan"), device=env.device)
    return torch.cat([ret, length, dist])


class Stop(Exception):
    """Raised inside a session to end it early with a reason (stops the loop like a stop rule)."""


class Session:
    """One training run: see the module docstring. Attributes the loop uses: env, device, cuda, timer, update,
    global_step, running, num_updates, cfg."""

    def __init__(self, cfg, checkpoint: dict | None = None, echo: Callable[[str], None] | None = None,
                 device_bytes: Callable[[int], int] | int = 0, host_bytes: int = 0, env_kwargs: dict | None = None,
                 steps_per_update: int = 1):
        self.t_process = process_age_s()
        self.t_init = time.perf_counter()
        self.cfg, self.checkpoint = cfg, checkpoint
        self.echo = echo or (lambda s: None)
        self.device = resolve_device(cfg.run.device)
        self.cuda = self.device.startswith("cuda")
        if self.cuda and ":" in self.device:
            torch.cuda.set_device(self.device)
        self.steps_per_update = steps_per_update
        self.num_updates = max(1, cfg.total_steps // steps_per_update)
        per = obs_bytes(cfg.env)
        need = device_bytes(per) if callable(device_bytes) else int(device_bytes)
        if self.cuda:
            free, _ = torch.cuda.mem_get_info()
            fit(1, need + 2**30, free, "device")  # plus ~1 GiB for the model, optimizer and activations
        else:
            fit(1, need + host_bytes, host_available(), "host")
        self.storage_bytes = need
        self.run = Run(cfg.run.run_dir, to_dict(cfg), resume=checkpoint is not None, tensorboard=cfg.run.tensorboard)
        if self.run.moved is not None:
            self.echo(f"{cfg.run.run_dir} held files of a run with no checkpoint: moved them to {self.run.moved}")
        seed_everything(cfg.run.seed)
        self.env = make_env(cfg.env, self.device, cfg.run.seed, keep_final_obs=True, info_mode="none",
                            **(env_kwargs or {}))
        if self.env.archive is not None:
            self.echo(f"state archive: {self.env.archive.m:,} cells of {self.env.cell_mode} keys, "
                      f"{self.env.archive_bytes / 2**20:,.0f} MiB on {self.device}")
        self.timer = Timer(self.cuda, names=())
        self.update = self.global_step = 0
        self.wall_before = 0.0
        self.stopped = "done"
        self.last: dict = {}
        self.summary: dict = {}
        self._model = self._optimizer = self._state = None
        self._stop_signal: str | None = None
        self._signals: dict = {}
        self._success = SuccessWindow(cfg.run.success_window)
        self._eval_env = None
        self._next_eval_step = cfg.run.eval_every
        self._last_eval_t = 0.0
        self._last_ckpt_t = 0.0
        self._progress = None
        self._t_update = 0.0
        self._saved_update = 0
        self.emu_state = {"always": True, "never": False}.get(
            cfg.run.checkpoint_env_state, self.env.emulator_bytes() <= ENV_STATE_AUTO_LIMIT)

    # --- context: signals, failures, closing -------------------------------------------------------------
    def __enter__(self) -> Session:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._signals[sig] = signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self._stop_signal is not None and signum == signal.SIGINT:
            self._restore_signals()
            raise KeyboardInterrupt
        self._stop_signal = name
        sys.stderr.write(f"\ngbxcule train: {name}: stopping at the end of this update with a checkpoint "
                         f"(Ctrl-C again to quit at once)\n")

    def _restore_signals(self) -> None:
        for sig, handler in self._signals.items():
            signal.signal(sig, handler)
        self._signals.clear()

    def __exit__(self, kind, exc, tb) -> bool:
        self._restore_signals()
        if self._progress is not None:
            self._progress.close()
        try:
            if isinstance(exc, NonFiniteError):
                self.run.write_json("nonfinite.json", {"update": self.update, "config": to_dict(self.cfg),
                                                       "last_metrics": self.last, "batch_stats": exc.args[0]})
                kept = ("the last good checkpoint (update "
                        f"{self._saved_update}) is kept" if self._saved_update else "no checkpoint was written yet")
                raise GbxculeError(f"training stopped at update {self.update + 1}: a loss or gradient became "
                                   f"NaN/inf (snapshot in {self.run.dir / 'nonfinite.json'}; {kept})") from None
        finally:
            self.run.close()
            if self._eval_env is not None:
                self._eval_env.close()
            self.env.close()
        return False

    # --- start and resume ----------------------------------------------------------------------------------
    def start(self, model, optimizer, state: Callable[[], dict] | None = None, describe: str = "") -> dict | None:
        """Attach the model and optimizer (and `state`, the algorithm's own checkpointed state); on resume load
        everything and return the algorithm's state, else reset the env and return None."""
        self._model, self._optimizer, self._state = model, optimizer, state
        extra = None
        ck = self.checkpoint
        if ck is not None:
            if ck.get("model_desc") != model.describe():
                raise CheckpointError(f"checkpoint model {ck.get('model_desc')} does not fit {model.describe()}")
            model.load_state_dict(ck["model"])
            optimizer.load_state_dict(ck["optimizer"])
            self.update, self.global_step = ck["update"], ck["global_step"]
            self._saved_update = self.update
            self.wall_before = ck.get("wall_s", 0.0)
            self.env.load_state_dict(ck["env"])
            set_rng_state(ck["rng"])
            extra = ck.get("extra", {"sampler": ck["sampler"]} if "sampler" in ck else {})
            loop = ck.get("loop", {})
            self._next_eval_step = loop.get("next_eval_step", self._next_eval_step)
            self._success.rows.extend(tuple(r) for r in loop.get("success_window", ()))
            self.last = ck.get("metrics", {})
            self.run.truncate_log(self.update, warn=self.echo)
            self.run.write_torch(POLICY_NAME, self._policy_state(ck))  # a kill may have left it one save ahead
        else:
            self.env.reset(seed=self.cfg.run.seed)
        if describe:
            self.echo(describe)
        if not self.cuda:
            self.echo(f"{self.num_updates - self.update} updates of {self.steps_per_update:,} env-steps planned on "
                      f"the CPU device (an estimate of the time follows the first update)")
        self._progress = Progress(self.num_updates, self.cfg.run.progress, self.update)
        now = time.perf_counter()
        self.startup_s = self.t_process + now - self.t_init
        self.t_start = self._last_ckpt_t = self._last_eval_t = self._t_update = now
        return extra

    @property
    def running(self) -> bool:
        return self.update < self.num_updates and self.summary == {}

    def autocast(self, amp: bool):
        if self.cuda:
            return torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp)
        return torch.autocast("cpu", enabled=False)

    def apply_gradients(self, model, optimizer, max_grad_norm: float | None) -> torch.Tensor:
        """The one place gradients become a step: (averaged over processes when training on several, by the
        distributed shell), clipped to `max_grad_norm` (None: not clipped), applied. Returns the gradient norm
        before clipping (a device scalar)."""
        params = [p for p in model.parameters() if p.grad is not None]
        if max_grad_norm is None:
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
        else:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        return norm

    def train_wall(self) -> float:
        return self.wall_before + time.perf_counter() - self.t_start

    # --- the end of an update --------------------------------------------------------------------------------
    def end_update(self, env_steps: int, metrics: dict, guard=()) -> None:
        """Count, read, check, log, evaluate, checkpoint and apply the stop rules (see the module docstring).
        `metrics`: numbers, or device tensors (scalars, or vectors logged as lists) read in one transfer;
        the ones named in `guard` must be finite (else NonFiniteError: nonfinite.json, the run stops)."""
        keys = [k for k, v in metrics.items() if isinstance(v, torch.Tensor)]
        qs = episode_quantiles(self.env)
        flat = [metrics[k].detach().float().reshape(-1).to(qs.device) for k in keys]
        values = torch.cat([*flat, qs]).tolist()  # the one read of the device this update
        host = {k: v for k, v in metrics.items() if k not in keys}
        at = 0
        for k, f in zip(keys, flat, strict=True):
            chunk = values[at:at + f.numel()]
            if not metrics[k].dtype.is_floating_point:
                chunk = [int(x) for x in chunk]
            host[k] = chunk[0] if metrics[k].dim() == 0 else chunk
            at += f.numel()
        q = values[at:]
        bad = {k: host[k] for k in guard if isinstance(host.get(k), float) and not math.isfinite(host[k])}
        if bad:
            raise NonFiniteError(host)
        self.update += 1
        self.global_step += env_steps
        times = self.timer.read()
        ep = self.env.episode_stats()
        self._success.add(ep["episodes"], 0.0 if ep["episodes"] == 0 or ep["success_rate"] != ep["success_rate"]
                          else ep["success_rate"] * ep["episodes"])
        running, window = self._success.read()
        now = time.perf_counter()
        dt = now - self._t_update
        self._t_update = now
        names = ("return", "length", "dist")
        quant = {f"{n}_p{int(100 * p)}": q[3 * i + j] for i, n in enumerate(names) for j, p in enumerate(QUANTILES)}
        row = {"env_steps": self.global_step, **host, "sps": env_steps / dt if dt > 0 else None,
               "updates_per_s": 1.0 / dt if dt > 0 else None,
               **{f"time_{k}_s": v for k, v in times.items()}, "wall_s": self.train_wall(),
               "running_success": running,
               "running_episodes": window, **quant, **{k: v for k, v in ep.items() if k != "env_steps"}}
        self._maybe_eval(row, now)
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
        self._apply_stop_rules(now)
        every_s = self.cfg.run.checkpoint_every_s
        due = (self.update % self.cfg.run.checkpoint_every == 0 or self.update >= self.num_updates
               or self.stopped in ("interrupted", "stop_at_success", "time_limit")
               or (every_s is not None and now - self._last_ckpt_t >= every_s))
        if due:  # stop_after_updates ends as a kill would: only a checkpoint that was due anyway
            self.save()
        if self.stopped != "done" or self.update >= self.num_updates:
            self._finish()

    def _apply_stop_rules(self, now: float) -> None:
        r = self.cfg.run
        start = self.checkpoint["update"] if self.checkpoint else 0
        if self._stop_signal is not None:
            self.stopped = "interrupted"
        elif r.stop_at_success is not None and (self.last.get("eval/greedy_success") or 0.0) >= r.stop_at_success:
            self.stopped = "stop_at_success"
        elif r.stop_after_updates is not None and self.update - start >= r.stop_after_updates:
            self.stopped = "stop_after_updates"
        elif r.time_limit_s is not None and now - self.t_start >= r.time_limit_s:
            self.stopped = "time_limit"

    # --- periodic greedy eval --------------------------------------------------------------------------------
    def _maybe_eval(self, row: dict, now: float) -> None:
        r = self.cfg.run
        if r.eval_episodes < 1 or (r.eval_every is None and r.eval_every_s is None):
            return
        nxt = self._next_eval_step
        due = r.eval_every is not None and nxt is not None and self.global_step >= nxt
        due = due or (r.eval_every_s is not None and now - self._last_eval_t >= r.eval_every_s)
        due = due or self.update >= self.num_updates
        if not due:
            return
        if r.eval_every is not None:
            while self._next_eval_step <= self.global_step:
                self._next_eval_step += r.eval_every
        t0 = time.perf_counter()
        rep = self.evaluate()
        self._last_eval_t = self._t_update = time.perf_counter()  # the next update's SPS leaves the eval out
        row.update({"eval/greedy_success": rep["success_rate"], "eval/greedy_return": rep["mean_return"],
                    "eval/median_steps": rep["median_steps"], "eval/env_steps": self.global_step,
                    "eval/wall_s": self.train_wall(), "eval/elapsed_s": self.startup_s + self.train_wall(),
                    "time_eval_s": self._last_eval_t - t0})

    def evaluate(self) -> dict:
        """The live model's greedy success over `run.eval_episodes` episodes from distinct start states, on an
        env of its own (built once; the training envs are not touched)."""
        if self._eval_env is None:
            self._eval_env = make_eval_env(self.cfg.env, self.cfg.run.eval_episodes, self.device, self.cfg.run.seed + 1)
        rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state() if self.cuda else None
        try:
            return evaluate_model(self._model, self._eval_env, modes=("greedy",), seed=self.cfg.run.seed + 1)
        finally:  # the eval draws nothing from the training's random streams
            torch.set_rng_state(rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng)

    # --- checkpoints --------------------------------------------------------------------------------------------
    def _checkpoint_state(self) -> dict:
        env = self.env
        return {"algo": self.cfg.algo, "model": self._model.state_dict(), "optimizer": self._optimizer.state_dict(),
                "update": self.update, "global_step": self.global_step, "rng": rng_state(),
                "extra": self._state() if self._state else {}, "env": env.state_dict(emulator=self.emu_state),
                "config": to_dict(self.cfg), "model_desc": self._model.describe(), "codec": env.codec.name,
                "obs_shape": list(env.single_obs_shape), "wall_s": self.train_wall(), "metrics": self.last,
                "loop": {"next_eval_step": self._next_eval_step, "success_window": list(self._success.rows)}}

    @staticmethod
    def _policy_state(state: dict) -> dict:
        """policy.pt: what `gbxcule eval` needs and nothing else (fp16 weights, no optimizer or env state)."""
        slim = {k: state.get(k) for k in ("update", "global_step", "config", "model_desc", "codec", "obs_shape",
                                          "wall_s", "metrics")}
        slim["algo"] = state.get("algo", state["config"].get("algo"))
        slim["model"] = {k: v.half() if v.is_floating_point() else v for k, v in state["model"].items()}
        return slim

    def save(self) -> None:
        state = self._checkpoint_state()
        if self.env.archive is not None:  # the cells and screens `gbxcule plot` draws
            write_output(self.run.dir / ARCHIVE_NAME, explore.to_bytes(explore.snapshot(self.env)))
        self.run.save_checkpoint(state, self._policy_state(state))
        self._saved_update = self.update
        self._last_ckpt_t = time.perf_counter()

    # --- the end -------------------------------------------------------------------------------------------------
    def _finish(self) -> None:
        if self._progress is not None:
            self._progress.close()
            self._progress = None
        self.summary = {"run_dir": str(self.run.dir), "algo": self.cfg.algo, "updates": self.update,
                        "num_updates": self.num_updates, "env_steps": self.global_step, "stopped": self.stopped,
                        "device": self.device, "wall_s": self.train_wall(), "startup_s": self.startup_s,
                        "checkpoint_update": self._saved_update, "last": self.last}
        self.run.write_json("summary.json", self.summary)
        if self.stopped == "interrupted":
            self.echo(f"stopped by {self._stop_signal} after update {self.update}: checkpoint saved; continue with "
                      f"gbxcule train --resume {self.run.dir}")
        greedy = self.last.get("eval/greedy_success")
        if greedy is not None:
            self.echo(f"last periodic eval: greedy success {pct(greedy)} at {self.global_step:,} env-steps")
