"""`gbxcule train`: an agent from pixels on a Game Boy game (docs/training.md)."""

from __future__ import annotations

import sys

from gbxcule.cli.common import parse_start_states

# Flags for the algorithm's own section: the ones every algorithm with such a setting shares, then PPO's.
ALGO_KNOBS = (("lr", float), ("gamma", float), ("ent_coef", float), ("vf_coef", float), ("max_grad_norm", float),
              ("model", str), ("rollout_steps", int), ("epochs", int), ("minibatches", int), ("gae_lambda", float),
              ("clip", float), ("target_kl", float))


def register(sub) -> None:
    from gbxcule.rl.algos import ALGOS

    algos = "; ".join(f"{name}: {spec.summary}" for name, spec in ALGOS.items())
    p = sub.add_parser("train", help="train an agent from pixels (PPO, ...) and evaluate it",
                       description="Train an agent on a Game Boy game with env stepping, policy and updates on the "
                                   "device. Settings come from defaults, then --config (TOML), then the flags "
                                   "given, then --set. Writes a run folder: config, facts, metrics.jsonl, "
                                   "TensorBoard events, checkpoint.pt, policy.pt, summary.json, eval.json "
                                   f"(docs/training.md). Algorithms: {algos}. Ctrl-C (or SIGTERM) stops at the "
                                   "end of the update with a checkpoint; --resume continues.")
    p.add_argument("--config", metavar="TOML", help="a config file (sections env, run and the algorithm's)")
    p.add_argument("--algo", choices=tuple(ALGOS), help="algorithm (default ppo)")
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
    for name, typ in ALGO_KNOBS:
        p.add_argument("--" + name.replace("_", "-"), type=typ, help=f"the algorithm's {name} (where it has one)")
    p.add_argument("--anneal-lr", dest="anneal_lr", action="store_true", default=None, help="anneal lr to 0")
    p.add_argument("--no-anneal-lr", dest="anneal_lr", action="store_false", help="constant lr")
    p.add_argument("--amp", choices=("auto", "bf16", "off"), help="bf16 autocast (auto: on CUDA)")
    p.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
    p.add_argument("--seed", type=int, help="seed (default 0)")
    p.add_argument("--device", help="cpu, cuda, cuda:N or auto (default auto)")
    p.add_argument("--run-dir", help="run folder (default runs/ALGO)")
    p.add_argument("--resume", metavar="RUN", help="continue the run in this folder from its checkpoint (only "
                   "--total-steps and run settings such as --time-limit, --eval-episodes, --device may change)")
    p.add_argument("--checkpoint-every", type=int, help="updates between checkpoints (default 50)")
    p.add_argument("--time-limit", type=float, metavar="S", help="stop (with a checkpoint) after S seconds")
    p.add_argument("--eval-episodes", type=int, help="greedy episodes evaluated at the end and periodically "
                   "(default 64; 0: none)")
    p.add_argument("--eval-every", type=int, metavar="STEPS", help="a periodic greedy eval every STEPS env-steps")
    p.add_argument("--stop-at-success", type=float, metavar="RATE",
                   help="stop once a periodic greedy eval reaches RATE (e.g. 0.9)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="any config setting, e.g. --set env.reward.novelty_pixels=0.02 --set env.backend.sort_key=path "
                        "--set a2c.update_every=8 (repeatable; over --config and the flags above)")
    p.add_argument("--json", action="store_true", help="print one JSON summary object")
    p.set_defaults(func=run)


def overrides(args) -> dict:
    """The settings the flags give, as nested overrides (None: not given). The algorithm's knobs go into its
    section (the one --algo, --config or the resumed run names)."""
    knobs = {name: getattr(args, name) for name, _ in ALGO_KNOBS}
    knobs.update(anneal_lr=args.anneal_lr, amp=args.amp, compile=args.compile)
    return {"algo": args.algo, "total_steps": args.total_steps,
            "env": {"rom": args.rom, "task": args.task, "goal": args.goal, "start_states": parse_start_states(
                args.start_states), "num_envs": args.num_envs, "stack_k": args.stack_k, "obs": args.obs,
                "max_steps": args.max_steps},
            "knobs": knobs,
            "run": {"seed": args.seed, "device": args.device, "run_dir": args.run_dir,
                    "checkpoint_every": args.checkpoint_every, "time_limit_s": args.time_limit,
                    "eval_episodes": args.eval_episodes, "eval_every": args.eval_every,
                    "stop_at_success": args.stop_at_success,
                    "progress": False if args.no_progress or args.json else None}}


def run(args) -> int:
    from gbxcule.cli.report import emit
    from gbxcule.core.fmt import num, pct
    from gbxcule.rl import algos
    from gbxcule.rl.explore import achievement
    from gbxcule.rl.shell import merge_overrides, parse_sets

    over = merge_overrides(overrides(args), parse_sets(args.set))
    knobs = over.pop("knobs")
    echo = None if args.json else (lambda s: print(s, file=sys.stderr))
    try:
        cfg, checkpoint = algos.prepare(args.config, over, args.resume, knobs)
    except algos.RunFinished as done:
        print(str(done), file=sys.stderr)
        return 0
    summary = algos.train(cfg, echo=echo, checkpoint=checkpoint, final_eval=True)

    def text(s: dict) -> str:
        last = s["last"]
        sps = last.get("sps")
        lines = [f"trained {s['env_steps']:,} env-steps in {s['updates']} updates, {s['wall_s']:.1f} s on "
                 f"{s['device']} ({s['stopped']}); run folder {s['run_dir']}",
                 f"last update: {'-' if sps is None else format(sps, ',.0f')} env-steps/s, return "
                 f"{num(last.get('episode_return'))}, success {pct(last.get('running_success'))} of the last "
                 f"{last.get('running_episodes', 0)} episodes (sampled policy)"]
        if "eval" in s:
            e = s["eval"]
            lines.append(f"eval over {e['episodes']} episodes from distinct starts: greedy success "
                         f"{pct(e['success_rate'])}, median steps {num(e['median_steps'], '.0f')}, mean return "
                         f"{num(e['mean_return'])}")
        said = achievement(last, s.get("eval"))
        if said:
            lines.append(said)
        return "\n".join(lines)

    emit(args, summary, text)
    return 0
