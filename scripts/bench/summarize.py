"""One summary JSON of a cited figure, `benchmarks/TOPIC/NAME.json`, from run folders or bench JSON artifacts.

    python scripts/bench/summarize.py --topic training --name ppo_leave_house --command "gbxcule train --config \\
        configs/leave_house.toml --seed S --time-limit 150" runs/lh_s0 runs/lh_s1 runs/lh_s2 --plot
    python scripts/bench/summarize.py --topic emulator --name overworld --command "gbxcule bench --rom OVERWORLD \\
        ..." bench_out/ow_262144.json bench_out/ow_65536.json

The file holds `figure`, `command`, `tree` (the commit the figure was measured on), `machine`, `date` (YYYY-MM-DD),
`numbers` and `from` (the sources). A run folder (config.json, summary.json, metrics.jsonl, eval.json, facts.json)
is one entry of numbers["runs"]: seed, envs, env-steps, training and start-up seconds, why it stopped, the first
periodic greedy eval at the target (seconds since the process started and training seconds when it reported, the
training seconds of the weights it evaluated, env-steps; null if none reached it), every periodic eval's greedy
success, the final eval's greedy and sampled success (and the greedy episodes that failed on a still screen,
`final_greedy_stuck`, and what they kept pressing, `final_greedy_stuck_actions`, those that ended circling through a
few screens, `final_greedy_cycling`, and where the failed ones ended, `final_greedy_failed_at`, where the eval
reports them; on a task with milestones the mean deepest milestone, `final_greedy_deepest` and
`final_sampled_deepest`), the final policy's source, the setup it trained (`config`: its config.json less the run
section, which the harness sets), the median training SPS (the first two updates left out, as bench_learning.py),
with evals beside training the env phase's median with an eval in flight and without (`env_phase`), with the state
archive the share of envs in an episode from the task's start (`from_start_share`) and, where the task names
milestones, the share of its cells' episodes that gained one by the milestones their start held over the last minute
(`level_gains`; `entry_gains` for the episodes from the levels' entry cells; with the edge, `edge_won`: its weight
by level and the share on cells that win 1 in 8 or more), where the task names a lives byte the lives lost in
training and over its last minute (`lives_lost`), the policy's mean entropy at its first update and over its last
minute (`entropy`: how far from greedy a sampled policy still is; with level heads each level's too), the median
seconds of an update and of its env, inference and learning phases (`phases`), with `bench_learning.py
--policy-evals` the greedy success of the weights kept at each mark (`policy_evals`; the first at the target:
`to_target_mark_s`), and with its `--segments` the final policy's from each segment task's start (`segments`). A
bench JSON is copied under its file name, less its `environment`. Tree, machine and date come from the sources
(facts.json's git, gpu and host, its start; a bench JSON's environment) unless given; BENCHMARKS.md cites the file.
`--plot` also draws NAME.png: each run's periodic greedy success against seconds since its process started.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from bench_learning import read_run

from gbxcule.core.errors import GbxculeError
from gbxcule.rl.plot import read_metrics

ROOT = Path(__file__).resolve().parents[2]
MAX_TOPICS = 8  # benchmarks/ holds at most this many folders (tests/test_benchmarks.py)
KEYS = ("figure", "command", "tree", "machine", "date", "numbers", "from")


class SummaryError(Exception):
    """A source that cannot be summarized (one line)."""


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SummaryError(f"cannot read {path}: {exc}") from None


def run_entry(folder: Path, target: float | None) -> tuple[dict, list]:
    """One run folder's numbers, with its own tree, machine and date where it recorded them."""
    if not (folder / "metrics.jsonl").is_file():
        raise SummaryError(f"{folder} is not a run folder (no metrics.jsonl)")
    config = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    run_cfg = config.get("run", {})
    goal = target if target is not None else run_cfg.get("stop_at_success") or 0.9
    r = read_run(folder, goal)
    summary = read_json(folder / "summary.json") if (folder / "summary.json").is_file() else {}
    final = read_json(folder / "eval.json") if (folder / "eval.json").is_file() else {}
    hit = r["to_target_env_steps"] is not None
    entry = {"run": folder.name, "algo": config.get("algo"), "seed": run_cfg.get("seed"),
             "num_envs": config.get("env", {}).get("num_envs"), "target": goal, "env_steps": r["env_steps"],
             "updates": r["updates"], "training_s": r["train_s"], "end_s": r["end_s"], "startup_s": r["startup_s"],
             "stopped": r["stopped"],
             "to_target": {"elapsed_s": r["to_target_elapsed_s"], "training_s": r["to_target_train_s"],
                           "weights_training_s": r["to_target_weights_s"], "env_steps": r["to_target_env_steps"]}
             if hit else None,
             "greedy_evals": [c[2] for c in r["curve"]], "best_greedy": r["best_greedy"],
             "after_target": r["after_target"],
             "final_greedy": final.get("greedy", {}).get("success_rate", final.get("success_rate")),
             "final_sampled": final.get("sampled", {}).get("success_rate"),
             "final_policy": summary.get("final_policy"), "sps_median": r["sps_median"],
             "config": {k: v for k, v in config.items() if k != "run"}}  # the setup it trained
    greedy = final.get("greedy", {})
    if greedy.get("stuck_rate") is not None:  # failed greedy episodes that ended on a still screen (STUCK_STEPS)
        entry["final_greedy_stuck"] = greedy["stuck_rate"]
    if greedy.get("stuck_actions"):  # what they kept pressing
        entry["final_greedy_stuck_actions"] = greedy["stuck_actions"]
    if greedy.get("cycle_rate") is not None:  # ... and those that ended circling (evaluate.CYCLE_STEPS)
        entry["final_greedy_cycling"] = greedy["cycle_rate"]
    if greedy.get("failed_at"):  # where the failed greedy episodes took their last step (the task's cell bytes)
        entry["final_greedy_failed_at"] = {"cells": greedy.get("failed_at_cells"), "places": greedy["failed_at"]}
    for mode in ("greedy", "sampled"):  # the mean deepest milestone its episodes reached (tasks with milestones)
        if final.get(mode, {}).get("mean_deepest") is not None:
            entry[f"final_{mode}_deepest"] = final[mode]["mean_deepest"]
    if r["policy_evals"]:  # bench_learning.py --policy-evals: the weights kept at each mark, evaluated greedy
        entry["policy_evals"] = r["policy_evals"]
        entry["to_target_mark_s"] = r["to_target_mark_s"]  # the first of them at the target (None: none)
    if r.get("segments"):  # bench_learning.py --segments: the final policy from each segment task's start
        entry["segments"] = r["segments"]
    first = milestone_first(folder, config)
    if first:
        entry["milestone_first"] = first
    phase = env_phase(folder, config)
    if phase:
        entry["env_phase"] = phase
    phases = update_phases(folder)
    if phases:
        entry["phases"] = phases
    held = from_start_share(folder, config)
    if held is not None:
        entry["from_start_share"] = held
    gains = level_gains(folder)
    if gains is not None:
        entry["level_gains"] = gains
    gains = level_gains(folder, keys=("archive/entry_episodes", "archive/entry_gains"))
    if gains is not None:
        entry["entry_gains"] = gains
    edge = level_gains(folder, keys=("archive/edge_weights", "archive/edge_won_weights"))
    if edge is not None:  # the edge's weight by level summed over the updates, and its share on winning cells
        entry["edge_won"] = {"last_s": edge["last_s"], "weight": edge["episodes"], "share_won": edge["gained"]}
    lives = lives_lost(folder)
    if lives is not None:
        entry["lives_lost"] = lives
    ent = entropy(folder)
    if ent is not None:
        entry["entropy"] = ent
    entry.update(provenance(folder))
    return entry, [(c[1], c[2]) for c in r["curve"]]


def milestone_first(folder: Path, config: dict) -> dict:
    """Each milestone's first reach in a run's training episodes: {name: [wall seconds, env-steps]} in the task's
    chain order (the update whose ended episodes first held it); milestones never reached are left out."""
    rows = [r for r in read_metrics(folder) if isinstance(r.get("milestone_episodes"), list)]
    if not rows:
        return {}
    try:
        from gbxcule.rl.tasks import load_task

        names = [m.name for m in load_task(config["env"]["task"]).milestones]
    except Exception:  # noqa: BLE001 (a pack not found here: number them)
        names = []
    first: dict = {}
    for r in rows:
        for i, held in enumerate(r["milestone_episodes"]):
            name = names[i] if i < len(names) else f"milestone_{i + 1}"
            if held and name not in first:
                first[name] = [r.get("wall_s"), r.get("env_steps")]
    order = names or list(first)
    return {n: first[n] for n in order if n in first}


def from_start_share(folder: Path, config: dict, after_s: float = 100.0) -> dict | None:
    """The share of a run's envs playing an episode from the task's start (the state archive's `archive/start_held`
    histogram summed, over all `env.num_envs`: explorers, which it leaves out, count as not), over its updates after
    the first `after_s` seconds: {"median", "min", "max"} rounded to 3 places; None without that histogram."""
    envs = config.get("env", {}).get("num_envs")
    if not envs:
        return None
    shares = [sum(r["archive/start_held"]) / envs for r in read_metrics(folder)
              if isinstance(r.get("archive/start_held"), list) and (r.get("wall_s") or 0) > after_s]
    if not shares:
        return None
    return {"median": round(statistics.median(shares), 3), "min": round(min(shares), 3), "max": round(max(shares), 3)}


def level_gains(folder: Path, last_s: float = 60.0,
                keys: tuple = ("archive/level_episodes", "archive/level_gains")) -> dict | None:
    """Which segments training was solving at the end: over the updates of a run's last `last_s` seconds of
    training, the archive cells' episodes that ended by the milestones their start held (`archive/level_episodes`)
    and the share of them that gained a milestone (`archive/level_gains`; None where none ended):
    {"last_s", "episodes", "gained"}; None without those counts. `keys`: another such pair (the episodes started
    from the levels' entry cells, `archive/entry_episodes` and `archive/entry_gains`: the summary's `entry_gains`)."""
    episodes, gains = keys
    rows = [r for r in read_metrics(folder) if isinstance(r.get(episodes), list) and r.get("wall_s") is not None]
    if not rows:
        return None
    end = max(r["wall_s"] for r in rows)
    rows = [r for r in rows if r["wall_s"] > end - last_s]
    eps = [sum(col) for col in zip(*(r[episodes] for r in rows), strict=True)]
    got = [sum(col) for col in zip(*(r[gains] for r in rows), strict=True)]
    return {"last_s": last_s, "episodes": eps,
            "gained": [round(g / e, 3) if e else None for e, g in zip(eps, got, strict=True)]}


def lives_lost(folder: Path, last_s: float = 60.0) -> dict | None:
    """The lives lost in a run's training episodes (`lives_lost`, logged where the task names a lives byte): over
    the run and over its last `last_s` seconds of training, beside the episodes that ended in each: {"total",
    "episodes", "last_s", "last", "last_episodes"}; None where the run logged none."""
    rows = [r for r in read_metrics(folder) if isinstance(r.get("lives_lost"), int) and r.get("wall_s") is not None]
    if not rows:
        return None
    end = max(r["wall_s"] for r in rows)
    last = [r for r in rows if r["wall_s"] > end - last_s]
    return {"total": sum(r["lives_lost"] for r in rows), "episodes": sum(r.get("episodes", 0) for r in rows),
            "last_s": last_s, "last": sum(r["lives_lost"] for r in last),
            "last_episodes": sum(r.get("episodes", 0) for r in last)}


def entropy(folder: Path, last_s: float = 60.0) -> dict | None:
    """The policy's mean entropy in nats (`entropy`, logged each update by the policy-gradient trainers) at its first
    update and averaged over its last `last_s` seconds of training: {"first", "last_s", "last"}, and with PPO's level
    heads each level's over its samples in those seconds (`last_by_level`, None where it had none); None where the
    run logged none."""
    rows = [r for r in read_metrics(folder) if isinstance(r.get("entropy"), (int, float))
            and r.get("wall_s") is not None]
    if not rows:
        return None
    end = max(r["wall_s"] for r in rows)
    last = [r for r in rows if r["wall_s"] > end - last_s]
    out = {"first": round(rows[0]["entropy"], 3), "last_s": last_s,
           "last": round(sum(r["entropy"] for r in last) / len(last), 3)}
    lv = [r for r in last
          if isinstance(r.get("entropy_by_level"), list) and isinstance(r.get("samples_by_level"), list)]
    if lv:  # with level heads: each level's, over its samples (None where it had none)
        n = [sum(col) for col in zip(*(r["samples_by_level"] for r in lv), strict=True)]
        sums = [sum(e * c for e, c in col) for col in zip(*(zip(r["entropy_by_level"], r["samples_by_level"],
                                                                  strict=True) for r in lv), strict=True)]
        out["last_by_level"] = [round(x / c, 3) if c else None for x, c in zip(sums, n, strict=True)]
    return out


def env_phase(folder: Path, config: dict, skip: int = 3) -> dict:
    """With evals beside training (run.eval_background), the trainer's env phase an update (`time_env_s`) while an
    eval was in flight and while none was: {"with_eval"|"without": {"updates", "env_s_median"}}, the first `skip`
    updates left out. An eval is in flight from the update after the one that ended at its weights' env-steps
    (`eval/env_steps`) through the update that logged it; an eval training waited for (`time_eval_s`) is not."""
    if not config.get("run", {}).get("eval_background"):
        return {}
    rows = read_metrics(folder)
    at = {r["env_steps"]: i for i, r in enumerate(rows) if "env_steps" in r}
    flight: set[int] = set()
    for i, r in enumerate(rows):
        if r.get("eval/env_steps") in at and "time_eval_s" not in r:
            flight.update(range(at[r["eval/env_steps"]] + 1, i + 1))
    out = {}
    for name, keep in (("with_eval", True), ("without", False)):
        env_s = [r["time_env_s"] for i, r in enumerate(rows)
                 if i >= skip and r.get("time_env_s") is not None and (i in flight) == keep]
        if env_s:
            out[name] = {"updates": len(env_s), "env_s_median": round(statistics.median(env_s), 3)}
    return out


def update_phases(folder: Path, skip: int = 3) -> dict:
    """The median seconds of an update (its wall time less the one before's) and of its phases (`time_env_s`,
    `time_inference_s`, `time_update_s`) over the same updates, the first `skip` (at least one) left out:
    {"updates", "update_s", "env_s", "inference_s", "learn_s"} rounded to 3 places, a phase left out where no update
    logged it; {} where no update logged its wall time."""
    rows = [r for r in read_metrics(folder) if isinstance(r.get("wall_s"), int | float)]
    start = max(skip, 1)
    steps = [b["wall_s"] - a["wall_s"] for a, b in zip(rows[start - 1:], rows[start:], strict=False)]
    if not steps:
        return {}
    out = {"updates": len(steps), "update_s": round(statistics.median(steps), 3)}
    for key, name in (("time_env_s", "env_s"), ("time_inference_s", "inference_s"), ("time_update_s", "learn_s")):
        got = [r[key] for r in rows[start:] if isinstance(r.get(key), int | float)]
        if got:
            out[name] = round(statistics.median(got), 3)
    return out


def provenance(folder: Path) -> dict:
    """tree, machine and date a run folder recorded: facts.json (gbxcule train), else learning.json's environment
    (scripts/bench/bench_learning.py)."""
    out = {}
    if (folder / "facts.json").is_file():
        f = read_json(folder / "facts.json")
        out["tree"] = (f.get("git") or "")[:7] or None
        out["machine"] = f"{f.get('gpu') or 'CPU device'} (host {f.get('host')})"
        out["date"] = (f.get("started") or "")[:10] or None
    elif (folder / "learning.json").is_file():
        e = read_json(folder / "learning.json").get("environment", {})
        out["tree"] = (e.get("git_sha") or "")[:7] or None
        out["machine"] = f"host {e.get('host')}" if e.get("host") else None
        out["date"] = (e.get("date") or "")[:10] or None
    return {k: v for k, v in out.items() if v}


def bench_entry(path: Path) -> tuple[dict, dict]:
    """A bench JSON artifact less its `environment`, and what that environment says (tree, machine, date)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise SummaryError(f"{path} is not a JSON object")
    env = data.get("environment") or {}
    prov = {"tree": (env.get("git_sha") or "")[:7] or None, "machine": f"host {env['host']}" if env.get("host")
            else None, "date": (env.get("date") or "")[:10] or None}
    return {k: v for k, v in data.items() if k != "environment"}, {k: v for k, v in prov.items() if v}


def one(values: list, name: str, given: str | None) -> str:
    """The figure's tree, machine or date: the one given, else the sources' (several: listed; dates: the last)."""
    if given:
        return given
    found = sorted({v for v in values if v})
    if not found:
        raise SummaryError(f"the sources do not say the {name}: give --{name}")
    return found[-1] if name == "date" else ", ".join(found)


def summarize(sources: list[Path], figure: str, command: str, target: float | None = None, tree: str | None = None,
              machine: str | None = None, date: str | None = None) -> tuple[dict, dict]:
    """(the summary, each run's greedy eval curve)."""
    numbers: dict = {}
    curves: dict = {}
    prov: list[dict] = []
    for src in sources:
        if src.is_dir():
            entry, curve = run_entry(src, target)
            numbers.setdefault("runs", []).append(entry)
            curves[src.name] = curve
            prov.append(entry)
        elif src.suffix == ".json":
            data, p = bench_entry(src)
            numbers[src.stem] = data
            prov.append(p)
        else:
            raise SummaryError(f"{src}: give a run folder or a bench JSON file")
    if date is not None and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise SummaryError(f"--date must be YYYY-MM-DD, got {date!r}")
    out = {"figure": figure, "command": command,
           "tree": one([p.get("tree") for p in prov], "tree", tree),
           "machine": one([p.get("machine") for p in prov], "machine", machine),
           "date": one([p.get("date") for p in prov], "date", date),
           "numbers": numbers, "from": [display(s) for s in sources]}
    return out, curves


def display(path: Path) -> str:
    p = path.resolve()
    return p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT) else str(path)


def plot(curves: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    many = len(curves) > 6  # the legend beside the axes, not over the curves' ends
    fig, ax = plt.subplots(figsize=(7 if many else 5, 3), dpi=80)
    styles = ("-", "--", ":")  # the colour cycle has 10 colours: the line style tells the next 10 apart
    for i, (name, pts) in enumerate(curves.items()):
        if pts:
            ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], marker="o", markersize=3, label=name,
                    linestyle=styles[(i // 10) % len(styles)])
    ax.set_xlabel("seconds since the process started")
    ax.set_ylabel("greedy success (%)")
    ax.set_ylim(-3, 103)
    ax.set_title(title, fontsize=9)
    if curves:
        ax.legend(fontsize=7, **({"loc": "center left", "bbox_to_anchor": (1.01, 0.5)} if many else {}))
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sources", nargs="+", type=Path, metavar="RUN_DIR_OR_JSON")
    ap.add_argument("--topic", required=True, help="benchmarks/ folder, named by what it measures (e.g. training)")
    ap.add_argument("--name", required=True, help="file name without .json (what the figure is, not a date)")
    ap.add_argument("--command", required=True, help="the command that measured it")
    ap.add_argument("--figure", help="what the figure is, in a line (default: NAME)")
    ap.add_argument("--target", type=float, help="greedy success that counts as reached (default: each run's "
                    "run.stop_at_success, else 0.9)")
    ap.add_argument("--tree", help="the commit measured (default: the sources')")
    ap.add_argument("--machine", help="the machine (default: the sources' GPU and host)")
    ap.add_argument("--date", help="YYYY-MM-DD (default: the sources' last)")
    ap.add_argument("--plot", action="store_true", help="also NAME.png: periodic greedy success against time")
    ap.add_argument("--root", type=Path, default=ROOT / "benchmarks", help="the benchmarks folder")
    args = ap.parse_args(argv)
    try:
        for name, what in ((args.topic, "--topic"), (args.name, "--name")):
            if not re.fullmatch(r"[a-z0-9][a-z0-9_]*", name):
                raise SummaryError(f"{what} must be lower-case letters, digits and _, got {name!r}")
        folder = args.root / args.topic
        topics = {p.name for p in args.root.iterdir() if p.is_dir()} if args.root.is_dir() else set()
        if args.topic not in topics and len(topics) >= MAX_TOPICS:
            raise SummaryError(f"{args.root} holds {len(topics)} folders, the most it may: use one of "
                               f"{', '.join(sorted(topics))}")
        for src in args.sources:
            if not src.exists():
                raise SummaryError(f"{src} does not exist")
        summary, curves = summarize(args.sources, args.figure or args.name, args.command, args.target, args.tree,
                                    args.machine, args.date)
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / f"{args.name}.json"
        out.write_text(json.dumps(summary, indent=1, allow_nan=False) + "\n")
        print(f"wrote {display(out)}")
        if args.plot:
            if not curves:
                raise SummaryError("--plot needs run folders")
            plot(curves, folder / f"{args.name}.png", summary["figure"])
            print(f"wrote {display(folder / f'{args.name}.png')}")
    except (SummaryError, GbxculeError) as exc:  # (GbxculeError: a metrics log that is not one)
        print(f"summarize: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
