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
)
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
                                           found=self.clock)
                saved[e] = row
                self.inserted += 1
            else:
                self.dropped += 1
        return saved

    def weight(self, c) -> int:
        table = lambda k: round(WEIGHT_ONE / math.sqrt(1 + min(k, TABLE - 1)))  # noqa: E731
        a, b, r = (round(w * COEF_ONE) for w in (self.cfg.w_chosen, self.cfg.w_visits, self.cfg.w_recent))
        return (a * table(c["chosen"]) + b * table(c["visits"])
                + r * WEIGHT_ONE * int(self.clock - c["found"] < self.cfg.recent_steps))

    def choose(self, done, u_start, u_cell, p):
        cdf, total = [], 0
        for key in self.rows:
            total += self.weight(self.cells[key])
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
                        recent_steps=3)
    arch = StateArchive(cfg, n, first_slot=5, device="cpu")
    ref = Reference(cfg, n)
    rng = np.random.default_rng(11)
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
        u_s = torch.tensor(rng.integers(0, 1 << U_BITS, size=n))
        u_c = torch.tensor(rng.integers(0, 1 << U_BITS, size=n))
        use, row = arch.choose(torch.tensor(done), u_s, u_c)
        want_rows = ref.choose(done.tolist(), u_s.tolist(), u_c.tolist(), arch.p)
        assert {e: int(row[e]) for e in range(n) if bool(use[e])} == want_rows, step
    k = len(ref.rows)
    assert int(arch.count) == k and k == min(capacity, k)
    snap = arch.snapshot()
    for row, key in enumerate(ref.rows):
        c = ref.cells[key]
        assert int(snap["keys"][row]) == key
        assert (int(snap["steps"][row]), int(snap["visits"][row]), int(snap["chosen"][row]),
                int(snap["found"][row])) == (c["steps"], c["visits"], c["chosen"], c["found"]), row
        assert snap["ret"][row] == np.float32(c["ret"]) and snap["best"][row] == np.float32(c["best"])
    s = arch.read_stats()
    assert (s["archive/cells"], s["archive/inserted"], s["archive/improved"], s["archive/dropped"]) == (
        k, ref.inserted, ref.improved, ref.dropped)
    if capacity == 12:
        assert ref.dropped > 0  # the full archive dropped new cells
    assert ref.improved > 0  # and kept shorter paths to known ones


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


def test_config_is_checked():
    with pytest.raises(EnvConfigError, match="unknown archive setting"):
        ArchiveConfig.from_dict({"capacty": 4})
    with pytest.raises(EnvConfigError, match="p_start must be <= 1"):
        ArchiveConfig.from_dict({"p_start": 2.0})
    with pytest.raises(EnvConfigError, match="cells must be one of"):
        ArchiveConfig.from_dict({"cells": "tiles"})
    with pytest.raises(EnvConfigError, match="all 0"):
        ArchiveConfig.from_dict({"w_chosen": 0, "w_visits": 0, "w_recent": 0})
    with pytest.raises(EnvConfigError, match="needs RAM cells"):
        StateArchive(ArchiveConfig(swarm_on="area"), 4, 1, "cpu", area_keys=False)
