"""`pyboy_puffer_vec`: the PufferLib baseline, PyBoy envs vectorised by PufferLib's own `pufferlib.vector`.

Each env is a minimal Gymnasium-style env around one `PyBoyGame`, wrapped in PufferLib's `GymnasiumPufferEnv`
and vectorised by `pufferlib.vector.make` with its `Multiprocessing` (default) or `Serial` backend: how
PyBoy-based RL stacks on PufferLib run today. The observation is a small WRAM window (`obs_window`, default
the 16 bytes at $C000, uint8), reward 0, never done: the baseline measures emulation throughput, not
observation transfer. `read_memory` serves reads inside that window from the latest observation.

`mode="sync"`: `step` is PufferLib's `vecenv.step` (send the actions, wait for every env).
`mode="async"`: PufferLib's `send`/`recv` loop with one step in flight: `step` collects the previous step
(`recv`) and hands over the new actions (`send`) without waiting for them; `read_memory` and `reset` collect
the step in flight first. See docs/baselines.md.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import tempfile
from typing import Any

import numpy as np

from gbxcule.backends.base import CpuState, check_actions, check_env
from gbxcule.backends.pyboy_single import PyBoyGame, PyBoyHang
from gbxcule.core.action_codec import DEFAULT_CODEC, ActionCodec, get_codec
from gbxcule.core.cartridge import Rom, load_rom
from gbxcule.core.errors import GbxculeError
from gbxcule.core.schedule import ActionSchedule

MODES = ("sync", "async")
VECS = ("multiprocessing", "serial")
DEFAULT_OBS_WINDOW = (0xC000, 0xC010)
INSTALL_HINT = "pyboy_puffer_vec needs pufferlib: see docs/baselines.md (scripts/install_pufferlib.sh)"
HANG_INFO = "gbxcule_pyboy_hang"  # the info key of an env whose PyBoy ran an illegal opcode (PyBoyGymEnv.step)


class NoIntrospection(GbxculeError, NotImplementedError):
    """What PufferLib's vectorisation cannot show (a GbxculeError, so the CLI prints it as one line)."""


@contextlib.contextmanager
def _gym_names_from_gymnasium():
    """While pufferlib imports: a stand-in `gym` module whose `spaces` are Gymnasium's, unless a real gym is
    installed. PufferLib 3.0 imports gym in one place (`pufferlib/spaces.py`) only to name its space classes
    beside Gymnasium's, so scripts/install_pufferlib.sh installs no gym (a real one makes every later
    `import stable_baselines3` import it too, and print gym's "unmaintained" banner). The stand-in is removed
    from `sys.modules` afterwards: nothing else sees a gym."""
    import importlib.util
    import sys
    import types

    if "gym" in sys.modules or importlib.util.find_spec("gym") is not None:
        yield
        return
    import gymnasium

    stand_in = types.ModuleType("gym", "gbxcule's stand-in for pufferlib.spaces: gym.spaces is gymnasium.spaces")
    setattr(stand_in, "spaces", gymnasium.spaces)  # noqa: B010  (a module built here: no declared attribute)
    sys.modules["gym"] = stand_in
    try:
        yield
    finally:
        if sys.modules.get("gym") is stand_in:
            del sys.modules["gym"]


def import_pufferlib_vector(hint: str = INSTALL_HINT):
    """Import `pufferlib.vector`, or raise one clear GbxculeError (`hint`: what needs it, and how to install it).

    From a scratch directory: importing pufferlib symlinks `resources` into the working directory. With no gym
    installed, pufferlib's `import gym` gets a stand-in (`_gym_names_from_gymnasium`); a real gym's
    import-time "unmaintained" notice on stderr is swallowed."""
    try:
        with (tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch),
              contextlib.redirect_stderr(io.StringIO()), _gym_names_from_gymnasium()):
            import pufferlib.vector
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0] == "pufferlib"
        detail = "" if missing else f" (importing it failed: {exc})"
        raise GbxculeError(hint + detail) from exc
    return pufferlib.vector


class PyBoyGymEnv:
    """One PyBoy as a Gymnasium-style env: observation = a WRAM window (uint8), reward 0, never done.

    The PyBoy is created on the first reset, so PufferLib's driver env (built in the parent process only to
    read the spaces) never starts one."""

    render_mode = None

    def __init__(self, rom: Rom, codec: ActionCodec, schedule: ActionSchedule, obs_window: tuple[int, int]):
        import gymnasium  # a dependency of pufferlib

        self.rom, self.codec, self.schedule = rom, codec, schedule
        self.lo, self.hi = obs_window
        self.observation_space = gymnasium.spaces.Box(0, 255, (self.hi - self.lo,), np.uint8)
        self.action_space = gymnasium.spaces.Discrete(codec.num_actions)
        self.game: PyBoyGame | None = None

    def _obs(self) -> np.ndarray:
        return self.game.read_memory(self.lo, self.hi)

    def reset(self, seed: int | None = None, options=None):
        """The info is an empty list, PufferLib's "no infos": a dict (even empty) makes its Multiprocessing
        worker post infos on reset, and a second reset before any step then waits forever for them."""
        if self.game is None:
            self.game = PyBoyGame(self.rom, self.codec, self.schedule)
        else:
            self.game.reset()
        return self._obs(), []

    def step(self, action):
        """A step watched for illegal opcodes (`PyBoyGame.step`). A hang is handed back as the info
        `{HANG_INFO: message}`, not raised: an exception would end PufferLib's worker process, and its parent
        would then wait for the worker forever."""
        try:
            self.game.step(int(action), name="pyboy_puffer_vec")
        except PyBoyHang as exc:
            return self._obs(), 0.0, False, False, {HANG_INFO: str(exc)}
        return self._obs(), 0.0, False, False, {}

    def close(self) -> None:
        if self.game is not None:
            self.game.close()
            self.game = None


def raise_hang(infos) -> None:
    """Raise the PyBoyHang an env reported in PufferLib's infos (a list of info dicts, maybe nested), if any."""
    stack = [infos]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if HANG_INFO in item:
                raise PyBoyHang(str(item[HANG_INFO]))
        elif isinstance(item, list | tuple):
            stack.extend(item)


def make_puffer_env(rom: Rom, codec: ActionCodec, schedule: ActionSchedule, obs_window: tuple[int, int],
                    buf=None, seed: int = 0):
    """PufferLib env creator: a `PyBoyGymEnv` wrapped in `GymnasiumPufferEnv` (top level, so it pickles)."""
    from pufferlib.emulation import GymnasiumPufferEnv

    return GymnasiumPufferEnv(PyBoyGymEnv(rom, codec, schedule, obs_window), buf=buf, seed=seed)


def _physical_cores() -> int:
    import psutil  # a dependency of pufferlib

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


class PyBoyPufferVecBackend:
    """N PyBoy envs vectorised by `pufferlib.vector` (see the module docstring).

    `num_workers` (multiprocessing only) must divide `num_envs`; by default it is the largest divisor of
    `num_envs` that is at most the number of physical cores (PufferLib's one-process-per-core rule)."""

    name = "pyboy_puffer_vec"
    device = "cpu"

    def __init__(self, rom: str | Rom, num_envs: int = 1, codec: str | ActionCodec = DEFAULT_CODEC,
                 schedule: ActionSchedule | None = None, mode: str = "sync", num_workers: int | None = None,
                 vec: str = "multiprocessing", obs_window: tuple[int, int] = DEFAULT_OBS_WINDOW):
        pvec = import_pufferlib_vector()
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if mode not in MODES:
            raise ValueError(f"pyboy_puffer_vec mode must be one of {', '.join(MODES)}, got {mode!r}")
        if vec not in VECS:
            raise ValueError(f"pyboy_puffer_vec vec must be one of {', '.join(VECS)}, got {vec!r}")
        lo, hi = obs_window
        if not 0 <= lo < hi <= 0x10000:
            raise ValueError(f"obs_window must satisfy 0 <= lo < hi <= 0x10000, got {obs_window!r}")
        self.rom = rom if isinstance(rom, Rom) else load_rom(rom)
        self.num_envs, self.mode, self.vec, self.obs_window = num_envs, mode, vec, (lo, hi)
        self.codec = codec if isinstance(codec, ActionCodec) else get_codec(codec)
        self.schedule = schedule or ActionSchedule()
        kwargs: dict = {"batch_size": num_envs}
        if vec == "multiprocessing":
            cores = _physical_cores()
            if num_workers is None:
                num_workers = max(w for w in range(1, min(cores, num_envs) + 1) if num_envs % w == 0)
            elif num_workers < 1 or num_envs % num_workers:
                raise ValueError(f"num_workers ({num_workers}) must be >= 1 and divide num_envs ({num_envs})")
            kwargs |= {"backend": pvec.Multiprocessing, "num_workers": num_workers,
                       "overwork": num_workers > cores}
        elif num_workers not in (None, 1):
            raise ValueError("pyboy_puffer_vec with vec='serial' runs in this process: num_workers must be 1")
        else:
            kwargs["backend"] = pvec.Serial
        self.num_workers = num_workers or 1
        env_args = [self.rom, self.codec, self.schedule, self.obs_window]
        self._vecenv: Any = pvec.make(make_puffer_env, env_args=env_args, num_envs=num_envs, **kwargs)
        # PufferLib's worker processes are not daemons and never exit on their own: stop them at exit too.
        atexit.register(self.close)
        self._in_flight = False
        self._obs: np.ndarray | None = None
        self.reset()

    def _collect(self) -> None:
        """Wait for the step in flight (async mode) and keep its observations."""
        if self._in_flight:
            got = self._vecenv.recv()
            self._in_flight = False
            self._obs = got[0]
            raise_hang(got[4])

    def reset(self, seed: int | None = None) -> None:
        self._collect()
        self._obs = self._vecenv.reset(seed=0 if seed is None else seed)[0]

    def step(self, actions) -> None:
        acts = check_actions(self, actions).astype(np.int32)
        if self.mode == "sync":
            got = self._vecenv.step(acts)
            self._obs = got[0]
            raise_hang(got[4])
            return
        self._collect()
        self._vecenv.send(acts)
        self._in_flight = True

    def get_cpu_state(self, env: int) -> CpuState:
        raise NoIntrospection("pyboy_puffer_vec has no CPU introspection (PufferLib's workers return only "
                              "observations); use pyboy_vec_mp or pyboy_single")

    def read_memory(self, env: int, lo: int, hi: int) -> np.ndarray:
        """Bytes [lo, hi) of env's address space, from the latest observation: only inside `obs_window`."""
        check_env(self, env)
        wlo, whi = self.obs_window
        if not wlo <= lo <= hi <= whi:
            raise NoIntrospection(f"pyboy_puffer_vec only sees its observation window [${wlo:04X}, ${whi:04X}); "
                                  f"[${lo:04X}, ${hi:04X}) is outside it: use pyboy_vec_mp or pyboy_single")
        self._collect()
        return np.array(self._obs[env, lo - wlo:hi - wlo], dtype=np.uint8)

    def close(self) -> None:
        atexit.unregister(self.close)
        if self._vecenv is None:
            return
        self._vecenv.close()  # a step in flight needs no collecting: workers are terminated, Serial envs closed
        for p in getattr(self._vecenv, "processes", []):  # Multiprocessing terminates its workers but never joins
            p.join(timeout=5)
        self._vecenv = None
