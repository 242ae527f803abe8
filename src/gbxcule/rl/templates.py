"""Goal-template tools: capture a template at a task's goal, calibrate tau, and the built-in tasks' templates.

Templates are never committed: the built-in tasks' come from their scripted solutions, captured on first
use into the cache (`cache_dir()/templates`, keyed by everything that shapes the frames) by the same code
as `gbxcule goal capture`.
"""

from __future__ import annotations

import numpy as np

from gbxcule.rl.capture import bare_task, capture, capture_task, task_template
from gbxcule.rl.env import GameEnv
from gbxcule.rl.goals import GoalTemplate, RamGoal, unpack_shades
from gbxcule.rl.tasks import Task

__all__ = ["calibrate", "capture", "frame_distance", "replay", "suggest_tau", "task_template"]


HOLD_STEPS = 8  # NOOP steps after the goal frame: the goal's own noise, and whether the screen has settled
NEAREST = 4  # nearest off-goal frames kept as pictures
MIN_SETTLE_GAP = 0.01  # the settled screen must lie this far from the template (and past its own spread)


def frame_distance(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> float:
    """The template distance between two [72, 80] shade frames over `mask`'s pixels."""
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16))[mask].mean() / 3)


def _newest(env) -> np.ndarray:
    """Every env's newest observation frame as [N, 72, 80] shades on the host (a copy)."""
    latest = env.obs[:, -1].cpu().numpy()
    return unpack_shades(latest) if env.obs_mode == "packed" else latest.copy()


def replay(task: Task, template: GoalTemplate, actions=None, rom=None, device: str = "cpu", start_states=None,
           hold: int = HOLD_STEPS) -> dict:
    """Distances to `template` along `actions` (default: the task's solution) from the start `capture` uses (the
    task's, or `start_states`, without a generator) in one env, then over `hold` NOOP steps, with whether the
    task's RAM goal holds at each
    step (None without one). `mid_transition`: the screen went on changing after the last action and settled
    away from the template (by more than twice its own spread over the last half of the wait, and at least
    MIN_SETTLE_GAP), so a template taken at the end never matches the settled goal screen."""
    actions = tuple(task.solution or ()) if actions is None else tuple(int(a) for a in actions)
    env = GameEnv(rom, 1, device, task=bare_task(capture_task(task, start_states)), goal=template,
                  stack_k=template.meta.stack_k, obs=template.meta.obs, obs_view=template.meta.view, info_mode="none",
                  reward={"tau": 0.0, "terminate_on": "template"}, max_steps=len(actions) + hold + 1)
    goal = RamGoal(task.goal_ram, env.backend.layout, env.device) if task.goal_ram else None
    env.reset(seed=0)
    dists, oks, frames = [], [], []
    for a in (*actions, *(0,) * hold):
        env.step(np.array([a], dtype=np.int32))
        dists.append(float(env.distance[0].item()))
        oks.append(None if goal is None else bool(goal.evaluate(env.ram)[0].item()))
        frames.append(_newest(env)[0])
    env.close()
    n = len(actions)
    held, last = frames[n:], frames[-1]
    spread = max((frame_distance(f, last, template.mask) for f in held[len(held) // 2:]), default=0.0)
    settled = dists[-1] if hold else dists[n - 1]
    return {"along": dists[:n], "along_ok": oks[:n], "held": dists[n:], "held_ok": oks[n:], "frames": frames,
            "spread": spread,
            "settled_distance": settled, "mid_transition": bool(hold) and settled > max(2 * spread, MIN_SETTLE_GAP)}


def calibrate(task: Task, template: GoalTemplate, num_envs: int = 64, steps: int | None = None,
              device: str = "cpu", seed: int = 0, rom=None, start_states=None, hold: int = HOLD_STEPS,
              nearest: int = NEAREST) -> dict:
    """Distances to `template` along the task's solution, over `hold` NOOP steps after it (the goal's own
    noise) and along `num_envs` x `steps` of uniform random play from the task's start (or `start_states`, e.g.
    ("solution", K): random play all along the route, which finds look-alikes near the goal that play from the
    start rarely reaches), split by whether the task's RAM goal holds; the `nearest` closest off-goal frames
    (pictures); a suggested tau and k_consecutive (`suggest_tau`), never below the noise; and a verdict:
    "separated", "NOT separated" (some off-goal frame lies as near as the goal's own frames), or "unchecked"
    (no RAM goal: random frames as near as the goal's own may be the goal or look-alikes; see `nearest`).
    Nothing ends an episode early here: tau is 0 while measuring."""
    import torch

    has_ram = bool(task.goal_ram)
    along, along_ok, goal_d, off_extra = [], [], [], []
    rep = None
    if task.solution:
        rep = replay(task, template, rom=rom, device=device, hold=hold)
        along, along_ok = rep["along"], rep["along_ok"]
        if has_ram:
            goal_d = [d for d, ok in zip(along[-1:] + rep["held"], along_ok[-1:] + rep["held_ok"], strict=True) if ok]
            off_extra = [d for d, ok in zip(along + rep["held"], along_ok + rep["held_ok"], strict=True) if not ok]
        else:  # without a RAM goal the solution's end and the wait after it are the goal
            goal_d = along[-1:] + rep["held"]
    band = max(goal_d, default=0.0)  # the goal's own noise
    if not has_ram:  # solution frames before the end that look unlike the goal are off-goal
        off_extra = [d for d in along[:-1] if d > band]
    near: dict = {}
    if rep is not None:  # the solution's own off-goal frames are candidates for the pictures too
        oks = along_ok + rep["held_ok"]
        cand = np.array([d if (not oks[i] if has_ram else i < len(along) - 1 and d > band) else np.inf
                         for i, d in enumerate(along + rep["held"])])
        _keep_nearest(near, cand, lambda idx: [rep["frames"][i] for i in idx], nearest)
    steps = steps or min(task.step_limit, 200)
    env = GameEnv(rom, num_envs, device, task=bare_task(task), goal=template, stack_k=template.meta.stack_k,
                  obs=template.meta.obs, obs_view=template.meta.view, info_mode="none",
                  reward={"tau": 0.0, "terminate_on": "template"}, max_steps=steps + 1, start_states=start_states,
                  seed=seed)
    goal = RamGoal(task.goal_ram, env.backend.layout, env.device) if has_ram else None
    env.reset(seed=seed)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    seq, seq_ok = [], []
    for _ in range(steps):
        a = torch.randint(0, env.num_actions, (num_envs,), generator=gen, dtype=torch.int32)
        env.step(a.to(env.device))
        d = env.distance.cpu().numpy().copy()
        ok = goal.evaluate(env.ram).cpu().numpy() if goal is not None else np.zeros(num_envs, bool)
        seq.append(d)
        seq_ok.append(ok)
        _keep_nearest(near, np.where(ok, np.inf, d), lambda idx: _newest(env)[idx], nearest)
    env.close()
    d, ok = np.stack(seq), np.stack(seq_ok)
    rand_off, rand_goal = d[~ok], d[ok]
    if has_ram:
        goal_d = goal_d + rand_goal.tolist()
        off = np.concatenate([rand_off, np.asarray(off_extra, float)])
        within = int((off <= max(goal_d, default=0.0)).sum())
    else:
        within = int((rand_off <= band).sum())
        off = np.concatenate([rand_off[rand_off > band], np.asarray(off_extra, float)])
    sugg = suggest_tau(goal_d or [0.0], off, d if has_ram else None, ok if has_ram else None)
    verdict = ("separated" if sugg["separated"] else "NOT separated") if has_ram else "unchecked"
    pct = lambda x, q: float(np.percentile(x, q)) if x.size else float("nan")  # noqa: E731
    return {"task": task.id, "has_ram_goal": has_ram, "solution_distances": along,
            "held_distances": rep["held"] if rep else [], "noise": max(goal_d, default=0.0),
            "mid_transition": bool(rep and rep["mid_transition"]),
            "settled_distance": rep["settled_distance"] if rep else None,
            "settle_spread": rep["spread"] if rep else None,
            "random_steps": int(d.size), "random_p": {q: pct(rand_off, q) for q in (0, 1, 10, 50, 90)},
            "random_at_goal": int(rand_goal.size),
            "random_at_goal_max": float(rand_goal.max()) if rand_goal.size else None,
            "within_noise": within, "verdict": verdict, **sugg,
            "nearest": sorted(near.values(), key=lambda x: x[0]),
            "random_distances": rand_off, "random_at_goal_distances": rand_goal}


def _keep_nearest(near: dict, dists: np.ndarray, frames_of, k: int) -> None:
    """Keep in `near` (frame bytes -> (distance, frame)) the `k` nearest distinct frames seen: of the candidates
    with the smallest `dists` (inf: not a candidate), those that beat the worst kept; `frames_of(indices)`
    gives their frames (read only when needed)."""
    if k < 1:
        return
    worst = max((v[0] for v in near.values()), default=np.inf) if len(near) >= k else np.inf
    idx = [int(i) for i in np.argsort(dists, kind="stable")[:k] if dists[i] < worst]
    if not idx:
        return
    for i, frame in zip(idx, frames_of(idx), strict=True):
        key = frame.tobytes()
        if key not in near:
            near[key] = (float(dists[i]), np.array(frame, copy=True))
    while len(near) > k:
        near.pop(max(near, key=lambda key: near[key][0]))


def suggest_tau(goal_dists, off_dists, seq=None, seq_ok=None) -> dict:
    """A tau and k_consecutive from distances where the goal holds (`goal_dists`: the solution's end, the wait
    after it, random play at the goal) and where it does not (`off_dists`). tau is never below the largest goal
    distance (the goal's own noise): halfway between it and the smallest off-goal one, so the template fires at
    the goal and never on an off-goal state seen; when they overlap (no such tau), tau sits just above the goal
    and k_consecutive is one more than the longest run of off-goal steps under it in `seq` (distances [T, N];
    `seq_ok` where the goal holds), so that runs that short never fire."""
    goal_max = float(np.max(goal_dists)) if len(goal_dists) else 0.0
    off = np.asarray(off_dists, dtype=float)
    off_min = float(off.min()) if off.size else 1.0
    k = 1
    if off_min > goal_max:
        tau = (goal_max + off_min) / 2
    else:
        tau = goal_max + 1e-4
        if seq is not None and len(seq):
            under = (np.asarray(seq) < tau) & ~np.asarray(seq_ok)
            run = best = np.zeros(under.shape[1], dtype=int)
            for row in under:
                run = np.where(row, run + 1, 0)
                best = np.maximum(best, run)
            k = int(best.max()) + 1
    tau = float(np.floor(tau * 1e4) / 1e4) if tau > goal_max + 1e-4 else tau
    return {"goal_max": goal_max, "off_goal_min": off_min, "separated": off_min > goal_max,
            "suggested_tau": tau, "suggested_k_consecutive": k,
            "false_fires_at_tau": int((off < tau).sum())}
