"""Replay buffer speed: samples/s of a batch from a full buffer (uniform and prioritized, stacks rebuilt by
index on the device), and the n-step writer's cost per step of all envs beside the env's own step time at the
same env count. One table, one JSON artifact.

    python scripts/bench/bench_replay.py --device cuda --capacity 1000000 --num-envs 16384 --batch 4096 \
        --out bench_out/replay_speed.json

The buffer is filled with synthetic steps (random frames, rewards, 1% terminations and 1% truncations), so
the figures are the buffer's alone; the env's step time comes from a GameEnv of the task with
`keep_final_obs` (as trainers build it) under random actions (`--env-steps 0` skips it).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import torch

from gbxcule.core.outputs import write_output
from gbxcule.harness.bench import environment
from gbxcule.rl.replay import ReplayBuffer, check_memory, plan


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, fn, iters: int) -> float:
    """Seconds per call of `fn` over `iters` calls (after the device has caught up)."""
    sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / iters


def bench_buffer(args, prioritized: bool) -> dict:
    width = 80 if args.obs == "pixels" else 20
    p = plan(args.capacity, args.num_envs, (72, width), args.stack_k, args.n_step, args.max_steps, prioritized)
    check_memory(p, args.device)
    buf = ReplayBuffer(p, 0.99, args.device)
    n, dev = args.num_envs, args.device
    g = torch.Generator(device=dev).manual_seed(0)
    obs = [torch.randint(0, 256, (n, args.stack_k, 72, width), dtype=torch.uint8, device=dev, generator=g)
           for _ in range(4)]
    actions = torch.randint(0, 8, (n,), device=dev, generator=g)
    rewards = torch.randn(n, device=dev, generator=g)
    u = torch.rand(4, n, device=dev, generator=g)
    term, trunc = u < 0.01, (u >= 0.01) & (u < 0.02)
    buf.begin(obs[0])
    step = [0]

    def add():
        i = step[0] % 4
        buf.add(actions, rewards, term[i], trunc[i], obs[(i + 1) % 4], obs[(i + 2) % 4])
        step[0] += 1

    fill = p.rows + args.n_step
    t_add = timed(dev, add, fill)  # the first pass, wrapping once: every later step costs the same
    t_add = timed(dev, add, args.add_iters)
    assert buf.size == (p.rows - args.stack_k - args.n_step + 1) * n
    for _ in range(3):
        buf.sample(args.batch)
    t_sample = timed(dev, lambda: buf.sample(args.batch), args.sample_iters)
    out = {"prioritized": prioritized, "capacity": p.capacity, "rows": p.rows, "buffer_mib": p.bytes / 2**20,
           "add_ms": 1e3 * t_add, "sample_ms": 1e3 * t_sample, "samples_per_s": args.batch / t_sample}
    if prioritized:
        td = torch.rand(args.batch, device=dev, generator=g)

        def sample_and_update():
            b = buf.sample(args.batch)
            buf.update_priorities(b.index, td)

        out["sample_update_ms"] = 1e3 * timed(dev, sample_and_update, args.sample_iters)
    return out


def free(device: str) -> None:
    """Give the last buffer's memory back before the next is planned (its free-memory check)."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def bench_env(args) -> float | None:
    """Seconds per step of all envs of the task's GameEnv under random actions."""
    if args.env_steps <= 0:
        return None
    from gbxcule.rl.env import GameEnv

    env = GameEnv(None, args.num_envs, args.device, task=args.task, stack_k=args.stack_k, obs=args.obs,
                  keep_final_obs=True, info_mode="none")
    try:
        env.reset(seed=0)
        g = torch.Generator(device=env.device).manual_seed(1)

        def step():
            env.step(torch.randint(0, env.num_actions, (env.num_envs,), device=env.device, generator=g))

        timed(args.device, step, args.env_warmup)
        return timed(args.device, step, args.env_steps)
    finally:
        env.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--capacity", type=int, default=1_000_000, help="transitions (default 1,000,000)")
    ap.add_argument("--num-envs", type=int, default=16384)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--stack-k", type=int, default=1)
    ap.add_argument("--obs", choices=("pixels", "packed"), default="pixels")
    ap.add_argument("--n-step", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=100, help="episode limit the final-frame ring is sized for")
    ap.add_argument("--sample-iters", type=int, default=200)
    ap.add_argument("--add-iters", type=int, default=200)
    ap.add_argument("--task", default="leave_house")
    ap.add_argument("--env-steps", type=int, default=20, help="timed env steps (0: no env)")
    ap.add_argument("--env-warmup", type=int, default=30)
    ap.add_argument("--out", default="bench_out/replay_speed.json")
    args = ap.parse_args()
    if min(args.capacity, args.num_envs, args.batch, args.stack_k, args.n_step, args.sample_iters,
           args.add_iters) < 1:
        sys.stderr.write("bench_replay: sizes and iteration counts must be >= 1\n")
        return 2
    rows = []
    for prioritized in (False, True):
        rows.append(bench_buffer(args, prioritized))
        free(args.device)
    env_s = bench_env(args)
    data = {"device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
            "num_envs": args.num_envs, "batch": args.batch, "stack_k": args.stack_k, "obs": args.obs,
            "n_step": args.n_step, "task": args.task, "env_step_ms": None if env_s is None else 1e3 * env_s,
            "buffers": rows, "environment": environment()}
    out = write_output(Path(args.out), json.dumps(data, indent=1))
    print(f"{args.num_envs:,} envs, batch {args.batch:,}, {args.stack_k}-frame stacks, {args.obs}, "
          f"{args.n_step}-step, on {data['device']}")
    print(f"{'sampling':12s} {'transitions':>12s} {'MiB':>8s} {'samples/s':>12s} {'sample ms':>10s} "
          f"{'write ms/step':>14s} {'write / env step':>17s}")
    for r in rows:
        share = "-" if env_s is None else f"{100 * r['add_ms'] / (1e3 * env_s):.2f}%"
        print(f"{'prioritized' if r['prioritized'] else 'uniform':12s} {r['capacity']:>12,} {r['buffer_mib']:>8,.0f} "
              f"{r['samples_per_s']:>12,.0f} {r['sample_ms']:>10.3f} {r['add_ms']:>14.3f} {share:>17s}")
        if "sample_update_ms" in r:
            print(f"{'':12s} sample + priority update: {r['sample_update_ms']:.3f} ms")
    if env_s is not None:
        print(f"env step ({args.task}, keep_final_obs): {1e3 * env_s:.2f} ms per step of all envs "
              f"({args.num_envs / env_s:,.0f} env-steps/s)")
    print(f"artifact: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
