"""Can a policy's CNN read the milestone flags drawn into its frame (env.show_milestones)? A supervised probe of
each view of the torso (rl/models.py VIEWS) on a task's own screens.

    python scripts/bench/bench_view.py --config configs/long_tasks.toml --tasks quest_m3,quest_m7,quest_m9 \
        --steps 300 --out bench_out/view.json

Frames come from random play from each task's start (`--envs` envs, a frame every 4 steps of `--play` steps). Each
training sample is such a frame with its flag row redrawn for a random count of held milestones (the first k of the
pack's, 4 pixels each, as the env draws them); the model (the config's PPO `model`, its policy head as a classifier)
learns that count by cross-entropy with Adam, one minibatch a step. Printed and written: the accuracy on held-out
frames (a fifth, each redrawn at random) every `--every` steps, per view. A view that cannot see the row stays at
chance (1 / (milestones + 1)). Bad input is one line and exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def frames(cfg, tasks: list[str], envs: int, play: int, seed: int):
    """uint8 [N, K, 72, W] frames of random play from each task's start, and the pack's milestone count."""
    import torch

    from gbxcule.rl.evaluate import make_eval_env

    out, names = [], None
    gen = torch.Generator().manual_seed(seed)
    for task in tasks:
        env = make_eval_env(cfg.env, envs, "cpu", seed, task=task)
        try:
            if not env.show_milestones or env.obs_mode != "pixels":
                raise ValueError(f"task {task!r} shows no milestone row in pixel frames (env.show_milestones)")
            names = env.milestone_names
            env.reset(seed=seed)
            for t in range(play):
                env.step(torch.randint(0, env.num_actions, (envs,), generator=gen))
                if t % 4 == 3:
                    out.append(env.obs.clone())
        finally:
            env.close()
    return torch.cat(out), len(names)


def redraw(x, held, k: int):
    """`x` with its last row's flag strip showing the first `held[i]` of `k` milestones, as the env draws them."""
    import torch

    from gbxcule.rl.env import SHOWN_PX

    x = x.clone()
    cols = torch.arange(SHOWN_PX * k) // SHOWN_PX
    on = cols.view(1, 1, -1) < held.view(-1, 1, 1)
    x[:, :, -1, :SHOWN_PX * k] = torch.where(on, 3, 0).to(torch.uint8)
    return x


def probe(x, k: int, arch: str, view: str, steps: int, every: int, batch: int, lr: float, seed: int) -> list:
    """[(step, held-out accuracy)] of one view learning the count of held milestones from the redrawn row."""
    import torch

    from gbxcule.rl.models import ActorCritic

    n = x.shape[0]
    split = n - max(1, n // 5)
    torch.manual_seed(seed)
    model = ActorCritic(k + 1, x.shape[1], False, arch, view=view)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    test_held = torch.randint(0, k + 1, (n - split,), generator=gen)
    test = redraw(x[split:], test_held, k)
    curve = []
    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            with torch.no_grad():
                acc = (model(test)[0].argmax(-1) == test_held).float().mean().item()
            curve.append((step, round(acc, 4)))
        if step == steps:
            break
        idx = torch.randint(0, split, (batch,), generator=gen)
        held = torch.randint(0, k + 1, (batch,), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(redraw(x[idx], held, k))[0], held)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return curve


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/long_tasks.toml")
    ap.add_argument("--tasks", default="quest_m3,quest_m7,quest_m9", help="comma-separated tasks to play from")
    ap.add_argument("--envs", type=int, default=32)
    ap.add_argument("--play", type=int, default=40, help="random steps from each task's start")
    ap.add_argument("--steps", type=int, default=300, help="Adam steps per view")
    ap.add_argument("--every", type=int, default=50, help="steps between held-out accuracies")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2.5e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench_out/view.json")
    a = ap.parse_args(argv)
    from gbxcule.core.errors import GbxculeError
    from gbxcule.core.outputs import check_output, write_output
    from gbxcule.harness.bench import environment
    from gbxcule.rl.models import VIEWS
    from gbxcule.rl.training import make_config

    try:
        if min(a.envs, a.play, a.steps, a.every, a.batch) < 1 or a.play < 4:
            raise ValueError("--envs, --steps, --every, --batch must be >= 1 and --play >= 4")
        check_output(a.out)
        cfg = make_config(a.config, {})
        x, k = frames(cfg, [t for t in a.tasks.split(",") if t], a.envs, a.play, a.seed)
        curves = {v: probe(x, k, cfg.ppo.model, v, a.steps, a.every, a.batch, a.lr, a.seed) for v in VIEWS}
    except (GbxculeError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    import json

    result = {"config": a.config, "tasks": a.tasks, "frames": int(x.shape[0]), "milestones": k,
              "chance": round(1 / (k + 1), 4), "model": cfg.ppo.model, "steps": a.steps, "batch": a.batch, "lr": a.lr,
              "curves": {v: [{"step": s, "accuracy": acc} for s, acc in c] for v, c in curves.items()},
              "environment": environment(),
              "command": " ".join(["scripts/bench/bench_view.py", *(argv if argv is not None else sys.argv[1:])])}
    write_output(Path(a.out), json.dumps(result, indent=1) + "\n", ())
    print(f"{'step':>6s}" + "".join(f" {v:>9s}" for v in curves))
    for i, (step, _) in enumerate(curves[VIEWS[0]]):
        print(f"{step:6d}" + "".join(f" {curves[v][i][1]:9.3f}" for v in curves))
    print(f"held-out accuracy of the count of milestones held, read from the row ({x.shape[0]} frames of "
          f"{a.tasks}; chance {1 / (k + 1):.3f}); wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
