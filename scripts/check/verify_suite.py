"""Lockstep-verify every built-in ROM against PyBoy in the four acceptance configurations.

    .venv/bin/python scripts/check/verify_suite.py [--steps 2000] [--jobs 2] [--out verify_out/suite.json] [NAMES...]

Configurations: frames_per_step 1 and 24, each with seeded_random and striped actions. Runs `gbxcule verify`
in parallel processes, prints a table and writes a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CONFIGS = [(1, "seeded_random"), (1, "striped"), (24, "seeded_random"), (24, "striped")]


def run_one(name: str, fps: int, actions: str, steps: int, bundle_dir: str) -> dict:
    cmd = [sys.executable, "-m", "gbxcule", "verify", "--rom", name, "--steps", str(steps), "--frames-per-step",
           str(fps), "--release-after-frames", str(min(8, fps)), "--actions", actions, "--bundle-dir", bundle_dir,
           "--json"]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    try:
        out = json.loads(r.stdout)
    except json.JSONDecodeError:
        out = {"ok": False, "differences": [r.stderr.strip()[-500:]]}
    return {"rom": name, "frames_per_step": fps, "actions": actions, "steps": steps, "ok": out.get("ok", False),
            "steps_run": out.get("steps_run"), "differences": out.get("differences", [])[:10],
            "bundle": out.get("bundle"), "seconds": round(time.time() - t0, 1)}


def main() -> int:
    from gbxcule.roms import suite

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default="verify_out/suite.json")
    p.add_argument("--bundle-dir", default="verify_out/bundles")
    args = p.parse_args()
    names = args.names or list(suite())
    jobs = [(n, fps, a) for n in names for fps, a in CONFIGS]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda j: run_one(*j, args.steps, args.bundle_dir), jobs))
    for r in results:
        print(f"{'OK ' if r['ok'] else 'BAD'} {r['rom']:22s} fps={r['frames_per_step']:2d} {r['actions']:13s} "
              f"{r['steps_run']} steps {r['seconds']:7.1f} s {'' if r['ok'] else r['differences'][:1]}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "results": results}, indent=2) + "\n")
    print(f"{sum(r['ok'] for r in results)}/{len(results)} configurations matched; summary: {out}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
