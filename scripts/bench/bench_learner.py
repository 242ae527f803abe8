"""The windowed learner alone (PPO with one epoch and learn_share), without the env: milliseconds per env-step of
acting (a no-grad forward and a sample of every env's observation) and of training on windows of `--window`
env-steps split into `--minibatches` random minibatches (forward, an actor-critic loss, backward, clip, Adam), on
random 1-frame observations; in variants (the model, cuDNN's algorithm timing, channels-last, the view); then the
profiler's top kernels of the first variant. Set the result beside the env's own time per env-step (`gbxcule bench
--stage full_step`) to see how much of raw emulation a streaming trainer can keep: at most env / (env + acting +
training). One table, one JSON.

    python scripts/bench/bench_learner.py --envs 65536 --window 16 --minibatches 4 --out bench_out/learner_65536.json
    python scripts/bench/bench_learner.py --device cpu --envs 64 --window 4 --minibatches 2 --reps 1 --no-profile
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import check_output, write_output

# name: (model, cuDNN benchmark, channels-last, view: rl/models.py VIEWS)
VARIANTS = {"nature": ("nature", False, False, "full"), "nature_cudnn_benchmark": ("nature", True, False, "full"),
            "nature_channels_last": ("nature", True, True, "full"), "small": ("small", False, False, "full"),
            "nature_cropped": ("nature", False, False, "cropped")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, default=65536)
    ap.add_argument("--window", type=int, default=16, help="env-steps per window (ppo.rollout_steps)")
    ap.add_argument("--minibatches", type=int, default=4, help="optimizer steps per window (ppo.minibatches)")
    ap.add_argument("--actions", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--amp", choices=("bf16", "off"), default=None, help="default: bf16 on CUDA, off on CPU")
    ap.add_argument("--reps", type=int, default=3, help="timed windows per variant (after one untimed)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--no-profile", action="store_true", help="skip the kernel profile")
    ap.add_argument("--out", default="bench_out/learner.json")
    args = ap.parse_args()
    try:
        check_output(args.out)
    except GbxculeError as exc:
        sys.stderr.write(f"bench_learner: {exc}\n")
        return 2

    import torch

    from gbxcule.harness.bench import environment
    from gbxcule.rl.algos.a2c import A2CCoefs, a2c_loss
    from gbxcule.rl.models import ActorCritic

    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        print(f"error: unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    dev, n, t_len, m = args.device, args.envs, args.window, args.minibatches
    cuda = dev.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("error: --device cuda needs a GPU that torch can use", file=sys.stderr)
        return 2
    amp = args.amp or ("bf16" if cuda else "off")
    torch.manual_seed(0)
    obs = torch.randint(0, 4, (t_len * n, 1, 72, 80), dtype=torch.uint8, device=dev)
    act = torch.randint(0, args.actions, (t_len * n,), device=dev)
    ret = torch.randn(t_len * n, device=dev)
    coefs = A2CCoefs()

    def autocast():
        return torch.autocast(dev.split(":")[0], dtype=torch.bfloat16, enabled=amp == "bf16")

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def window(model, opt, channels_last):
        for mb in torch.randperm(t_len * n, device=dev).chunk(m):
            x = obs[mb]
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with autocast():
                logits, value = model(x)
            dist = torch.distributions.Categorical(logits=logits.float(), validate_args=False)
            loss, _ = a2c_loss(dist.log_prob(act[mb]), dist.entropy(), value.float(), ret[mb], coefs)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            opt.zero_grad(set_to_none=True)

    def acting(model):
        with torch.no_grad(), autocast():
            for t in range(t_len):
                logits, _ = model(obs[t * n:(t + 1) * n])
                torch.distributions.Categorical(logits=logits.float(), validate_args=False).sample()

    def per_env_step_ms(fn):
        fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(args.reps):
            fn()
        sync()
        return (time.perf_counter() - t0) / args.reps / t_len * 1e3

    def build(arch, channels_last, view):
        model = ActorCritic(args.actions, 1, False, arch, view=view).to(dev)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        return model, torch.optim.Adam(model.parameters(), lr=2.5e-4, eps=1e-5)

    rows = {}
    for name in names:
        arch, bench, cl, view = VARIANTS[name]
        torch.backends.cudnn.benchmark = bench
        model, opt = build(arch, cl, view)
        rows[name] = {"acting_ms": per_env_step_ms(lambda m=model: acting(m)),
                      "training_ms": per_env_step_ms(lambda m=model, o=opt, c=cl: window(m, o, c))}
        print(f"{name}: {rows[name]['acting_ms']:.2f} ms acting, {rows[name]['training_ms']:.2f} ms training "
              f"per env-step", flush=True)
    profile = None
    if not args.no_profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        arch, bench, cl, view = VARIANTS[names[0]]
        torch.backends.cudnn.benchmark = bench
        model, opt = build(arch, cl, view)
        window(model, opt, cl)
        sync()
        with torch_profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
            window(model, opt, cl)
            sync()
        key = "cuda_time_total" if cuda else "cpu_time_total"
        profile = prof.key_averages().table(sort_by=key, row_limit=25)
        print(profile)
    print(f"\n{'variant':24s} {'acting ms':>10s} {'training ms':>12s} {'learner ms':>11s}  (per env-step of "
          f"{n:,} envs; {t_len}-step windows in {m} minibatches, {amp})")
    for name, r in rows.items():
        print(f"{name:24s} {r['acting_ms']:10.2f} {r['training_ms']:12.2f} {r['acting_ms'] + r['training_ms']:11.2f}")
    data = {"envs": n, "window": t_len, "minibatches": m, "amp": amp, "device": dev, "rows": rows,
            "profile": profile, "environment": environment(),
            "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])}
    out = write_output(args.out, json.dumps(data, indent=1) + "\n", ())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
