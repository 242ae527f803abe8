"""The state archive: emulator states kept on the device, keyed by cells, to start episodes from (Go-Explore)
and to clone envs into when a milestone is reached (swarming). docs/training.md "State archive".

A *cell* is a place in the game: a RAM key (the task's `cells` bytes, area first, e.g. map, x, y, packed into
one int64) or, for any ROM, a coarse hash of the frame (`goals.frame_key`). The archive holds up to
`capacity` cells, each with the emulator state that first reached it by the shortest known path (in the env's
slot store, slots `first_slot + cell`), and per cell: visits, the best return on reaching it, the steps from
the task's start of the stored path and its return, times chosen as a start, the archive step it was found, and
the episodes started from it that ended and how many of them succeeded.

Everything per step is torch on the env's device with fixed shapes and no host synchronisation:

- `observe(keys, steps, returns, sums, eligible)`: look every env's cell up (keys sorted, `searchsorted`),
  count visits, pick at most `inserts` envs whose cell is new or reached in fewer steps than recorded (new
  first, then shortest, then lowest env; `topk` on one int64 priority), drop repeated keys among them, give
  new cells the next free rows (a full archive drops new cells and counts them; a known cell's row is
  rewritten with its shorter path; once full, envs in unknown cells are counted as dropped), and return the
  mask and slots of one masked `save_slots`.
- `choose(done, u_start, u_cell)`: for envs whose episode ended, the task's start with probability `p`
  (`p_start` raised by the success schedule), else a cell drawn with weight `w_chosen / sqrt(1 + chosen) +
  w_visits / sqrt(1 + visits) + w_recent * [found in the last recent_steps steps] + w_depth * steps /
  deepest steps + w_fail * (fails + 1) / (tries + 2) + w_mid * 4 (wins + 1)(fails + 1) / (tries + 2)^2` (the
  last two: how often the episodes started from the cell failed, so starts go where the policy does not yet reach
  the goal; and how near their success is to one half, so starts go where the goal is within reach but not yet
  sure, and not to cells it is never reached from) by inverse CDF over fixed-point integer
  weights (the same bits on every device); with probability `route`, among the route's cells only.
- `milestone(keys, steps, eligible, u)`: a new area (the first cell byte) or a new depth reached: the source
  env, and a hash-chosen share `swarm` of the envs that started from the archive to clone from it.

With `route` > 0 each cell keeps its `parent`, the cell its stored path came through (each env's `last_row`); the
last cell of an episode that reached the goal is a goal cell, and the route (`on_route`: the goal cells and their
parents' chains; with milestones and `win` "milestone" each level's entry cell's chain too) is marked once per
update (`mark_route`, in `stat_vector`). With `route` 0 none of it is kept.

Counters are read once per update (`read_stats`), where the start probability follows the success from the
task's own start (`p = p_start + (1 - p_start) * ema`). `GameEnv(archive=...)` wires it in (rl/env.py).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import asdict, dataclass, fields

import numpy as np

from gbxcule.core.typed import CHANGE, SettingError, check_fields, knob
from gbxcule.rl.goals import RamGoal, frame_key, mix64, ram_key, ram_rows
from gbxcule.rl.starts import EnvConfigError

INT64_MAX = 2**63 - 1  # the key of an empty row (a real key equal to it is stored as INT64_MAX - 1)
WEIGHT_ONE = 1 << 12  # fixed-point 1.0 of a selection weight term
COEF_ONE = 16  # fixed-point 1.0 of a weight coefficient (knobs up to 16: a weight below 2**22)
TABLE = 1 << 16  # counts at or above this weigh as this
U_BITS = 20  # bits of the hashed uniforms that pick a start and a cell
STEP_CAP = (1 << 30) - 1  # steps-to-reach are capped here in the insertion priority
DEPTH_CAP = 1 << 20  # and here in the depth weight
DEPTH_BINS = 16  # success by the start cell's depth: bins of ceil(max_steps / DEPTH_BINS) steps
MAX_CAPACITY = 1 << 20
MAX_ENVS = 1 << 24
STAT_NAMES = ("inserted", "improved", "dropped", "swarms", "start_episodes", "start_successes", "archive_episodes",
              "archive_successes", "chosen_depth_sum", "chosen", "patience_ends")
# salts of the hashed uniforms (`hashed_bits`): a start (and which cell), swarm or not, a spread clock, an explorer's
# action, a route start, a frontier or reach start
SALT_START, SALT_SWARM, SALT_CLOCK, SALT_EXPLORE, SALT_ROUTE = 0x51A7, 0x5A53, 0xC10C, 0xE4A1, 0x207E
SALT_SHARE = 0xF407


@dataclass
class ArchiveConfig:
    """The archive's knobs (the `[env.archive]` table)."""

    capacity: int = knob(4096, min=1, max=MAX_CAPACITY)  # cells (emulator states) held
    cells: str = knob("auto", choices=("auto", "ram", "pixels"))  # auto: ram when the task names cell bytes
    pixel_cell: int = knob(8, choices=(2, 4, 8))  # pixels: block side of the frame hash (in observation pixels)
    pixel_levels: int = knob(4, min=2, max=16)  # pixels: shade levels per block mean
    inserts: int = knob(64, min=1, max=4096)  # at most this many cells inserted or improved per step
    max_steps: int = knob(0, min=0)  # step limit of an episode that starts from a cell (0: the env's)
    p_start: float = knob(0.25, min=0, max=1)  # least share of episodes from the task's own start
    schedule: str = knob("success", choices=("success", "fixed"))  # success: p rises with success from the start
    smoothing: float = knob(0.8, min=0, max=0.999)  # of the success EMA, per update
    w_chosen: float = knob(1.0, min=0, max=16)  # weight of 1 / sqrt(1 + times chosen)
    w_visits: float = knob(1.0, min=0, max=16)  # weight of 1 / sqrt(1 + visits)
    w_recent: float = knob(1.0, min=0, max=16)  # bonus of a cell found in the last `recent_steps` steps
    recent_steps: int = knob(64, min=0)
    w_depth: float = knob(0.0, min=0, max=16)  # weight of the cell's steps from the start / the deepest cell's
    w_fail: float = knob(0.0, min=0, max=16)  # weight of (fails + 1) / (tries + 2) of the episodes started there
    w_mid: float = knob(0.0, min=0, max=16)  # weight of 4 (wins + 1)(fails + 1) / (tries + 2)^2 of them
    # what w_fail and w_mid count as a cell's win: "goal", an episode from it that reached the task's goal;
    # "milestone", one that reached the goal or a milestone its start did not hold (the next segment's goal; a swarm
    # jump's start holds what its source held then), so on a long quest, whose goal no episode from a cell far from
    # it reaches, starts still go where the policy fails each segment, as each milestone task's own do; without
    # progress-aware cells (no milestones, or progress "none"), "goal". A resumed run may change it: the counts stay
    win: str = knob("goal", choices=("goal", "milestone"), resume=CHANGE)
    # a cell's tries and wins (w_fail's, w_mid's and the edge's p) halve whenever its tries pass this many, so p
    # follows its latest W/2 to W episodes rather than all it ever had: a cell lost from long ago, before the policy
    # learned the way on from it, keeps at least 4/(W+2) (1 - 1/(W+2)) of an untried cell's mid weight instead of
    # falling toward 0 with every loss and so being drawn too seldom to show it is won now (0: all time)
    win_window: int = knob(0, min=0, max=DEPTH_CAP, resume=CHANGE)
    # progress: a cell is (the task's milestones held, its place) where the task names milestones, so a state
    # before a gate and one after it on the same tile are two cells; "none": the place alone
    progress: str = knob("auto", choices=("auto", "none"))
    w_progress: float = knob(0.0, min=0, max=16)  # weight of the milestones the cell holds / the most any holds
    # the frontier: this share of the starts from cells is drawn among the cells that hold the most milestones any
    # cell holds (by the same weights), so a long quest's newest segment gets a fixed part of the exploration however
    # many cells the segments behind it hold (w_progress only adds to each cell's weight); where the task names no
    # milestones every cell is on the frontier
    frontier: float = knob(0.0, min=0, max=1)
    # the reach: this share of the starts from cells is drawn among the cells that hold as many milestones as the
    # median env playing from the task's start holds now (read once per update), so the segment where the policy from
    # the start spends its time is trained while the frontier moves on: what is learned from cells must come back to
    # the start segment by segment (Go-Explore's robustifying, with the milestones as the steps back); frontier +
    # reach <= 1 (one draw); where the task names no milestones every cell is the reach's
    reach: float = knob(0.0, min=0, max=1)
    # how the reach picks its cells: "median", those at the median env's level; "held", every level's cells together
    # in proportion to the envs from the task's start that hold that many milestones (the same histogram), so a
    # segment where a third of them are stuck keeps a third of the reach's starts after the median has moved past it
    reach_by: str = knob("median", choices=("median", "held"))
    # the edge: this share of the starts from cells, after the frontier's and the reach's, is drawn among the cells
    # episodes have started from, by 4 p (1 - p) of their smoothed win rate p = (wins + 1) / (tries + 2) alone: most
    # where about half win, where the policy's competence ends, so each segment is learned backwards from its goal
    # (the backward algorithm of learning from a demonstration, with the archive's cells as the states). Where the
    # task names milestones it needs win = "milestone" (a cell's next milestone is its goal); frontier + reach +
    # edge <= 1
    edge: float = knob(0.0, min=0, max=1)
    # how the edge spreads its share: "cell", every tried cell by its own 4 p (1 - p); "level", the cells holding j
    # milestones together as much as those of any other level that has tried cells, each its share of its level by 4
    # p (1 - p), so a segment whose cells all lose still gets its part while other segments' cells sit near one half
    # (on the quest the brute's segment drew 653 of 76,574 cells' episodes in a minute under "cell"); where the
    # task names no milestones every cell is on one level and the two are the same
    edge_by: str = knob("cell", choices=("cell", "level"))
    # the entry: this share of the starts from cells, after the frontier's, the reach's and the edge's, is drawn among
    # each level's entry cells (of the cells holding j >= 1 milestones, those with the fewest steps from the task's
    # start: where a path first held its j-th), every level alike, so each segment is also played from where it
    # begins, as its milestone task is, whatever the win rate there (the edge gives a cell that never wins next to
    # no starts); frontier + reach + edge + entry <= 1; where the task names no milestones the usual draw stands
    entry: float = knob(0.0, min=0, max=1)
    # the step limit of an episode from an entry cell, whichever share drew it (0: `max_steps`, as any cell's), so a
    # segment longer than `max_steps` can be played through from its head, as its milestone task is; the patience
    # still ends it early
    entry_steps: int = knob(0, min=0)
    # the route: once an episode has reached the task's goal, the cells on the stored paths that led there (each
    # cell's parent is the cell its path came through); this share of the starts from cells is drawn among them
    # (by the same weights), so training walks the found way back toward the task's start (Go-Explore's
    # robustifying from a demonstration, with the archive's own paths) rather than from dead ends off it. With
    # milestones and win = "milestone" the stored paths to each level's entry cell (where a path first held its
    # j-th milestone) are on it too: each segment's found way, from the start to the frontier
    route: float = knob(0.0, min=0, max=1)
    # how the route's share is drawn among its cells: "weights", by the usual weights; "level", the route's cells
    # holding j milestones together as much as those of any other level on it, each its share of its level by 4 p
    # (1 - p) of its smoothed win rate (an untried cell as one at one half), so each segment's found way gets its
    # part and, within it, its starts gather where about half win: the backward algorithm along the archive's own
    # path (with win = "milestone" a cell's win is its next milestone). Where the task names no milestones every
    # cell is on one level. "back": each level on the route alike, within it only the window `back_cells` (the
    # level's deepest route cell not yet won and the route's cells up to `route_back` steps before it), each alike:
    # the backward algorithm's moving start, so a rare decision on the found way gets the level's whole part of the
    # route rather than its share among the route's cells that lose as often
    route_by: str = knob("weights", choices=("weights", "level", "back"))
    # `route_by` "back": the window's length in steps from the task's start (cells' stored paths), before the deepest
    # route cell of each level not yet won
    route_back: int = knob(8, min=0, max=1 << 20)
    # several processes: each update every process offers up to this many of its new or improved cells (emulator
    # states included) to the others, so a cell found on one GPU starts envs on all (0: each keeps its own)
    share: int = knob(0, min=0, max=65536)
    swarm: float = knob(0.0, min=0, max=1)  # share of the archive-started envs cloned at a milestone (0: off)
    swarm_on: str = knob("auto", choices=("auto", "area", "depth"))  # auto: area for RAM cells, else depth
    swarm_depth: int = knob(32, min=1)  # depth milestones: each time the deepest new cell passes another this many
    # explorers: this share of the envs (the last ones) act uniformly at random, start only from cells and feed
    # only the archive: Go-Explore's exploration beside the policy's, which heads where it has been rewarded. The
    # trainer learns from the other envs; their episodes alone are counted in the logs and the cells' tries
    explorers: float = knob(0.0, min=0, max=0.9)
    # where the cells' emulator states, observations and screens (about 79 KB a cell on the quest) are kept: the
    # GPU's memory, or "host": pinned host memory that the GPU's kernels read and write over the bus, so the
    # capacity is bounded by the host's memory (the same bits either way; the records stay on the device). Where
    # cells live is not what they are, so a resumed run may move them (--resume --set env.archive.store=host)
    store: str = knob("device", choices=("device", "host"), resume=CHANGE)
    # a recurrent policy's state at the start of an episode from a cell: "zero", as at every other start, or "cell":
    # the state the policy had when its path reached the cell, kept with the cell (R2D2 keeps recurrent states
    # with its replay), so an episode from a cell goes on as the one that found it would have (ppo with ppo.gru)
    memory: str = knob("zero", choices=("zero", "cell"))
    # the patience: an episode ends (truncated, so its value is bootstrapped) once this many steps pass without a new
    # milestone since its start or its latest one, so an env whose episode from the task's start is stuck on a
    # segment starts a new episode instead of idling out a long step limit: at a quest's 2,650 steps those
    # episodes held 61-87% of 65,536 envs, 11 minutes each (docs/training.md "The patience"); 0: off; where the task
    # names no milestones, off. Evals play to the task's own limit
    patience: int = knob(0, min=0, resume=CHANGE)  # (a resumed run may turn it on: it counts from the resume)

    def __post_init__(self) -> None:
        try:
            check_fields(self, "archive")
        except SettingError as exc:
            raise EnvConfigError(str(exc)) from None
        for name in ("w_chosen", "w_visits", "w_recent", "w_depth", "w_fail", "w_mid", "w_progress", "route",
                     "frontier", "reach", "edge", "entry"):
            setattr(self, name, float(getattr(self, name)))
        shares = self.frontier + self.reach + self.edge + self.entry
        if round(shares, 9) > 1:  # (rounded: 0.34 + 0.56 + 0.1 is 1)
            raise EnvConfigError(f"archive: frontier + reach + edge + entry is {shares:g}: their shares of the starts "
                                 "from cells add up to at most 1")
        if self.w_chosen + self.w_visits + self.w_recent == 0:
            raise EnvConfigError("archive: w_chosen, w_visits and w_recent are all 0 (a new cell could weigh 0)")

    @classmethod
    def from_dict(cls, d: dict | ArchiveConfig | None) -> ArchiveConfig:
        if isinstance(d, ArchiveConfig):
            return d
        if not isinstance(d, dict):
            raise EnvConfigError(f"archive must be a table, got {d!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise EnvConfigError(f"unknown archive setting(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)

    def same(self, saved: dict | None) -> bool:
        """Whether a checkpoint's archive settings are these (a knob the checkpoint predates counts as its
        default; where the cells live, a knob --resume may change, does not count)."""
        if not isinstance(saved, dict):
            return False
        placement = {f.name for f in fields(self) if f.metadata.get("resume") == CHANGE}
        mine = {k: v for k, v in self.to_dict().items() if k not in placement}
        defaults = ArchiveConfig().to_dict()
        saved = {k: v for k, v in saved.items() if k not in placement}
        return {**{k: defaults[k] for k in mine.keys() - saved.keys()}, **saved} == mine


def weight_table(device):
    """int64 [TABLE]: round(WEIGHT_ONE / sqrt(1 + c)), computed on the host (exact, then copied)."""
    import torch

    c = np.arange(TABLE, dtype=np.float64)
    return torch.tensor(np.rint(WEIGHT_ONE / np.sqrt(1.0 + c)).astype(np.int64), device=device)


def explorer_envs(archive: dict | ArchiveConfig | None, num_envs: int) -> int:
    """How many of `num_envs` envs are the archive's explorers (`explorers` share, rounded down: at least one env
    is left to learn from): the last ones."""
    if not archive:
        return 0
    return int(ArchiveConfig.from_dict(archive).explorers * num_envs)


def keeps_memory(archive: dict | ArchiveConfig | None) -> bool:
    """Whether an archive of these settings keeps a recurrent policy's state with its cells (memory = "cell")."""
    return bool(archive) and ArchiveConfig.from_dict(archive).memory == "cell"


def memory_bytes(archive: dict | ArchiveConfig | None, num_envs: int, samples: int, state_bytes: int) -> int:
    """Device bytes that memory = "cell" adds to a trainer whose policy state is `state_bytes`: the states kept
    with the cells, two per env for a step's new episodes (`start_memory`), and a stored next state for each of
    a rollout's `samples`; 0 without it."""
    if not keeps_memory(archive):
        return 0
    return state_bytes * (ArchiveConfig.from_dict(archive).capacity + 1 + 2 * num_envs + samples)


def hashed_bits(seed: int, ids, counter, salt: int, bits: int = U_BITS):
    """int64 [N]: `bits` (at most 63) well-mixed bits of (seed, salt, id, counter): splitmix64's finaliser of
    `counter * 2**24 + id` (distinct for ids below 2**24) xor a constant of (seed, salt); the same bits on every
    device. `ids`: int64 [N]; `counter`: an int64 tensor (per env, or a device scalar)."""
    m = (1 << 64) - 1
    base = (((seed & 0xFFFFFFFF) * 0x9E3779B97F4A7C15) ^ ((salt & 0xFFFFFFFF) * 0xD1B54A32D192ED03)) & m
    base = base - (1 << 64) if base >= 1 << 63 else base
    return mix64(((counter << 24) + ids) ^ base) & ((1 << bits) - 1)


class StateArchive:
    """The archive's device tensors and per-step operations (see the module docstring), and the env's start-state
    provider: `GameEnv(archive=...)` builds one (`for_env`) and calls it; it reads nothing of the env but the
    tensors the env passes. Rows 0..capacity-1 are cells (the first `count` used); row `capacity` is scratch for
    masked-out writes. `first_slot`: the slot of cell 0 in the env's slot store (the start slots come first).

    Per env it keeps where the running episode started: `off_steps` and `off_ret` (steps and return from the
    task's start at the episode's start), `from_archive` (it started from a cell), `start_row` (which cell;
    the scratch row when none) and `start_bits` (the milestones it held then, as bits: its cell's, after a swarm
    jump its source's then). With `memory = "cell"` (after `keep_memory`) each cell also keeps the recurrent
    policy's state of the path that reached it (`cell_mem`; its scratch row stays zero), from which
    `start_memory` gives each new episode's."""

    def __init__(self, cfg: ArchiveConfig, num_envs: int, first_slot: int, device, seed: int = 0,
                 area_keys: bool = True, max_steps: int = 1000, cell_rows=None, milestones=None, detail=None):
        import torch

        if num_envs > MAX_ENVS:
            raise EnvConfigError(f"the archive handles at most {MAX_ENVS} envs, got {num_envs}")
        self.torch, self.cfg, self.device = torch, cfg, device
        self.m, self.n, self.first, self.seed = cfg.capacity, num_envs, first_slot, int(seed)
        self.area_keys = bool(area_keys)  # the first key byte names an area (RAM cells)
        self.routes = cfg.route > 0  # keep parents, goal cells and the route (per-step work only where it is used)
        self.swarm_on = cfg.swarm_on if cfg.swarm_on != "auto" else ("area" if area_keys else "depth")
        if self.swarm_on == "area" and not area_keys:
            raise EnvConfigError("archive: swarm_on = 'area' needs RAM cells (the first cell byte names the area)")
        self.depth_width = max(1, math.ceil(max_steps / DEPTH_BINS))
        m, n, dev = self.m, num_envs, device
        i64 = dict(dtype=torch.int64, device=dev)
        self.keys = torch.full((m + 1,), INT64_MAX, **i64)
        self.sorted = torch.full((m,), INT64_MAX, **i64)
        self.order = torch.arange(m, **i64)
        self.count = torch.zeros((), **i64)
        self.clock = torch.zeros((), **i64)  # steps observed
        self.visits = torch.zeros(m + 1, **i64)
        self.steps = torch.zeros(m + 1, **i64)  # steps from the task's start of the stored path
        self.ret = torch.zeros(m + 1, dtype=torch.float32, device=dev)  # its return
        self.best = torch.full((m + 1,), -math.inf, dtype=torch.float32, device=dev)  # best return on reaching it
        self.chosen = torch.zeros(m + 1, **i64)
        self.found = torch.zeros(m + 1, **i64)  # the clock when found
        self.tries = torch.zeros(m + 1, **i64)  # episodes started from the cell that ended
        self.wins = torch.zeros(m + 1, **i64)  # and succeeded
        self.sums = torch.zeros(m + 1, dtype=torch.int32, device=dev)  # template distance sum of its first frame
        self.progress = torch.zeros(m + 1, **i64)  # milestones its state holds
        self.flags = torch.zeros(m + 1, **i64)  # which, as bits: an episode started there holds its screens again
        self.parent = torch.full((m + 1,), m, **i64)  # the cell its stored path came through (m: none)
        self.goal_hit = torch.zeros(m + 1, dtype=torch.bool, device=dev)  # an episode reached the goal from it
        self.on_route = torch.zeros(m + 1, dtype=torch.bool, device=dev)  # on a stored path to a goal_hit cell
        self.fresh = torch.zeros(m + 1, dtype=torch.bool, device=dev)  # inserted or improved since the last outbox
        self.area_seen = torch.zeros(256, dtype=torch.bool, device=dev)
        self.next_depth = torch.full((), cfg.swarm_depth, **i64)
        self.stats = torch.zeros(len(STAT_NAMES), **i64)
        self.depth_stats = torch.zeros((DEPTH_BINS, 2), **i64)
        self.p = cfg.p_start
        self.ema: float | None = None
        # per-step buffers
        self.save_mask = torch.zeros(n, dtype=torch.bool, device=dev)
        self.save_slot = torch.zeros(n, dtype=torch.int32, device=dev)
        self.swarm_dst = torch.zeros(n, dtype=torch.bool, device=dev)
        self.swarm_src = torch.zeros(n, dtype=torch.int32, device=dev)
        self.new = torch.zeros(n, dtype=torch.bool, device=dev)  # this step: envs in a cell the archive lacked
        self.env_ids = torch.arange(n, **i64)
        self.n_explore = explorer_envs(cfg, n)
        self.explorer = self.env_ids >= n - self.n_explore  # the explorers: the last n_explore envs
        self.counted = ~self.explorer  # the envs whose episodes are counted (the policy's)
        self._low_first = n - self.env_ids  # n..1: lower envs rank first in a priority's low bits
        self._ones = torch.ones(n, **i64)
        b = min(cfg.inserts, n)
        self.b = b
        self._earlier = torch.ones((b, b), dtype=torch.bool, device=dev).tril(-1)  # [i, j]: j ranks before i
        self._rows = torch.arange(m, **i64)
        self._table = weight_table(dev)
        self._coef = tuple(int(round(w * COEF_ONE)) for w in (cfg.w_chosen, cfg.w_visits, cfg.w_recent, cfg.w_depth,
                                                              cfg.w_fail, cfg.w_mid, cfg.w_progress))
        self._vals = torch.zeros(4, **i64)
        # the cell key (RAM cell bytes, or None: a coarse frame hash) and the per-env start records
        self.cell_rows = cell_rows
        self.cell_mode = "pixels" if cell_rows is None else "ram"
        # progress-aware cells: the task's milestones (a `goals.Milestones`: RAM flags as they hold now, screens as
        # the episode holds them)
        self.milestones = milestones if cfg.progress == "auto" else None
        if cfg.edge > 0 and self.milestones is not None and cfg.win != "milestone":
            raise EnvConfigError("archive: edge needs win = 'milestone' on a task with milestones (under 'goal' no "
                                 "cell's episode wins before the task's end, so the edge cannot tell where one ends)")
        self._held = torch.zeros(n, **i64)  # how many each env holds (at its last cell_keys)
        self._flags = torch.zeros(n, **i64)  # and which, as bits
        k = 0 if self.milestones is None else self.milestones.k
        self._bit = (torch.ones(k, 1, **i64) << torch.arange(k, **i64)[:, None]) if k else None
        self._hist = torch.zeros(k + 1, **i64)  # the envs playing from the task's start by the milestones they hold
        self.level = 0  # the reach: the milestones the median of them held at the last update's read
        self.level_share = torch.zeros(k + 1, **i64)  # reach_by "held": that read's histogram (on the device)
        self._even = torch.ones(k + 1, **i64)  # edge_by "level": every level alike
        self._edge_focus = cfg.edge > 0 and self.milestones is not None  # log `edge_focus` at each read
        self.level_stats = torch.zeros((k + 1, 2), **i64)  # cells' episodes ended by the milestones their start held,
        # and those that gained one it lacked: which segments training is solving
        self.entry_stats = torch.zeros((k + 1, 2), **i64)  # the same for episodes started from an entry cell (a
        # segment's head: `entry_cells`), whichever share drew it
        # a task's cell detail (RAM cells only): (a `goals.RamGoal`, the rows of its bytes), above the place's bytes
        self.detail = detail if cell_rows is not None else None
        self._detail_shift = 8 * (0 if cell_rows is None else int(cell_rows.numel()))
        self._place_bits = self._detail_shift + (0 if self.detail is None else 8 * int(self.detail[1].numel()) + 1)
        self.off_steps = torch.zeros(n, **i64)  # steps from the task's start at the episode's start
        self.off_ret = torch.zeros(n, dtype=torch.float32, device=dev)  # and the return
        self.from_archive = torch.zeros(n, dtype=torch.bool, device=dev)  # the episode started from a cell
        self.start_row = torch.full((n,), m, **i64)  # which cell (the scratch row: none)
        self.start_bits = torch.zeros(n, **i64)  # the milestones it held at its start, as bits (`win`)
        self.start_entry = torch.zeros(n, dtype=torch.bool, device=dev)  # its start cell was an entry cell then
        self.last_row = torch.full((n,), m, **i64)  # the last cell the env was in this episode (m: none yet)
        self.restore_mask = torch.zeros(n, dtype=torch.bool, device=dev)  # envs restored from a start slot or a cell
        self.cell_mem = None  # memory = "cell": float32 [m + 1, H] (`keep_memory`)

    def keep_memory(self, size: int) -> bool:
        """memory = "cell": keep a recurrent policy's state of `size` floats with every cell (the env passes each
        step's states to `step`, and the trainer starts each new episode's with `start_memory`). Whether it does."""
        if self.cfg.memory != "cell":
            return False
        torch = self.torch
        self.cell_mem = torch.zeros((self.m + 1, size), dtype=torch.float32, device=self.device)
        self._mem = torch.zeros((2, self.n, size), dtype=torch.float32, device=self.device)  # (no per-step alloc)
        return True

    def start_memory(self, memory):
        """float32 [N, H] (a buffer of the archive's, rewritten by the next call): the state each env's episode
        started with, where one started this step: its cell's kept state (zero from the task's start: the scratch
        row), after a swarm jump its source's `memory` (the policy's state of this step, float [N, H])."""
        torch, out = self.torch, self._mem[0]
        torch.index_select(self.cell_mem, 0, self.start_row, out=out)
        if self.cfg.swarm > 0:
            src = torch.index_select(memory.float(), 0, self.swarm_src, out=self._mem[1])
            torch.where(self.swarm_dst[:, None], src, out, out=out)
        return out

    @classmethod
    def for_env(cls, cfg: ArchiveConfig, task, layout, num_envs: int, first_slot: int, device, seed: int,
                max_steps: int, milestones=None) -> StateArchive:
        """The archive of an env of `task` (its `cells` bytes, else its novelty bytes, name a place, and its
        `cell_detail` adds bytes while a condition holds; none: frames; `milestones`: the task's, a
        `goals.Milestones`, for progress-aware cells)."""
        import torch

        addrs = (task.cells or task.novelty_ram) if task is not None else ()
        mode = cfg.cells if cfg.cells != "auto" else ("ram" if addrs else "pixels")
        if mode == "ram" and not addrs:
            raise EnvConfigError("archive cells = 'ram' needs a task that names cell bytes (cells = [...] in its pack)")
        rows = (torch.tensor(ram_rows(addrs, layout), dtype=torch.int64, device=device) if mode == "ram" else None)
        d = getattr(task, "cell_detail", None)
        detail = None if d is None or rows is None else (
            RamGoal(d.when, layout, device), torch.tensor(ram_rows(d.cells, layout), dtype=torch.int64, device=device))
        return cls(cfg, num_envs, first_slot, device, seed, area_keys=mode == "ram", max_steps=max_steps,
                   cell_rows=rows, milestones=milestones, detail=detail)

    def cell_keys(self, ram, latest, held=None):
        """int64 [N]: each env's cell now: its RAM cell bytes packed (`ram`: [bytes, N]), or a coarse hash of its
        newest frame (`latest`: [N, 72, W]); with progress-aware cells also the milestones it holds (`progress_key`:
        RAM flags as they hold now, screens as its episode holds them, `held`: bool [K, N])."""
        place = (ram_key(ram, self.cell_rows) if self.cell_rows is not None
                 else frame_key(latest, self.cfg.pixel_cell, self.cfg.pixel_levels))
        if self.detail is not None:  # where the condition holds: a set bit, then the detail bytes, above the place
            on, rows = self.detail
            place = place | ((((ram_key(ram, rows) << 1) | 1) * on.evaluate(ram)) << self._detail_shift)
        if self.milestones is None:
            return place
        held = self.milestones.flags(ram, held)
        self._held.copy_(held.sum(0))
        self._flags.copy_((held.to(self._bit.dtype) * self._bit).sum(0))
        return progress_key(place, self._flags, self._place_bits, len(held))

    @property
    def place_in_keys(self) -> bool:
        """Whether each key holds its RAM cell's bytes as they are from its low byte (area, x, y for a map's place),
        so a tool can read them back: RAM cells whose place and milestone bits fit `progress_key`'s exact form."""
        k = 0 if self.milestones is None else self.milestones.k
        return self.cell_mode == "ram" and (k == 0 or exact_progress(self._place_bits, k))

    def start_flags(self):
        """bool [K, N]: the milestones held by the cell each env's episode started from (none from the task's
        start; `start_bits`): what a screen milestone's start holds, which no state keeps."""
        return (self.start_bits[None] & self._bit) != 0

    # --- the env's calls ------------------------------------------------------------------------------------------
    def step(self, keys, steps, ep_return, sums, terminated, seed: int, memory=None):
        """The archive's share of one env step, before the episode ends are counted: offer every env's state (at
        `steps` and `ep_return` into its episode; `sums`: its template distance sum; `memory`: the policy's state
        that acts next from it, float [N, H], with memory = "cell") as its cell's; with swarming, pick the envs to
        clone (they end their episodes, truncated, and jump). Returns (save_mask, save_slot: the backend's masked
        save into the cells' slots, swarm destinations bool [N])."""
        eligible = ~terminated  # a goal state is never a start
        total = self.off_steps + steps
        mask, slot = self.observe(keys, total, self.off_ret + ep_return, sums, eligible, memory)
        if self.cfg.swarm > 0:
            self.milestone(keys, total, eligible, self.from_archive,
                           hashed_bits(seed, self.env_ids, self.clock, SALT_SWARM))
        return mask, slot, self.swarm_dst

    def ended(self, done, success, stalled=None) -> None:
        """Count the episodes that ended this step by where they started (`account`; a cell's win as `win` says),
        and those the patience ended (`stalled`, bool [N], where it is on); explorers' are not. The last cell of every
        episode that reached the goal (explorers' too) is a goal cell, where the route ends."""
        counted = done & self.counted if self.n_explore else done
        win = success
        if self.milestones is not None:
            gained = (self._flags & ~self.start_bits) != 0  # a milestone its start lacked
            if self.cfg.win == "milestone":
                win = success | gained
            if self._bit is not None:  # by the milestones the start held (`archive/level_gains`)
                level = self.start_flags().sum(0)
                ended = counted & self.from_archive
                pair = self.torch.stack([ended, ended & gained], 1).to(self.torch.int64)
                self.level_stats.index_add_(0, level, pair)
                entered = ended & self.start_entry  # (`archive/entry_gains`)
                self.entry_stats.index_add_(0, level, self.torch.stack([entered, entered & gained], 1).to(pair.dtype))
        self.account(counted, success, self.from_archive, self.off_steps, self.start_row, win)
        if stalled is not None:
            self.stats[10:11] += (stalled & counted).sum()
        if self.routes:
            self.goal_hit.index_fill_(0, self.torch.where(done & success, self.last_row, self.m), True)
            self.goal_hit[self.m:self.m + 1].fill_(False)

    def explore_actions(self, actions, num_actions: int, seed: int) -> None:
        """Write uniformly random actions (hashed from the seed, env and archive clock: the same bits on every
        device) into the explorers' rows of `actions` (an int tensor [N], in place)."""
        torch = self.torch
        bits = hashed_bits(seed, self.env_ids, self.clock, SALT_EXPLORE)
        pick = ((bits * num_actions) >> U_BITS).to(actions.dtype)
        torch.where(self.explorer, pick, actions, out=actions)

    def jumped(self, dst, steps, ep_return) -> None:
        """Swarm destinations, just cloned from their sources (the clone copied these records too): their
        offsets add the source's progress in its episode, their new episode counts as from the archive and starts
        holding the milestones the source holds now."""
        self.off_steps.add_(steps * dst)
        self.off_ret.add_(ep_return * dst)
        self.from_archive |= dst
        torch = self.torch
        torch.where(dst, self._flags.gather(0, self.swarm_src.long()), self.start_bits, out=self.start_bits)

    def starts(self, done, slots, seed: int, episodes, slot_sums):
        """Where the envs whose episodes ended (`done`, swarm destinations left out: they jumped) start again:
        the task's start slot `slots` (int64 [N]) or a cell. Records each start's offsets. Returns (the restore
        mask, the slot of each env, int64 [N]; the start's template distance sum, int32 [N] (`slot_sums` per
        start slot); whether it is a cell)."""
        torch = self.torch
        r = torch.logical_and(done, ~self.swarm_dst, out=self.restore_mask)
        u = hashed_bits(seed, self.env_ids, episodes, SALT_START, 2 * U_BITS)  # two uniforms in one hash
        u_route = hashed_bits(seed, self.env_ids, episodes, SALT_ROUTE) if self.routes else None
        shares = self.cfg.frontier + self.cfg.reach + self.cfg.edge + self.cfg.entry > 0
        u_share = hashed_bits(seed, self.env_ids, episodes, SALT_SHARE) if shares else None
        first = self.entry_cells() if self._bit is not None else None  # (once a step: `choose` draws among them)
        use, row = self.choose(r, u & ((1 << U_BITS) - 1), u >> U_BITS, u_route, u_share, first)
        slot = torch.where(use, row + self.first, slots)
        sums = torch.where(use, self.sums.gather(0, row), slot_sums[slots])
        torch.where(r, self.steps.gather(0, row) * use, self.off_steps, out=self.off_steps)
        torch.where(r, self.ret.gather(0, row) * use, self.off_ret, out=self.off_ret)
        torch.where(r, use, self.from_archive, out=self.from_archive)
        torch.where(r, row, self.start_row, out=self.start_row)  # `row` is the scratch row where not `use`
        torch.where(r, self.flags.gather(0, row) * use, self.start_bits, out=self.start_bits)
        if first is not None:  # (row m, the scratch row, is no entry cell)
            entry = first.gather(0, row.clamp(max=self.m - 1)) & use
            torch.where(r, entry, self.start_entry, out=self.start_entry)
        if self.routes:
            torch.where(r, row, self.last_row, out=self.last_row)
        return r, slot, sums, use

    def env_records(self) -> list:
        """The per-env tensors an env clone copies from its source."""
        return [self.off_steps, self.off_ret, self.from_archive, self.start_row, self.last_row, self.start_bits,
                self.start_entry]

    # --- per step ---------------------------------------------------------------------------------------------
    def lookup(self, keys):
        """(found bool [N], row int64 [N]: the cell's row, or the scratch row when not found)."""
        torch = self.torch
        pos = torch.searchsorted(self.sorted, keys).clamp_(max=self.m - 1)
        found = self.sorted.gather(0, pos) == keys
        return found, torch.where(found, self.order.gather(0, pos), self.m)

    def observe(self, keys, steps, returns, sums, eligible, memory=None):
        """One step of every env: `keys` int64 [N] (its cell), `steps` int64 [N] (steps from the task's start),
        `returns` float32 [N] (return since the task's start), `sums` int32 [N] (template distance sum of its
        frame), `eligible` bool [N] (may be stored), `memory` float [N, H] or None (its policy state, kept with
        memory = "cell"). Updates the records and returns (mask bool [N], slot int32 [N]) for `save_slots`: the
        envs whose state becomes a cell's, with distinct slots."""
        torch, m = self.torch, self.m
        self.clock += 1
        keys = keys.clamp(max=INT64_MAX - 1)
        found, row = self.lookup(keys)
        self.visits.index_add_(0, row, self._ones)
        self.best.scatter_reduce_(0, row, returns, "amax")
        better = found & (steps < self.steps.gather(0, row))
        torch.logical_and(eligible, ~found, out=self.new)
        room = self.count < m
        cand = (self.new & room) | (eligible & better)
        prio = torch.where(found, 0, 1 << 60) | ((STEP_CAP - steps.clamp(0, STEP_CAP)) << 24) | (self._low_first - 1)
        prio.masked_fill_(~cand, -1)
        top, env_b = torch.topk(prio, self.b)
        valid = top >= 0
        key_b, found_b, row_b = keys[env_b], found[env_b], row[env_b]
        dup = ((key_b[:, None] == key_b[None, :]) & self._earlier & valid[None, :]).any(1)
        held = (self._held[env_b], self._flags[env_b]) if self.milestones is not None else None
        mem_b = memory.index_select(0, env_b) if self.cell_mem is not None and memory is not None else None
        slot_b, write = self._admit(valid & ~dup, found_b, row_b, key_b, steps[env_b], returns[env_b], sums[env_b],
                                    held, (self.new & ~room).sum(), self.last_row[env_b] if self.routes else None,
                                    mem_b)
        self.save_mask.zero_()
        self.save_mask[env_b] = write
        self.save_slot[env_b] = (slot_b + self.first).to(torch.int32)
        if self.routes:
            _, row = self.lookup(keys)  # each env's cell now, new ones included (m: none, the archive was full)
            torch.where(row < m, row, self.last_row, out=self.last_row)
        return self.save_mask, self.save_slot

    def _admit(self, keep, found_b, row_b, key_b, steps_b, ret_b, sums_b, held_b, dropped, parent_b, mem_b=None):
        """Write the candidates `keep` (distinct keys; found ones at their row `row_b`, new ones into the next free
        rows while there is room) with their records, the cell each path came through (`parent_b`, with routes;
        m: none) and the policy state each path reached it with (`mem_b`, with memory = "cell"); count them.
        Returns (row of each candidate, the scratch row where not written; written bool). Rows written are `fresh`
        (offered to other processes: `outbox`)."""
        torch, m = self.torch, self.m
        new_b = keep & ~found_b
        slot_new = self.count + torch.cumsum(new_b.to(torch.int64), 0) - 1
        fits = slot_new < m
        new_ok = new_b & fits
        write = (keep & found_b) | new_ok
        slot_b = torch.where(write, torch.where(found_b, row_b, slot_new), m)
        self.keys[slot_b] = key_b
        self.steps[slot_b] = steps_b
        self.ret[slot_b] = ret_b
        self.sums[slot_b] = sums_b
        if held_b is not None:  # (how many milestones, which)
            self.progress[slot_b], self.flags[slot_b] = held_b
        if mem_b is not None:  # (the scratch row takes what is not written: zero again, as a start reads it)
            self.cell_mem[slot_b] = mem_b.float()
            self.cell_mem[m:m + 1].zero_()
        if parent_b is not None:
            self.parent[slot_b] = torch.where(parent_b == slot_b, m, parent_b)
            self.parent[m:m + 1].fill_(m)
        self.fresh[slot_b] = write
        fresh = torch.where(new_ok, slot_b, m)
        self.found[fresh] = self.clock
        # index_fill_ and fill_ take the value as a launch argument: assigning a Python number would copy it from
        # host memory, a wait for the device every env-step
        self.chosen.index_fill_(0, fresh, 0)
        self.visits.index_fill_(0, fresh, 1)
        self.best[fresh] = ret_b
        self.tries.index_fill_(0, fresh, 0)
        self.wins.index_fill_(0, fresh, 0)
        self.keys[m:m + 1].fill_(INT64_MAX)
        added = new_ok.sum()
        self.count += added
        torch.stack([added, (write & found_b).sum(), (new_b & ~fits).sum() + dropped], out=self._vals[:3])
        self.stats[:3] += self._vals[:3]
        torch.sort(self.keys[:m], stable=True, out=(self.sorted, self.order))
        return slot_b, write

    # --- sharing across processes (once per update; docs/training.md "Several GPUs") ------------------------------
    def outbox(self, limit: int):
        """Up to `limit` rows inserted or improved since the last `outbox` (new cells first, then by steps from the
        start): (rows int64 [limit], valid bool [limit], records int64 [limit, 6]: key, steps, return's float32 bits,
        template sum, milestones held, their bits). Fixed shapes, no host read; the rows stop being fresh."""
        torch, m = self.torch, self.m
        prio = torch.where(self.fresh[:m], (1 << 40) - self.steps[:m].clamp(0, STEP_CAP), -1)
        top, rows = torch.topk(prio, min(limit, m))
        valid = top >= 0
        self.fresh.zero_()
        rec = torch.stack([self.keys[rows], self.steps[rows], self.ret[rows].view(torch.int32).to(torch.int64),
                           self.sums[rows].to(torch.int64), self.progress[rows], self.flags[rows]], 1)
        return rows, valid, rec

    def merge(self, valid, rec, memory=None):
        """Cells of other processes (`outbox`'s valid and records, concatenated; `memory`: their `cell_mem` rows
        with memory = "cell"): each becomes a cell here where its key is new (while there is room) or it reaches
        the cell in fewer steps; among repeats of one key the fewest steps win. Returns (row of each, written
        bool): the caller copies their states into those rows."""
        torch = self.torch
        keys, steps = rec[:, 0].contiguous(), rec[:, 1]  # (searchsorted wants contiguous keys)
        found, row = self.lookup(keys)
        cand = valid & (~found | (steps < self.steps.gather(0, row)))
        # one per key, the fewest steps: sort by (key, steps), keep each key's first
        order = torch.argsort(torch.where(cand, steps, STEP_CAP + 1), stable=True)
        order = order[torch.argsort(keys[order], stable=True)]
        k_sorted = keys[order]
        first = torch.ones_like(cand)
        first[order[1:]] = k_sorted[1:] != k_sorted[:-1]
        keep = cand & first
        ret = rec[:, 2].to(torch.int32).view(torch.float32)
        held = (rec[:, 4], rec[:, 5]) if self.milestones is not None else None
        return self._admit(keep, found, row, keys, steps, ret, rec[:, 3].to(torch.int32), held, 0,
                           torch.full_like(row, self.m) if self.routes else None,  # another's path: no parent here
                           memory if self.cell_mem is not None else None)

    def weights(self):
        """int64 [capacity]: each cell's selection weight (0 for empty rows), fixed point."""
        torch, m, t = self.torch, self.m, self._table
        a, b, c, d, e, f, g = self._coef
        used = self._rows < self.count
        w = a * t[self.chosen[:m].clamp(max=TABLE - 1)] + b * t[self.visits[:m].clamp(max=TABLE - 1)]
        if c:
            recent = (self.clock - self.found[:m]) < self.cfg.recent_steps
            w = w + (c * WEIGHT_ONE) * recent.to(torch.int64)
        if d:  # integer division by the deepest cell's steps: the same bits on every device
            steps = torch.where(used, self.steps[:m], 0).clamp_(max=DEPTH_CAP)
            w = w + torch.div(d * WEIGHT_ONE * steps, steps.max().clamp(min=1), rounding_mode="floor")
        if e:  # the smoothed failure rate of the episodes started from the cell (1/2 before any ended)
            tries, fails = self._tries_fails()
            w = w + torch.div(e * WEIGHT_ONE * (fails + 1), tries + 2, rounding_mode="floor")
        if f:
            w = w + self.mid_weights(f)
        if g:  # the milestones a cell holds against the most any cell holds: the frontier of the quest
            held = torch.where(used, self.progress[:m], 0)
            w = w + torch.div(g * WEIGHT_ONE * held, held.max().clamp(min=1), rounding_mode="floor")
        return torch.where(used, w, 0)

    def choose(self, done, u_start, u_cell, u_route=None, u_share=None, first=None):
        """For envs whose episode ended (`done`): (from_archive bool [N], row int64 [N]). `u_start`, `u_cell`, `u_route`
        (with `route` > 0), `u_share` (with `frontier`, `reach`, `edge` or `entry` > 0): int64 [N] uniform in [0,
        2**U_BITS) (hashed per env and episode); `first`: `entry_cells()` where the caller has them. Where `u_share`
        falls in the first `frontier` of its range a cell start is drawn among the frontier's cells, in the next `reach`
        among the reach's, each by the same weights, in the next `edge` among the cells started from by `mid_weights`
        alone (`edge_by` "level": each level alike, `level_weights`), in the next `entry` among the levels' entry cells
        (`entry_cells`), each level alike; then with probability `route` among the route's cells (`on_route`) by the
        same weights (`route_by` "level": each level alike, by `mid_weights` within it; "back": each level's
        `back_cells` alike); each where any of its cells
        weighs more than 0. Counts the chosen cells."""
        torch, m = self.torch, self.m
        w = self.weights()
        cdf = torch.cumsum(w, 0)
        total = cdf[-1]
        target = (u_cell * total) >> U_BITS
        row = torch.searchsorted(cdf, target, right=True).clamp_(max=m - 1)
        f, r = self.cfg.frontier, self.cfg.reach
        if u_share is not None and f > 0:
            row = self._draw_among(w, self.frontier_cells(), u_cell, u_share, 0.0, f, row)
        if u_share is not None and r > 0 and self.cfg.reach_by == "held":
            row = self._draw_among(self.held_weights(w), self._rows < self.count, u_cell, u_share, f, f + r, row)
        elif u_share is not None and r > 0:
            row = self._draw_among(w, self.reach_cells(), u_cell, u_share, f, f + r, row)
        if u_share is not None and self.cfg.edge > 0:  # the cells started from, by 4 p (1 - p) alone
            tried = self.tried_cells()
            w_edge = self.mid_weights()
            if self.cfg.edge_by == "level":  # every level with tried cells alike
                w_edge = self.level_weights(w_edge, tried, self._even)
            row = self._draw_among(w_edge, tried, u_cell, u_share, f + r, f + r + self.cfg.edge, row)
        if u_share is not None and self.cfg.entry > 0:  # each level's first cells, every level alike
            lo = f + r + self.cfg.edge
            first = self.entry_cells() if first is None else first
            w_entry = self.level_weights(first.long(), first, self._even)
            row = self._draw_among(w_entry, first, u_cell, u_share, lo, lo + self.cfg.entry, row)
        if self.routes and u_route is not None:
            if self.cfg.route_by == "back":  # each level's window alike, its cells alike
                on = self.back_cells()
                w_route = self.level_weights(on.long(), on, self._even)
            else:
                on = self.on_route[:m]
                w_route = self.level_weights(self.mid_weights(), on, self._even) if self.cfg.route_by == "level" else w
            row = self._draw_among(w_route, on, u_cell, u_route, 0.0, self.cfg.route, row)
        start = u_start >= int(self.p * (1 << U_BITS))
        if self.n_explore:  # explorers start from a cell whenever the archive holds one
            start |= self.explorer
        use = done & start & (total > 0)
        row = torch.where(use, row, m)
        self.chosen.index_add_(0, row, self._ones)
        depth = self.steps.gather(0, row)
        torch.stack([(depth * use).sum(), use.sum()], out=self._vals[:2])
        self.stats[8:10] += self._vals[:2]
        return use, row

    def mid_weights(self, coef: int = 1, tries_fails=None):
        """int64 [capacity]: `coef` x 4 p (1 - p) of each cell's smoothed win rate p = (wins + 1) / (tries + 2),
        fixed point (WEIGHT_ONE is 1): 1 before any episode from it ended and at one half, near 0 at 0 or 1.
        `tries_fails`: `_tries_fails()` where the caller has it."""
        torch = self.torch
        tries, fails = self._tries_fails() if tries_fails is None else tries_fails
        win = torch.div(WEIGHT_ONE * (tries - fails + 1), tries + 2, rounding_mode="floor")
        fail = torch.div(WEIGHT_ONE * (fails + 1), tries + 2, rounding_mode="floor")
        return torch.div(4 * coef * win * fail, WEIGHT_ONE, rounding_mode="floor")

    def tried_cells(self):
        """bool [capacity]: the used cells an episode has started from (the edge's cells)."""
        return (self._rows < self.count) & (self.tries[:self.m] > 0)

    def edge_focus(self):
        """int64 [2 x levels]: for each level j, the edge's weights (`mid_weights`) of the tried cells holding j
        milestones, summed, then the part of that sum on the cells whose smoothed win rate is at least 1/8: where
        within the level the edge draws (`archive/edge_won/J`). Under `edge_by` "level" each level's weights are
        rescaled, not their ratio."""
        torch, m = self.torch, self.m
        tried = self.tried_cells()
        tries, fails = self._tries_fails()
        won = 8 * (tries - fails + 1) >= tries + 2
        w = torch.where(tried, self.mid_weights(tries_fails=(tries, fails)), 0)
        lv = torch.where(tried, self.progress[:m], 0).clamp_(0, len(self._even) - 1)
        sums = torch.zeros((len(self._even), 2), dtype=torch.int64, device=self.device)
        sums.index_add_(0, lv, torch.stack([w, torch.where(won, w, 0)], 1))
        return sums.reshape(-1)

    def _tries_fails(self):
        """(tries, fails) of each cell's episodes, int64 [capacity], capped."""
        tries = self.tries[:self.m].clamp(max=DEPTH_CAP)
        return tries, tries - self.wins[:self.m].clamp(max=DEPTH_CAP)

    def frontier_cells(self):
        """bool [capacity]: the used cells that hold the most milestones any cell holds (every used cell where the
        task names none)."""
        held = self.torch.where(self._rows < self.count, self.progress[:self.m], -1)
        return held == held.max()

    def entry_cells(self):
        """bool [capacity]: each level's entry cells, the used cells holding j >= 1 milestones with the fewest steps
        from the task's start of any cell holding j (none where the task names no milestones)."""
        torch, m = self.torch, self.m
        used = self._rows < self.count
        lv = torch.where(used, self.progress[:m], 0).clamp_(0, len(self._even) - 1)
        steps = torch.where(used, self.steps[:m], STEP_CAP + 1)
        least = torch.full_like(self._even, STEP_CAP + 1).scatter_reduce_(0, lv, steps, "amin")
        return used & (lv > 0) & (steps == least.gather(0, lv))

    def _route_levels(self):
        """(on, lv, deepest): the route's cells (bool [capacity]), their levels (the milestones held; 0 off the route)
        and, per level, the steps from the task's start of its deepest route cell not yet won (untried, or its
        smoothed win rate (wins + 1) / (tries + 2) under one half), -1 where it has none (int64 [levels])."""
        torch, m = self.torch, self.m
        on = self.on_route[:m]
        tries, fails = self._tries_fails()
        open_ = on & ((tries == 0) | (2 * (tries - fails + 1) < tries + 2))
        lv = torch.where(on, self.progress[:m], 0).clamp_(0, len(self._even) - 1)
        deepest = torch.full_like(self._even, -1).scatter_reduce_(0, lv, torch.where(open_, self.steps[:m], -1),
                                                                  "amax")
        return on, lv, deepest

    def back_cells(self, route_levels=None):
        """bool [capacity]: the route's backward window (`route_by` "back"): in each level, its deepest route cell not
        yet won (`_route_levels`; deepest: the most steps from the task's start) and the level's route cells up to
        `route_back` steps before it. A level whose route cells have all won has none; a cell is won once its episodes
        have won at least as often as they lost, so the window walks back from each milestone as the policy learns
        the way to it. `route_levels`: `_route_levels()` where the caller has it."""
        on, lv, deepest = self._route_levels() if route_levels is None else route_levels
        steps, d = self.steps[:self.m], deepest.gather(0, lv)
        return on & (d >= 0) & (steps <= d) & (steps >= d - self.cfg.route_back)

    def route_focus(self):
        """int64 [4 x levels]: for each level j, the route's cells holding j milestones, the steps from the task's
        start of its deepest one not yet won, -1 where none (`archive/route_level_cells`, `archive/back_at`: where
        `route_by` "back" puts the level's window), and the episodes its window's cells (`back_cells`) have had and
        won so far (`archive/back_tries`, `archive/back_wins`: a window held in place by a cell that keeps losing
        shows as tries that grow with few wins)."""
        torch = self.torch
        levels = on, lv, deepest = self._route_levels()
        count = torch.zeros_like(self._even).index_add_(0, lv, on.long())
        window = self.back_cells(levels)
        tries = torch.zeros_like(self._even).index_add_(0, lv, torch.where(window, self.tries[:self.m], 0).long())
        wins = torch.zeros_like(self._even).index_add_(0, lv, torch.where(window, self.wins[:self.m], 0).long())
        return torch.stack([count, deepest, tries, wins], 1).reshape(-1)

    def reach_cells(self):
        """bool [capacity]: the used cells that hold `level` milestones (every used cell where the task names
        none)."""
        return (self._rows < self.count) & (self.progress[:self.m] == self.level)

    def held_weights(self, w):
        """int64 [capacity]: the weights `w` of the used cells rescaled so that the cells holding j milestones together
        weigh in proportion to `level_share[j]` (the envs from the task's start that held j at the last read;
        `level_weights`); before any read every weight is 0 (the usual draw stands)."""
        return self.level_weights(w, self._rows < self.count, self.level_share)

    def level_weights(self, w, on, share):
        """int64 [capacity]: the weights `w` of the cells `on` (bool [capacity]; 0 elsewhere) rescaled so that the
        cells holding j milestones together weigh in proportion to `share[j]` (int64 [levels]), each cell its share of
        its level's weight; levels where no cell `on` weighs above 0 give their share to the others. Integer math, the
        same bits on every device: a level's cells share 2**28 (a weight under 2**23 shifted stays under 2**51), the
        levels 2**12, so the total stays under 2**40 and the draw's product under 2**60."""
        torch = self.torch
        top = len(share) - 1
        lv = torch.where(on, self.progress[:self.m], 0).clamp_(0, top)
        wu = torch.where(on, w, 0)
        per_level = torch.zeros_like(share).index_add_(0, lv, wu)
        frac = torch.div(wu << 28, per_level.gather(0, lv).clamp(min=1), rounding_mode="floor")
        part = torch.div(share << 12, share.sum().clamp(min=1), rounding_mode="floor")
        return frac * part.gather(0, lv)

    def _draw_among(self, w, on, u_cell, u_take, lo: float, hi: float, row):
        """`row`, except where `u_take` is in [lo, hi) (of 2**U_BITS): a row drawn among the cells `on` (bool
        [capacity]) by the weights `w` with `u_cell`, where any of them weighs more than 0."""
        torch = self.torch
        cdf = torch.cumsum(w * on, 0)
        total = cdf[-1]
        pick = torch.searchsorted(cdf, (u_cell * total) >> U_BITS, right=True).clamp_(max=self.m - 1)
        take = (u_take >= int(lo * (1 << U_BITS))) & (u_take < int(hi * (1 << U_BITS)))
        return torch.where(take & (total > 0), pick, row)

    def milestone(self, keys, steps, eligible, from_archive, u):
        """Swarming, after `observe` of the same step: (dst bool [N], src int32 [N]). When an env reaches a new
        area (its key's first byte; RAM cells) or a new cell at least at the next depth mark (steps from the
        task's start), it is the source, and each env whose episode started in the archive is a destination
        with probability `swarm` (`u`: int64 [N] uniform in [0, 2**U_BITS), hashed). One milestone a step (the
        deepest, then the lowest env). Also kept in `swarm_dst`/`swarm_src`."""
        torch, n = self.torch, self.n
        if self.swarm_on == "area":
            area = keys & 0xFF
            hit = eligible & ~self.area_seen.gather(0, area)
            score = torch.where(hit, self._low_first, 0)
        else:
            hit = self.new & (steps >= self.next_depth)
            score = torch.where(hit, (steps.clamp(0, STEP_CAP) << 24) | self._low_first, 0)
        best, src = score.max(0, keepdim=True)
        fire = best > 0
        if self.swarm_on == "area":
            a = area.index_select(0, src)
            self.area_seen.index_put_((a,), self.area_seen.index_select(0, a) | fire)
        else:
            self.next_depth.copy_(torch.where(fire, steps.index_select(0, src) + self.cfg.swarm_depth,
                                              self.next_depth).view(()))
        take = u < int(self.cfg.swarm * (1 << U_BITS))
        torch.logical_and(take & from_archive & eligible & (self.env_ids != src), fire, out=self.swarm_dst)
        self.swarm_src.copy_(src.to(torch.int32).expand(n))
        self.stats[3:4] += fire
        return self.swarm_dst, self.swarm_src

    def mark_areas(self, keys) -> None:
        """Areas of `keys` count as seen (the start's, so reaching it is no milestone)."""
        self.area_seen.index_fill_(0, keys & 0xFF, True)

    def account(self, done, success, from_archive, start_steps, start_row, win=None) -> None:
        """Episodes that ended this step, by where they started: the task's start or an archive cell (its depth
        `start_steps` and its row `start_row`, int64 [N]: the cell's tries and wins, a win where `win`, bool [N],
        default `success`; the scratch row `capacity`, never weighed, takes the rest)."""
        torch, m = self.torch, self.m
        d_arch = done & from_archive
        d_start = done & ~from_archive
        torch.stack([d_start.sum(), (d_start & success).sum(), d_arch.sum(), (d_arch & success).sum()],
                    out=self._vals)
        self.stats[4:8] += self._vals
        bins = (start_steps // self.depth_width).clamp_(0, DEPTH_BINS - 1)
        pair = torch.stack([d_arch, d_arch & success], 1).to(torch.int64)
        self.depth_stats.index_add_(0, bins, pair)
        self.tries.index_add_(0, torch.where(d_arch, start_row, m), self._ones)
        self.wins.index_add_(0, torch.where(d_arch & (success if win is None else win), start_row, m), self._ones)
        if self.cfg.win_window:  # the counts of a cell past the window halve (wins <= tries stays true)
            half = (self.tries > self.cfg.win_window).to(torch.int64)
            self.tries.bitwise_right_shift_(half)
            self.wins.bitwise_right_shift_(half)

    # --- once per update ----------------------------------------------------------------------------------------
    def mark_route(self) -> None:
        """`on_route`: the goal cells (and with milestones and `win` "milestone", each level's entry cells,
        `entry_cells`) and every cell on their stored paths (the parents' chains), found by pointer doubling in
        ceil(log2(capacity + 1)) rounds of fixed shape (a stored path's parent always has fewer steps from the
        task's start, so the chains have no cycles)."""
        torch, m = self.torch, self.m
        on = self.goal_hit.clone()
        if self._bit is not None and self.cfg.win == "milestone":  # a cell's win is its next milestone: the paths
            on[:m] |= self.entry_cells()  # to each level's entry cell (where a path first held j) end routes too
        jump = self.parent.clone()
        for _ in range(max(1, (m + 1).bit_length())):  # on: the cells within 2**k links of a goal cell
            on.index_fill_(0, torch.where(on, jump, m), True)
            on[m:m + 1].fill_(False)
            jump = jump.gather(0, jump)
        self.on_route.copy_(on)

    def stat_vector(self):
        """int64 device tensor of the counters since the last read (for `read_stats`, or to read together with
        other device totals in one transfer). Marks the route first (`mark_route`), with routes."""
        torch = self.torch
        m = self.m
        if self.routes:
            self.mark_route()
        used = self._rows < self.count
        extra = torch.stack([self.count, torch.where(used, self.steps[:m], 0).max(), (self.chosen[:m] > 0).sum(),
                             self._areas(used), self.on_route[:m].sum(), self.frontier_cells().sum()])
        # the envs playing from the task's start, by the milestones they hold now (those that restarted on the last
        # step hold their ended episode's until their next step: left out)
        hist = self._hist.zero_()
        playing = self.counted & ~self.from_archive & ~self.restore_mask
        hist.index_add_(0, self._held.clamp(0, len(hist) - 1), playing.to(torch.int64))
        parts = [self.stats, extra, self.depth_stats.reshape(-1), hist, self.level_stats.reshape(-1),
                 self.entry_stats.reshape(-1)]
        if self._edge_focus:
            parts.append(self.edge_focus())
        if self.routes:
            parts.append(self.route_focus())
        return torch.cat(parts)

    def read_stats(self, clear: bool = True, vals: list | None = None) -> dict:
        """The counters since the last call as `archive/...` log entries: `vals`, the host values of
        `stat_vector()` when the caller read it, else one device read here. With `clear`, the counters restart and
        the start schedule moves: `p = p_start + (1 - p_start) * EMA(success from the task's start)`, and the reach
        `level` becomes the milestones held by the median env playing from the task's start."""
        vals = self.stat_vector().tolist() if vals is None else [int(v) for v in vals]
        s = dict(zip(STAT_NAMES, vals[:len(STAT_NAMES)], strict=True))
        cells, max_depth, ever_chosen, areas, route, front = vals[len(STAT_NAMES):len(STAT_NAMES) + 6]
        depth = vals[len(STAT_NAMES) + 6:len(STAT_NAMES) + 6 + 2 * DEPTH_BINS]
        at = len(STAT_NAMES) + 6 + 2 * DEPTH_BINS
        held = [int(x) for x in vals[at:at + len(self._hist)]]
        by_level = [int(x) for x in vals[at + len(self._hist):at + 3 * len(self._hist)]]
        by_entry = [int(x) for x in vals[at + 3 * len(self._hist):at + 5 * len(self._hist)]]
        by_edge = [int(x) for x in vals[at + 5 * len(self._hist):at + 7 * len(self._hist)]]
        at_route = at + (7 if self._edge_focus else 5) * len(self._hist)
        by_route = [int(x) for x in vals[at_route:at_route + 4 * len(self._hist)]]
        level = median_level(held)
        eps_s, eps_a = s["start_episodes"], s["archive_episodes"]
        from_start = s["start_successes"] / eps_s if eps_s else None
        out = {"archive/cells": int(cells), "archive/inserted": int(s["inserted"]),
               "archive/improved": int(s["improved"]), "archive/dropped": int(s["dropped"]),
               "archive/swarms": int(s["swarms"]), "archive/p_start": self.p, "archive/max_depth": int(max_depth),
               "archive/cells_chosen": int(ever_chosen), "archive/chosen_depth":
                   s["chosen_depth_sum"] / s["chosen"] if s["chosen"] else None,
               "archive/start_share": eps_s / (eps_s + eps_a) if eps_s + eps_a else None,
               "success_from_start": from_start,
               "success_from_archive": s["archive_successes"] / eps_a if eps_a else None,
               "start_episodes": int(eps_s),
               "archive/depth_episodes": [int(x) for x in depth[0::2]],
               "archive/depth_successes": [int(x) for x in depth[1::2]]}
        if self.area_keys:
            out["archive/areas"] = int(areas)
        if self.routes:
            out["archive/route_cells"] = int(route)
            # the route's cells by the milestones they hold, and where each level's deepest one not yet won is
            out["archive/route_level_cells"] = by_route[0::4]
            out["archive/back_at"] = [x if x >= 0 else None for x in by_route[1::4]]
            # the episodes each level's backward window has had and won (its cells' counts, whatever route_by is)
            out["archive/back_tries"], out["archive/back_wins"] = by_route[2::4], by_route[3::4]
        if self.milestones is not None:  # the cells holding the most milestones (the frontier's cells); the reach
            out["archive/frontier_cells"] = int(front) if cells else 0
            out["archive/reach_level"] = level
            out["archive/start_held"] = held  # the envs playing from the task's start by the milestones they hold
            # the cells' episodes that ended, by the milestones their start held, and those that gained one
            eps_l, gains_l = by_level[0::2], by_level[1::2]
            out["archive/level_episodes"], out["archive/level_gains"] = eps_l, gains_l
            out.update({f"archive/level_gain/{j}": g / e
                        for j, (e, g) in enumerate(zip(eps_l, gains_l, strict=True)) if e})
            # ... of them, those that started from an entry cell (a segment's head, as a quest_mN task starts)
            eps_e, gains_e = by_entry[0::2], by_entry[1::2]
            out["archive/entry_episodes"], out["archive/entry_gains"] = eps_e, gains_e
            out.update({f"archive/entry_gain/{j}": g / e
                        for j, (e, g) in enumerate(zip(eps_e, gains_e, strict=True)) if e})
            if self._edge_focus:  # the edge's weights by level, and their part on cells that win 1 in 8 or more
                w_all, w_won = by_edge[0::2], by_edge[1::2]
                out["archive/edge_weights"], out["archive/edge_won_weights"] = w_all, w_won
                out.update({f"archive/edge_won/{j}": g / e for j, (e, g) in enumerate(zip(w_all, w_won, strict=True))
                            if e})
            if self.cfg.patience:  # the episodes the patience ended (not those that met the step limit too)
                out["archive/patience_ends"] = int(s["patience_ends"])
        if clear:
            self.level = self.level if level is None else level
            if level is not None:
                self.level_share.copy_(self.torch.tensor(held, dtype=self.torch.int64))
            self.stats.zero_()
            self.depth_stats.zero_()
            self.level_stats.zero_()
            self.entry_stats.zero_()
            if from_start is not None:
                k = self.cfg.smoothing
                self.ema = from_start if self.ema is None else k * self.ema + (1 - k) * from_start
            if self.cfg.schedule == "success" and self.ema is not None:
                self.p = self.cfg.p_start + (1.0 - self.cfg.p_start) * self.ema
        return out

    def _areas(self, used):
        """Distinct first key bytes among the cells (device scalar)."""
        torch = self.torch
        seen = torch.zeros(256, dtype=torch.bool, device=self.device)
        seen.index_fill_(0, torch.where(used, self.keys[:self.m] & 0xFF, 0), True)
        first = (self.keys[:self.m] & 0xFF) == 0
        return seen.sum() - (seen[0] & ~(used & first).any()).to(torch.int64)

    # --- state ------------------------------------------------------------------------------------------------
    TENSORS = ("keys", "sorted", "order", "count", "clock", "visits", "steps", "ret", "best", "chosen", "found", "sums",
               "progress", "area_seen", "next_depth", "stats", "depth_stats", "tries", "wins", "parent", "goal_hit",
               "flags", "level_stats", "entry_stats")
    # added later: a checkpoint without them has none
    SINCE = {"tries", "wins", "progress", "parent", "goal_hit", "flags", "level_stats", "entry_stats"}

    RECORDS = ("off_steps", "off_ret", "from_archive", "start_row", "last_row", "start_bits", "start_entry")  # per env

    def state_dict(self) -> dict:
        d = {name: getattr(self, name).detach().cpu().clone() for name in self.TENSORS + self.RECORDS}
        d.update(p=self.p, ema=self.ema, level=self.level, level_share=self.level_share.tolist(),
                 config=self.cfg.to_dict())
        if self.cell_mem is not None:  # (rows of unused cells are zero)
            d["cell_mem"] = pack_tensor(self.cell_mem)
        return d

    def load_state_dict(self, d: dict) -> None:
        if not self.cfg.same(d.get("config")):
            raise EnvConfigError("this env state holds an archive with other settings")
        for name in self.TENSORS:
            if name == "stats" and len(d[name]) < len(self.stats):  # saved before its last counters: those are 0
                self.stats.zero_()[:len(d[name])].copy_(d[name])
            elif name in d or name not in self.SINCE:
                getattr(self, name).copy_(d[name])
            else:
                getattr(self, name).fill_(self.m if name == "parent" else 0)
        self.p, self.ema, self.level = float(d["p"]), d["ema"], int(d.get("level", 0))
        self.level_share.copy_(self.torch.tensor(d.get("level_share", [0] * len(self.level_share)),
                                                 dtype=self.torch.int64))
        self.swarm_dst.zero_()
        for name in ("off_steps", "off_ret", "from_archive"):
            getattr(self, name).copy_(d[name])
        if "start_row" in d:
            self.start_row.copy_(d["start_row"])
        else:  # a checkpoint from before the cells' tries: the running episodes count for none
            self.start_row.fill_(self.m)
        self.last_row.copy_(d["last_row"]) if "last_row" in d else self.last_row.fill_(self.m)
        self.start_entry.copy_(d["start_entry"]) if "start_entry" in d else self.start_entry.zero_()  # (saved before)
        if "start_bits" in d:
            self.start_bits.copy_(d["start_bits"])
        else:  # saved before it: the running episodes' start cells' (a swarm jump's own start is not known)
            self.start_bits.copy_(self.flags.gather(0, self.start_row) * self.from_archive)
        if self.cell_mem is not None:  # (packed, or a tensor as states before the packing held them)
            saved = d.get("cell_mem")
            if saved is None:
                self.cell_mem.zero_()
            else:
                packed = isinstance(saved, dict)
                shape = tuple(saved["shape"] if packed else saved.shape)
                if shape != tuple(self.cell_mem.shape):
                    raise EnvConfigError(f"this env state's archive keeps policy states of {shape[1]} "
                                         f"floats with its cells, the policy has {self.cell_mem.shape[1]}")
                self.cell_mem.copy_(unpack_tensor(saved, self.cell_mem) if packed else saved)
        self.mark_route()

    def clear(self) -> None:
        """Forget every cell (the counters and the schedule stay)."""
        self.keys.fill_(INT64_MAX)
        self.sorted.fill_(INT64_MAX)
        self.order.copy_(self._rows)
        self.count.zero_()
        for t in (self.visits, self.steps, self.ret, self.chosen, self.found, self.sums, self.tries, self.wins,
                  self.goal_hit, self.on_route, self.cell_mem):
            if t is not None:
                t.zero_()
        self.parent.fill_(self.m)
        self.last_row.fill_(self.m)
        self.best.fill_(-math.inf)

    def snapshot(self) -> dict[str, np.ndarray]:
        """The used cells' records on the host (synchronises): keys, visits, steps, ret, best, chosen, found,
        tries, wins."""
        k = int(self.count.item())
        return {name: getattr(self, name)[:k].cpu().numpy().copy()
                for name in ("keys", "visits", "steps", "ret", "best", "chosen", "found", "tries", "wins")}


CELL_RECORD_BYTES = 13 * 8 + 3 * 4 + 2  # a cell's records beside its slot: keys, steps, counts, progress, route


def median_level(hist) -> int | None:
    """The lower median of a histogram (`hist[j]`: how many hold j), or None when it counts none."""
    total, run = sum(int(x) for x in hist), 0
    for j, x in enumerate(hist):
        run += int(x)
        if total and 2 * run >= total:
            return j
    return None


def exact_progress(place_bits: int, count: int) -> bool:
    """Whether `progress_key` keeps a place's `place_bits` bits as they are beside `count` milestone bits."""
    return place_bits > 0 and place_bits + count <= 62


def progress_key(place, bits, place_bits: int, count: int):
    """int64 [N]: a place's key and the `count` milestone bits held there in one key, the place's first byte (its
    area) still the key's low byte: exact where they fit in 62 bits (`place_bits` of place, then the milestone
    bits; RAM cells), else the rest of the place and the bits hashed together (`mix64`) above the area byte."""
    if exact_progress(place_bits, count):
        return place | (bits << place_bits)
    rest = mix64((place >> 8) ^ (bits * (0x9E3779B97F4A7C15 - (1 << 64))))
    return ((rest << 8) | (place & 0xFF)) & ((1 << 62) - 1)


def pack_tensor(x) -> dict:
    """A tensor for a checkpoint, its bytes deflated (zlib level 1: a Game Boy's state is mostly zeros and
    repeats, about 18x smaller for an archive cell): dtype, shape and a host uint8 tensor (`unpack_tensor`)."""
    import torch

    raw = x.detach().contiguous().cpu().numpy().tobytes()
    return {"dtype": str(x.dtype), "shape": list(x.shape),
            "z": torch.frombuffer(bytearray(zlib.compress(raw, 1)), dtype=torch.uint8)}


def unpack_tensor(saved: dict, like):
    """`pack_tensor`'s tensor, bit for bit, on the host; it must have `like`'s dtype and shape (EnvConfigError)."""
    import torch

    if saved.get("dtype") != str(like.dtype) or list(saved.get("shape", ())) != list(like.shape):
        raise EnvConfigError(f"env state holds a {saved.get('dtype')} {saved.get('shape')} tensor where this env "
                             f"has {like.dtype} {list(like.shape)}")
    try:
        raw = zlib.decompress(saved["z"].numpy().tobytes())
    except zlib.error as e:
        raise EnvConfigError(f"env state has a damaged compressed tensor: {e}") from None
    if len(raw) != like.numel() * like.element_size():
        raise EnvConfigError(f"env state's compressed tensor holds {len(raw)} bytes, {list(like.shape)} needs "
                             f"{like.numel() * like.element_size()}")
    return torch.frombuffer(bytearray(raw), dtype=like.dtype).view(like.shape)


def cell_bytes(backend) -> int:
    """Bytes of one archive cell: its slot in the backend's store (machine state words, observation, screen;
    on the device or, with `store = "host"`, in host memory) and its records (on the device)."""
    return 4 * backend.slot_words + 72 * backend.obs.shape[2] + 144 * 160 + CELL_RECORD_BYTES


def check_archive_memory(capacity: int, per_cell: int, device: str, host: bool = False) -> int:
    """The archive's bytes (`per_cell` each); an EnvConfigError when they exceed the free memory of `device`, or
    with `host` (the cells' slots in host memory) the host's, now (checked before the emulators exist; the env's
    whole need is checked next)."""
    need = capacity * per_cell
    from gbxcule.backends import memory_available

    free_host, free_dev = memory_available(str(device))
    room = free_dev if str(device).startswith("cuda") and not host else free_host
    free, where = (None, "") if room is None else (room.bytes, ("GPU" if room is free_dev else "host") + " memory, "
                                                    + room.source)
    if free is not None and need > free:
        raise EnvConfigError(f"the state archive's {capacity:,} cells need {need / 2**30:.2f} GiB of memory "
                             f"({per_cell:,} bytes each) but {free / 2**30:.2f} GiB is free ({where}): lower "
                             f"env.archive.capacity (at most {free // per_cell:,} fit)")
    return need
