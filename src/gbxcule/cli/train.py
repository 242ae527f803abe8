"""`gbxcule train`: an agent from pixels on a Game Boy game (docs/training.md)."""

from __future__ import annotations

import sys

from gbxcule.cli.common import parse_start_states
from gbxcule.cli.report import EXIT_ERROR
from gbxcule.core.errors import GbxculeError

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
    p.add_argument("--total-steps", type=int, help="env-steps to train (default 1,000,000; it ends a run even "
                   "before --time-limit)")
    for name, typ in ALGO_KNOBS:
        p.add_argument("--" + name.replace("_", "-"), type=typ, help=f"the algorithm's {name} (where it has one)")
    p.add_argument("--anneal-lr", dest="anneal_lr", action="store_true", default=None, help="anneal lr to 0")
    p.add_argument("--no-anneal-lr", dest="anneal_lr", action="store_false", help="constant lr")
    p.add_argument("--amp", choices=("auto", "bf16", "off"), help="bf16 autocast (auto: on CUDA)")
    p.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
    p.add_argument("--seed", type=int, help="seed (default 0)")
    p.add_argument("--device", help="cpu, cuda, cuda:N or auto (default auto)")
    p.add_argument("--gpus", type=int, metavar="G",
                   help="train on G GPUs of this host: G processes through torch's launcher (torchrun --standalone "
                        "--nproc-per-node G), each with --num-envs envs on its own GPU, gradients averaged; with "
                        "--device cpu, G CPU processes (gloo). Several hosts: torchrun (docs/training.md)")
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


def launch(gpus: int, argv: list[str], device: str | None) -> int:
    """`gbxcule train --gpus G`: the same command line on G processes of this host, through torch's own launcher
    (what `torchrun --standalone --nproc-per-node G -m gbxcule train ...` does). Each process sees `--gpus G`
    again and, launched, trains as its rank. A process that ends abnormally (a signal, a crash) is named in one
    line; one that exits with an error line of its own (rank 0 reports for all) adds nothing."""
    import logging
    import os

    import torch
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    if (device or "auto") != "cpu":
        have = torch.cuda.device_count()
        if have < gpus:
            raise GbxculeError(f"--gpus {gpus}: torch sees {have} GPU(s) on this host (for {gpus} processes on the "
                               f"CPU device pass --device cpu)")
    for name in [n for n in logging.Logger.manager.loggerDict if n.startswith("torch.distributed.elastic")]:
        logging.getLogger(name).setLevel(logging.CRITICAL)  # its notices of failures: the line below says it
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default for several processes, without its notice
    args = get_args_parser().parse_args(["--standalone", f"--nproc-per-node={gpus}", "--module", "gbxcule", *argv])
    try:
        torchrun(args)
    except SignalException as exc:  # Ctrl-C or SIGTERM: passed on to the processes, which stop with a checkpoint
        sys.stderr.write(f"gbxcule train: the launcher got {exc.sigval.name} and passed it on\n")
        return 130
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        if failure.exitcode in (EXIT_ERROR, EXIT_SIGINT, EXIT_SIGTERM):  # the processes' own exits: rank 0 said why
            return failure.exitcode
        how = f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"exit code {failure.exitcode}"
        raise GbxculeError(f"process {rank} of {gpus} ended with {how}; the launcher stopped the others") from None
    return 0


def run_device(resume: str | None) -> str | None:
    """The device a run folder's config names (a resumed run keeps it unless --device says otherwise)."""
    import json
    from pathlib import Path

    if resume is None:
        return None
    try:
        return json.loads((Path(resume) / "config.json").read_text())["run"]["device"]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # the resume itself says what is wrong with the folder


def run(args) -> int:
    from gbxcule.cli.report import emit
    from gbxcule.core.fmt import num, pct
    from gbxcule.rl import training
    from gbxcule.rl.config import parse_sets
    from gbxcule.rl.dist import launched_rank, launched_world_size, quiet
    from gbxcule.rl.evaluate import failed_on, stuck_on
    from gbxcule.rl.explore import achievement
    from gbxcule.rl.session import success_label

    launched = launched_world_size()
    if args.gpus is not None:
        if args.gpus < 1:
            raise GbxculeError(f"--gpus must be >= 1, got {args.gpus}")
        if launched > 1 and args.gpus != launched:
            raise GbxculeError(f"--gpus {args.gpus}, but the launcher started {launched} processes")
        if launched == 1 and args.gpus > 1:
            return launch(args.gpus, args.argv, args.device or run_device(args.resume))
    rank = launched_rank()
    over = overrides(args)
    knobs = over.pop("knobs")
    echo = None if args.json or rank else (lambda s: print(s, file=sys.stderr))
    try:
        cfg, checkpoint = training.prepare(args.config, over, args.resume, knobs, parse_sets(args.set))
    except training.RunFinished as done:
        if not rank:
            print(str(done), file=sys.stderr)
        return 0
    except (GbxculeError, ValueError) as exc:  # alike on every process: rank 0 reports it
        raise (quiet(exc) if rank else exc) from None
    try:
        summary = training.train(cfg, echo=echo, checkpoint=checkpoint, final_eval=True)
    except (GbxculeError, ValueError) as exc:
        if rank and not getattr(exc, "quiet", False):
            raise GbxculeError(f"rank {rank}: {exc}") from None
        raise
    if rank:
        return interrupted_exit(summary)

    def text(s: dict) -> str:
        last = s["last"]
        sps = last.get("sps")
        where = s["device"] if s.get("world_size", 1) == 1 else f"{s['world_size']} processes (rank 0: {s['device']})"
        window = f"the last {last.get('running_episodes', 0)} episodes"
        if last.get("archive/cells") is not None:
            window += " from the task's start"
        ret = last.get("running_return")
        lines = [f"trained {s['env_steps']:,} env-steps in {s['updates']} updates, {s['wall_s']:.1f} s on "
                 f"{where} ({s['stopped']}); run folder {s['run_dir']}",
                 f"last update: {'-' if sps is None else format(sps, ',.0f')} env-steps/s; over {window} (sampled "
                 f"policy): {success_label(last.get('success_source'))} {pct(last.get('running_success'))}"
                 + ("" if ret is None else f", mean return {num(ret)}")]
        if "eval" in s:
            e = s["eval"]
            skipped = f" ({e['starts_skipped']} starts at the goal skipped)" if e.get("starts_skipped") else ""
            lines.append(f"eval over {e['episodes']} episodes{skipped}: greedy "
                         f"{success_label(e.get('success_source'))} {pct(e['success_rate'])}, median steps "
                         f"{num(e['median_steps'], '.0f')}, mean return {num(e['mean_return'])}"
                         + (f", stuck {pct(e['stuck_rate'])} ({stuck_on(e)})" if e.get("stuck_rate") else "")
                         + (f", cycling {pct(e['cycle_rate'])}" if e.get("cycle_rate") else "")
                         + (f"; failed most at {failed_on(e)}" if failed_on(e) else ""))
        said = achievement(last, s.get("eval"))
        if said:
            lines.append(said)
        limit = cfg.run.time_limit_s
        if s["stopped"] == "done" and limit is not None and s["wall_s"] < 0.9 * limit:
            lines.append(f"note: the run reached its total of {cfg.total_steps:,} env-steps before the time limit of "
                         f"{limit:g} s; --total-steps trains longer")
        return "\n".join(lines)

    emit(args, summary, text)
    return interrupted_exit(summary)


EXIT_SIGINT, EXIT_SIGTERM = 128 + 2, 128 + 15


def interrupted_exit(summary: dict) -> int:
    """0, or for a run stopped by a signal (or one that came as it ended) 128 + its number, as shells expect of a
    stopped command (so that `gbxcule train ... && gbxcule eval ...` stops too)."""
    if summary.get("stopped") != "interrupted" and not summary.get("signal"):
        return 0
    return EXIT_SIGTERM if summary.get("signal") == "SIGTERM" else EXIT_SIGINT
