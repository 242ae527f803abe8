"""Gymnasium 1.x adapters over `GameEnv` (docs/adapters.md).

`GbxculeVectorEnv` is a `gymnasium.vector.VectorEnv` of N Game Boys, autoreset mode SAME_STEP: the obs of a
step whose episode ended is the new episode's first, and the finished episode's last obs is in
`info["final_obs"]` (mask `info["_final_obs"]`), its return, length and success in `info["final_info"]`
(`is_success`: the task's RAM goal, else the goal template's verdict; `success_source` says which).
`array="numpy"` (default) returns host numpy arrays with one device-to-host copy a step; `array="torch"`
returns tensors on the env's device with no copy. `GbxculeEnv` is one env (N=1) as a `gymnasium.Env` for
`gymnasium.make` and `check_env`.

    import gymnasium, gbxcule.rl
    envs = gymnasium.make_vec("gbxcule/Overworld-LeaveHouse-v0", num_envs=64, device="cuda")
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from gbxcule.rl.adapters.core import SHADE_SCALE, AdapterConfigError, StepMirror, check_kwargs, make_game_env

ARRAYS = ("numpy", "torch")
_OWN = ("device", "array", "scale", "seed", "max_episode_steps", "render_mode")
GREYS = np.array([255, 170, 85, 0], dtype=np.uint8)  # shade -> grey for render()


class ActionError(gymnasium.error.InvalidAction, ValueError):
    """Actions of the wrong shape, dtype or range."""


def obs_space(game, scale: bool) -> spaces.Box:
    """The single-env observation space: uint8 [K, 72, 80] shades 0..3 (0..255 with scale), or packed bytes."""
    high = 255 if (scale or game.obs_mode == "packed") else 3
    return spaces.Box(0, high, game.single_obs_shape, np.uint8)


def _seed_of(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ValueError(f"seed must be one integer for all envs (GameEnv derives each env's start from it), "
                         f"got {seed!r}")
    return int(seed)


class GbxculeVectorEnv(VectorEnv):
    """N Game Boys as a Gymnasium vector env; see the module docstring.

    num_envs, device ("cpu", "cuda"), array ("numpy" or "torch"), scale (shades x85 to 0..255, for libraries
    that divide images by 255), seed (start-state generation; episodes are seeded by `reset(seed=...)`),
    max_episode_steps (alias of max_steps) and GameEnv's keyword arguments (rom, task, start_states, stack_k,
    obs, reward, goal, ...).
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 1, device: str = "cpu", array: str = "numpy", scale: bool = False,
                 seed: int = 0, max_episode_steps: int | None = None, render_mode: str | None = None, **kwargs):
        check_kwargs(kwargs, "gbxcule gymnasium env", _OWN)
        if array not in ARRAYS:
            raise AdapterConfigError(f"array must be one of {', '.join(ARRAYS)}, got {array!r}")
        if render_mode is not None:
            raise AdapterConfigError(f"the vector env renders nothing (render_mode={render_mode!r}); use "
                                     f"gymnasium.make for a single env with render_mode='rgb_array'")
        if max_episode_steps is not None:
            if kwargs.get("max_steps") not in (None, max_episode_steps):
                raise AdapterConfigError("give max_steps or max_episode_steps, not both")
            kwargs["max_steps"] = max_episode_steps
        self.game = make_game_env(num_envs, device, seed, **kwargs)
        self.array, self.scale, self.device = array, bool(scale), self.game.device
        self.num_envs = self.game.num_envs
        self.success_source = self.game.success_source  # "ram", "template" (no RAM goal) or None
        self.mirror = StepMirror(self.game, scale=self.scale, host=(array == "numpy"))
        self.single_observation_space = obs_space(self.game, self.scale)
        self.single_action_space = spaces.Discrete(self.game.num_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Restart every env. `seed` (one int) fixes the start slots of this and later episodes; without it a
        seed is drawn from the env's generator (seeded by the last `reset(seed=...)`)."""
        if options:
            raise ValueError(f"reset takes no options, got {sorted(options)}")
        if seed is not None:
            self._np_random, self._np_random_seed = seeding.np_random(_seed_of(seed))
            s = int(seed)
        else:
            s = int(self.np_random.integers(2**31))
        self.game.reset(seed=s)
        out = self.mirror.reset_torch() if self.array == "torch" else self.mirror.reset_host()
        return out["obs"], {}

    def _step_game(self, actions) -> None:
        try:
            self.game.step(actions)
        except (ValueError, TypeError) as exc:
            raise ActionError(str(exc)) from None

    def step(self, actions):
        """Actions: int array [N] (numpy, or a torch tensor on the env's device or the host)."""
        self._step_game(actions)
        if self.array == "torch":
            t = self.mirror.step_torch()
            d = t["done"]
            info = {"final_obs": self.mirror.final_obs_torch(), "_final_obs": d, "_final_info": d,
                    "final_info": {"is_success": t["success"], "_is_success": d, "_episode": d,
                                   "episode": {"r": t["ep_return"], "l": t["ep_length"], "_r": d, "_l": d}}}
            return t["obs"], t["reward"], t["terminated"], t["truncated"], info
        h = self.mirror.step_host()
        info = {}
        if h["done"].any():
            done = h["done"].copy()
            idx = np.flatnonzero(done)
            final = np.full(self.num_envs, None, dtype=object)
            for row, i in zip(self.mirror.final_obs_host(idx), idx, strict=True):
                final[i] = row
            info = {"final_obs": final, "_final_obs": done, "_final_info": done,
                    "final_info": {"is_success": h["success"].copy(), "_is_success": done, "_episode": done,
                                   "episode": {"r": h["ep_return"].copy(), "l": h["ep_length"].copy(),
                                               "_r": done, "_l": done}}}
        return h["obs"], h["reward"], h["terminated"], h["truncated"], info

    def episode_stats(self, clear: bool = True) -> dict:
        """GameEnv's totals since the last call (finished episodes, mean return, length, success rate)."""
        return self.game.episode_stats(clear)

    def close_extras(self, **kwargs) -> None:
        self.game.close()


class GbxculeEnv(gymnasium.Env):
    """One Game Boy as a `gymnasium.Env` (a `GbxculeVectorEnv` of 1). No autoreset: a step that ends the
    episode returns its last obs; call `reset()` after it. Takes `GbxculeVectorEnv`'s arguments but
    num_envs and array; render_mode "rgb_array" renders the full 144x160 screen."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 60}

    def __init__(self, render_mode: str | None = None, **kwargs):
        for bad in ("num_envs", "array"):
            if bad in kwargs:
                raise TypeError(f"a single gbxcule env takes no {bad} (use gymnasium.make_vec for N envs)")
        if render_mode not in (None, "rgb_array"):
            raise AdapterConfigError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self.vec = GbxculeVectorEnv(num_envs=1, **kwargs)
        self.observation_space = self.vec.single_observation_space
        self.action_space = self.vec.single_action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        s = _seed_of(seed) if seed is not None else int(self.np_random.integers(2**31))
        obs, _ = self.vec.reset(seed=s, options=options)
        return obs[0].copy(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ActionError(f"action must be an integer in [0, {self.action_space.n}), got {action!r}")
        obs, reward, term, trunc, info = self.vec.step(np.array([action], dtype=np.int64))
        out = {}
        if "final_obs" in info:
            obs = info["final_obs"][0][None]
            fi = info["final_info"]
            out = {"is_success": bool(fi["is_success"][0]), "success_source": self.vec.success_source,
                   "episode": {"r": float(fi["episode"]["r"][0]), "l": int(fi["episode"]["l"][0])}}
        return obs[0].copy(), float(reward[0]), bool(term[0]), bool(trunc[0]), out

    @property
    def game(self):
        """The `GameEnv` behind this env (through `gymnasium.make`'s wrappers: `env.unwrapped.game`)."""
        return self.vec.game

    def episode_stats(self, clear: bool = True) -> dict:
        """GameEnv's totals since the last call (finished episodes, mean return, length, success rate)."""
        return self.vec.game.episode_stats(clear)

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        shades = self.vec.game.frames([0])[0]
        return np.repeat(GREYS[shades][..., None], 3, axis=-1)

    def close(self) -> None:
        self.vec.close()


def _pack_ids() -> dict[str, str]:
    """Gymnasium ids of the built-in game's tasks: overworld:leave_house -> gbxcule/Overworld-LeaveHouse-v0."""
    from gbxcule.rl.tasks import builtin_packs

    ids = {}
    for pack, tasks in builtin_packs().items():
        for name, task in tasks.items():
            if task.rom is None:  # tasks for a ROM the user supplies go through gbxcule/Game-v0
                continue
            camel = "".join(w.capitalize() for w in name.split("_"))
            ids[f"gbxcule/{pack.capitalize()}-{camel}-v0"] = task.id
    return ids


def register_envs() -> list[str]:
    """Register gbxcule's Gymnasium ids (idempotent); returns them."""
    ids = {"gbxcule/Game-v0": None, **_pack_ids()}
    for env_id, task in ids.items():
        if env_id in gymnasium.registry:
            continue
        gymnasium.register(env_id, entry_point="gbxcule.rl.adapters.gym:GbxculeEnv",
                           vector_entry_point="gbxcule.rl.adapters.gym:GbxculeVectorEnv",
                           kwargs={} if task is None else {"task": task})
    return list(ids)


__all__ = ["ActionError", "GbxculeEnv", "GbxculeVectorEnv", "SHADE_SCALE", "register_envs"]
