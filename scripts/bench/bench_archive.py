"""The state archive's cost and its exploration (docs/training.md "State archive"; BENCHMARKS.md).

    python scripts/bench/bench_archive.py cost --config configs/reach_lab_archive.toml --envs 16384 --device cuda \\
        --repeat 2
    python scripts/bench/bench_archive.py cost --config configs/reach_lab_archive.toml --envs 128 --device cpu \\
        --warmup 5 --repeat 1
    python scripts/bench/bench_archive.py explore --config configs/talk_to_hiker_archive.toml --envs 16384 \\
        --device cuda --steps 1500 --runs bench_out/learning/hiker_archive_s0 bench_out/learning/hiker_novelty_s0

`cost`: env-steps/s of the env as its task defines it (goals, step limit, episodes ending and restarting; random
actions drawn on the device), timed over whole step limits (so that `off`, whose episodes all end on one step, pays
its resets in the window), in four variants, in turn, `--repeat` times each (rl/bench_env.py kind `env_task`), each
adding one thing to the one before: `off` (no archive, no spread clocks), `spread` (spread clocks only), `counting`
(the config's `[env.archive]` table with p_start = 1: all of its per-step machinery runs, but every episode starts
from the task's start, so the envs emulate bit for bit what `spread`'s do) and `archive` (the table as it is: starts
from cells, shorter episodes, swarming). So `counting` against `spread` is the archive's own cost and `archive`
against `counting` is the emulated work of where the envs play (other rooms and maps, other game code); `--variants
...,host` adds `host`, `archive` with the cells' slots in host memory (`env.archive.store`). Each row
also counts that work: emulated instructions per env-step (`instr/step`, and `exec/step` less the skipped wait-loop
rounds, as scripts/bench/bench_games.py), the same on every device. Prints the variants against `off`, the steps between
them (time per env-step added, in % of off's, and the instruction ratio), the slowdown and its split; writes JSON
(`median`, `slowdown_vs_off`, `steps`, `machinery`, `workload`).

`explore`: distinct cells reached against env-steps under random actions, from the task's start only
("random": the archive counts cells but never starts an episode) and with starts from the archive ("archive"), and
the episodes that reached the task's goal (`goals`: so far, at each point); `--curves` runs one of the two;
`--runs` adds training runs' `archive/cells` curves from their metrics.jsonl (a run without an archive of its own
can count cells with `--set env.archive.p_start=1.0`, e.g. a novelty run). Prints a table, writes JSON and a PNG.

`cells`: the bytes of one archive cell and how far they would compress, after `--steps` steps of random actions with
the config's archive: for each part of a cell's slot (fields, RAM, observation, screen), its bytes, the share of its
pages (256 bytes; 64 for the fields) that differ from the task's start state and from the nearest other cell (over
`--sample` cells), the pixel values seen, and an estimate of a compressed cell: RAM and fields as the pages that
differ from the start plus a page bitmap, pixels packed at the bits their values need. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path


def env_section(args) -> dict:
    """The config file's [env] section with the task and archive the command line asks for."""
    from gbxcule.rl.config import read_toml

    env = dict(read_toml(args.config).get("env", {})) if args.config else {}
    if args.task:
        env["task"] = args.task
    if args.backend:
        env["backend"] = {**env.get("backend", {}), **args.backend}
    env.setdefault("task", "talk_to_hiker")
    if not env.get("archive"):
        env["archive"] = {"capacity": 4096}
    if args.archive:
        env["archive"] = {**env["archive"], **args.archive}
    return env


# `cost`'s variants, in order: each adds one thing to the one before, so each step's difference has one cause;
# `host` (asked for by name) is `archive` with the cells' slots in host memory
COST_CHAIN = ("off", "spread", "counting", "archive")
COST_VARIANTS = (*COST_CHAIN, "host")
# what each variant's difference from the one before it is, for the table and the JSON
COST_STEPS = {"spread": "spread clocks (episodes end at different steps)",
              "counting": "the archive's machinery (same emulation as spread, bit for bit)",
              "archive": "where envs play (starts from cells, their shorter episodes, swarming): emulated work",
              "host": "the cells' slots in host memory (env.archive.store = host), read and written over the bus"}


def cost_variants(e: dict) -> dict[str, dict]:
    """GameEnv options of each `cost` variant. `counting` is the config's archive with every episode from the
    task's start (p_start 1: no env ever starts from a cell, so none is ever a swarm destination either): every
    per-step part of the archive runs (cell keys, lookup, insertion and its masked save, the start draw, the
    milestone test, the masked clone and the restore path) while the envs emulate exactly what `spread`'s do.
    Every variant takes the config's [env.backend] options (with --backend's over them)."""
    table, common = e["archive"], ({"backend_options": e["backend"]} if e.get("backend") else {})
    return {"off": {**common}, "spread": {"spread_clocks": True, **common},
            "counting": {"archive": {**table, "p_start": 1.0}, "spread_clocks": True, **common},
            "archive": {"archive": table, "spread_clocks": True, **common},
            "host": {"archive": {**table, "store": "host"}, "spread_clocks": True, **common}}


def whole_limits(steps: int | None, step_limit: int) -> int:
    """`cost`'s timed steps: `steps` (default one step limit) rounded up to whole step limits. In `off` every
    episode ends on the same step, once a step limit; a window of whole limits holds those resets, as the spread
    variants' windows hold theirs (a shorter window could miss them all and time `off` without any reset)."""
    steps = steps or step_limit
    return -(-steps // step_limit) * step_limit


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
    variants = {name: opts for name, opts in cost_variants(e).items() if name in args.variants}
    steps = whole_limits(args.steps, task.step_limit)
    if steps != args.steps:
        print(f"timing {steps} steps a variant: whole step limits of {task.id} ({task.step_limit})", flush=True)
    rows = []
    for rep in range(args.repeat):
        for name, opts in variants.items():
            r = measure_env("env_task", args.envs, steps, args.warmup, rom, codec, schedule, device=args.device,
                            task=task, info_mode="none", seed=args.seed + rep, env_options=opts, count_work=True)
            r["resets_per_env_step"] = r["resets_per_step"] / args.envs  # (measure_env's is per step of all envs)
            rows.append({"variant": name, "repeat": rep, **r})
            print(f"{name:9s} repeat {rep}: {r['env_steps_per_s']:12,.0f} env-steps/s, "
                  f"{r['instructions_per_step']:9,.0f} instr/env-step, {r['resets_per_env_step']:.4f} resets/env-step"
                  f" ({r.get('archive_cells', '-')} cells)", flush=True)
    med = {name: {key: statistics.median(r[key] for r in rows if r["variant"] == name)
                  for key in ("env_steps_per_s", "instructions_per_step", "executed_per_step", "resets_per_env_step")}
           for name in variants}
    data = {"mode": "cost", "task": task.id, "envs": args.envs, "steps": steps, "archive": e["archive"], "rows": rows,
            "median": med, **(cost_breakdown(med) if set(COST_CHAIN) <= set(med) else {})}
    print_cost(data, args.device)
    return data


def cost_breakdown(med: dict) -> dict:
    """Each variant against `off` (`slowdown`: 1 - its env-steps/s over off's), and the steps between variants
    (`steps`: what each adds, as seconds per env-step added in % of off's and its instructions per env-step over
    the one before's). Time per env-step adds up where slowdowns do not: the steps sum to archive's total."""
    sec = {name: 1.0 / m["env_steps_per_s"] for name, m in med.items()}
    slowdown = {name: 1.0 - med[name]["env_steps_per_s"] / med["off"]["env_steps_per_s"] for name in med}
    steps = {}
    for prev, name in itertools.pairwise([v for v in COST_VARIANTS if v in med]):
        steps[name] = {"vs": prev, "cause": COST_STEPS[name], "time_added": (sec[name] - sec[prev]) / sec["off"],
                       "instr_ratio": med[name]["instructions_per_step"] / med[prev]["instructions_per_step"],
                       "executed_ratio": med[name]["executed_per_step"] / med[prev]["executed_per_step"]}
    same = med["counting"]["instructions_per_step"] == med["spread"]["instructions_per_step"]
    return {"slowdown": slowdown["archive"], "slowdown_vs_off": slowdown, "steps": steps,
            "machinery": steps["counting"]["time_added"], "workload": steps["archive"]["time_added"],
            "counting_same_emulation": same}


def print_cost(data: dict, device: str) -> None:
    """The variants' table; with all of them, the steps between them and the archive's cost."""
    med = data["median"]
    ref = next(iter(med))  # `off` unless --variants leaves it out
    print(f"\n{'variant':9s} {'env-steps/s':>12s} {'vs ' + ref:>12s} {'instr/step':>10s} {'exec/step':>10s} "
          f"{'resets':>7s}  (medians, per env-step)")
    for name, m in med.items():
        print(f"{name:9s} {m['env_steps_per_s']:12,.0f} "
              f"{100 * (m['env_steps_per_s'] / med[ref]['env_steps_per_s'] - 1):+11.1f}% "
              f"{m['instructions_per_step']:10,.0f} {m['executed_per_step']:10,.0f} {m['resets_per_env_step']:7.4f}")
    if "slowdown" not in data:  # not all variants: no steps between them
        return
    steps = data["steps"]
    print(f"\n{'step':20s} {'time/env-step':>13s} {'instr':>7s}  cause")
    for name, st in steps.items():
        print(f"{st['vs'] + ' -> ' + name:20s} {100 * st['time_added']:+12.1f}% {st['instr_ratio']:6.2f}x  "
              f"{st['cause']}")
    print(f"(time/env-step: seconds per env-step added, in % of off's; the steps to archive add up to its "
          f"{100 * sum(st['time_added'] for name, st in steps.items() if name in COST_CHAIN):+.1f}%. instr: "
          f"emulated instructions per env-step over the variant before's)")
    if not data["counting_same_emulation"]:
        print("warning: counting and spread emulated different work (they should match bit for bit)")
    print(f"\narchive cost: {100 * data['slowdown']:.1f}% slower than off ({data['envs']:,} envs, {data['task']}, "
          f"{device}); of its time added per env-step, the archive's machinery {100 * data['machinery']:+.1f}% "
          f"of off's, the emulated work of where envs play {100 * data['workload']:+.1f}%")


def explore_curves(args) -> dict:
    import torch

    from gbxcule.rl.env import GameEnv
    from gbxcule.rl.plot import read_metrics

    e = env_section(args)
    table = dict(e["archive"])
    curves: dict[str, list] = {}
    goals: dict[str, list] = {}  # episodes that reached the goal so far, at each point
    for name, arch in (("random", {**table, "p_start": 1.0, "swarm": 0.0}), ("archive", table)):
        if name not in args.curves:
            continue
        env = GameEnv(num_envs=args.envs, device=args.device, task=e["task"], start_states=e.get("start_states"),
                      seed=args.seed, info_mode="none", archive=arch, spread_clocks=True)
        env.reset(seed=args.seed)
        gen = torch.Generator(device=env.device).manual_seed(args.seed)
        pts, wins, t0 = [], [], time.perf_counter()
        for t in range(1, args.steps + 1):
            env.step(torch.randint(0, env.num_actions, (env.num_envs,), device=env.device, generator=gen))
            if t % args.every == 0 or t == args.steps:
                pts.append((t * env.num_envs, int(env.archive.count.item())))
                s = env.episode_stats(clear=False)  # totals since the start; the start schedule left alone
                wins.append((t * env.num_envs, round(s["success_rate"] * s["episodes"]) if s["episodes"] else 0))
        curves[name], goals[name] = pts, wins
        print(f"{name:8s} {pts[-1][1]:6d} cells, {wins[-1][1]:,} episodes at the goal after {pts[-1][0]:,} env-steps "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
        env.close()
    for run in args.runs or ():
        rows = read_metrics(run)
        curves[Path(run).name] = [(r["env_steps"], r["archive/cells"]) for r in rows if r.get("archive/cells")]
    return {"mode": "explore", "task": e["task"], "envs": args.envs, "archive": table, "curves": curves,
            "goals": goals}


def page_diffs(cells, base, page: int, sample) -> tuple[float, float]:
    """Mean pages of `page` bytes (uint8 rows `cells` [C, B] against `base` [B]) that differ from `base`, and from
    the nearest other row, over the rows `sample` (their indices)."""
    whole = (cells.shape[1] // page) * page
    pc = cells[:, :whole].reshape(cells.shape[0], -1, page)
    from_base = (pc != base[:whole].reshape(1, -1, page)).any(-1).sum(-1).float().mean()
    nearest = []
    for i in sample:
        d = (pc != pc[i:i + 1]).any(-1).sum(-1)
        d[i] = d.max() + 1
        nearest.append(int(d.min()))
    return float(from_base), (sum(nearest) / len(nearest) if nearest else float("nan"))


def cell_sizes(args) -> dict:
    import math

    import torch
    import warp as wp

    from gbxcule.rl.env import GameEnv

    e = env_section(args)
    env = GameEnv(num_envs=args.envs, device=args.device, task=e["task"], start_states=e.get("start_states"),
                  seed=args.seed, info_mode="none", archive=dict(e["archive"]), spread_clocks=True)
    env.reset(seed=args.seed)
    gen = torch.Generator(device=env.device).manual_seed(args.seed)
    for _ in range(args.steps):
        env.step(torch.randint(0, env.num_actions, (env.num_envs,), device=env.device, generator=gen))
    count, k = int(env.archive.count.item()), env.num_slots
    sample = torch.randperm(count, generator=torch.Generator().manual_seed(args.seed))[:args.sample].tolist()
    parts, raw, packed = {}, 0, 0
    for name, arr in zip(("fields", "ram", "obs", "screen"), env.backend.slot_arrays(), strict=True):
        if arr is None:
            continue
        t = wp.to_torch(arr)
        rows = t.contiguous().view(torch.uint8).reshape(t.shape[0], -1).cpu()
        cells, nbytes = rows[k:k + count], rows.shape[1]
        page = 64 if nbytes < 4096 else 256
        base_pages, near_pages = page_diffs(cells, rows[0], page, sample)
        pixels = name in ("obs", "screen")
        values = int(torch.unique(t[k:k + count]).numel()) if pixels and count else None
        if pixels:
            est = math.ceil(t[0].numel() * max(1, math.ceil(math.log2(max(values or 1, 2)))) / 8)
        else:
            est = math.ceil(base_pages * page + (nbytes // page) / 8)
        parts[name] = {"bytes": nbytes, "page": page, "pages": nbytes // page, "pages_differ_from_start": base_pages,
                       "pages_differ_from_nearest": near_pages, "pixel_values": values, "compressed_estimate": est}
        raw, packed = raw + nbytes, packed + est
    env.close()
    return {"mode": "cells", "task": e["task"], "envs": args.envs, "steps": args.steps, "cells": count,
            "sample": len(sample), "parts": parts, "bytes_per_cell": raw, "compressed_estimate": packed,
            "ratio": raw / packed if packed else None}


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


def backend_options(text: str) -> dict:
    """`--backend`'s KEY=VALUE,... (values read as `--set`'s are: integers where a value is one)."""
    from gbxcule.rl.config import ConfigError, parse_sets

    try:
        return parse_sets(list(filter(None, text.split(","))))
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("cost", "explore", "cells"))
    ap.add_argument("--config", help="a training config whose [env] (task, start states, [env.archive]) is used")
    ap.add_argument("--task", help="over the config's task (default talk_to_hiker)")
    ap.add_argument("--envs", type=int, default=16384)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (cost: rounded up to whole step limits "
                    "of the task, default one) or steps (explore, default 1500)")
    ap.add_argument("--warmup", type=int, default=20, help="cost: untimed steps first")
    ap.add_argument("--repeat", type=int, default=3, help="cost: measurements of each variant, alternating")
    ap.add_argument("--every", type=int, default=25, help="explore: steps between points")
    ap.add_argument("--runs", nargs="*", help="explore: training run folders whose archive/cells to add")
    ap.add_argument("--curves", type=lambda v: v.split(","), default=["random", "archive"],
                    help="explore: random, archive or both (default), comma-separated")
    ap.add_argument("--variants", type=lambda v: v.split(","), default=list(COST_CHAIN),
                    help=f"cost: the variants to time, comma-separated (default {','.join(COST_CHAIN)}; also host); "
                    "the split of the archive's cost needs the first four")
    ap.add_argument("--backend", type=backend_options, default={}, metavar="KEY=VALUE,...",
                    help="cost: backend options over the config's [env.backend], e.g. sort_parts=1,stream_groups=1 "
                    "(the sort tuner off: every variant launches alike)")
    ap.add_argument("--archive", type=backend_options, default={}, metavar="KEY=VALUE,...",
                    help="settings over the config's [env.archive] (e.g. capacity=163840,store=host)")
    ap.add_argument("--sample", type=int, default=200, help="cells: cells whose nearest other cell is found")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench_out/archive", help="folder for the JSON (and the PNG)")
    args = ap.parse_args()
    bad = sorted(set(args.variants) - set(COST_VARIANTS))
    if bad or not args.variants:
        print(f"error: --variants takes {', '.join(COST_VARIANTS)}, got {','.join(args.variants)}", file=sys.stderr)
        return 2
    args.variants = [v for v in COST_VARIANTS if v in args.variants]
    if bad := sorted(set(args.curves) - {"random", "archive"}):
        print(f"error: --curves takes random, archive, got {','.join(bad)}", file=sys.stderr)
        return 2
    if args.backend:
        from gbxcule.backends.warp_vec import TUNING_OPTIONS

        if unknown := sorted(set(args.backend) - set(TUNING_OPTIONS)):
            print(f"error: --backend takes {', '.join(TUNING_OPTIONS)}, got {', '.join(unknown)}", file=sys.stderr)
            return 2
    if args.mode in ("explore", "cells"):
        args.steps = args.steps or (1500 if args.mode == "explore" else 800)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {"cost": cost, "explore": explore_curves, "cells": cell_sizes}[args.mode](args)
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
        for name, pts in data["goals"].items():
            first = next((x for x, c in pts if c), None)
            print(f"{name}: {pts[-1][1]:,} episodes reached the goal; the first by "
                  f"{f'{first:,} env-steps' if first else 'none'}")
    if args.mode == "cells":
        print(f"\n{data['cells']:,} cells of {data['task']}; pages differing (mean) from the start / the nearest cell")
        print(f"{'part':8s} {'bytes':>8s} {'pages':>6s} {'start':>7s} {'nearest':>8s} {'values':>7s} {'estimate':>9s}")
        for name, p in data["parts"].items():
            values = p["pixel_values"] or "-"
            print(f"{name:8s} {p['bytes']:>8,} {p['pages']:>6,} {p['pages_differ_from_start']:>7.1f} "
                  f"{p['pages_differ_from_nearest']:>8.1f} {values:>7} {p['compressed_estimate']:>9,}")
        print(f"a cell: {data['bytes_per_cell']:,} bytes; compressed (estimate) {data['compressed_estimate']:,} "
              f"({data['ratio']:.1f}x)")
    print(f"wrote {out / f'archive_{args.mode}.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
