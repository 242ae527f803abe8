"""`gbxcule train`: PPO from pixels on a Game Boy game (docs/training.md)."""

from __future__ import annotations

import sys

from gbxcule.cli.common import parse_start_states

PPO_KNOBS = (("rollout_steps", int), ("epochs", int), ("minibatches", int), ("lr", float), ("gamma", float),
             ("gae_lambda", float), ("clip", float), ("ent_coef", float), ("vf_coef", float),
             ("max_grad_norm", float), ("target_kl", float), ("model", str))


def register(sub) -> None:
    p = sub.add_parser("train", help="train an agent (PPO from pixels) and evaluate it",
                       description="Train PPO on a Game Boy game with env stepping, policy, rollout and updates "
                                   "on the device. Settings come from defaults, then --config (TOML), then the "
                                   "flags given. Writes a run folder: config, facts, metrics.jsonl, TensorBoard "
                                   "events, checkpoint.pt, summary.json (docs/training.md).")
    p.add_argument("--config", metavar="TOML", help="a config file (sections env, ppo, run; keys as the flags)")
    p.add_argument("--algo", choices=("ppo",), help="algorithm (ppo)")
    p.add_argument("--rom", help="ROM file or built-in ROM name (default: the task's)")
    p.add_argument("--task", help="task name or PACK.toml:NAME (default leave_house)")
    p.add_argument("--goal", metavar="TEMPLATE", help="goal template file over the task's")
    p.add_argument("--start-states", metavar="SPEC",
                   help="state file or folder, random_noops:K[:LEN], random_actions:K[:LEN], solution:K[:LEN] "
                        "(demonstration starts) or power_on")
    p.add_argument("--num-envs", type=int, help="envs (default 64)")
    p.add_argument("--stack-k", type=int, help="frames stacked per observation (default 1)")
    p.add_argument("--obs", choices=("pixels", "packed"), help="observation storage (default pixels)")
    p.add_argument("--max-steps", type=int, help="episode step limit (default: the task's)")
    p.add_argument("--total-steps", type=int, help="env-steps to train (default 1,000,000)")
    for name, typ in PPO_KNOBS:
        p.add_argument("--" + name.replace("_", "-"), type=typ, help=f"PPO {name}")
    p.add_argument("--anneal-lr", dest="anneal_lr", action="store_true", default=None, help="anneal lr to 0")
    p.add_argument("--no-anneal-lr", dest="anneal_lr", action="store_false", help="constant lr")
    p.add_argument("--amp", choices=("auto", "bf16", "off"), help="bf16 autocast (auto: on CUDA)")
    p.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
    p.add_argument("--seed", type=int, help="seed (default 0)")
    p.add_argument("--device", help="cpu, cuda or auto (default auto)")
    p.add_argument("--run-dir", help="run folder (default runs/ppo)")
    p.add_argument("--resume", metavar="RUN", help="continue the run in this folder from its checkpoint")
    p.add_argument("--checkpoint-every", type=int, help="updates between checkpoints (default 50)")
    p.add_argument("--time-limit", type=float, metavar="S", help="stop (with a checkpoint) after S seconds")
    p.add_argument("--eval-episodes", type=int, help="greedy/sampled episodes evaluated at the end (default 64)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="any config setting, e.g. --set env.reward.novelty_pixels=0.02 --set env.backend.sort_key=path "
                        "(repeatable; over --config and the flags above)")
    p.add_argument("--json", action="store_true", help="print one JSON summary object")
    p.set_defaults(func=run)


def _num(x) -> str:
    """A metric for the summary line: '-' when no episode ended (None or NaN)."""
    return "-" if x is None or x != x else f"{x:.3f}"


def overrides(args) -> dict:
    ppo = {name: getattr(args, name) for name, _ in PPO_KNOBS}
    ppo.update(anneal_lr=args.anneal_lr, amp=args.amp, compile=args.compile)
    return {"algo": args.algo, "total_steps": args.total_steps,
            "env": {"rom": args.rom, "task": args.task, "goal": args.goal, "start_states": parse_start_states(
                args.start_states), "num_envs": args.num_envs, "stack_k": args.stack_k, "obs": args.obs,
                "max_steps": args.max_steps},
            "ppo": ppo,
            "run": {"seed": args.seed, "device": args.device, "run_dir": args.run_dir or args.resume,
                    "checkpoint_every": args.checkpoint_every, "time_limit_s": args.time_limit,
                    "eval_episodes": args.eval_episodes, "progress": False if args.no_progress or args.json else None}}


def run(args) -> int:
    from gbxcule.cli.report import emit
    from gbxcule.rl.shell import merge_overrides, parse_sets
    from gbxcule.rl.train_ppo import make_config, train

    cfg = make_config(args.config, merge_overrides(overrides(args), parse_sets(args.set)))
    echo = None if args.json else (lambda s: print(s, file=sys.stderr))
    summary = train(cfg, resume=args.resume is not None, echo=echo)
    if summary["stopped"] in ("done", "time_limit") and cfg.run.eval_episodes > 0:
        import json
        from pathlib import Path

        from gbxcule.core.outputs import write_output
        from gbxcule.rl.evaluate import evaluate

        summary["eval"] = evaluate(summary["run_dir"], episodes=cfg.run.eval_episodes, device=summary["device"])
        write_output(Path(summary["run_dir"]) / "eval.json", json.dumps(summary["eval"], indent=2) + "\n")

    def text(s: dict) -> str:
        last = s["last"]
        lines = [f"trained {s['env_steps']:,} env-steps in {s['updates']} updates, {s['wall_s']:.1f} s on "
                 f"{s['device']} ({s['stopped']}); run folder {s['run_dir']}",
                 f"last update: {last.get('sps', 0):,.0f} env-steps/s, return {_num(last.get('episode_return'))}, "
                 f"success {_num(last.get('success_rate'))}"]
        if "eval" in s:
            e = s["eval"]
            lines.append(f"eval over {e['episodes']} episodes: greedy success {e['success_rate']}, median steps "
                         f"{e['median_steps']}, mean return {e['mean_return']:.3f}")
        return "\n".join(lines)

    emit(args, summary, text)
    return 0
