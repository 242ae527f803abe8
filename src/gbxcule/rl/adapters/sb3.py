"""Stable-Baselines3 adapter: `GbxculeVecEnv`, SB3's own `VecEnv` over `GameEnv` (docs/adapters.md).

    from stable_baselines3 import PPO
    from gbxcule.rl.adapters.sb3 import GbxculeVecEnv
    env = GbxculeVecEnv(num_envs=64, task="leave_house", device="cuda")
    PPO("CnnPolicy", env).learn(100_000)

Observations are channel-first uint8 `[K, 72, 80]`, by default scaled from shades 0..3 to 0..255 on the device
(`scale=True`, space Box(0, 255)) because SB3's CnnPolicy divides images by 255 and accepts only 0..255
image spaces. One device-to-host copy a step; the arrays a step returns stay valid through the next step (two
host buffers in turn). Autoreset as SB3 expects: the obs of an env whose episode ended is the new episode's
first, `infos[i]["terminal_observation"]` its last, `infos[i]["TimeLimit.truncated"]` set on time-outs,
`infos[i]["episode"]` (`r`, `l`, `t`, as SB3's Monitor writes) and `infos[i]["is_success"]` (the task's RAM
goal) for SB3's logger. The N Game Boys are one `GameEnv`: `get_attr`/`env_method` reach that env and
return its answer once per index asked for.
"""

from __future__ import annotations

import time

import numpy as np
from gymnasium import spaces

from gbxcule.core.errors import GbxculeError
from gbxcule.rl.adapters.core import StepMirror, check_kwargs, make_game_env
from gbxcule.rl.adapters.gym import GREYS, obs_space

INSTALL_HINT = "the Stable-Baselines3 adapter needs stable-baselines3: pip install -e '.[rl,sb3]'"

try:
    from stable_baselines3.common.vec_env import VecEnv
except ImportError as exc:  # the optional extra: one line that names it
    if (exc.name or "").split(".")[0] != "stable_baselines3":
        raise
    raise GbxculeError(INSTALL_HINT) from exc

_OWN = ("device", "scale", "seed")


class GbxculeVecEnv(VecEnv):
    """`num_envs` Game Boys as an SB3 VecEnv; see the module docstring.

    Takes device, scale (default True), seed (start-state generation; SB3's `seed()` sets the episode seed
    of the next reset) and GameEnv's keyword arguments (rom, task, start_states, stack_k, obs, max_steps, ...).
    """

    def __init__(self, num_envs: int = 1, device: str = "cpu", scale: bool = True, seed: int = 0, **kwargs):
        check_kwargs(kwargs, "GbxculeVecEnv", _OWN)
        self.game = make_game_env(num_envs, device, seed, **kwargs)
        self.mirror = StepMirror(self.game, scale=scale, host_copies=2)
        super().__init__(self.game.num_envs, obs_space(self.game, scale), spaces.Discrete(self.game.num_actions))
        self.render_mode = None
        self._actions = None
        self._t0 = time.time()

    def reset(self):
        seed = self._seeds[0]
        self.game.reset(seed=seed)
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return self.mirror.reset_host()["obs"]

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self):
        if self._actions is None:
            raise RuntimeError("step_wait() without step_async()")
        actions, self._actions = self._actions, None
        self.game.step(actions)  # ValueError/TypeError on a wrong shape, dtype or range
        h = self.mirror.step_host()
        done = h["done"].copy()
        infos: list[dict] = [{} for _ in range(self.num_envs)]
        if done.any():
            idx = np.flatnonzero(done)
            final = self.mirror.final_obs_host(idx)
            t = round(time.time() - self._t0, 6)
            term, trunc, ret, length, ok = h["terminated"], h["truncated"], h["ep_return"], h["ep_length"], h["success"]
            for row, i in zip(final, idx, strict=True):
                infos[i] = {"terminal_observation": row, "TimeLimit.truncated": bool(trunc[i] and not term[i]),
                            "episode": {"r": float(ret[i]), "l": int(length[i]), "t": t}, "is_success": bool(ok[i])}
        return h["obs"], h["reward"].copy(), done, infos

    def episode_stats(self, clear: bool = True) -> dict:
        """GameEnv's totals since the last call (finished episodes, mean return, length, success rate)."""
        return self.game.episode_stats(clear)

    def close(self) -> None:
        self.game.close()

    def get_images(self):
        return [np.repeat(GREYS[f][..., None], 3, axis=-1) for f in self.game.frames()]

    # --- SB3's per-env attribute access: all N envs are one GameEnv ----------------------------------------
    def get_attr(self, attr_name: str, indices=None) -> list:
        value = None if attr_name == "render_mode" else getattr(self.game, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value, indices=None) -> None:
        if len(list(self._get_indices(indices))) != self.num_envs:
            raise ValueError("the N Game Boys are one GameEnv: set_attr applies to all envs or none")
        setattr(self.game, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list:
        result = getattr(self.game, method_name)(*method_args, **method_kwargs)
        return [result for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]
