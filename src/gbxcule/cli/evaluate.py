"""`gbxcule eval RUN_OR_CHECKPOINT`: a trained policy's success over M episodes (docs/training.md)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a trained policy (success rate, steps to goal, GIF)",
                       description="Run the policy of a run folder or checkpoint, greedy and sampled, over M "
                                   "episodes from M start states (random prefixes from the task's start; those "
                                   "already at the goal are skipped); success is ground truth from the task's RAM "
                                   "goal where it has one, else the goal template's verdict, labelled "
                                   "'success (template)'.")
    p.add_argument("source", metavar="RUN_OR_CHECKPOINT")
    p.add_argument("--episodes", type=int, default=64, help="episodes (default 64)")
    p.add_argument("--task", help="evaluate on this task instead of the run's (or say where the run's pack is now)")
    p.add_argument("--rom", help="where the run's ROM is now (it must have the SHA-1 the run recorded)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (default auto)")
    p.add_argument("--gif", metavar="OUT.gif", help="record a mosaic GIF of the first --gif-envs episodes")
    p.add_argument("--gif-envs", type=int, default=16, help="episodes in the GIF mosaic (default 16)")
    p.add_argument("--random", action="store_true", help="also a random policy (and its GIF) for comparison")
    p.add_argument("--seed", type=int, help="seed of the start states and sampling (default: the final eval's, "
                   "rl/evaluate.py EVAL_SEED, the same for every run)")
    p.add_argument("--greedy-only", action="store_true",
                   help="the greedy policy alone, without the sampled one (about half the time)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from gbxcule.cli import checks
    from gbxcule.cli.report import emit
    from gbxcule.core.fmt import num, pct
    from gbxcule.rl.evaluate import EVAL_SEED, failed_on, stuck_on
    from gbxcule.rl.session import success_label
    from gbxcule.rl.training import evaluate

    checks.positive(episodes=args.episodes, gif_envs=args.gif_envs)
    if args.gif:
        from gbxcule.rl.evaluate import env_input_files, random_gif_path
        from gbxcule.rl.rundir import load_checkpoint
        from gbxcule.rl.tasks import task_files

        inputs = [args.source, *task_files(args.task),
                  *env_input_files(load_checkpoint(args.source)["config"].get("env", {}))]
        checks.check_outputs([args.gif, random_gif_path(args.gif) if args.random else None], inputs)
    rep = evaluate(args.source, args.episodes, args.device, args.task, gif=args.gif, gif_envs=args.gif_envs,
                   modes=("greedy",) if args.greedy_only else ("greedy", "sampled"),
                   seed=EVAL_SEED if args.seed is None else args.seed, random_baseline=args.random, rom=args.rom)

    def line(name: str, r: dict) -> str:
        return (f"  {name:8s} {success_label(r.get('success_source'))} {pct(r['success_rate']):>6s}  median steps "
                f"{num(r['median_steps'], '.0f')}  p90 {num(r['p90_steps'], '.0f')}  mean return "
                f"{num(r['mean_return'])}" + (f"  stuck {pct(r['stuck_rate'])} ({stuck_on(r)})" if r.get("stuck_rate")
                                              else "") + (f"  cycling {pct(r['cycle_rate'])}" if r.get("cycle_rate")
                                                          else "")
                + (f"  failed most at {failed_on(r)}" if failed_on(r) else ""))

    def text(r: dict) -> str:
        out = [f"{r['task']}: {r['episodes']} episodes from {r['start_states']} start states ({r['device']})"
               + (f"; {r['starts_skipped']} starts skipped: the goal already held there" if r.get("starts_skipped")
                  else "")]
        if r.get("success_source") == "template":
            out.append("  success is the goal template's verdict (the task has no RAM goal)")
        out += [line(m, r[m]) for m in ("greedy", "sampled", "random") if m in r]
        if r.get("template_agreement") is not None:
            out.append(f"  goal template agrees with the RAM goal in {pct(r['template_agreement'])} of episodes")
        if r.get("gif"):
            out.append(f"  GIF: {r['gif']}" + (f" (random: {r['gif_random']})" if r.get("gif_random") else ""))
        return "\n".join(out)

    emit(args, rep, text)
    return 0
