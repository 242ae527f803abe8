"""`pyboy_single`: the reference backend, PyBoy instances in this process with full introspection.

`PyBoyGame` wraps one headless PyBoy and applies the action schedule exactly: the action's buttons are
pressed before frame 0 of a step and released before frame `release_after_frames` (PyBoy applies queued
input at the start of its next frame). It is the one place gbxcule drives PyBoy; `pyboy_vec_mp` runs the
same class in worker processes.

PyBoy 2.8 runs an illegal opcode ($D3, $DB, ...) as a zero-cycle no-op that never advances PC: `tick` never
returns. A `PyBoyGame` therefore only ever ticks under `run_watched` (`PyBoyGame.step` for one game,
`step_games` for several under one watch), which raises `PyBoyHang` (one line: the env, the opcode and its
address) instead of hanging the caller: every path that runs PyBoy (the PyBoy backends, verify's reference,
screenshot, testrom) goes through it (docs/hardware.md).
"""

from __future__ import annotations

import io
import logging
import os
import queue
import threading
from collections.abc import Callable, Sequence
from functools import cache

import numpy as np

from gbxcule.backends.base import CpuState, check_actions, check_env
from gbxcule.core.action_codec import BUTTONS, DEFAULT_CODEC, ActionCodec, get_codec
from gbxcule.core.cartridge import Rom, load_rom
from gbxcule.core.errors import GbxculeError
from gbxcule.core.isa import ILLEGAL_CODES
from gbxcule.core.pyboy_state import PyBoyState, parse_pyboy_state, restore_pyboy, snapshot_pyboy
from gbxcule.core.schedule import ActionSchedule
from gbxcule.core.screen import PYBOY_GREYS, pyboy_shades

os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def new_pyboy(rom: Rom, render: bool = False):
    from pyboy import PyBoy  # imported late: PyBoy is slow to import and only reference runs need it

    logging.getLogger("pyboy").setLevel(logging.ERROR)
    # A file-like ROM: PyBoy then never reads or writes .ram/.rtc files next to a user's ROM. DMG mode
    # always (gbxcule emulates the DMG), sound off (the APU is not emulated; see docs/hardware.md).
    # pyboy.logging ranks INFO (4) above CRITICAL (3), so only a level past INFO keeps an MBC3 clock's "No RTC
    # file found" notice off stdout (it would break --json output).
    return PyBoy(io.BytesIO(rom.data), window="null", sound_emulated=False, cgb=False, log_level=5,
                 no_input=True, color_palette=PYBOY_GREYS)


@cache
def power_on_state(rom: Rom) -> PyBoyState:
    """The state of a fresh PyBoy for `rom` (the template `core.savestate.env_to_pyboy` fills in)."""
    pyboy = new_pyboy(rom)
    try:
        return snapshot_pyboy(pyboy)
    finally:
        pyboy.stop(save=False)


def pyboy_states(state, rom: Rom, num_envs: int) -> list[bytes]:
    """PyBoy state bytes for each of `num_envs` envs from a saved state of either format."""
    from gbxcule.core.savestate import pyboy_bytes, read_state_source

    data = read_state_source(state)
    return [pyboy_bytes(data, rom, power_on_state(rom), e) for e in range(num_envs)]


HANG_CHECK_S = 1.0  # a step running longer than this has its CPU checked for an illegal opcode (then every 0.25 s)


class PyBoyHang(GbxculeError):
    """A PyBoy CPU sits on an illegal opcode: PyBoy would never return from `tick`."""


class _StepThread:
    """A daemon thread that runs the work it is handed, one item after another: each calling thread keeps one for
    all its steps (starting a thread per step cost about 0.2 ms of a 1-frame step, a hand-over costs 0.03 ms)."""

    def __init__(self, name: str):
        self.pid = os.getpid()  # a forked child has the object but not the thread: it makes its own
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, daemon=True, name=name).start()

    def _loop(self) -> None:
        while True:
            work, done, failure = self.jobs.get()
            try:
                work()
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)
            finally:
                done.set()


_step_threads = threading.local()


def run_watched(work: Callable[[], None], games: Sequence[PyBoyGame], first_env: int | None = 0,
                name: str = "pyboy") -> None:
    """Run `work` (which steps `games`, setting `game.busy` on the one it ticks) in the calling thread's step
    thread (`_StepThread`) and wait for it. Still running after `HANG_CHECK_S` with the busy game's CPU on the
    same illegal opcode at two checks: raise PyBoyHang and mark the game `stuck` (the step thread is left
    spinning inside PyBoy, which nothing can stop, and a new one takes later steps; the game refuses further use
    and is not closed). `first_env`: the env number of `games[0]` in the message (None: the message names no
    env)."""
    runner = getattr(_step_threads, "runner", None)
    if runner is None or runner.pid != os.getpid():
        runner = _step_threads.runner = _StepThread(f"{name}-step")
    done, failure = threading.Event(), []
    runner.jobs.put((work, done, failure))
    done.wait(HANG_CHECK_S)
    seen = None
    while not done.is_set():
        busy = [i for i, g in enumerate(games) if g.busy]
        now = [(i, games[i].illegal_opcode_at_pc()) for i in busy]
        now = [(i, hit) for i, hit in now if hit is not None]
        if now and now == seen:
            i, (pc, op) = now[0]
            games[i].stuck = True
            _step_threads.runner = None  # spinning for good: later steps get a thread of their own
            who = "" if first_env is None else f"env {first_env + i} "
            raise PyBoyHang(f"{name}: {who}ran the illegal opcode ${op:02X} at ${pc:04X}, which PyBoy never returns "
                            f"from (gbxcule's kernels lock the CPU there, as the hardware does; docs/hardware.md)")
        seen = now
        done.wait(0.25)
    if failure:
        raise failure[0]


def step_games(games: Sequence[PyBoyGame], actions, render: bool = False, first_env: int | None = 0,
               name: str = "pyboy") -> None:
    """One step of each game with its action, all under one `run_watched` (one thread for the batch)."""
    for g in games:
        if g.stuck:
            raise PyBoyHang(f"{name}: this PyBoy is stuck on an illegal opcode; it cannot step")

    def work() -> None:
        for g, a in zip(games, actions, strict=True):
            g.busy = True
            try:
                g.step_unwatched(int(a), render)
            finally:
                g.busy = False

    run_watched(work, games, first_env, name)


class PyBoyGame:
    """One PyBoy driven under an action schedule."""

    def __init__(self, rom: Rom, codec: ActionCodec, schedule: ActionSchedule):
        self.rom, self.codec, self.schedule = rom, codec, schedule
        self.pyboy = new_pyboy(rom)
        self.frames = 0
        self.serial = bytearray()  # every byte written to SB since reset
        self.busy = False  # inside `step` (run_watched checks this game's CPU)
        self.stuck = False  # its PyBoy spins forever on an illegal opcode (see `run_watched`)

    def illegal_opcode_at_pc(self) -> tuple[int, int] | None:
        """(PC, opcode) when the CPU sits on an illegal opcode, else None (read while another thread ticks)."""
        pc = self.pyboy.register_file.PC
        op = self.pyboy.memory[pc]
        return (pc, op) if op in ILLEGAL_CODES else None

    def reset(self) -> None:
        """Power on again. A new instance, not load_state: PyBoy's loader advances an MBC3 clock by the
        wall-clock time since the save, which would make runs irreproducible."""
        if self.stuck:
            raise PyBoyHang("this PyBoy is stuck on an illegal opcode; it cannot be reset")
        self.pyboy.stop(save=False)
        self.pyboy = new_pyboy(self.rom)
        self.frames = 0
        self.serial = bytearray()

    def load_state(self, data: bytes) -> None:
        """Continue from PyBoy state bytes, loaded into a fresh PyBoy. A running MBC3 clock is not advanced
        by the wall-clock time since the save (the state's save time is moved to the far future), and
        every button is released at the next frame start (each step sets all buttons, as gbxcule does)."""
        state = parse_pyboy_state(data, cartridge_type=self.rom.data[0x147], ram_size_code=self.rom.data[0x149])
        if state.cartridge.rtc is not None:
            state.cartridge.rtc.saved_time = float("inf")
        self.reset()
        restore_pyboy(self.pyboy, state)
        for name in BUTTONS:
            self.pyboy.button_release(name)

    def pyboy_state_bytes(self) -> bytes:
        buf = io.BytesIO()
        self.pyboy.save_state(buf)
        return buf.getvalue()

    def step(self, action: int, render: bool = False, name: str = "pyboy") -> None:
        """One step of the schedule, watched (`step_games`); with `render`, PyBoy draws every frame
        (`tick(1, True)` each): its window line counter only advances on drawn frames, so drawing only the last
        one can be stale."""
        step_games([self], [action], render, None, name)

    def step_unwatched(self, action: int, render: bool) -> None:
        """The step itself: only `step_games` calls it, inside its watch (an illegal opcode never returns)."""
        buttons = self.codec.pyboy_buttons(action)
        for frames, held in self.schedule.segments():
            for name in buttons:
                (self.pyboy.button_press if held else self.pyboy.button_release)(name)
            if render:
                for _ in range(frames):
                    self.pyboy.tick(1, True)
            else:
                self.pyboy.tick(frames, False)
        if self.schedule.release_after_frames == self.schedule.frames_per_step:
            for name in buttons:
                self.pyboy.button_release(name)
        self.frames += self.schedule.frames_per_step
        self.serial += self.pyboy._serial().encode("latin-1")  # PyBoy keeps only the last 1024 bytes

    def screen_shades(self) -> np.ndarray:
        """PyBoy's screen as shade indices 0-3, uint8 [144,160] (255 where it shows no palette colour)."""
        return pyboy_shades(self.pyboy.screen.ndarray)

    def cpu_state(self) -> CpuState:
        r = self.pyboy.register_file
        s = snapshot_pyboy(self.pyboy)
        return CpuState(a=r.A, f=r.F, b=r.B, c=r.C, d=r.D, e=r.E, h=r.HL >> 8, l=r.HL & 0xFF, sp=r.SP, pc=r.PC,
                        ime=bool(s.cpu.ime), halted=bool(s.cpu.halted))

    def read_memory(self, lo: int, hi: int) -> np.ndarray:
        return np.asarray(self.pyboy.memory[lo:hi], dtype=np.uint8)

    def close(self) -> None:
        if not self.stuck:  # a stuck PyBoy is still running in its thread: stopping it under it could crash
            self.pyboy.stop(save=False)


class PyBoySingleBackend:
    """PyBoy in this process, one instance per env: the reference for lockstep verification."""

    name = "pyboy_single"
    device = "cpu"

    def __init__(self, rom: str | Rom, num_envs: int = 1, codec: str | ActionCodec = DEFAULT_CODEC,
                 schedule: ActionSchedule | None = None):
        self.rom = rom if isinstance(rom, Rom) else load_rom(rom)
        self.num_envs = num_envs
        self.codec = codec if isinstance(codec, ActionCodec) else get_codec(codec)
        self.schedule = schedule or ActionSchedule()
        self.games = [PyBoyGame(self.rom, self.codec, self.schedule) for _ in range(num_envs)]

    def reset(self, seed: int | None = None) -> None:
        for g in self.games:
            g.reset()

    def load_state(self, state) -> None:
        """Every env continues from a saved state (PyBoy `.state` or native snapshot, bytes or a path); env e
        takes the snapshot's env e mod M."""
        for g, data in zip(self.games, pyboy_states(state, self.rom, self.num_envs), strict=True):
            g.load_state(data)

    def step(self, actions) -> None:
        step_games(self.games, check_actions(self, actions), name=self.name)

    def get_cpu_state(self, env: int) -> CpuState:
        return self.games[check_env(self, env)].cpu_state()

    def read_memory(self, env: int, lo: int, hi: int) -> np.ndarray:
        return self.games[check_env(self, env)].read_memory(lo, hi)

    def serial_bytes(self, env: int) -> bytes:
        return bytes(self.games[check_env(self, env)].serial)

    def close(self) -> None:
        for g in self.games:
            g.close()
        self.games = []
