"""`gbxcule devcheck`: run built-in ROMs on the CPU and CUDA devices and require identical bits."""

from __future__ import annotations

import argparse

from gbxcule.core.schedule import ActionSchedule
from gbxcule.harness.devcheck import compare_devices
from gbxcule.roms import suite


def register(sub) -> None:
    p = sub.add_parser("devcheck", help="check that CUDA and CPU give bit-identical results (needs a GPU)",
                       description="Run built-in ROMs on warp_vec_cpu and warp_vec_cuda with many envs and "
                                   "seeds; after every step compare all state, memory, frames, observations "
                                   "and rewards. Exit 0 when everything is identical.")
    p.add_argument("roms", nargs="*", help="built-in ROM names (default: all)")
    p.add_argument("--envs", type=int, default=64, help="envs per run (default 64)")
    p.add_argument("--steps", type=int, default=6, help="steps per run (default 6)")
    p.add_argument("--seeds", default="0,1", help="comma-separated action seeds (default 0,1)")
    p.add_argument("--frames-per-step", type=int, default=24, help="frames per step (default 24)")
    p.add_argument("--device", default="cuda", help="device compared with the CPU (default cuda)")
    p.add_argument("--loop", default="auto", choices=("auto", "nested", "flat"),
                   help="the compared device's instruction loop (default auto: nested until the sort tuner's first "
                        "trial at step 12; flat checks the flat kernel from the first step)")
    p.add_argument("--stream-groups", type=stream_groups_arg, default="auto",
                   help="the compared device's stream_groups (default auto; 2: every launch in 2 groups)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def stream_groups_arg(text: str) -> int | str:
    """--stream-groups: "auto" or a group count (`parse_stream_groups`)."""
    from gbxcule.backends.warp_vec import parse_stream_groups

    try:
        return parse_stream_groups(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args) -> int:
    from gbxcule.cli.report import emit

    seeds = [int(s) for s in args.seeds.split(",") if s]
    schedule = ActionSchedule(args.frames_per_step, min(8, args.frames_per_step))
    results = [compare_devices(name, args.envs, args.steps, seed, schedule, device=args.device, loop=args.loop,
                               stream_groups=args.stream_groups)
               for name in (args.roms or list(suite())) for seed in seeds]
    ok = all(r.ok for r in results)
    emit(args, {"ok": ok, "results": [r.to_dict() for r in results]},
         lambda d: "\n".join([f"{'ok ' if r['ok'] else 'BAD'} {r['rom']:22s} seed {r['seed']} {r['envs']} envs "
                              f"{r['steps_compared']} steps {r['first_difference'] or ''}" for r in d["results"]]
                             + [f"{args.device} == cpu on every run" if d["ok"] else "DIFFERENCES FOUND"]))
    return 0 if ok else 1
