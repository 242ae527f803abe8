"""`pyboy_vec_mp`: the CPU baseline, envs spread over worker processes each running `PyBoyGame`s.

Envs are split into contiguous blocks, one block per worker. A step sends each worker its slice of
the actions and waits for all of them: this is how PyBoy-based RL stacks vectorise today.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from multiprocessing.connection import Connection

import numpy as np

from gbxcule.backends.base import CpuState, check_actions, check_env
from gbxcule.backends.pyboy_single import PyBoyGame, pyboy_states, step_games
from gbxcule.core.action_codec import DEFAULT_CODEC, ActionCodec, get_codec
from gbxcule.core.cartridge import Rom, load_rom
from gbxcule.core.errors import GbxculeError
from gbxcule.core.schedule import ActionSchedule


def _worker(conn: Connection, rom: Rom, codec_name: str, schedule: ActionSchedule, count: int, first: int) -> None:
    games = [PyBoyGame(rom, get_codec(codec_name), schedule) for _ in range(count)]
    conn.send(("ready", None))
    while True:
        cmd, arg = conn.recv()
        try:
            if cmd == "step":
                step_games(games, arg, first_env=first, name="pyboy_vec_mp")
                out = None
            elif cmd == "reset":
                for g in games:
                    g.reset()
                out = None
            elif cmd == "load":
                for g, data in zip(games, arg, strict=True):
                    g.load_state(data)
                out = None
            elif cmd == "cpu":
                out = games[arg].cpu_state()
            elif cmd == "mem":
                i, lo, hi = arg
                out = games[i].read_memory(lo, hi)
            elif cmd == "close":
                for g in games:
                    g.close()
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown command {cmd!r}")
        except GbxculeError as exc:  # a message for the user as it stands
            conn.send(("fail", str(exc)))
            continue
        except Exception as exc:  # reported to the parent, which raises it there
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        conn.send(("ok", out))


class PyBoyVecMpBackend:
    """N PyBoy envs in `num_workers` processes (default: one per core, at most one per env)."""

    name = "pyboy_vec_mp"
    device = "cpu"

    def __init__(self, rom: str | Rom, num_envs: int = 1, codec: str | ActionCodec = DEFAULT_CODEC,
                 schedule: ActionSchedule | None = None, num_workers: int | None = None):
        self.rom = rom if isinstance(rom, Rom) else load_rom(rom)
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = num_envs
        self.codec = codec if isinstance(codec, ActionCodec) else get_codec(codec)
        self.schedule = schedule or ActionSchedule()
        workers = min(num_envs, num_workers or os.cpu_count() or 1)
        bounds = np.linspace(0, num_envs, workers + 1).astype(int)
        self._slices = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        ctx = mp.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs = []
        for lo, hi in self._slices:
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(child, self.rom, self.codec.name, self.schedule, hi - lo, lo),
                            daemon=True)
            p.start()
            self._conns.append(parent)
            self._procs.append(p)
        for c in self._conns:
            self._recv(c)

    def _recv(self, conn: Connection):
        try:
            status, out = conn.recv()
        except EOFError:
            raise GbxculeError("a pyboy_vec_mp worker process died") from None
        if status == "fail":
            raise GbxculeError(out)
        if status == "error":
            raise GbxculeError(f"pyboy_vec_mp worker failed: {out}")
        return out

    def _locate(self, env: int) -> tuple[Connection, int]:
        check_env(self, env)
        for conn, (lo, hi) in zip(self._conns, self._slices, strict=True):
            if lo <= env < hi:
                return conn, env - lo
        raise AssertionError("unreachable")

    def reset(self, seed: int | None = None) -> None:
        for c in self._conns:
            c.send(("reset", None))
        for c in self._conns:
            self._recv(c)

    def load_state(self, state) -> None:
        """Every env continues from a saved state (see `PyBoySingleBackend.load_state`)."""
        states = pyboy_states(state, self.rom, self.num_envs)
        for c, (lo, hi) in zip(self._conns, self._slices, strict=True):
            c.send(("load", states[lo:hi]))
        for c in self._conns:
            self._recv(c)

    def step(self, actions) -> None:
        acts = check_actions(self, actions)
        for c, (lo, hi) in zip(self._conns, self._slices, strict=True):
            c.send(("step", acts[lo:hi]))
        for c in self._conns:
            self._recv(c)

    def get_cpu_state(self, env: int) -> CpuState:
        conn, i = self._locate(env)
        conn.send(("cpu", i))
        return self._recv(conn)

    def read_memory(self, env: int, lo: int, hi: int) -> np.ndarray:
        conn, i = self._locate(env)
        conn.send(("mem", (i, lo, hi)))
        return self._recv(conn)

    def close(self) -> None:
        for c in self._conns:
            try:
                c.send(("close", None))
                c.recv()
            except (EOFError, OSError, BrokenPipeError):
                pass
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        self._conns, self._procs = [], []
