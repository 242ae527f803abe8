"""`GameEnv`: N Game Boys as one torch-native vector env on the device (docs/rl_env.md).

`reset(seed) -> (obs, info)`, `step(actions) -> (obs, reward, terminated, truncated, info)` with Gymnasium's
meanings. Observations are uint8 tensors on the env's device, `[N, K, 72, 80]` shade indices 0..3 (or
`[N, K, 72, 20]`, 4 pixels a byte, with obs="packed"); the newest frame is `obs[:, -1]`. Rewards float32
`[N]`, terminated/truncated bool `[N]`. Autoreset is Gymnasium's SAME_STEP: an env whose episode ends is
restored from a start slot inside the same `step()`, and the obs it returns is the new episode's first.

What a step does, all on the device with no host synchronisation and no allocation outside torch's cache:
one emulator step (kernel launches), distances to the goal template and RAM goal tests (torch), the reward,
episode counters, and one masked restore launch for the envs that ended plus one launch that writes their
first frame into the frame ring. The returned tensors are the env's own buffers, overwritten by the next
step (clone what you keep), as in other GPU vector envs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import warnings
from pathlib import Path

import numpy as np

from gbxcule.core.action_codec import get_codec
from gbxcule.core.cartridge import Rom, load_rom
from gbxcule.core.errors import GbxculeError
from gbxcule.core.schedule import ActionSchedule
from gbxcule.core.schema import NUM_FIELDS
from gbxcule.rl.goals import (
    GoalError,
    GoalTemplate,
    NoveltyTable,
    RamGoal,
    RewardConfig,
    TemplateMeta,
    TemplateScorer,
    frame_key,
    ram_key,
    ram_rows,
    unpack_shades,
)
from gbxcule.rl.tasks import GENERATORS, StartSpec, Task, TaskError, load_task

OBS_MODES = ("pixels", "packed")
INFO_MODES = ("none", "stats", "full")
_STAT_NAMES = ("episodes", "return_sum", "length_sum", "success_sum", "truncated", "terminated", "steps",
               "template_fired", "template_fired_ok", "ram_goal_reached", "bad_actions")


_STATE_TENSORS = ("steps", "episodes", "ep_return", "ep_success", "success", "distance", "_dist_sum", "_prev_sum",
                  "_near", "final_return", "final_length", "final_success", "_stats", "rewards", "terminated",
                  "truncated", "_slot_stats")
_NEWER_STATE = ("_slot_stats",)  # absent from env states saved before it existed: zero then


class EnvConfigError(GbxculeError, ValueError):
    """A GameEnv argument that cannot work (bad count, unknown mode, task that does not fit the ROM)."""


def _devices(device: str) -> tuple[str, str]:
    """(torch device, warp device) names for "cpu", "cuda" or "cuda:N"."""
    d = str(device)
    if d == "cpu":
        return "cpu", "cpu"
    if d == "cuda" or d.startswith("cuda:"):
        idx = d.split(":")[1] if ":" in d else "0"
        return f"cuda:{idx}", f"cuda:{idx}"
    raise EnvConfigError(f"device must be cpu, cuda or cuda:N, got {device!r}")


def _slot_hash(torch, seed: int, env_ids, episodes, k: int):
    """A start slot per env: a 32-bit hash of (seed, env, episode number) modulo K (int64 math, no overflow)."""
    m = 0xFFFFFFFF
    h = ((((seed & m) * 0x9E3779B1) & m) + env_ids * 0x85EBCA77 + (episodes & m) * 0xC2B2AE3D) & m
    h = h ^ (h >> 16)
    h = (h * 0x7FEB352D) & m
    h = h ^ (h >> 15)
    h = (h * 0x846CA68B) & m
    h = h ^ (h >> 16)
    return torch.remainder(h, k)


class GameEnv:
    """A vector env of `num_envs` Game Boys running `rom` (a file, a built-in ROM's name, or the task's ROM).

    task: a task name ("leave_house"), "pack.toml:name", or a `Task`; it sets the ROM check, codec, schedule,
        start states, goals, step limit and reward knobs (each may be overridden here).
    start_states: overrides the task's start: a state file or folder, a list of them, (GENERATOR, K) or
        (GENERATOR, K, max_len) with GENERATOR "random_noops", "random_actions" or "solution" (tasks.StartSpec),
        or "power_on".
    goal: a goal template (a path or a `GoalTemplate`) that overrides the task's.
    reward: a dict or `RewardConfig` of reward knobs over the task's (see `RewardConfig`).
    info_mode: "none" (empty dict), "stats" (device scalars) or "full" (also per-env tensors).
    keep_final_obs: put the finished episodes' last observation in info["final_obs"] (a copy each step).
    memory_reserve: a `core.memory.Need` the caller will allocate beside the env (a trainer's storage); with the
        env's own need it is checked against the memory available before anything is allocated.
    """

    def __init__(self, rom: str | Path | Rom | None = None, num_envs: int = 1, device: str = "cpu",
                 task: str | Task | None = None, start_states=None, stack_k: int = 1, obs: str = "pixels",
                 frames_per_step: int | None = None, release_after_frames: int | None = None,
                 codec: str | None = None, max_steps: int | None = None, reward: dict | RewardConfig | None = None,
                 goal: str | Path | GoalTemplate | None = None, info_mode: str = "stats", seed: int = 0,
                 keep_final_obs: bool = False, obs_view: str = "stride", backend_options: dict | None = None,
                 memory_reserve=None):
        import torch

        self.torch = torch
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
            raise EnvConfigError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        if isinstance(stack_k, bool) or not isinstance(stack_k, int | np.integer) or stack_k < 1:
            raise EnvConfigError(f"stack_k must be an integer >= 1, got {stack_k!r}")
        if obs not in OBS_MODES:
            raise EnvConfigError(f"obs must be one of {', '.join(OBS_MODES)}, got {obs!r}")
        if info_mode not in INFO_MODES:
            raise EnvConfigError(f"info_mode must be one of {', '.join(INFO_MODES)}, got {info_mode!r}")
        self.num_envs, self.stack_k, self.obs_mode, self.info_mode = int(num_envs), int(stack_k), obs, info_mode
        self.keep_final_obs, self.seed = bool(keep_final_obs), int(seed)
        self.device, self.wp_device = _devices(device)
        self.task = None if task is None else load_task(task)
        t = self.task
        self.codec = get_codec(self._pick("codec", codec, t and t.codec, "pokemonred_puffer_v1"))
        self.schedule = ActionSchedule(self._pick("frames_per_step", frames_per_step, t and t.frames_per_step, 24),
                                       self._pick("release_after_frames", release_after_frames,
                                                  t and t.release_after_frames, 8))
        self.rom = self._resolve_rom(rom)
        self.max_steps = int(max_steps if max_steps is not None else (t.step_limit if t else 10**9))
        if self.max_steps < 1:
            raise EnvConfigError(f"max_steps must be >= 1, got {self.max_steps}")
        if isinstance(reward, RewardConfig):
            self.reward_cfg = reward
        else:
            try:
                self.reward_cfg = t.reward_config(reward) if t else RewardConfig.from_dict(reward)
            except GoalError as exc:
                raise EnvConfigError(str(exc)) from None
        self.single_obs_shape = (self.stack_k, 72, 80 if obs == "pixels" else 20)
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise GbxculeError("GameEnv on cuda needs an NVIDIA GPU that torch can use; none was found")

        self._check_memory(start_states, memory_reserve)
        from gbxcule.backends.warp_vec import WarpVecBackend

        opts = dict(backend_options or {})
        self.backend = WarpVecBackend(self.rom, self.num_envs, self.codec, self.schedule, device=self.wp_device,
                                      stage="obs_only", obs_mode=obs_view, obs_packed=(obs == "packed"), **opts)
        import warp as wp

        self._wp = wp
        if self.device.startswith("cuda"):  # Warp launches on torch's stream: no cross-stream races
            wp.set_stream(wp.stream_from_torch(torch.device(self.device)), device=self.wp_device)
        self._build_buffers()
        self._setup_goals(goal)
        self._build_starts(start_states)
        self._reset_all(self.seed)

    # --- construction -------------------------------------------------------------------------------------
    def _pick(self, what: str, given, from_task, default):
        if given is not None and from_task is not None and given != from_task:
            raise EnvConfigError(f"task {self.task.id} is defined with {what}={from_task!r}, not {given!r}")
        return given if given is not None else (from_task if from_task is not None else default)

    def _resolve_rom(self, rom) -> Rom:
        t = self.task
        if rom is None:
            if t is None or t.rom is None:
                raise EnvConfigError("give a ROM (a file or a built-in ROM's name)" +
                                     (f": task {t.id} names no built-in ROM" if t else ""))
            rom = t.rom
        if not isinstance(rom, Rom):
            from gbxcule.roms import resolve_rom

            rom = load_rom(resolve_rom(str(rom)))
        want = None
        if t is not None:
            if t.rom_sha1:
                want = t.rom_sha1
            elif t.rom:
                import hashlib

                from gbxcule.roms import build_rom, get_spec

                want = hashlib.sha1(build_rom(get_spec(t.rom).name)).hexdigest()
        for note in getattr(rom, "warnings", ()):  # malformed but runnable dumps (docs/hardware.md)
            warnings.warn(f"ROM {rom.path}: {note}", stacklevel=3)
        if want and rom.info.sha1 != want:
            raise TaskError(f"task {t.id} is for the ROM with SHA-1 {want}, not {rom.info.sha1} ({rom.path})")
        return rom

    def _check_memory(self, start_states, reserve) -> None:
        """Refuse (one line) before anything is allocated unless the emulators, the env's buffers, its start
        slots (the files given count one slot each) and `reserve` fit (core/memory.py)."""
        from gbxcule.backends import check_memory, emulator_need
        from gbxcule.core.cartridge import cart_config
        from gbxcule.core.memory import Need, env_bytes, slot_bytes
        from gbxcule.core.schema import ram_layout

        spec = self._start_spec(start_states)
        slots = spec.count if spec.generator else max(1, len(spec.states))
        ram = ram_layout(cart_config(self.rom).ram_banks * 0x2000).total
        cfg = self.reward_cfg
        tables = int(bool(cfg.novelty_ram)) + int(bool(cfg.novelty_pixels))
        need = (emulator_need("warp_vec_cuda" if self.device.startswith("cuda") else "warp_vec_cpu", self.rom, True,
                              self.obs_mode, False, self.num_envs)
                + Need.device("env buffers", env_bytes(self.obs_mode, self.stack_k, self.keep_final_obs, tables,
                                                       cfg.novelty_size), slot_bytes(slots, ram, self.obs_mode)))
        check_memory(self.num_envs, need if reserve is None else need + reserve, self.device)

    def _build_buffers(self) -> None:
        torch, wp, n, k = self.torch, self._wp, self.num_envs, self.stack_k
        dev = self.device
        self._latest = wp.to_torch(self.backend.obs)  # [N, 72, W], written by the backend's obs pass
        w = self._latest.shape[-1]
        if k == 1:  # the obs pass writes straight into the one slot
            self._ring = self._latest.view(n, 1, 72, w)
        else:  # each frame goes to positions p and p + K, so obs is always the contiguous window p+1..p+K
            self._ring = torch.zeros(n, 2 * k, 72, w, dtype=torch.uint8, device=dev)
        self._ring_wp = wp.from_torch(self._ring)
        self._pos = 0
        self._env_ids = torch.arange(n, dtype=torch.int64, device=dev)
        self._act32 = torch.zeros(n, dtype=torch.int32, device=dev)
        self._act_wp = wp.from_torch(self._act32)
        self._ram = wp.to_torch(self.backend.ram).t()  # [bytes, N] (a view of the env-major [N, bytes])
        self.rewards = torch.zeros(n, dtype=torch.float32, device=dev)
        self.terminated = torch.zeros(n, dtype=torch.bool, device=dev)
        self.truncated = torch.zeros(n, dtype=torch.bool, device=dev)
        self._done = torch.zeros(n, dtype=torch.bool, device=dev)
        self._done_wp = wp.from_torch(self._done)
        self._slots = torch.zeros(n, dtype=torch.int32, device=dev)
        self._slots_wp = wp.from_torch(self._slots)
        self.steps = torch.zeros(n, dtype=torch.int32, device=dev)
        self.episodes = torch.zeros(n, dtype=torch.int64, device=dev)
        self.ep_return = torch.zeros(n, dtype=torch.float32, device=dev)
        self.ep_success = torch.zeros(n, dtype=torch.bool, device=dev)
        self.success = torch.zeros(n, dtype=torch.bool, device=dev)
        self.distance = torch.zeros(n, dtype=torch.float32, device=dev)
        self._dist_sum = torch.zeros(n, dtype=torch.int32, device=dev)
        self._prev_sum = torch.zeros(n, dtype=torch.int32, device=dev)
        self.final_return = torch.zeros(n, dtype=torch.float32, device=dev)
        self.final_length = torch.zeros(n, dtype=torch.int32, device=dev)
        self.final_success = torch.zeros(n, dtype=torch.bool, device=dev)
        self._near = torch.zeros(n, dtype=torch.int32, device=dev)
        self._fired = torch.zeros(n, dtype=torch.bool, device=dev)  # the template's test (k steps under tau)
        self._stats = torch.zeros(len(_STAT_NAMES), dtype=torch.float64, device=dev)
        self._stat_vals = torch.zeros(len(_STAT_NAMES) - 1, dtype=torch.float64, device=dev)
        self._bad_idx = _STAT_NAMES.index("bad_actions")
        self._n_const = torch.tensor(float(n), dtype=torch.float64, device=dev)
        self._info_vals = torch.zeros(8, dtype=torch.float32, device=dev)
        self._full = {name: torch.zeros(n, dtype=dt, device=dev) for name, dt in
                      (("distance", torch.float32), ("success", torch.bool), ("steps", torch.int32),
                       ("episode_returns", torch.float32), ("done", torch.bool), ("terminated", torch.bool),
                       ("truncated", torch.bool))}
        self._quantiles = torch.tensor([int(q * (n - 1) + 0.5) for q in (0.1, 0.5, 0.9)], dtype=torch.int64,
                                       device=dev)
        self.final_obs = (torch.zeros(n, *self.single_obs_shape, dtype=torch.uint8, device=dev)
                          if self.keep_final_obs else None)

    def template_meta(self, task: str = "") -> TemplateMeta:
        """The config a goal template must have been captured under to fit this env."""
        return TemplateMeta(self.rom.info.sha1, self.codec.name, self.codec.version, self.schedule.frames_per_step,
                            self.schedule.release_after_frames, self.stack_k, self.obs_mode, task)

    def _setup_goals(self, goal) -> None:
        torch, t, cfg = self.torch, self.task, self.reward_cfg
        self.template = None
        if goal is not None:
            self.template = goal if isinstance(goal, GoalTemplate) else GoalTemplate.load(goal)
        elif t is not None and t.template is not None:
            self.template = task_template(t, self.template_meta(t.name), self.device)
        if self.template is not None:
            self.template.check_fits(self.template_meta())
        self.scorer = None if self.template is None else TemplateScorer(self.template, self.obs_mode, self.device)
        tau = cfg.tau if cfg.tau is not None else (self.template.meta.tau if self.template else None)
        self.tau = 0.1 if tau is None else float(tau)
        if self.scorer is not None:  # integer threshold and one float32 multiply: the same bits on every device
            self._tau_sum = self.scorer.threshold(self.tau)
            self._shaping = float(cfg.alpha) * self.scorer.scale
        self.ram_goal = RamGoal(t.goal_ram, self.backend.layout, self.device) if t and t.goal_ram else None
        mode = cfg.terminate_on
        if mode == "auto":
            mode = "template" if self.scorer is not None else ("ram" if self.ram_goal is not None else "none")
        if mode == "template" and self.scorer is None:
            raise EnvConfigError("terminate_on='template' needs a goal template")
        if mode == "ram" and self.ram_goal is None:
            raise EnvConfigError("terminate_on='ram' needs a task with goal_ram conditions")
        self.terminate_on = mode
        self._nov_ram = self._nov_px = None
        if cfg.novelty_ram:
            if not (t and t.novelty_ram):
                raise EnvConfigError("novelty_ram reward needs a task that names novelty_ram bytes")
            self._nov_rows = torch.tensor(ram_rows(t.novelty_ram, self.backend.layout), dtype=torch.int64,
                                          device=self.device)
            self._nov_ram = NoveltyTable(self.num_envs, cfg.novelty_size, self.device)
        if cfg.novelty_pixels:
            self._nov_px = NoveltyTable(self.num_envs, cfg.novelty_size, self.device)

    def _build_starts(self, start_states) -> None:
        """Fill the device reset cache: K start slots and each slot's first frame (docs/rl_env.md)."""
        spec = self._start_spec(start_states)
        from gbxcule.kernels.snapshot import SlotStore

        be, n = self.backend, self.num_envs
        base_states = self._load_start_files(spec.states) if spec.states else None
        k = spec.count if spec.generator else (len(base_states) if base_states else 1)
        store = SlotStore(k, NUM_FIELDS, be.layout.total, self.wp_device)
        slot_obs = np.zeros((k, 72, self._latest.shape[-1]), dtype=np.uint8)
        slot_screen = np.zeros((k, 144, 160), dtype=np.uint8)
        rng = np.random.default_rng([self.seed, 0x5EED])
        for first in range(0, k, n):
            count = min(n, k - first)
            be.reset()
            if base_states:
                be.put_states([base_states[(first + j) % len(base_states)] for j in range(count)],
                              envs=range(count))
            for a in spec.script:
                be.step(np.full(n, a, dtype=np.int32))
            be.step(np.zeros(n, dtype=np.int32))  # one NOOP step: every slot starts with a drawn frame
            if not spec.generator:
                self._save_slots(store, range(count), first, slot_obs, slot_screen)
                continue
            lengths = rng.integers(0, spec.max_len + 1, size=n)  # env j is saved after lengths[j] extra steps
            if spec.generator == "random_noops":
                extra = np.zeros((spec.max_len, n), dtype=np.int32)
            else:
                extra = rng.integers(0, self.codec.num_actions, size=(spec.max_len, n)).astype(np.int32)
            # demonstration starts: slot i first replays the first i/k of the solution (p[j] steps)
            p = ((np.arange(first, first + n) * len(spec.prefix)) // k if spec.generator == "solution"
                 else np.zeros(n, dtype=np.int64))
            span = int(p[:count].max()) + spec.max_len
            plan = np.zeros((span, n), dtype=np.int32)
            for j in range(count):
                plan[:p[j], j] = spec.prefix[:p[j]]
                plan[p[j]:p[j] + spec.max_len, j] = extra[:, j]
            for s in range(span + 1):
                self._save_slots(store, [j for j in range(count) if p[j] + lengths[j] == s], first, slot_obs,
                                 slot_screen)
                if s < span and (p[:count] + lengths[:count] > s).any():
                    be.step(plan[s])
        be.slots = store
        import hashlib

        f, r = store.fields.numpy(), store.ram.numpy()  # the reset cache's identity, for load_state_dict
        self._slots_sha1 = hashlib.sha1(f.tobytes() + r.tobytes() + slot_obs.tobytes()).hexdigest()
        self.num_slots = k
        self.slot_obs = self.torch.tensor(slot_obs, device=self.device)
        self._slot_obs_wp = self._wp.from_torch(self.slot_obs)
        self._slot_screen = self._wp.array(slot_screen, dtype=self._wp.uint8, device=self.wp_device)
        self.slot_sum = (self.scorer.distance_sum(self.slot_obs) if self.scorer is not None
                         else self.torch.zeros(k, dtype=self.torch.int32, device=self.device))
        # finished episodes and successes per start slot since the last episode_stats() (a demonstration
        # start's slot i replays i/K of the solution: how far back success has spread)
        self._slot_stats = self.torch.zeros((k, 2), dtype=self.torch.float64, device=self.device)
        self._slot_pair = self.torch.zeros((self.num_envs, 2), dtype=self.torch.float64, device=self.device)

    def _save_slots(self, store, envs, first: int, slot_obs, slot_screen) -> None:
        """Copy backend envs `envs` into slots first + j, with their observation and screen."""
        envs = list(envs)
        if not envs:
            return
        be = self.backend
        latest, screens = self._latest.cpu().numpy(), be.frame_buffer().numpy()
        for j in envs:
            store.save(be.fields, be.ram, self.num_envs, j, first + j)
            slot_obs[first + j], slot_screen[first + j] = latest[j], screens[j]

    def _start_spec(self, start_states) -> StartSpec:
        t = self.task
        if start_states is None:
            return t.start if t is not None else StartSpec()
        if start_states == "power_on":
            return StartSpec()
        script = t.start.script if t is not None else ()
        if isinstance(start_states, tuple | list) and start_states and start_states[0] in GENERATORS:
            if len(start_states) not in (2, 3):
                raise EnvConfigError(f"start_states=({start_states[0]!r}, K[, max_len])")
            base = t.start if t is not None else StartSpec()
            prefix = (t.solution or ()) if t is not None and start_states[0] == "solution" else ()
            try:
                return StartSpec(script, base.states, start_states[0], int(start_states[1]),
                                 int(start_states[2]) if len(start_states) == 3 else 8, prefix)
            except TaskError as exc:
                raise EnvConfigError(str(exc)) from None
        if isinstance(start_states, str | Path):
            start_states = [start_states]
        if isinstance(start_states, list | tuple) and start_states:
            return StartSpec((), tuple(str(p) for p in start_states))
        raise EnvConfigError(f"start_states must be a path, a list of paths, (GENERATOR, K[, max_len]) or "
                             f"'power_on', got {start_states!r}")

    def _load_start_files(self, paths) -> list:
        from gbxcule.backends.warp_vec import load_env_states

        base = Path(self.task.base_dir) if self.task is not None else Path(".")
        files: list[Path] = []
        for p in paths:
            q = Path(p)
            if not q.is_absolute() and not q.exists() and (base / q).exists():
                q = base / q
            if q.is_dir():
                found = sorted(f for f in q.iterdir() if f.is_file() and not f.name.startswith("."))
                if not found:
                    raise EnvConfigError(f"start-state folder {q} holds no state files")
                files += found
            elif q.is_file():
                files.append(q)
            else:
                raise EnvConfigError(f"start state not found: {q}")
        states = []
        for f in files:
            try:
                states += load_env_states(f, self.rom)
            except GbxculeError as exc:
                raise EnvConfigError(f"start state {f}: {exc}") from None
        return states

    # --- reset and step -----------------------------------------------------------------------------------
    def reset(self, seed: int | None = None):
        """Restore every env from a start slot (chosen by the seeded rule) and return (obs, info)."""
        self._raise_bad_actions()
        if seed is not None:
            self.seed = int(seed)
            self.episodes.zero_()  # a seeded reset starts the slot sequence over; a plain one continues it
        else:
            self.episodes += 1
        self._reset_all(self.seed)
        return self.obs, self._info(first=True)

    def _reset_all(self, seed: int) -> None:
        torch = self.torch
        self._done.fill_(True)
        self._restore_done(seed)
        for buf in (self.steps, self.ep_return, self.ep_success, self.success, self._near, self.rewards,
                    self.terminated, self.truncated, self._stats, self._slot_stats):
            buf.zero_()
        self._dist_sum.copy_(self._prev_sum)
        if self.scorer is not None:
            self.distance.copy_(self._dist_sum.to(torch.float32) * self.scorer.scale)
        for table in (self._nov_ram, self._nov_px):
            if table is not None:
                table.seen.zero_()
        self._done.zero_()
        del torch

    def _restore_done(self, seed: int) -> None:
        """Envs flagged in `_done`: restore from their slot, write their first frame into the whole ring."""
        torch = self.torch
        slots = _slot_hash(torch, seed, self._env_ids, self.episodes, self.num_slots)
        self._slots.copy_(slots)
        self.backend.restore(self._done_wp, self._slots_wp)
        from gbxcule.kernels.ring import ring_reset_kernel

        self._wp.launch(ring_reset_kernel, dim=(self.num_envs, 72), device=self.wp_device,
                        inputs=[self._done_wp, self._slots_wp, self._slot_obs_wp, self._ring_wp, self._slot_screen,
                                self.backend.frame_buffer()])
        self._prev_sum.copy_(torch.where(self._done, self.slot_sum[self._slots.long()], self._prev_sum))

    @property
    def obs(self):
        """The current observations, uint8 [N, K, 72, W] (a view of the frame ring; oldest frame first)."""
        k = self.stack_k
        if k == 1:
            return self._ring
        p = self._pos
        return self._ring[:, p + 1:p + 1 + k]

    def _actions(self, actions):
        torch = self.torch
        n, a_max = self.num_envs, self.codec.num_actions
        if isinstance(actions, torch.Tensor):
            if actions.shape != (n,):
                raise ValueError(f"actions must have shape ({n},), got {tuple(actions.shape)}")
            if actions.dtype not in (torch.int32, torch.int64, torch.int16, torch.uint8, torch.int8):
                raise TypeError(f"actions must be an integer tensor, got {actions.dtype}")
            if actions.device != self._act32.device:
                if actions.device.type != "cpu":
                    raise ValueError(f"actions are on {actions.device}, the env is on {self.device}")
                self.codec.check_array(actions.numpy())
            else:  # flagged on the device, reported at the next point that synchronises anyway
                bad = ((actions < 0) | (actions >= a_max)).sum()
                self._stats[self._bad_idx:].add_(bad)
            self._act32.copy_(actions)
        else:
            arr = np.asarray(actions)
            if arr.shape != (n,):
                raise ValueError(f"actions must have shape ({n},), got {arr.shape}")
            self._act32.copy_(torch.from_numpy(self.codec.check_array(arr)))
        return self._act_wp

    def _raise_bad_actions(self) -> None:
        bad = int(self._stats[self._bad_idx].item())
        if bad:
            self._stats[self._bad_idx] = 0
            raise ValueError(f"{bad} out-of-range action(s) since the last check (codec {self.codec.name} has "
                             f"{self.codec.num_actions} actions); they ran as action 0")

    def step(self, actions):
        """Advance every env one step; see the module docstring."""
        torch, cfg = self.torch, self.reward_cfg
        self.backend.step(self._actions(actions))
        latest = self._latest
        self.steps += 1
        reward = self.rewards.fill_(cfg.step_cost)
        if self.scorer is not None:
            self._dist_sum.copy_(self.scorer.distance_sum(latest))
            self.distance.copy_(self._dist_sum.to(torch.float32) * self.scorer.scale)
            reward += (self._prev_sum - self._dist_sum).to(torch.float32) * self._shaping
            self._prev_sum.copy_(self._dist_sum)
            self._near.copy_(torch.where(self._dist_sum < self._tau_sum, self._near + 1, 0))
            torch.ge(self._near, cfg.k_consecutive, out=self._fired)
        if self.ram_goal is not None:
            self.success.copy_(self.ram_goal.evaluate(self._ram))
        if self.terminate_on == "template":
            self.terminated.copy_(self._fired)
        elif self.terminate_on == "ram":
            self.terminated.copy_(self.success)
        torch.logical_and(self.steps >= self.max_steps, ~self.terminated, out=self.truncated)
        reward.add_(self.terminated, alpha=cfg.goal_bonus)
        if self._nov_ram is not None:
            reward.add_(self._nov_ram.visit(ram_key(self._ram, self._nov_rows)), alpha=cfg.novelty_ram)
        if self._nov_px is not None:
            reward.add_(self._nov_px.visit(frame_key(latest)), alpha=cfg.novelty_pixels)
        self.ep_return += reward
        self.ep_success |= self.success
        torch.logical_or(self.terminated, self.truncated, out=self._done)
        self._accumulate()
        if self.stack_k > 1:
            self._pos = (self._pos + 1) % self.stack_k
            self._ring[:, self._pos].copy_(latest)
            self._ring[:, self._pos + self.stack_k].copy_(latest)
        if self.final_obs is not None:
            self.final_obs.copy_(self.obs)
        torch.where(self._done, self.ep_return, self.final_return, out=self.final_return)
        torch.where(self._done, self.steps, self.final_length, out=self.final_length)
        torch.where(self._done, self.ep_success, self.final_success, out=self.final_success)
        info = self._info()
        self.episodes += self._done
        self._restore_done(self.seed)
        keep = ~self._done
        self.steps *= keep
        self._near *= keep
        self.ep_return *= keep
        self.ep_success &= keep
        for table in (self._nov_ram, self._nov_px):
            if table is not None:
                table.clear(self._done)
        return self.obs, self.rewards, self.terminated, self.truncated, info

    def _accumulate(self) -> None:
        """Add this step's totals to the device stats (one stack, one add; `_STAT_NAMES` order)."""
        torch, d, v = self.torch, self._done, self._stat_vals
        fired = self._fired
        vals = (d.sum(), (self.ep_return * d).sum(), (self.steps * d).sum(), (self.ep_success & d).sum(),
                self.truncated.sum(), self.terminated.sum(), self._n_const, fired.sum(), (fired & self.success).sum(),
                self.success.sum())
        torch.stack([x.to(torch.float64) for x in vals], out=v)
        self._stats[:len(vals)] += v
        if self.num_slots > 1:  # `_slots` still holds the slot each ending episode started from
            pair = self._slot_pair
            pair[:, 0].copy_(d)
            pair[:, 1].copy_(d).mul_(self.ep_success)  # in place: no temporary per step
            self._slot_stats.index_add_(0, self._slots, pair)

    def _info(self, first: bool = False) -> dict:
        """info per `info_mode`. Values are device tensors in buffers the env owns and overwrites on the next
        step; "stats": scalars over this step's envs; "full": also per-env [N] tensors (before autoreset)."""
        out = {} if self.info_mode == "none" else self._stats_info()
        if self.info_mode == "full":
            full = self._full
            for name, src in (("distance", self.distance), ("success", self.success), ("steps", self.steps),
                              ("episode_returns", self.ep_return), ("done", self._done),
                              ("terminated", self.terminated), ("truncated", self.truncated)):
                full[name].copy_(src)
            out.update(full)
        if self.final_obs is not None and not first:
            out["final_obs"] = self.final_obs
        return out

    def _stats_info(self) -> dict:
        torch, d, v = self.torch, self._done, self._info_vals
        count = d.sum()
        denom = count.clamp(min=1).to(torch.float32)
        vals = [count.to(torch.float32), count.to(torch.float32) / self.num_envs,
                self.truncated.sum().to(torch.float32) / self.num_envs, (self.ep_return * d).sum() / denom,
                (self.steps * d).sum().to(torch.float32) / denom,
                (self.ep_success & d).sum().to(torch.float32) / denom]
        torch.stack(vals, out=v[:6])
        info = {"episodes_done": v[0], "done_rate": v[1], "trunc_rate": v[2], "reset_rate": v[1],
                "episode_return": v[3], "episode_length": v[4], "success_rate": v[5]}
        if self.scorer is not None:
            # nearest-rank percentiles through a sort (torch.quantile checks q on the host: a sync on CUDA)
            q = torch.sort(self.distance).values.index_select(0, self._quantiles)
            info.update(dist_p10=q[0], dist_p50=q[1], dist_p90=q[2])
        return info

    # --- reading stats (synchronises; once per update) ----------------------------------------------------
    def episode_stats(self, clear: bool = True) -> dict[str, float]:
        """Totals since the last call: finished episodes, their mean return, length and success rate, and
        rates per env-step; with several start slots also `slot_episodes` and `slot_successes` (lists, one
        entry per slot, by the slot each episode started from). Reads the device once. Raises ValueError if
        out-of-range actions were seen."""
        self._raise_bad_actions()
        s = dict(zip(_STAT_NAMES, self._stats.tolist(), strict=True))
        per_slot = {}
        if self.num_slots > 1:
            eps_k, ok_k = self._slot_stats.T.tolist()
            per_slot = {"slot_episodes": [int(x) for x in eps_k], "slot_successes": [int(x) for x in ok_k]}
        if clear:
            self._stats.zero_()
            self._slot_stats.zero_()
        eps, steps = s["episodes"], max(s["steps"], 1.0)
        return {**per_slot, "episodes": int(eps), "env_steps": int(s["steps"]),
                "episode_return": s["return_sum"] / eps if eps else float("nan"),
                "episode_length": s["length_sum"] / eps if eps else float("nan"),
                "success_rate": s["success_sum"] / eps if eps else float("nan"),
                "done_rate": eps / steps, "trunc_rate": s["truncated"] / steps, "term_rate": s["terminated"] / steps,
                "template_fired": int(s["template_fired"]),
                "template_precision": (s["template_fired_ok"] / s["template_fired"]) if s["template_fired"]
                else float("nan")}

    # --- state for checkpoints ------------------------------------------------------------------------------
    def _field_rows(self):
        """The backend's fields as a [NUM_FIELDS, num_envs] torch view (stored env-major: core/schema.py)."""
        return self._wp.to_torch(self.backend.fields).view(self.num_envs, NUM_FIELDS).t()

    def state_dict(self, emulator: bool = True) -> dict:
        """Everything needed to continue bit for bit: counters, frame ring, novelty tables and (with
        `emulator`) every env's emulator state and frame buffer. Host tensors."""
        d = {"pos": self._pos, "seed": self.seed, "slots_sha1": self._slots_sha1}
        for name in _STATE_TENSORS:
            d[name] = getattr(self, name).detach().cpu().clone()
        d["ring"] = self._ring.cpu().clone()
        for name in ("_nov_ram", "_nov_px"):
            table = getattr(self, name)
            if table is not None:
                d[name] = table.seen.cpu().clone()
        if emulator:
            be, wp = self.backend, self._wp
            # fields field-major, as checkpoints always held them
            d["emu"] = {"fields": self._field_rows().reshape(-1).cpu().clone(), "ram": self._ram.cpu().clone(),
                        "serial": wp.to_torch(be.serial).cpu().clone(),
                        "frame": wp.to_torch(be.frame_buffer()).cpu().clone()}
        return d

    def load_state_dict(self, d: dict) -> None:
        if d.get("slots_sha1") != self._slots_sha1:
            raise EnvConfigError("this env state was saved with other start states (the reset cache differs)")
        if tuple(d["ring"].shape) != tuple(self._ring.shape):
            raise EnvConfigError(f"env state is for observations {tuple(d['ring'].shape)}, this env has "
                                 f"{tuple(self._ring.shape)}")
        if "emu" in d and tuple(d["emu"]["fields"].shape) != (NUM_FIELDS * self.num_envs,):
            raise EnvConfigError(f"env state holds {d['emu']['fields'].numel()} field words, this env needs "
                                 f"{NUM_FIELDS * self.num_envs} ({self.num_envs} envs)")
        self._pos, self.seed = int(d["pos"]), int(d["seed"])
        for name in _STATE_TENSORS:
            if name in d or name not in _NEWER_STATE:
                getattr(self, name).copy_(d[name])
            else:
                getattr(self, name).zero_()
        self._ring.copy_(d["ring"])
        for name in ("_nov_ram", "_nov_px"):
            table = getattr(self, name)
            if table is not None and name in d:
                table.seen.copy_(d[name])
        if "emu" in d:
            be, wp, e = self.backend, self._wp, d["emu"]
            self._field_rows().copy_(e["fields"].view(NUM_FIELDS, self.num_envs))
            self._ram.copy_(e["ram"])
            wp.to_torch(be.serial).copy_(e["serial"])
            wp.to_torch(be.frame_buffer()).copy_(e["frame"])
        else:
            warnings.warn("env state without emulator state: every env restarts from a start slot", stacklevel=2)
            self._done.fill_(True)
            self._restore_done(self.seed)
            self._done.zero_()

    def emulator_bytes(self) -> int:
        """Bytes of emulator state a checkpoint with `emulator=True` stores."""
        from gbxcule.core.schema import SERIAL_CAPTURE

        return self.num_envs * (4 * NUM_FIELDS + self.backend.layout.total + SERIAL_CAPTURE + 144 * 160)

    # --- odds and ends ------------------------------------------------------------------------------------
    @property
    def num_actions(self) -> int:
        return self.codec.num_actions

    def frames(self, envs=None) -> np.ndarray:
        """The full-size screens behind the current observations (uint8 [len(envs), 144, 160] shades 0..3)
        on the host (synchronises): an env that was just reset shows its start slot's screen, like its obs."""
        full = self._wp.to_torch(self.backend.frame_buffer())
        if envs is None:
            return full.cpu().numpy().copy()
        ids = [int(e) for e in envs]
        bad = [e for e in ids if not 0 <= e < self.num_envs]
        if bad:
            raise IndexError(f"env {bad[0]} out of range for {self.num_envs} envs")
        return full[self.torch.tensor(ids, dtype=self.torch.int64, device=full.device)].cpu().numpy()

    def close(self) -> None:
        self.backend.close()

    def describe(self) -> dict:
        return {"rom_sha1": self.rom.info.sha1, "rom_title": self.rom.info.title,
                "task": None if self.task is None else self.task.id, "num_envs": self.num_envs,
                "device": self.device, "stack_k": self.stack_k, "obs": self.obs_mode,
                "codec": self.codec.describe(), "schedule": self.schedule.describe(), "max_steps": self.max_steps,
                "start_slots": self.num_slots, "terminate_on": self.terminate_on, "tau": self.tau,
                "reward": {k: v for k, v in vars(self.reward_cfg).items() if k != "extra"}}


# --- goal templates of tasks (captured with a GameEnv; `gbxcule goal` tools: rl/templates.py) -----------
def _bare(task: Task) -> Task:
    """The task with no goal: nothing ends an episode but the step limit."""
    return dataclasses.replace(task, template=None, goal_ram=())


def capture(task: Task, actions=None, rom=None, device: str = "cpu", stack_k: int = 1, obs: str = "pixels",
            mask: np.ndarray | None = None, start_states=None) -> tuple[GoalTemplate, dict]:
    """Run `actions` (default: the task's solution) from the task's first start slot in one env and take the
    last frame as the goal. Returns the template and a report (steps, whether the RAM goal holds there)."""
    actions = tuple(task.solution or ()) if actions is None else tuple(int(a) for a in actions)
    if not actions:
        raise GbxculeError(f"task {task.id} has no solution: give the actions that reach the goal")
    env = GameEnv(rom, 1, device, task=_bare(task), start_states=start_states, stack_k=stack_k, obs=obs,
                  info_mode="none", max_steps=len(actions) + 1)
    env.reset(seed=0)
    if env.num_slots != 1:
        env = None
        raise GbxculeError("capture needs a single start state (the task's start has several)")
    for a in actions:
        env.step(np.array([a], dtype=np.int32))
    latest = env.obs[:, -1].cpu().numpy()
    frame = unpack_shades(latest)[0] if obs == "packed" else latest[0]
    holds = None
    if task.goal_ram:
        holds = bool(RamGoal(task.goal_ram, env.backend.layout, env.device).evaluate(env._ram)[0].item())
    meta = dataclasses.replace(env.template_meta(task.name), tau=task.reward.get("tau"),
                               k_consecutive=task.reward.get("k_consecutive"),
                               note=f"captured after {len(actions)} steps from {task.id}'s start")
    full = env.frames([0])[0]
    env.close()
    tpl = GoalTemplate(frame, np.ones((72, 80), dtype=bool) if mask is None else mask, meta)
    return tpl, {"steps": len(actions), "ram_goal_holds": holds, "full_frame": full}


def _capture_code_digest() -> str:
    """SHA-1 of the sources that shape a captured frame: the kernels, the backend and the env's start logic."""
    from pathlib import Path

    import gbxcule

    root = Path(gbxcule.__file__).resolve().parent
    h = hashlib.sha1()
    for path in sorted([*(root / "kernels").rglob("*.py"), root / "backends" / "warp_vec.py", root / "rl" / "env.py",
                        ]):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def task_template(task: Task, meta: TemplateMeta, device: str = "cpu") -> GoalTemplate:
    """The template a task names: a file (relative to its pack), or "solution": captured from the solution's
    last frame, cached by the task, the env config and the code that captured it."""
    from pathlib import Path

    if task.template != "solution":
        p = Path(task.template)
        return GoalTemplate.load(p if p.is_absolute() else Path(task.base_dir) / p)
    from gbxcule.core.paths import cache_dir

    key = json.dumps({"task": dataclasses.asdict(_bare(task)) | {"base_dir": "", "description": "", "reward": {}},
                      "meta": dataclasses.asdict(meta) | {"tau": None, "k_consecutive": None},
                      "code": _capture_code_digest()}, sort_keys=True, default=str)
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    path = cache_dir() / "templates" / f"{task.pack}-{task.name}-{digest}.npz"
    if path.is_file():
        try:
            return GoalTemplate.load(path)
        except GbxculeError:
            path.unlink(missing_ok=True)  # a damaged cache entry: capture again
    # on the env's device: the same bits as on the CPU, and a GPU machine builds no CPU-device kernels for it
    # (10 s of a cold `gbxcule train`, BENCHMARKS.md fourteenth visit)
    tpl, report = capture(task, device=device, stack_k=meta.stack_k, obs=meta.obs)
    if report["ram_goal_holds"] is False:
        raise GbxculeError(f"task {task.id}: its solution does not reach the RAM goal, so no template")
    tpl.save(path)
    return tpl
