"""What rendering costs per step on a warp backend: steps timed without drawing, drawing the last frame,
drawing every frame, and the observation kernels; writes one JSON file.

    .venv/bin/python scripts/bench/bench_render.py ROM [--device cpu] [--envs 1,16,64] [--frames-per-step 4]
        [--steps 30] [--warmup 3] [--repeat 3] [--out bench_out/render.json]

ROM is a file or a built-in ROM name; it should keep the LCD on (with the LCD off nothing is drawn).
Each variant runs on a fresh backend from reset with the same actions; timing ends with a device sync.
The variants take turns `repeat` times and each keeps its fastest run (the least disturbed by other load).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import time
from pathlib import Path

from gbxcule.backends.warp_vec import WarpVecBackend
from gbxcule.core.action_codec import get_codec
from gbxcule.core.cartridge import load_rom
from gbxcule.core.schedule import ActionSchedule
from gbxcule.harness.actions import make_action_gen
from gbxcule.roms import resolve_rom

VARIANTS = ("none", "last", "all", "last+obs", "last+obs_packed")


def measure(rom, envs: int, fps: int, steps: int, warmup: int, variant: str, device: str) -> float:
    """Seconds per step of `variant` (mean over `steps` steps after `warmup`)."""
    import warp as wp

    codec = get_codec("dmg_buttons_v0")
    b = WarpVecBackend(rom, envs, codec, ActionSchedule(fps, min(fps, 8)), device=device)
    gen = make_action_gen("seeded_random", codec, envs, 0)
    render = variant.split("+")[0]
    acts = [wp.array(gen(k), dtype=wp.int32, device=device) for k in range(warmup + steps)]
    t0 = 0.0
    for k in range(warmup + steps):
        if k == warmup:
            wp.synchronize_device(device)
            t0 = time.perf_counter()
        b.step(acts[k], render=False if render == "none" else render)
        if variant.endswith("obs"):
            b.observation("stride")
        elif variant.endswith("obs_packed"):
            b.observation("stride", packed=True)
    wp.synchronize_device(device)
    return (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rom")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--envs", default="1,16,64")
    ap.add_argument("--frames-per-step", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="bench_out/render.json")
    args = ap.parse_args()
    rom = load_rom(resolve_rom(args.rom))
    rows = []
    for n in (int(x) for x in args.envs.split(",")):
        times = {v: float("inf") for v in VARIANTS}
        for _ in range(args.repeat):
            for v in VARIANTS:
                times[v] = min(times[v], measure(rom, n, args.frames_per_step, args.steps, args.warmup, v,
                                                 args.device))
        base = times["none"]
        rows.append({"envs": n, "ms_per_step": {v: round(t * 1e3, 3) for v, t in times.items()},
                     "overhead_pct": {v: round((t / base - 1) * 100, 1) for v, t in times.items()
                                      if v != "none"}})
        print(f"envs {n:5d}: " + "  ".join(f"{v} {t * 1e3:8.2f} ms" for v, t in times.items()), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "rom": args.rom, "rom_sha1": hashlib.sha1(rom.data).hexdigest(), "device": args.device,
        "frames_per_step": args.frames_per_step, "steps": args.steps, "warmup": args.warmup,
        "repeat": args.repeat,
        "machine": platform.platform(), "processor": platform.processor(),
        "cpus": len(os.sched_getaffinity(0)),
        "date": time.strftime("%Y-%m-%d"), "results": rows,
    }, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
