"""What a killed-then-resumed training run reproduces on a device (docs/training.md, "Checkpoints, resume and
determinism"), for each trainer and for PPO with the state archive (`archive_host`: with its cells' slots in host
memory, also compared with `archive`, whose bits it must equal). Per setup, three tiny runs: A straight
through, B straight through again (is training on this device itself repeatable?), C stopped after 2 updates and
resumed. Prints, per setup, how many logged metrics B and C match A in bit for bit (and which do not), and the
largest weight difference; writes the tables as JSON. The runs set `run.deterministic` (torch's deterministic
algorithms; an op without one warns with its name) unless `--default-cudnn` asks for what training does by default.

    python scripts/check/gpu_resume_check.py --device cuda --out resume_check.json
    python scripts/check/gpu_resume_check.py --device cpu --envs 8 --setups a2c,archive
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

# the archive setup's table: small, with cell starts, swarming and spread clocks all in play
ARCHIVE = {"capacity": 64, "p_start": 0.25, "max_steps": 6, "swarm": 0.25, "inserts": 8}


def sections(setup: str, n: int) -> dict:
    """The config (besides `run`) of a tiny run of `setup` at `n` envs: four logged updates."""
    if setup == "ppo":
        return {"total_steps": 4 * n * 16, "env": {"num_envs": n},
                "ppo": {"rollout_steps": 16, "epochs": 2, "minibatches": 2}}
    if setup == "ppo_share":  # configs/leave_house_ppo_share.toml's path: one epoch on a moving block of the envs
        return {"total_steps": 4 * n * 8, "env": {"num_envs": n},
                "ppo": {"rollout_steps": 8, "epochs": 1, "minibatches": 2, "learn_share": 0.5, "channels_last": True,
                        "anneal_lr": False}}
    if setup == "a2c":  # configs/leave_house_a2c.toml's path: n-step windows, the adaptive entropy weight
        return {"algo": "a2c", "total_steps": 4 * n * 8, "env": {"num_envs": n},
                "a2c": {"steps_per_update": 8, "n_step": 4, "update_every": 4, "gae_lambda": 0.95,
                        "ent_coef": 0.01}}
    if setup == "pqn":
        return {"algo": "pqn", "total_steps": 4 * n * 6, "env": {"num_envs": n, "max_steps": 10},
                "pqn": {"rollout_steps": 6, "epochs": 2, "minibatches": 2, "exploration_fraction": 0.5}}
    if setup == "dqn":  # the prioritized buffer, kept in checkpoints (without it a resume refills the buffer)
        return {"algo": "dqn", "total_steps": 4 * n * 6, "env": {"num_envs": n, "max_steps": 10},
                "dqn": {"buffer_size": n * 20, "batch_size": 64, "learning_starts": 5 * n, "log_every": 6,
                        "replay_ratio": 0.5, "target_every": 2, "dueling": True, "prioritized": True,
                        "exploration_fraction": 0.5, "checkpoint_buffer": True}}
    if setup in ("archive", "archive_host"):
        table = ARCHIVE if setup == "archive" else {**ARCHIVE, "store": "host"}
        return {"total_steps": 4 * n * 8, "env": {"num_envs": n, "task": "talk_to_hiker", "max_steps": 12,
                                                  "spread_clocks": True, "archive": table},
                "ppo": {"rollout_steps": 8, "epochs": 1, "minibatches": 2}}
    raise ValueError(setup)


SETUPS = ("ppo", "ppo_share", "a2c", "pqn", "dqn", "archive", "archive_host")


def timing(key: str) -> bool:
    """Logged figures that are clock readings (never the same twice)."""
    return (key.startswith("time_") or key in ("sps", "wall_s", "updates_per_s")
            or key in ("eval/wall_s", "eval/elapsed_s", "eval/seconds"))


def rows(run_dir: Path) -> list[dict]:
    out = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not timing(k)} for r in out]


def weight_diff(a: dict, b: dict) -> float:
    """The largest absolute difference between two state dicts' tensors."""
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def check(setup: str, device: str, n: int, root: Path, deterministic: bool = True) -> dict:
    from gbxcule.rl.rundir import load_checkpoint
    from gbxcule.rl.training import make_config, train

    def cfg(run_dir: Path, **run):
        return make_config(None, {**sections(setup, n), "run": {
            "run_dir": str(run_dir), "device": device, "progress": False, "tensorboard": False,
            "checkpoint_every": 1, "eval_episodes": 0, "checkpoint_env_state": "always",
            "deterministic": deterministic, **run}})

    a, b, c = root / setup / "a", root / setup / "b", root / setup / "c"
    train(cfg(a))
    train(cfg(b))
    train(cfg(c, stop_after_updates=2))
    train(cfg(c), resume=True)
    ra, rb, rc = rows(a), rows(b), rows(c)
    keys = sorted(set(ra[0]) - {"update"})
    table = {k: {"repeat": [r.get(k) for r in rb] == [r.get(k) for r in ra],
                 "resume": [r.get(k) for r in rc] == [r.get(k) for r in ra]} for k in keys}
    wa, wb, wc = (load_checkpoint(d)["model"] for d in (a, b, c))
    weights = {"repeat": weight_diff(wa, wb), "resume": weight_diff(wa, wc)}
    return {"updates": len(ra), "resumed_updates": len(rc), "metrics": table, "max_weight_diff": weights}


def same_runs(a: Path, b: Path) -> dict:
    """How far two straight runs agree: metrics equal at every update, and the largest weight difference."""
    from gbxcule.rl.rundir import load_checkpoint

    ra, rb = rows(a), rows(b)
    keys = sorted(set(ra[0]) - {"update"})
    differ = [k for k in keys if [r.get(k) for r in ra] != [r.get(k) for r in rb]]
    wa, wb = (load_checkpoint(d)["model"] for d in (a, b))
    return {"equal": len(keys) - len(differ), "of": len(keys), "differ": differ,
            "max_weight_diff": weight_diff(wa, wb)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--envs", type=int, default=256)
    ap.add_argument("--setups", default=",".join(SETUPS), help=f"comma-separated, of: {', '.join(SETUPS)}")
    ap.add_argument("--out", default="resume_check.json")
    ap.add_argument("--default-cudnn", action="store_true",
                    help="leave run.deterministic off (cuDNN may pick non-deterministic algorithms)")
    args = ap.parse_args()
    setups = [s for s in args.setups.split(",") if s]
    unknown = [s for s in setups if s not in SETUPS]
    if unknown:
        print(f"error: unknown setup(s) {', '.join(unknown)}; known: {', '.join(SETUPS)}", file=sys.stderr)
        return 2
    import torch

    root = Path(tempfile.mkdtemp(prefix="resume_check_"))
    results = {s: check(s, args.device, args.envs, root, not args.default_cudnn) for s in setups}
    if "archive" in results and "archive_host" in results:  # the cells in host memory: the same bits
        results["archive_host"]["same_as_archive"] = same_runs(root / "archive" / "a", root / "archive_host" / "a")
    out = {"device": args.device, "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
           "envs": args.envs, "deterministic": not args.default_cudnn, "setups": results}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"\n{'setup':12s} {'updates':>7s} {'repeat':>9s} {'resume':>9s} {'weights: repeat':>16s} {'resume':>8s}  "
          "metrics that differ from the straight run (resume)")
    for s, r in results.items():
        m, w = r["metrics"], r["max_weight_diff"]
        same = {k: sum(v[k] for v in m.values()) for k in ("repeat", "resume")}
        differ = [k for k, v in m.items() if not v["resume"]]
        print(f"{s:12s} {r['updates']:7d} {same['repeat']:4d}/{len(m):<4d} {same['resume']:4d}/{len(m):<4d} "
              f"{w['repeat']:16.2g} {w['resume']:8.2g}  {', '.join(differ) or '-'}")
    print(f"(metrics equal bit for bit to the straight run's, of those logged; {args.device}, {args.envs} envs, "
          f"run.deterministic {'off' if args.default_cudnn else 'on'})")
    if "same_as_archive" in results.get("archive_host", {}):
        r = results["archive_host"]["same_as_archive"]
        print(f"archive_host against archive: {r['equal']}/{r['of']} metrics equal, weights differ by at most "
              f"{r['max_weight_diff']:.2g}{' (' + ', '.join(r['differ']) + ')' if r['differ'] else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
