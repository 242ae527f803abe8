"""`gbxcule devcheck` for third-party games: warp_vec_cpu against warp_vec_cuda from each game's state, after
every step comparing all fields, RAM, the frame buffer, the observation and the rewards (full_step). Needs a
GPU; the ROMs and states are those of scripts/bench/bench_games.py (never committed).

    python scripts/check/devcheck_games.py --games .games --only geometrix,carazu [--envs 64] [--steps 4]

Exit 0 when every step of every game is identical.
"""

from __future__ import annotations

import argparse
import sys

from gbxcule.cli.devcheck import stream_groups_arg


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--games", default=".games", help="folder of <slug>.gb and states/<slug>.state")
    p.add_argument("--only", required=True, help="comma-separated slugs")
    p.add_argument("--envs", type=int, default=64)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--loop", default="auto", choices=("auto", "nested", "flat"),
                   help="the CUDA backend's instruction loop (flat: the flat kernel from the first step)")
    p.add_argument("--stream-groups", type=stream_groups_arg, default="auto",
                   help="the CUDA backend's stream_groups (2: every launch in 2 groups, on 2 streams)")
    p.add_argument("--state-frames", type=int, default=1200,
                   help="frames from power-on to a start state made where states/<slug>.state is missing")
    args = p.parse_args()
    from pathlib import Path

    import numpy as np
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the game set's scripts
    from bench_games import make_state

    from gbxcule.backends import load_start_state
    from gbxcule.backends.warp_vec import WarpVecBackend
    from gbxcule.core.schedule import ActionSchedule
    from gbxcule.harness.actions import make_action_gen

    games = Path(args.games)
    bad = 0
    for slug in [s for s in args.only.split(",") if s]:
        state = make_state(games / f"{slug}.gb", args.state_frames, games / "states" / f"{slug}.state")
        pair = []
        for device in ("cpu", "cuda"):
            b = WarpVecBackend(f"{args.games}/{slug}.gb", args.envs, "pokemonred_puffer_v1", ActionSchedule(24, 8),
                               device=device, stage="full_step", loop=args.loop if device == "cuda" else "auto",
                               stream_groups=args.stream_groups if device == "cuda" else "auto")
            load_start_state(b, str(state))
            pair.append(b)
        gen = make_action_gen("seeded_random", pair[0].codec, args.envs, seed=1)
        differing = 0
        for k in range(args.steps):
            actions = gen(k)
            for b in pair:
                b.step(actions)
            cpu, cuda = pair
            same = {"fields": np.array_equal(cpu.fields.numpy(), cuda.fields.numpy()),
                    "ram": np.array_equal(cpu.ram.numpy(), cuda.ram.numpy()),
                    "frame": np.array_equal(cpu.frame_buffer().numpy(), cuda.frame_buffer().numpy()),
                    "obs": np.array_equal(cpu.obs.numpy(), cuda.obs.numpy()),
                    "rewards": np.array_equal(cpu.rewards.numpy(), cuda.rewards.numpy())}
            if not all(same.values()):
                differing += 1
                print(f"{slug} step {k}: differ in {', '.join(k for k, v in same.items() if not v)}")
        instr = int(pair[1].field_values("instructions").sum())
        print(f"{slug}: {args.steps} steps x {args.envs} envs, {instr:,} instructions, "
              f"{'identical' if differing == 0 else f'{differing} steps differ'}", flush=True)
        bad += differing
    print("all identical" if bad == 0 else f"{bad} differing steps")
    return 1 if bad else 0


if __name__ == "__main__":
    from gbxcule.core.errors import GbxculeError

    try:
        sys.exit(main())
    except (GbxculeError, OSError) as exc:
        sys.stderr.write(f"devcheck_games: {exc}\n")
        sys.exit(2)
