"""Exploration: CUDA step speed against the per-thread register cap (not part of the test suite).

    python scripts/profile/gpu_perf_sweep.py OUT.json [--caps 0,168,128,96,64] [--roms A,B] [--envs 16384,65536]
                                              [--stage full_step] [--steps 3] [--warmup 5]

Cap 0 is the compiler's choice (255 registers for the step kernel). Same schedule, actions and boot as
`gbxcule bench`.
"""

import argparse
import json
import time

from gbxcule.core.cartridge import load_rom
from gbxcule.core.schedule import ActionSchedule
from gbxcule.harness.bench import measure
from gbxcule.roms import resolve_rom


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--caps", default="0,168,128,96,64")
    p.add_argument("--roms", default="JOY_DIVERGE_PERSIST,PPU_BG_SCROLL")
    p.add_argument("--envs", default="16384,65536")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--stage", default="full_step")
    args = p.parse_args()
    rows = []
    schedule = ActionSchedule(24, 8)
    for cap in [int(x) for x in args.caps.split(",")]:
        for name in args.roms.split(","):
            rom = load_rom(resolve_rom(name))
            for n in [int(x) for x in args.envs.split(",")]:
                t0 = time.time()
                r = measure("warp_vec_cuda", rom, n, args.steps, schedule, "pokemonred_puffer_v1", warmup=args.warmup,
                            stage=args.stage, max_registers=cap or None)
                rows.append({"cap": cap, "rom": name, "envs": n, "stage": args.stage, "sps": r.env_steps_per_s,
                             "fps": r.frames_per_s,
                             "instr_per_s": r.instructions_per_s, "ms_per_step": r.ms_per_step,
                             "wall": time.time() - t0})
                print(f"cap={cap:3d} {name:20s} envs={n:6d} SPS={r.env_steps_per_s:9.1f} "
                      f"fps={r.frames_per_s:10.0f} instr/s={r.instructions_per_s / 1e9:6.2f}G", flush=True)
                with open(args.out, "w") as f:
                    json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
