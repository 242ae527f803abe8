"""`gbxcule plot RUN [RUN ...]`: learning curves of training runs as PNGs."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("plot", help="learning-curve PNGs of one or more runs (overlaid)",
                       description="Read each run folder's metrics.jsonl and write one PNG per metric (return, "
                                   "success, entropy, SPS), the runs overlaid.")
    p.add_argument("runs", nargs="+", metavar="RUN")
    p.add_argument("--out", default=None, help="folder for the PNGs (default: the first run's folder)")
    p.add_argument("--x", choices=("env_steps", "wall_s"), default="env_steps", help="x axis")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from gbxcule.cli import checks
    from gbxcule.cli.report import emit
    from gbxcule.rl.plot import plot_runs

    if args.out is not None:
        checks.check_output_dir(args.out, args.runs)
    written = plot_runs(args.runs, args.out, args.x)
    emit(args, {"written": [str(p) for p in written]}, lambda d: "\n".join(f"wrote {p}" for p in d["written"]))
    return 0
