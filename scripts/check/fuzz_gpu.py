#!/usr/bin/env python3
"""Fuzz the step kernel with random and instruction-biased ROMs and check invariants after every step.

    python scripts/check/fuzz_gpu.py [--device cuda] [--roms 64] [--envs 256] [--steps 20] [--debug]
    compute-sanitizer --tool memcheck python scripts/check/fuzz_gpu.py --device cuda --roms 8 --envs 64 --steps 4

Each ROM has a valid header (ROM ONLY, MBC1 or MBC3) and a body of random bytes ("random") or of valid
opcodes with random operands ("biased"). Every env runs its own random buttons. After every step: 8-bit
registers within 0..255, SP/PC within 0..0xFFFF, and no Warp error. `--debug` compiles the kernels in
Warp's debug mode (bounds checks on every array access). Prints a table; writes fuzz_gpu.json under $OUT
when set. tests/test_fuzz.py runs a small CPU version of this in CI (docs/verification.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

CART_TYPES = (0x00, 0x01, 0x13)  # ROM ONLY, MBC1, MBC3+RAM+BATTERY


def fuzz_rom(seed: int, kind: str) -> bytes:
    """A 64 KiB ROM with a valid header whose code from $0150 is random bytes or random valid opcodes."""
    from gbxcule.asm import CartridgeHeader, assemble
    from gbxcule.core.cartridge import global_checksum, header_checksum
    from gbxcule.core.isa import BASE, CB

    rng = random.Random(seed)
    ctype = CART_TYPES[seed % len(CART_TYPES)]
    src = 'SECTION "e", ROM0[$0100]\n nop\n jp $0150\n'
    data = bytearray(assemble(src, header=CartridgeHeader(title="FUZZ", cartridge_type=ctype, rom_size=1,
                                                          ram_size=2 if ctype == 0x13 else 0)).rom)
    if kind == "random":
        for i in range(0x150, len(data)):
            data[i] = rng.randrange(256)
    else:
        ops = [op for op in BASE if not op.illegal and op.mnemonic not in ("STOP", "HALT")]
        i = 0x150
        while i < len(data) - 3:
            if rng.random() < 0.1:
                data[i], data[i + 1] = 0xCB, CB[rng.randrange(256)].code
                i += 2
                continue
            op = rng.choice(ops)
            data[i] = op.code
            for k in range(1, op.length):
                data[i + k] = rng.randrange(256)
            i += op.length
    data[0x14D] = header_checksum(data)
    data[0x14E:0x150] = global_checksum(data).to_bytes(2, "big")
    return bytes(data)


def check_invariants(backend, envs: int) -> list[str]:
    """What is out of range in any env's registers, as lines (empty when all is well)."""
    bad = []
    for e in range(envs):
        s = backend.get_cpu_state(e)
        for name in "afbcdehl":
            if not 0 <= getattr(s, name) <= 0xFF:
                bad.append(f"env {e}: {name}={getattr(s, name)}")
        if not (0 <= s.sp <= 0xFFFF and 0 <= s.pc <= 0xFFFF):
            bad.append(f"env {e}: sp={s.sp} pc={s.pc}")
    return bad


def fuzz_one(seed: int, kind: str, device: str, envs: int, steps: int, frames: int) -> dict:
    import numpy as np

    from gbxcule.backends.warp_vec import WarpVecBackend
    from gbxcule.core.cartridge import Rom, parse_header
    from gbxcule.core.schedule import ActionSchedule

    data = fuzz_rom(seed, kind)
    rom = Rom(data=data, info=parse_header(data), path=f"fuzz-{kind}-{seed}")
    backend = WarpVecBackend(rom, envs, schedule=ActionSchedule(frames, min(1, frames)), device=device)
    rng = np.random.default_rng(seed)
    problems: list[str] = []
    try:
        backend.reset(seed)
        for k in range(steps):
            backend.step(rng.integers(0, 8, envs).astype(np.int32), render=k == steps - 1)
            problems += check_invariants(backend, min(envs, 8))
        frames_ok = bool(np.isin(backend.frames_host(), (0, 1, 2, 3)).all())
        if not frames_ok:
            problems.append("frame buffer holds values outside 0..3")
    finally:
        backend.close()
    return {"seed": seed, "kind": kind, "cart_type": data[0x147], "ok": not problems, "problems": problems[:5]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--roms", type=int, default=64, help="ROMs, half random and half instruction-biased")
    p.add_argument("--envs", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--frames-per-step", type=int, default=4)
    p.add_argument("--debug", action="store_true", help="Warp debug mode: bounds checks on array accesses")
    args = p.parse_args(argv)
    import warp as wp

    from gbxcule.kernels import init_warp

    if args.debug:
        wp.config.mode = "debug"
    init_warp()
    rows, t0 = [], time.perf_counter()
    for i in range(args.roms):
        kind = "random" if i % 2 == 0 else "biased"
        try:
            rows.append(fuzz_one(i, kind, args.device, args.envs, args.steps, args.frames_per_step))
        except Exception as exc:  # a crash is a finding: record it and go on
            rows.append({"seed": i, "kind": kind, "ok": False, "problems": [f"{type(exc).__name__}: {exc}"]})
        r = rows[-1]
        print(f"{r['seed']:4d} {r['kind']:7s} {'ok' if r['ok'] else 'BAD'} {'; '.join(r['problems'])}", flush=True)
    summary = {"device": args.device, "debug": args.debug, "roms": args.roms, "envs": args.envs,
               "steps": args.steps, "frames_per_step": args.frames_per_step, "warp": wp.config.version,
               "seconds": time.perf_counter() - t0, "failures": sum(not r["ok"] for r in rows), "rows": rows}
    print(f"{summary['roms'] - summary['failures']}/{summary['roms']} ROMs ok on {args.device}"
          f"{' (debug mode)' if args.debug else ''} in {summary['seconds']:.1f} s")
    if os.environ.get("OUT"):
        os.makedirs(os.environ["OUT"], exist_ok=True)
        with open(os.path.join(os.environ["OUT"], "fuzz_gpu.json"), "w") as f:
            json.dump(summary, f, indent=2)
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
