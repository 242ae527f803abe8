"""The state archive (rl/archive.py) against a plain Python reference, and wired into GameEnv on warp_vec_cpu:
clone_states, starts from archive cells, swarming, spread episode clocks, checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gbxcule.rl.archive import (  # noqa: E402
    COEF_ONE,
    TABLE,
    U_BITS,
    WEIGHT_ONE,
    ArchiveConfig,
    StateArchive,
    unpack_tensor,
)
from gbxcule.rl.config import ConfigError  # noqa: E402
from gbxcule.rl.starts import EnvConfigError  # noqa: E402


class Reference:
    """The archive's rules, one env and one cell at a time in plain Python."""

    def __init__(self, cfg: ArchiveConfig, n: int):
        self.cfg, self.n, self.m, self.b = cfg, n, cfg.capacity, min(cfg.inserts, n)
        self.cells: dict[int, dict] = {}
        self.rows: list[int] = []
        self.clock = 0
        self.dropped = self.inserted = self.improved = 0

    def observe(self, keys, steps, rets, eligible):
        self.clock += 1
        cands = []
        full = len(self.rows) >= self.m
        for e in range(self.n):
            c = self.cells.get(keys[e])
            if c is not None:
                c["visits"] += 1
                c["best"] = max(c["best"], rets[e])
            if eligible[e] and c is None and full:
                self.dropped += 1  # an env-step in a cell the full archive cannot take
            elif eligible[e] and (c is None or steps[e] < c["steps"]):
                cands.append((c is None, -steps[e], -e))
        cands.sort(reverse=True)
        saved, seen = {}, set()
        for _, _, neg_e in cands[:self.b]:
            e = -neg_e
            if keys[e] in seen:
                continue
            seen.add(keys[e])
            c = self.cells.get(keys[e])
            if c is not None:
                c.update(steps=steps[e], ret=rets[e])
                saved[e] = c["row"]
                self.improved += 1
            elif len(self.rows) < self.m:
                row = len(self.rows)
                self.rows.append(keys[e])
                self.cells[keys[e]] = dict(row=row, steps=steps[e], ret=rets[e], best=rets[e], visits=1, chosen=0,
                                           found=self.clock, tries=0, wins=0)
                saved[e] = row
                self.inserted += 1
            else:
                self.dropped += 1
        return saved

    def weight(self, c, deepest: int) -> int:
        table = lambda k: round(WEIGHT_ONE / math.sqrt(1 + min(k, TABLE - 1)))  # noqa: E731
        a, b, r, d, f, g = (round(w * COEF_ONE) for w in (self.cfg.w_chosen, self.cfg.w_visits, self.cfg.w_recent,
                                                          self.cfg.w_depth, self.cfg.w_fail, self.cfg.w_mid))
        win = WEIGHT_ONE * (c["wins"] + 1) // (c["tries"] + 2)
        fail = WEIGHT_ONE * (c["tries"] - c["wins"] + 1) // (c["tries"] + 2)
        return (a * table(c["chosen"]) + b * table(c["visits"])
                + r * WEIGHT_ONE * int(self.clock - c["found"] < self.cfg.recent_steps)
                + d * WEIGHT_ONE * c["steps"] // max(deepest, 1)
                + f * WEIGHT_ONE * (c["tries"] - c["wins"] + 1) // (c["tries"] + 2)
                + 4 * g * win * fail // WEIGHT_ONE)

    def account(self, ended, success, start_rows):
        """Episodes that ended: those that started from a cell (`start_rows[e]`, None for the task's start)
        count for it."""
        for e in range(self.n):
            if ended[e] and start_rows[e] is not None:
                c = self.cells[self.rows[start_rows[e]]]
                c["tries"] += 1
                c["wins"] += int(success[e])

    def choose(self, done, u_start, u_cell, p):
        cdf, total = [], 0
        deepest = max((self.cells[key]["steps"] for key in self.rows), default=0)
        for key in self.rows:
            total += self.weight(self.cells[key], deepest)
            cdf.append(total)
        out = {}
        for e in range(self.n):
            if not done[e] or u_start[e] < int(p * (1 << U_BITS)) or total == 0:
                continue
            target = (u_cell[e] * total) >> U_BITS
            out[e] = next(i for i, x in enumerate(cdf) if x > target)
        for row in out.values():
            self.cells[self.rows[row]]["chosen"] += 1
        return out


@pytest.mark.parametrize("capacity,inserts", [(12, 4), (64, 16)])
def test_insertion_replacement_and_sampling_match_a_python_reference(capacity, inserts):
    n, pool = 24, 40
    cfg = ArchiveConfig(capacity=capacity, inserts=inserts, p_start=0.3, w_chosen=1.0, w_visits=0.5, w_recent=2.0,
                        recent_steps=3, w_depth=1.5, w_fail=1.25, w_mid=0.75)
    arch = StateArchive(cfg, n, first_slot=5, device="cpu")
    ref = Reference(cfg, n)
    rng = np.random.default_rng(11)
    start_row = torch.full((n,), capacity, dtype=torch.int64)  # each env's episode's start cell (none: capacity)
    ref_rows: list[int | None] = [None] * n
    for step in range(40):
        keys = rng.integers(0, pool, size=n) * 7919 - 3 * pool  # negative and positive keys
        steps = rng.integers(0, 30, size=n)
        rets = np.round(rng.normal(size=n), 3).astype(np.float32)
        elig = rng.random(n) < 0.85
        mask, slot = arch.observe(torch.tensor(keys), torch.tensor(steps), torch.tensor(rets),
                                  torch.zeros(n, dtype=torch.int32), torch.tensor(elig))
        want = ref.observe(keys.tolist(), steps.tolist(), rets.tolist(), elig.tolist())
        got = {e: int(slot[e]) - 5 for e in range(n) if bool(mask[e])}
        assert got == want, step
        assert len(set(got.values())) == len(got)  # distinct slots
        done = rng.random(n) < 0.5
        won = rng.random(n) < 0.4
        arch.account(torch.tensor(done), torch.tensor(won), start_row < capacity, torch.zeros(n, dtype=torch.int64),
                     start_row)
        ref.account(done.tolist(), won.tolist(), ref_rows)
        u_s = torch.tensor(rng.integers(0, 1 << U_BITS, size=n))
        u_c = torch.tensor(rng.integers(0, 1 << U_BITS, size=n))
        use, row = arch.choose(torch.tensor(done), u_s, u_c)
        want_rows = ref.choose(done.tolist(), u_s.tolist(), u_c.tolist(), arch.p)
        assert {e: int(row[e]) for e in range(n) if bool(use[e])} == want_rows, step
        start_row = torch.where(torch.tensor(done), row, start_row)
        ref_rows = [want_rows.get(e) if done[e] else ref_rows[e] for e in range(n)]
    k = len(ref.rows)
    assert int(arch.count) == k and k == min(capacity, k)
    snap = arch.snapshot()
    for row, key in enumerate(ref.rows):
        c = ref.cells[key]
        assert int(snap["keys"][row]) == key
        assert (int(snap["steps"][row]), int(snap["visits"][row]), int(snap["chosen"][row]), int(snap["found"][row]),
                int(snap["tries"][row]), int(snap["wins"][row])) == (c["steps"], c["visits"], c["chosen"], c["found"],
                                                                     c["tries"], c["wins"]), row
        assert snap["ret"][row] == np.float32(c["ret"]) and snap["best"][row] == np.float32(c["best"])
    s = arch.read_stats()
    assert (s["archive/cells"], s["archive/inserted"], s["archive/improved"], s["archive/dropped"]) == (
        k, ref.inserted, ref.improved, ref.dropped)
    if capacity == 12:
        assert ref.dropped > 0  # the full archive dropped new cells
    assert ref.improved > 0  # and kept shorter paths to known ones
    assert sum(c["tries"] for c in ref.cells.values()) > sum(c["wins"] for c in ref.cells.values()) > 0


def test_sampling_follows_the_weights():
    """Cells are drawn in proportion to their weight: a cell chosen often is drawn less."""
    n = 4096
    cfg = ArchiveConfig(capacity=8, p_start=0.0, w_visits=0.0, w_recent=0.0)
    arch = StateArchive(cfg, n, first_slot=0, device="cpu")
    keys = torch.arange(n) % 4
    arch.observe(keys, torch.zeros(n, dtype=torch.int64), torch.zeros(n), torch.zeros(n, dtype=torch.int32),
                 torch.ones(n, dtype=torch.bool))
    arch.chosen[0] = 99  # weight 1/10 of the others'
    g = torch.Generator().manual_seed(0)
    use, row = arch.choose(torch.ones(n, dtype=torch.bool), torch.randint(0, 1 << U_BITS, (n,), generator=g),
                           torch.randint(0, 1 << U_BITS, (n,), generator=g))
    assert bool(use.all())
    share = torch.bincount(row, minlength=4).double() / n
    w = np.array([1 / 10, 1, 1, 1])
    assert np.allclose(share.numpy(), w / w.sum(), atol=0.02)


def test_w_mid_weighs_cells_where_starts_succeed_about_half_the_time():
    """w_mid: 4 p (1 - p) of a cell's smoothed start success, so cells it never or always succeeds from fall
    back to the other terms, and a cell not yet tried weighs as one at one half."""
    cfg = ArchiveConfig(capacity=8, w_chosen=1.0, w_visits=0.0, w_recent=0.0, w_mid=2.0)
    arch = StateArchive(cfg, 5, first_slot=0, device="cpu")
    arch.observe(torch.arange(5), torch.zeros(5, dtype=torch.int64), torch.zeros(5), torch.zeros(5, dtype=torch.int32),
                 torch.ones(5, dtype=torch.bool))
    arch.tries[:5] = torch.tensor([0, 98, 98, 98, 8])
    arch.wins[:5] = torch.tensor([0, 0, 49, 98, 2])
    mid = (arch.weights()[:5] - WEIGHT_ONE * COEF_ONE).tolist()  # less the w_chosen term (never chosen)
    unit = 2 * COEF_ONE * WEIGHT_ONE  # w_mid * 1.0
    assert mid[0] == unit and abs(mid[2] - unit) <= 2 * COEF_ONE  # untried, and at one half
    assert mid[1] == mid[3] and mid[1] < unit // 20  # never and always: 4 * 99 / 100**2 of it
    assert unit // 2 < mid[4] < unit  # 3 of 10 (smoothed)


@pytest.mark.parametrize("window", [0, 8])
def test_win_window_halves_a_cells_tries_and_wins_once_its_tries_pass_it(window):
    """`win_window` W: after each step's episodes are counted, a cell whose tries exceed W has its tries and wins
    halved (floor), against a plain Python count; so a cell that lost a thousand times still weighs, by w_mid, at
    least 4/(W+2) (1 - 1/(W+2)) of an untried one, and wins that follow raise its p at once. 0: all-time counts."""
    import random

    n, cells = 6, 4
    arch = StateArchive(ArchiveConfig(capacity=cells, win_window=window), n, first_slot=0, device="cpu")
    rng = random.Random(3)
    tries, wins = [0] * cells, [0] * cells
    zeros = torch.zeros(n, dtype=torch.int64)
    for step in range(400):
        # cell 0 always loses, cell 1 always wins after step 200, the others at random
        done = [rng.random() < 0.7 for _ in range(n)]
        cell = [rng.randrange(cells) for _ in range(n)]
        won = [c == 1 and step >= 200 or c > 1 and rng.random() < 0.5 for c in cell]
        archived = [rng.random() < 0.8 for _ in range(n)]
        arch.account(torch.tensor(done), torch.tensor(won), torch.tensor(archived), zeros,
                     torch.tensor(cell, dtype=torch.int64))
        for e in range(n):
            if done[e] and archived[e]:
                tries[cell[e]] += 1
                wins[cell[e]] += won[e]
        if window:
            for c in range(cells):
                if tries[c] > window:
                    tries[c] //= 2
                    wins[c] //= 2
        assert arch.tries[:cells].tolist() == tries and arch.wins[:cells].tolist() == wins, step
    mid = arch.mid_weights().tolist()
    if window:
        assert max(tries) <= window and wins[0] == 0 and wins[1] == tries[1]
        floor = 4 * (1 / (window + 2)) * (1 - 1 / (window + 2)) * WEIGHT_ONE
        assert mid[0] >= floor - 1 and mid[1] >= floor - 1  # all lost, all won: neither falls toward 0
    else:
        assert tries[0] > 100 and mid[0] < WEIGHT_ONE // 25  # all time: the lost cell's weight falls with its losses
        assert 0.3 < wins[1] / tries[1] < 0.7  # and cell 1's early losses weigh as much as its wins since


def test_config_is_checked():
    with pytest.raises(EnvConfigError, match="unknown archive setting"):
        ArchiveConfig.from_dict({"capacty": 4})
    with pytest.raises(EnvConfigError, match="p_start must be <= 1"):
        ArchiveConfig.from_dict({"p_start": 2.0})
    with pytest.raises(EnvConfigError, match="cells must be one of"):
        ArchiveConfig.from_dict({"cells": "tiles"})
    with pytest.raises(EnvConfigError, match="all 0"):
        ArchiveConfig.from_dict({"w_chosen": 0, "w_visits": 0, "w_recent": 0})
    with pytest.raises(EnvConfigError, match="w_fail must be <= 16"):
        ArchiveConfig.from_dict({"w_fail": 17})
    assert ArchiveConfig().same({k: v for k, v in ArchiveConfig().to_dict().items() if k != "w_fail"})
    assert not ArchiveConfig(w_fail=1.0).same(ArchiveConfig().to_dict()) and not ArchiveConfig().same(None)
    with pytest.raises(EnvConfigError, match="needs RAM cells"):
        StateArchive(ArchiveConfig(swarm_on="area"), 4, 1, "cpu", area_keys=False)


# --- wired into GameEnv (warp_vec_cpu) -----------------------------------------------------------------------------
from gbxcule.rl import GameEnv  # noqa: E402


def _same_machine(env, a: int, b: int) -> bool:
    sa, sb = env.backend.env_states([a, b])
    return (np.array_equal(sa.fields, sb.fields) and np.array_equal(sa.ram, sb.ram)
            and np.array_equal(sa.serial, sb.serial))


def test_clone_states_continues_bit_for_bit():
    env = GameEnv(task="leave_house", num_envs=4, stack_k=2, max_steps=40, spread_clocks=True,
                  reward={"novelty_ram": 0.5, "novelty_pixels": 0.25})
    env.reset(seed=3)
    rng = np.random.default_rng(5)
    for _ in range(4):
        env.step(rng.integers(0, 8, size=4))
    env.clone_states(torch.tensor([0, 0, 0, 1]), torch.tensor([False, False, True, True]))
    assert _same_machine(env, 0, 2) and _same_machine(env, 1, 3)
    assert torch.equal(env.obs[2], env.obs[0]) and torch.equal(env.obs[3], env.obs[1])
    assert np.array_equal(env.frames([2, 3]), env.frames([0, 1]))
    for _ in range(8):  # under the same actions the clones step exactly as their sources
        a = rng.integers(0, 8, size=4)
        a[2], a[3] = a[0], a[1]
        obs, r, te, tr, _ = env.step(a)
        assert torch.equal(obs[2], obs[0]) and torch.equal(obs[3], obs[1])
        assert r[2] == r[0] and r[3] == r[1] and te[2] == te[0] and tr[2] == tr[0] and tr[3] == tr[1]
        assert env.steps[2] == env.steps[0] and env.ep_return[3] == env.ep_return[1]
        assert env.distance[2] == env.distance[0]
    assert _same_machine(env, 0, 2) and _same_machine(env, 1, 3)


def test_clone_states_copies_only_the_masked_envs_own_state():
    env = GameEnv(task="leave_house", num_envs=4, max_steps=40, spread_clocks=True,
                  reward={"novelty_ram": 0.5, "novelty_pixels": 0.25}, archive={"capacity": 4})
    rng = np.random.default_rng(7)
    for _ in range(5):
        env.step(rng.integers(0, 8, size=4))
    env.archive.off_steps.copy_(torch.tensor([10, 20, 30, 40]))
    env.archive.off_ret.copy_(torch.tensor([0.5, 1.5, 2.5, 3.5]))
    own = ("steps", "ep_return", "ep_success", "success", "distance", "_dist_sum", "_prev_sum", "_near", "_fired",
           "_limit")
    records = ("off_steps", "off_ret", "from_archive", "start_row")
    before = {name: getattr(env, name).clone() for name in own}
    before.update({name: getattr(env.archive, name).clone() for name in records})
    before.update(nov_ram=env._nov_ram.seen.clone(), nov_px=env._nov_px.seen.clone())
    src, mask = torch.tensor([3, 3, 0, 1]), torch.tensor([False, True, False, True])  # envs 0, 2 name sources too
    env.clone_states(src, mask)
    want = torch.tensor([0, 3, 2, 1])  # where each env's state now comes from
    after = {name: getattr(env, name) for name in own}
    after.update({name: getattr(env.archive, name) for name in records})
    after.update(nov_ram=env._nov_ram.seen, nov_px=env._nov_px.seen)
    for name, old in before.items():
        assert torch.equal(after[name], old[want]), name
    assert env.archive.off_steps.tolist() == [10, 40, 30, 20]


def test_spread_clocks_spread_the_first_truncations():
    n, limit = 16, 10
    ends = {}
    for spread in (False, True):
        env = GameEnv(task="leave_house", num_envs=n, max_steps=limit, spread_clocks=spread,
                      reward={"terminate_on": "none"})
        env.reset(seed=7)
        first = np.zeros(n, dtype=np.int64)
        for t in range(1, 2 * limit + 1):
            _, _, _, tr, _ = env.step(np.zeros(n, dtype=np.int64))
            first = np.where((first == 0) & tr.numpy(), t, first)
            if t > limit:  # after its first episode every env runs the whole limit
                assert not (tr.numpy() & (first < t) & (t - first < limit)).any()
        ends[spread] = first
    assert (ends[False] == limit).all()
    assert len(set(ends[True].tolist())) >= 5 and ends[True].min() >= 1 and ends[True].max() <= limit
    again = GameEnv(task="leave_house", num_envs=n, max_steps=limit, spread_clocks=True)
    again.reset(seed=7)
    assert torch.equal(again._limit, torch.from_numpy(ends[True]).to(torch.int32))  # seeded: the same clocks


def test_cells_hold_the_state_that_reached_them_and_starts_restore_it():
    import warp as wp

    env = GameEnv(task="talk_to_hiker", num_envs=6, max_steps=3, info_mode="full",
                  archive={"capacity": 32, "p_start": 0.0, "inserts": 6})
    env.reset(seed=1)
    k = env.num_slots
    assert k == 1 and env.backend.num_slots == k + 32 + 1 and env.cell_mode == "ram"  # the cells and a scratch slot
    slot_obs = wp.to_torch(env.backend.slot_frames()[0])
    rng = np.random.default_rng(2)
    restored = 0
    for t in range(1, 10):
        obs, _, _, _, info = env.step(rng.integers(0, 8, size=6))
        a, done = env.archive, info["done"].numpy()
        states = env.backend.env_states()
        for e in np.flatnonzero(a.save_mask.numpy() & ~done):  # a saved env's state is its cell's
            slot = int(a.save_slot[e])
            f, r = env.backend.slot_state(slot)
            assert np.array_equal(states[e].fields, f) and np.array_equal(states[e].ram, r)
            assert int(a.keys[slot - k]) == int(env.cell_keys()[e])
            assert int(a.steps[slot - k]) == int(env.archive.off_steps[e] + env.steps[e]) <= t
        for e in np.flatnonzero(done & env.archive.from_archive.numpy()):  # restored from a cell: its slot's state
            slot = int(env._slots[e])
            f, r = env.backend.slot_state(slot)
            assert slot >= k and np.array_equal(states[e].fields, f) and np.array_equal(states[e].ram, r)
            assert torch.equal(obs[e, 0], slot_obs[slot])
            assert int(env.archive.off_steps[e]) == int(a.steps[slot - k]) and env.steps[e] == 0
            restored += 1
    assert restored > 0
    s = env.episode_stats()
    assert s["archive/cells"] >= 2 and s["start_episodes"] + sum(s["archive/depth_episodes"]) == s["episodes"]
    assert s["archive/start_share"] < 1.0  # p_start 0: once the archive has cells, starts come from it


def test_episodes_from_cells_have_the_archive_step_limit():
    env = GameEnv(task="leave_house", num_envs=8, max_steps=30, start_states=("random_actions", 3, 2),
                  archive={"capacity": 16, "p_start": 0.5, "max_steps": 3}, spread_clocks=True)
    env.reset(seed=0)
    assert int(env._limit.max()) <= 30 and len(set(env._limit.tolist())) > 1  # spread first episodes
    rng = np.random.default_rng(1)
    lengths = {True: set(), False: set()}
    for _ in range(60):
        from_cell = env.archive.from_archive.clone()
        _, _, _, tr, info = env.step(rng.integers(0, 8, size=8))
        for e in np.flatnonzero(tr.numpy()):
            lengths[bool(from_cell[e])].add(int(env.final_length[e]))
        arch = env.archive.from_archive
        assert torch.equal(env._limit[arch], torch.full_like(env._limit[arch], 3)) or not bool(arch.any())
    assert lengths[True] == {3} and max(lengths[False]) <= 30
    s = env.episode_stats()  # per start slot: only the episodes from the task's start slots
    assert sum(s["slot_episodes"]) == s["start_episodes"] and sum(s["archive/depth_episodes"]) > 0
    snap = env.archive.snapshot()  # every episode from a cell counted for its cell (w_fail's tries and wins)
    assert snap["tries"].sum() == sum(s["archive/depth_episodes"]) and (snap["tries"] > 0).sum() > 1
    assert snap["wins"].sum() == sum(s["archive/depth_successes"]) and (snap["wins"] <= snap["tries"]).all()


def test_swarm_clones_the_milestone_state_into_archive_started_envs():
    n = 6
    env = GameEnv(task="talk_to_hiker", num_envs=n, max_steps=50, stack_k=2,
                  archive={"capacity": 32, "p_start": 0.0, "swarm": 1.0})
    env.reset(seed=4)
    rng = np.random.default_rng(3)
    for _ in range(3):
        env.step(rng.integers(0, 8, size=n))
    env.reset()  # an unseeded reset: every env now starts from an archive cell
    assert bool(env.archive.from_archive.all())
    for _ in range(2):
        env.step(rng.integers(0, 8, size=n))
    assert not bool(env.archive.swarm_dst.any())  # no new area: no milestone
    env.archive.area_seen.zero_()  # the town becomes new: env 0 (the lowest) reaches a milestone next step
    env.episode_stats()
    acts = rng.integers(0, 8, size=n)
    before_off, before_steps = env.archive.off_steps.clone(), env.steps.clone()
    obs, _, te, tr, _ = env.step(acts)
    dst = env.archive.swarm_dst.clone()
    assert int(env.archive.swarm_src[0]) == 0 and dst.tolist() == [False] + [True] * (n - 1)
    assert bool(tr[1:].all()) and not bool(te.any())  # cut as truncated: they bootstrap
    src_total = int(before_off[0] + before_steps[0] + 1)
    for e in range(1, n):
        assert _same_machine(env, 0, e) and torch.equal(obs[e], obs[0])
        assert int(env.archive.off_steps[e]) == src_total and env.steps[e] == 0 and bool(env.archive.from_archive[e])
    s = env.episode_stats()
    assert s["archive/swarms"] == 1 and s["trunc_rate"] > 0


def test_step_never_synchronises_with_the_archive(monkeypatch):
    env = GameEnv(task="leave_house", num_envs=3, stack_k=2, max_steps=2, info_mode="full", keep_final_obs=True,
                  spread_clocks=True, archive={"capacity": 8, "p_start": 0.5, "swarm": 0.5, "swarm_on": "depth",
                                               "swarm_depth": 1})
    env.reset()
    env.step(torch.tensor([1, 2, 3]))

    def boom(*a, **k):
        raise AssertionError("step() synchronised with the host")

    for name in ("item", "cpu", "numpy", "tolist", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, boom)
    for acts in ([5, 6, 7], [4, 5, 6], [7, 7, 7], [6, 6, 6]):
        env.step(torch.tensor(acts))
    monkeypatch.undo()
    assert env.episode_stats()["archive/cells"] >= 1


def test_episode_stats_read_the_device_once(monkeypatch):
    env = GameEnv(task="leave_house", num_envs=4, max_steps=3, start_states=("random_actions", 3, 2),
                  archive={"capacity": 8, "p_start": 0.5})
    env.reset(seed=1)
    for acts in ([1, 2, 3, 4], [5, 6, 7, 0], [2, 2, 2, 2], [3, 3, 3, 3]):
        env.step(torch.tensor(acts))
    reads = []
    real = {name: getattr(torch.Tensor, name) for name in ("item", "tolist", "cpu", "numpy")}
    def counted(name, fn):
        def read(self, *a, **k):
            reads.append(name)
            return fn(self, *a, **k)
        return read

    for name, fn in real.items():
        monkeypatch.setattr(torch.Tensor, name, counted(name, fn))
    s = env.episode_stats()
    monkeypatch.undo()
    assert reads == ["tolist"]  # env totals, per-slot counts and the archive's counters in one transfer
    assert s["episodes"] == sum(s["slot_episodes"]) + sum(s["archive/depth_episodes"]) > 0
    assert s["archive/cells"] >= 1 and len(s["slot_episodes"]) == 3


def _trajectory(env, actions):
    out = []
    for a in actions:
        obs, r, te, tr, _ = env.step(torch.from_numpy(a))
        out.append((obs.clone(), r.clone(), te.clone(), tr.clone(), env.archive.off_steps.clone()))
    return out


def test_state_dict_round_trip_with_the_archive_is_bit_exact():
    kw = dict(task="talk_to_hiker", num_envs=4, stack_k=2, max_steps=4, spread_clocks=True,
              archive={"capacity": 16, "p_start": 0.3, "swarm": 0.5, "swarm_on": "depth", "swarm_depth": 2})
    env = GameEnv(**kw)
    env.reset(seed=2)
    rng = np.random.default_rng(4)
    for _ in range(6):
        env.step(rng.integers(0, 8, size=4))
    sd = env.state_dict()
    acts = [rng.integers(0, 8, size=4) for _ in range(8)]
    ref = _trajectory(env, acts)
    stats = env.episode_stats()
    other = GameEnv(**kw)
    other.load_state_dict(sd)
    got = _trajectory(other, acts)
    assert all(all(torch.equal(x, y) for x, y in zip(s, t, strict=True)) for s, t in zip(got, ref, strict=True))
    assert repr(other.episode_stats()) == repr(stats)  # every figure, NaN included
    assert stats["archive/cells"] > 0
    with pytest.raises(EnvConfigError, match="other settings"):
        GameEnv(**(kw | {"archive": {"capacity": 16}})).load_state_dict(sd)
    with pytest.raises(EnvConfigError, match="without a state archive"):
        other.load_state_dict({k: v for k, v in sd.items() if k != "archive"})
    old = env.state_dict()  # a checkpoint from before the cells' tries and wins (and w_fail) still loads
    for key in ("tries", "wins"):
        del old["archive"][key]
    del old["archive"]["start_row"], old["archive"]["config"]["w_fail"]
    del old["archive"]["level_stats"], old["archive"]["config"]["edge"]  # (and before the edge and level counts)
    past = GameEnv(**kw)
    past.load_state_dict(old)
    assert int(past.archive.tries.sum()) == 0 and int(past.archive.start_row.min()) == past.archive.m
    assert int(past.archive.count) == int(env.archive.count)
    # without the envs' emulator state the envs restart and the archive stays whole: its records and its cells'
    # states (compressed in the state) bit for bit, as a raw state from before the compression held them
    lean_sd = env.state_dict(emulator=False)
    assert "ring" not in lean_sd and all(set(c) == {"dtype", "shape", "z"} for c in lean_sd["archive"]["cells"])
    raw = {**lean_sd, "archive": {**lean_sd["archive"], "slots": [x.clone() for x in env._cell_slots()]}}
    del raw["archive"]["cells"]
    for saved in (lean_sd, raw):
        lean = GameEnv(**kw)
        with pytest.warns(UserWarning, match="restarts from a start slot"):
            lean.load_state_dict(saved)
        assert lean.restarted and not past.restarted  # (a policy's state starts anew)
        assert int(lean.archive.count) == int(env.archive.count) > 0
        assert torch.equal(lean.archive.keys, env.archive.keys) and torch.equal(lean.archive.steps, env.archive.steps)
        assert all(torch.equal(x, y) for x, y in zip(lean._cell_slots(), env._cell_slots(), strict=True))
    bad = {**lean_sd, "archive": {**lean_sd["archive"], "cells": [dict(c) for c in lean_sd["archive"]["cells"]]}}
    bad["archive"]["cells"][1]["z"] = bad["archive"]["cells"][1]["z"][:-9]
    with pytest.raises(EnvConfigError, match="damaged compressed tensor"):
        GameEnv(**kw).load_state_dict(bad)
    bad["archive"]["cells"][1] = {**lean_sd["archive"]["cells"][1], "shape": [1, 2]}
    with pytest.raises(EnvConfigError, match=r"tensor where this env has"):
        GameEnv(**kw).load_state_dict(bad)
    bare = {**lean_sd, "archive": {k: v for k, v in lean_sd["archive"].items() if k != "cells"}}
    empty = GameEnv(**kw)
    with pytest.warns(UserWarning) as caught:
        empty.load_state_dict(bare)
    assert any("archive starts empty" in str(w.message) for w in caught) and int(empty.archive.count) == 0


def test_cells_kept_in_host_memory_are_the_same_bits_and_round_trip():
    """store = "host": the slot store in host memory, which the kernels address through arrays of the device (on
    the CPU device the same path: host arrays and the kernels' arrays at one address). The env plays bit for bit as
    with the store on the device, its slots hold the same bytes, and a checkpoint of it continues bit for bit."""
    table = {"capacity": 16, "p_start": 0.3, "swarm": 0.5, "swarm_on": "depth", "swarm_depth": 2}
    kw = dict(task="talk_to_hiker", num_envs=4, stack_k=2, max_steps=4, spread_clocks=True)
    rng = np.random.default_rng(7)
    acts = [rng.integers(0, 8, size=4) for _ in range(14)]
    envs = {}
    for store in ("device", "host"):
        env = GameEnv(**kw, archive={**table, "store": store})
        env.reset(seed=3)
        envs[store] = (env, _trajectory(env, acts))
    (dev, ref), (host, got) = envs["device"], envs["host"]
    assert host.backend._store.host and not dev.backend._store.host
    assert all(all(torch.equal(x, y) for x, y in zip(s, t, strict=True)) for s, t in zip(got, ref, strict=True))
    assert int(host.archive.count) == int(dev.archive.count) > 0
    for a, b in zip(host.backend.slot_arrays(), dev.backend.slot_arrays(), strict=True):
        assert np.array_equal(a.numpy(), b.numpy())
    assert host.backend.slots_digest() == dev.backend.slots_digest()
    f, r = host.backend.slot_state(host.num_slots)
    assert np.array_equal(f, dev.backend.slot_state(dev.num_slots)[0]) and np.array_equal(r, dev.backend.slot_state(
        dev.num_slots)[1])
    sd = host.state_dict()
    more = [rng.integers(0, 8, size=4) for _ in range(8)]
    ref = _trajectory(host, more)
    other = GameEnv(**kw, archive={**table, "store": "host"})
    other.load_state_dict(sd)
    assert all(all(torch.equal(x, y) for x, y in zip(s, t, strict=True))
               for s, t in zip(_trajectory(other, more), ref, strict=True))
    with pytest.raises(EnvConfigError, match="store"):
        GameEnv(**kw, archive={**table, "store": "disk"})


def test_archive_memory_and_cells_are_checked(monkeypatch):
    import gbxcule.backends as backends
    from gbxcule.core.memory import Available

    monkeypatch.setattr(backends, "memory_available", lambda device: (Available(10 * 2**20, "a test's limit"), None))
    with pytest.raises(EnvConfigError, match="lower env.archive.capacity"):
        GameEnv(task="leave_house", num_envs=2, archive={"capacity": 1024})
    with pytest.raises(EnvConfigError, match="host memory"):  # the cells' slots in host memory: the host's room
        GameEnv(task="leave_house", num_envs=2, archive={"capacity": 1024, "store": "host"})
    monkeypatch.undo()
    with pytest.raises(EnvConfigError, match="names cell bytes"):
        GameEnv("OVERWORLD", num_envs=2, archive={"cells": "ram"})
    env = GameEnv("OVERWORLD", num_envs=2, archive={"capacity": 4, "swarm": 0.5})  # no task: pixel cells
    assert env.cell_mode == "pixels" and env.archive.swarm_on == "depth"
    env.step(np.zeros(2, dtype=np.int64))
    assert int(env.archive.count) >= 1


# --- training with the archive ---------------------------------------------------------------------------------
ARCHIVE_TABLE = {"capacity": 64, "p_start": 0.25, "swarm": 0.25, "inserts": 8}


def _tiny(run_dir, **run):
    from gbxcule.rl.training import make_config

    return make_config(None, {"total_steps": 4 * 6 * 8,
                              "env": {"num_envs": 6, "task": "talk_to_hiker", "max_steps": 12, "spread_clocks": True,
                                      "archive": ARCHIVE_TABLE},
                              "ppo": {"rollout_steps": 8, "epochs": 1, "minibatches": 2, "model": "small"},
                              "run": {"run_dir": str(run_dir), "device": "cpu", "progress": False, "evals": 0,
                                      "tensorboard": False, "checkpoint_every": 1, "eval_episodes": 2, **run}})


def _rows(run_dir):
    import json

    timing = {"sps", "time_env_s", "time_inference_s", "time_update_s", "wall_s", "updates_per_s"}
    return [{k: v for k, v in json.loads(x).items() if k not in timing}
            for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_training_with_the_archive_logs_it_and_resumes_bit_for_bit(tmp_path):
    from gbxcule.rl.explore import achievement, load
    from gbxcule.rl.plot import plot_runs
    from gbxcule.rl.rundir import load_checkpoint
    from gbxcule.rl.training import train

    straight, part = tmp_path / "straight", tmp_path / "part"
    s = train(_tiny(straight, image_every=2, tensorboard=True))
    rows = _rows(straight)
    assert s["updates"] == 4 and rows[-1]["archive/cells"] > 0
    for key in ("archive/p_start", "archive/inserted", "success_from_start", "archive/depth_episodes",
                "archive/areas", "archive/max_depth"):
        assert key in rows[-1], key
    assert "archive" in load_checkpoint(straight)["env"]
    snap = load(straight / "archive.npz")
    assert len(snap["keys"]) == rows[-1]["archive/cells"] and snap["screens"].shape == (6, 144, 160)
    assert f"holds {rows[-1]['archive/cells']:,} cell" in achievement(rows[-1])
    one = achievement({"archive/cells": 1, "archive/areas": 1, "archive/max_depth": 3, "archive/p_start": 0.5})
    assert "holds 1 cell over 1 area, the deepest 3 steps" in one and "50% of episodes" in one
    assert "holds 7 cells over 2 areas," in achievement({"archive/cells": 7, "archive/areas": 2})
    train(_tiny(part, stop_after_updates=2))
    resumed = train(_tiny(part), resume=True)
    assert resumed["updates"] == 4
    assert _rows(part) == _rows(straight)
    a, b = load_checkpoint(straight)["model"], load_checkpoint(part)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    # where the cells live is not what they are: a run resumed with them in host memory goes on bit for bit
    moved = tmp_path / "moved"
    train(_tiny(moved, stop_after_updates=2))
    host = _tiny(moved)
    host.env.archive = {**ARCHIVE_TABLE, "store": "host"}
    train(host, resume=True)
    assert _rows(moved) == _rows(straight)
    assert load_checkpoint(moved)["config"]["env"]["archive"]["store"] == "host"
    bad = _tiny(moved, stop_after_updates=1)
    bad.env.archive = {**ARCHIVE_TABLE, "capacity": 128}
    with pytest.raises(ConfigError, match="env.archive.capacity"):  # what the cells are stays
        train(bad, resume=True)
    names = {p.name for p in plot_runs([straight], tmp_path / "png")}
    assert {"exploration.png", "archive_starts.png", "explore_screens.png", "explore_frontier.png",
            "explore_visits.png", "explore_depth.png"} <= names
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ev = EventAccumulator(str(straight / "tb"), size_guidance={"images": 0})
    ev.Reload()
    assert {"explore/screens", "explore/visits"} <= set(ev.Tags()["images"])


def test_resume_may_move_an_archives_cells_but_not_make_one():
    """--resume may change env.archive.store (a table key whose field says so) where the run has an archive; a run
    without one is refused one that would appear, and the archive's other keys must stay."""
    from gbxcule.rl.config import to_dict
    from gbxcule.rl.training import resume_config

    with_archive = {"config": to_dict(_tiny("r")), "update": 0}
    cfg = resume_config(with_archive, {"env": {"archive": {"store": "host"}}})
    assert cfg.env.archive == {**ARCHIVE_TABLE, "store": "host"}
    plain = _tiny("r")
    plain.env.archive = {}
    with pytest.raises(ConfigError, match="no state archive"):
        resume_config({"config": to_dict(plain), "update": 0}, {"env": {"archive": {"store": "host"}}})
    with pytest.raises(ConfigError, match="env.archive.inserts"):
        resume_config(with_archive, {"env": {"archive": {"inserts": 9}}})


def test_eval_env_and_bad_archive_settings(tmp_path):
    from gbxcule.rl.config import ConfigError
    from gbxcule.rl.evaluate import make_eval_env
    from gbxcule.rl.training import make_config

    cfg = _tiny(tmp_path)
    ev = make_eval_env(cfg.env, 2, "cpu", 0)
    assert ev.archive is None and ev._limit is None  # judged from the task's own start, as it is
    with pytest.raises(ConfigError, match=r"env\.archive\.p_start must be <= 1"):
        make_config(None, {"env": {"archive": {"p_start": 3}}})
    with pytest.raises(ConfigError, match="unknown archive setting"):
        make_config(None, {"env": {"archive": {"size": 3}}})


def test_the_archive_configs_share_one_table():
    from pathlib import Path

    from gbxcule.rl.config import read_toml
    from gbxcule.rl.training import make_config

    root = Path(__file__).resolve().parent.parent / "configs"
    files = sorted(root.glob("*_archive.toml"))
    assert len(files) == 3
    tables = [read_toml(f)["env"]["archive"] for f in files]
    assert all(t == tables[0] for t in tables)
    for f in files:
        cfg = make_config(f)
        assert cfg.env.archive == tables[0] and cfg.env.spread_clocks and not cfg.env.reward.get("novelty_pixels")
        assert cfg.env.start_states != "solution" and cfg.env.start_states[0] != "solution"  # no demonstration


def test_a_counting_archive_emulates_what_spread_clocks_alone_do():
    """scripts/bench/bench_archive.py `cost` splits the archive's cost on this: with p_start 1 the archive's machinery
    (swarming included) runs every step, but the envs emulate bit for bit what they do without it, so a time
    difference between the two is the machinery's. StepWork counts the instructions of the steps only: restores
    (here every few steps) move the counter but are not counted."""
    from gbxcule.rl.bench_env import StepWork

    kw = dict(task="leave_house", num_envs=4, max_steps=3, spread_clocks=True, seed=2)
    envs = [GameEnv(**kw), GameEnv(**kw, archive={"capacity": 8, "p_start": 1.0, "swarm": 1.0, "max_steps": 2})]
    rng = np.random.default_rng(7)
    acts = [torch.from_numpy(rng.integers(0, 8, size=4)) for _ in range(7)]
    counts = []
    for env in envs:
        env.reset(seed=2)
        with StepWork(env.backend) as work:
            work.start()
            for a in acts:
                env.step(a)
            work.stop()
        counts.append(work.instructions)
    assert envs[1].episode_stats()["archive/cells"] >= 1
    assert torch.equal(envs[0].obs, envs[1].obs)
    assert np.array_equal(envs[0].backend.fields.numpy(), envs[1].backend.fields.numpy())
    assert counts[0] == counts[1] > 0
    assert "step" not in vars(envs[0].backend)  # the class's step again
    plain = GameEnv(task="leave_house", num_envs=4, max_steps=100, seed=2)  # no restores: the field's own difference
    plain.reset(seed=2)
    start = plain.backend.field_values("instructions").astype(np.int64)
    with StepWork(plain.backend) as work:
        work.start()
        for a in acts:
            plain.step(a)
        work.stop()
    assert work.instructions == int((plain.backend.field_values("instructions") - start).sum())


@pytest.mark.parametrize("task", ["bed_to_lab", "reach_route"])
def test_the_untuned_benchmark_tasks_are_solved_by_their_solutions(task):
    """benchmarks/tasks/overworld_untuned.toml (the archive's "one config, unchanged" aim): each task's solution
    ends its episode with the RAM goal on the solution's last step, and the archive config takes the task."""
    from pathlib import Path

    from gbxcule.rl.tasks import load_task
    from gbxcule.rl.training import make_config

    root = Path(__file__).resolve().parent.parent
    spec = f"{root / 'benchmarks/tasks/overworld_untuned.toml'}:{task}"
    t = load_task(spec)
    cfg = make_config(root / "configs/talk_to_hiker_archive.toml", {"env": {"task": spec}})
    assert cfg.env.task == spec and len(t.solution) > 15
    env = GameEnv(task=spec, num_envs=1, info_mode="full")
    assert env.success_source == "ram"
    env.reset(seed=0)
    ended = []
    for a in t.solution:
        _, _, term, trunc, info = env.step(np.array([a]))
        assert not bool(trunc[0])
        ended.append(bool(term[0]) and bool(info["success"][0]))
    assert ended == [False] * (len(t.solution) - 1) + [True]


def test_explorers_act_at_random_start_from_cells_and_are_not_counted():
    from gbxcule.rl.archive import explorer_envs

    assert explorer_envs(None, 8) == explorer_envs({}, 8) == 0
    assert explorer_envs({"explorers": 0.25}, 8) == 2 and explorer_envs(ArchiveConfig(explorers=0.9), 10) == 9
    assert explorer_envs({"explorers": 0.5}, 1) == 0  # at least one env is left to the policy
    with pytest.raises(EnvConfigError, match="explorers"):
        ArchiveConfig(explorers=0.95)
    n, e = 8, 4
    table = {"capacity": 64, "p_start": 1.0, "schedule": "fixed", "max_steps": 6, "explorers": 0.5}
    envs = [GameEnv(task="leave_house", num_envs=n, max_steps=20, info_mode="full", archive=table) for _ in range(2)]
    for env in envs:
        env.reset(seed=3)
    assert envs[0].archive.n_explore == e and envs[0].archive.explorer.tolist() == [False] * (n - e) + [True] * e
    seen, ended, counted = set(), 0, 0
    for t in range(40):
        # the two envs are given different actions: the policy's envs part, the explorers act alike (at random)
        envs[0].step(np.full(n, t % 8))
        _, _, _, _, info = envs[1].step(np.full(n, (t + 3) % 8))
        seen |= set(envs[0]._act32[n - e:].tolist())
        if t == 10:  # before any episode ended (then starts come from cells, which the policy's envs found)
            a, b = (env.backend.env_states() for env in envs)
            assert all(np.array_equal(a[i].ram, b[i].ram) for i in range(n - e, n))
            assert not all(np.array_equal(a[i].ram, b[i].ram) for i in range(n - e))
        assert torch.equal(envs[0]._act32[:n - e], torch.full((n - e,), t % 8, dtype=torch.int32))
        done = info["done"]
        ended += int(done[:n - e].sum())
        counted += int(done.sum())
        # an explorer's episode starts from a cell once the archive holds any (p_start 1 holds the others at the
        # task's start)
        arch = envs[1].archive.from_archive
        assert not bool(arch[:n - e].any())
        assert bool(arch[n - e:][done[n - e:]].all()) or int(envs[1].archive.count) == 0
    assert len(seen) >= 4  # random actions, not one
    assert counted > ended > 0
    s = envs[1].episode_stats()  # the policy's episodes alone; explorer episodes feed no cell's tries either
    assert s["episodes"] == ended and envs[1].archive.snapshot()["tries"].sum() == 0
    assert s["archive/cells"] > 0


def test_only_a_trainer_that_leaves_the_explorers_out_takes_them(tmp_path):
    from gbxcule.rl.algos.ppo import batch_size
    from gbxcule.rl.config import ConfigError
    from gbxcule.rl.training import make_config, train

    table = {**ARCHIVE_TABLE, "explorers": 0.5}
    cfg = make_config(None, {"total_steps": 2 * 6 * 8,
                             "env": {"num_envs": 6, "task": "talk_to_hiker", "max_steps": 12, "archive": table},
                             "ppo": {"rollout_steps": 8, "epochs": 1, "minibatches": 2, "model": "small"},
                             "run": {"run_dir": str(tmp_path), "device": "cpu", "progress": False, "evals": 0,
                                     "tensorboard": False, "eval_episodes": 2, "checkpoint_every": 1}})
    assert batch_size(cfg) == 3 * 8  # the policy's 3 envs' rollouts; the explorers' 3 are not stored
    s = train(cfg)
    assert s["updates"] == 2 and s["env_steps"] == 2 * 6 * 8 and sum(s["last"]["actions"]) == 3 * 8
    part = tmp_path / "part"  # a run stopped and resumed goes on bit for bit, the explorers' actions too
    cfg.run.run_dir, cfg.run.stop_after_updates = str(part), 1
    train(cfg)
    cfg.run.stop_after_updates = None
    train(cfg, resume=True)
    assert _rows(part) == _rows(tmp_path)
    for algo in ("a2c", "dqn", "pqn"):
        with pytest.raises(ConfigError, match="explorers"):
            make_config(None, {"algo": algo, "env": {"num_envs": 6, "archive": table}})
    # a recurrent policy too: its state is carried for every env, its update unrolls the policy's envs alone
    gru = tmp_path / "gru"
    cfg = make_config(None, {"total_steps": 2 * 6 * 8,
                             "env": {"num_envs": 6, "task": "talk_to_hiker", "max_steps": 12, "archive": table},
                             "ppo": {"rollout_steps": 8, "epochs": 1, "minibatches": 1, "model": "small", "gru": 8},
                             "run": {"run_dir": str(gru), "device": "cpu", "progress": False, "evals": 0,
                                     "tensorboard": False, "eval_episodes": 2, "checkpoint_every": 1}})
    s = train(cfg)
    assert s["updates"] == 2 and sum(s["last"]["actions"]) == 3 * 8 and s["last"]["approx_kl"] < 1e-10
    with pytest.raises(ConfigError, match="group of envs"):  # a minibatch a policy env at most: 3 of the 6
        make_config(None, {"env": {"num_envs": 6, "archive": table}, "ppo": {"gru": 16, "minibatches": 4}})


def test_bench_archive_cells_counts_a_cells_bytes_and_the_pages_that_differ(tmp_path, capsys):
    """`bench_archive.py cells`: a cell's bytes are its slot's parts; the pages that differ are counted against
    a plain comparison, and the estimate of a compressed cell is never above its bytes."""
    import importlib.util
    import json
    import sys
    from pathlib import Path
    from unittest import mock

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("bench_archive", root / "scripts/bench/bench_archive.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    base = torch.zeros(16, dtype=torch.uint8)
    cells = torch.zeros((4, 16), dtype=torch.uint8)
    cells[0, 0] = cells[1, 0] = cells[1, 9] = 1  # pages of 4 differing from base: row 0 page 0, row 1 pages 0 and 2
    cells[3] = cells[1]  # row 2 none; row 3 as row 1. Nearest other row: 1 page away, 0 (row 3), 1, 0 (row 1)
    assert mod.page_diffs(cells, base, 4, [0, 1, 2, 3]) == ((1 + 2 + 0 + 2) / 4, (1 + 0 + 1 + 0) / 4)
    argv = ["bench_archive.py", "cells", "--task", "leave_house", "--envs", "8", "--steps", "40", "--sample", "4",
            "--device", "cpu", "--out", str(tmp_path)]
    with mock.patch.object(sys, "argv", argv):
        assert mod.main() == 0
    data = json.loads((tmp_path / "archive_cells.json").read_text())
    parts = data["parts"]
    assert data["cells"] > 1 and set(parts) == {"fields", "ram", "obs", "screen"}
    assert data["bytes_per_cell"] == sum(p["bytes"] for p in parts.values())
    assert all(p["compressed_estimate"] <= p["bytes"] for p in parts.values())
    assert 0 < parts["ram"]["pages_differ_from_start"] < parts["ram"]["pages"]
    assert parts["screen"]["pixel_values"] <= 4 and data["ratio"] > 1
    assert "a cell: " in capsys.readouterr().out


def test_bench_archive_explore_counts_the_episodes_at_the_goal(tmp_path, capsys):
    """`bench_archive.py explore` counts, at each point, the episodes that reached the task's goal so far: every
    episode of a task whose goal always holds (each ends on its first step), none of one whose goal never does;
    `--curves` runs the curves named, and a bad name exits 2."""
    import importlib.util
    import json
    import sys
    from pathlib import Path
    from unittest import mock

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("bench_archive", root / "scripts/bench/bench_archive.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    pack = tmp_path / "goals.toml"
    pack.write_text('[pack]\nname = "goals"\nrom = "OVERWORLD"\ncodec = "pokemonred_puffer_v1"\nframes_per_step = 24\n'
                    'release_after_frames = 8\ncells = [0xC100, 0xC101, 0xC102]\n'
                    '[tasks.always]\nstart = { script = "N5" }\nstep_limit = 20\n'
                    'goal_ram = [{ addr = 0xC100, op = "ge", value = 0 }]\n'
                    '[tasks.never]\nstart = { script = "N5" }\nstep_limit = 20\n'
                    'goal_ram = [{ addr = 0xC100, op = "lt", value = 0 }]\n')
    envs, steps = 4, 6
    for task, curves, expected in (("always", "archive", envs * steps), ("never", "random,archive", 0)):
        out = tmp_path / task
        argv = ["bench_archive.py", "explore", "--task", f"{pack}:{task}", "--curves", curves, "--envs", str(envs),
                "--steps", str(steps), "--every", "3", "--device", "cpu", "--out", str(out)]
        with mock.patch.object(sys, "argv", argv):
            assert mod.main() == 0
        data = json.loads((out / "archive_explore.json").read_text())
        assert sorted(data["goals"]) == sorted(curves.split(",")) == sorted(data["curves"])
        for pts in data["goals"].values():
            assert [x for x, _ in pts] == [3 * envs, 6 * envs] and pts[-1][1] == expected
    with mock.patch.object(sys, "argv", ["bench_archive.py", "explore", "--curves", "nope", "--device", "cpu"]):
        assert mod.main() == 2
    assert capsys.readouterr().err.startswith("error: --curves")


def test_each_cell_keeps_the_cell_its_path_came_through_and_the_route_is_the_goals_ancestors():
    """`parent`: the cell an env was in before it stored a cell; `goal_hit`: the last cell of an episode that reached
    the goal; `on_route`: the goal cells and their parents' chains. Env 0 walks keys 1-2-3-4 and reaches the goal;
    env 1 walks 1-5-6, a dead end: the route is 1, 2, 3, 4, and 5, 6 hang off 1 without being on it. With `route`
    0 none of it is kept (no per-step work for it) and no route is logged."""
    off = StateArchive(ArchiveConfig(capacity=16, inserts=2), 2, first_slot=0, device="cpu")
    cfg = ArchiveConfig(capacity=16, inserts=2, route=1.0)
    arch = StateArchive(cfg, 2, first_slot=0, device="cpu")
    walks = [(1, 1), (2, 5), (3, 6), (4, 6)]  # each step's key of env 0 and env 1
    for t, keys in enumerate(walks):
        for a in (arch, off):
            a.observe(torch.tensor(keys), torch.full((2,), t, dtype=torch.int64), torch.zeros(2),
                      torch.zeros(2, dtype=torch.int32), torch.ones(2, dtype=torch.bool))
    off.ended(torch.tensor([True, False]), torch.tensor([True, False]))
    assert "archive/route_cells" not in off.read_stats()
    assert int(off.parent.min()) == off.m and not bool(off.goal_hit.any()) and not bool(off.on_route.any())
    row = {int(arch.keys[r]): r for r in range(int(arch.count))}
    parent = {k: int(arch.parent[r]) for k, r in row.items()}
    m = arch.m
    assert parent == {1: m, 2: row[1], 3: row[2], 4: row[3], 5: row[1], 6: row[5]}
    arch.ended(torch.tensor([True, False]), torch.tensor([True, False]))
    assert not bool(arch.on_route.any())  # marked once per update
    arch.read_stats()
    on = {int(arch.keys[r]) for r in range(m) if bool(arch.on_route[r])}
    assert on == {1, 2, 3, 4} and arch.read_stats()["archive/route_cells"] == 4
    arch.clear()
    assert int(arch.count) == 0 and not bool(arch.goal_hit.any()) and int(arch.parent.min()) == m


def _chains(parent: list[int], ends, m: int) -> set[int]:
    """The cells `ends` and their parents' chains (`m`: no parent), walked one link at a time: mark_route's
    reference."""
    want = set()
    for g in ends:
        while g != m and g not in want:
            want.add(g)
            g = parent[g]
    return want


def test_mark_route_matches_a_python_reference_on_random_trees():
    """Pointer doubling over 300 cells whose parents have fewer steps (as stored paths' do) against walking each
    goal cell's chain in Python."""
    rng = np.random.default_rng(7)
    m = 300
    arch = StateArchive(ArchiveConfig(capacity=m), 1, first_slot=0, device="cpu")
    for trial in range(5):
        parent = [m] + [int(rng.integers(0, i)) if rng.random() < 0.9 else m for i in range(1, m)]
        goals = set(rng.choice(m, size=trial + 1, replace=False).tolist())
        arch.parent[:m] = torch.tensor(parent)
        arch.goal_hit.zero_()
        arch.goal_hit[list(goals)] = True
        arch.mark_route()
        want = _chains(parent, goals, m)
        assert {r for r in range(m) if bool(arch.on_route[r])} == want and not bool(arch.on_route[m])


def test_with_milestone_wins_the_route_also_ends_at_each_levels_entry_cell():
    """`route` with milestones and `win` "milestone": the route is the goal cells' and each level's entry cells'
    (the cells holding j >= 1 milestones with the fewest steps from the start) stored paths, checked against
    walking each chain in plain Python on random archives whose parents have fewer steps; with `win` "goal" only
    the goal cells' paths, and where the task names no milestones no entry cell ends one."""
    from types import SimpleNamespace

    rng = np.random.default_rng(11)
    m = 200
    for trial in range(6):
        win = "milestone" if trial % 3 else "goal"
        k = 0 if trial == 5 else 4
        a = StateArchive(ArchiveConfig(capacity=m, route=1.0, win=win), 1, first_slot=0, device="cpu",
                         milestones=SimpleNamespace(k=k) if k else None)
        used = m - 7 * trial
        a.count.fill_(used)
        steps = np.sort(rng.integers(0, 400, size=m))  # a parent's path is shorter: parents come first
        level = np.minimum(np.arange(m) * 5 // m + rng.integers(-1, 1, size=m), 4).clip(0)
        parent = [m] + [int(rng.integers(0, i)) if rng.random() < 0.9 else m for i in range(1, m)]
        a.steps[:m] = torch.tensor(steps)
        a.parent[:m] = torch.tensor(parent)
        if k:
            a.progress[:m] = torch.tensor(level)
        goals = set(rng.choice(used, size=2, replace=False).tolist())
        a.goal_hit[list(goals)] = True
        ends = set(goals)
        if win == "milestone" and k:
            for lv in range(1, 5):
                rows = [r for r in range(used) if level[r] == lv]
                if rows:
                    least = min(steps[r] for r in rows)
                    ends |= {r for r in rows if steps[r] == least}
        a.mark_route()
        want = _chains(parent, ends, m)
        got = {r for r in range(m) if bool(a.on_route[r])}
        assert got == want and not bool(a.on_route[m]), (trial, win, k)
        if win == "milestone" and k:
            assert ends > goals  # the entry cells end paths of their own


def test_route_share_draws_starts_among_the_routes_cells():
    """`route` = 1: every cell start is drawn among the route's cells (by the usual weights) once there is a route,
    and before it the draw is the usual one; `route` = 0 draws the same rows as before routes existed."""
    n = 2048
    g = torch.Generator().manual_seed(3)
    u = [torch.randint(0, 1 << U_BITS, (n,), generator=g) for _ in range(3)]
    rows = {}
    for share in (0.0, 1.0):
        arch = StateArchive(ArchiveConfig(capacity=8, p_start=0.0, route=share), n, first_slot=0, device="cpu")
        keys = torch.arange(n) % 6
        arch.observe(keys, torch.zeros(n, dtype=torch.int64), torch.zeros(n), torch.zeros(n, dtype=torch.int32),
                     torch.ones(n, dtype=torch.bool))
        before = arch.choose(torch.ones(n, dtype=torch.bool), *u)[1]
        arch.chosen.zero_()
        arch.goal_hit[2] = True
        arch.parent[2] = 4
        arch.mark_route()
        use, rows[share] = arch.choose(torch.ones(n, dtype=torch.bool), *u)
        assert bool(use.all()) and len(set(before.tolist())) == 6
        if share == 0.0:  # route 0: the very rows drawn without a route
            assert torch.equal(rows[share], before)
    assert set(rows[1.0].tolist()) == {2, 4}  # the goal cell and its parent only


def test_the_env_marks_the_route_a_solved_episode_walked():
    """On leave_house, env 0 plays the solution and reaches the goal while env 1 stands still: after the update's
    stats, the route is exactly the cells env 0 walked through before the goal (read from the env's cell keys at
    each step), and env 1's cell (the start's place, where env 0 never stood after a step) is not on it."""
    from gbxcule.rl.tasks import load_task

    solution = load_task("leave_house").solution
    env = GameEnv(task="leave_house", num_envs=2, max_steps=len(solution) + 4,
                  archive={"capacity": 64, "p_start": 1.0, "inserts": 2, "route": 1.0})
    env.reset(seed=0)
    walked = set()
    for a in solution:
        _, _, term, _, _ = env.step(torch.tensor([a, 0], dtype=torch.int32))
        if bool(term[0]):
            break
        walked.add(int(env.cell_keys()[0]))
    assert bool(term[0])  # the goal ended env 0's episode
    stats = env.episode_stats()
    a = env.archive
    on = {int(a.keys[r]) for r in range(int(a.count)) if bool(a.on_route[r])}
    assert on == walked and stats["archive/route_cells"] == len(walked)
    assert int(a.count) > len(walked)  # env 1's standing cell is kept but not on the route
    env.close()


def test_a_route_round_trips_and_its_starts_continue_bit_for_bit():
    """With a route (leave_house solved by env 0) and `route` = 1, an env state saved mid-run and loaded into a new
    env continues with the same observations, rewards, ends and start offsets, and the same route, parents and
    last cells, as the env it came from."""
    from gbxcule.rl.tasks import load_task

    solution = load_task("leave_house").solution
    kw = dict(task="leave_house", num_envs=4, max_steps=len(solution) + 2,
              archive={"capacity": 64, "p_start": 0.0, "schedule": "fixed", "inserts": 4, "route": 1.0, "max_steps": 6})
    env = GameEnv(**kw)
    env.reset(seed=3)
    rng = np.random.default_rng(5)
    for a in solution:  # envs 1-3 wander: cells off the route
        env.step(torch.tensor([a, *rng.integers(0, 8, size=3)], dtype=torch.int32))
    env.episode_stats()  # marks the route
    assert 0 < int(env.archive.on_route.sum()) < int(env.archive.count)
    sd = env.state_dict()
    acts = [rng.integers(0, 8, size=4) for _ in range(20)]
    ref = _trajectory(env, acts)
    other = GameEnv(**kw)
    other.load_state_dict(sd)
    got = _trajectory(other, acts)
    assert all(all(torch.equal(x, y) for x, y in zip(s, t, strict=True)) for s, t in zip(got, ref, strict=True))
    for name in ("parent", "goal_hit", "on_route", "last_row", "start_row"):
        assert torch.equal(getattr(other.archive, name), getattr(env.archive, name)), name
    a = other.archive  # the episodes running now that started from a cell started from one on the route
    assert bool(a.from_archive.any()) and bool(a.on_route[a.start_row[a.from_archive]].all())
    assert repr(other.episode_stats()) == repr(env.episode_stats())
    env.close()
    other.close()


def test_cells_keep_the_recurrent_state_that_reached_them():
    """memory = "cell": a cell inserted or improved keeps the policy state its path reached it with (the scratch
    row takes the rest), an episode from a cell starts with that state and one from the task's start with zero, a
    swarm jump takes its source's state now, and the states travel with shared cells and checkpoints."""
    cfg = ArchiveConfig(capacity=4, inserts=4, p_start=0.0, schedule="fixed", memory="cell", swarm=0.5)
    a = StateArchive(cfg, 3, 1, "cpu")
    assert a.keep_memory(2)
    mem = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    keys = torch.tensor([10, 11, 10])  # env 2 in env 0's cell: env 0 ranks first, so its state is kept
    a.observe(keys, torch.tensor([5, 7, 5]), torch.zeros(3), torch.zeros(3, dtype=torch.int32),
              torch.ones(3, dtype=torch.bool), mem)
    assert int(a.count) == 2 and torch.equal(a.cell_mem[:2], mem[:2])
    a.observe(torch.tensor([11, 12, 12]), torch.tensor([3, 9, 9]), torch.zeros(3),
              torch.zeros(3, dtype=torch.int32), torch.tensor([True, False, False]), -mem)  # a shorter path to 11
    assert torch.equal(a.cell_mem[1], -mem[0]) and int(a.count) == 2  # 12 was not eligible
    done = torch.tensor([True, True, False])
    a.starts(done, torch.zeros(3, dtype=torch.int64), 0, torch.zeros(3, dtype=torch.int64),
             torch.zeros(1, dtype=torch.int32))
    assert bool(a.from_archive[:2].all())
    start = a.start_memory(mem)
    assert torch.equal(start[:2], a.cell_mem[a.start_row[:2]]) and bool(start[:2].abs().sum(1).gt(0).all())
    assert not bool(start[2].any())  # env 2 has run from the task's start all along
    a.p = 1.0  # from the task's start: zero
    a.starts(torch.tensor([True, False, False]), torch.zeros(3, dtype=torch.int64), 0,
             torch.ones(3, dtype=torch.int64), torch.zeros(1, dtype=torch.int32))
    start = a.start_memory(mem)
    assert not bool(start[0].any()) and torch.equal(start[1], a.cell_mem[a.start_row[1]])
    a.swarm_src.copy_(torch.tensor([1, 1, 1], dtype=torch.int32))  # env 2 jumps to env 1: its state now
    a.swarm_dst.copy_(torch.tensor([False, False, True]))
    assert torch.equal(a.start_memory(mem)[2], mem[1])
    # shared: another process's archive takes the cells with their states
    b = StateArchive(cfg, 3, 1, "cpu")
    b.keep_memory(2)
    rows, valid, rec = a.outbox(4)
    out_rows, write = b.merge(valid, rec, a.cell_mem.index_select(0, rows))
    assert int(b.count) == 2 and all(torch.equal(b.cell_mem[b.lookup(torch.tensor([k]))[1][0]],
                                                 a.cell_mem[a.lookup(torch.tensor([k]))[1][0]]) for k in (10, 11))
    # a checkpoint holds them; one without them (or of another size) is refused with one line
    c = StateArchive(cfg, 3, 1, "cpu")
    c.keep_memory(2)
    c.load_state_dict(a.state_dict())
    assert torch.equal(c.cell_mem, a.cell_mem)
    other = StateArchive(cfg, 3, 1, "cpu")
    other.keep_memory(3)
    with pytest.raises(EnvConfigError, match="policy states of 2 floats"):
        other.load_state_dict(a.state_dict())
    assert not bool(a.cell_mem[-1].any())  # the scratch row, which takes what is not written, is zero again
    zero = StateArchive(ArchiveConfig(capacity=4), 3, 1, "cpu")
    assert not zero.keep_memory(2) and zero.cell_mem is None  # memory = "zero" keeps nothing
    # the trainer's memory check counts them: cells + scratch row, two buffers per env, one per stored sample
    from gbxcule.rl.archive import memory_bytes

    assert memory_bytes(cfg, 3, 10, 8) == 8 * (4 + 1 + 2 * 3 + 10) and memory_bytes({"capacity": 4}, 3, 10, 8) == 0


def test_a_recurrent_policy_starts_episodes_from_cells_with_their_kept_state(tmp_path, monkeypatch):
    """PPO with ppo.gru and env.archive.memory = "cell": the learner's unroll starts each new episode with the
    state acting started it with (its cell's), so with one epoch of one minibatch the update replays acting
    (approx_kl under 1e-10), and an unroll that starts them at zero does not; the run resumes bit for bit; other
    algorithms and a feed-forward policy are refused with one line."""
    from gbxcule.rl.algos import ppo
    from gbxcule.rl.config import ConfigError
    from gbxcule.rl.rundir import load_checkpoint
    from gbxcule.rl.training import make_config, train

    def cfg(run_dir, **run):
        c = _tiny(run_dir, **run)
        c.env.archive = ArchiveConfig.from_dict({**ARCHIVE_TABLE, "memory": "cell"})
        c.ppo.gru, c.ppo.learn_share, c.ppo.minibatches, c.ppo.lr = 8, 0.5, 1, 1e-3
        return c

    s = train(cfg(tmp_path / "straight"))
    rows = _rows(tmp_path / "straight")
    assert s["updates"] == 4 and all(r["approx_kl"] < 1e-10 for r in rows), [r["approx_kl"] for r in rows]
    arch = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")["env"]["archive"]
    mem = unpack_tensor(arch["cell_mem"], torch.zeros(65, 8))  # (packed in the checkpoint)
    assert bool((mem[:int(arch["count"])].abs().sum(1) > 0).all())
    assert bool(arch["from_archive"].any())
    part = tmp_path / "part"
    assert train(cfg(part, stop_after_updates=2))["stopped"] == "stop_after_updates"
    train(cfg(part), resume=True)
    assert _rows(part) == rows
    real = ppo.unroll
    monkeypatch.setattr(ppo, "unroll", lambda model, obs, state, dones, starts=None: real(model, obs, state, dones))
    train(cfg(tmp_path / "zero_starts"))
    assert max(r["approx_kl"] for r in _rows(tmp_path / "zero_starts")) > 1e-10
    table = {**ARCHIVE_TABLE, "memory": "cell"}
    for algo in ("a2c", "dqn", "pqn"):
        with pytest.raises(ConfigError, match="memory"):
            make_config(None, {"algo": algo, "env": {"num_envs": 6, "archive": table}})
    with pytest.raises(ConfigError, match="needs ppo.gru"):
        make_config(None, {"env": {"num_envs": 6, "archive": table}})


def test_a_resume_without_the_envs_state_keeps_the_archive_and_its_cells_policy_states(tmp_path):
    """run.checkpoint_env_state = "never" (a large run's "auto"): the checkpoint holds the archive, its cells'
    states compressed, and no env emulator state, frame ring or recurrent state; the resume restarts every env with
    the archive whole, so a lost machine's run goes on from the cells it had found. A restarted env's recurrent
    state is its start cell's kept one (memory = "cell"; zero from the task's start), as a new episode's."""
    from gbxcule.rl.rundir import load_checkpoint
    from gbxcule.rl.training import train

    part = tmp_path / "part"

    def cfg(**run):
        c = _tiny(part, checkpoint_env_state="never", **run)
        c.env.archive = {**ARCHIVE_TABLE, "memory": "cell"}
        c.ppo.gru, c.ppo.minibatches = 8, 2
        return c

    train(cfg(stop_after_updates=2))
    ck = load_checkpoint(part)
    had = int(ck["env"]["archive"]["count"])
    assert had > 0 and "emu" not in ck["env"] and "ring" not in ck["env"] and ck["extra"]["state"] is None
    assert len(ck["env"]["archive"]["cells"]) == 4 and ck["env"]["archive"]["cell_mem"]["z"].numel() > 0
    with pytest.warns(UserWarning, match="restarts from a start slot"):
        resumed = train(cfg(), resume=True)
    assert resumed["updates"] == 4
    assert _rows(part)[2]["archive/cells"] >= had  # (an emptied archive would hold a few new cells)
    env = GameEnv(task="talk_to_hiker", num_envs=4, archive={"capacity": 8, "memory": "cell"})
    assert env.keep_policy_state(3)
    env.archive.cell_mem.copy_(torch.arange(27, dtype=torch.float32).view(9, 3))
    env.archive.cell_mem[8].zero_()  # (the scratch row: the task's start)
    env.archive.start_row.copy_(torch.tensor([2, 8, 0, 5]))
    out = torch.full((4, 3), 7.0)
    env.restart_policy_state(out)
    assert torch.equal(out, env.archive.cell_mem[[2, 8, 0, 5]])
    plain = GameEnv(task="talk_to_hiker", num_envs=4, archive={"capacity": 8})
    plain.restart_policy_state(out)
    assert not out.any()
