"""`gbxcule testrom ROM`: run a blargg or mooneye test ROM and report its own verdict."""

from __future__ import annotations

from gbxcule.backends import BACKENDS
from gbxcule.cli import checks
from gbxcule.cli.common import add_state_arg
from gbxcule.harness.testrom import run_test_rom


def register(sub) -> None:
    p = sub.add_parser("testrom", help="run a test ROM (blargg, mooneye) and judge it by its protocol",
                       description="Run a test ROM until it reports (serial text, the 0xA000 result block, or "
                                   "mooneye's LD B,B register signature) or the frame limit runs out. "
                                   "Exit 0 on pass, 1 on fail or no verdict.")
    p.add_argument("rom", help="test ROM file")
    p.add_argument("--backend", default="warp_vec_cpu", choices=BACKENDS, help="backend (default warp_vec_cpu)")
    p.add_argument("--frames", type=int, default=3600, help="frame limit (default 3600 = 1 minute)")
    p.add_argument("--boot", default="pyboy", choices=["pyboy", "skip", "dmg"],
                   help="start through PyBoy's boot ROM (default), right after it (skip), or with a real "
                        "DMG's after-boot registers (dmg); see docs/step_abi.md")
    add_state_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from gbxcule.cli.report import emit

    checks.positive(frames=args.frames)
    rom = checks.rom_file(args.rom, "testrom")
    checks.env_memory(args.backend, 1, rom)
    result = run_test_rom(rom, args.backend, args.frames, boot=args.boot, state=args.state)
    verdict = "PASS" if result.passed else "FAIL" if result.decided else "NO VERDICT"
    note = None
    if not result.decided:
        note = checks.cgb_only_note(rom.info) or f"the ROM reported no result within {args.frames} frames"
    emit(args, {**result.to_dict(), "rom": args.rom, "backend": args.backend, "verdict": verdict, "why": note},
         lambda d: f"{d['verdict']} {d['rom']} ({d['protocol']}, {d['frames']} frames)\n{d['text'].strip()}"
                   + (f"\nno verdict: {d['why']}" if d["why"] else ""))
    return 0 if result.passed else 1
