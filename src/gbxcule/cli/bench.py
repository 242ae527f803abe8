"""`gbxcule bench`: throughput of backends on a ROM, as a table and a JSON artifact."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gbxcule.backends import BACKENDS
from gbxcule.backends.warp_vec import DEFAULT_SORT_KEY, SORT_KEYS, parse_sort_parts
from gbxcule.cli import checks
from gbxcule.cli.common import add_state_arg
from gbxcule.core.action_codec import CODECS, DEFAULT_CODEC
from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import write_output
from gbxcule.harness.actions import ACTION_GENERATORS
from gbxcule.harness.bench import artifact, measure, measure_split, scaling_plot, split_table, table, write_artifact
from gbxcule.roms import DEFAULT_ROM


def sort_parts_arg(text: str) -> int | str:
    try:
        return parse_sort_parts(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure env-steps/s, frames/s and instructions/s; write a JSON artifact",
                       description="Benchmark one or more backends over a sweep of env counts on one ROM. "
                                   "Warm-up steps are excluded. Prints a table and writes a JSON artifact.")
    p.add_argument("--rom", default=DEFAULT_ROM, help=f"ROM file or built-in ROM name (default {DEFAULT_ROM})")
    p.add_argument("--backends", default="warp_vec_cpu",
                   help=f"comma-separated, from {','.join(BACKENDS)} (default warp_vec_cpu)")
    p.add_argument("--envs", default="1,8,64", help="comma-separated env counts (default 1,8,64)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per measurement (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    p.add_argument("--frames-per-step", type=int, default=24, help="frames per step (default 24)")
    p.add_argument("--release-after-frames", type=int, default=8, help="frames buttons are held (default 8)")
    p.add_argument("--codec", default=DEFAULT_CODEC, choices=list(CODECS), help="action codec")
    p.add_argument("--actions", default="seeded_random", choices=ACTION_GENERATORS, help="action generator")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--puffer-mode", default="sync", choices=("sync", "async"),
                   help="pyboy_puffer_vec: PufferLib's step (sync) or pipelined send/recv (async) (default sync)")
    p.add_argument("--stage", default="emulate_only",
                   choices=("emulate_only", "reward_only", "obs_only", "full_step"),
                   help="warp backends: what each step produces on the device (default emulate_only)")
    p.add_argument("--sort-envs", default=None, action=argparse.BooleanOptionalAction,
                   help="warp backends: order threads by a key (--sort-key) so envs at the same code share "
                        "warps (default: on for CUDA, off for the CPU device)")
    p.add_argument("--sort-every", type=int, default=1, metavar="FRAMES",
                   help="warp backends with --sort-envs: sort every FRAMES frames, one launch each (default 1)")
    p.add_argument("--sort-parts", type=sort_parts_arg, default="auto", metavar="PARTS",
                   help="warp backends with --sort-envs: split every frame into PARTS launches at equal PPU dot "
                        "counts and sort before each (1: whole frames), or auto (the default): 1, 2 or 4, "
                        "whichever runs fastest in timed trials now and then (with the path key, each in both "
                        "orders)")
    p.add_argument("--sort-key", default=DEFAULT_SORT_KEY, choices=SORT_KEYS,
                   help="warp backends with --sort-envs: order by the instructions each env ran since the last sort, "
                        "then (PC, action) (path, the default: the most work first, or with --sort-parts auto "
                        "whichever end runs faster; path_light: the least first), by (PC, action) alone (pc), or by "
                        "the word at SP (the waiting routine's caller), then (PC, action) (stack)")
    p.add_argument("--lean", default=None, action=argparse.BooleanOptionalAction,
                   help="warp backends: run frames that draw nothing in a kernel built without the renderer "
                        "(default: on for CUDA, off for the CPU device)")
    p.add_argument("--block-dim", type=int, default=None, metavar="THREADS",
                   help="warp backends: threads per block of the step kernel (default on CUDA: chosen from the env "
                        "count and the GPU's SM count, backends/warp_vec.py step_block_dim)")
    p.add_argument("--loop", default="auto", choices=("auto", "nested", "flat"),
                   help="warp backends: the step kernel's instruction loop, nested or flat (default auto: timed by "
                        "the sort tuner where it runs, else nested; backends/warp_vec.py)")
    p.add_argument("--sync-every", type=int, default=0, help="synchronise every N steps (default: at the end)")
    p.add_argument("--gpus", type=int, default=None, metavar="G",
                   help="warp backends: run each measurement on G processes at once, one per GPU (warp_vec_cuda; "
                        "with warp_vec_cpu G processes on the CPU device), each --envs value split evenly over them, "
                        "timed steps started together: the aggregate env-steps/s and frames/s (every process's "
                        "env-steps over the slowest one's seconds) and each process's own figures")
    add_state_arg(p)
    p.add_argument("--out", default="bench_out/bench.json", help="JSON artifact path (default bench_out/bench.json)")
    p.add_argument("--json", action="store_true", help="print the artifact as one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from gbxcule.cli.report import emit

    backends = [b for b in args.backends.split(",") if b]
    bad = [b for b in backends if b not in BACKENDS]
    if bad:
        raise ValueError(f"unknown backend(s) {', '.join(bad)}; choose from {', '.join(BACKENDS)}")
    try:
        env_counts = [int(x) for x in args.envs.split(",") if x]
    except ValueError:
        raise ValueError(f"--envs must be comma-separated integers, got {args.envs!r}") from None
    if not env_counts or min(env_counts) < 1:
        raise GbxculeError("--envs values must be >= 1")
    checks.positive(steps=args.steps)
    if args.gpus is not None:
        checks.positive(gpus=args.gpus)
        if any(b not in ("warp_vec_cpu", "warp_vec_cuda") for b in backends):
            raise GbxculeError("--gpus applies to the warp backends (warp_vec_cuda, warp_vec_cpu)")
        uneven = [n for n in env_counts if n % args.gpus]
        if uneven:
            raise GbxculeError(f"--envs {','.join(map(str, uneven))}: not a multiple of --gpus {args.gpus} "
                               f"(the envs are split evenly)")
    if args.warmup < 0:
        raise GbxculeError(f"--warmup must be >= 0, got {args.warmup}")
    schedule = checks.schedule(args.frames_per_step, args.release_after_frames)
    inputs = (checks.rom_path(args.rom), args.state)
    out = Path(args.out)
    plot = out.with_suffix(".png")  # the scaling plot beside the artifact
    checks.check_outputs([out, plot], inputs)
    rom = checks.rom_file(args.rom, "bench")
    for b in backends:  # the largest env count of each backend (of each process) must fit before anything runs
        checks.env_memory(b, max(env_counts) // (args.gpus or 1), rom, render=args.stage in ("obs_only", "full_step"),
                          stage=args.stage)
    if args.state:  # a bad state is one error up front, not a skip per measurement
        from gbxcule.backends.warp_vec import load_env_states

        load_env_states(args.state, rom)
    warp = {"stage": args.stage, "sort_envs": args.sort_envs, "sort_every": args.sort_every, "lean": args.lean,
            "block_dim": args.block_dim, "sort_key": args.sort_key, "sort_parts": args.sort_parts, "loop": args.loop}
    extra = {"pyboy_puffer_vec": {"mode": args.puffer_mode}, "warp_vec_cpu": warp, "warp_vec_cuda": warp}
    results, skipped, per_process = [], [], []
    for b in backends:
        for n in env_counts:
            try:
                if args.gpus is None:
                    results.append(measure(b, rom, n, args.steps, schedule, args.codec, args.actions, args.seed,
                                           args.warmup, args.sync_every, state=args.state, **extra.get(b, {})))
                else:
                    agg, parts = measure_split(b, rom, n, args.gpus, args.steps, schedule, args.codec,
                                               actions=args.actions, seed=args.seed, warmup=args.warmup,
                                               sync_every=args.sync_every, state=args.state, **extra.get(b, {}))
                    results.append(agg)
                    per_process.append(parts)
            except GbxculeError as exc:  # e.g. too many envs for this ROM: keep the rest of the sweep
                skipped.append({"backend": b, "envs": n, "error": str(exc)})
    if not results:
        raise GbxculeError(skipped[0]["error"])
    for s in skipped:
        sys.stderr.write(f"gbxcule bench: skipped {s['backend']} x {s['envs']}: {s['error']}\n")
    data = artifact(results, rom, args.codec, schedule, args.actions)
    data["skipped"] = skipped
    if "pyboy_puffer_vec" in backends:
        data["puffer_mode"] = args.puffer_mode
    data["stage"] = args.stage
    data["sort_envs"] = args.sort_envs
    data["sort_every"] = args.sort_every
    data["sort_key"] = args.sort_key
    data["sort_parts"] = args.sort_parts
    data["lean"] = args.lean
    data["block_dim"] = args.block_dim
    data["loop"] = args.loop
    data["state"] = args.state
    if args.gpus is not None:
        from dataclasses import asdict

        data["gpus"] = args.gpus
        data["per_process"] = [[asdict(p) for p in parts] for parts in per_process]
    data["plot"] = str(write_output(plot, lambda p: scaling_plot(results, p), inputs))
    data["artifact"] = str(write_output(out, lambda p: write_artifact(data, p), inputs))
    shown = table(results) if args.gpus is None else split_table(results, per_process)
    emit(args, data, lambda d: shown + f"\nartifact: {d['artifact']}\nplot: {d['plot']}")
    return 0
