"""GPU probe for the RL stack: CUDA GameEnv == CPU GameEnv on a seeded random walk, then short PPO runs
that print learning and speed per update.

    python scripts/check/gpu_rl_probe.py [--train-s 120] [--envs 4096,16384]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from gbxcule.rl import GameEnv
from gbxcule.rl.training import make_config, train


def check(steps: int = 40, n: int = 64, task: str = "leave_house", devices=("cpu", "cuda"), **kw) -> dict:
    """Step a CPU and a CUDA env with the same seeded actions (env 0 plays the task's solution where it has one,
    the others random actions); report the first differing output, RAM included."""
    envs = dict(zip(("cpu", "cuda"), (GameEnv(task=task, num_envs=n, device=d, seed=3, **kw) for d in devices),
                    strict=True))
    solution = list(envs["cpu"].task.solution or ())
    steps = max(steps, len(solution))
    rng = np.random.default_rng(0)
    out = {d: e.reset(seed=3)[0].cpu().clone() for d, e in envs.items()}
    first = None if torch.equal(out["cpu"], out["cuda"]) else ("reset obs", 0)
    names = ("obs", "reward", "terminated", "truncated")
    for step in range(1, steps + 1):
        a = rng.integers(0, 8, size=n).astype(np.int64)
        if step <= len(solution):
            a[0] = solution[step - 1]
        res = {d: [x.cpu().clone() for x in e.step(torch.from_numpy(a).to(e.device))[:4]] for d, e in envs.items()}
        extra = {d: [e.distance.cpu().clone(), e.success.cpu().clone(), e.steps.cpu().clone(),
                     torch.as_tensor(e.backend.field_values("pc")), torch.as_tensor(e.backend.wram_bytes(0xC100)),
                     e.ram.t().cpu().clone(), e.milestones.t().cpu().clone()]
                 + ([e.archive.keys[:n].cpu().clone(), e.archive.steps[:n].cpu().clone()] if e.archive else [])
                 for d, e in envs.items()}
        for i, (x, y) in enumerate(zip(res["cpu"] + extra["cpu"], res["cuda"] + extra["cuda"], strict=True)):
            if not torch.equal(x, y) and first is None:
                nm = (names + ("distance", "success", "steps", "pc", "map", "ram", "milestones", "cell keys",
                               "cell steps"))[i]
                bad = (x != y).reshape(n, -1).any(1).nonzero().flatten().tolist()
                first = (nm, step, bad[:8], x.reshape(n, -1)[bad[0]][:6].tolist(),
                         y.reshape(n, -1)[bad[0]][:6].tolist())
    return {"cuda_equals_cpu": first is None, "first_difference": first, "steps": steps, "envs": n, "task": task,
            **{k: str(v) for k, v in kw.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train-s", type=float, default=120)
    ap.add_argument("--envs", default="4096")
    ap.add_argument("--task", default="leave_house")
    ap.add_argument("--set", action="append", default=[], help="extra override KEY=VALUE (dotted), JSON value")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--check-tasks", default="",
                    help="comma-separated tasks also checked CUDA == CPU along their solution (e.g. quest_m1,...)")
    args = ap.parse_args()
    out = os.environ.get("OUT", "out")
    os.makedirs(out, exist_ok=True)
    results = {}
    if not args.skip_check:
        t = time.time()
        archive = {"stack_k": 2, "start_states": ("random_actions", 4), "max_steps": 12, "spread_clocks": True,
                   "archive": {"capacity": 64, "p_start": 0.2, "max_steps": 5, "swarm": 0.3, "swarm_on": "depth",
                               "swarm_depth": 3, "w_depth": 1.0}}  # the state archive: CUDA == CPU too
        tasks = [{"task": t, "archive": {"capacity": 256}} for t in args.check_tasks.split(",") if t]
        for i, kw in enumerate(({"stack_k": 2, "start_states": ("random_actions", 8)}, {"obs": "packed"}, archive,
                                *tasks)):
            results[f"check{i}"] = check(**kw)
            print("check", results[f"check{i}"], f"{time.time() - t:.1f}s", flush=True)
    for n in [] if args.check_only else [int(x) for x in args.envs.split(",")]:
        over = {"total_steps": 10**10, "env": {"num_envs": n, "task": args.task},
                "run": {"run_dir": f"{out}/run_{args.task}_{n}", "device": "cuda", "progress": False,
                        "time_limit_s": args.train_s, "checkpoint_every": 10**6, "eval_episodes": 0,
                        "tensorboard": False}}
        for kv in args.set:
            k, v = kv.split("=", 1)
            d = over
            *path, last = k.split(".")
            for p in path:
                d = d.setdefault(p, {})
            d[last] = json.loads(v)
        cfg = make_config(None, over)
        t = time.time()
        s = train(cfg, echo=print)
        with open(f"{out}/run_{args.task}_{n}/metrics.jsonl") as f:
            lines = [json.loads(x) for x in f]
        for m in lines:
            print(f"n={n} u={m['update']:4d} steps={m['env_steps']:>10,} sps={m['sps']:>9,.0f} "
                  f"env={m['time_env_s']:.2f} inf={m['time_inference_s']:.2f} upd={m['time_update_s']:.2f} "
                  f"ret={m['episode_return']} succ={m['success_rate']} len={m['episode_length']} "
                  f"ent={m['entropy']:.3f} kl={m['approx_kl']:.4f}", flush=True)
        results[f"train_{n}"] = {"wall": time.time() - t, "updates": s["updates"], "env_steps": s["env_steps"],
                                 "last": s["last"]}
    with open(f"{out}/probe.json", "w") as f:
        json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
