"""Run a list of shell commands on a host's GPUs, each on the GPUs it needs, as many at once as fit.

    python scripts/gpu/gpu_jobs.py JOBS --out DIR [--gpus N]

JOBS is a text file, one job a line: `[G] NAME: COMMAND` (G GPUs, default 1; the job sees them as
CUDA_VISIBLE_DEVICES, taken from this runner's own CUDA_VISIBLE_DEVICES where it has one, so runners nest, and
`$JOB_OUT` is DIR/NAME, made for it); `---` waits until every running job has ended;
`#` starts a comment. Jobs start in file order as soon as enough GPUs are free; a failing job does not stop the
others. Each job's output goes to DIR/NAME.log; at the end one table (job, GPUs, exit status, seconds) is
printed and DIR/jobs.json written. Exit status: 0 when every job exited 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import check_output_dir, write_output
from gbxcule.harness.bench import child_gpus, inherited_gpus

LINE = re.compile(r"^(?:\[(\d+)\]\s*)?([A-Za-z0-9_.-]+):\s*(.+)$")


def parse(text: str) -> list[dict | None]:
    """Jobs in order (None for a barrier). A malformed line is a ValueError naming it."""
    out: list[dict | None] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line == "---":
            out.append(None)
            continue
        m = LINE.match(line)
        if not m:
            raise ValueError(f"line {no}: expected '[G] NAME: COMMAND' or '---', got {line!r}")
        out.append({"name": m.group(2), "gpus": int(m.group(1) or 1), "cmd": m.group(3)})
    names = [j["name"] for j in out if j]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"job names repeat: {', '.join(dup)}")
    return out


def gpu_count() -> int:
    """The GPUs this runner may use: those CUDA_VISIBLE_DEVICES names where it is set, else the host's."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:  # set, even empty (no GPU)
        return len(inherited_gpus() or [])
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        return sum(1 for x in r.stdout.splitlines() if x.startswith("GPU "))
    except (OSError, subprocess.SubprocessError):
        return 0


def run(jobs: list[dict | None], out: Path, gpus: int) -> list[dict]:
    free = list(range(max(gpus, 1)))
    running: list[tuple[dict, subprocess.Popen, list[int], object]] = []
    done: list[dict] = []

    def reap(block: bool) -> None:
        while running:
            for item in list(running):
                job, proc, ids, log = item
                if proc.poll() is not None:
                    log.close()
                    job.update(rc=proc.returncode, seconds=round(time.time() - job["t0"], 1))
                    free.extend(ids)
                    free.sort()
                    running.remove(item)
                    done.append(job)
                    print(f"[{time.strftime('%H:%M:%S')}] done  {job['name']} rc {job['rc']} in {job['seconds']} s",
                          flush=True)
            if not block or not running:
                return
            time.sleep(0.5)

    for job in jobs:
        if job is None:
            reap(block=True)
            continue
        need = min(job["gpus"], max(gpus, 1))
        while len(free) < need:
            reap(block=False)
            time.sleep(0.5)
        ids, free[:] = free[:need], free[need:]
        job_out = out / job["name"]
        job_out.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, JOB_OUT=str(job_out))
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = child_gpus(ids)
        log = open(out / f"{job['name']}.log", "w")  # noqa: SIM115 (closed when the job ends)
        job["t0"] = time.time()
        job["gpu_ids"] = ids if gpus else []
        proc = subprocess.Popen(["bash", "-c", job["cmd"]], stdout=log, stderr=subprocess.STDOUT, env=env)
        running.append((job, proc, ids, log))
        where = "GPU " + ",".join(map(str, ids)) if gpus else "the CPU"
        print(f"[{time.strftime('%H:%M:%S')}] start {job['name']} on {where}", flush=True)
    reap(block=True)
    return done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", help="the job file")
    ap.add_argument("--out", default="bench_out/jobs", help="folder for the logs and each job's $JOB_OUT")
    ap.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: all nvidia-smi lists)")
    args = ap.parse_args()
    try:
        jobs = parse(Path(args.jobs).read_text())
        check_output_dir(args.out, [args.jobs])
    except (OSError, ValueError, GbxculeError) as exc:
        print(f"gpu_jobs: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 2
    gpus = gpu_count() if args.gpus is None else args.gpus
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    done = run(jobs, out, gpus)
    write_output(out / "jobs.json", json.dumps([{k: v for k, v in j.items() if k != "t0"} for j in done], indent=1),
                 [args.jobs])
    print(f"\n{'job':28s} {'GPUs':>6s} {'rc':>4s} {'seconds':>8s}")
    for j in done:
        ids = ",".join(map(str, j["gpu_ids"])) or "cpu"
        print(f"{j['name'][:28]:28s} {ids:>6s} {j['rc']:>4d} {j['seconds']:>8.1f}")
    return 0 if all(j["rc"] == 0 for j in done) else 1


if __name__ == "__main__":
    raise SystemExit(main())
