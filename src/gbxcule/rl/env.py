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

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gbxcule.core.cartridge import Rom
from gbxcule.core.errors import GbxculeError
from gbxcule.core.schema import NUM_FIELDS
from gbxcule.rl.archive import (
    CELL_RECORD_BYTES,
    SALT_CLOCK,
    ArchiveConfig,
    StateArchive,
    cell_bytes,
    check_archive_memory,
    hashed_bits,
    pack_tensor,
    unpack_tensor,
)
from gbxcule.rl.capture import task_template, template_meta
from gbxcule.rl.goals import (
    SHOWN_PX,
    GoalError,
    GoalTemplate,
    LivesByte,
    Milestones,
    NoveltyTable,
    RamGoal,
    RewardConfig,
    ScreenHash,
    TemplateMeta,
    TemplateScorer,
    frame_key,
    ram_key,
    ram_rows,
)
from gbxcule.rl.starts import (
    EnvConfigError,
    build_starts,
    check_count,
    check_obs,
    device_names,
    open_backend,
    start_spec,
    task_rom,
)
from gbxcule.rl.tasks import Task, load_task

INFO_MODES = ("none", "stats", "full")
MAX_SHOWN = 80 // SHOWN_PX  # milestones an 80-pixel row shows
_STAT_NAMES = ("episodes", "return_sum", "length_sum", "success_sum", "truncated", "terminated", "steps",
               "template_fired", "template_fired_ok", "ram_goal_reached", "bad_actions")


_STATE_TENSORS = ("steps", "episodes", "ep_return", "ep_success", "success", "distance", "_dist_sum", "_prev_sum",
                  "_near", "final_return", "final_length", "final_success", "_stats", "rewards", "terminated",
                  "truncated", "_slot_stats", "_ms_stats", "milestones", "final_milestones", "failed", "_lives_stats")
# absent from env states saved before they existed: zero then
_NEWER_STATE = ("_slot_stats", "_ms_stats", "milestones", "final_milestones", "failed", "_lives_stats")


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
    archive: a dict or `ArchiveConfig`: keep a state archive and start episodes from it (rl/archive.py,
        docs/training.md "State archive"); None or {}: none.
    spread_clocks: each env's first episode after a reset ends at a seeded step in [1, max_steps], so
        truncations do not all fall on one step.
    show_milestones: draw the task's milestone flags (RAM event flags as they are now, screens as held in the
        episode) over the last row of every observation, 4 pixels each (shade 3 where held, 0 where not; the
        rest of the row 0): the game's hidden progress made visible, as Pokemon Red agents observe event
        flags. True ("on") draws the row on any task with at most 20 milestones (on a task that names none a
        blank row: nothing held); "auto" draws it where the task has some; goal templates and screen milestones
        are scored on the frame without them.
    life_ends: a life lost (the task's `lives` byte) ends the episode, terminated and unsuccessful (training's
        episodic lives: the game plays on in evaluations, which leave it off).
    """

    def __init__(self, rom: str | Path | Rom | None = None, num_envs: int = 1, device: str = "cpu",
                 task: str | Task | None = None, start_states=None, stack_k: int = 1, obs: str = "pixels",
                 frames_per_step: int | None = None, release_after_frames: int | None = None,
                 codec: str | None = None, max_steps: int | None = None, reward: dict | RewardConfig | None = None,
                 goal: str | Path | GoalTemplate | None = None, info_mode: str = "stats", seed: int = 0,
                 keep_final_obs: bool = False, obs_view: str = "stride", backend_options: dict | None = None,
                 memory_reserve=None, archive: dict | ArchiveConfig | None = None, spread_clocks: bool = False,
                 show_milestones: bool | str = False, life_ends: bool = False):
        import torch
        import warp as wp

        # the settings, checked before anything is built
        self.torch, self._wp = torch, wp
        self.num_envs = n = check_count("num_envs", num_envs)
        check_obs(stack_k, obs)
        if info_mode not in INFO_MODES:
            raise EnvConfigError(f"info_mode must be one of {', '.join(INFO_MODES)}, got {info_mode!r}")
        self.stack_k, self.obs_mode, self.info_mode = int(stack_k), obs, info_mode
        self.keep_final_obs, self.seed = bool(keep_final_obs), int(seed)
        self.single_obs_shape = (self.stack_k, 72, 80 if obs == "pixels" else 20)
        self.device, self.wp_device = device_names(device)
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise GbxculeError("GameEnv on cuda needs an NVIDIA GPU that torch can use; none was found")
        self.task = t = None if task is None else load_task(task)
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
        # the emulators (rl/starts.py), and their start slots in the backend's slot store, once it is known
        # that they fit in memory
        rom = task_rom(t, rom)
        spec = start_spec(t, start_states)
        self.archive_cfg = ArchiveConfig.from_dict(archive) if archive else None
        self._check_memory(rom, spec, memory_reserve)
        self.backend = be = open_backend(t, rom, n, self.wp_device, packed=obs == "packed", codec=codec,
                                         frames_per_step=frames_per_step,
                                         release_after_frames=release_after_frames, obs_view=obs_view,
                                         backend_options=backend_options)
        self.rom, self.codec, self.schedule = be.rom, be.codec, be.schedule
        self._setup_goals(goal)  # what ends an episode and what it earns
        if show_milestones not in (True, False, "on", "off", "auto"):
            self.close()
            raise EnvConfigError(f"show_milestones must be on, off or auto, got {show_milestones!r}")
        self.show_milestones = (bool(self.milestone_names) if show_milestones == "auto"
                                else show_milestones in (True, "on"))
        if self.show_milestones and len(self.milestone_names) > MAX_SHOWN:
            self.close()
            raise EnvConfigError(f"show_milestones needs a task with at most {MAX_SHOWN} milestones (4 pixels each in "
                                 f"the observation's last row); task {t.name if t else None!r} has "
                                 f"{len(self.milestone_names)}")
        try:
            self._milestones = self._milestone_tests(t.milestones) if self.milestone_names else None
        except GbxculeError:
            self.close()
            raise
        self.archive = self._limit = self._clone_bufs = self._policy_state = self._zero = None
        self.restarted = False  # the last load_state_dict had no emulator state: every env began a new episode
        self.after_step: Callable[[], None] | None = None  # called at the end of every step (the shell's eval)
        extra = 0 if self.archive_cfg is None else self.archive_cfg.capacity + 1  # the cells, and a scratch slot
        self.archive_bytes = extra * cell_bytes(be)
        self.num_slots = build_starts(be, spec, self.seed, t.base_dir if t else ".", extra_slots=extra,
                                      host_slots=self.archive_cfg is not None and self.archive_cfg.store == "host")
        self._build_buffers()  # the device buffers
        self.life_ends = bool(life_ends)
        self._lives = None if not (t and t.lives) else LivesByte(t.lives, be.layout, n, self.device)
        if self._lives is None and (self.life_ends or self.reward_cfg.life_lost):
            self.close()
            raise EnvConfigError(f"life_ends and reward.life_lost need a task whose pack names its lives byte "
                                 f"(lives = {{ addr, lost }}); task {t.name if t else None!r} names none")
        self.spread_clocks = bool(spread_clocks)
        if spread_clocks or (self.archive_cfg is not None and self.archive_cfg.max_steps):  # per-env step limits
            self._limit = torch.full((n,), self.max_steps, dtype=torch.int32, device=self.device)
        # the patience (archive knob): the step of each episode's latest new milestone (0: none since its start)
        self._gain = self._stalled = None
        if self.archive_cfg is not None and self.archive_cfg.patience and self._milestones is not None:
            self._gain = torch.zeros(n, dtype=torch.int32, device=self.device)
            self._stalled = torch.zeros(n, dtype=torch.bool, device=self.device)
        if self.archive_cfg is not None:
            self._setup_archive()
        self._reset_all(self.seed)  # the first episodes

    # --- construction -------------------------------------------------------------------------------------
    def template_meta(self, task: str = "") -> TemplateMeta:
        """The config a goal template must have been captured under to fit this env."""
        return template_meta(self.backend, self.stack_k, self.obs_mode, task)

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
        # milestones (progress events, each rewarded once per episode) and the dead end (the task unwinnable)
        ms = t.milestones if t is not None else ()
        self.milestone_names = tuple(m.name for m in ms)
        self._dead_end = RamGoal(t.fail_ram, self.backend.layout, self.device) if t and t.fail_ram else None
        # what `success` means: the RAM goal where the task has one, else the template's own verdict
        self.success_source = "ram" if self.ram_goal is not None else ("template" if self.scorer is not None else None)
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

    def _check_memory(self, rom: Rom, spec, reserve) -> None:
        """Refuse (one line) before anything is allocated unless the emulators, the env's buffers, its start
        slots (the files given count one slot each), the state archive's cells and `reserve` fit
        (core/memory.py)."""
        from gbxcule.backends import check_memory, emulator_need
        from gbxcule.core.cartridge import cart_config
        from gbxcule.core.memory import Need, env_bytes, slot_bytes
        from gbxcule.core.schema import ram_layout

        slots = spec.count if spec.generator else max(1, len(spec.states))
        ram = ram_layout(cart_config(rom).ram_banks * 0x2000).total
        cfg = self.reward_cfg
        tables = int(bool(cfg.novelty_ram)) + int(bool(cfg.novelty_pixels))
        need = (emulator_need("warp_vec_cuda" if self.device.startswith("cuda") else "warp_vec_cpu", rom, True,
                              self.obs_mode, False, self.num_envs)
                + Need.device("env buffers", env_bytes(self.obs_mode, self.stack_k, self.keep_final_obs, tables,
                                                       cfg.novelty_size, self._still_steps()),
                              slot_bytes(slots, ram, self.obs_mode)))
        if self.archive_cfg is not None:  # its cells are slots of the backend's slot store too
            cap, slot = self.archive_cfg.capacity, slot_bytes(1, ram, self.obs_mode)
            if self.archive_cfg.store == "host":  # the slots in host memory, the records on the device
                need = need + Need.device("state archive", 0, cap * CELL_RECORD_BYTES) + Need.host(
                    "state archive's slots", 0, check_archive_memory(cap, slot, self.device, host=True))
            else:
                need = need + Need.device("state archive", 0,
                                          check_archive_memory(cap, slot + CELL_RECORD_BYTES, self.device))
        check_memory(self.num_envs, need if reserve is None else need + reserve, self.device)

    def _build_buffers(self) -> None:
        """The env's device tensors: the frame ring, counters, stats and the start slots' frames."""
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
        # the `still` reward's screens, those the episode's last K steps were taken on, as hashes of all but the
        # last row (where show_milestones draws): a ring [K, N], `_bpos` the newest
        ks = self._still_steps()
        self._before = torch.zeros(ks, n, dtype=torch.int64, device=dev) if ks else None
        self._bpos = 0
        if ks:
            self._screen_hash = ScreenHash(n, 71 * w // 4, dev)
            self._now = torch.zeros(n, dtype=torch.int64, device=dev)  # this step's screen's hash
            self._still = torch.zeros(n, dtype=torch.bool, device=dev)
            self._match, self._recent = (torch.zeros(ks, n, dtype=torch.bool, device=dev) for _ in range(2))
            # per newest position b, each ring row's age: how many steps before this one its screen was taken on
            ages = torch.arange(ks, device=dev)
            self._ages = torch.stack([torch.remainder(b - ages, ks) for b in range(ks)])[:, :, None]
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
        k_ms = len(self.milestone_names)
        self.milestones = torch.zeros((k_ms, n), dtype=torch.bool, device=dev)  # held at some step of the episode
        self.final_milestones = torch.zeros_like(self.milestones)  # of the last episode that ended
        self.failed = torch.zeros(n, dtype=torch.bool, device=dev)  # the task became unwinnable this step
        # per milestone: ended episodes that held it, then ended episodes that hit the dead end (float64 sums)
        self._ms_stats = torch.zeros(k_ms + 1, dtype=torch.float64, device=dev)
        self._lives_stats = torch.zeros(1, dtype=torch.float64, device=dev)  # lives lost (a task's lives byte)
        self.life_lost = torch.zeros(n, dtype=torch.bool, device=dev)  # a life was lost this step
        if self.show_milestones:  # the shown row: per column the milestone drawn there (4 pixels, or 1 packed byte)
            per = SHOWN_PX if self.obs_mode == "pixels" else 1
            self._strip_cols = torch.arange(k_ms, device=dev).repeat_interleave(per)
            self._strip = torch.zeros(n, w, dtype=torch.uint8, device=dev)
            self._strip_ink = 3 if self.obs_mode == "pixels" else 0xFF
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
        self._final_frames = None  # (env ids, their screens): `keep_final_frames`
        # the start slots: their first frames (a view of the backend's slot store), their template distances,
        # the reset cache's identity (for load_state_dict), and per slot the episodes that ended and succeeded
        # since the last episode_stats() (a demonstration start's slot i replays i/K of the solution: how far
        # back success has spread)
        k, be = self.num_slots, self.backend
        self.slot_obs = wp.to_torch(be.slot_frames()[0])[:k].to(dev)  # a copy only from a store in host memory
        self.slot_sum = (self.scorer.distance_sum(self.slot_obs) if self.scorer is not None
                         else torch.zeros(k, dtype=torch.int32, device=dev))
        self._slots_sha1 = be.slots_digest(k)
        self._slot_stats = torch.zeros((k, 2), dtype=torch.float64, device=dev)
        self._slot_pair = torch.zeros((n, 2), dtype=torch.float64, device=dev)

    def _milestone_tests(self, ms) -> Milestones:
        """The task's milestones' tests: RAM conditions, and screens (each template file, relative to the pack,
        checked against this env; with show_milestones its last row, where the flags are drawn, does not count)."""
        screens = []
        for m in ms:
            if m.template is None:
                screens.append(None)
                continue
            path = Path(m.template)
            tpl = GoalTemplate.load(path if path.is_absolute() else Path(self.task.base_dir) / path)
            tpl.check_fits(self.template_meta())
            if self.show_milestones:
                mask = tpl.mask.copy()
                mask[-1] = False
                tpl = GoalTemplate(tpl.frames, mask, tpl.meta)
            scorer = TemplateScorer(tpl, self.obs_mode, self.device)
            tau = m.tau if m.tau is not None else (tpl.meta.tau if tpl.meta.tau is not None else 0.1)
            screens.append((scorer, scorer.threshold(tau)))
        return Milestones([m.condition for m in ms], screens, self.backend.layout, self.device)

    def _setup_archive(self) -> None:
        """The state archive: the env's start-state provider (rl/archive.py)."""
        self.archive = StateArchive.for_env(self.archive_cfg, self.task, self.backend.layout, self.num_envs,
                                            self.num_slots, self.device, self.seed, self.max_steps,
                                            milestones=self._milestones)
        self.cell_mode = self.archive.cell_mode
        self._rmask_wp = self._wp.from_torch(self.archive.restore_mask)
        self._n_const.fill_(float(self.num_envs - self.archive.n_explore))  # the rates are over the counted envs

    def cell_keys(self):
        """int64 [N]: each env's archive cell now (its RAM cell bytes packed, or a coarse hash of its frame)."""
        return self.archive.cell_keys(self._ram, self._latest, self.milestones)

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
        if self.archive is not None:
            self.archive.swarm_dst.zero_()
        self._restore_done(seed)
        if self._milestones is not None:  # what the start already holds is no milestone of the episode
            self.milestones.copy_(self._start_milestones())
        if self.archive is not None:
            self.archive.mark_areas(self.cell_keys())
        if self.show_milestones:
            self._draw_milestones(self._done)
        if self._limit is not None and self.archive is None:
            self._limit.fill_(self.max_steps)
        if self.spread_clocks:  # first episodes end at a seeded step in [1, max_steps] (or sooner)
            spread = hashed_bits(seed, self._env_ids, self.episodes, SALT_CLOCK, 31) % self.max_steps
            torch.minimum(self._limit, (self.max_steps - spread).to(torch.int32), out=self._limit)
        for buf in (self.steps, self.ep_return, self.ep_success, self.success, self._near, self.rewards,
                    self.terminated, self.truncated, self._stats, self._slot_stats, self._ms_stats, self.failed):
            buf.zero_()
        if self._gain is not None:  # with spread clocks the first stalls spread too (over [1, patience])
            self._gain.zero_()
            if self.spread_clocks:
                k = self.archive_cfg.patience
                self._gain.sub_((hashed_bits(seed, self._env_ids, self.episodes, SALT_CLOCK, 31) % k).to(torch.int32))
        self._dist_sum.copy_(self._prev_sum)
        if self.scorer is not None:
            self.distance.copy_(self._dist_sum.to(torch.float32) * self.scorer.scale)
        for table in (self._nov_ram, self._nov_px):
            if table is not None:
                table.seen.zero_()
        self._done.zero_()
        del torch

    def _restore_done(self, seed: int) -> None:
        """Envs flagged in `_done`: restore from their slot, with its first frame in their whole frame stack
        and its screen in the frame buffer (the backend's masked restore: two launches)."""
        torch = self.torch
        slots = _slot_hash(torch, seed, self._env_ids, self.episodes, self.num_slots)
        if self.archive is not None:
            self._restore_with_archive(seed, slots)
            return
        self._slots.copy_(slots)
        self.backend.restore(self._done_wp, self._slots_wp, obs=self._ring_wp)
        self._prev_sum.copy_(torch.where(self._done, self.slot_sum[self._slots.long()], self._prev_sum))

    def _restore_with_archive(self, seed: int, slots) -> None:
        """`_restore_done` with the archive: swarm destinations are cloned from their source first (before any
        restore touches it), then the other ended envs restore from the task's start slot `slots` or from a
        cell the archive picks (one masked restore over start and cell slots)."""
        torch, a, done = self.torch, self.archive, self._done
        dst = a.swarm_dst
        if a.cfg.swarm > 0:
            self.clone_states(a.swarm_src, dst)  # counters too: the offsets add the source's progress
            a.jumped(dst, self.steps, self.ep_return)
        r, slot, sums, use = a.starts(done, slots, seed, self.episodes, self.slot_sum)
        self._slots.copy_(slot)
        self.backend.restore(self._rmask_wp, self._slots_wp, obs=self._ring_wp)
        torch.where(r, sums, self._prev_sum, out=self._prev_sum)
        if self._limit is not None:  # an episode from a cell (or a swarm jump) has the archive's step limit, one
            cell_limit = a.cfg.max_steps or self.max_steps  # from an entry cell `entry_steps` where set
            limit = torch.where(use | dst, cell_limit, self.max_steps)
            if a.cfg.entry_steps:
                limit = torch.where(use & a.start_entry, a.cfg.entry_steps, limit)
            self._limit.copy_(torch.where(done, limit, self._limit))

    def keep_policy_state(self, size: int) -> bool:
        """A recurrent policy of `size` floats of state trains here: with a state archive of memory = "cell" its
        cells keep the state of the path that reached them and episodes from them start with it (pass each step's
        state to `step`; `next_policy_state` after it). Whether they do."""
        return self.archive is not None and self.archive.keep_memory(size)

    def next_policy_state(self, state, out):
        """A recurrent policy's state for the next step into `out` [N, H]: `state` (after this step's actions)
        where the episode goes on; where it ended, its new episode's: zero, or with memory = "cell" the state
        kept with its start (its cell's, a swarm source's)."""
        torch = self.torch
        if self.archive is not None and self.archive.cell_mem is not None:
            start = self.archive.start_memory(state)
        else:  # (a zero tensor: where's out= takes no number; +0 as the learner's unroll writes)
            start = self._zero = torch.zeros((), device=self.device) if self._zero is None else self._zero
        return torch.where(self._done.unsqueeze(-1), start, state, out=out)

    def restart_policy_state(self, out) -> None:
        """After a load without emulator state (`restarted`: every env began a new episode) a recurrent policy's
        state for each env's new episode into `out` [N, H]: zero, or with memory = "cell" its start cell's."""
        if self.archive is not None and self.archive.cell_mem is not None:
            out.copy_(self.archive.start_memory(out))
        else:
            out.zero_()

    def clone_states(self, src, dst_mask) -> None:
        """Give every env e with `dst_mask[e]` (bool [N]) the whole state of env `src[e]` (an int tensor [N] or
        one env number): its emulator state, screen and frame stack (the backend's masked clone) and the env's
        own per-env state (episode step, return, success, template distance, novelty tables, step limit,
        archive offsets), so under the same actions it goes on bit for bit as its source. A source must not
        be a destination. Device work only: no host synchronisation."""
        torch, n = self.torch, self.num_envs
        if self._clone_bufs is None:
            src32 = torch.zeros(n, dtype=torch.int32, device=self.device)
            mask = torch.zeros(n, dtype=torch.bool, device=self.device)
            self._clone_bufs = (src32, mask, self._wp.from_torch(src32), self._wp.from_torch(mask))
        src32, mask, src_wp, mask_wp = self._clone_bufs
        src32.copy_(torch.as_tensor(src, device=self.device).expand(n))
        mask.copy_(torch.as_tensor(dst_mask, device=self.device).expand(n))
        self.backend.clone(src_wp, mask_wp, obs=self._ring_wp)
        idx = torch.where(mask, src32.long(), self._env_ids)  # every other env gathers itself: one gather a buffer
        own = [self.steps, self.ep_return, self.ep_success, self.success, self.distance, self._dist_sum, self._prev_sum,
               self._near, self._fired]
        own += [x for x in (self._limit, self._gain) if x is not None]
        if self.archive is not None:
            own += self.archive.env_records()
        own += [table.seen for table in (self._nov_ram, self._nov_px) if table is not None]
        for buf in own:
            buf.copy_(buf.index_select(0, idx))
        if self.milestone_names:
            self.milestones.copy_(self.milestones.index_select(1, idx))

    def _start_milestones(self):
        """bool [K, N]: what each env's start holds (read for the envs just restored): its RAM flags and the screens
        its newest frame shows; from an archive cell also the screens the cell held, after a swarm jump the
        source's (the clone copied them)."""
        held = self._milestones.each(self._ram, self.obs[:, -1])
        a = self.archive
        if a is None or not self._milestones.screens or a.milestones is None:
            return held
        kept = self.torch.where(a.swarm_dst, self.milestones, a.start_flags())
        return held | (kept & self._milestones.is_screen)

    def _draw_milestones(self, restored=None) -> None:
        """show_milestones: the flags held now over the last row of the newest frame, or of every stacked frame
        of the envs in `restored` (bool [N]: their whole stack is their start's first frame)."""
        torch, strip = self.torch, self._strip
        if self._milestones is not None:  # a task that names none: the row stays blank
            held = self._milestones.flags(self._ram, self.milestones)  # [M, N]
            strip[:, :len(self._strip_cols)] = (held.t().index_select(1, self._strip_cols).to(torch.uint8)
                                                * self._strip_ink)
        row = self._ring[:, :, 71]  # [N, ring frames, W]
        if restored is None:
            k = self.stack_k
            for pos in ((0,) if k == 1 else (self._pos, self._pos + k)):
                row[:, pos].copy_(strip)
        else:
            row.copy_(torch.where(restored.view(-1, 1, 1), strip.unsqueeze(1), row))

    @property
    def ram(self):
        """Every env's RAM as a uint8 [bytes, N] device tensor (a view of the backend's env-major store; rows in
        `core.schema.ram_layout` order, `goals.ram_rows` finds an address's row): for goals and tools, not agents."""
        return self._ram

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

    def _raise_bad_actions(self, bad: int | None = None) -> None:
        """ValueError if out-of-range actions were seen since the last check (`bad`: their count, when the
        caller has read it; else read here)."""
        bad = int(self._stats[self._bad_idx].item()) if bad is None else bad
        if bad:
            self._stats[self._bad_idx] = 0
            raise ValueError(f"{bad} out-of-range action(s) since the last check (codec {self.codec.name} has "
                             f"{self.codec.num_actions} actions); they ran as action 0")

    def step(self, actions, policy_state=None):
        """Advance every env one step; see the module docstring. `policy_state`: a recurrent policy's state after
        it chose `actions` (float [N, H]), which a state archive with memory = "cell" keeps with the cells these
        steps reach (`keep_policy_state`)."""
        torch, cfg = self.torch, self.reward_cfg
        self._policy_state = policy_state
        act = self._actions(actions)
        if self.archive is not None and self.archive.n_explore:  # the archive's explorers act at random
            self.archive.explore_actions(self._act32, self.codec.num_actions, self.seed)
        if self._lives is not None:
            self._lives.before(self._ram)
        if self._before is not None:
            self._bpos = (self._bpos + 1) % len(self._before)
            self._screen_hash(self.obs[:, -1, :-1], self._before[self._bpos])  # the newest frame the policy saw
        self.backend.step(act)
        latest = self._latest
        self.steps += 1
        reward = self.rewards.fill_(cfg.step_cost)
        if self._before is not None:
            reward.add_(self._seen_again(latest), alpha=cfg.still)
        if self.scorer is not None:
            self._dist_sum.copy_(self.scorer.distance_sum(latest))
            self.distance.copy_(self._dist_sum.to(torch.float32) * self.scorer.scale)
            reward += (self._prev_sum - self._dist_sum).to(torch.float32) * self._shaping
            self._prev_sum.copy_(self._dist_sum)
            self._near.copy_(torch.where(self._dist_sum < self._tau_sum, self._near + 1, 0))
            torch.ge(self._near, cfg.k_consecutive, out=self._fired)
        if self.ram_goal is not None:
            self.success.copy_(self.ram_goal.evaluate(self._ram))
        elif self.scorer is not None:
            self.success.copy_(self._fired)
        if self.terminate_on == "template":
            self.terminated.copy_(self._fired)
        elif self.terminate_on == "ram":
            self.terminated.copy_(self.success)
        reward.add_(self.terminated, alpha=cfg.goal_bonus)
        if self._dead_end is not None:  # the task can no longer be won: the episode ends, unsuccessful
            torch.logical_and(self._dead_end.evaluate(self._ram), ~self.terminated, out=self.failed)
            self.terminated |= self.failed
            reward.add_(self.failed, alpha=cfg.dead_end)
        if self._lives is not None:  # a life lost: its penalty, and with life_ends the episode's end
            self._lives.lost(self._ram, self.life_lost)
            reward.add_(self.life_lost, alpha=cfg.life_lost)
            if self.life_ends:
                self.terminated |= self.life_lost
        limit = self.max_steps if self._limit is None else self._limit
        torch.logical_and(self.steps >= limit, ~self.terminated, out=self.truncated)
        if self._milestones is not None:  # each milestone's bonus the first time it holds in the episode
            held = self._milestones.each(self._ram, latest)
            new = held & ~self.milestones
            reward.add_(new.sum(0), alpha=cfg.milestone)
            self.milestones |= held
            if self._gain is not None:  # the patience: this many steps without a new milestone end the episode
                torch.where(new.any(0), self.steps, self._gain, out=self._gain)
                torch.ge(self.steps - self._gain, self.archive_cfg.patience, out=self._stalled)
                self._stalled &= ~self.terminated & ~self.truncated
                self.truncated |= self._stalled
        if self._nov_ram is not None:
            reward.add_(self._nov_ram.visit(ram_key(self._ram, self._nov_rows)), alpha=cfg.novelty_ram)
        if self._nov_px is not None:
            reward.add_(self._nov_px.visit(frame_key(latest)), alpha=cfg.novelty_pixels)
        self.ep_return += reward
        self.ep_success |= self.success
        torch.logical_or(self.terminated, self.truncated, out=self._done)
        if self.archive is not None:
            self._archive_step()
        self._accumulate()
        if self.stack_k > 1:
            self._pos = (self._pos + 1) % self.stack_k
            self._ring[:, self._pos].copy_(latest)
            self._ring[:, self._pos + self.stack_k].copy_(latest)
        if self.show_milestones:
            self._draw_milestones()
        if self.final_obs is not None:
            self.final_obs.copy_(self.obs)
        torch.where(self._done, self.ep_return, self.final_return, out=self.final_return)
        torch.where(self._done, self.steps, self.final_length, out=self.final_length)
        torch.where(self._done, self.ep_success, self.final_success, out=self.final_success)
        if self._milestones is not None:
            torch.where(self._done, self.milestones, self.final_milestones, out=self.final_milestones)
        info = self._info()
        self.episodes += self._done
        if self._final_frames is not None:  # the screens the ending episodes ended on, before their reset
            ids, kept = self._final_frames
            full = self._wp.to_torch(self.backend.frame_buffer())
            torch.where(self._done[ids, None, None], full[ids], kept, out=kept)
        self._restore_done(self.seed)
        if self._milestones is not None:  # a new episode holds what its start holds
            torch.where(self._done, self._start_milestones(), self.milestones, out=self.milestones)
        if self.show_milestones:
            self._draw_milestones(self._done)
        keep = ~self._done
        self.steps *= keep
        if self._gain is not None:
            self._gain *= keep
        self._near *= keep
        self.ep_return *= keep
        self.ep_success &= keep
        for table in (self._nov_ram, self._nov_px):
            if table is not None:
                table.clear(self._done)
        if self._limit is not None and self.archive is None:
            self._limit.masked_fill_(self._done, self.max_steps)
        if self.after_step is not None:
            self.after_step()
        return self.obs, self.rewards, self.terminated, self.truncated, info

    def _still_steps(self) -> int:
        """How many screens the `still` reward keeps per env (0: off)."""
        return self.reward_cfg.still_steps if self.reward_cfg.still else 0

    def _seen_again(self, latest):
        """Per env, whether the new screen (all but its last row) is one its episode's last K steps were taken
        on: its hash against the ring's, each counted only if the episode has taken more steps than the ring
        row's age (a row d steps old is of this episode). A few ops whatever K; none allocates."""
        torch = self.torch
        now = self._screen_hash(latest[:, :-1], self._now)
        torch.eq(self._before, now, out=self._match)
        self._match &= torch.gt(self.steps, self._ages[self._bpos], out=self._recent)
        return torch.any(self._match, 0, out=self._still)

    def _archive_step(self) -> None:
        """The archive's share of a step, before the episode ends are counted: every env's state is offered as
        its cell's (one masked save into the cells' slots); swarm destinations end their episodes (truncated:
        they bootstrap) to jump."""
        a = self.archive
        mask, slot, dst = a.step(self.cell_keys(), self.steps, self.ep_return, self._dist_sum, self.terminated,
                                 self.seed, self._policy_state)
        self.backend.save_slots(mask, slot)
        if a.cfg.swarm > 0:
            self.truncated |= dst
            self._done |= dst
        a.ended(self._done, self.ep_success, self._stalled)

    def _accumulate(self) -> None:
        """Add this step's totals to the device stats (one stack, one add; `_STAT_NAMES` order)."""
        torch, d, v = self.torch, self._done, self._stat_vals
        fired, trunc, term, success, failed = self._fired, self.truncated, self.terminated, self.success, self.failed
        c = None
        if self.archive is not None and self.archive.n_explore:  # the archive's explorers are not counted
            c = self.archive.counted
            d, fired, trunc, term, success, failed = d & c, fired & c, trunc & c, term & c, success & c, failed & c
        vals = (d.sum(), (self.ep_return * d).sum(), (self.steps * d).sum(), (self.ep_success & d).sum(),
                trunc.sum(), term.sum(), self._n_const, fired.sum(), (fired & success).sum(), success.sum())
        torch.stack([x.to(torch.float64) for x in vals], out=v)
        self._stats[:len(vals)] += v
        if self._milestones is not None:
            self._ms_stats[:-1] += (self.milestones & d).sum(1)
        if self._dead_end is not None:
            self._ms_stats[-1:] += failed.sum()
        if self._lives is not None:
            self._lives_stats += (self.life_lost if c is None else self.life_lost & c).sum()
        if self.num_slots > 1:  # `_slots` still holds the slot each ending episode started from
            pair = self._slot_pair
            slots = self._slots
            if self.archive is not None:  # only episodes from the task's start slots; a cell's slot is >= K
                d = d & ~self.archive.from_archive
                slots = slots.clamp(max=self.num_slots - 1)
            pair[:, 0].copy_(d)
            pair[:, 1].copy_(d).mul_(self.ep_success)  # in place: no temporary per step
            self._slot_stats.index_add_(0, slots, pair)

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

    def goal_holds(self):
        """bool [N] on the device: whether each env's current state already passes the success test (the RAM
        goal, else its newest frame under the template's tau); e.g. an evaluation start at the goal."""
        if self.ram_goal is not None:
            return self.ram_goal.evaluate(self._ram)
        if self.scorer is not None:
            return self.scorer.distance_sum(self.obs[:, -1]) < self._tau_sum
        return self.torch.zeros(self.num_envs, dtype=self.torch.bool, device=self.device)

    # --- reading stats (synchronises; once per update) ----------------------------------------------------
    def stat_tensors(self) -> list:
        """The device totals `episode_stats` reads (float64 sums since its last call): the training session of
        several processes sums every process's into them before reading."""
        return [self._stats, self._slot_stats, self._ms_stats, self._lives_stats]

    def episode_stats(self, clear: bool = True) -> dict[str, float]:
        """Totals since the last call: finished episodes, their mean return, length and success rate, and
        rates per env-step; with several start slots also `slot_episodes` and `slot_successes` (lists, one
        entry per slot, by the slot each episode started from); with a state archive its `archive/...` figures and
        `success_from_start` (`StateArchive.read_stats`, which moves the start schedule when `clear`). Reads the
        device once. Raises ValueError if out-of-range actions were seen."""
        torch, n, k = self.torch, len(_STAT_NAMES), self.num_slots
        parts = [self._stats] + ([self._slot_stats.reshape(-1)] if k > 1 else []) + [self._ms_stats,
                                                                                     self._lives_stats]
        if self.archive is not None:
            parts.append(self.archive.stat_vector().to(torch.float64))  # counts: exact in float64
        vals = torch.cat(parts).tolist()
        s = dict(zip(_STAT_NAMES, vals[:n], strict=True))
        self._raise_bad_actions(int(s["bad_actions"]))
        per_slot, rest = {}, vals[n:]
        if k > 1:
            pairs, rest = rest[:2 * k], rest[2 * k:]
            per_slot = {"slot_episodes": [int(x) for x in pairs[0::2]], "slot_successes": [int(x) for x in pairs[1::2]]}
        k_ms = len(self.milestone_names)
        ms, lives, rest = rest[:k_ms + 1], rest[k_ms + 1], rest[k_ms + 2:]
        eps = s["episodes"]
        if k_ms:  # the share of ended episodes that held each milestone, and the deepest any of them held
            held = [int(x) for x in ms[:k_ms]]
            per_slot.update({"milestone_episodes": held, "milestone_rates": [h / eps if eps else None for h in held],
                             "milestone_deepest": max((i + 1 for i, h in enumerate(held) if h), default=0)})
        if self._dead_end is not None:
            per_slot["dead_ends"] = int(ms[k_ms])
        if self._lives is not None:
            per_slot["lives_lost"] = int(lives)
        if clear:
            self._stats.zero_()
            self._slot_stats.zero_()
            self._ms_stats.zero_()
            self._lives_stats.zero_()
        if self.archive is not None:
            per_slot.update(self.archive.read_stats(clear, rest))
        eps, steps = s["episodes"], max(s["steps"], 1.0)
        return {**per_slot, "episodes": int(eps), "env_steps": int(s["steps"]),
                "episode_return": s["return_sum"] / eps if eps else float("nan"),
                "episode_length": s["length_sum"] / eps if eps else float("nan"),
                "success_rate": s["success_sum"] / eps if eps else float("nan"),
                "done_rate": eps / steps, "trunc_rate": s["truncated"] / steps, "term_rate": s["terminated"] / steps,
                "template_fired": int(s["template_fired"]), "success_source": self.success_source,
                "template_precision": (s["template_fired_ok"] / s["template_fired"])
                if s["template_fired"] and self.success_source == "ram" else float("nan")}

    # --- state for checkpoints ------------------------------------------------------------------------------
    def _field_rows(self):
        """The backend's fields as a [NUM_FIELDS, num_envs] torch view (stored env-major: core/schema.py)."""
        return self._wp.to_torch(self.backend.fields).view(self.num_envs, NUM_FIELDS).t()

    def state_dict(self, emulator: bool = True) -> dict:
        """Everything needed to continue bit for bit: counters, novelty tables, the state archive with its cells'
        emulator states (compressed) and (with `emulator`) every env's emulator state, frame buffer and frame
        ring; without it the envs restart on load, the archive as it was. Host tensors."""
        d = {"pos": self._pos, "seed": self.seed, "slots_sha1": self._slots_sha1}
        for name in _STATE_TENSORS:
            d[name] = getattr(self, name).detach().cpu().clone()
        if emulator:  # (envs that restart on load start their frame stacks, and the `still` ring, afresh)
            d["ring"] = self._ring.cpu().clone()
        if emulator and self._before is not None and len(self._before) > 1:  # (one screen is rewritten each step)
            d["still_hashes"], d["still_pos"] = self._before.cpu().clone(), self._bpos
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
        if self._limit is not None:
            d["limit"] = self._limit.cpu().clone()
        if self._gain is not None:
            d["gain"] = self._gain.cpu().clone()
        if self.archive is not None:  # with the cells' emulator states, observations and screens
            d["archive"] = {**self.archive.state_dict(), "cells": [pack_tensor(x) for x in self._cell_slots()]}
        return d

    def _cell_slots(self, rows: int | None = None) -> list:
        """Torch views of the archive cells' slots (the used ones, or the first `rows`): fields, RAM words (as
        int32), observations, screens."""
        k = self.num_slots
        used = int(self.archive.count.item()) if rows is None else rows
        views = [self._wp.to_torch(x) for x in self.backend.slot_arrays() if x is not None]
        return [v[k:k + used].view(self.torch.int32) if v.dtype == self.torch.uint32 else v[k:k + used]
                for v in views]

    def archive_outbox(self) -> list:
        """The archive's cells new or improved since the last call, for other processes (`env.archive.share`
        of them at most): [valid (int32), records (int64), policy states (with memory = "cell"), fields, RAM
        words, observations, screens], fixed shapes, device work only."""
        rows, valid, rec = self.archive.outbox(self.archive_cfg.share)
        mem = [] if self.archive.cell_mem is None else [self.archive.cell_mem.index_select(0, rows)]
        return [valid.to(self.torch.int32), rec, *mem] + [v.index_select(0, rows.to(v.device)).to(self.device)
                                                          for v in self._cell_slots(self.archive.m)]

    def archive_inbox(self, parts: list) -> None:
        """Other processes' `archive_outbox` parts (concatenated along their first dimension): their cells join this
        archive where new or shorter (`StateArchive.merge`), with their emulator states, observations and screens."""
        valid, rec, *states = parts
        mem = states.pop(0) if self.archive.cell_mem is not None else None  # (policy states: memory = "cell")
        rows, write = self.archive.merge(valid.bool(), rec, mem)
        target = self.torch.where(write, rows, self.archive.m)  # the rest into the scratch slot
        for view, data in zip(self._cell_slots(self.archive.m + 1), states, strict=True):
            view.index_copy_(0, target.to(view.device), data.to(view.device))

    def load_state_dict(self, d: dict) -> None:
        if d.get("slots_sha1") != self._slots_sha1:
            raise EnvConfigError("this env state was saved with other start states (the reset cache differs)")
        if "ring" in d and tuple(d["ring"].shape) != tuple(self._ring.shape):
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
        if "ring" in d:  # (without the emulator state the envs restart below)
            self._ring.copy_(d["ring"])
        for name in ("_nov_ram", "_nov_px"):
            table = getattr(self, name)
            if table is not None and name in d:
                table.seen.copy_(d[name])
        if self._limit is not None:
            self._limit.copy_(d["limit"]) if "limit" in d else self._limit.fill_(self.max_steps)
        if self._gain is not None:  # (a state without it: the patience counts from here)
            self._gain.copy_(d["gain"]) if "gain" in d else self._gain.copy_(self.steps)
        if self.archive is not None:
            self._load_archive(d.get("archive"))
        if "emu" in d:
            be, wp, e = self.backend, self._wp, d["emu"]
            self._field_rows().copy_(e["fields"].view(NUM_FIELDS, self.num_envs))
            self._ram.copy_(e["ram"])
            wp.to_torch(be.serial).copy_(e["serial"])
            wp.to_torch(be.frame_buffer()).copy_(e["frame"])
        else:
            warnings.warn("env state without emulator state: every env restarts from a start slot", stacklevel=2)
            self.restarted = True
            self._done.fill_(True)
            self._restore_done(self.seed)
            self._done.zero_()
        if self._before is not None and len(self._before) > 1:  # the `still` reward's earlier screens
            k, n = self._before.shape
            screens = d.get("still_screens")  # states saved before the ring kept hashes: the screens themselves
            if "emu" in d and "still_hashes" in d and d["still_hashes"].shape == self._before.shape:
                self._before.copy_(d["still_hashes"])
                self._bpos = int(d["still_pos"])
            elif "emu" in d and screens is not None and screens.shape == (k, *self._latest[:, :-1].shape):
                for i in range(k):
                    self._screen_hash(screens[i].to(self.device), self._before[i])
                self._bpos = int(d["still_pos"])
            else:  # none kept: each is the screen the next step is taken on
                self._before.copy_(self._screen_hash(self.obs[:, -1, :-1], self._now).expand(k, n))

    def _load_archive(self, a: dict | None) -> None:
        if a is None:
            raise EnvConfigError("this env state was saved without a state archive")
        arch = self.archive
        arch.load_state_dict(a)
        if "cells" in a or "slots" in a:  # (slots: raw, as checkpoints before the compressed cells held them)
            for view, saved in zip(self._cell_slots(), a["cells"] if "cells" in a else a["slots"], strict=True):
                view.copy_(unpack_tensor(saved, view) if isinstance(saved, dict) else saved)
        else:
            warnings.warn("env state without the archive's emulator states: the archive starts empty", stacklevel=3)
            arch.clear()

    def emulator_bytes(self) -> int:
        """Bytes of the envs' emulator state (and frame ring) a checkpoint with `emulator=True` stores."""
        from gbxcule.core.schema import SERIAL_CAPTURE

        ring = self._ring.numel() * self._ring.element_size()
        return self.num_envs * (4 * NUM_FIELDS + self.backend.layout.total + SERIAL_CAPTURE + 144 * 160) + ring

    def archive_state_bytes(self) -> int:
        """Bytes of the state archive's cells and kept policy states at its capacity, which every checkpoint
        copies to the host (before it compresses the cells' states)."""
        if self.archive is None:
            return 0
        cells = self.archive_cfg.capacity * cell_bytes(self.backend)
        return cells + (0 if self.archive.cell_mem is None else 4 * self.archive.cell_mem.numel())

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
        return full[self._id_tensor(envs)].cpu().numpy()

    def _id_tensor(self, envs):
        """int64 [len(envs)] on the device; IndexError for an env out of range."""
        ids = [int(e) for e in envs]
        bad = [e for e in ids if not 0 <= e < self.num_envs]
        if bad:
            raise IndexError(f"env {bad[0]} out of range for {self.num_envs} envs")
        return self.torch.tensor(ids, dtype=self.torch.int64, device=self.device)

    def keep_final_frames(self, envs) -> None:
        """From now on keep, for these envs, the full-size screen each episode ended on (`final_frames`), which
        the reset at its end replaces: an eval's GIF shows where an episode ended, not its next start. Until an
        episode ends it holds the screen of this call. None: keep none (the default)."""
        if envs is None:
            self._final_frames = None
            return
        ids = self._id_tensor(envs)
        self._final_frames = (ids, self._wp.to_torch(self.backend.frame_buffer())[ids].clone())

    def final_frames(self) -> np.ndarray:
        """uint8 [len(envs), 144, 160] on the host (synchronises): the screens the `keep_final_frames` envs' last
        ended episodes ended on."""
        if self._final_frames is None:
            raise ValueError("final_frames needs keep_final_frames first")
        return self._final_frames[1].cpu().numpy()

    def close(self) -> None:
        self.backend.close()

    def describe(self) -> dict:
        return {"rom_sha1": self.rom.info.sha1, "rom_title": self.rom.info.title,
                "task": None if self.task is None else self.task.id, "num_envs": self.num_envs,
                "device": self.device, "stack_k": self.stack_k, "obs": self.obs_mode,
                "codec": self.codec.describe(), "schedule": self.schedule.describe(), "max_steps": self.max_steps,
                "start_slots": self.num_slots, "terminate_on": self.terminate_on, "tau": self.tau,
                "success_source": self.success_source,
                "archive": None if self.archive is None else {**self.archive_cfg.to_dict(), "cells": self.cell_mode,
                                                              "bytes": self.archive_bytes},
                "spread_clocks": self.spread_clocks, "show_milestones": self.show_milestones,
                "life_ends": self.life_ends,
                "reward": {k: v for k, v in vars(self.reward_cfg).items() if k != "extra"}}
