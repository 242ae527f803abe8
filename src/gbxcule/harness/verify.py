"""Lockstep verification: run the reference (PyBoy) and a device under test step by step and compare.

A step ends where PyBoy's `tick(frames_per_step)` returns: at the first instruction boundary after the
PPU finishes the step's last frame (see docs/step_abi.md). After every step every env is compared:
registers, IME and its delay, HALT, IE/IF, timer and PPU state, DMA, MBC registers, joypad and serial
registers, the bytes sent over serial, and memory (WRAM, HRAM, OAM, VRAM, cartridge RAM by default).
On the first mismatch a self-contained bundle is written: the ROM, the action trace, both states before
and after the step, a readable diff with disassembly around PC, and a one-line repro command.

With `state` (a PyBoy `.state` or a native snapshot), both sides start from that state instead of power-on
(`start_from_state`) and are compared once before the first step.

With `screens`, both sides draw every frame (PyBoy `tick(1, True)` per frame, the DUT `render="all"`) and
each env's screen is compared too, as shade indices; a mismatch bundle then holds both screens as PNGs.
"""

from __future__ import annotations

import json
import shlex
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from gbxcule.asm.disasm import disassemble
from gbxcule.backends.pyboy_single import PyBoyGame, step_games
from gbxcule.core.action_codec import get_codec
from gbxcule.core.cartridge import Rom
from gbxcule.core.pyboy_state import parse_pyboy_state
from gbxcule.core.schedule import ActionSchedule
from gbxcule.core.screen import write_png
from gbxcule.harness.actions import SOLUTION, make_action_gen, script_action_gen
from gbxcule.harness.compare import DEFAULT_REGIONS, diff, dut_view, reference_view


@dataclass
class VerifyConfig:
    rom: str
    steps: int = 2000
    frames_per_step: int = 1
    release_after_frames: int = 1
    actions: str = "seeded_random"
    seed: int = 0
    codec: str = "dmg_buttons_v0"
    envs: int = 1
    dut: str = "warp_vec_cpu"
    regions: tuple[str, ...] = DEFAULT_REGIONS
    bundle_dir: str = "bundles"
    screens: bool = False
    state: str | None = None  # a PyBoy .state or native snapshot file both sides start from
    task: str | None = None  # with actions "solution": the task whose start script and solution are played
    script: tuple[int, ...] = ()  # with actions "solution": the actions (the task's start and solution)


@dataclass
class VerifyResult:
    ok: bool
    steps_run: int
    frames_run: int
    seconds: float
    mismatch_step: int | None = None
    mismatch_env: int | None = None
    differences: list[str] = field(default_factory=list)
    bundle: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _make_dut(cfg: VerifyConfig, rom: Rom, schedule: ActionSchedule):
    from gbxcule.backends.warp_vec import WarpVecBackend

    if cfg.dut not in ("warp_vec_cpu", "warp_vec_cuda"):
        raise ValueError(f"verify compares against warp_vec_cpu or warp_vec_cuda, not {cfg.dut!r}")
    device = "cuda" if cfg.dut == "warp_vec_cuda" else "cpu"
    return WarpVecBackend(rom, cfg.envs, get_codec(cfg.codec), schedule, device=device)


def start_from_state(path: str, rom: Rom, refs: list[PyBoyGame], dut) -> None:
    """Both sides start from a saved state: a PyBoy state as it is, a native snapshot as the DUT loads it
    and the reference from its PyBoy conversion. The reference's serial log starts as the DUT's."""
    from gbxcule.backends.pyboy_single import power_on_state
    from gbxcule.core.savestate import pyboy_bytes, read_state_source

    data = read_state_source(path)
    dut.load_state(data)
    template = power_on_state(rom)
    for e, r in enumerate(refs):
        r.load_state(pyboy_bytes(data, rom, template, e))
        r.serial = bytearray(dut.serial_bytes(e))


def run_verify(cfg: VerifyConfig, rom: Rom) -> VerifyResult:
    codec = get_codec(cfg.codec)
    schedule = ActionSchedule(cfg.frames_per_step, cfg.release_after_frames)
    gen = (script_action_gen(cfg.script, codec, cfg.envs) if cfg.actions == SOLUTION
           else make_action_gen(cfg.actions, codec, cfg.envs, cfg.seed))
    refs = [PyBoyGame(rom, codec, schedule) for _ in range(cfg.envs)]
    dut = _make_dut(cfg, rom, schedule)
    hints = {"cartridge_type": rom.data[0x147], "ram_size_code": rom.data[0x149]}
    trace: list[list[int]] = []
    try:
        if cfg.state is not None:
            start_from_state(cfg.state, rom, refs, dut)
        prev_states = [r.pyboy_state_bytes() for r in refs]
        prev_cycles = [parse_pyboy_state(b, **hints).cpu.cycles for b in prev_states]
        t0 = time.perf_counter()

        def check(k: int, e: int, screens) -> VerifyResult | None:
            """Compare env e after step k (-1: the start state); a failed result on a mismatch."""
            r = refs[e]
            raw = r.pyboy_state_bytes()
            state = parse_pyboy_state(raw, **hints)
            rv = reference_view(state, dut.cart.ram_banks)
            rv["cycles"] -= prev_cycles[e]
            snap = dut.snapshot(e)
            dv = dut_view(snap.fields, snap.regions)
            problems = diff(rv, dv, cfg.regions)
            if k >= 0 and rv["cycles"] != dv["cycles"]:  # a loaded state's cycle count is its last step's
                problems.insert(0, f"cpu.cycles_in_step: ref={rv['cycles']} dut={dv['cycles']}")
            dut_serial = dut.serial_bytes(e)
            if bytes(r.serial) != dut_serial:
                problems.append(f"serial: ref={bytes(r.serial)[-32:]!r} dut={dut_serial[-32:]!r}")
            shots = None
            if screens is not None:
                shots = (r.screen_shades(), screens[e])
                problems += screen_diff(*shots)
            if problems:
                bundle = write_bundle(cfg, rom, trace, k, e, raw, prev_states[e], rv, dv, snap, problems, shots)
                return VerifyResult(False, k + 1, (k + 1) * cfg.frames_per_step, time.perf_counter() - t0,
                                    k, e, problems, str(bundle))
            prev_cycles[e] = state.cpu.cycles
            prev_states[e] = raw
            return None

        for e in range(cfg.envs if cfg.state is not None else 0):
            if failed := check(-1, e, None):
                return failed
        for k in range(cfg.steps):
            acts = gen(k)
            trace.append([int(a) for a in acts])
            step_games(refs, acts, render=cfg.screens, name="pyboy_single (the reference)")
            dut.step(acts, render="all" if cfg.screens else False)
            screens = dut.frames_host() if cfg.screens else None
            for e in range(cfg.envs):
                if failed := check(k, e, screens):
                    return failed
        return VerifyResult(True, cfg.steps, cfg.steps * cfg.frames_per_step, time.perf_counter() - t0)
    finally:
        for r in refs:
            r.close()
        dut.close()


def screen_diff(ref: np.ndarray, dut: np.ndarray) -> list[str]:
    """One line describing how two shade screens differ, or nothing when they are equal."""
    bad = np.argwhere(ref != dut)
    if not bad.size:
        return []
    y, x = (int(v) for v in bad[0])
    return [f"screen: {len(bad)} pixels differ (first at y={y} x={x}: ref={ref[y, x]} dut={dut[y, x]})"]


def repro_command(cfg: VerifyConfig, rom_path: str, steps: int, state_path: str | None = None) -> str:
    args = ["gbxcule", "verify", "--rom", rom_path, "--dut", cfg.dut, "--steps", str(steps),
            "--frames-per-step", str(cfg.frames_per_step), "--release-after-frames",
            str(cfg.release_after_frames), "--actions", cfg.actions, "--seed", str(cfg.seed),
            "--codec", cfg.codec, "--envs", str(cfg.envs)] + (["--screens"] if cfg.screens else []) + (
            ["--task", cfg.task] if cfg.task else [])
    return shlex.join(args + (["--state", state_path] if state_path else []))


def _disasm_around(snap, pc: int) -> str:
    start = max(0, pc - 8)
    data = bytes(snap.peek(a) for a in range(start, min(0x10000, pc + 16)))
    lines = []
    for ins in disassemble(data, base_addr=start):
        mark = "=>" if ins.address == pc else "  "
        lines.append(f"{mark} {ins.address:04X}: {ins.raw.hex(' '):9s} {ins.text}")
    return "\n".join(lines)


def write_bundle(cfg, rom: Rom, trace, step, env, ref_state: bytes, prev_state: bytes, rv, dv, snap, problems,
                 shots=None):
    name = f"{Path(rom.path).stem}-step{step}-env{env}-{time.strftime('%Y%m%d-%H%M%S')}"
    Path(cfg.bundle_dir).mkdir(parents=True, exist_ok=True)
    out, k = Path(cfg.bundle_dir) / name, 1
    while True:  # a folder of its own: a bundle never writes into another one (two in the same second)
        try:
            out.mkdir()
            break
        except FileExistsError:
            k += 1
            out = Path(cfg.bundle_dir) / f"{name}-{k}"
    (out / "rom.gb").write_bytes(rom.file_bytes)  # the file as given: same SHA-1, same padding
    (out / "actions.json").write_text(json.dumps({"codec": cfg.codec, "actions": trace}) + "\n")
    (out / "ref_before.state").write_bytes(prev_state)
    (out / "ref_after.state").write_bytes(ref_state)
    np.savez_compressed(out / "dut_after.npz", **{k: np.asarray(v) for k, v in snap.regions.items()},
                        fields=np.array(list(snap.fields.values()), dtype=np.int64))
    (out / "dut_fields.json").write_text(json.dumps(snap.fields, indent=1) + "\n")
    text = [f"first mismatch after step {step} (env {env}) of {rom.path}", "", *problems, "",
            f"reference PC={rv['pc']:04X}  dut PC={dv['pc']:04X}", "", "DUT code around PC:",
            _disasm_around(snap, dv["pc"])]
    if rv["pc"] != dv["pc"]:
        text += ["", "DUT memory at the reference PC:", _disasm_around(snap, rv["pc"])]
    (out / "diff.txt").write_text("\n".join(text) + "\n")
    state_path = None
    if cfg.state is not None:
        state_path = str(out / "start.state")
        shutil.copyfile(cfg.state, state_path)
    (out / "repro.txt").write_text(repro_command(cfg, str(out / "rom.gb"), step + 1, state_path) + "\n")
    if shots is not None:
        write_png(shots[0], out / "ref_screen.png")
        write_png(shots[1], out / "dut_screen.png")
        write_png(np.where(shots[0] != shots[1], 3, 0), out / "screen_diff.png")
    return out
