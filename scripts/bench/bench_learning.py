"""Learning benchmark: how fast each training setup reaches a greedy success rate, over seeds.

Each (setup, seed) is one `gbxcule train` process with a periodic greedy eval (`--eval-every`, 64 episodes from
distinct start states) that stops the run at `--target` (`--stop-at-success`; with `--keep-training` the run goes
on to its config's total_steps, to show whether the policy stays learned) or at `--time-limit`; the jobs
are packed onto the host's GPUs, one job per GPU at a time (CUDA_VISIBLE_DEVICES), or run one after another on
the CPU. From each run's metrics.jsonl: the first eval at or above the target (seconds since the process
started, start-up included; training seconds; env-steps), the best and last greedy success, the evals after that
first hit (their count and lowest, and the env-steps trained past it), the median SPS.
Prints one table, writes JSON and the curves (`gbxcule plot` of each setup's seeds, and of every setup's first
seed together).

    python scripts/bench/bench_learning.py --out bench_out/learning --seeds 0,1,2 --time-limit 300 \\
        --setup ppo "--config configs/leave_house.toml" --setup a2c "--config configs/leave_house_a2c.toml"

A setup's flags are `gbxcule train` flags; a setup that needs several GPUs per job says so with
`--gpus-per-job NAME=G` (its flags should then carry `--gpus G`). A run whose folder holds a summary is done; one whose
folder holds a checkpoint and no summary (brought back from a lost machine: scripts/gpu/gpu.sh jobs_resume) resumes
with the training seconds it has left. With `--policy-evals`, once a run ends the weights
it kept at its marks (`run.policy_every_s`: RUN/policies/policy_<S>s.pt) are evaluated greedy on its GPUs, all at
once (`gbxcule eval --greedy-only`, the final eval's episodes and seed; RUN/policy_evals/<S>s.json): the success
reached at 5, 10, 20 minutes of training without evals beside it slowing training. With `--policy-evals-cpu` each
kept policy's eval runs on the CPU instead (one thread), started as soon as the run keeps it, while the run trains on,
so only the last one's is left when the run ends, and it runs on the run's GPUs (a greedy eval of 64 envs is
latency-bound: docs/training.md "The weights at set times"). With `--segments`, the final
policy is also evaluated greedy from each segment task of its pack (`<task>_m<N>`, scripts/bench/bench_segments.py;
RUN/segments.json): which segments of a long task it has learned. `--sampled-evals` plays both sampled as well (about
twice their time): a stochastic policy that wins sampled can stall greedy on a still screen.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import check_output_dir, write_output
from gbxcule.harness.bench import child_gpus


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def job_command(args, flags: str, seed: int, run_dir: Path) -> list[str]:
    """The run's `gbxcule train` command; where its folder holds a checkpoint and no summary (a run cut short, its
    folder brought back from a lost machine: scripts/gpu/gpu.sh jobs_resume), `--resume` with the training seconds
    the checkpoint has not had."""
    run = ["--eval-every", str(args.eval_every), "--eval-episodes", str(args.episodes),
           *([] if args.keep_training else ["--stop-at-success", str(args.target)]), "--no-progress",
           *(["--device", "cuda"] if args.gpus else ["--device", "cpu"])]
    if (run_dir / "checkpoint.pt").is_file() and not (run_dir / "summary.json").is_file():
        from gbxcule.rl.rundir import load_checkpoint

        try:
            left = max(1.0, args.time_limit - float(load_checkpoint(run_dir).get("wall_s", 0.0)))
        except GbxculeError:  # (a damaged one: the resume itself says so, in the run's log)
            left = args.time_limit
        return [sys.executable, "-m", "gbxcule", "train", "--resume", str(run_dir), "--time-limit", f"{left:.1f}",
                *run]
    return [sys.executable, "-m", "gbxcule", "train", *shlex.split(flags), "--seed", str(seed), "--run-dir",
            str(run_dir), "--time-limit", str(args.time_limit), *run]


POLICY_FILE = re.compile(r"^policy_(\d+)s\.pt$")
EVAL_FILE = re.compile(r"^(\d+)s\.json$")


def kept_policies(run_dir: Path) -> list[tuple[int, Path]]:
    """The weights a run kept at its marks (`run.policy_every_s`): (seconds of training, file), by mark."""
    folder = run_dir / "policies"
    found = [(int(m.group(1)), p) for p in folder.glob("policy_*s.pt") if (m := POLICY_FILE.match(p.name))] \
        if folder.is_dir() else []
    return sorted(found)


def policy_eval_commands(args, run_dir: Path, started: set[int] | frozenset = frozenset(),
                         ended: bool = False) -> list[tuple[list[str], Path]]:
    """One greedy `gbxcule eval` per kept policy whose mark is not in `started` (the final eval's seed, `--episodes`
    episodes; sampled as well with `--sampled-evals`; on the CPU without GPUs, and with `--policy-evals-cpu` while the
    run trains, not once it has `ended` and left its GPUs free) and the JSON file its report goes to."""
    modes = [] if args.sampled_evals else ["--greedy-only"]
    device = "cuda" if args.gpus and (ended or not getattr(args, "policy_evals_cpu", False)) else "cpu"
    return [([sys.executable, "-m", "gbxcule", "eval", str(path), *modes, "--json", "--episodes",
              str(args.episodes), "--device", device], run_dir / "policy_evals" / f"{s}s.json")
            for s, path in kept_policies(run_dir) if s not in started]


def segment_command(args, run_dir: Path) -> list[tuple[list[str], Path]]:
    """With `--segments`: scripts/bench/bench_segments.py on the run's final policy (each segment task of its pack,
    greedy, sampled as well with `--sampled-evals`, `--episodes` episodes; RUN/segments.json) and the file its table
    goes to (RUN/segments.txt)."""
    if not args.segments:
        return []
    script = Path(__file__).resolve().parent / "bench_segments.py"
    modes = ["--sampled"] if args.sampled_evals else []
    return [([sys.executable, str(script), str(run_dir), "--episodes", str(args.episodes), *modes, "--device",
              "cuda" if args.gpus else "cpu", "--out", str(run_dir / "segments.json")], run_dir / "segments.txt")]


def run_jobs(args, jobs: list[dict]) -> None:
    """Run every job, as many at a time as there are free GPUs (one per job, or the job's count); with
    `--policy-evals` (and `--segments`) a job keeps its GPUs until its kept policies' evals (and its segments'),
    started together when it ends, end. With `--policy-evals-cpu` each kept policy's eval starts, on the CPU, as soon
    as the run keeps it, while the run trains on."""
    free = list(range(args.gpus)) * max(1, args.jobs_per_gpu) if args.gpus else [None]
    pending, running = list(jobs), []
    early = args.policy_evals and args.policy_evals_cpu

    def start(cmd: list[str], ids, out, err, one_thread: bool = False) -> subprocess.Popen:
        env = dict(os.environ)
        if args.gpus:
            env["CUDA_VISIBLE_DEVICES"] = child_gpus(ids)  # nested in a job runner: its GPUs
        if one_thread:  # an eval on the CPU beside a run: one core each
            env["OMP_NUM_THREADS"] = "1"
        return subprocess.Popen(cmd, stdout=out, stderr=err, env=env)

    def start_evals(evals: list, ids, one_thread: bool = False) -> tuple[list, list]:
        """Start `evals` ((command, report path) pairs): each report to its JSON file, its other output to a .log
        beside it; the processes and their open files (closed when the job ends)."""
        for _, path in evals:
            path.parent.mkdir(exist_ok=True)
        outs = [(open(path, "w"), open(path.with_suffix(".log"), "w")) for _, path in evals]  # noqa: SIM115
        return ([start(cmd, ids, *out, one_thread=one_thread) for (cmd, _), out in zip(evals, outs, strict=True)],
                [f for pair in outs for f in pair])

    def policies_evals(job: dict, ended: bool = False) -> list:
        """The evals of the policies the job's run has kept whose evals have not started (and mark them started);
        once its run has `ended`, on its GPUs."""
        evals = policy_eval_commands(args, job["dir"], job["started"], ended) if args.policy_evals else []
        job["started"] |= {int(EVAL_FILE.match(path.name).group(1)) for _, path in evals}
        return evals

    while pending or running:
        for job in list(pending):
            need = job["gpus"] if args.gpus else 1
            if len(free) >= need:
                ids, free[:] = free[:need], free[need:]
                log = open(job["dir"].with_suffix(".log"), "w")  # noqa: SIM115 (closed when the job ends)
                job["t0"], job["early"] = time.time(), ([], [])
                job["started"] = {int(m.group(1)) for p in job["dir"].glob("policy_evals/*s.json")
                                  if (m := EVAL_FILE.match(p.name)) and p.stat().st_size}  # (a resumed run's)
                running.append([job, [start(job["cmd"], ids, log, subprocess.STDOUT)], ids, [log], "train"])
                pending.remove(job)
                print(f"[{time.strftime('%H:%M:%S')}] start {job['name']} seed {job['seed']} on "
                      f"{'GPU ' + ','.join(map(str, ids)) if args.gpus else 'the CPU'}", flush=True)
        time.sleep(1.0)
        for item in list(running):
            job, procs, ids, files, stage = item
            if stage == "train" and early:  # the weights kept so far: their evals start now, on the CPU
                new = policies_evals(job)
                if new:
                    got = start_evals(new, ids, one_thread=True)
                    job["early"][0].extend(got[0])
                    job["early"][1].extend(got[1])
                    print(f"[{time.strftime('%H:%M:%S')}] {job['name']} seed {job['seed']}: eval of "
                          f"{', '.join(p.stem for _, p in new)} started on the CPU", flush=True)
            if any(p.poll() is None for p in procs):
                continue
            if stage == "train":
                for f in files:
                    f.close()
                job["rc"], job["seconds"] = procs[0].returncode, time.time() - job["t0"]
                print(f"[{time.strftime('%H:%M:%S')}] done  {job['name']} seed {job['seed']} rc {job['rc']} "
                      f"in {job['seconds']:.0f} s", flush=True)
                evals = policies_evals(job, ended=True)  # (the last mark's, with --policy-evals-cpu: its GPUs are free)
                procs, files = start_evals(evals, ids, one_thread=early and not args.gpus)
                seg = segment_command(args, job["dir"]) if (job["dir"] / "policy.pt").is_file() else []
                seg_procs, seg_files = start_evals(seg, ids)
                if procs or seg_procs or job["early"][0]:
                    item[1:] = [procs + seg_procs + job["early"][0], ids, files + seg_files + job["early"][1],
                                "evals"]
                    job["t_evals"] = time.time()
                    print(f"[{time.strftime('%H:%M:%S')}] start {job['name']} seed {job['seed']}: "
                          f"{len(evals) + len(seg)} evals (its kept policies, its segments)"
                          + (f", {len(job['early'][0])} more started during training" if early else ""), flush=True)
                    continue
            else:
                for f in files:
                    f.close()
                print(f"[{time.strftime('%H:%M:%S')}] done  {job['name']} seed {job['seed']}: policy evals in "
                      f"{time.time() - job['t_evals']:.0f} s after training", flush=True)
            free.extend(ids)
            # the GPU with the most free places first (the least loaded), then the lowest
            free.sort(key=lambda i: (-free.count(i), -1 if i is None else i))
            running.remove(item)


def policy_evals(run_dir: Path) -> list[dict]:
    """The greedy evals of a run's kept policies (`--policy-evals`), by mark: the training seconds, the env-steps
    its weights had, greedy success, the mean deepest milestone where the task names milestones (null where an eval
    failed: its .log says why). The marks are those of the kept weights and of the reports, so a run folder brought
    back without its weights (`gpu.sh jobs_wait` leaves them out) keeps its rates."""
    reports = run_dir / "policy_evals"
    marks = {s for s, _ in kept_policies(run_dir)}
    if reports.is_dir():
        marks |= {int(m.group(1)) for p in reports.glob("*s.json") if (m := EVAL_FILE.match(p.name))}
    out = []
    for s in sorted(marks):
        path = reports / f"{s}s.json"
        lines = [x for x in path.read_text().splitlines() if x.startswith("{")] if path.is_file() else []
        try:
            rep = json.loads(lines[-1]) if lines else {}
        except json.JSONDecodeError:
            rep = {}
        greedy = rep.get("greedy", {})
        out.append({"mark_s": s, "env_steps": rep.get("env_steps_trained"), "greedy": greedy.get("success_rate"),
                    "mean_deepest": greedy.get("mean_deepest")})
        if "sampled" in rep:  # --sampled-evals
            out[-1] |= {"sampled": rep["sampled"].get("success_rate"),
                        "sampled_deepest": rep["sampled"].get("mean_deepest")}
    return out


def segments(run_dir: Path) -> dict:
    """`--segments`' report on a run's final policy: {task: {"greedy", "mean_deepest"}} ({} where there is none)."""
    path = run_dir / "segments.json"
    try:
        rows = json.loads(path.read_text())["policies"] if path.is_file() else {}
    except (json.JSONDecodeError, KeyError):
        return {}
    return {task.rpartition(":")[2]: r for per in rows.values() for task, r in per.items()}


def read_run(run_dir: Path, target: float) -> dict:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return {"error": "no metrics.jsonl"}
    rows = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a torn last line of a killed run
            rows.append(json.loads(line))
    evals = [r for r in rows if r.get("eval/greedy_success") is not None]
    hit = next((r for r in evals if r["eval/greedy_success"] >= target), None)
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").is_file() else {}
    final = json.loads((run_dir / "eval.json").read_text()) if (run_dir / "eval.json").is_file() else {}
    sps = [r["sps"] for r in rows[2:] if r.get("sps")] or [r["sps"] for r in rows if r.get("sps")]
    after = [r["eval/greedy_success"] for r in evals if hit and r["eval/env_steps"] > hit["eval/env_steps"]]
    # the training seconds of the weights that reached the target (the update that made them): an eval beside
    # training reports its result later, at eval/wall_s
    made = next((r.get("wall_s") for r in rows if hit and r.get("env_steps") == hit["eval/env_steps"]), None)
    marks = policy_evals(run_dir)
    # training seconds at the last update; the run's own end (summary's wall_s) also holds the evals it waited for
    # after it (the one in flight at a time limit, the last weights')
    return {"updates": len(rows), "env_steps": rows[-1]["env_steps"] if rows else 0,
            "startup_s": summary.get("startup_s"), "train_s": rows[-1].get("wall_s") if rows else None,
            "end_s": summary.get("wall_s"), "stopped": summary.get("stopped"),
            "to_target_elapsed_s": hit and hit.get("eval/elapsed_s"),
            "to_target_train_s": hit and hit.get("eval/wall_s"),
            "to_target_weights_s": made,
            "to_target_env_steps": hit and hit.get("eval/env_steps"),
            "best_greedy": max((r["eval/greedy_success"] for r in evals), default=None),
            "last_greedy": evals[-1]["eval/greedy_success"] if evals else None,
            "after_target": hit and {"evals": len(after), "min_greedy": min(after, default=None),
                                     "env_steps_past": rows[-1]["env_steps"] - hit["eval/env_steps"]},
            "final_eval_greedy": final.get("success_rate"),
            "final_eval_sampled": final.get("sampled", {}).get("success_rate"),
            "final_eval_stuck": final.get("greedy", {}).get("stuck_rate"),  # greedy failures on a still screen
            "final_eval_cycling": final.get("greedy", {}).get("cycle_rate"),  # ... and circling
            "final_eval_failed_at": final.get("greedy", {}).get("failed_at"),  # and where the failures ended
            "sps_median": statistics.median(sps) if sps else None,
            "policy_evals": marks,
            # the first kept weights at the target (--policy-evals): the time to it where periodic evals are off
            "to_target_mark_s": next((e["mark_s"] for e in marks
                                      if e["greedy"] is not None and e["greedy"] >= target), None),
            "segments": segments(run_dir),
            "curve": [(r["eval/env_steps"], r["eval/elapsed_s"], r["eval/greedy_success"]) for r in evals]}


def fmt(x, spec: str) -> str:
    """`x` in `spec`, or "-" right-aligned to the spec's width."""
    width = int("".join(c for c in spec.split(".")[0].split(",")[0] if c.isdigit()) or 0)
    return "-".rjust(width) if x is None else format(x, spec)


def deepest(x) -> str:
    """" (deepest X.X)" for a mean deepest milestone, "" where there is none."""
    return "" if x is None else f" (deepest {x:.1f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setup", nargs=2, action="append", required=True, metavar=("NAME", "FLAGS"),
                    help="a named training setup: `gbxcule train` flags (repeatable)")
    ap.add_argument("--seeds", default="0,1,2", help="seeds per setup (default 0,1,2)")
    ap.add_argument("--target", type=float, default=0.9, help="greedy success that counts as solved (default 0.9)")
    ap.add_argument("--eval-every", type=int, default=1_048_576, help="env-steps between greedy evals")
    ap.add_argument("--episodes", type=int, default=64, help="episodes per greedy eval (default 64)")
    ap.add_argument("--keep-training", action="store_true",
                    help="do not stop a run at the target: it trains on to total_steps or the time limit")
    ap.add_argument("--time-limit", type=float, default=300, help="training seconds per run (default 300)")
    ap.add_argument("--gpus", type=int, default=None, help="GPUs to pack jobs onto (default: all torch sees)")
    ap.add_argument("--gpus-per-job", action="append", default=[], metavar="NAME=G")
    ap.add_argument("--jobs-per-gpu", type=int, default=1, metavar="K",
                    help="runs sharing each GPU at once (default 1; their seconds then count the sharing)")
    ap.add_argument("--out", default="bench_out/learning")
    ap.add_argument("--summarize-only", action="store_true", help="read the run folders under --out, run nothing")
    ap.add_argument("--policy-evals", action="store_true",
                    help="once a run ends, evaluate the weights it kept at its marks (run.policy_every_s) greedy")
    ap.add_argument("--policy-evals-cpu", action="store_true",
                    help="with --policy-evals: evaluate each kept policy on the CPU (one thread each) as soon as the "
                         "run keeps it, while it trains on, rather than on its GPUs once it ends")
    ap.add_argument("--sampled-evals", action="store_true",
                    help="with --policy-evals and --segments: sampled as well as greedy (about twice the time)")
    ap.add_argument("--segments", action="store_true",
                    help="once a run ends, evaluate its final policy greedy on each segment task of its task's pack "
                         "(<task>_m<N>; scripts/bench/bench_segments.py)")
    args = ap.parse_args()
    try:  # each setup's runs are folders under --out: a run's own folder (or an entry of one) cannot hold them
        check_output_dir(args.out)
    except GbxculeError as exc:
        sys.stderr.write(f"bench_learning: {exc}\n")
        return 2
    args.gpus = gpu_count() if args.gpus is None else args.gpus
    per_job = {k: int(v) for k, v in (x.split("=", 1) for x in args.gpus_per_job)}
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [{"name": name, "flags": flags, "seed": s, "gpus": per_job.get(name, 1),
             "dir": out / f"{name}_s{s}", "cmd": job_command(args, flags, s, out / f"{name}_s{s}")}
            for name, flags in args.setup for s in seeds]
    if not args.summarize_only:
        pending = [j for j in jobs if not (j["dir"] / "summary.json").is_file()]
        run_jobs(args, sorted(pending, key=lambda j: seeds.index(j["seed"])))  # seed by seed: a cut run loses seeds
    results = []
    for j in jobs:
        r = read_run(j["dir"], args.target)
        results.append({"setup": j["name"], "flags": j["flags"], "seed": j["seed"], "gpus": j["gpus"],
                        "command": shlex.join(j["cmd"]), "rc": j.get("rc"), **r})
    from gbxcule.harness.bench import environment

    data = {"target": args.target, "eval_every": args.eval_every, "episodes": args.episodes,
            "time_limit_s": args.time_limit, "gpus": args.gpus, "results": results, "environment": environment()}
    write_output(out / "learning.json", json.dumps(data, indent=1), ())
    try:
        from gbxcule.rl.plot import plot_runs

        for name, _ in args.setup:
            dirs = [j["dir"] for j in jobs if j["name"] == name and (j["dir"] / "metrics.jsonl").is_file()]
            if dirs:
                plot_runs(dirs, out / f"curves_{name}")
        firsts = [j["dir"] for j in jobs if j["seed"] == seeds[0] and (j["dir"] / "metrics.jsonl").is_file()]
        if len(firsts) > 1:
            plot_runs(firsts, out / "curves_all")
    except Exception as exc:  # the table and JSON matter more than the pictures
        print(f"plots failed: {exc}", file=sys.stderr)
    print(f"\ntarget: greedy success >= {args.target:.0%} over {args.episodes} episodes; time limit "
          f"{args.time_limit:.0f} s of training; {args.gpus or 'no'} GPU(s)")
    print(f"{'setup':14s} {'seed':>4s} {'to target (s)':>13s} {'train s':>8s} {'weights':>8s} {'env-steps':>11s} "
          f"{'best':>6s} "
          f"{'last':>6s} {'after':>6s} {'final':>6s} {'sampled':>7s} {'stuck':>6s} {'SPS':>9s}  stopped")
    for r in results:
        if "error" in r:
            print(f"{r['setup'][:14]:14s} {r['seed']:>4d}  {r['error']} (rc {r['rc']})")
            continue
        print(f"{r['setup'][:14]:14s} {r['seed']:>4d} {fmt(r['to_target_elapsed_s'], '13.1f')} "
              f"{fmt(r['to_target_train_s'], '8.1f')} {fmt(r['to_target_weights_s'], '8.1f')} "
              f"{fmt(r['to_target_env_steps'], '11,d')} "
              f"{fmt(r['best_greedy'], '6.1%')} {fmt(r['last_greedy'], '6.1%')} "
              f"{fmt((r['after_target'] or {}).get('min_greedy'), '6.1%')} {fmt(r['final_eval_greedy'], '6.1%')} "
              f"{fmt(r['final_eval_sampled'], '7.1%')} {fmt(r['final_eval_stuck'], '6.1%')} "
              f"{fmt(r['sps_median'], '9,.0f')}  {r['stopped']}")
    print("to target: seconds since the process started and of training when the first eval at the target reported; "
          "weights: the training seconds of the weights it evaluated (earlier where evals run beside training)")
    print("after: the lowest greedy success of the evals after the first at the target; final, sampled: the final "
          "policy's greedy and sampled success; stuck: its greedy episodes that failed on a still screen")
    marks = [r for r in results if r.get("policy_evals")]
    if marks:
        print("greedy (and with --sampled-evals sampled) success of the weights kept at each mark of training "
              "(--policy-evals; deepest: the mean deepest milestone of the episodes)")
        for r in marks:
            cells = [f"{e['mark_s']} s {fmt(e['greedy'], '.1%')}" + deepest(e.get("mean_deepest"))
                     + (f", sampled {fmt(e['sampled'], '.1%')}{deepest(e.get('sampled_deepest'))}"
                        if "sampled" in e else "") for e in r["policy_evals"]]
            first = r["to_target_mark_s"]
            print(f"{r['setup'][:14]:14s} {r['seed']:>4d}  " + "; ".join(cells)
                  + (f"; first at the target: the {first} s weights" if first is not None else "; none at the target"))
    segs = [r for r in results if r.get("segments")]
    if segs:
        print("greedy (sampled) success of each final policy from each segment task's start (--segments)")
        for r in segs:
            print(f"{r['setup'][:14]:14s} {r['seed']:>4d}  " + "; ".join(
                f"{t} {fmt(e.get('greedy'), '.0%')}" + (f" (sampled {fmt(e['sampled'], '.0%')})" if "sampled" in e
                                                          else "") for t, e in r["segments"].items()))
    print(f"artifact: {out / 'learning.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
