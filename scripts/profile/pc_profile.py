"""Where a game's envs spend their time: PCs sampled at CPU batch ends across frames (CPU device).

After some steps of seeded random play, each frame of the sampled steps runs in parts that stop at random PPU
dots (the step kernel's `stop_dot`, docs/step_abi.md "Frames in parts"), and every env's PC is read at each
stop: batch ends fall at PPU events, so the samples spread over the frame by time. Halted envs are counted
apart. The hottest PCs are listed with their instruction (the ROM bank mapped in the env sampled), which is
how the polling loops `kernels/idle.py` runs at once were found (`4f9ecd8`). Results do not
depend on the stops (tests/test_warp_core.py), so the sampled play is the play a plain step gives.

    python scripts/profile/pc_profile.py --rom .games/airaki.gb --state .games/states/airaki.state
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from gbxcule.asm.disasm import decode, format_instr  # noqa: E402
from gbxcule.backends.warp_vec import WarpVecBackend  # noqa: E402
from gbxcule.core.action_codec import get_codec  # noqa: E402
from gbxcule.core.errors import GbxculeError  # noqa: E402
from gbxcule.core.schedule import ActionSchedule  # noqa: E402
from gbxcule.core.schema import BIG, FRAME_CYCLES  # noqa: E402
from gbxcule.harness.actions import make_action_gen  # noqa: E402
from gbxcule.roms import resolve_rom  # noqa: E402


def profile(rom: str, state: str | None, envs: int, warmup: int, steps: int, stops: int, seed: int):
    """(PC and bank sample counts of running envs, halted samples, all samples, instructions per env-frame)."""
    schedule = ActionSchedule(24, 8)
    b = WarpVecBackend(rom, envs, schedule=schedule)
    if state:
        b.load_state(state)
    gen = make_action_gen("seeded_random", get_codec(b.codec.name), envs, seed)
    for k in range(warmup):
        b.step(gen(k))
    before = b.field_values("instructions").astype(np.int64)
    rng = np.random.default_rng(seed)
    hits: Counter[tuple[int, int]] = Counter()
    halted = total = 0
    kernel = b._kernels.step_kernel
    for k in range(warmup, warmup + steps):
        b._device_actions(gen(k))
        for frame in range(schedule.frames_per_step):
            resume = 0
            for stop in [*sorted(int(x) for x in rng.integers(1, FRAME_CYCLES, stops)), BIG]:
                b._wp.launch(kernel, dim=envs, device="cpu", inputs=[
                    b.fields, b.mem, b.actions, b.masks, b.codec.num_actions, frame, frame + 1,
                    schedule.frames_per_step, schedule.release_after_frames, 0, 0, b.rewards, 0xC100, 0xC110,
                    b._no_perm, resume, stop, b._waited])
                resume = 1
                if stop == BIG:
                    continue
                pcs, down, banks = (b.field_values(f) for f in ("pc", "halted", "rom_bank"))
                total += envs
                halted += int(down.sum())
                hits.update((int(p), int(bk)) for p, d, bk in zip(pcs, down, banks, strict=True) if not d)
    per_frame = (b.field_values("instructions").astype(np.int64) - before) / (steps * schedule.frames_per_step)
    return hits, halted, total, per_frame


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rom", required=True, help="ROM file or built-in ROM name")
    ap.add_argument("--state", default=None, help="start state (PyBoy .state or snapshot)")
    ap.add_argument("--envs", type=int, default=64, help="envs (default 64)")
    ap.add_argument("--warmup", type=int, default=10, help="steps of play before sampling (default 10)")
    ap.add_argument("--steps", type=int, default=4, help="steps sampled (default 4)")
    ap.add_argument("--stops", type=int, default=6, help="samples per frame (default 6)")
    ap.add_argument("--top", type=int, default=20, help="PCs listed (default 20)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the actions and stops (default 0)")
    args = ap.parse_args()
    if min(args.envs, args.steps, args.stops, args.top) < 1 or args.warmup < 0:
        sys.stderr.write("pc_profile: --envs, --steps, --stops and --top must be >= 1, --warmup >= 0\n")
        return 2
    try:
        rom = str(resolve_rom(args.rom))
        data = Path(rom).read_bytes()
        hits, halted, total, per_frame = profile(rom, args.state, args.envs, args.warmup, args.steps, args.stops,
                                                 args.seed)
    except (GbxculeError, OSError, ValueError) as exc:
        sys.stderr.write(f"pc_profile: {exc}\n")
        return 2
    print(f"{Path(rom).name}: {total:,} samples, {halted / total:.1%} halted; instructions a frame: "
          f"mean {per_frame.mean():,.0f}, min {per_frame.min():,.0f}, max {per_frame.max():,.0f}")
    for (pc, bank), n in hits.most_common(args.top):
        if pc >= 0x8000:
            text = f"{pc:04X}  (RAM)"
        else:
            off = pc if pc < 0x4000 else bank * 0x4000 + (pc - 0x4000)
            off %= len(data)
            text = format_instr(decode(data[off:off + 3] + bytes(3), 0, pc), None if pc < 0x4000 else bank)
        print(f"  {n / total:6.1%}  {text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
