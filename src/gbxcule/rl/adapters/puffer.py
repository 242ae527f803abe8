"""PufferLib 3 adapter: `GbxculePufferEnv`, a native `pufferlib.PufferEnv` over `GameEnv` (docs/adapters.md).

PufferLib is optional and published as an sdist only: install it with scripts/install_pufferlib.sh (or the
route in docs/adapters.md). The env writes each step into PufferLib's in-place buffers (`observations`,
`rewards`, `terminals`, `truncations`, `masks`): when PufferLib gives none, they are views of the adapter's
own host buffer (pinned on CUDA), filled with one device-to-host copy a step. Autoreset is SAME_STEP, as
PufferLib's native envs do. Every `report_interval` steps in which episodes ended, `infos` holds one dict of
their mean `episode_return`, `episode_length`, `success_rate` and count `episodes` (PufferLib logs the means).

    import pufferlib.vector
    from gbxcule.rl.adapters.puffer import GbxculePufferEnv
    vecenv = pufferlib.vector.make(GbxculePufferEnv, backend=pufferlib.vector.PufferEnv, num_envs=1,
                                   env_kwargs=dict(num_envs=4096, task="leave_house", device="cuda"))

PufferLib's native backend takes num_envs=1 (one PufferEnv that vectorises internally): the number of Game
Boys is the env's own `num_envs` keyword. Serial/Multiprocessing over several GameEnvs also work (then
PufferLib hands each its slice of shared buffers).
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from gbxcule.backends.pyboy_puffer_vec import import_pufferlib_vector
from gbxcule.rl.adapters.core import AdapterConfigError, StepMirror, check_kwargs, make_game_env
from gbxcule.rl.adapters.gym import obs_space

import_pufferlib_vector()  # a GbxculeError with the install route when pufferlib is missing
import pufferlib  # noqa: E402  (already imported, from a scratch directory, by the line above)

_OWN = ("device", "scale", "seed", "report_interval", "buf")


class PufferActionError(pufferlib.APIUsageError, ValueError):
    """Actions of the wrong shape, dtype or range."""


class GbxculePufferEnv(pufferlib.PufferEnv):
    """`num_envs` Game Boys as one native PufferEnv (num_agents = num_envs); see the module docstring.

    Takes device, scale (shades x85 to 0..255), seed (start-state generation and episode seed), report_interval
    and GameEnv's keyword arguments (rom, task, start_states, stack_k, obs, max_steps, reward, goal, ...)."""

    def __init__(self, num_envs: int = 1, device: str = "cpu", scale: bool = False, seed: int = 0,
                 report_interval: int = 32, buf=None, **kwargs):
        check_kwargs(kwargs, "GbxculePufferEnv", _OWN)
        if isinstance(report_interval, bool) or not isinstance(report_interval, int) or report_interval < 1:
            raise AdapterConfigError(f"report_interval must be an integer >= 1, got {report_interval!r}")
        self.game = make_game_env(num_envs, device, seed, **kwargs)
        self.num_agents = self.game.num_envs
        self.single_observation_space = obs_space(self.game, scale)
        self.single_action_space = spaces.Discrete(self.game.num_actions)
        self.render_mode = None
        self.report_interval = report_interval
        self.mirror = StepMirror(self.game, scale=scale, host_copies=1)
        self._own = buf is None
        if self._own:  # PufferLib's buffers are views of the mirror's host buffer: no copy after the D2H copy
            h = self.mirror.host_buffers(0)
            buf = {"observations": h["obs"], "rewards": h["reward"], "terminals": h["terminated"],
                   "truncations": h["truncated"], "masks": np.ones(self.num_agents, dtype=bool),
                   "actions": np.zeros(self.num_agents, dtype=np.int32)}
        super().__init__(buf)
        self._tick = 0
        self._log = np.zeros(4)  # episodes, return sum, length sum, successes

    def _publish(self, h: dict) -> None:
        if not self._own:
            self.observations[...] = h["obs"]
            self.rewards[...] = h["reward"]
            self.terminals[...] = h["terminated"]
            self.truncations[...] = h["truncated"]

    def reset(self, seed: int | None = None):
        """Restart every env (`seed`: one int for all; None keeps the last). Returns (observations, [])."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
            raise PufferActionError(f"seed must be one integer, got {seed!r}")
        self.game.reset(seed=seed)
        self._publish(self.mirror.reset_host())
        self._tick = 0
        self._log[:] = 0
        return self.observations, []

    def step(self, actions):
        """actions: int array [num_envs]. Returns (observations, rewards, terminals, truncations, infos)."""
        try:
            self.game.step(actions)
        except (ValueError, TypeError) as exc:
            raise PufferActionError(str(exc)) from None
        h = self.mirror.step_host()
        self._publish(h)
        infos = []
        done = h["done"]
        if done.any():
            self._log += (done.sum(), h["ep_return"][done].sum(), h["ep_length"][done].sum(), h["success"][done].sum())
        self._tick += 1
        if self._tick % self.report_interval == 0 and self._log[0]:
            eps = self._log[0]
            infos.append({"episode_return": float(self._log[1] / eps), "episode_length": float(self._log[2] / eps),
                          "success_rate": float(self._log[3] / eps), "episodes": int(eps)})
            self._log[:] = 0
        return self.observations, self.rewards, self.terminals, self.truncations, infos

    def episode_stats(self, clear: bool = True) -> dict:
        """GameEnv's totals since the last call (finished episodes, mean return, length, success rate)."""
        return self.game.episode_stats(clear)

    def close(self) -> None:
        self.game.close()
