"""What the Gymnasium, PufferLib and Stable-Baselines3 adapters share (docs/adapters.md).

`make_game_env` builds a `GameEnv` from the keyword arguments the adapters accept and turns a bad one into
`AdapterConfigError`. `StepMirror` keeps, per step, the observation (optionally scaled from shades 0..3 to
0..255), reward, terminated, truncated, the RAM-goal success flag and the finished episodes' return and
length in one flat staging buffer on the env's device; the host path copies that buffer to the host with a
single device-to-host copy into a preallocated (pinned, on CUDA) buffer, the torch path reads its views on
the device with no copy and no host synchronisation.
"""

from __future__ import annotations

import math

import numpy as np

from gbxcule.core.errors import GbxculeError

SHADE_SCALE = 85  # shades 0..3 -> 0, 85, 170, 255 with scale=True
# GameEnv keyword arguments an adapter passes through (the adapter owns num_envs, device, info_mode,
# keep_final_obs and seed).
GAME_KWARGS = ("rom", "task", "start_states", "stack_k", "obs", "obs_view", "frames_per_step", "release_after_frames",
               "codec", "max_steps", "reward", "goal", "backend_options", "life_ends")


class AdapterConfigError(GbxculeError, ValueError):
    """An adapter argument that cannot work (unknown keyword, bad count, task that does not fit the ROM)."""


def check_kwargs(kwargs: dict, where: str, extra: tuple[str, ...] = ()) -> None:
    """Raise TypeError naming unknown keyword arguments and the known ones."""
    unknown = sorted(set(kwargs) - set(GAME_KWARGS) - set(extra))
    if unknown:
        known = ", ".join(sorted((*GAME_KWARGS, *extra)))
        raise TypeError(f"{where} got unknown argument(s) {', '.join(unknown)}; known: {known}")


def make_game_env(num_envs, device: str, seed: int, **kwargs):
    """A `GameEnv` with the adapters' settings (no per-step info, final observations kept)."""
    from gbxcule.rl.env import GameEnv

    if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
        raise AdapterConfigError(f"num_envs must be an integer >= 1, got {num_envs!r}")
    try:
        return GameEnv(num_envs=int(num_envs), device=device, info_mode="none", keep_final_obs=True, seed=seed,
                       **kwargs)
    except GbxculeError as exc:
        if isinstance(exc, AdapterConfigError):
            raise
        raise AdapterConfigError(str(exc)) from None


class StepMirror:
    """Per-step outputs of a `GameEnv` in one flat buffer; see the module docstring.

    `host_copies` host buffers are used in turn (2 by default: the arrays a step returns stay valid through
    the next step, as SB3's rollout collection needs). `step_host`/`reset_host` return a dict of numpy views;
    `step_torch`/`reset_torch` a dict of device tensors (the same tensors every step)."""

    def __init__(self, env, scale: bool = False, host_copies: int = 2, host: bool = True):
        torch = env.torch
        self.env, self.torch, self.scale = env, torch, bool(scale)
        if self.scale and env.obs_mode != "pixels":
            raise AdapterConfigError("scale=True needs obs='pixels' (packed bytes are not shades)")
        n = env.num_envs
        self.obs_shape = (n, *env.single_obs_shape)
        ob = math.prod(self.obs_shape)
        self._layout = [("obs", torch.uint8, ob), ("reward", torch.float32, 4 * n), ("ep_return", torch.float32, 4 * n),
                        ("ep_length", torch.int32, 4 * n), ("terminated", torch.bool, n), ("truncated", torch.bool, n),
                        ("done", torch.bool, n), ("success", torch.bool, n)]
        total = sum(size for _, _, size in self._layout)
        dev = env.device
        self.cuda = dev != "cpu"
        self._stage = torch.zeros(total, dtype=torch.uint8, device=dev)
        self.dev = self._views(self._stage)
        self._hosts, self._host_views, self._host_np = [], [], []
        if host:
            for i in range(host_copies):
                buf = (torch.zeros(total, dtype=torch.uint8, pin_memory=True) if self.cuda
                       else (self._stage if i == 0 else torch.zeros(total, dtype=torch.uint8)))
                self._hosts.append(buf)
                self._host_views.append(self.dev if buf is self._stage else self._views(buf))
                self._host_np.append({k: v.numpy() for k, v in self._host_views[-1].items()})
        self._which = 0
        self._ret = torch.zeros(n, dtype=torch.float32, device=dev)
        self._len = torch.zeros(n, dtype=torch.int32, device=dev)
        self._final_scaled = (torch.zeros(self.obs_shape, dtype=torch.uint8, device=dev)
                              if self.scale else None)

    def _views(self, flat) -> dict:
        out, at = {}, 0
        for name, dtype, size in self._layout:
            v = flat[at:at + size].view(dtype)
            out[name] = v.view(self.obs_shape) if name == "obs" else v
            at += size
        return out

    def _fill(self, v: dict, stepped: bool, obs_copy: bool) -> None:
        torch, env = self.torch, self.env
        if obs_copy:
            if self.scale:
                torch.mul(env.obs, SHADE_SCALE, out=v["obs"])
            else:
                v["obs"].copy_(env.obs)
        if not stepped:
            for k in ("reward", "ep_return", "ep_length", "terminated", "truncated", "done", "success"):
                v[k].zero_()
            self._ret.zero_()
            self._len.zero_()
            return
        v["reward"].copy_(env.rewards)
        v["terminated"].copy_(env.terminated)
        v["truncated"].copy_(env.truncated)
        torch.logical_or(env.terminated, env.truncated, out=v["done"])
        v["success"].copy_(env.success)
        self._ret += env.rewards
        self._len += 1
        v["ep_return"].copy_(self._ret)
        v["ep_length"].copy_(self._len)
        self._ret.masked_fill_(v["done"], 0.0)
        self._len.masked_fill_(v["done"], 0)

    # --- host path: one device-to-host copy a step ------------------------------------------------------
    def _to_host(self, stepped: bool) -> dict:
        i = self._which
        self._which = (i + 1) % len(self._hosts)
        if self.cuda:
            self._fill(self.dev, stepped, True)
            self._hosts[i].copy_(self._stage)  # the one device-to-host copy (synchronises)
        else:
            self._fill(self._host_views[i], stepped, True)
        return self._host_np[i]

    def host_buffers(self, i: int = 0) -> dict:
        """The `i`-th host copy's numpy views (obs, reward, terminated, truncated, ...): what `step_host` returns
        when that copy's turn comes; an adapter may hand them on as its own buffers (no copy after the one
        device-to-host copy)."""
        return self._host_np[i]

    def reset_host(self) -> dict:
        return self._to_host(False)

    def step_host(self) -> dict:
        return self._to_host(True)

    def final_obs_host(self, idx: np.ndarray) -> np.ndarray:
        """Last observations (as delivered: scaled or not) of the envs `idx` whose episodes just ended."""
        torch = self.torch
        rows = self.env.final_obs[torch.as_tensor(idx, device=self.env.device)]
        if self.scale:
            rows = rows * SHADE_SCALE
        return rows.cpu().numpy()

    # --- torch path: device tensors, no copy to the host ---------------------------------------------------
    def reset_torch(self) -> dict:
        self._fill(self.dev, False, self.scale)
        return self._torch_out()

    def step_torch(self) -> dict:
        self._fill(self.dev, True, self.scale)
        return self._torch_out()

    def _torch_out(self) -> dict:
        out = dict(self.dev)
        if not self.scale:
            out["obs"] = self.env.obs
        return out

    def final_obs_torch(self):
        """Every env's last observation of the step (meaningful where `done`), on the device."""
        if self.scale:
            return self.torch.mul(self.env.final_obs, SHADE_SCALE, out=self._final_scaled)
        return self.env.final_obs
