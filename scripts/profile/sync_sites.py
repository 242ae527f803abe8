"""Where a training run waits for the GPU: every host wait torch's sync debug mode reports, and every Warp
synchronize call, counted by the gbxcule lines that led to it, over a few updates of `gbxcule train`.

    python scripts/profile/sync_sites.py --updates 4 -- --config configs/long_tasks.toml --task quest_m11

Everything after `--` goes to `gbxcule train` (its `--device` defaults to cuda here; evals are off unless asked
for). A site that waits once an env-step shows a count of updates x rollout steps (64 for 4 updates of 16 steps):
the loop should have none (docs/training.md "Speed": each such wait stops the host from queueing ahead, and stops
`ppo.overlap`'s rollout and learner from running side by side). Needs a CUDA device; prints a table, most frequent
first, and `--out FILE` writes it as JSON.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import traceback
import warnings


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--updates", type=int, default=4, help="updates to train (default 4)")
    p.add_argument("--frames", type=int, default=6, help="gbxcule source lines shown a site (default 6)")
    p.add_argument("--run-dir", default="runs/sync_sites", help="the run folder (default runs/sync_sites)")
    p.add_argument("--out", default=None, help="also write the sites as JSON here")
    p.add_argument("train", nargs=argparse.REMAINDER, help="-- then the arguments of gbxcule train")
    a = p.parse_args()
    train = a.train[1:] if a.train[:1] == ["--"] else a.train

    import torch
    import warp as wp

    from gbxcule.cli.main import main as cli

    if not torch.cuda.is_available():
        print("sync_sites: needs a CUDA device", file=sys.stderr)
        return 2
    sites: collections.Counter = collections.Counter()

    def note(kind: str) -> None:
        here = [f for f in traceback.extract_stack()[:-2] if "gbxcule" in f.filename.replace("\\", "/")]
        lines = tuple(f"{f.filename.split('src/')[-1]}:{f.lineno} {f.name}" for f in here[-a.frames:])
        sites[(kind, lines)] += 1

    warnings.showwarning = lambda message, *_a, **_k: note("torch: " + str(message).split("(")[0].strip())
    warnings.simplefilter("always")
    for name in ("synchronize_device", "synchronize", "synchronize_stream", "synchronize_event"):
        real = getattr(wp, name)
        setattr(wp, name, lambda *x, _real=real, _name=name, **k: (note("wp." + _name), _real(*x, **k))[1])
    args = ["train", "--device", "cuda", "--run-dir", a.run_dir, "--set", f"run.stop_after_updates={a.updates}",
            "--set", "run.eval_every_s=none", *train]
    torch.cuda.set_sync_debug_mode("warn")
    try:
        rc = cli(args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    rows = [{"count": c, "kind": kind, "lines": list(lines)} for (kind, lines), c in sites.most_common()]
    print(f"{'waits':>6}  site (the last gbxcule lines before it, innermost last)")
    for r in rows:
        print(f"{r['count']:6d}  {r['kind']}")
        for line in r["lines"]:
            print(f"{'':8}{line}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"train": args, "updates": a.updates, "sites": rows}, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
