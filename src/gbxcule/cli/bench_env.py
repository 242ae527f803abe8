"""`gbxcule bench-env`: env-steps/s of the RL env (obs, reward, resets) beside the raw backend; a JSON artifact.

For each env count: the backend's full_step, then for each stack_k the env with no resets and the env with a
reset of every env on every step (rl/bench_env.py). On CUDA, the allocation delta after warm-up is
reported and `--max-mem-delta` fails the run when it is exceeded (after the artifact is written).
"""

from __future__ import annotations

import sys

from gbxcule.cli import checks
from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import write_output


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise GbxculeError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise GbxculeError(f"{what} values must be integers >= 1, got {text!r}")
    return vals


def register(sub) -> None:
    p = sub.add_parser("bench-env", help="measure the RL env's env-steps/s (with and without resets) and memory",
                       description=__doc__.splitlines()[0])
    p.add_argument("--task", default="leave_house", help="task (default leave_house; 'none' for no task)")
    p.add_argument("--rom", help="ROM file or built-in ROM name (default: the task's)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--envs", default="1,8,64", help="comma-separated env counts (default 1,8,64)")
    p.add_argument("--stack-k", default="1,4", help="comma-separated frame-stack depths (default 1,4)")
    p.add_argument("--obs", default="pixels", choices=("pixels", "packed"), help="observation mode")
    p.add_argument("--info-mode", default="stats", choices=("none", "stats", "full"), help="info mode")
    p.add_argument("--steps", type=int, default=20, help="timed steps per measurement (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--no-resets", dest="resets", action="store_false", help="skip the reset-every-step runs")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--max-mem-delta", type=int, default=None, metavar="BYTES",
                   help="CUDA: fail if torch's allocated or reserved memory grows by more than BYTES over the "
                        "timed steps of any env measurement")
    p.add_argument("--out", default="bench_out/bench_env.json", help="JSON artifact (default bench_out/bench_env.json)")
    p.add_argument("--json", action="store_true", help="print the artifact as one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from gbxcule.cli.report import emit

    try:
        import torch  # noqa: F401
    except ImportError:
        raise GbxculeError("bench-env needs torch: pip install -e .[rl]") from None
    from gbxcule.core.action_codec import get_codec
    from gbxcule.core.schedule import ActionSchedule
    from gbxcule.harness.bench import environment
    from gbxcule.rl.bench_env import measure_env, table
    from gbxcule.rl.starts import device_names
    from gbxcule.rl.tasks import load_task, task_files

    env_counts, ks = _ints(args.envs, "--envs"), _ints(args.stack_k, "--stack-k")
    checks.positive(steps=args.steps)
    if args.warmup < 0:
        raise GbxculeError(f"--warmup must be >= 0, got {args.warmup}")
    device, _ = device_names(args.device)
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise GbxculeError("--device cuda needs an NVIDIA GPU that torch can use; none was found")
    task = None if args.task == "none" else load_task(args.task)
    if task is None and not args.rom:
        raise GbxculeError("--task none needs --rom")
    rom_in = checks.rom_path(args.rom) if args.rom else None
    inputs = (rom_in, *task_files(None if args.task == "none" else args.task))
    out = checks.check_output(args.out, inputs)
    if args.rom:
        rom = checks.rom_file(args.rom, "bench-env")
    else:
        from gbxcule.core.cartridge import load_rom
        from gbxcule.roms import resolve_rom

        rom = load_rom(resolve_rom(task.rom))
        checks.rom_warnings(rom.info, "bench-env")
    codec = get_codec(task.codec if task else "pokemonred_puffer_v1")
    schedule = ActionSchedule(task.frames_per_step, task.release_after_frames) if task else ActionSchedule(24, 8)
    for n in env_counts:
        checks.env_memory("warp_vec_cuda" if device.startswith("cuda") else "warp_vec_cpu", n, rom, stage="full_step")
    plan = []
    for n in env_counts:
        plan.append(("backend", n, 1))
        for k in ks:
            plan.append(("env", n, k))
            if args.resets:
                plan.append(("env_reset", n, k))
    results, skipped = [], []
    for kind, n, k in plan:
        try:
            r = measure_env(kind, n, args.steps, args.warmup, rom, codec, schedule, device=device, task=task,
                            stack_k=k, obs=args.obs, info_mode=args.info_mode, seed=args.seed)
        except (GbxculeError, MemoryError, RuntimeError) as exc:  # OOM and the like: keep the rest of the sweep
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            skipped.append({"kind": kind, "envs": n, "stack_k": k, "error": msg})
            sys.stderr.write(f"gbxcule bench-env: skipped {kind} x {n} (k={k}): {msg}\n")
            continue
        results.append(r)
    if not results:
        raise GbxculeError(skipped[0]["error"] if skipped else "nothing measured")
    over = []
    if args.max_mem_delta is not None:
        over = [r for r in results if r["kind"] != "backend" and r["alloc_delta"] is not None
                and max(r["alloc_delta"], r["reserved_delta"]) > args.max_mem_delta]
    data = {"rom": {"path": rom.path, "sha1": rom.info.sha1, "title": rom.info.title},
            "task": None if task is None else task.id, "device": device, "obs": args.obs, "info_mode": args.info_mode,
            "steps": args.steps, "warmup": args.warmup, "codec": codec.describe(), "schedule": schedule.describe(),
            "max_mem_delta": args.max_mem_delta, "mem_delta_exceeded": [(r["kind"], r["envs"], r["stack_k"])
                                                                         for r in over],
            "environment": environment(), "results": results, "skipped": skipped}
    data["artifact"] = str(write_output(out, json.dumps(data, indent=2) + "\n", inputs))
    emit(args, data, lambda d: f"artifact: {d['artifact']}\n" + table(results))
    if over:
        raise GbxculeError(f"{len(over)} measurement(s) grew CUDA memory by more than {args.max_mem_delta} bytes "
                           f"after warm-up (see {data['artifact']})")
    return 0
