"""`gbxcule verify`: lockstep comparison of a device under test against PyBoy, step by step."""

from __future__ import annotations

from gbxcule.backends import check_memory, emulator_need
from gbxcule.cli import checks
from gbxcule.cli.common import add_state_arg
from gbxcule.core.action_codec import CODECS
from gbxcule.core.errors import GbxculeError
from gbxcule.harness.actions import ACTION_GENERATORS, SOLUTION
from gbxcule.harness.compare import DEFAULT_REGIONS, REGIONS
from gbxcule.harness.verify import VerifyConfig, run_verify
from gbxcule.roms import canonical, get_spec


def register(sub) -> None:
    p = sub.add_parser(
        "verify", help="run a DUT in lockstep with PyBoy and stop at the first difference",
        description="Run the reference (PyBoy) and a device under test side by side, compare every env after "
                    "every step, and on the first mismatch write a repro bundle and exit 1. Settings left out "
                    "come from a built-in ROM's manifest, else from the defaults shown.")
    p.add_argument("--rom", required=True, help="ROM file or built-in ROM name")
    p.add_argument("--ref", default="pyboy_single", choices=["pyboy_single"], help="reference backend")
    p.add_argument("--dut", default="warp_vec_cpu", choices=["warp_vec_cpu", "warp_vec_cuda"],
                   help="device under test (default warp_vec_cpu)")
    p.add_argument("--steps", type=int, help="steps to compare (default 2000)")
    p.add_argument("--frames-per-step", type=int, help="frames per step (default 1)")
    p.add_argument("--release-after-frames", type=int, help="frames the buttons are held (default 1)")
    p.add_argument("--actions", choices=(*ACTION_GENERATORS, SOLUTION),
                   help=f"action generator (default seeded_random; {SOLUTION} with --task)")
    p.add_argument("--task", help=f"an RL task (name or pack.toml:name): --actions {SOLUTION} (its default then) "
                                  "plays its start script and its solution in every env, then NOOPs; its codec and "
                                  "schedule are the defaults, and --steps defaults to the script's length")
    p.add_argument("--seed", type=int, default=0, help="action generator seed (default 0)")
    p.add_argument("--codec", choices=list(CODECS), help="action codec (default: the task's, else dmg_buttons_v0)")
    p.add_argument("--envs", type=int, default=1, help="envs compared side by side (default 1)")
    p.add_argument("--regions", default=",".join(DEFAULT_REGIONS),
                   help=f"memory regions compared, from {','.join(REGIONS)} (default %(default)s)")
    p.add_argument("--screens", action="store_true",
                   help="draw every frame on both sides and compare the screens too")
    p.add_argument("--bundle-dir", default="bundles", help="where mismatch bundles go (default bundles/)")
    add_state_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _text(d: dict) -> str:
    head = (f"{'OK' if d['ok'] else 'MISMATCH'}: {d['steps_run']} steps ({d['frames_run']} frames) of "
            f"{d['rom']} on {d['dut']} vs {d['ref']}{' with screens' if d['config']['screens'] else ''} "
            f"in {d['seconds']:.1f} s")
    if d["ok"]:
        return head
    return "\n".join([head, f"first difference after step {d['mismatch_step']} in env {d['mismatch_env']}:",
                      *("  " + x for x in d["differences"][:40]), f"bundle: {d['bundle']}"])


def _task_script(args):
    """(the task, its start script and solution as actions) for --task, else (None, ()); --actions solution
    without a task, or a task of another ROM or codec, is one error line."""
    if args.task is None:
        if args.actions == SOLUTION:
            raise GbxculeError(f"--actions {SOLUTION} plays a task's start and solution: give --task")
        return None, ()
    from gbxcule.rl.tasks import load_task

    task = load_task(args.task)
    if args.actions not in (None, SOLUTION):
        raise GbxculeError(f"--task gives the actions (its start and solution); drop --actions {args.actions}")
    if not task.solution:
        raise GbxculeError(f"task {task.id} has no solution to play")
    if task.start.states or task.start.generator:
        raise GbxculeError(f"task {task.id} starts from states or a generator; verify plays scripts from power-on")
    if task.rom is not None and canonical(args.rom) not in (None, canonical(task.rom)):
        raise GbxculeError(f"task {task.id} is for the built-in ROM {task.rom}, not {args.rom}")
    if args.codec is not None and args.codec != task.codec:
        raise GbxculeError(f"task {task.id} is defined with codec {task.codec}, not {args.codec}")
    return task, tuple(task.start.script) + tuple(task.solution)


def run(args) -> int:
    from gbxcule.cli.report import emit

    regions = tuple(r for r in args.regions.split(",") if r)
    bad = [r for r in regions if r not in REGIONS]
    if bad:
        raise ValueError(f"unknown region(s) {', '.join(bad)}; choose from {', '.join(REGIONS)}")
    checks.positive(envs=args.envs, steps=args.steps, frames_per_step=args.frames_per_step)
    manifest = get_spec(args.rom).verify if canonical(args.rom) else None
    task, script = _task_script(args)
    pick = lambda given, attr, default: given if given is not None else (  # noqa: E731
        getattr(task, attr) if task is not None else getattr(manifest, attr) if manifest else default)
    cfg = VerifyConfig(
        rom=args.rom, steps=args.steps if args.steps is not None else len(script) if script else (
            manifest.steps if manifest else 2000),
        frames_per_step=pick(args.frames_per_step, "frames_per_step", 1),
        release_after_frames=pick(args.release_after_frames, "release_after_frames", 1),
        actions=args.actions or (SOLUTION if task else manifest.actions if manifest else "seeded_random"),
        seed=args.seed, codec=args.codec or (task.codec if task else "dmg_buttons_v0"),
        envs=args.envs, dut=args.dut, regions=regions, bundle_dir=args.bundle_dir,
        screens=args.screens, state=args.state, task=args.task, script=script)
    checks.positive(steps=cfg.steps)
    if args.release_after_frames is None:  # a default hold (the manifest's) fits the step; a given one must
        cfg.release_after_frames = min(cfg.release_after_frames, cfg.frames_per_step)
    checks.schedule(cfg.frames_per_step, cfg.release_after_frames)
    checks.check_output_dir(args.bundle_dir, (checks.rom_path(args.rom), args.state))
    rom = checks.rom_file(args.rom, "verify")
    # one PyBoy per env on the host plus the DUT's envs: checked before the references are built
    check_memory(args.envs, emulator_need("pyboy_single", rom) + emulator_need(args.dut, rom, args.screens,
                                                                               num_envs=args.envs),
                 "cuda" if args.dut == "warp_vec_cuda" else "cpu")
    result = run_verify(cfg, rom)
    emit(args, {**result.to_dict(), "rom": args.rom, "ref": args.ref, "dut": args.dut,
                "config": {k: v for k, v in cfg.__dict__.items() if k not in ("regions", "script")}
                | {"regions": list(regions), "script_steps": len(script)}},
         _text)
    return 0 if result.ok else 1
