"""The state archive's cost and its exploration (docs/training.md "State archive"; BENCHMARKS.md).

    python scripts/bench_archive.py cost --config configs/talk_to_hiker_archive.toml --envs 16384 --device cuda
    python scripts/bench_archive.py explore --config configs/talk_to_hiker_archive.toml --envs 16384 --device cuda \\
        --steps 1500 --runs bench_out/learning/hiker_archive_s0 bench_out/learning/hiker_novelty_s0

`cost`: env-steps/s of the env as its task defines it (goals, step limit, episodes ending and restarting; random
actions drawn on the device), with the config's `[env.archive]` table and spread clocks, and without them, in
turn, `--repeat` times each (rl/bench_env.py kind `env_task`); prints a table and the slowdown, writes JSON.

`explore`: distinct cells reached against env-steps under random actions, from the task's start only
("random": the archive counts cells but never starts an episode) and with starts from the archive ("archive");
`--runs` adds training runs' `archive/cells` curves from their metrics.jsonl (a run without an archive of its own
can count cells with `--set env.archive.p_start=1.0`, e.g. a novelty run). Prints a table, writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def env_section(args) -> dict:
    """The config file's [env] section with the task and archive the command line asks for."""
    from gbxcule.rl.shell import read_toml

    env = dict(read_toml(args.config).get("env", {})) if args.config else {}
    if args.task:
        env["task"] = args.task
    env.setdefault("task", "talk_to_hiker")
    if not env.get("archive"):
        env["archive"] = {"capacity": 4096}
    return env


def cost(args) -> dict:
    from gbxcule.core.action_codec import get_codec
    from gbxcule.core.cartridge import load_rom
    from gbxcule.core.schedule import ActionSchedule
    from gbxcule.rl.bench_env import measure_env
    from gbxcule.rl.tasks import load_task
    from gbxcule.roms import resolve_rom

    e = env_section(args)
    task = load_task(e["task"])
    rom = load_rom(resolve_rom(task.rom))
    codec, schedule = get_codec(task.codec), ActionSchedule(task.frames_per_step, task.release_after_frames)
    variants = {"off": {}, "archive": {"archive": e["archive"], "spread_clocks": True}}
    rows = []
    for rep in range(args.repeat):
        for name, opts in variants.items():
            r = measure_env("env_task", args.envs, args.steps, args.warmup, rom, codec, schedule, device=args.device,
                            task=task, info_mode="none", seed=args.seed + rep, env_options=opts)
            rows.append({"variant": name, "repeat": rep, **r})
            print(f"{name:8s} repeat {rep}: {r['env_steps_per_s']:12,.0f} env-steps/s "
                  f"({r.get('archive_cells', '-')} cells)", flush=True)
    med = {name: statistics.median(r["env_steps_per_s"] for r in rows if r["variant"] == name) for name in variants}
    slowdown = 1.0 - med["archive"] / med["off"]
    print(f"\n{'variant':10s} {'env-steps/s (median)':>22s}\n{'off':10s} {med['off']:22,.0f}\n"
          f"{'archive':10s} {med['archive']:22,.0f}\narchive cost: {100 * slowdown:.1f}% slower "
          f"({args.envs:,} envs, {task.id}, {args.device})")
    return {"mode": "cost", "task": task.id, "envs": args.envs, "archive": e["archive"], "rows": rows,
            "median_sps": med, "slowdown": slowdown}


def explore_curves(args) -> dict:
    import torch

    from gbxcule.rl.env import GameEnv
    from gbxcule.rl.plot import read_metrics

    e = env_section(args)
    table = dict(e["archive"])
    curves: dict[str, list] = {}
    for name, arch in (("random", {**table, "p_start": 1.0, "swarm": 0.0}), ("archive", table)):
        env = GameEnv(num_envs=args.envs, device=args.device, task=e["task"], start_states=e.get("start_states"),
                      seed=args.seed, info_mode="none", archive=arch, spread_clocks=True)
        env.reset(seed=args.seed)
        gen = torch.Generator(device=env.device).manual_seed(args.seed)
        pts, t0 = [], time.perf_counter()
        for t in range(1, args.steps + 1):
            env.step(torch.randint(0, env.num_actions, (env.num_envs,), device=env.device, generator=gen))
            if t % args.every == 0 or t == args.steps:
                pts.append((t * env.num_envs, int(env.archive.count.item())))
        curves[name] = pts
        print(f"{name:8s} {pts[-1][1]:6d} cells after {pts[-1][0]:,} env-steps ({time.perf_counter() - t0:.0f} s)",
              flush=True)
        env.close()
    for run in args.runs or ():
        rows = read_metrics(run)
        curves[Path(run).name] = [(r["env_steps"], r["archive/cells"]) for r in rows if r.get("archive/cells")]
    return {"mode": "explore", "task": e["task"], "envs": args.envs, "archive": table, "curves": curves}


def plot_curves(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
    for name, pts in data["curves"].items():
        if pts:
            ax.plot(*zip(*pts, strict=True), lw=1.4, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("env-steps")
    ax.set_ylabel("distinct cells")
    ax.set_title(f"cells reached: {data['task']}, {data['envs']:,} envs", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("cost", "explore"))
    ap.add_argument("--config", help="a training config whose [env] (task, start states, [env.archive]) is used")
    ap.add_argument("--task", help="over the config's task (default talk_to_hiker)")
    ap.add_argument("--envs", type=int, default=16384)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (cost, default 200) or steps (explore, "
                    "default 1500)")
    ap.add_argument("--warmup", type=int, default=20, help="cost: untimed steps first")
    ap.add_argument("--repeat", type=int, default=3, help="cost: measurements of each variant, alternating")
    ap.add_argument("--every", type=int, default=25, help="explore: steps between points")
    ap.add_argument("--runs", nargs="*", help="explore: training run folders whose archive/cells to add")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench_out/archive", help="folder for the JSON (and the PNG)")
    args = ap.parse_args()
    args.steps = args.steps or (200 if args.mode == "cost" else 1500)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = cost(args) if args.mode == "cost" else explore_curves(args)
    from gbxcule.harness.bench import environment

    data["environment"] = environment()
    data["command"] = " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])
    (out / f"archive_{args.mode}.json").write_text(json.dumps(data, indent=1) + "\n")
    if args.mode == "explore":
        plot_curves(data, out / "archive_explore.png")
        steps = sorted({x for pts in data["curves"].values() for x, _ in pts})
        marks = [steps[min(len(steps) - 1, int(q * (len(steps) - 1)))] for q in (0.1, 0.25, 0.5, 1.0)] if steps else []
        print(f"\n{'curve':24s} " + " ".join(f"{m:>14,}" for m in marks))
        for name, pts in data["curves"].items():
            at = [max((c for x, c in pts if x <= m), default=0) for m in marks]
            print(f"{name:24s} " + " ".join(f"{c:>14,}" for c in at))
    print(f"wrote {out / f'archive_{args.mode}.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
