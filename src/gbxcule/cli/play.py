"""`gbxcule play ROM`: run envs under an action generator and report what they did.

`--record out.gif` draws the last frame of every step of one env into an animated GIF (run with
`--frames-per-step 1` to keep every frame); `--mosaic out.png` tiles every env's last screen into one PNG.
Both need a warp backend (docs/rendering.md). `--script "N10 S N2"` plays a button script in every env instead
of an action generator (e.g. to get past a title screen and `--save-state` a start state).

`--task T` starts every env from an RL task's start (its script from power-on, played before the counted steps)
and reports, per condition of the task (its RAM goal, each milestone, its fail state), how many envs met it and
the first step one did; `--steps` defaults to the task's step limit, so `--envs 64` measures how far seeded random
play gets in an episode. `--actions solution` plays the task's solution (`--steps`: its length), e.g. with
`--record`.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

from gbxcule.backends import load_start_state, make_backend
from gbxcule.cli import checks
from gbxcule.cli.common import add_run_args, add_state_arg, schedule_from
from gbxcule.core.action_codec import DEFAULT_CODEC, get_codec
from gbxcule.core.errors import GbxculeError
from gbxcule.core.memory import FRAME_BYTES
from gbxcule.core.outputs import write_output
from gbxcule.core.screen import mosaic, write_gif, write_png
from gbxcule.harness.actions import SOLUTION, make_action_gen, script_action_gen


def register(sub) -> None:
    p = sub.add_parser("play", help="run envs on a ROM with generated actions and report the outcome",
                       description="Run N envs for K steps under an action generator; report speed and "
                                   "where each env ended up.")
    p.add_argument("rom", help="ROM file or built-in ROM name")
    add_run_args(p, steps=None, actions=(SOLUTION,), codec=None)
    add_state_arg(p)
    p.add_argument("--record", metavar="GIF",
                   help="write one env's screen after every step as an animated GIF")
    p.add_argument("--record-env", type=int, default=0, help="the env --record follows (default 0)")
    p.add_argument("--mosaic", metavar="PNG", help="write every env's last screen, tiled, as a PNG")
    p.add_argument("--script", metavar="SCRIPT",
                   help='play this button script in every env, e.g. "N10 S N2" (letters N A B S E U D L R with '
                        "repeat counts, as task scripts); --steps becomes its length")
    p.add_argument("--task", help="start every env from this RL task's start (name or pack.toml:name) and report "
                                  "how many envs met its goal, each milestone and its fail state; --steps defaults "
                                  f"to its step limit; --actions {SOLUTION} plays its solution (--steps: its length)")
    p.add_argument("--save-state", metavar="FILE",
                   help="save the final state as a gbxcule snapshot (a start state for GameEnv or --state)")
    p.add_argument("--save-envs", default="0", metavar="0|all",
                   help="the envs --save-state saves: 0 (env 0, default), all, or an env index")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _text(d: dict) -> str:
    lines = [f"{d['backend']}: {d['envs']} envs x {d['steps']} steps x {d['frames_per_step']} frames; "
             f"{d['timed_steps']} timed steps in {d['seconds']:.2f} s (first step apart, {d['first_step_s']:.2f} s): "
             f"{d['env_steps_per_s']:.1f} env-steps/s, {d['frames_per_s']:.0f} frames/s"]
    for e in d["final"][:8]:
        lines.append(f"  env {e['env']:3d}: pc=${e['pc']:04X} wram sha1 {e['wram_sha1'][:12]}")
    if len(d["final"]) > 8:
        lines.append(f"  ... {len(d['final']) - 8} more envs")
    lines += [f"{what}: {d[what]}" for what in ("record", "mosaic", "save_state") if d[what]]
    if d["task"]:
        t = d["task"]
        met = lambda c: f"{c['envs']}/{d['envs']}" + (f" (first at step {c['first_step']})" if c["envs"] else "")  # noqa: E731
        lines.append(f"task {t['id']}: goal met by {met(t['goal'])}"
                     + (f"; fail state by {met(t['fail'])}" if t["fail"] else ""))
        lines += [f"  milestone {m['name']:12s} {met(m)}" for m in t["milestones"]]
    return "\n".join(lines)


def run(args) -> int:
    from gbxcule.cli.report import emit

    task = _task(args)
    checks.positive(envs=args.envs, steps=args.steps)
    codec = get_codec(args.codec or (task.codec if task else DEFAULT_CODEC))
    schedule = schedule_from(args)
    if task is not None and (schedule.frames_per_step, schedule.release_after_frames) != (
            task.frames_per_step, task.release_after_frames):
        raise GbxculeError(f"task {task.id} is defined with {task.frames_per_step} frames a step and buttons held "
                           f"{task.release_after_frames}; drop --frames-per-step and --release-after-frames")
    if (args.record or args.mosaic or args.save_state) and not args.backend.startswith("warp"):
        raise GbxculeError("--record, --mosaic and --save-state need a warp backend (warp_vec_cpu or warp_vec_cuda)")
    save_envs = None
    if args.save_state:
        if args.save_envs != "all" and not (args.save_envs.isdigit() and int(args.save_envs) < args.envs):
            raise GbxculeError(f"--save-envs must be all or an env index below --envs, got {args.save_envs!r}")
        save_envs = None if args.save_envs == "all" else [int(args.save_envs)]
    if args.record and not 0 <= args.record_env < args.envs:
        raise GbxculeError("--record-env must be within --envs")
    rom_path = checks.rom_path(args.rom)
    inputs = (rom_path, args.state)
    checks.check_outputs([args.record, args.mosaic, args.save_state], inputs)
    rom = checks.rom_file(args.rom, "play")
    if args.steps is None and task is not None:  # a task's solution, else its step limit
        args.steps = len(task.solution or ()) if args.actions == SOLUTION else task.step_limit
    args.steps = 100 if args.steps is None else args.steps
    host = FRAME_BYTES * (args.steps if args.record else 0) + (FRAME_BYTES * 2 if args.mosaic else 0)
    checks.env_memory(args.backend, args.envs, rom, render=bool(args.record or args.mosaic),
                      host_per_env=host + 64)
    if args.script is not None:
        from gbxcule.rl.tasks import parse_script

        script = parse_script(args.script, codec)
        if not script:
            raise GbxculeError("--script plays no action")
        args.steps, args.actions = len(script), "script"
        gen = script_action_gen(script, codec, args.envs)
    elif args.actions == SOLUTION and task is not None:  # (without a task, _task refused it)
        gen = script_action_gen(task.solution or (), codec, args.envs)
    else:
        gen = make_action_gen(args.actions, codec, args.envs, args.seed, args.fixed_action)
    backend = make_backend(args.backend, str(rom_path), num_envs=args.envs, codec=codec, schedule=schedule)
    recorded = []
    try:
        backend.reset(args.seed)
        if args.state:
            load_start_state(backend, args.state)
        watch = TaskWatch(task, backend, args.envs) if task else None
        if watch is not None:
            for a in watch.task.start.script:
                backend.step(np.full(args.envs, a, dtype=np.int32))
            watch.look(-1)
        t0 = t1 = time.perf_counter()
        for k in range(args.steps):
            if args.record or (args.mosaic and k == args.steps - 1):
                backend.step(gen(k), render=True)
            else:
                backend.step(gen(k))
            if watch:
                watch.look(k)
            if args.record:
                recorded.append(backend.frames_host(args.record_env))
            if k == 0:  # the first step compiles kernels on a cold cache: it is reported apart
                t1 = time.perf_counter()
        t2 = time.perf_counter()
        first_step_s = t1 - t0
        timed_steps = args.steps - 1 if args.steps > 1 else args.steps
        seconds = t2 - t1 if args.steps > 1 else t2 - t0
        if args.mosaic:
            write_output(args.mosaic, lambda p: write_png(mosaic(backend.frames_host()), p), inputs)
        if args.record:
            frame_ms = max(20, round(schedule.frames_per_step * 1000 / 59.7275))
            write_output(args.record, lambda p: write_gif(recorded, p, frame_ms), inputs)
        if args.save_state:
            write_output(args.save_state, backend.save_state(envs=save_envs), inputs)
        final = [{"env": e, "pc": backend.get_cpu_state(e).pc,
                  "wram_sha1": hashlib.sha1(backend.read_memory(e, 0xC000, 0xE000).tobytes()).hexdigest()}
                 for e in range(args.envs)]
    finally:
        backend.close()
    env_steps = args.envs * timed_steps
    emit(args, {
        "backend": args.backend, "rom": args.rom, "envs": args.envs, "steps": args.steps,
        "codec": codec.describe(), "schedule": schedule.describe(), "actions": args.actions, "seed": args.seed,
        "frames_per_step": schedule.frames_per_step, "seconds": seconds, "timed_steps": timed_steps,
        "first_step_s": first_step_s,
        "env_steps_per_s": env_steps / seconds if seconds > 0 else 0.0,
        "frames_per_s": env_steps * schedule.frames_per_step / seconds if seconds > 0 else 0.0,
        "final": final, "record": args.record, "mosaic": args.mosaic, "save_state": args.save_state,
        "task": watch.report() if watch else None,
    }, _text)
    return 0


def _task(args):
    """The task of --task (None without one); --actions solution without a task, a task that starts from
    states, or another ROM or codec than the task's, is one error line."""
    if args.task is None:
        if args.actions == SOLUTION:
            raise GbxculeError(f"--actions {SOLUTION} plays a task's solution: give --task")
        return None
    from gbxcule.rl.tasks import load_task
    from gbxcule.roms import canonical

    task = load_task(args.task)
    if args.script is not None:
        raise GbxculeError("--script and --task both give the actions: use one")
    if task.start.states or task.start.generator:
        raise GbxculeError(f"task {task.id} starts from states or a generator; play starts tasks from their script")
    if args.state:
        raise GbxculeError("--task starts from the task's start: drop --state")
    if task.rom is not None and canonical(args.rom) not in (None, canonical(task.rom)):
        raise GbxculeError(f"task {task.id} is for the built-in ROM {task.rom}, not {args.rom}")
    if args.codec is not None and args.codec != task.codec:
        raise GbxculeError(f"task {task.id} is defined with codec {task.codec}, not {args.codec}")
    if args.actions == SOLUTION and not task.solution:
        raise GbxculeError(f"task {task.id} has no solution to play")
    return task


class TaskWatch:
    """Per env and condition of a task (its RAM goal, each RAM milestone, its fail state): whether it held after some
    step, and the first step it did (-1: at the start). Screen milestones (templates) are the env's to test."""

    def __init__(self, task, backend, num_envs: int):
        self.task, self.backend, self.n = task, backend, num_envs
        self.ram_milestones = [m for m in task.milestones if m.condition is not None]
        self.conds = {"goal": task.goal_ram, "fail": task.fail_ram,
                      **{f"milestone:{m.name}": (m.condition,) for m in self.ram_milestones}}
        self.met = {k: np.zeros(num_envs, dtype=bool) for k in self.conds}
        self.first = dict.fromkeys(self.conds)

    def _bytes(self, addr: int) -> np.ndarray:
        if 0xE000 <= addr <= 0xFDFF:  # echo RAM
            addr -= 0x2000
        if hasattr(self.backend, "wram_bytes") and 0xC000 <= addr < 0xE000:
            return self.backend.wram_bytes(addr)
        return np.array([self.backend.read_memory(e, addr, addr + 1)[0] for e in range(self.n)], dtype=np.uint8)

    def look(self, step: int) -> None:
        cache: dict[int, np.ndarray] = {}
        for key, conds in self.conds.items():
            if not conds:
                continue
            ok = np.ones(self.n, dtype=bool)
            for c in conds:
                v = cache.setdefault(c.addr, self._bytes(c.addr)).astype(np.int32) & c.mask
                ok &= {"eq": v == c.value, "ne": v != c.value, "ge": v >= c.value, "gt": v > c.value,
                       "le": v <= c.value, "lt": v < c.value}[c.op]
            if ok.any() and self.first[key] is None:
                self.first[key] = step
            self.met[key] |= ok

    def report(self) -> dict:
        one = lambda k: {"envs": int(self.met[k].sum()), "first_step": self.first[k]}  # noqa: E731
        return {"id": self.task.id, "goal": one("goal"), "fail": one("fail") if self.task.fail_ram else None,
                "milestones": [{"name": m.name, **one(f"milestone:{m.name}")} for m in self.ram_milestones]}
