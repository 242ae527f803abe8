"""What a killed-then-resumed PPO run reproduces on CUDA (docs/training.md, "Checkpoints, resume and
determinism"). Three tiny runs on one device: A straight through, B straight through again (is CUDA training
itself repeatable?), C stopped after 2 updates and resumed. Prints, per metric, whether B and C match A bit for
bit, and the largest weight difference, then writes the table as JSON.

    python scripts/gpu_resume_check.py --device cuda --out resume_check.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from gbxcule.rl.algos import make_config, train
from gbxcule.rl.shell import load_checkpoint

TIMING = {"sps", "time_env_s", "time_inference_s", "time_update_s", "wall_s"}


def config(run_dir: Path, device: str, envs: int, **run):
    return make_config(None, {"total_steps": 4 * envs * 16, "env": {"num_envs": envs},
                              "ppo": {"rollout_steps": 16, "epochs": 2, "minibatches": 2},
                              "run": {"run_dir": str(run_dir), "device": device, "progress": False,
                                      "tensorboard": False, "checkpoint_every": 1, "eval_episodes": 0, **run}})


def rows(run_dir: Path) -> list[dict]:
    out = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in out]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--envs", type=int, default=256)
    ap.add_argument("--out", default="resume_check.json")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="resume_check_"))
    a, b, c = root / "a", root / "b", root / "c"
    train(config(a, args.device, args.envs))
    train(config(b, args.device, args.envs))
    train(config(c, args.device, args.envs, stop_after_updates=2))
    train(config(c, args.device, args.envs), resume=True)
    ra, rb, rc = rows(a), rows(b), rows(c)
    keys = sorted(set(ra[0]) - {"update"})
    table = {}
    for k in keys:
        table[k] = {"repeat": [r[k] for r in rb] == [r[k] for r in ra],
                    "resume": [r[k] for r in rc] == [r[k] for r in ra]}
    wa, wb, wc = (load_checkpoint(d)["model"] for d in (a, b, c))
    weights = {"repeat": max(float((wa[k].float() - wb[k].float()).abs().max()) for k in wa),
               "resume": max(float((wa[k].float() - wc[k].float()).abs().max()) for k in wa)}
    result = {"device": args.device, "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
              "envs": args.envs, "updates": len(ra), "metrics": table, "max_weight_diff": weights}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"{'metric':24s} {'repeat':>7s} {'resume':>7s}")
    for k, v in table.items():
        print(f"{k:24s} {'same' if v['repeat'] else 'DIFF':>7s} {'same' if v['resume'] else 'DIFF':>7s}")
    print(f"{'max |weight diff|':24s} {weights['repeat']:>7.2g} {weights['resume']:>7.2g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
