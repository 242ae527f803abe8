"""How much of a warp's time its lanes leave idle: per frame, once the envs have spread apart.

A warp runs a frame for as long as its busiest lane. For each of `--frames` frames after `--spread` steps of
seeded random play (24-frame steps, as bench_games.py), this reads every env's executed instructions in the frame
(`instructions` less skipped wait-loop rounds) and the thread order the sort gave the frame's launch, and reports
the work share of 32-lane warps, sum(work) / (32 x sum of each warp's busiest lane):

- `sorted`: in the launch's thread order (the sort key of `--key`);
- `unsorted`: in env order (no sort);
- `oracle`: in order of the frame's own work, the best a key that predicted each env's work could do;
- `by_prev`: in order of the previous frame's work.

It also models the launch: blocks of the backend's size go in thread order to whichever SM slot frees first, each
holding it for its busiest lane's work, and `launch_*` is the SM share (the work over the slots x the last
block's end) for the launch's own order and for `path` orders built on other predictions of the frame's work:
the last frame's, lightest or heaviest first; two frames back; the larger of the last two; 0.5, 0.3 and 0.2 of
the last three (`smooth3`); the frame's own (`oracle`). `corr_*`: the correlation of each env's work with its
work one and two frames before.

Lanes of one warp that run the same amount of work at different PCs still count as busy here: a share near 1
means the time goes to lanes that run different code (branch divergence), a low one to lanes that wait for the
busiest. `pcs/warp` is the mean number of distinct PCs in a warp at the frame's start (thread order). Each frame
runs as a one-frame step (buttons held for the step's first 8 frames, as in play). Nothing is timed: a one-frame
full_step step draws its frame, which the frames of a 24-frame step mostly do not.

    python scripts/profile/warp_tail.py --games .games --only tobutobugirl --envs 262144 --spread 30 --frames 24
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from math import nan
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the game set's scripts
from bench_spread import game_backend
from fetch_games import MANIFEST, read_games

from gbxcule.backends.warp_vec import SORT_KEYS
from gbxcule.core.action_codec import get_codec
from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import write_output
from gbxcule.core.schedule import ActionSchedule
from gbxcule.core.schema import FIELD_INDEX
from gbxcule.harness.actions import make_action_gen
from gbxcule.harness.bench import environment
from gbxcule.kernels.sortkeys import PATH_SHIFT, PATH_TOP

ROOT = Path(__file__).resolve().parents[2]
WARP = 32
LAUNCH = ("launch_sorted", "launch_light_first", "launch_heavy_first", "launch_heavy2", "launch_heavy_max2",
          "launch_heavy_smooth3", "launch_oracle", "corr_prev", "corr_prev2")


def warp_share(work: np.ndarray, order: np.ndarray) -> float:
    """sum(work) / (WARP x the sum over warps of the busiest lane), lanes taken in `order` (a short last warp
    counts its lanes only)."""
    w = work[order].astype(np.float64)
    pad = (-len(w)) % WARP
    lanes = np.concatenate([w, np.full(pad, np.nan)]).reshape(-1, WARP)
    busiest = np.nanmax(lanes, axis=1) * np.sum(~np.isnan(lanes), axis=1)
    return float(w.sum() / busiest.sum()) if busiest.sum() > 0 else 1.0


def launch_share(work: np.ndarray, order: np.ndarray, sms: int, block: int = 256, per_sm: int = 1) -> float:
    """A launch's SM share under a simple model: blocks of `block` lanes in `order` go, in order, to whichever
    of the `sms` x `per_sm` block slots frees first (at 255 registers a thread an SM holds 256 lanes: one
    256-lane block, two of 128); a block holds its slot for its busiest lane's work. The work over the slots x
    the time the last block ends: 1 when no slot waits at the end."""
    w = work[order].astype(np.float64)
    pad = (-len(w)) % block
    times = np.concatenate([w, np.zeros(pad)]).reshape(-1, block).max(axis=1)
    slots = sms * per_sm
    free = np.zeros(slots)
    for t in times:  # (heapq would be faster; a few thousand blocks a frame)
        i = int(free.argmin())
        free[i] += t
    end = free.max()
    return float(times.sum() / (slots * end)) if end > 0 else 1.0


def key_order(predicted: np.ndarray, pcs: np.ndarray, heavy_first: bool) -> np.ndarray:
    """Thread order of the `path` key (`path_key_kernel`) built on `predicted` work: buckets (heaviest first or
    last), then PC."""
    bucket = np.clip(predicted >> PATH_SHIFT, 0, PATH_TOP)
    return np.lexsort((pcs & 0xFFFF, PATH_TOP - bucket if heavy_first else bucket))


def distinct_per_warp(values: np.ndarray) -> float:
    """Mean number of distinct values in each run of WARP entries."""
    return float(np.mean([len(np.unique(values[i:i + WARP])) for i in range(0, len(values), WARP)]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", default=str(MANIFEST))
    ap.add_argument("--games", default=str(ROOT / ".games"), help="folder of <slug>.gb (states as bench_spread.py)")
    ap.add_argument("--state-frames", type=int, default=1200)
    ap.add_argument("--only", default="", help="comma-separated slugs")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu (sorting forced on)")
    ap.add_argument("--envs", type=int, default=262144)
    ap.add_argument("--spread", type=int, default=30, help="untimed 24-frame steps of random play first")
    ap.add_argument("--frames", type=int, default=24, help="frames measured, one launch each (default 24)")
    ap.add_argument("--key", default="path", choices=SORT_KEYS)
    ap.add_argument("--sms", type=int, default=0, help="SMs for the launch model (default: the device's; cpu 132)")
    ap.add_argument("--out", default="bench_out/warp_tail.json")
    args = ap.parse_args()
    try:
        games = read_games(args.manifest, args.only)
    except ValueError as exc:
        sys.stderr.write(f"warp_tail: {exc}\n")
        return 2
    import warp as wp

    codec = get_codec("pokemonred_puffer_v1")
    gen = make_action_gen("seeded_random", codec, args.envs, 0)
    rows, failed = [], []
    ins, pc = FIELD_INDEX["instructions"], FIELD_INDEX["pc"]
    for g in games:
        slug = g["slug"]
        try:
            be = game_backend(Path(args.games), slug, args.envs, args.device, args.state_frames, codec,
                              ActionSchedule(24, 8))
        except (GbxculeError, OSError, ValueError) as exc:
            sys.stderr.write(f"warp_tail: {slug}: {exc}\n")
            failed.append(slug)
            continue
        be.sort_key = args.key
        for k in range(args.spread):
            be.step(gen(k))
        be.schedule = ActionSchedule(1, 1)
        none = np.zeros(args.envs, dtype=np.int32)

        def executed(be=be) -> tuple[np.ndarray, np.ndarray]:
            rows_ = be._field_rows().numpy()
            done = rows_[ins].astype(np.int64) - be._waited.numpy().astype(np.int64)
            return done, rows_[pc].copy()

        sms = args.sms or (wp.get_device(args.device).sm_count if args.device.startswith("cuda") else 132)
        block = be.block_dim or 256  # (None on the CPU device)
        before, pcs = executed()
        prev = prev2 = prev3 = None
        frames = []
        for f in range(args.frames):
            held = gen(args.spread + f // 24) if f % 24 < 8 else none
            be.step(held)
            after, pcs_next = executed()
            work = (after - before) & 0xFFFFFFFF  # (the counter wraps as int32)
            order = be._perm.numpy().copy()
            frame = {"instructions": int(work.sum()), "sorted": warp_share(work, order),
                     "unsorted": warp_share(work, np.arange(args.envs)),
                     "oracle": warp_share(work, np.argsort(-work, kind="stable")),
                     "pcs_per_warp": distinct_per_warp(pcs[order]), "mean": float(work.mean()),
                     "max": int(work.max())}

            def modelled(predicted: np.ndarray, heavy_first: bool = True, work=work, pcs=pcs, sms=sms,
                         block=block) -> float:
                return launch_share(work, key_order(predicted, pcs, heavy_first), sms, block, 256 // block)

            frame["launch_sorted"] = launch_share(work, order, sms, block, 256 // block)
            frame["launch_oracle"] = modelled(work)
            if prev is not None:
                frame["by_prev"] = warp_share(work, np.argsort(-prev, kind="stable"))
                frame["launch_light_first"] = modelled(prev, False)
                frame["launch_heavy_first"] = modelled(prev)
                frame["corr_prev"] = float(np.corrcoef(prev, work)[0, 1])
            if prev2 is not None:
                frame["launch_heavy2"] = modelled(prev2)
                frame["launch_heavy_max2"] = modelled(np.maximum(prev, prev2))
                frame["corr_prev2"] = float(np.corrcoef(prev2, work)[0, 1])
            if prev3 is not None:  # a smoothed count: 0.5, 0.3 and 0.2 of the last three frames
                frame["launch_heavy_smooth3"] = modelled((5 * prev + 3 * prev2 + 2 * prev3) // 10)
            frames.append(frame)
            before, pcs, prev, prev2, prev3 = after, pcs_next, work, prev, prev2
        be.close()
        keys = ("sorted", "unsorted", "oracle", "by_prev", "pcs_per_warp", "mean", *LAUNCH)
        med = {k: statistics.median(fr[k] for fr in frames if k in fr) for k in keys if any(k in fr for fr in frames)}
        rows.append({"slug": slug, "frames": frames, "median": med})
        print(f"{slug}: " + ", ".join(f"{k} {v:.3g}" for k, v in med.items()), flush=True)
    data = {"failed": failed, "envs": args.envs, "spread": args.spread, "frames": args.frames, "key": args.key,
            "games": rows, "environment": environment()}
    out = write_output(Path(args.out), json.dumps(data, indent=1))
    print(f"{'game':16s} {'instr/env':>9s} {'sorted':>7s} {'unsorted':>8s} {'by_prev':>7s} "
          f"{'oracle':>7s} {'pcs/warp':>8s}  (work share of 32-lane warps; medians over frames)")
    for r in rows:
        m = r["median"]
        print(f"{r['slug'][:16]:16s} {m['mean']:9.0f} {m['sorted']:7.3f} {m['unsorted']:8.3f} "
              f"{m.get('by_prev', nan):7.3f} {m['oracle']:7.3f} {m['pcs_per_warp']:8.2f}")
    print(f"\n{'game':16s} " + " ".join(f"{k.removeprefix('launch_'):>11s}" for k in LAUNCH)
          + "  (launch model: SM share; corr: of each env's work with the frame's before)")
    for r in rows:
        print(f"{r['slug'][:16]:16s} " + " ".join(f"{r['median'].get(k, nan):11.3f}" for k in LAUNCH))
    print(f"artifact: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
