"""Goal-template tools: capture a template at a task's goal, calibrate tau, and the built-in tasks' templates.

Templates are never committed: the built-in tasks' come from their scripted solutions, captured on first
use into the cache (`cache_dir()/templates`, keyed by everything that shapes the frames) by the same code
as `gbxcule goal capture`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np

from gbxcule.core.errors import GbxculeError
from gbxcule.rl.goals import GoalTemplate, RamGoal, TemplateMeta, unpack_shades
from gbxcule.rl.tasks import Task


def _bare(task: Task) -> Task:
    """The task with no goal: nothing ends an episode but the step limit."""
    return dataclasses.replace(task, template=None, goal_ram=())


def capture(task: Task, actions=None, rom=None, device: str = "cpu", stack_k: int = 1, obs: str = "pixels",
            mask: np.ndarray | None = None, start_states=None) -> tuple[GoalTemplate, dict]:
    """Run `actions` (default: the task's solution) from the task's first start slot in one env and take the
    last frame as the goal. Returns the template and a report (steps, whether the RAM goal holds there)."""
    from gbxcule.rl.env import GameEnv

    actions = tuple(task.solution or ()) if actions is None else tuple(int(a) for a in actions)
    if not actions:
        raise GbxculeError(f"task {task.id} has no solution: give the actions that reach the goal")
    env = GameEnv(rom, 1, device, task=_bare(task), start_states=start_states, stack_k=stack_k, obs=obs,
                  info_mode="none", max_steps=len(actions) + 1)
    env.reset(seed=0)
    if env.num_slots != 1:
        env = None
        raise GbxculeError("capture needs a single start state (the task's start has several)")
    for a in actions:
        env.step(np.array([a], dtype=np.int32))
    latest = env.obs[:, -1].cpu().numpy()
    frame = unpack_shades(latest)[0] if obs == "packed" else latest[0]
    holds = None
    if task.goal_ram:
        holds = bool(RamGoal(task.goal_ram, env.backend.layout, env.device).evaluate(env._ram)[0].item())
    meta = dataclasses.replace(env.template_meta(task.name), tau=task.reward.get("tau"),
                               k_consecutive=task.reward.get("k_consecutive"),
                               note=f"captured after {len(actions)} steps from {task.id}'s start")
    full = env.frames([0])[0]
    env.close()
    tpl = GoalTemplate(frame, np.ones((72, 80), dtype=bool) if mask is None else mask, meta)
    return tpl, {"steps": len(actions), "ram_goal_holds": holds, "full_frame": full}


def task_template(task: Task, meta: TemplateMeta, device: str = "cpu") -> GoalTemplate:
    """The template a task names: a file (relative to its pack), or "solution": captured from the solution's
    last frame, cached by the task, the env config and the code that captured it."""
    from pathlib import Path

    if task.template != "solution":
        p = Path(task.template)
        return GoalTemplate.load(p if p.is_absolute() else Path(task.base_dir) / p)
    from gbxcule.core.paths import cache_dir

    key = json.dumps({"task": dataclasses.asdict(_bare(task)) | {"base_dir": ""}, "meta": dataclasses.asdict(meta),
                      "solution": task.solution}, sort_keys=True, default=str)
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    path = cache_dir() / "templates" / f"{task.pack}-{task.name}-{digest}.npz"
    if path.is_file():
        try:
            return GoalTemplate.load(path)
        except GbxculeError:
            path.unlink(missing_ok=True)  # a damaged cache entry: capture again
    tpl, report = capture(task, device="cpu", stack_k=meta.stack_k, obs=meta.obs)
    if report["ram_goal_holds"] is False:
        raise GbxculeError(f"task {task.id}: its solution does not reach the RAM goal, so no template")
    tpl.save(path)
    return tpl


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
