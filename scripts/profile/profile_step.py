"""The workload that `ncu` profiles: a warp_vec_cuda backend stepped with seeded random actions, nothing else.

    ncu --clock-control none -k regex:step_kernel --launch-skip 130 --launch-count 1 --set full \
        -o step python scripts/profile/profile_step.py --rom OVERWORLD --envs 65536 --steps 8

With the CUDA defaults a step is 24 launches of the step kernel (one per frame, the last one the full kernel,
the others the lean one) after as many sorts; `--launch-skip 130` passes the 5 warm-up steps (120 launches)
and lands on a lean launch in the middle of a step; `--launch-skip 143` lands on the step's last frame, drawn
in the full kernel with the stage's epilogue (with `--sort-parts 1`: more parts mean more launches a frame).
With `--lineinfo` (and `--import-source yes`), `ncu --page source --print-source cuda` attributes the samples
to lines of Warp's generated CUDA, which quote the Python source. `bash scripts/gpu/gpu.sh ncu` runs it all.

`--breakdown N` (no ncu needed) times every launch of N more steps with CUDA events and prints where a
step's device time goes: the sort key kernels and radix sorts, the step-kernel launches by variant (lean or
drawn, nested or flat loop), the observation pass (`bash scripts/gpu/gpu.sh breakdown`; BENCHMARKS.md, "Where a
step's time goes").
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rom", default="OVERWORLD")
    p.add_argument("--envs", type=int, default=65536)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--stage", default="full_step")
    p.add_argument("--actions", default="seeded_random")
    p.add_argument("--codec", default=None, help="action codec (default: the backend's)")
    p.add_argument("--state", default=None, help="start every env from this state file (PyBoy or gbxcule)")
    p.add_argument("--sort-parts", type=int, default=1, help="the backend's sort_parts (default 1)")
    p.add_argument("--loop", default="auto", choices=("auto", "nested", "flat"),
                   help="the backend's instruction loop (default auto: nested until the tuner's first trial)")
    p.add_argument("--lineinfo", action="store_true", help="compile with line info (ncu's source page by line)")
    p.add_argument("--breakdown", type=int, default=0, metavar="N",
                   help="then time N more steps launch by launch (CUDA events) and print the shares")
    args = p.parse_args()
    import warp as wp

    wp.config.lineinfo = args.lineinfo
    from gbxcule.backends import load_start_state
    from gbxcule.backends.warp_vec import WarpVecBackend
    from gbxcule.harness.actions import make_action_gen
    from gbxcule.roms import resolve_rom

    backend = WarpVecBackend(str(resolve_rom(args.rom)), num_envs=args.envs, device="cuda",
                             **({"codec": args.codec} if args.codec else {}), stage=args.stage,
                             sort_parts=args.sort_parts, loop=args.loop)
    backend.reset(seed=0)
    if args.state:
        load_start_state(backend, args.state)
    gen = make_action_gen(args.actions, backend.codec, args.envs, seed=0)
    before = None
    for k in range(args.steps):
        if k == args.steps - 1:
            before = backend.field_values("instructions").astype(np.int64)
        backend.step(gen(k))
    wp.synchronize_device("cuda")
    last = int((backend.field_values("instructions").astype(np.int64) - before).sum()) if before is not None else 0
    # (`instructions` wraps in int32; per-step deltas are far below that)
    print(f"{args.rom}: {args.steps} steps of {args.envs} envs, block_dim {backend.block_dim}; "
          f"emulated instructions in the last step: {last} ({last / args.envs / backend.schedule.frames_per_step:.1f} "
          "per env and frame)")
    if args.breakdown:
        breakdown(wp, backend, gen, args.steps, args.breakdown)
    return 0


def step_kernel_names(stage: str, variants) -> dict[int, str]:
    """id of each step kernel a backend of `stage` may launch -> its name in the breakdown, for the (draws,
    flat) pairs of `WarpVecBackend.step_variants()` (the modules are cached: the backend launches these)."""
    from gbxcule.kernels.step import load_kernels

    return {id(load_kernels(None, stage, draws, flat).step_kernel):
            f"step_kernel ({'drawn' if draws else 'lean'}, {'flat' if flat else 'nested'})" for draws, flat in variants}


def breakdown(wp, backend, gen, first: int, steps: int) -> None:
    """Time each launch of `steps` steps with a pair of CUDA events and sum by what was launched."""
    events: list[tuple[str, object, object]] = []
    launch, sort = wp.launch, wp.utils.radix_sort_pairs
    names = step_kernel_names(backend.stage, backend.step_variants())

    def timed(name, fn, *a, **kw):
        start, end = wp.Event(enable_timing=True), wp.Event(enable_timing=True)
        wp.record_event(start)
        fn(*a, **kw)
        wp.record_event(end)
        events.append((name, start, end))

    def timed_launch(kernel, *a, **kw):
        timed(names.get(id(kernel), kernel.key), launch, kernel, *a, **kw)

    wp.launch, wp.utils.radix_sort_pairs = timed_launch, lambda *a, **kw: timed("radix_sort_pairs", sort, *a, **kw)
    try:
        wall = time.perf_counter()
        for k in range(first, first + steps):
            backend.step(gen(k))
        wp.synchronize_device("cuda")
        wall = time.perf_counter() - wall
    finally:
        wp.launch, wp.utils.radix_sort_pairs = launch, sort
    totals: dict[str, list[float]] = {}
    for name, start, end in events:
        totals.setdefault(name, []).append(wp.get_event_elapsed_time(start, end))
    device = sum(sum(v) for v in totals.values())
    sps = backend.num_envs * steps / wall
    print(f"{steps} steps, {wall / steps * 1e3:.2f} ms a step wall ({sps:,.0f} env-steps/s, timed launches included), "
          f"{device / steps:.2f} ms a step in launches")
    print(f"{'launch':28s} {'calls/step':>10s} {'ms/step':>8s} {'share':>6s}")
    for name, ms in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
        print(f"{name:28s} {len(ms) / steps:>10.1f} {sum(ms) / steps:>8.2f} {sum(ms) / device:>6.1%}")


if __name__ == "__main__":
    sys.exit(main())
