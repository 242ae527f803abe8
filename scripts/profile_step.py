"""The workload that `ncu` profiles: a warp_vec_cuda backend stepped with seeded random actions, nothing else.

    ncu --clock-control none -k regex:step_kernel --launch-skip 130 --launch-count 1 --set full \
        -o step python scripts/profile_step.py --rom OVERWORLD --envs 65536 --steps 8

With the CUDA defaults a step is 24 launches of the step kernel (one per frame, the last one the full kernel,
the others the lean one) after as many sorts; `--launch-skip 130` passes the 5 warm-up steps (120 launches)
and lands on a lean launch in the middle of a step; `--launch-skip 143` lands on the step's last frame, drawn
in the full kernel with the stage's epilogue. With `--lineinfo` (and `--import-source yes`), `ncu --page source
--print-source cuda` attributes the samples to lines of Warp's generated CUDA, which quote the Python source.
BENCHMARKS.md "Where the time goes" reads the results.
"""

from __future__ import annotations

import argparse
import sys


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
    p.add_argument("--lineinfo", action="store_true", help="compile with line info (ncu's source page by line)")
    args = p.parse_args()
    import warp as wp

    wp.config.lineinfo = args.lineinfo
    from gbxcule.backends import load_start_state
    from gbxcule.backends.warp_vec import WarpVecBackend
    from gbxcule.harness.actions import make_action_gen
    from gbxcule.roms import resolve_rom

    backend = WarpVecBackend(str(resolve_rom(args.rom)), num_envs=args.envs, device="cuda",
                             **({"codec": args.codec} if args.codec else {}), stage=args.stage,
                             sort_parts=args.sort_parts)
    backend.reset(seed=0)
    if args.state:
        load_start_state(backend, args.state)
    gen = make_action_gen(args.actions, backend.codec, args.envs, seed=0)
    for k in range(args.steps):
        backend.step(gen(k))
    wp.synchronize_device("cuda")
    print(f"{args.rom}: {args.steps} steps of {args.envs} envs, block_dim {backend.block_dim}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
