"""`gbxcule play ROM`: run envs under an action generator and report what they did."""

from __future__ import annotations

import hashlib
import time

from gbxcule.backends import make_backend
from gbxcule.cli.common import add_run_args, schedule_from
from gbxcule.core.action_codec import get_codec
from gbxcule.harness.actions import make_action_gen
from gbxcule.roms import resolve_rom


def register(sub) -> None:
    p = sub.add_parser("play", help="run envs on a ROM with generated actions and report the outcome",
                       description="Run N envs for K steps under an action generator; report speed and "
                                   "where each env ended up.")
    p.add_argument("rom", help="ROM file or built-in ROM name")
    add_run_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _text(d: dict) -> str:
    lines = [f"{d['backend']}: {d['envs']} envs x {d['steps']} steps x {d['frames_per_step']} frames "
             f"in {d['seconds']:.2f} s: {d['env_steps_per_s']:.1f} env-steps/s, {d['frames_per_s']:.0f} frames/s"]
    for e in d["final"][:8]:
        lines.append(f"  env {e['env']:3d}: pc=${e['pc']:04X} wram sha1 {e['wram_sha1'][:12]}")
    if len(d["final"]) > 8:
        lines.append(f"  ... {len(d['final']) - 8} more envs")
    return "\n".join(lines)


def run(args) -> int:
    from gbxcule.cli.main import emit

    if args.envs < 1 or args.steps < 0:
        raise ValueError("--envs must be >= 1 and --steps >= 0")
    codec = get_codec(args.codec)
    schedule = schedule_from(args)
    gen = make_action_gen(args.actions, codec, args.envs, args.seed, args.fixed_action)
    backend = make_backend(args.backend, str(resolve_rom(args.rom)), num_envs=args.envs, codec=codec,
                           schedule=schedule)
    try:
        backend.reset(args.seed)
        t0 = time.perf_counter()
        for k in range(args.steps):
            backend.step(gen(k))
        seconds = time.perf_counter() - t0
        final = [{"env": e, "pc": backend.get_cpu_state(e).pc,
                  "wram_sha1": hashlib.sha1(backend.read_memory(e, 0xC000, 0xE000).tobytes()).hexdigest()}
                 for e in range(args.envs)]
    finally:
        backend.close()
    env_steps = args.envs * args.steps
    emit(args, {
        "backend": args.backend, "rom": args.rom, "envs": args.envs, "steps": args.steps,
        "codec": codec.describe(), "schedule": schedule.describe(), "actions": args.actions, "seed": args.seed,
        "frames_per_step": schedule.frames_per_step, "seconds": seconds,
        "env_steps_per_s": env_steps / seconds if seconds > 0 else 0.0,
        "frames_per_s": env_steps * schedule.frames_per_step / seconds if seconds > 0 else 0.0,
        "final": final,
    }, _text)
    return 0
