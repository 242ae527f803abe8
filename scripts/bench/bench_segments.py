"""Which segments of a long task a policy has learned: its greedy success from each milestone task's start
(BENCHMARKS.md "The quest").

    python scripts/bench/bench_segments.py RUN_OR_POLICY [RUN_OR_POLICY ...] --episodes 16 --device cpu \
        --out segments.json

A policy trained on a whole quest is judged from the quest's start, where it fails at its first unlearned segment
and says nothing of the ones after. Here each policy plays, greedy, from the start of every segment task of its
run's pack: the tasks named after its task with `_m<N>` (`quest_m1` .. `quest_m11` for `quest`: milestone N from
the state after milestone N-1), in N order, or `--tasks`. Each is `gbxcule eval --greedy-only` on that task
(`--episodes` episodes from as many start states, the final eval's seed). Prints a table (the greedy success of
each policy on each task, and the mean deepest milestone its episodes held), writes JSON. A policy or task that
cannot be evaluated is one line and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def segment_tasks(spec: str) -> list[str]:
    """The segment tasks of the task `spec` names (a built-in "quest", "quest:quest", or "pack.toml:quest"): the
    tasks of its pack named `<its name>_m<N>`, as specs of the same form, in N order; none where it has none."""
    from gbxcule.rl.tasks import builtin_packs, load_pack, load_task

    task = load_task(spec)
    if ".toml" in spec:
        path = spec.rpartition(":")[0] if spec.rfind(":") > spec.rfind(".toml") else spec
        names, prefix = load_pack(path), f"{path}:"
    else:
        names, prefix = builtin_packs()[task.pack], f"{task.pack}:"
    pattern = re.compile(re.escape(task.name) + r"_m(\d+)")
    found = sorted((int(m.group(1)), name) for name in names if (m := pattern.fullmatch(name)))
    return [prefix + name for _, name in found]


def run_task(source: str) -> str:
    """The task a run folder or policy file was trained on (its config's env.task)."""
    from gbxcule.core.errors import GbxculeError
    from gbxcule.rl.rundir import final_policy, load_checkpoint

    task = load_checkpoint(final_policy(source)).get("config", {}).get("env", {}).get("task")
    if not isinstance(task, str):
        raise GbxculeError(f"{source}: its config names no task; name the tasks with --tasks")
    return task


def measure(sources: list[str], tasks: list[str] | None, episodes: int, device: str) -> dict:
    """{"policies": {source: {task: {"greedy", "mean_deepest"}}}}, evaluated in that order."""
    from gbxcule.core.errors import GbxculeError
    from gbxcule.rl.training import evaluate

    out: dict = {"policies": {}}
    for source in sources:
        names = tasks
        if not names:
            task = run_task(source)
            names = segment_tasks(task)
            if not names:
                raise GbxculeError(f"{source}: its task {task!r} has no segment tasks (<task>_m<N> in its pack); "
                                   "name some with --tasks")
        rows = {}
        for task in names:
            g = evaluate(source, episodes=episodes, device=device, task=task, modes=("greedy",))["greedy"]
            rows[task] = {"greedy": g["success_rate"], "mean_deepest": g.get("mean_deepest")}
        out["policies"][source] = rows
    return out


def table(result: dict) -> str:
    """One row a task, one column a policy: its greedy success (and the mean deepest milestone, where reported)."""
    names = list(result["policies"])
    tasks = [t for rows in result["policies"].values() for t in rows]
    tasks = list(dict.fromkeys(tasks))
    labels = [Path(n).name if Path(n).is_dir() else "/".join(Path(n).parts[-2:]) for n in names]
    lines = [f"{'task':24s}" + "".join(f" {x[-26:]:>26s}" for x in labels)]
    for t in tasks:
        cells = []
        for n in names:
            r = result["policies"][n].get(t)
            deep = "" if r is None or r.get("mean_deepest") is None else f" (deepest {r['mean_deepest']:.2f})"
            cells.append("-" if r is None else f"{r['greedy']:.0%}{deep}")
        lines.append(f"{t.rpartition(':')[2][:24]:24s}" + "".join(f" {c:>26s}" for c in cells))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sources", nargs="+", metavar="RUN_OR_POLICY")
    ap.add_argument("--tasks", nargs="+", help="these tasks instead of the run's segment tasks")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", type=Path, default=Path("segments.json"))
    args = ap.parse_args(argv)
    from gbxcule.core.errors import GbxculeError
    from gbxcule.harness.bench import environment

    try:
        result = measure(args.sources, args.tasks, args.episodes, args.device)
    except GbxculeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    result.update(episodes=args.episodes, device=args.device, environment=environment())
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
