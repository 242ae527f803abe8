"""Sort variants compared on envs that have spread apart: each game from its start state (scripts/bench/bench_games.py)
plays `--spread` steps of seeded random actions once, every env's state is copied aside on the device, and each
variant (KEY/PARTS, as bench_games' --variants, or KEY/PARTS/BLOCK, each with an optional @LOOP: the
backend's `loop`, nested or flat, and an optional +G: G stream groups, `set_stream_groups`) then times the same
`--steps` steps with the same actions from that copy. The first variant runs again last, so the table shows how
far a rerun moves.

Random play spreads the envs: a step from the start state runs several times faster than one 30 steps later
(docs/divergence.md, "How to measure it"), so what wins right after a state is loaded need not win in training.
This times the later regime without replaying the spread for every variant.

    python scripts/bench/bench_spread.py --games .games --only geometrix --envs 262144 --variants path/1,path/4,pc/1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from bench_games import make_state  # (this script's folder is on sys.path)
from fetch_games import MANIFEST, read_games

from gbxcule.backends import load_start_state, make_backend
from gbxcule.backends.warp_vec import BLOCK_DIMS, LOOPS, SORT_KEYS, parse_sort_parts, parse_stream_groups
from gbxcule.core.action_codec import get_codec
from gbxcule.core.cartridge import load_rom
from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import write_output
from gbxcule.core.schedule import ActionSchedule
from gbxcule.core.schema import FIELD_INDEX
from gbxcule.harness.actions import make_action_gen
from gbxcule.harness.bench import environment

ROOT = Path(__file__).resolve().parents[2]
STATE = ("fields", "ram", "serial", "_sort_prev", "_waited")  # what a step reads that earlier steps wrote


def parse(text: str) -> list[tuple[str, str, int, int | None, str | None, int]]:
    """'path/1,pc/4/64,path/1@flat+2' -> [(name, key, parts, block_dim or None, loop or None, stream groups)]; fixed
    parts only (no "auto")."""
    out = []
    for name in (v for v in text.split(",") if v):
        head, plus, groups = name.partition("+")
        spec, _, loop = head.partition("@")
        bits = spec.split("/")
        try:
            parts = parse_sort_parts(bits[1]) if len(bits) > 1 else 1
            block = int(bits[2]) if len(bits) > 2 else None
            groups = parse_stream_groups(groups) if plus else 1
        except ValueError:
            parts = block = groups = None
        if (bits[0] not in SORT_KEYS or not isinstance(parts, int) or len(bits) > 3
                or (len(bits) > 2 and block not in BLOCK_DIMS) or loop not in ("", *LOOPS[1:])
                or not isinstance(groups, int)):
            raise ValueError(f"bad variant {name!r}: KEY/PARTS[/BLOCK][@LOOP][+GROUPS], KEY one of "
                             f"{', '.join(SORT_KEYS)}, PARTS an integer, BLOCK one of "
                             f"{', '.join(map(str, BLOCK_DIMS))}, LOOP one of {', '.join(LOOPS[1:])}, "
                             "GROUPS an integer >= 1")
        out.append((name, bits[0], parts, block, loop or None, groups))
    return out


def game_backend(folder: Path, slug: str, envs: int, device: str, state_frames: int, codec, schedule):
    """A full_step backend on `device` (cuda or cpu) with every env at the game's start state (made with PyBoy
    when missing); envs sorted before every frame, in fixed parts (no tuner): callers set `sort_parts`."""
    rom = load_rom(str(folder / f"{slug}.gb"))
    be = make_backend("warp_vec_cuda" if device == "cuda" else "warp_vec_cpu", rom, num_envs=envs, codec=codec,
                      schedule=schedule, stage="full_step", sort_envs=True, sort_parts=1)
    be.reset(0)
    load_start_state(be, str(make_state(folder / f"{slug}.gb", state_frames, folder / "states" / f"{slug}.state")))
    return be


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", default=str(MANIFEST))
    ap.add_argument("--games", default=str(ROOT / ".games"),
                    help="folder of <slug>.gb; the start states in its states/ (made with PyBoy when missing, as "
                         "bench_games.py makes them)")
    ap.add_argument("--state-frames", type=int, default=1200, help="frames from power-on to a made start state")
    ap.add_argument("--only", default="", help="comma-separated slugs")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu to try the script (sorting forced on)")
    ap.add_argument("--envs", type=int, default=262144)
    ap.add_argument("--spread", type=int, default=30, help="untimed steps of random play first (default 30)")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per variant (default 8)")
    ap.add_argument("--variants", default="path/1,path/2,path/4,pc/1,stack/1")
    ap.add_argument("--out", default="bench_out/spread.json")
    args = ap.parse_args()
    try:
        variants = parse(args.variants)
        games = read_games(args.manifest, args.only)
    except ValueError as exc:
        sys.stderr.write(f"bench_spread: {exc}\n")
        return 2
    import warp as wp

    codec = get_codec("pokemonred_puffer_v1")
    schedule = ActionSchedule(24, 8)
    gen = make_action_gen("seeded_random", codec, args.envs, 0)
    rows, failed = [], []
    for g in games:
        slug = g["slug"]
        try:
            be = game_backend(Path(args.games), slug, args.envs, args.device, args.state_frames, codec, schedule)
        except (GbxculeError, OSError, ValueError) as exc:
            sys.stderr.write(f"bench_spread: {slug}: {exc}\n")
            failed.append(slug)
            continue
        for k in range(args.spread):
            be.step(gen(k))
        saved = {a: wp.clone(getattr(be, a)) for a in STATE}

        def restore(be=be, saved=saved):
            for a, arr in saved.items():
                wp.copy(getattr(be, a), arr)

        default_block = be.block_dim
        default_loop = getattr(be, "loop", None)  # (None: a source tree from before the option)
        for block, loop in {(v[3] or default_block, v[4] or default_loop) for v in variants}:
            be.block_dim = block  # Warp builds a module per block size and loop: build each one outside the timing
            if default_loop is not None:
                be.loop = loop
            be.step(gen(args.spread))
        be.block_dim = default_block
        row, done = {"slug": slug, "sps": {}}, set()
        for name, key, parts, block, loop, groups in [*variants, variants[0]]:
            be.sort_key, be.sort_parts, be.block_dim = key, parts, block or default_block
            if groups != getattr(be, "stream_groups", 1):
                be.set_stream_groups(groups)
            if default_loop is not None:
                be.loop = loop or default_loop
            restore()
            be.synchronize()
            t0 = time.perf_counter()
            for k in range(args.steps):
                be.step(gen(args.spread + k))
            be.synchronize()
            sps = args.envs * args.steps / (time.perf_counter() - t0)
            row["sps"].setdefault(name, []).append(sps)
            rows_ = be._field_rows().numpy()  # each variant, the same emulation: the same fields, bit for bit
            done.add(hashlib.sha1(rows_.tobytes()).hexdigest())
            # fields and RAM at the end, to compare source trees (the same emulation must end in the same bits)
            row["end_sha1"] = hashlib.sha1(rows_.tobytes() + be.ram.numpy().tobytes()).hexdigest()
            row.setdefault("instructions", {})[name] = int(rows_[FIELD_INDEX["instructions"]].astype(np.int64).sum())
        be.close()
        row["same_results"] = len(done) == 1
        base = statistics.mean(row["sps"][variants[0][0]])
        row["relative"] = {n: statistics.mean(v) / base for n, v in row["sps"].items()}
        rows.append(row)
        print(f"{slug}: " + ", ".join(f"{n} {'/'.join(f'{x:,.0f}' for x in v)}" for n, v in row["sps"].items()),
              flush=True)
    data = {"failed": failed, "envs": args.envs, "spread": args.spread, "steps": args.steps, "variants": args.variants,
            "games": rows, "environment": environment()}
    out = write_output(Path(args.out), json.dumps(data, indent=1))
    names = [v[0] for v in variants]
    print(f"{'game':16s}" + "".join(f" {n:>10s}" for n in names) + "  (relative to the first; its two runs)")
    for r in rows:
        reruns = "/".join(f"{x:,.0f}" for x in r["sps"][names[0]])
        print(f"{r['slug'][:16]:16s}" + "".join(f" {r['relative'][n]:>10.3f}" for n in names) + f"  {reruns}"
              + ("" if r["same_results"] else "  DIFFERENT RESULTS"))
    if rows:
        print(f"{'median':16s}" + "".join(f" {statistics.median(r['relative'][n] for r in rows):>10.3f}"
                                         for n in names))
    print(f"artifact: {out}")
    return 1 if failed or not all(r["same_results"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
