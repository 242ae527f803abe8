"""Goal templates captured on the emulator: run one env from a task's start through an action script (default:
the task's solution) and keep its last observation (`capture`); the template a task names (`task_template`:
a file, or "solution", captured on first use and cached). The other goal-template tools (calibrate, the
`gbxcule goal` commands) are in rl/templates.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np

from gbxcule.core.errors import GbxculeError
from gbxcule.rl.goals import GoalTemplate, RamGoal, TemplateMeta, unpack_shades
from gbxcule.rl.starts import build_starts, check_obs, device_names, open_backend, start_spec
from gbxcule.rl.tasks import StartSpec, Task


def bare_task(task: Task) -> Task:
    """The task with no goal: nothing ends an episode but the step limit."""
    return dataclasses.replace(task, template=None, goal_ram=())


def capture_task(task: Task, start_states=None) -> Task:
    """The task with the one start `capture` and `replay` play actions from: the task's start (or
    `start_states`) without a start-state generator. A generator's starts are its base state (the script's end,
    or the state file) plus a seeded random number of random (or NOOP, or solution) steps; actions that reach
    the goal from the task's start begin at that base, the deterministic state every generated start grows
    from."""
    spec = start_spec(task, start_states)
    return dataclasses.replace(task, start=StartSpec(spec.script, spec.states))


def describe_start(task: Task, start_states=None) -> str:
    """Where `capture` starts, in words (for its report)."""
    if start_states not in (None, "power_on"):
        return f"state {start_states[0] if isinstance(start_states, list | tuple) else start_states}"
    if start_states == "power_on" or task.start == StartSpec():
        return "power-on"
    gen = task.start.generator
    return f"{task.id}'s start" + (f" (its {gen} generator's extra steps left out)" if gen else "")


def template_meta(backend, stack_k: int, obs: str, task: str = "") -> TemplateMeta:
    """The config a goal template must have been captured under to fit envs on `backend` with this stack and
    observation format."""
    s = backend.schedule
    return TemplateMeta(backend.rom.info.sha1, backend.codec.name, backend.codec.version, s.frames_per_step,
                        s.release_after_frames, stack_k, obs, task, view=backend.obs_view)


def capture(task: Task, actions=None, rom=None, device: str = "cpu", stack_k: int = 1, obs: str = "pixels",
            mask: np.ndarray | None = None, start_states=None, view: str = "stride") -> tuple[GoalTemplate, dict]:
    """Run `actions` (default: the task's solution) from the task's start (or `start_states`; it must be
    one state) in one env and take the last frame as the goal: the observation a `GameEnv` with the same
    settings shows there. Returns the template and a report (steps, whether the RAM goal holds there, the
    full screen)."""
    actions = tuple(task.solution or ()) if actions is None else tuple(int(a) for a in actions)
    if not actions:
        raise GbxculeError(f"task {task.id} has no solution: give the actions that reach the goal")
    check_obs(stack_k, obs)
    tdev, wdev = device_names(device)
    be = open_backend(bare_task(task), rom, 1, wdev, packed=obs == "packed", obs_view=view)
    try:
        slots = build_starts(be, capture_task(task, start_states).start, 0, task.base_dir)
        if slots != 1:
            raise GbxculeError(f"capture needs one start state, and the task's start has {slots}: give "
                               f"the one to capture from with --start-state FILE (a state file, e.g. saved by "
                               f"gbxcule play --script ... --save-state FILE)")
        be.restore(np.ones(1, dtype=np.int32), np.zeros(1, dtype=np.int32))
        for a in actions:
            be.step(np.array([a], dtype=np.int32))
        latest = be.obs.numpy()
        frame = unpack_shades(latest)[0] if obs == "packed" else latest[0].copy()
        holds = None
        if task.goal_ram:
            import warp as wp

            ram = wp.to_torch(be.ram).t()  # [bytes, envs], as the env reads it
            holds = bool(RamGoal(task.goal_ram, be.layout, tdev).evaluate(ram)[0].item())
        full = be.frames_host(0)
        where = describe_start(task, start_states)
        meta = dataclasses.replace(template_meta(be, stack_k, obs, task.name), tau=task.reward.get("tau"),
                                   k_consecutive=task.reward.get("k_consecutive"),
                                   note=f"captured after {len(actions)} steps from {where}")
    finally:
        be.close()
    tpl = GoalTemplate(frame, np.ones((72, 80), dtype=bool) if mask is None else mask, meta)
    return tpl, {"steps": len(actions), "ram_goal_holds": holds, "full_frame": full, "start": where}


def capture_code_digest() -> str:
    """SHA-1 of the sources that shape a captured frame: the kernels, the backend, the start states and this
    module."""
    import gbxcule

    root = Path(gbxcule.__file__).resolve().parent
    h = hashlib.sha1()
    for path in sorted([*(root / "kernels").rglob("*.py"), root / "backends" / "warp_vec.py",
                        root / "rl" / "starts.py", root / "rl" / "capture.py"]):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def task_template(task: Task, meta: TemplateMeta, device: str = "cpu") -> GoalTemplate:
    """The template a task names: a file (relative to its pack), or "solution": captured from the solution's
    last frame, cached by the task, the env config and the code that captured it."""
    if task.template != "solution":
        p = Path(task.template)
        return GoalTemplate.load(p if p.is_absolute() else Path(task.base_dir) / p)
    from gbxcule.core.paths import cache_dir

    key = json.dumps({"task": dataclasses.asdict(bare_task(task)) | {"base_dir": "", "description": "", "reward": {}},
                      "meta": dataclasses.asdict(meta) | {"tau": None, "k_consecutive": None},
                      "code": capture_code_digest()}, sort_keys=True, default=str)
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    path = cache_dir() / "templates" / f"{task.pack}-{task.name}-{digest}.npz"
    if path.is_file():
        try:
            return GoalTemplate.load(path)
        except GbxculeError:
            path.unlink(missing_ok=True)  # a damaged cache entry: capture again
    # on the env's device: the same bits as on the CPU, and a GPU machine builds no CPU-device kernels for it
    tpl, report = capture(task, device=device, stack_k=meta.stack_k, obs=meta.obs, view=meta.view)
    if report["ram_goal_holds"] is False:
        raise GbxculeError(f"task {task.id}: its solution does not reach the RAM goal, so no template")
    tpl.save(path)
    return tpl
