"""Training speed: `gbxcule train` SPS (env-steps/s including inference and updates) per variant (bf16 or
fp32 autocast, torch.compile, emulator options, algorithms: `--variant a2c "--algo a2c"`), split into the
trainer's phases (PPO: env / inference / update; A2C: env / forward / backward / optimizer), beside the raw
full_step SPS of the same env count measured in the same run.
One table, one JSON artifact.

    python scripts/bench/bench_train.py --device cuda --num-envs 16384 --seconds 60 --out bench_out/train_speed.json
    python scripts/bench/bench_train.py --variant fp32 "--amp off" --variant parts4 "--set env.backend.sort_parts=4"

Each variant is a fresh `gbxcule train` process limited to `--seconds` of training; the first `--skip`
updates (compilation, warm-up) are left out of its figures. Raw SPS comes from `gbxcule bench`'s measurement
(seeded random actions, 24 frames a step) right after power-on, after `--spread-warmup` random steps from
power-on, and after as many from the task's own start (the game states training sees, without the trainer).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import check_output, write_output
from gbxcule.harness.bench import environment

DEFAULT_VARIANTS = [("bf16", "--amp bf16"), ("fp32", "--amp off"), ("bf16+compile", "--amp bf16 --compile")]


def run_variant(args, name: str, flags: str, folder: Path) -> dict:
    run_dir = folder / name.replace("/", "_")
    cmd = [sys.executable, "-m", "gbxcule", "train", "--task", args.task, "--num-envs", str(args.num_envs),
           "--device", args.device, "--time-limit", str(args.seconds), "--total-steps", str(10**12),
           "--eval-episodes", "0", "--checkpoint-every", str(10**6), "--no-progress", "--seed", "0",
           "--run-dir", str(run_dir), *(["--config", args.config] if args.config else []), *shlex.split(flags)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"name": name, "flags": flags, "error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steady = lines[args.skip:]
    if not steady:
        return {"name": name, "flags": flags, "error": f"only {len(lines)} updates in {args.seconds} s"}
    phases = sorted({k[5:-2] for m in steady for k in m if k.startswith("time_") and k.endswith("_s")} - {"eval"})
    t = {k: sum(m.get(f"time_{k}_s") or 0.0 for m in steady) for k in phases}  # env, inference/forward, update...
    total = sum(t.values())
    steps = steady[-1]["env_steps"] - (lines[args.skip - 1]["env_steps"] if args.skip else 0)
    return {"name": name, "flags": flags, "updates": len(steady),
            "sps_median": statistics.median(m["sps"] for m in steady), "sps": steps / total,
            "env_sps": steps / t["env"], "share": {k: v / total for k, v in t.items()},
            "seconds": {k: round(v, 3) for k, v in t.items()}}


def raw_sps(args) -> dict:
    from gbxcule.core.cartridge import load_rom
    from gbxcule.core.schedule import ActionSchedule
    from gbxcule.harness.bench import measure
    from gbxcule.rl.capture import bare_task
    from gbxcule.rl.env import GameEnv
    from gbxcule.rl.tasks import load_task
    from gbxcule.roms import resolve_rom

    task = load_task(args.task)
    rom = load_rom(str(resolve_rom(task.rom)))
    backend = "warp_vec_cuda" if args.device.startswith("cuda") else "warp_vec_cpu"
    sched = ActionSchedule(task.frames_per_step, task.release_after_frames)
    out = {}
    with tempfile.TemporaryDirectory(prefix="bench_train_state_") as tmp:
        # the task's own start, as GameEnv builds it (script, state files), saved from one env; random actions
        # from there: the game states the trainer's envs are in, without the trainer
        start = Path(tmp) / "start.state"
        env = GameEnv(None, 1, args.device, task=bare_task(task), info_mode="none")
        env.reset(seed=0)
        env.backend.save_state(start)
        env.close()
        for name, warmup, steps, state in (("power_on", 3, 5, None), ("spread", args.spread_warmup, 10, None),
                                           ("task_start", args.spread_warmup, 10, start)):
            r = measure(backend, rom, args.num_envs, steps, sched, task.codec, "seeded_random", 0, warmup,
                        state=str(state) if state else None, stage="full_step")
            out[name] = r.env_steps_per_s
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="leave_house")
    ap.add_argument("--config", default=None, help="a train config every variant starts from")
    ap.add_argument("--num-envs", type=int, default=16384)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seconds", type=float, default=60, help="training seconds per variant (default 60)")
    ap.add_argument("--skip", type=int, default=2, help="first updates left out (default 2)")
    ap.add_argument("--variant", nargs=2, action="append", metavar=("NAME", "FLAGS"),
                    help="a named set of extra `gbxcule train` flags (repeatable; default: bf16, fp32, bf16+compile)")
    ap.add_argument("--spread-warmup", type=int, default=100, help="random steps before the spread raw measure")
    ap.add_argument("--no-raw", action="store_true", help="skip the raw full_step measurement")
    ap.add_argument("--out", default="bench_out/train_speed.json")
    args = ap.parse_args()
    try:
        check_output(args.out, [args.config])
    except GbxculeError as exc:
        sys.stderr.write(f"bench_train: {exc}\n")
        return 2
    if args.skip < 0 or args.seconds <= 0 or args.num_envs < 1:
        sys.stderr.write("bench_train: --skip >= 0, --seconds > 0 and --num-envs >= 1\n")
        return 2
    variants = args.variant or DEFAULT_VARIANTS
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        rows = [run_variant(args, name, flags, Path(tmp)) for name, flags in variants]
    raw = {} if args.no_raw else raw_sps(args)
    data = {"task": args.task, "config": args.config, "num_envs": args.num_envs, "device": args.device,
            "seconds": args.seconds, "skip": args.skip, "variants": rows, "raw": raw, "environment": environment()}
    out = write_output(Path(args.out), json.dumps(data, indent=1), [args.config])
    print(f"{'variant':16s} {'updates':>7s} {'train sps':>10s} {'env sps':>9s}" + "".join(f" {'/ raw ' + k:>14s}"
                                                                                     for k in raw) + "  time split")
    for r in rows:
        if "error" in r:
            print(f"{r['name'][:16]:16s} failed: {r['error']}")
            continue
        split = ", ".join(f"{k} {100 * v:.1f}%" for k, v in r["share"].items())
        print(f"{r['name'][:16]:16s} {r['updates']:>7d} {r['sps']:>10,.0f} {r['env_sps']:>9,.0f}"
              + "".join(f" {100 * r['sps'] / v:>13.1f}%" for v in raw.values()) + f"  {split}")
    for k, v in raw.items():
        print(f"raw full_step {k}: {v:,.0f} env-steps/s")
    print(f"artifact: {out}")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
