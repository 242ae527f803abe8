"""CUDA equals CPU: run built-in ROMs on both Warp devices with many envs and seeds; require identical bits.

    python scripts/cuda_check.py [--envs 32] [--steps 8] [--frames-per-step 24] [NAMES...]

After every step the fields, RAM regions and serial captures of every env must be bit-identical on
`cpu` and `cuda`. Exit 0 when all match; prints one line per ROM.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def main() -> int:
    from gbxcule.backends.warp_vec import WarpVecBackend
    from gbxcule.core.action_codec import get_codec
    from gbxcule.core.cartridge import load_rom
    from gbxcule.core.schedule import ActionSchedule
    from gbxcule.harness.actions import make_action_gen
    from gbxcule.roms import resolve_rom, suite

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*")
    p.add_argument("--envs", type=int, default=32)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--frames-per-step", type=int, default=24)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    codec = get_codec("dmg_buttons_v0")
    schedule = ActionSchedule(args.frames_per_step, min(8, args.frames_per_step))
    bad = 0
    for name in args.names or list(suite()):
        t0 = time.time()
        rom = load_rom(resolve_rom(name))
        cpu = WarpVecBackend(rom, args.envs, codec, schedule, device="cpu")
        gpu = WarpVecBackend(rom, args.envs, codec, schedule, device="cuda")
        gen = make_action_gen("seeded_random", codec, args.envs, args.seed)
        status = "ok"
        for k in range(args.steps):
            acts = gen(k)
            cpu.step(acts)
            gpu.step(acts)
            pairs = [("fields", cpu.fields, gpu.fields), ("ram", cpu.ram, gpu.ram), ("serial", cpu.serial, gpu.serial)]
            for what, a, b in pairs:
                if not np.array_equal(a.numpy(), b.numpy()):
                    status = f"MISMATCH in {what} after step {k}"
                    break
            if status != "ok":
                break
        bad += status != "ok"
        print(f"{name:22s} {args.envs} envs x {args.steps} steps x {args.frames_per_step} frames: {status} "
              f"({time.time() - t0:.1f} s)", flush=True)
    print("CUDA == CPU on all ROMs" if not bad else f"{bad} ROM(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
