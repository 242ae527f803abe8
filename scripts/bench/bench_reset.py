"""Masked-reset cost of `WarpVecBackend.restore` with an empty, a 1% and a full mask, per chunk size.

    python scripts/bench/bench_reset.py OUT.json [--device cpu|cuda] [--envs 16384] [--rom OVERWORLD]
        [--chunks 0,1024,256,64,16] [--repeats 5] [--slots 4] [--state FILE] [--check]

`--chunks`: slot words per restore thread; 0 = one thread per env (the whole slot). Each figure is the
median wall time of `--repeats` seeded restores, each followed by a device synchronisation, after one
warm-up restore. The slots hold the envs' state after one single-frame step (or the states of `--state`);
the envs are stepped once more before timing, so a restore really changes them. `--check` also restores a random 1% of
the envs from random slots with every chunk size and compares them, and the untouched envs, on the host.
Writes one JSON object: the setup, then one row per (chunk, mask) with ms per restore and bytes per second.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from gbxcule.backends.warp_vec import WarpVecBackend
from gbxcule.core.cartridge import load_rom
from gbxcule.core.schedule import ActionSchedule
from gbxcule.core.schema import NUM_FIELDS
from gbxcule.harness.bench import environment
from gbxcule.roms import resolve_rom


def check(b: WarpVecBackend, chunk: int | None, rng) -> bool:
    """Restore a random 1% of the envs from random slots; compare every env with what it must hold."""
    wp, n = b._wp, b.num_envs
    mask = rng.random(n) < 0.01
    slots = rng.integers(0, b.num_slots, n).astype(np.int32)
    b.step(rng.integers(0, b.codec.num_actions, n))
    f0, r0 = b.fields.numpy().reshape(n, NUM_FIELDS).T.copy(), b.ram.numpy().T.copy()
    b.restore(wp.array(mask.astype(np.int32), device=b.device), wp.array(slots, dtype=wp.int32, device=b.device),
              chunk=chunk)
    f1, r1 = b.fields.numpy().reshape(n, NUM_FIELDS).T, b.ram.numpy().T
    ok = np.array_equal(f1[:, ~mask], f0[:, ~mask]) and np.array_equal(r1[:, ~mask], r0[:, ~mask])
    for k in range(b.num_slots):
        fields, ram = b.slot_state(k)
        sel = mask & (slots == k)
        ok &= bool((f1[:, sel] == fields[:, None]).all() and (r1[:, sel] == ram[:, None]).all())
    return ok


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--device", default="cpu")
    p.add_argument("--envs", type=int, default=16384)
    p.add_argument("--rom", default="OVERWORLD")
    p.add_argument("--chunks", default="0,1024,256,64,16")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--state", help="PyBoy .state or native snapshot to fill the slots with")
    p.add_argument("--check", action="store_true", help="also check restores against the slots on the host")
    args = p.parse_args()
    rom = load_rom(resolve_rom(args.rom))
    b = WarpVecBackend(rom, args.envs, schedule=ActionSchedule(1, 1), device=args.device)
    wp, n = b._wp, args.envs
    rng = np.random.default_rng(0)
    if args.state:
        b.load_slots(args.state, seed=1)
    else:
        b.step(rng.integers(0, b.codec.num_actions, n))
        b.alloc_slots(args.slots, seed=1)
        for k in range(args.slots):
            b.save_slot(k % n, k)
    b.step(rng.integers(0, b.codec.num_actions, n))
    one_pct = np.zeros(n, dtype=np.int32)
    one_pct[rng.choice(n, max(1, n // 100), replace=False)] = 1
    masks = {"empty": np.zeros(n, dtype=np.int32), "1%": one_pct, "full": np.ones(n, dtype=np.int32)}
    state_bytes = NUM_FIELDS * 4 + b.layout.total
    rows, checks = [], {}
    for chunk in (int(c) for c in args.chunks.split(",")):
        for name, host in masks.items():
            mask = wp.array(host, dtype=wp.int32, device=args.device)
            b.restore(mask, chunk=chunk or None)
            wp.synchronize_device(args.device)
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                b.restore(mask, chunk=chunk or None)
                wp.synchronize_device(args.device)
                times.append(time.perf_counter() - t0)
            seconds = statistics.median(times)
            reset = int(host.sum())
            rows.append({"chunk_words": chunk or b.slot_words, "one_thread_per_env": chunk == 0, "mask": name,
                         "envs_reset": reset, "ms": 1000 * seconds, "bytes_per_s": reset * state_bytes / seconds})
            print(f"chunk={chunk or 'env':>5} mask={name:5s} envs={reset:6d} {1000 * seconds:10.4f} ms "
                  f"{reset * state_bytes / seconds / 1e9:8.2f} GB/s", flush=True)
        if args.check:
            checks[chunk] = check(b, chunk or None, rng)
            print(f"chunk={chunk or 'env':>5} check {'ok' if checks[chunk] else 'FAILED'}", flush=True)
    out = {"rom": args.rom, "device": args.device, "envs": n, "slots": b.num_slots, "repeats": args.repeats,
           "state_bytes_per_env": state_bytes, "slot_words": b.slot_words, "checks": checks,
           "environment": environment(), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    if checks and not all(checks.values()):
        raise SystemExit("a restore check failed")


if __name__ == "__main__":
    main()
