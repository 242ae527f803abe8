"""Goal-template tools: capture a template at a task's goal, calibrate tau, and the built-in tasks' templates.

Templates are never committed: the built-in tasks' come from their scripted solutions, captured on first
use into the cache (`cache_dir()/templates`, keyed by everything that shapes the frames) by the same code
as `gbxcule goal capture`.
"""

from __future__ import annotations

import numpy as np

from gbxcule.rl.capture import bare_task, capture, task_template
from gbxcule.rl.env import GameEnv
from gbxcule.rl.goals import GoalTemplate, RamGoal
from gbxcule.rl.tasks import Task

__all__ = ["calibrate", "capture", "suggest_tau", "task_template"]


def calibrate(task: Task, template: GoalTemplate, num_envs: int = 64, steps: int | None = None,
              device: str = "cpu", seed: int = 0, rom=None, start_states=None) -> dict:
    """Distances to `template` along the task's solution and along `num_envs` x `steps` of uniform random
    play from the task's start (or `start_states`, e.g. ("solution", K): random play all along the route, which
    finds look-alikes near the goal that play from the start rarely reaches), split by whether the task's RAM
    goal holds, and a suggested tau and k_consecutive (`suggest_tau`). Nothing ends an episode early here: tau
    is set to 0 while measuring."""
    import torch


    goal_of = lambda env: (RamGoal(task.goal_ram, env.backend.layout, env.device) if task.goal_ram  # noqa: E731
                           else None)
    along, along_off = [], []
    kw = dict(task=bare_task(task), goal=template, stack_k=template.meta.stack_k, obs=template.meta.obs,
              info_mode="none", reward={"tau": 0.0, "terminate_on": "template"})
    if task.solution:
        env = GameEnv(rom, 1, device, max_steps=len(task.solution) + 1, **kw)
        goal = goal_of(env)
        env.reset(seed=0)
        for a in task.solution:
            env.step(np.array([a], dtype=np.int32))
            along.append(float(env.distance[0].item()))
            if goal is None or not bool(goal.evaluate(env._ram)[0].item()):
                along_off.append(along[-1])
        env.close()
    steps = steps or min(task.step_limit, 200)
    env = GameEnv(rom, num_envs, device, max_steps=steps + 1, start_states=start_states, seed=seed, **kw)
    goal = goal_of(env)
    env.reset(seed=seed)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    seq, seq_ok = [], []
    for _ in range(steps):
        a = torch.randint(0, env.num_actions, (num_envs,), generator=gen, dtype=torch.int32)
        env.step(a.to(env.device))
        seq.append(env.distance.cpu().numpy().copy())
        seq_ok.append(goal.evaluate(env._ram).cpu().numpy() if goal is not None else np.zeros(num_envs, bool))
    env.close()
    d, ok = np.stack(seq), np.stack(seq_ok)
    rand_d, goal_d = d[~ok], d[ok]
    sugg = suggest_tau(along[-1:] if along else [0.0], np.concatenate([rand_d, np.asarray(along_off, float)]), d, ok)
    pct = lambda x, q: float(np.percentile(x, q)) if x.size else float("nan")  # noqa: E731
    return {"task": task.id, "solution_distances": along, "random_steps": int(d.size),
            "random_p": {q: pct(rand_d, q) for q in (0, 1, 10, 50, 90)},
            "random_at_goal": int(goal_d.size), "random_at_goal_max": float(goal_d.max()) if goal_d.size else None,
            **sugg, "random_distances": rand_d, "random_at_goal_distances": goal_d}


def suggest_tau(goal_dists, off_dists, seq=None, seq_ok=None) -> dict:
    """A tau and k_consecutive from distances where the goal holds (`goal_dists`: the solution's end) and
    where it does not (`off_dists`: random play and the solution's earlier steps). tau is halfway between the
    largest goal distance and the smallest off-goal one, so the template fires at the goal and never on an
    off-goal state seen; when they overlap (no such tau), tau sits just above the goal and k_consecutive
    is one more than the longest run of off-goal steps under it in `seq` (distances [T, N]; `seq_ok` where
    the goal holds), so that runs that short never fire."""
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
