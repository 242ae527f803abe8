"""`gbxcule screenshot ROM`: run a ROM for N frames with no input and save its screen as a PNG."""

from __future__ import annotations

import hashlib

import numpy as np

from gbxcule.cli import checks
from gbxcule.core.action_codec import get_codec
from gbxcule.core.cartridge import Rom
from gbxcule.core.outputs import write_output
from gbxcule.core.schedule import ActionSchedule
from gbxcule.core.screen import write_png

SCREENSHOT_BACKENDS = ("warp_vec_cpu", "warp_vec_cuda", "pyboy_single")


def register(sub) -> None:
    p = sub.add_parser("screenshot", help="run a ROM for N frames and save the screen as a PNG",
                       description="Power on, run N frames with no buttons pressed and write the last screen "
                                   "as a PNG in the four DMG greys (docs/rendering.md).")
    p.add_argument("rom", help="ROM file or built-in ROM name")
    p.add_argument("--frames", type=int, default=120, help="frames to run (default 120)")
    p.add_argument("--out", default="screenshot.png", help="PNG to write (default screenshot.png)")
    p.add_argument("--backend", default="warp_vec_cpu", choices=SCREENSHOT_BACKENDS,
                   help="backend (default warp_vec_cpu)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def screen_after(rom: Rom, backend: str, frames: int) -> np.ndarray:
    """The screen (shade indices [144,160]) after `frames` frames from power-on without input."""
    schedule = ActionSchedule(frames, 0)
    codec = get_codec("dmg_buttons_v0")
    if backend == "pyboy_single":
        from gbxcule.backends.pyboy_single import PyBoyGame

        game = PyBoyGame(rom, codec, schedule)
        try:
            game.step(0, render=True, name="pyboy_single")
            return game.screen_shades()
        finally:
            game.close()
    from gbxcule.backends.warp_vec import WarpVecBackend

    dut = WarpVecBackend(rom, 1, codec, schedule, device="cuda" if backend == "warp_vec_cuda" else "cpu")
    try:
        dut.step(np.zeros(1, dtype=np.int32), render=True)
        return dut.frames_host(0)
    finally:
        dut.close()


def run(args) -> int:
    from gbxcule.cli.report import emit

    checks.positive(frames=args.frames)
    inputs = (checks.rom_path(args.rom),)
    out = checks.check_output(args.out, inputs)
    rom = checks.rom_file(args.rom, "screenshot")
    checks.env_memory(args.backend, 1, rom)
    shades = screen_after(rom, args.backend, args.frames)
    write_output(out, lambda p: write_png(shades, p), inputs)
    emit(args, {"rom": args.rom, "backend": args.backend, "frames": args.frames, "out": str(out),
                "screen_sha1": hashlib.sha1(shades.tobytes()).hexdigest(),
                "shade_counts": [int((shades == s).sum()) for s in range(4)]},
         lambda d: f"{d['out']}: {d['rom']} after {d['frames']} frames on {d['backend']} "
                   f"(screen sha1 {d['screen_sha1'][:12]})")
    return 0
