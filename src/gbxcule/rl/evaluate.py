"""Evaluating a policy: M episodes from M start states, greedy and sampled (docs/training.md).

Success is ground truth from the task's RAM goal where it has one, else the goal template's own verdict
(`success_source` says which); where the episode ends on a pixel template and a RAM goal exists, the report
also says how often the template agreed with it. An episode whose start state already passes the success
test is not counted (`starts_skipped`): a policy that does nothing would score there. The pieces here take a model
(any of `rl/models.py`, acting through its `policy_step`), never a trainer: `gbxcule eval` loads one from a
checkpoint through the algorithm registry (`rl/algos`), the training loop evaluates its live model.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from gbxcule.core.errors import GbxculeError
from gbxcule.rl.goals import ScreenHash, ram_key, ram_rows
from gbxcule.rl.models import epsilon_greedy

if TYPE_CHECKING:
    from gbxcule.rl.tasks import Task

EVAL_PREFIX_LEN = 8  # eval start states: random action prefixes of 0..8 steps from the task's start
STUCK_STEPS = 16  # a failed episode whose observation did not change over its last this many steps is "stuck"
CYCLE_STEPS = 32  # ... whose every newest frame over its last STUCK_STEPS steps was one of this many before: "cycling"
FAILED_AT_TOP = 8  # the places where most failed episodes ended, as many as this (`failed_at`)
Q_SAMPLED_EPSILON = 0.05  # "sampled" for a Q-network: epsilon-greedy with this epsilon
EVAL_SEED = 1  # the start states of a run's final eval and of `gbxcule eval`: the same for every run


def periodic_eval_seed(run_seed: int) -> int:
    """The start states of a run's periodic evals, which choose its final policy: never EVAL_SEED's, so the final
    eval's figure is not the one the choice was made on."""
    return run_seed + 2


def make_eval_env(env_cfg, episodes: int, device: str, seed: int, task: str | Task | None = None):
    """A GameEnv of `episodes` envs and as many start states (random action prefixes of 0..EVAL_PREFIX_LEN
    steps from the task's start; each env draws one by the env's seeded slot rule), with the config's task (or
    `task`: a name, a spec or a `tasks.Task`), ROM, goal, observations and reward."""
    import dataclasses

    from gbxcule.rl.config import make_env

    if episodes < 1:
        raise GbxculeError(f"episodes must be >= 1, got {episodes}")
    # from the task's start, as it is: no archive, and the game plays on after a life lost
    cfg = dataclasses.replace(env_cfg, archive={}, spread_clocks=False, life_ends=False)
    if task is not None:
        cfg.task = task
    if episodes > 1:
        cfg.start_states = ["random_actions", episodes, EVAL_PREFIX_LEN]
    return make_env(cfg, device, seed, num_envs=episodes, info_mode="none")


def random_gif_path(gif: str | Path) -> Path:
    """Where `gbxcule eval --gif OUT --random` writes the random policy's GIF: OUT's name with `_random`."""
    return Path(gif).with_name(Path(gif).stem + "_random" + Path(gif).suffix)


def env_input_files(env: dict) -> list[Path]:
    """The files a run config's env section reads (its ROM file, task pack, start states, goal template): the
    inputs of a command that runs it, for the output guard (core/outputs.py)."""
    from gbxcule.rl.tasks import START_GENERATORS, task_files

    files = [Path(str(env[k])) for k in ("rom", "goal") if env.get(k)]
    starts = env.get("start_states")
    starts = [starts] if isinstance(starts, str) else list(starts or [])
    if not (starts and starts[0] in START_GENERATORS):
        files += [Path(s) for s in starts if isinstance(s, str) and s != "power_on"]
    return files + task_files(env.get("task"))


def acting_precision(device: str, amp: str):
    """The autocast a policy acts under: bf16 for an algorithm's `amp` "bf16" or "auto" on CUDA, none on the CPU or
    with "off". Training acts under it and evaluation plays under it too, so an evaluated argmax is the one that
    acted (a Q-network's action gaps can be smaller than bf16's rounding of its values)."""
    if str(device).startswith("cuda"):
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp in ("bf16", "auto"))
    return torch.autocast("cpu", enabled=False)


class PolicyRunner:
    """Acts with a model in one mode: "greedy" (argmax), "sampled" (a categorical over the logits, or
    epsilon-greedy for a Q-network), under the precision it was trained to act in (`amp`, `acting_precision`).
    Keeps a recurrent model's state, reset where an episode ended."""

    def __init__(self, model, mode: str, num_envs: int, device, epsilon: float = Q_SAMPLED_EPSILON,
                 amp: str = "off"):
        if mode not in ("greedy", "sampled"):
            raise ValueError(f"mode must be greedy or sampled, got {mode!r}")
        self.model, self.mode, self.epsilon = model, mode, epsilon
        self.device, self.amp = device, amp
        self.state = model.initial_state(num_envs, device)

    def __call__(self, obs: torch.Tensor, done: torch.Tensor | None = None) -> torch.Tensor:
        with torch.no_grad(), acting_precision(self.device, self.amp):
            out, self.state = self.model.policy_step(obs, self.state, done)
        out = out.float()
        if self.mode == "greedy":
            return out.argmax(-1)
        if self.model.kind == "q":
            return epsilon_greedy(out, self.epsilon)
        return torch.distributions.Categorical(logits=out, validate_args=False).sample()


def random_policy(num_actions: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)

    def act(obs, done=None):
        return torch.randint(0, num_actions, (obs.shape[0],), generator=gen).to(obs.device)

    return act


class Episodes:
    """Every env's first episode, played one env-step per `step` with no host read until `result`: the results
    per env. Each run starts from the same start states (a seeded reset: the env's slot sequence starts over),
    so evals of one env differ only by the policy. `skipped`: envs whose start state already passed the success
    test (not counted by `summarize`). `still`: per env, the steps at its episode's end over which the observation
    did not change (a policy without memory whose argmax walks into a wall sees one frame for good); `loop`: the steps
    at its end whose newest frame was one of the CYCLE_STEPS newest frames before it (a policy walking to and fro or
    round a loop, or a still screen, repeats its frames; each frame is kept as an exact hash, `goals.ScreenHash`, so
    the ring is CYCLE_STEPS integers per env); `last_action`:
    the action its episode ended on; `place`: where a task names cell bytes (its `cells`: map, x, y), their values
    packed (`goals.ram_key`) at its episode's last step."""

    def __init__(self, env, act):
        self.env, self.act, self.steps = env, act, 0
        self.obs, _ = env.reset(seed=env.seed)
        self.skipped = env.goal_holds().clone()
        self.finished = self.skipped.clone()
        self.success = torch.zeros_like(self.finished)
        n = env.num_envs
        self.steps_to_goal = torch.full((n,), -1, dtype=torch.int64, device=env.device)
        self.length = torch.zeros(n, dtype=torch.int64, device=env.device)
        self.ret = torch.zeros(n, dtype=torch.float32, device=env.device)
        self.fired = torch.zeros_like(self.finished)
        self.milestones = env.milestones.clone()  # [K, N]: the milestones each episode held (its start's too)
        self.done = None
        self.prev = self.obs.clone()  # the observation before this step's
        self.static = torch.zeros(n, dtype=torch.int64, device=env.device)  # steps it has not changed, so far
        self.still = torch.zeros(n, dtype=torch.int64, device=env.device)  # ... at the end of the finished episode
        self.hash = ScreenHash(n, self.obs[0, -1].numel() // 4, env.device)
        self.newest = torch.zeros(n, dtype=torch.int64, device=env.device)  # the newest frame's hash
        self.recent = self.hash(self.obs[:, -1], self.newest).repeat(CYCLE_STEPS, 1)  # the last steps' frames' hashes
        self.looping = torch.zeros(n, dtype=torch.int64, device=env.device)  # steps its frame was a recent one, so far
        self.loop = torch.zeros(n, dtype=torch.int64, device=env.device)  # ... at the end of the finished episode
        self.last_action = torch.zeros(n, dtype=torch.int64, device=env.device)  # its episode's last, so far
        self.cells = list(env.task.cells) if env.task is not None and env.task.cells else []
        self.cell_rows = (torch.tensor(ram_rows(self.cells, env.backend.layout), dtype=torch.int64, device=env.device)
                          if self.cells else None)
        self.place = torch.zeros(n, dtype=torch.int64, device=env.device)  # where its last step was taken, so far

    def step(self) -> None:
        env = self.env
        self.steps += 1
        a = self.act(self.obs, self.done)
        live = ~self.finished
        if self.cell_rows is not None:  # the place this step is taken from (after it, an ended env is reset)
            torch.where(live, ram_key(env.ram, self.cell_rows), self.place, out=self.place)
        self.obs, r, term, trunc, _ = env.step(a)
        hit = env.success & live & ~self.success
        self.steps_to_goal.masked_fill_(hit, self.steps)
        self.success |= env.success & live
        self.ret += r * live
        self.length += live
        if env.terminate_on == "template":
            self.fired |= term & live
        self.done = term | trunc
        # an episode that ended keeps how long its screen had stood still; the next observation is a new episode's
        torch.where(self.done & live, self.static, self.still, out=self.still)
        torch.where(live, a, self.last_action, out=self.last_action)
        same = (self.obs == self.prev).flatten(1).all(1)
        self.static.add_(1).mul_(same & ~self.done)
        self.prev.copy_(self.obs)
        torch.where(self.done & live, self.looping, self.loop, out=self.loop)
        newest = self.hash(self.obs[:, -1], self.newest)
        seen = (self.recent == newest.unsqueeze(0)).any(0)
        self.looping.add_(1).mul_(seen & ~self.done)
        self.recent[self.steps % CYCLE_STEPS].copy_(newest)  # (an ended env's: only its first episode counts)
        if env.milestone_names:  # an env that ended holds its finished episode's in final_milestones
            now = torch.where(self.done, env.final_milestones, env.milestones)
            torch.where(live, now, self.milestones, out=self.milestones)
        self.finished |= self.done

    def result(self) -> dict:
        return {"success": self.success.cpu().numpy(), "steps_to_goal": self.steps_to_goal.cpu().numpy(),
                "return": self.ret.cpu().numpy(), "length": self.length.cpu().numpy(),
                "finished": self.finished.cpu().numpy(), "template_fired": self.fired.cpu().numpy(),
                "skipped": self.skipped.cpu().numpy(), "milestones": self.milestones.cpu().numpy(),
                "milestone_names": list(self.env.milestone_names),
                "still": torch.where(self.finished, self.still, self.static).cpu().numpy(),
                "loop": torch.where(self.finished, self.loop, self.looping).cpu().numpy(),
                "last_action": self.last_action.cpu().numpy(),
                "action_names": list(self.env.codec.names),
                **({"place": self.place.cpu().numpy(), "place_cells": self.cells} if self.cells else {})}


def run_episodes(env, act, max_steps: int, gif_envs: int = 0) -> dict:
    """Step every env until each has finished its first episode (or `max_steps` steps); per-env results
    (`Episodes`). With `gif_envs`, also the first `gif_envs` envs' screens before each step and at the end
    (`frames`: an env whose episode has ended shows the screen it ended on from then on) and how many of them had
    reached the goal by then (`frame_successes`)."""
    run = Episodes(env, act)
    frames, frame_successes = [], []
    shown = min(gif_envs, env.num_envs)
    if shown:
        env.keep_final_frames(range(shown))
        ended = run.finished[:shown].cpu().numpy().copy()  # (a start already at the goal shows its start)
        last = env.frames(range(shown))

    def picture():
        now = env.frames(range(shown))
        now[ended] = last[ended]
        frames.append(now)
        frame_successes.append(int(run.success[:shown].sum()))

    for _ in range(max_steps):
        if shown:
            picture()
        run.step()
        if shown:
            new = run.finished[:shown].cpu().numpy() & ~ended
            if new.any():
                last[new] = env.final_frames()[new]
                ended |= new
        if bool(run.finished.all()):
            break
    if shown:
        picture()
        env.keep_final_frames(None)
    return {**run.result(), "frames": frames, "frame_successes": frame_successes}


def model_for(model, device: str):
    """`model` where its weights are on `device`, else a frozen copy of it there (for an eval env on another
    device: `run.eval_device`)."""
    import copy

    import torch

    want = torch.device(device)
    if want.type == "cuda" and want.index is None:
        want = torch.device("cuda", torch.cuda.current_device())
    if next(model.parameters()).device == want:
        return model
    return copy.deepcopy(model).requires_grad_(False).eval().to(want)


class BackgroundEval:
    """The periodic greedy eval beside training: `start` copies the live model's weights into a model of its
    own and resets the eval env, each `tick` (called after every training env-step) plays `steps_per_tick` eval
    steps, both on a CUDA stream of their own, so the eval's small launches fill the GPU beside the training's
    instead of stopping it (`backends.on_stream`); `poll` reads the report once the last step has run, `finish`
    plays the rest at once and waits. An eval ends at the tick after the one whose steps ended its last episode.
    A tick queues nothing while the steps the last one queued are still running:
    an eval step takes about as long on the device as a training step (one thread emulates each Game Boy's frames
    either way), so steps queued faster than they run would fill the stream's queue and hold up the host, and the
    training's launches with it. On a CPU device each tick runs in turn, with the same results. The eval's model
    and stream are on the env's device: on another GPU (`run.eval_device`) `start`'s copy of the weights is queued
    after the training's work so far and before its next, as torch orders a copy between devices."""

    def __init__(self, model, env, amp: str = "off", steps_per_tick: int = 1):
        import copy

        from gbxcule.backends import new_stream

        if steps_per_tick < 1:
            raise ValueError(f"steps_per_tick must be >= 1, got {steps_per_tick}")
        self.env, self.amp, self.steps_per_tick = env, amp, steps_per_tick
        self.model = copy.deepcopy(model).requires_grad_(False).eval().to(env.device)
        for p in self.model.parameters():
            p.grad = None
        self.stream = new_stream(env.device)
        self.run: Episodes | None = None
        self.left = 0
        self.started_step, self.started_t = 0, 0.0
        self._done = None
        # where the stream stood after the last tick's steps (reused: recorded again each tick)
        self._ticked = torch.cuda.Event() if self.stream is not None else None
        self._pending = False  # the last tick's steps may still be running (only _ticked can say)
        # whether every episode had ended after the last tick's steps: copied to host memory beside them, read once
        # they have run, so an eval whose episodes all ended stops there (its results cannot change after)
        self._all_ended = torch.zeros((), dtype=torch.bool, pin_memory=self.stream is not None)
        self.ticks = self.held = 0  # this eval's ticks, and those that queued nothing (its steps still running)

    @property
    def busy(self) -> bool:
        return self.run is not None

    def start(self, model, step: int) -> None:
        """Evaluate `model` as it is now (its weights at the training's current point; `step`: its env-steps)."""
        import time

        from gbxcule.backends import on_stream

        self.started_step, self.started_t = step, time.perf_counter()
        self.ticks = self.held = 0
        self._all_ended.fill_(False)
        with on_stream(self.env.device, self.stream, after_current=True):
            with torch.no_grad():
                for dst, src in zip(self.model.state_dict().values(), model.state_dict().values(), strict=True):
                    dst.copy_(src)
            self.run = Episodes(self.env, PolicyRunner(self.model, "greedy", self.env.num_envs, self.env.device,
                                                       amp=self.amp))
        self._join()  # the training changes its weights only after they were copied
        self.left = self.env.max_steps

    def tick(self) -> None:
        """Queue up to `steps_per_tick` eval steps, or none while the last tick's are still running; once they
        have run with every episode ended, none again: the eval is over."""
        if self.left <= 0:
            return
        self.ticks += 1
        if self._pending and not self._ticked.query():
            self.held += 1
            return
        if bool(self._all_ended):  # (host memory, written by the steps that have run)
            self.left, self._done = 0, self._ticked
            return
        self._play(min(self.steps_per_tick, self.left))

    def _play(self, n: int) -> None:
        from gbxcule.backends import on_stream

        with on_stream(self.env.device, self.stream):
            for _ in range(n):
                self.run.step()
            self._all_ended.copy_(self.run.finished.all(), non_blocking=True)
        self.left -= n
        if self.stream is not None:
            self._ticked.record(self.stream)
            self._pending = True
            if self.left == 0:
                self._done = self._ticked

    def poll(self) -> dict | None:
        """The report once every eval step has run on the device, else None (never waits)."""
        if self.run is None or self.left > 0 or (self._done is not None and not self._done.query()):
            return None
        return self._report()

    def finish(self) -> dict | None:
        """Play the eval's remaining steps and wait for them: its report (None when none is running)."""
        if self.run is None:
            return None
        if self.left > 0:
            self._play(self.left)
        return self._report()

    def abandon(self) -> None:
        """Drop the eval in flight (after its launches have run: their memory is freed then)."""
        if self.stream is not None:
            self.stream.synchronize()
        self.run, self.left, self._done, self._pending = None, 0, None, False

    def _join(self) -> None:
        from gbxcule.backends import join_stream

        join_stream(self.stream)

    def _report(self) -> dict:
        if self.stream is not None:
            self.stream.synchronize()
        res, self.run, self._done, self._pending = self.run.result(), None, None, False
        env = self.env
        rep = summarize(res, env.success_source, env.terminate_on == "template")
        return {**rep, "task": env.task.id if env.task else None, "start_states": env.num_slots,
                "held_ticks": self.held / self.ticks if self.ticks else 0.0}


def summarize(res: dict, success_source: str | None, template: bool) -> dict:
    """Figures over the episodes that were not skipped. `success_source`: "ram", "template" or None (the task
    has no goal: no success rate); `template`: the template ends episodes (its agreement with a RAM goal)."""
    keep = ~res.get("skipped", np.zeros(len(res["success"]), dtype=bool))
    succ = res["success"][keep]
    steps = res["steps_to_goal"][keep][succ]
    out = {"episodes": int(keep.sum()), "starts_skipped": int((~keep).sum()), "success_source": success_source,
           "success_rate": float(succ.mean()) if success_source and succ.size else None,
           "median_steps": float(np.median(steps)) if steps.size else None,
           "p90_steps": float(np.percentile(steps, 90)) if steps.size else None,
           "mean_return": float(res["return"][keep].mean()) if succ.size else None,
           "mean_length": float(res["length"][keep].mean()) if succ.size else None}
    if "still" in res:  # failed episodes that ended on a screen unchanged for STUCK_STEPS steps or more
        stuck = (res["still"][keep] >= STUCK_STEPS) & ~succ
        out["stuck_rate"] = float(stuck.mean()) if stuck.size else None
        if "last_action" in res:  # what the stuck episodes kept pressing: a direction into a wall, or a button
            labels = res.get("action_names") or []
            out["stuck_actions"] = {(labels[a] if a < len(labels) else str(a)): c
                                    for a, c in most_common(res["last_action"][keep][stuck])}
        if "loop" in res:  # ... and those that ended circling: each of their last STUCK_STEPS frames a recent one
            cycling = (res["loop"][keep] >= STUCK_STEPS) & ~stuck & ~succ
            out["cycle_rate"] = float(cycling.mean()) if cycling.size else None
    if "place" in res:  # where the failed episodes ended: the task's cell bytes (map, x, y), most first
        out["failed_at"] = failed_places(res["place"][keep][~succ], len(res["place_cells"]))
        out["failed_at_cells"] = [f"0x{a:04X}" for a in res["place_cells"]]
    names = res.get("milestone_names") or []
    if names:  # how far the episodes got: the share that held each milestone, and the deepest held per episode
        held = res["milestones"][:, keep]
        deepest = np.where(held.any(0), held.shape[0] - np.argmax(held[::-1], axis=0), 0)
        out["milestone_rates"] = {n: float(held[i].mean()) if held.shape[1] else None for i, n in enumerate(names)}
        out["milestone_deepest"] = [int(x) for x in deepest]
        out["mean_deepest"] = float(deepest.mean()) if deepest.size else None
    if template and success_source == "ram":
        fired = res["template_fired"][keep]
        out["template_agreement"] = float((fired == succ).mean()) if succ.size else None
        out["template_false_fires"] = int((fired & ~succ).sum())
    return out


def most_common(values: np.ndarray) -> list[tuple[int, int]]:
    """(value, count) of each distinct value, the most frequent first, then the lowest value."""
    vals, counts = np.unique(values, return_counts=True)
    return sorted(zip(vals.tolist(), counts.tolist(), strict=True), key=lambda x: (-x[1], x[0]))


def failed_places(keys: np.ndarray, nbytes: int, top: int = FAILED_AT_TOP) -> dict[str, int]:
    """The `top` commonest of packed place keys (`goals.ram_key` of `nbytes` bytes), most first (then by key):
    {"5,3,9": episodes}, each byte in decimal, in the cells' order."""
    return {",".join(str((v >> (8 * i)) & 0xFF) for i in range(nbytes)): c for v, c in most_common(keys)[:top]}


def failed_on(rep: dict) -> str:
    """A report's commonest places of failure: "C100,C101,C102 = 5,3,9 (20), 5,1,1 (4)"; "" where it has none."""
    places = rep.get("failed_at") or {}
    if not places:
        return ""
    cells = ",".join(c[2:] for c in rep.get("failed_at_cells") or [])
    return f"{cells} = " + ", ".join(f"{k} ({v})" for k, v in places.items())


def stuck_on(rep: dict) -> str:
    """A report's stuck episodes by the action they kept pressing, most first: "up 20, a 11"."""
    return ", ".join(f"{k} {v}" for k, v in (rep.get("stuck_actions") or {}).items())


def evaluate_model(model, env, modes=("greedy", "sampled"), seed: int = EVAL_SEED, random_baseline: bool = False,
                   gif: str | Path | None = None, gif_envs: int = 16, amp: str = "off") -> dict:
    """Run `model` over every env's first episode in each mode (acting under `amp`, its trainer's precision); a
    report with one summary per mode and the first mode's figures at the top level."""
    templ = env.terminate_on == "template"
    report: dict = {"task": env.task.id if env.task else None, "device": env.device, "start_states": env.num_slots,
                    "success_source": env.success_source}
    policies = {mode: PolicyRunner(model, mode, env.num_envs, env.device, amp=amp) for mode in modes}
    if random_baseline:
        policies["random"] = random_policy(env.num_actions, seed)
    gif_frames, gif_successes = {}, {}
    was_training = model.training
    model.eval()
    try:
        for name, act in policies.items():
            torch.manual_seed(seed)
            shown = name in (modes[0], "random")  # the GIFs written: the first mode's and the random one's
            res = run_episodes(env, act, env.max_steps, gif_envs if gif and shown else 0)
            report[name] = summarize(res, env.success_source, templ)
            gif_frames[name] = res["frames"]
            gif_successes[name] = res["frame_successes"]
    finally:
        model.train(was_training)
    if gif:
        write_gif_mosaic(gif_frames[modes[0]], gif, who=f"agent ({modes[0]})", successes=gif_successes[modes[0]])
        report["gif"] = str(gif)
        if random_baseline:
            rp = random_gif_path(gif)
            write_gif_mosaic(gif_frames["random"], rp, who="random", successes=gif_successes["random"])
            report["gif_random"] = str(rp)
    primary = report[modes[0]]
    report.update({k: primary[k] for k in ("success_rate", "median_steps", "p90_steps", "mean_return", "episodes",
                                           "starts_skipped")})
    for k in ("milestone_rates", "mean_deepest", "stuck_rate", "stuck_actions", "cycle_rate", "failed_at",
              "failed_at_cells"):
        if k in primary:
            report[k] = primary[k]
    if "template_agreement" in primary:
        report["template_agreement"] = primary["template_agreement"]
    return report


def gif_label(who: str, step: int, successes: int | None, envs: int) -> str:
    """The caption of a GIF picture: who acts, the step, and how many of the envs shown have reached the goal."""
    return f"{who}  step {step}" + ("" if successes is None else f"  at goal {successes}/{envs}")


def write_gif_mosaic(frames: list, path: str | Path, frame_ms: int = 120, who: str | None = None,
                     successes: list[int] | None = None, inputs=()) -> None:
    """A GIF of a mosaic of envs' screens, one picture per step (the first before any step). With `who`, each
    picture is captioned (`gif_label`): who acts ("agent (greedy)", "random"), the step and `successes[i]`,
    the envs shown that have reached the goal."""
    from gbxcule.core.outputs import write_output
    from gbxcule.core.screen import caption, mosaic, write_gif

    if not frames:
        raise GbxculeError("no frames recorded")
    tiles = [mosaic(f) if len(f) > 1 else f[0] for f in frames]
    if who is not None:
        tiles = [caption(t, gif_label(who, i, None if successes is None else successes[i], len(frames[i])),
                         scale=2 if t.shape[1] >= 320 else 1) for i, t in enumerate(tiles)]
    write_output(path, lambda tmp: write_gif(tiles, tmp, frame_ms), inputs)
