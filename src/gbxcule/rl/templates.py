"""Goal-template tools: capture a template at a task's goal, calibrate tau, and the built-in tasks' templates.

Templates are never committed: the built-in tasks' come from their scripted solutions, captured on first
use into the cache (`cache_dir()/templates`, keyed by everything that shapes the frames) by the same code
as `gbxcule goal capture`.
"""

from __future__ import annotations

import numpy as np

from gbxcule.rl.env import _bare, capture, task_template
from gbxcule.rl.goals import GoalTemplate, RamGoal
from gbxcule.rl.tasks import Task

__all__ = ["calibrate", "capture", "task_template"]


def calibrate(task: Task, template: GoalTemplate, num_envs: int = 64, steps: int | None = None,
              device: str = "cpu", seed: int = 0, rom=None) -> dict:
    """Distances to `template` along the task's solution and along random play (RAM goal states apart), and
    a suggested tau and k_consecutive: tau halfway between the largest distance where the goal holds and the
    1st percentile of random play where it does not."""
    import torch

    from gbxcule.rl.env import GameEnv

    along = []
    if task.solution:
        env = GameEnv(rom, 1, device, task=_bare(task), goal=template, stack_k=template.meta.stack_k,
                      obs=template.meta.obs, info_mode="none", max_steps=len(task.solution) + 1,
                      reward={"terminate_on": "auto", "tau": 0.0})
        env.reset(seed=0)
        for a in task.solution:
            env.step(np.array([a], dtype=np.int32))
            along.append(float(env.distance[0].item()))
        env.close()
    steps = steps or min(task.step_limit, 200)
    env = GameEnv(rom, num_envs, device, task=_bare(task), goal=template, stack_k=template.meta.stack_k,
                  obs=template.meta.obs, info_mode="none", max_steps=steps + 1, reward={"tau": 0.0})
    goal = RamGoal(task.goal_ram, env.backend.layout, env.device) if task.goal_ram else None
    env.reset(seed=seed)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    rand, at_goal = [], []
    for _ in range(steps):
        a = torch.randint(0, env.num_actions, (num_envs,), generator=gen, dtype=torch.int32)
        env.step(a.to(env.device))
        d = env.distance.cpu().numpy().copy()
        ok = goal.evaluate(env._ram).cpu().numpy() if goal is not None else np.zeros(num_envs, bool)
        rand.append(d[~ok])
        at_goal.append(d[ok])
    env.close()
    rand_d = np.concatenate(rand) if rand else np.zeros(0)
    goal_d = np.concatenate(at_goal) if at_goal else np.zeros(0)
    goal_max = max([along[-1]] if along else [0.0] + list(goal_d[:0]))
    low = float(np.percentile(rand_d, 1)) if rand_d.size else 1.0
    tau = round((goal_max + low) / 2, 4)
    pct = lambda x, q: float(np.percentile(x, q)) if x.size else float("nan")  # noqa: E731
    return {"task": task.id, "solution_distances": along, "random_steps": int(rand_d.size),
            "random_p": {q: pct(rand_d, q) for q in (0, 1, 10, 50, 90)},
            "random_at_goal": int(goal_d.size), "goal_max": goal_max, "suggested_tau": tau,
            "suggested_k_consecutive": 1, "false_fires_at_tau": int((rand_d < tau).sum()),
            "random_distances": rand_d}
