"""Check that envs whose RAM lies past 2 GiB of the RAM array compute what a small run does.

    python scripts/check/check_wide_ram.py [--rom OVERWORLD] [--envs 65536] [--device cuda] [--steps 6]

Env e of the wide run gets the actions of env e % 8 of an 8-env run; after every step the first and last
8 envs of the wide run must equal the small run bit for bit (fields and RAM). OVERWORLD at 65,536 envs
holds 3.2 GB of RAM, so its last envs' bytes sit far beyond int32 offsets (docs/step_abi.md).
Prints one line and exits non-zero on a mismatch.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rom", default="OVERWORLD")
    p.add_argument("--envs", type=int, default=65536)
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    if args.envs % 8:
        print("error: --envs must be a multiple of 8", file=sys.stderr)
        return 2
    from gbxcule.backends.warp_vec import WarpVecBackend
    from gbxcule.roms import resolve_rom

    rom, n = str(resolve_rom(args.rom)), args.envs
    wide, small = (WarpVecBackend(rom, k, device=args.device, boot="skip", stage="full_step") for k in (n, 8))
    ids = [*range(8), *range(n - 8, n)]
    rng = np.random.default_rng(0)
    for k in range(args.steps):
        acts = rng.integers(0, small.codec.num_actions, 8).astype(np.int32)
        wide.step(np.tile(acts, n // 8))
        small.step(acts)
        want = small.env_states()
        for e, got in zip(ids, wide.env_states(ids), strict=True):
            ref = want[e % 8]
            if not (np.array_equal(got.fields, ref.fields) and np.array_equal(got.ram, ref.ram)):
                print(f"MISMATCH: env {e} of {n} differs from env {e % 8} of 8 after step {k}")
                return 1
    print(f"ok: {args.rom}, {n} envs ({wide.layout.total * n:,} bytes of RAM), first and last 8 envs equal the "
          f"8-env run for {args.steps} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
