"""Milestones and dead ends in task packs: progress events rewarded once per episode, and the RAM state that
makes a task unwinnable (docs/rl_env.md)."""

from __future__ import annotations

import pytest

from gbxcule.rl.tasks import Milestone, TaskError, parse_pack

PACK = """
[pack]
name = "m"
rom = "OVERWORLD"
milestones = [{ name = "left_house", addr = 0xC104, mask = 0x01, value = 0x01 },
              { name = "route", addr = 0xC104, mask = 0x04, value = 0x04 }]
fail_ram = [{ addr = 0xC10A, value = 9 }]

[tasks.a]
goal_ram = [{ addr = 0xC104, mask = 0x08, value = 0x08 }]

[tasks.b]
goal_ram = [{ addr = 0xC100, value = 2 }]
milestones = [{ name = "lab", addr = 0xC104, mask = 0x02, value = 0x02, op = "eq" }]
fail_ram = []
"""


def test_pack_milestones_and_fail_conditions_apply_to_every_task_unless_the_task_names_its_own():
    tasks = parse_pack(PACK, "m.toml")
    a, b = tasks["a"], tasks["b"]
    assert [m.name for m in a.milestones] == ["left_house", "route"]
    assert isinstance(a.milestones[0], Milestone) and a.milestones[1].condition.mask == 0x04
    assert [(c.addr, c.value) for c in a.fail_ram] == [(0xC10A, 9)]
    assert [m.name for m in b.milestones] == ["lab"] and b.fail_ram == ()


@pytest.mark.parametrize("bad, needle", [
    ('milestones = [{ addr = 0xC104, value = 1 }]', "needs a name"),
    ('milestones = [{ name = "x", addr = 0xC104, value = 1 }, { name = "x", addr = 0xC104, value = 2 }]',
     "given twice"),
    ('milestones = [{ name = "x", addr = 0x8000, value = 1 }]', "not a WRAM"),
    ('milestones = { name = "x" }', "must be a list"),
    ('fail_ram = [{ addr = 0xC104 }]', "each fail_ram entry needs addr and value"),
    ('fail_ram = [{ addr = 0xC104, value = 1, bits = 3 }]', "unknown fail_ram key"),
    ('milestones = [{ name = "x", template = "a.npz", addr = 0xC104 }]', "takes template and tau, not addr"),
    ('milestones = [{ name = "x", template = "a.npz", tau = 2 }]', "tau must be a number"),
    ('milestones = [{ name = "x", template = 3 }]', "template must be a template file"),
    ("lives = 0xC104", "lives must be a table of addr and lost"),
    ('lives = { lost = "up" }', "lives must be a table of addr and lost"),
    ('lives = { addr = 0xC104, lost = "sideways" }', 'lives.lost must be "down" or "up"'),
    ('lives = { addr = 0x8000 }', "not a WRAM"),
    ('lives = { addr = "C104" }', "lives.addr must be an address"),
    ('lives = { addr = 0xC104, mask = 1 }', "lives must be a table"),
])
def test_bad_milestones_fail_conditions_and_lives_are_one_line(bad, needle):
    text = f'[pack]\nname = "m"\nrom = "OVERWORLD"\n{bad}\n[tasks.a]\ngoal_ram = [{{ addr = 0xC100, value = 1 }}]\n'
    with pytest.raises(TaskError, match=needle):
        parse_pack(text, "m.toml")


# --- in the env: rewarded once per episode, logged, checkpointed; a dead end ends the episode -------------------
torch = pytest.importorskip("torch")

LEAVE = "R4 D6 R N2"  # overworld leave_house's solution: the town (FLAGS bit 0) on its last steps
GAME = """
[pack]
name = "ms"
rom = "OVERWORLD"
cells = [0xC100, 0xC101, 0xC102]
milestones = [{ name = "town", addr = 0xC104, mask = 0x01, value = 0x01 },
              { name = "lab", addr = 0xC104, mask = 0x02, value = 0x02 }]

[tasks.from_bed]
start = { script = "N5" }
step_limit = 30
goal_ram = [{ addr = 0xC100, value = 2 }]
reward = { step_cost = 0.0, goal_bonus = 0.0, milestone = 1.0 }

[tasks.from_door]
start = { script = "N5 R4 D6 R N2" }
step_limit = 30
goal_ram = [{ addr = 0xC100, value = 2 }]
reward = { step_cost = 0.0, goal_bonus = 0.0, milestone = 1.0 }

[tasks.dead_end]
start = { script = "N5" }
step_limit = 30
goal_ram = [{ addr = 0xC100, value = 2 }]
fail_ram = [{ addr = 0xC104, mask = 0x01, value = 0x01 }]
reward = { step_cost = 0.0, goal_bonus = 0.0, milestone = 0.0, dead_end = -2.0 }
"""


def game_env(task: str, n: int = 2, **kw):
    from gbxcule.rl.env import GameEnv

    return GameEnv(num_envs=n, task=parse_pack(GAME, "ms.toml")[task], **kw)


def actions(script: str) -> list[int]:
    from gbxcule.core.action_codec import get_codec
    from gbxcule.rl.tasks import parse_script

    return list(parse_script(script, get_codec("pokemonred_puffer_v1")))


def test_a_milestone_pays_once_per_episode_and_the_logs_say_how_far_episodes_got():
    env = game_env("from_bed")
    env.reset(seed=0)
    paid = torch.zeros(2)
    for a in actions(LEAVE + " U N2 D N2"):  # into town, back home through the door, out again: one milestone
        _, r, *_ = env.step(torch.tensor([a, 0]))
        paid += r
    assert paid.tolist() == [1.0, 0.0]
    assert env.milestones.tolist() == [[True, False], [False, False]]
    for _ in range(30):  # the step limit ends both episodes
        env.step(torch.tensor([0, 0]))
    st = env.episode_stats()
    assert st["milestone_episodes"] == [1, 0] and st["milestone_rates"] == [0.5, 0.0]
    assert st["milestone_deepest"] == 1 and "dead_ends" not in st
    assert env.final_milestones.tolist() == [[True, False], [False, False]]


def test_a_start_that_already_holds_a_milestone_earns_nothing_for_it():
    env = game_env("from_door")
    env.reset(seed=0)
    assert env.milestones[0].all() and not env.milestones[1].any()  # the start is in town
    total = sum(env.step(torch.tensor([a, a]))[1] for a in actions("U N2 D N2"))  # home and back out
    assert total.tolist() == [0.0, 0.0]


def test_a_dead_end_ends_the_episode_unsuccessful_with_its_penalty_and_is_counted():
    env = game_env("dead_end", n=2)
    env.reset(seed=0)
    seen = None
    for a in actions(LEAVE):
        _, r, term, trunc, _ = env.step(torch.tensor([a, 0]))
        if bool(term[0]):
            seen = (r.tolist(), term.tolist(), trunc.tolist(), env.final_success[0].item())
            break
    assert seen == ([-2.0, 0.0], [True, False], [False, False], False)
    assert env.episode_stats()["dead_ends"] == 1


def test_milestones_are_checkpointed_and_cloned_with_the_env(tmp_path):
    env = game_env("from_bed")
    env.reset(seed=0)
    for a in actions(LEAVE):
        env.step(torch.tensor([a, 0]))
    sd = env.state_dict()
    other = game_env("from_bed")
    other.load_state_dict(sd)
    assert torch.equal(other.milestones, env.milestones) and other.milestones[0, 0]
    other.clone_states(0, torch.tensor([False, True]))
    assert other.milestones[:, 1].tolist() == [True, False]


def test_the_eval_reports_the_milestones_each_episode_reached():
    from gbxcule.rl.evaluate import Episodes, summarize

    env = game_env("from_bed")
    script = iter(actions(LEAVE) + [0] * 40)
    run = Episodes(env, lambda obs, done: torch.tensor([next(script), 0]))
    while not bool(run.finished.all()):
        run.step()
    rep = summarize(run.result(), env.success_source, False)
    assert rep["milestone_rates"] == {"town": 0.5, "lab": 0.0} and rep["milestone_deepest"] == [1, 0]
    assert rep["mean_deepest"] == 0.5


def resumed_rows(tmp_path, pack_text: str, task: str, env: dict, keep: tuple[str, ...]):
    """A 3-update CPU PPO run of the pack's task straight through (a) and stopped after one update then resumed (b):
    the `keep` metrics of each update's row, for a and b."""
    import json

    from gbxcule.rl.training import make_config, train

    pack = tmp_path / "pack.toml"
    pack.write_text(pack_text)

    def cfg(run, **extra):
        return make_config(None, {"total_steps": 3 * 4 * 8, "env": {"num_envs": 4, "task": f"{pack}:{task}", **env},
                                  "ppo": {"rollout_steps": 8, "epochs": 1, "minibatches": 2, "model": "small"},
                                  "run": {"run_dir": str(run), "device": "cpu", "progress": False, "evals": 0,
                                          "tensorboard": False, "eval_episodes": 0, "checkpoint_every": 1, **extra}})

    def rows(run):
        return [{k: r.get(k) for k in keep} for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]

    train(cfg(tmp_path / "a"))
    train(cfg(tmp_path / "b", stop_after_updates=1))
    train(cfg(tmp_path / "b"), resume=True)
    return rows(tmp_path / "a"), rows(tmp_path / "b")


def test_a_run_logs_milestones_and_resumes_them_bit_for_bit(tmp_path):
    a, b = resumed_rows(tmp_path, GAME, "from_bed", {"max_steps": 6},
                        ("env_steps", "milestone_rates", "milestone_episodes", "milestone_deepest", "milestone/town",
                         "episode_return", "pg_loss"))
    assert a == b and len(a) == 3
    assert all(len(r["milestone_rates"]) == 2 and r["milestone/town"] == r["milestone_rates"][0] for r in a)


def test_progress_cells_keep_states_before_and_after_a_milestone_apart():
    """Cells against a plain Python reference: (map, x, y) and the milestones held, packed as the archive packs
    them; the same tile with and without the town milestone is two cells, with it twice is one."""
    from gbxcule.rl.goals import ram_rows

    env = game_env("from_bed", n=2, archive={"capacity": 256, "inserts": 8, "p_start": 1.0})
    env.reset(seed=0)
    rows = torch.tensor(ram_rows([0xC100, 0xC101, 0xC102, 0xC104], env.backend.layout))
    seen = set()

    def reference() -> list[int]:
        m, x, y, flags = env.ram.index_select(0, rows).to(torch.int64).tolist()
        return [a | b << 8 | c << 16 | ((f & 1) | (f & 2)) << 24 for a, b, c, f in zip(m, x, y, flags, strict=True)]

    # env 0 walks out into town and back home to its start tile; env 1 stands at the start tile all along
    for a in actions(LEAVE + " U N2 L U5 L4"):
        env.step(torch.tensor([a, 0]))
        keys = env.cell_keys().tolist()
        assert keys == reference()
        seen.update(keys)
    cells = set(env.archive.keys[:int(env.archive.count)].tolist())
    assert cells == seen  # every state offered became a cell of its own key (capacity and inserts to spare)
    start = reference()[1]
    back_home = reference()[0]
    assert back_home == start | (1 << 24) and {start, back_home} <= cells  # one tile, two cells
    places = {k & 0xFFFFFF for k in cells}
    assert sum(1 for p in places if p in cells and p | (1 << 24) in cells) >= 5  # the way down, then back up
    assert int(env.archive.progress[list(env.archive.keys[:int(env.archive.count)].tolist()).index(back_home)]) == 1


def test_w_progress_weighs_the_cells_that_hold_more_milestones():
    from gbxcule.rl.archive import WEIGHT_ONE, ArchiveConfig, StateArchive

    a = StateArchive(ArchiveConfig(capacity=4, w_chosen=1.0, w_visits=0.0, w_recent=0.0, w_progress=2.0), 1, 1, "cpu")
    a.count.fill_(3)
    a.progress[:3] = torch.tensor([0, 1, 2])
    table_one = int(a._table[0])  # 1 / sqrt(1 + 0 chosen)
    w = a.weights().tolist()
    assert w[:3] == [16 * table_one, 16 * table_one + 16 * WEIGHT_ONE, 16 * table_one + 32 * WEIGHT_ONE] and w[3] == 0


def test_frontier_share_draws_starts_among_the_cells_that_hold_the_most_milestones():
    """`frontier` f: a share f of the cell starts is drawn among the cells holding the most milestones, by the
    same weights (the rest as before); with no cell ahead of another (a task without milestones) every cell is on
    the frontier and the draw is the usual one; a later milestone moves the frontier."""
    from gbxcule.rl.archive import U_BITS, ArchiveConfig, StateArchive

    n = 4096
    g = torch.Generator().manual_seed(5)
    u_start, u_cell, u_front = (torch.randint(0, 1 << U_BITS, (n,), generator=g) for _ in range(3))
    done = torch.ones(n, dtype=torch.bool)

    def archive(share):
        a = StateArchive(ArchiveConfig(capacity=8, p_start=0.0, frontier=share), n, 1, "cpu")
        a.observe(torch.arange(n) % 6, torch.zeros(n, dtype=torch.int64), torch.zeros(n),
                  torch.zeros(n, dtype=torch.int32), torch.ones(n, dtype=torch.bool))
        return a

    plain = archive(0.0).choose(done, u_start, u_cell)[1]
    a = archive(1.0)
    assert torch.equal(a.choose(done, u_start, u_cell, None, u_front)[1], plain)  # all six hold none: all frontier
    for share in (1.0, 0.5):
        a = archive(share)
        a.progress[:6] = torch.tensor([0, 1, 2, 2, 1, 0])
        assert a.frontier_cells()[:6].tolist() == [False, False, True, True, False, False]
        rows = a.choose(done, u_start, u_cell, None, u_front)[1]
        front = (rows == 2) | (rows == 3)
        took = u_front < int(share * (1 << U_BITS))
        assert bool(front[took].all()) and torch.equal(rows[~took], plain[~took])
        assert 0.4 < float((rows[took] == 2).float().mean()) < 0.6  # the two weigh the same
    a.progress[5] = 3
    assert a.frontier_cells()[:6].tolist() == [False] * 5 + [True]
    # the logs count the frontier's cells where the task names milestones: after leaving home, those holding "town"
    env = game_env("from_bed", n=2, archive={"capacity": 256, "inserts": 8, "p_start": 1.0, "frontier": 0.5})
    env.reset(seed=0)
    for act in actions(LEAVE + " U N2"):
        env.step(torch.tensor([act, 0]))
    stats = env.archive.read_stats()
    town = int((env.archive.progress[:int(env.archive.count)] == 1).sum())
    assert stats["archive/frontier_cells"] == town > 0 and stats["archive/cells"] > town


def test_edge_share_draws_starts_among_the_cells_started_from_by_4p_1_minus_p_of_their_win_rate():
    """`edge` e: after the frontier's and the reach's parts of the share draw, the next e of it is drawn among the
    cells that episodes have started from, by 4 p (1 - p) of each one's smoothed win rate p = (wins + 1) /
    (tries + 2) alone (against a plain Python count of the draws); cells never started from are never drawn there;
    with none started from the usual draw stands; frontier + reach + edge over 1 is one line, and so is the edge
    under win = "goal" on a task with milestones."""
    from gbxcule.rl.archive import U_BITS, ArchiveConfig, StateArchive
    from gbxcule.rl.env import EnvConfigError

    with pytest.raises(EnvConfigError, match="frontier \\+ reach \\+ edge \\+ entry is 1.1") as err:
        ArchiveConfig(frontier=0.25, reach=0.25, edge=0.6)
    assert "\n" not in str(err.value)
    ArchiveConfig(frontier=0.34, reach=0.56, edge=0.1)  # adds up to 1 (in floats, to a hair over)
    with pytest.raises(EnvConfigError, match="edge needs win = 'milestone'") as err:  # where the task names some
        game_env("from_bed", archive={"edge": 0.5})
    assert "\n" not in str(err.value)
    game_env("from_bed", archive={"edge": 0.5, "win": "milestone"})
    n = 8192
    g = torch.Generator().manual_seed(3)
    u_start, u_cell, u_share = (torch.randint(0, 1 << U_BITS, (n,), generator=g) for _ in range(3))
    done = torch.ones(n, dtype=torch.bool)

    def archive(**kw):
        a = StateArchive(ArchiveConfig(capacity=8, p_start=0.0, **kw), n, 1, "cpu")
        a.observe(torch.arange(n) % 6, torch.zeros(n, dtype=torch.int64), torch.zeros(n),
                  torch.zeros(n, dtype=torch.int32), torch.ones(n, dtype=torch.bool))
        return a

    plain = archive().choose(done, u_start, u_cell)[1]
    assert torch.equal(archive(edge=1.0).choose(done, u_start, u_cell, None, u_share)[1], plain)  # none tried
    tries, wins = [0, 10, 10, 10, 10, 0], [0, 0, 5, 10, 2, 0]
    expect = [0.0] + [4 * (w + 1) / (t + 2) * (1 - (w + 1) / (t + 2)) for t, w in zip(tries[1:5], wins[1:5],
                                                                                    strict=True)] + [0.0]
    expect = [x / sum(expect) for x in expect]  # cells 1-4: 0.31, 1, 0.31, 0.75 before normalising
    for front, reach, edge in ((0.0, 0.0, 1.0), (0.25, 0.0, 0.5), (0.2, 0.2, 0.4)):
        a = archive(frontier=front, reach=reach, edge=edge)
        a.tries[:6] = torch.tensor(tries)
        a.wins[:6] = torch.tensor(wins)
        rows = a.choose(done, u_start, u_cell, None, u_share)[1]
        lo, hi = int((front + reach) * (1 << U_BITS)), int((front + reach + edge) * (1 << U_BITS))
        took = (u_share >= lo) & (u_share < hi)
        got = [float((rows[took] == c).float().mean()) for c in range(6)]
        assert got[0] == got[5] == 0.0 and max(abs(x - y) for x, y in zip(got, expect, strict=True)) < 0.03, got
        assert torch.equal(rows[u_share >= hi], plain[u_share >= hi])  # past the edge's part: as before
        # (no cell holds more milestones than another here: the frontier's and the reach's parts draw as usual)
        assert torch.equal(rows[u_share < lo], plain[u_share < lo])


def level_archive(n: int, level: list[int], tries: list[int], wins: list[int], **cfg):
    """A state archive (3 milestones named, `win` "milestone", `cfg` its other settings) whose cells the `n` envs'
    keys fill, cell c holding `level[c]` milestones after `tries[c]` episodes from it of which `wins[c]` won."""
    from types import SimpleNamespace

    from gbxcule.rl.archive import ArchiveConfig, StateArchive

    c = len(level)
    a = StateArchive(ArchiveConfig(capacity=8, p_start=0.0, win="milestone", **cfg), n, 1, "cpu",
                     milestones=SimpleNamespace(k=3))
    a.observe(torch.arange(n) % c, torch.zeros(n, dtype=torch.int64), torch.zeros(n),
              torch.zeros(n, dtype=torch.int32), torch.ones(n, dtype=torch.bool))
    a.progress[:c] = torch.tensor(level)
    a.tries[:c] = torch.tensor(tries)
    a.wins[:c] = torch.tensor(wins)
    return a


def test_edge_by_level_gives_every_level_with_tried_cells_the_same_share_of_the_edge():
    """`edge_by = "level"`: the edge's draw gives the tried cells holding j milestones together the same share as
    those of every other level with tried cells, each cell its share of its level by 4 p (1 - p) (a plain Python
    expectation from the tries and wins); untried cells and levels without tried cells draw nothing; "cell" (the
    default) draws every tried cell by its own weight; a bad value is one line."""

    from gbxcule.rl.archive import U_BITS, ArchiveConfig
    from gbxcule.rl.env import EnvConfigError

    n = 1 << 16
    g = torch.Generator().manual_seed(5)
    u_start, u_cell = (torch.randint(0, 1 << U_BITS, (n,), generator=g) for _ in range(2))
    u_share = torch.zeros(n, dtype=torch.int64)  # every draw is the edge's (frontier and reach 0, edge 1)
    done = torch.ones(n, dtype=torch.bool)
    level = [0, 1, 1, 1, 2, 3]  # no cell holds 3 milestones but the last, never tried
    tries, wins = [4, 40, 10, 10, 10, 0], [2, 0, 0, 5, 9, 0]

    def archive(**kw):
        return level_archive(n, level, tries, wins, edge=1.0, **kw)

    mid = [4 * (w + 1) / (t + 2) * (1 - (w + 1) / (t + 2)) if t else 0.0 for t, w in zip(tries, wins, strict=True)]
    tried_levels = {lv for lv, t in zip(level, tries, strict=True) if t}
    by_level = [mid[c] / sum(mid[d] for d in range(6) if level[d] == level[c]) / len(tried_levels) if tries[c] else 0.0
                for c in range(6)]
    by_cell = [x / sum(mid) for x in mid]
    for edge_by, expect in (("level", by_level), ("cell", by_cell)):
        rows = archive(edge_by=edge_by).choose(done, u_start, u_cell, None, u_share)[1]
        got = (torch.bincount(rows, minlength=9)[:6].double() / n).tolist()
        assert got[5] == 0.0 and max(abs(x - y) for x, y in zip(got, expect, strict=True)) < 0.01, (edge_by, got)
    assert by_level[4] > 0.3 > by_cell[4]  # the lone cell of level 2 gets a third, under a fifth by its own weight
    with pytest.raises(EnvConfigError, match="edge_by") as err:
        ArchiveConfig(edge_by="segment")
    assert "\n" not in str(err.value)


def test_entry_share_draws_each_level_alike_among_its_cells_with_the_fewest_steps_from_the_start():
    """`entry` e: after the frontier's, the reach's and the edge's parts of the share draw, the next e of it is drawn
    among each level's entry cells (the cells holding j >= 1 milestones with the fewest steps from the start of any
    holding j; a plain Python reference), every level alike, whatever their win rates; level 0 (the task's start)
    and the other cells are never drawn there; past its part the draw is as without it; where the task names no
    milestones it draws nothing new; frontier + reach + edge + entry over 1 is one line."""
    from types import SimpleNamespace

    from gbxcule.rl.archive import U_BITS, ArchiveConfig, StateArchive
    from gbxcule.rl.env import EnvConfigError

    n = 1 << 16
    g = torch.Generator().manual_seed(7)
    u_start, u_cell, u_share = (torch.randint(0, 1 << U_BITS, (n,), generator=g) for _ in range(3))
    done = torch.ones(n, dtype=torch.bool)
    level = [0, 1, 1, 1, 2, 2, 3, 0]
    steps = [0, 40, 12, 12, 90, 70, 200, 5]  # level 1: cells 2 and 3 tie; level 2: cell 5; level 3: cell 6
    tries, wins = [0, 9, 30, 30, 0, 50, 8, 0], [0, 4, 0, 0, 0, 0, 0, 0]  # the entries never win

    def archive(k=3, **kw):
        a = StateArchive(ArchiveConfig(capacity=8, p_start=0.0, win="milestone", **kw), n, 1, "cpu",
                         milestones=SimpleNamespace(k=k) if k else None)
        a.observe(torch.arange(n) % 8, torch.zeros(n, dtype=torch.int64), torch.zeros(n),
                  torch.zeros(n, dtype=torch.int32), torch.ones(n, dtype=torch.bool))
        if k:
            a.progress[:8] = torch.tensor(level)
        a.steps[:8] = torch.tensor(steps)
        a.tries[:8] = torch.tensor(tries)
        a.wins[:8] = torch.tensor(wins)
        return a

    least = {lv: min(s for s, v in zip(steps, level, strict=True) if v == lv) for lv in set(level) if lv}
    entry = [bool(lv) and steps[c] == least[lv] for c, lv in enumerate(level)]
    assert entry == [False, False, True, True, False, True, True, False]
    assert archive().entry_cells()[:8].tolist() == entry
    n_levels = len(least)
    expect = [1 / n_levels / sum(e and level[d] == level[c] for d, e in enumerate(entry)) if entry[c] else 0.0
              for c in range(8)]  # cells 2 and 3 a sixth each, 5 and 6 a third
    for front, edge, share in ((0.0, 0.0, 1.0), (0.2, 0.3, 0.4)):
        plain = archive(frontier=front, edge=edge).choose(done, u_start, u_cell, None, u_share)[1]
        rows = archive(frontier=front, edge=edge, entry=share).choose(done, u_start, u_cell, None, u_share)[1]
        lo, hi = int((front + edge) * (1 << U_BITS)), int((front + edge + share) * (1 << U_BITS))
        took = (u_share >= lo) & (u_share < hi)
        got = (torch.bincount(rows[took], minlength=9)[:8].double() / int(took.sum())).tolist()
        assert max(abs(x - y) for x, y in zip(got, expect, strict=True)) < 0.01, got
        assert torch.equal(rows[~took], plain[~took])
    none = archive(k=0, entry=1.0)  # no milestones: no entry cells, the usual draw
    assert not bool(none.entry_cells().any())
    assert torch.equal(none.choose(done, u_start, u_cell, None, u_share)[1],
                       archive(k=0).choose(done, u_start, u_cell, None, u_share)[1])
    with pytest.raises(EnvConfigError, match="frontier \\+ reach \\+ edge \\+ entry is 1.2") as err:
        ArchiveConfig(frontier=0.4, edge=0.4, entry=0.4)
    assert "\n" not in str(err.value)


def test_an_episode_that_gains_a_milestone_puts_its_path_on_the_route_under_milestone_wins():
    """In the env: env 0 walks out of the house (the "town" milestone, not the goal) while env 1 stands still.
    With `win` "milestone" and `route` the cells env 0 walked through to the milestone are the route after the
    update's stats (the town's first cell, the level's entry, ends it); with `win` "goal" no route exists yet."""
    walked_by = {}
    for win in ("milestone", "goal"):
        env = game_env("from_bed", archive={"capacity": 64, "p_start": 1.0, "inserts": 2, "route": 1.0, "win": win})
        env.reset(seed=0)
        walked = []
        for a in actions(LEAVE):
            env.step(torch.tensor([a, 0]))
            walked.append(int(env.cell_keys()[0]))
            if bool(env.milestones[0, 0]):
                break
        assert bool(env.milestones[0, 0]) and not bool(env.milestones[1].any())
        stats = env.episode_stats()
        arch = env.archive
        rows = [r for r in range(int(arch.count)) if bool(arch.on_route[r])]
        on = {int(arch.keys[r]) for r in rows}
        walked_by[win] = (on, set(walked), stats.get("archive/route_cells"))
        # the route by level, and each level's deepest route cell not yet won (untried, or fewer wins than losses)
        by_level = stats["archive/route_level_cells"]
        levels = len(by_level)
        assert by_level == [sum(int(arch.progress[r]) == j for r in rows) for j in range(levels)]
        open_ = [r for r in rows if int(arch.tries[r]) == 0 or 2 * int(arch.wins[r]) < int(arch.tries[r])]
        assert stats["archive/back_at"] == [max((int(arch.steps[r]) for r in open_ if int(arch.progress[r]) == j),
                                                default=None) for j in range(levels)]
        # each level's window (its deepest open cell and the route_back steps before it): its episodes and wins
        back = arch.cfg.route_back
        window = [[r for r in rows if int(arch.progress[r]) == j and d is not None
                   and d - back <= int(arch.steps[r]) <= d] for j, d in enumerate(stats["archive/back_at"])]
        assert stats["archive/back_tries"] == [sum(int(arch.tries[r]) for r in w) for w in window]
        assert stats["archive/back_wins"] == [sum(int(arch.wins[r]) for r in w) for w in window]
        env.close()
    on, walked, n = walked_by["milestone"]
    assert on == walked and n == len(on) > 0
    assert walked_by["goal"][0] == set() and walked_by["goal"][2] == 0


def test_route_by_level_gives_each_level_on_the_route_the_same_share_and_favours_half_won_cells():
    """`route_by = "level"`: the route's draw gives its cells holding j milestones together the same share as those
    of every other level on it, each cell its share of its level by 4 p (1 - p) of its smoothed win rate (an untried
    cell 1; a plain Python expectation); cells off the route draw nothing; "weights" (the default) draws the route by
    the usual weights, as before the knob; a bad value is one line."""
    from gbxcule.rl.archive import U_BITS, ArchiveConfig
    from gbxcule.rl.env import EnvConfigError

    n = 1 << 16
    g = torch.Generator().manual_seed(9)
    u_start, u_cell = (torch.randint(0, 1 << U_BITS, (n,), generator=g) for _ in range(2))
    u_route = torch.zeros(n, dtype=torch.int64)  # every start is the route's
    done = torch.ones(n, dtype=torch.bool)
    level = [0, 1, 1, 1, 2, 2, 3]
    route = [True, True, True, False, True, True, False]  # cells 3 and 6 are off the route
    tries, wins = [4, 40, 0, 10, 10, 30, 8], [2, 0, 0, 5, 9, 15, 4]

    def archive(**kw):
        a = level_archive(n, level, tries, wins, route=1.0, **kw)
        a.on_route[:7] = torch.tensor(route)
        return a

    mid = [4 * (w + 1) / (t + 2) * (1 - (w + 1) / (t + 2)) if on else 0.0
           for t, w, on in zip(tries, wins, route, strict=True)]
    levels = {lv for lv, on in zip(level, route, strict=True) if on}
    expect = [mid[c] / sum(mid[d] for d in range(7) if level[d] == level[c]) / len(levels) if route[c] else 0.0
              for c in range(7)]
    rows = archive(route_by="level").choose(done, u_start, u_cell, u_route)[1]
    got = (torch.bincount(rows, minlength=9)[:7].double() / n).tolist()
    assert max(abs(x - y) for x, y in zip(got, expect, strict=True)) < 0.01, got
    assert got[2] > 10 * got[1] > 0  # level 1: the untried cell far more than the one lost 40 times
    a = archive()  # "weights": the usual weights over the route's cells
    w = a.weights()[:7].double() * torch.tensor(route)
    plain = (torch.bincount(a.choose(done, u_start, u_cell, u_route)[1], minlength=9)[:7].double() / n).tolist()
    assert max(abs(x - y) for x, y in zip(plain, (w / w.sum()).tolist(), strict=True)) < 0.01, plain
    with pytest.raises(EnvConfigError, match="route_by") as err:
        ArchiveConfig(route_by="cell")
    assert "\n" not in str(err.value)


def test_route_by_back_draws_each_levels_window_before_its_deepest_route_cell_not_yet_won():
    """`route_by = "back"`: in each level the route's window is its deepest route cell not yet won (untried, or
    fewer wins than losses) and the route cells up to `route_back` steps before it (a plain Python reference on
    random routes, and so are the episodes and wins logged of it); the draw gives each level's window the same
    share, its cells alike, and nothing off it; as the window's cells win it walks back toward the level's entry,
    and a level whose route cells have all won drops out; no window anywhere leaves the other draws as they were; a
    bad `route_back` is one line."""
    import random

    from gbxcule.rl.archive import U_BITS, ArchiveConfig
    from gbxcule.rl.env import EnvConfigError

    def reference(level, steps, route, tries, wins, back):
        open_ = [on and (t == 0 or w < t - w) for on, t, w in zip(route, tries, wins, strict=True)]
        deepest = {lv: max(s for s, v, o in zip(steps, level, open_, strict=True) if o and v == lv)
                   for lv in {v for v, o in zip(level, open_, strict=True) if o}}
        return [route[c] and level[c] in deepest and deepest[level[c]] - back <= steps[c] <= deepest[level[c]]
                for c in range(len(level))]

    rng = random.Random(3)
    n = 1 << 16
    for _ in range(40):
        level = [rng.randrange(4) for _ in range(8)]
        steps = [rng.randrange(60) for _ in range(8)]
        route = [rng.random() < 0.7 for _ in range(8)]
        tries = [rng.choice((0, 4, 9, 20)) for _ in range(8)]
        wins = [rng.randrange(t + 1) for t in tries]
        back = rng.choice((0, 5, 12))
        a = level_archive(n, level, tries, wins, route=1.0, route_by="back", route_back=back)
        a.steps[:8] = torch.tensor(steps)
        a.on_route[:8] = torch.tensor(route)
        window = reference(level, steps, route, tries, wins, back)
        assert a.back_cells()[:8].tolist() == window
        # the log's per-level episodes and wins of the window (archive/back_tries, archive/back_wins)
        focus = a.route_focus().view(-1, 4)
        assert focus[:4, 2].tolist() == [sum(t for t, v, o in zip(tries, level, window, strict=True) if o and v == j)
                                         for j in range(4)]
        assert focus[:4, 3].tolist() == [sum(w for w, v, o in zip(wins, level, window, strict=True) if o and v == j)
                                         for j in range(4)]

    g = torch.Generator().manual_seed(11)
    u_start, u_cell = (torch.randint(0, 1 << U_BITS, (n,), generator=g) for _ in range(2))
    u_route = torch.zeros(n, dtype=torch.int64)  # every start is the route's
    done = torch.ones(n, dtype=torch.bool)
    level = [1, 1, 1, 1, 1, 2, 2, 0]  # level 1's found way at steps 10, 14, 18, 22, 26; level 2's at 40, 44
    steps = [10, 14, 18, 22, 26, 40, 44, 0]
    route = [True] * 7 + [False]

    def drawn(tries, wins, back=4):
        a = level_archive(n, level, tries, wins, route=1.0, route_by="back", route_back=back)
        a.steps[:8] = torch.tensor(steps)
        a.on_route[:8] = torch.tensor(route)
        rows = a.choose(done, u_start, u_cell, u_route)[1]
        return (torch.bincount(rows, minlength=9)[:8].double() / n).tolist()

    # nothing tried: each level's window ends at its deepest cell; level 1: cells 3, 4; level 2: cells 5, 6
    got = drawn([0] * 8, [0] * 8)
    expect = [0, 0, 0, 0.25, 0.25, 0.25, 0.25, 0]
    assert max(abs(x - y) for x, y in zip(got, expect, strict=True)) < 0.01, got
    # level 1's last two cells won (cell 4 ties, 3 of 6), cell 2 lost: its window walks back to cells 1, 2
    got = drawn([0, 0, 9, 10, 6, 0, 0, 0], [0, 0, 1, 8, 3, 0, 0, 0])
    expect = [0, 0.25, 0.25, 0, 0, 0.25, 0.25, 0]
    assert max(abs(x - y) for x, y in zip(got, expect, strict=True)) < 0.01, got
    # level 2 all won: level 1's window takes the whole route; a wider window reaches back to cell 0
    got = drawn([0, 0, 9, 10, 6, 4, 4, 0], [0, 0, 1, 8, 3, 4, 3, 0], back=8)
    expect = [1 / 3, 1 / 3, 1 / 3, 0, 0, 0, 0, 0]
    assert max(abs(x - y) for x, y in zip(got, expect, strict=True)) < 0.01, got
    # every route cell won: no window, so the route's part keeps the usual draw
    won = [4] * 7 + [0]
    a = level_archive(n, level, won, won, route=1.0, route_by="back")
    a.steps[:8] = torch.tensor(steps)
    a.on_route[:8] = torch.tensor(route)
    assert not bool(a.back_cells().any())
    plain = level_archive(n, level, won, won)  # no route
    plain.steps[:8] = torch.tensor(steps)
    assert torch.equal(a.choose(done, u_start, u_cell, u_route)[1], plain.choose(done, u_start, u_cell)[1])
    with pytest.raises(EnvConfigError, match="route_back") as err:
        ArchiveConfig(route_back=-1)
    assert "\n" not in str(err.value)


def test_reach_share_draws_starts_among_the_cells_holding_what_the_median_env_from_the_start_holds():
    """`reach` r: after the frontier's first f of the share draw, the next r of it is drawn among the cells that hold
    as many milestones as the median env playing from the task's start held at the last update's read (explorers
    and envs from cells left out), by the same weights; checked against a plain Python median; the level is
    checkpointed; frontier + reach over 1 is refused with one line."""
    from types import SimpleNamespace

    from gbxcule.rl.archive import U_BITS, ArchiveConfig, StateArchive
    from gbxcule.rl.env import EnvConfigError

    with pytest.raises(EnvConfigError, match="frontier \\+ reach \\+ edge \\+ entry is 1.2") as err:
        ArchiveConfig(frontier=0.5, reach=0.7)
    assert "\n" not in str(err.value)
    n = 4096
    g = torch.Generator().manual_seed(7)
    u_start, u_cell, u_share = (torch.randint(0, 1 << U_BITS, (n,), generator=g) for _ in range(3))
    done = torch.ones(n, dtype=torch.bool)

    def archive(**kw):
        a = StateArchive(ArchiveConfig(capacity=8, p_start=0.0, explorers=0.25, **kw), n, 1, "cpu",
                         milestones=SimpleNamespace(k=3))
        a.observe(torch.arange(n) % 6, torch.zeros(n, dtype=torch.int64), torch.zeros(n),
                  torch.zeros(n, dtype=torch.int32), torch.ones(n, dtype=torch.bool))
        a.progress[:6] = torch.tensor([0, 1, 2, 2, 1, 0])
        return a

    plain = archive().choose(done, u_start, u_cell)[1]
    front_only = archive(frontier=0.25).choose(done, u_start, u_cell, None, u_share)[1]
    a = archive(frontier=0.25, reach=0.5)
    assert a.level == 0
    held = torch.randint(0, 4, (n,), generator=g)
    from_archive = torch.rand(n, generator=g) < 0.3
    a._held.copy_(held)
    a.from_archive.copy_(from_archive)
    counted = [int(h) for h, c in zip(held.tolist(), (~from_archive & ~a.explorer).tolist(), strict=True) if c]
    median = sorted(counted)[(len(counted) - 1) // 2]  # the lower median, in plain Python
    a._held[~(~from_archive & ~a.explorer)] = 3 - median if median != 3 else 0  # others' milestones do not count
    assert a.read_stats(clear=False)["archive/reach_level"] == median and a.level == 0  # a peek moves nothing
    stats = a.read_stats()
    assert stats["archive/reach_level"] == median and a.level == median
    assert stats["archive/start_held"] == [counted.count(j) for j in range(4)]
    a.level = 1
    rows = a.choose(done, u_start, u_cell, None, u_share)[1]
    front = u_share < (1 << U_BITS) // 4
    reach = ~front & (u_share < 3 * (1 << U_BITS) // 4)
    assert torch.equal(rows[front], front_only[front])  # the frontier's draw is as it was without a reach
    assert bool(((rows[reach] == 1) | (rows[reach] == 4)).all())
    assert 0.4 < float((rows[reach] == 1).float().mean()) < 0.6  # the two weigh the same
    rest = ~front & ~reach
    assert torch.equal(rows[rest], plain[rest])
    # the level is checkpointed; with no cell at the level the usual draw stands
    b = archive(frontier=0.25, reach=0.5)
    b.load_state_dict(a.state_dict())
    assert b.level == 1
    c = archive(frontier=0.25, reach=0.5)
    c.level = 3
    assert torch.equal(c.choose(done, u_start, u_cell, None, u_share)[1][reach], plain[reach])
    # a GameEnv logs the level: from bed, the envs hold nothing until they leave home
    env = game_env("from_bed", n=2, archive={"capacity": 256, "inserts": 8, "p_start": 1.0, "reach": 0.5})
    env.reset(seed=0)
    for act in actions(LEAVE + " U N2"):
        env.step(torch.tensor([act, 0]))
    stats = env.archive.read_stats()
    assert stats["archive/start_held"] == [1, 1, 0]  # one of the two holds "town" (of two milestones)
    assert stats["archive/reach_level"] == 0  # the lower median
    # envs that restarted on the last step still hold their ended episode's milestones: left out until they step
    steps = len(actions(LEAVE + " U N2"))
    env = game_env("from_bed", n=2, max_steps=steps, archive={"capacity": 256, "inserts": 8, "p_start": 1.0,
                                                             "reach": 0.5})
    env.reset(seed=0)
    for act in actions(LEAVE + " U N2"):
        env.step(torch.tensor([act, 0]))
    stats = env.archive.read_stats()
    assert stats["archive/start_held"] == [0, 0, 0] and stats["archive/reach_level"] is None
    assert env.archive.level == 0  # kept
    env.step(torch.tensor([0, 0]))
    assert env.archive.read_stats()["archive/start_held"] == [2, 0, 0]


def test_reach_by_held_draws_each_level_by_the_share_of_envs_from_the_start_holding_it():
    """`reach_by = "held"`: the reach's draw gives the cells holding j milestones together the share of the envs from
    the task's start that held j at the last read (a plain Python expectation from the weights), each cell its share
    of its level's weight; the read sets the shares, a checkpoint keeps them, and with none read the draw is the
    usual one."""
    from types import SimpleNamespace

    from gbxcule.rl.archive import U_BITS, ArchiveConfig, StateArchive
    from gbxcule.rl.env import EnvConfigError

    n = 1 << 16
    g = torch.Generator().manual_seed(11)
    u_start, u_cell = (torch.randint(0, 1 << U_BITS, (n,), generator=g) for _ in range(2))
    u_share = torch.zeros(n, dtype=torch.int64)  # every draw is the reach's (frontier 0, reach 1)
    done = torch.ones(n, dtype=torch.bool)

    def archive(**kw):
        a = StateArchive(ArchiveConfig(capacity=8, p_start=0.0, **kw), n, 1, "cpu", milestones=SimpleNamespace(k=3))
        keys = torch.arange(n) % 6
        a.observe(keys, torch.zeros(n, dtype=torch.int64), torch.zeros(n), torch.zeros(n, dtype=torch.int32),
                  torch.ones(n, dtype=torch.bool))
        a.progress[:6] = torch.tensor([0, 1, 2, 2, 1, 0])
        a.visits[:6] = torch.tensor([1, 1, 9, 1, 4, 1])  # unequal weights within the levels
        return a

    plain = archive().choose(done, u_start, u_cell)[1]
    a = archive(reach=1.0, reach_by="held")
    assert torch.equal(a.choose(done, u_start, u_cell, None, u_share)[1], plain)  # nothing read yet
    held = torch.tensor([3] * (n // 2) + [1] * (n // 4) + [2] * (n // 8) + [0] * (n // 8))
    a._held.copy_(held)
    a.from_archive.zero_()
    a.read_stats()
    share = [n // 8, n // 4, n // 8, n // 2]  # envs holding 0, 1, 2, 3: no cell holds 3
    assert a.level_share.tolist() == share
    w = a.weights()[:6].tolist()
    level = a.progress[:6].tolist()
    with_cells = sum(share[j] for j in set(level))
    expect = [share[level[c]] / with_cells * w[c] / sum(w[d] for d in range(6) if level[d] == level[c])
              for c in range(6)]
    rows = a.choose(done, u_start, u_cell, None, u_share)[1]
    got = torch.bincount(rows, minlength=9)[:6].double() / n
    assert max(abs(x - y) for x, y in zip(got.tolist(), expect, strict=True)) < 0.01, (got, expect)
    assert expect[2] != expect[3]  # (the weights differ within a level)
    b = archive(reach=1.0, reach_by="held")
    b.load_state_dict(a.state_dict())
    assert b.level_share.tolist() == share
    with pytest.raises(EnvConfigError, match="reach_by"):
        ArchiveConfig(reach_by="mean")


def test_win_milestone_counts_a_cells_episode_that_gains_a_milestone_its_start_lacked_as_a_win():
    """`win = "milestone"`: a cell's tries and wins (w_fail, w_mid) count as won an episode from it that reached the
    goal or a milestone its start did not hold (a cell's; after a swarm jump, what its source held then), against a
    plain Python count from the episodes' start and final milestones; "goal" (the default) counts the goal alone,
    so on these short episodes, which never reach it, no win; the same actions give the same tries either way; it
    is checkpointed; a bad value is one line."""
    import random

    from gbxcule.rl.env import EnvConfigError

    with pytest.raises(EnvConfigError, match="win") as err:
        game_env("from_bed", archive={"win": "segment"})
    assert "\n" not in str(err.value)
    n, leave = 6, actions(LEAVE)
    counts = {}
    for win in ("milestone", "goal"):
        cfg = {"capacity": 256, "inserts": 8, "p_start": 0.25, "schedule": "fixed", "win": win}
        env = game_env("from_bed", n=n, max_steps=14, archive=cfg)
        env.reset(seed=0)
        a, rng = env.archive, random.Random(11)
        start = env.milestones.clone()  # each env's episode's start: the milestones it held
        cell = [None] * n
        tries, wins, t = {}, {}, [0] * n
        for step in range(240):
            if step == 120:  # checkpointed: a fresh env goes on the same
                twin = game_env("from_bed", n=n, max_steps=14, archive=cfg)
                twin.load_state_dict(env.state_dict())
                env, a = twin, twin.archive
            # env 0 walks out of the house on each episode (the cells on the way to the door), the rest at random
            act = [leave[t[0]] if t[0] < len(leave) else rng.randrange(8)] + [rng.randrange(8) for _ in range(n - 1)]
            _, _, term, trunc, _ = env.step(torch.tensor(act))
            for e in range(n):
                t[e] += 1
                if term[e] or trunc[e]:
                    if cell[e] is not None:
                        gained = bool((env.final_milestones[:, e] & ~start[:, e]).any())
                        tries[cell[e]] = tries.get(cell[e], 0) + 1
                        wins[cell[e]] = wins.get(cell[e], 0) + (gained or bool(env.final_success[e])) * (win != "goal")
                    t[e] = 0
                    start[:, e] = env.milestones[:, e]
                    cell[e] = int(a.start_row[e]) if bool(a.from_archive[e]) else None
        rows = sorted(tries)
        assert a.tries[rows].tolist() == [tries[r] for r in rows] and int(a.tries[:a.m].sum()) == sum(tries.values())
        assert a.wins[rows].tolist() == [wins[r] for r in rows] and int(a.wins[:a.m].sum()) == sum(wins.values())
        counts[win] = (sum(tries.values()), sum(wins.values()))
    assert counts["milestone"][0] == counts["goal"][0] > 0
    assert counts["milestone"][1] > 0 == counts["goal"][1]  # cells' episodes gained "town"; none reached the goal
    # a swarm jump's episode starts holding what its source held then: clones of an env that just reached the town
    # (a new area) win only by a milestone of their own. All idle on the bed until every env starts from its cell,
    # then env 0 walks out and the rest, cloned to it, stand still
    env = game_env("from_bed", n=6, max_steps=14, archive={"capacity": 256, "inserts": 8, "p_start": 0.0,
                                                           "win": "milestone", "swarm": 1.0})
    env.reset(seed=0)
    for _ in range(14):
        env.step(torch.zeros(6, dtype=torch.int64))
    assert bool(env.archive.from_archive.all())
    bed = int(env.archive.start_row[0])  # the cell env 0 walks out from
    clones = 0
    for a in leave + [0] * 16:
        env.step(torch.tensor([a] + [0] * 5))
        clones += int(env.archive.swarm_dst.sum())
    assert clones >= 5 and int(env.archive.tries[:env.archive.m].sum()) >= 6
    assert int(env.archive.wins.sum() - env.archive.wins[env.archive.m]) == 1 == int(env.archive.wins[bed])
    # by the goal alone, or by a milestone (the flags held now against those at the start)
    from types import SimpleNamespace

    from gbxcule.rl.archive import ArchiveConfig, StateArchive

    a = StateArchive(ArchiveConfig(capacity=4, win="milestone"), 4, 1, "cpu", milestones=SimpleNamespace(k=2))
    a.from_archive.fill_(True)
    a.start_row.copy_(torch.tensor([0, 0, 1, 1]))
    a.start_bits.copy_(torch.tensor([0, 0, 1, 1]))
    a._flags.copy_(torch.tensor([0, 1, 1, 3]))
    a.ended(torch.ones(4, dtype=torch.bool), torch.tensor([True, False, False, False]))
    assert a.tries[:2].tolist() == [2, 2] and a.wins[:2].tolist() == [2, 1]  # envs 0 (the goal), 1 and 3 won


def test_the_logs_count_the_cells_episodes_by_the_milestones_their_start_held_and_those_that_gained_one():
    """`archive/level_episodes` and `archive/level_gains` (and `archive/level_gain/J`, their ratio): the episodes
    from archive cells that ended, by how many milestones their start held, and those that ended holding one their
    start lacked, against a plain Python count; episodes from the task's start are not counted; the counters
    restart at each read and survive a checkpoint taken between reads. `archive/entry_episodes` and
    `archive/entry_gains`: the same for the episodes whose start cell was, when drawn, an entry cell (of the cells
    holding j >= 1 milestones, those the fewest steps from the start), against the cells read back in Python."""
    import random

    n, leave = 6, actions(LEAVE)
    cfg = {"capacity": 256, "inserts": 8, "p_start": 0.25, "schedule": "fixed", "entry": 0.5}
    env = game_env("from_bed", n=n, max_steps=14, archive=cfg)
    env.reset(seed=0)
    rng = random.Random(5)
    start = env.milestones.clone()
    from_cell = [False] * n
    from_entry = [False] * n
    expect = [[0, 0], [0, 0], [0, 0]]  # by milestones held at the start: [ended, gained]
    got = [[0, 0], [0, 0], [0, 0]]
    expect_entry = [[0, 0], [0, 0], [0, 0]]
    got_entry = [[0, 0], [0, 0], [0, 0]]

    def entry_rows(a):  # each level's used cells with the fewest steps from the start
        used = range(int(a.count))
        least = {}
        for r in used:
            j = int(a.progress[r])
            least[j] = min(least.get(j, 1 << 62), int(a.steps[r]))
        return {r for r in used if int(a.progress[r]) >= 1 and int(a.steps[r]) == least[int(a.progress[r])]}

    t = [0] * n
    for step in range(300):
        if step == 150:  # between two reads: a fresh env goes on with the counts so far
            twin = game_env("from_bed", n=n, max_steps=14, archive=cfg)
            twin.load_state_dict(env.state_dict())
            env = twin
        act = [leave[t[0]] if t[0] < len(leave) else rng.randrange(8)] + [rng.randrange(8) for _ in range(n - 1)]
        _, _, term, trunc, _ = env.step(torch.tensor(act))
        for e in range(n):
            t[e] += 1
            if term[e] or trunc[e]:
                gained = bool((env.final_milestones[:, e] & ~start[:, e]).any())
                if from_cell[e]:
                    level = int(start[:, e].sum())
                    expect[level][0] += 1
                    expect[level][1] += gained
                    expect_entry[level][0] += from_entry[e]
                    expect_entry[level][1] += from_entry[e] and gained
                t[e] = 0
                start[:, e] = env.milestones[:, e]
                from_cell[e] = bool(env.archive.from_archive[e])
                from_entry[e] = from_cell[e] and int(env.archive.start_row[e]) in entry_rows(env.archive)
        if step % 40 == 39 or step == 299:
            stats = env.episode_stats()
            for j in range(3):
                got[j][0] += stats["archive/level_episodes"][j]
                got[j][1] += stats["archive/level_gains"][j]
                got_entry[j][0] += stats["archive/entry_episodes"][j]
                got_entry[j][1] += stats["archive/entry_gains"][j]
                if stats["archive/entry_episodes"][j]:
                    assert stats[f"archive/entry_gain/{j}"] == (stats["archive/entry_gains"][j]
                                                                / stats["archive/entry_episodes"][j])
                if stats["archive/level_episodes"][j]:
                    assert stats[f"archive/level_gain/{j}"] == (stats["archive/level_gains"][j]
                                                                / stats["archive/level_episodes"][j])
                else:
                    assert f"archive/level_gain/{j}" not in stats
    assert got == expect and got_entry == expect_entry
    assert expect[0][0] > 0 and expect[0][1] > 0  # cells' episodes that held nothing and reached the town
    assert expect[1][0] > 0  # and some that held the town
    assert expect_entry[0] == [0, 0] and 0 < expect_entry[1][0] < expect[1][0]  # level 0 has no entry cell
    left = env.archive.read_stats()
    assert left["archive/level_episodes"] == left["archive/entry_episodes"] == [0, 0, 0]  # the last read cleared them


def test_the_logs_say_where_within_each_level_the_edge_draws():
    """`archive/edge_weights` and `archive/edge_won_weights` (with `edge` > 0 on a task with milestones): for each
    level, the edge's weights 4 p (1 - p) of the tried cells holding that many milestones, summed, and their part on
    the cells whose smoothed win rate p = (wins + 1) / (tries + 2) is at least 1/8, against the same sums in Python
    from the archive's counts at each read; `archive/edge_won/J` is their ratio. Without the edge none is logged."""
    import random

    from gbxcule.rl.archive import WEIGHT_ONE

    n, leave, rng = 6, actions(LEAVE), random.Random(5)
    cfg = {"capacity": 24, "inserts": 8, "p_start": 0.25, "schedule": "fixed", "edge": 0.5, "win": "milestone",
           "max_steps": 6}
    env = game_env("from_bed", n=n, max_steps=14, archive=cfg)
    env.reset(seed=0)
    t, mixed, deeper = 0, 0, 0
    for step in range(400):
        act = [leave[t] if t < len(leave) else rng.randrange(8)] + [rng.randrange(8) for _ in range(n - 1)]
        _, _, term, trunc, _ = env.step(torch.tensor(act))
        t = 0 if term[0] or trunc[0] else t + 1
        if step % 40 == 39:
            a = env.archive
            every, won = [0, 0, 0], [0, 0, 0]
            for r in range(int(a.count)):
                tries, wins = int(a.tries[r]), int(a.wins[r])
                if not tries:
                    continue
                w = 4 * (WEIGHT_ONE * (wins + 1) // (tries + 2)) * (WEIGHT_ONE * (tries - wins + 1) // (tries + 2))
                w //= WEIGHT_ONE
                every[int(a.progress[r])] += w
                won[int(a.progress[r])] += w if 8 * (wins + 1) >= tries + 2 else 0
            stats = env.episode_stats()
            assert stats["archive/edge_weights"] == every and stats["archive/edge_won_weights"] == won, step
            for j in range(3):
                assert stats.get(f"archive/edge_won/{j}") == (won[j] / every[j] if every[j] else None)
            mixed += any(0 < g < e for e, g in zip(every, won, strict=True))
            deeper += every[1] > 0
    assert mixed and deeper  # a level whose tried cells both win and lose; tried cells past the first milestone
    off = game_env("from_bed", n=n, max_steps=14, archive={**cfg, "edge": 0.0})
    off.reset(seed=0)
    off.step(torch.zeros(n, dtype=torch.int64))
    assert not any(k.startswith("archive/edge") for k in off.episode_stats())


@pytest.mark.parametrize("entry_steps", [0, 9])
def test_episodes_from_entry_cells_have_the_entry_step_limit(entry_steps):
    """`entry_steps` L: an episode from an entry cell (whichever share drew it) ends, truncated, after L steps; one
    from any other cell after the archive's `max_steps`, one from the task's start after the env's; 0: entry
    episodes have the cells' limit. A fresh env loaded from a checkpoint ends its episodes where this one does."""
    import random

    n, leave, rng = 6, actions(LEAVE), random.Random(7)
    cfg = {"capacity": 256, "inserts": 8, "p_start": 0.25, "schedule": "fixed", "entry": 0.5, "max_steps": 4,
           "entry_steps": entry_steps}
    env = game_env("from_bed", n=n, max_steps=20, archive=cfg)
    env.reset(seed=0)
    kind = ["start"] * n  # where each env's episode started
    t, lengths, twin = [0] * n, {"start": set(), "cell": set(), "entry": set()}, None
    for step in range(240):
        if step == 120:
            twin = game_env("from_bed", n=n, max_steps=20, archive=cfg)
            twin.load_state_dict(env.state_dict())
        act = torch.tensor([leave[t[0]] if t[0] < len(leave) else rng.randrange(8)]
                           + [rng.randrange(8) for _ in range(n - 1)])
        _, _, term, trunc, _ = env.step(act)
        if twin is not None:
            assert torch.equal(twin.step(act)[3], trunc), step
        for e in range(n):
            t[e] += 1
            if term[e] or trunc[e]:
                if trunc[e]:
                    lengths[kind[e]].add(t[e])
                t[e] = 0
                a = env.archive
                kind[e] = "entry" if bool(a.start_entry[e]) else "cell" if bool(a.from_archive[e]) else "start"
    assert lengths == {"start": {20}, "cell": {4}, "entry": {entry_steps or 4}}


def test_patience_ends_an_episode_that_goes_that_many_steps_without_a_new_milestone():
    """`patience` K: an episode ends, truncated, K steps after its start or its latest new milestone (a plain Python
    count, reading the milestones from the reward: only they pay), not where the step limit ends it too; explorers'
    ends are not counted; it is checkpointed, restarts with a reset and is cloned; spread clocks spread the first
    ends; without milestones, or at 0, nothing changes."""
    import random

    k, n = 16, 3
    limit = 12 + k  # env 0 gains "town" on its 12th step: that episode meets its limit as the patience runs out
    cfg = {"capacity": 256, "inserts": 8, "p_start": 1.0, "patience": k, "explorers": 0.34}
    env = game_env("from_bed", n=n, max_steps=limit, archive=cfg)
    assert env.archive.n_explore == 1  # env 2 acts at random and is not counted
    env.reset(seed=0)
    leave, rng = actions(LEAVE), random.Random(3)
    t, gain, episode, ends, trace, twin = [0] * n, [0] * n, 0, 0, [], None
    for step in range(150):
        # env 0 leaves home in every other episode and stands still in the rest, env 1 stands still
        act = [leave[t[0]] if episode % 2 == 0 and t[0] < len(leave) else 0, 0, rng.randrange(env.codec.num_actions)]
        if step == 50:  # the patience's state is checkpointed: a fresh env goes on the same
            twin = game_env("from_bed", n=n, max_steps=limit, archive=cfg)
            twin.load_state_dict(env.state_dict())
        if step == 100:  # a reset starts every count again
            env.reset(seed=0)
            twin.reset(seed=0)
            t, gain, episode = [0] * n, [0] * n, 0
        _, r, term, trunc, _ = env.step(torch.tensor(act))
        if twin is not None:
            assert torch.equal(twin.step(torch.tensor(act))[3], trunc)
        for e in range(n):
            t[e] += 1
            if r[e] > 0:
                gain[e] = t[e]
            stalled = t[e] - gain[e] >= k and t[e] < limit and not term[e]
            assert bool(trunc[e]) == (stalled or (t[e] >= limit and not term[e])), (step, e)
            ends += stalled and e < 2
            if term[e] or trunc[e]:
                trace.append((e, t[e], gain[e]))
                episode += e == 0
                t[e] = gain[e] = 0
    assert (0, limit, 12) in trace and (0, k, 0) in trace and (1, k, 0) in trace
    assert ends and env.archive.read_stats()["archive/patience_ends"] == ends
    # cloned with the env: a copy of env 0 just after it gained "town" stops when env 0 does, not k steps after its
    # own (milestone-less) start
    env = game_env("from_bed", n=2, max_steps=limit, archive=cfg)
    env.reset(seed=0)
    for a in leave:
        env.step(torch.tensor([a, 0]))
    env.clone_states(0, torch.tensor([False, True]))
    ends = [env.step(torch.tensor([0, 0]))[3].tolist() for _ in range(k)]
    assert ends.index([True, True]) == 12 + k - len(leave) - 1 and [True, False] not in ends
    # a resumed run may turn it on: its count starts at the resume
    plain = game_env("from_bed", n=n, max_steps=limit, archive={**cfg, "patience": 0})
    plain.reset(seed=0)
    for _ in range(5):
        plain.step(torch.tensor([0, 0, 0]))
    on = game_env("from_bed", n=n, max_steps=limit, archive=cfg)
    on.load_state_dict(plain.state_dict())
    assert on._gain.tolist() == on.steps.tolist() == [5, 5, 5]
    # spread clocks: the first episodes' patience ends spread over [1, k] as their step limits do
    env = game_env("from_bed", n=64, max_steps=2000, archive={**cfg, "explorers": 0.0}, spread_clocks=True)
    env.reset(seed=0)
    first = torch.zeros(64, dtype=torch.int64)
    for step in range(1, k + 1):
        trunc = env.step(torch.zeros(64, dtype=torch.int64))[3]
        first[(first == 0) & trunc] = step
    assert bool((first > 0).all()) and len(set(first.tolist())) >= 8
    # at 0, or on a task without milestones, off
    for task, extra in (("from_bed", {"patience": 0}), (None, {"patience": k})):
        from gbxcule.rl.env import GameEnv

        off = game_env(task, n=1, max_steps=limit, archive={**cfg, **extra}) if task else \
            GameEnv(num_envs=1, task="leave_house", max_steps=limit, archive={**cfg, **extra})
        off.reset(seed=0)
        assert off._gain is None
        lengths = [off.step(torch.tensor([0]))[3].item() for _ in range(limit)]
        assert lengths.index(True) == limit - 1
        assert "archive/patience_ends" not in off.archive.read_stats()


def test_plot_draws_how_far_runs_get(tmp_path):
    import json
    import math

    from gbxcule.rl.plot import plot_runs, slot_success_grid

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"update": u, "env_steps": 100 * u, "milestone_rates": [0.5, 0.1 * u], "milestone_deepest": min(2, u),
             "milestone/town": 0.5, "milestone/lab": 0.1 * u, "archive/reach_level": u - 1,
             "archive/level_episodes": [4, u, 0], "archive/level_gains": [2, u - 1, 0],
             "archive/entry_episodes": [0, u, 0], "archive/entry_gains": [0, u // 2, 0],
             "archive/edge_weights": [4, 2 * u, 0], "archive/edge_won_weights": [1, u, 0],
             "samples_by_level": [8, 4 * (u - 1), 0], "entropy_by_level": [2.0 / u, 1.0 if u > 1 else 0.0, 0.0],
             "actions": [1] * 8, **({"eval/mean_deepest": 1.5} if u == 3 else {})}
            for u in (1, 2, 3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    written = {p.name for p in plot_runs([run], tmp_path / "out")}
    assert {"milestones.png", "gains_by_start_level.png", "gains_from_entry_cells.png",
            "edge_on_winning_cells.png", "entropy_by_level.png"} <= written
    # each level head's mean entropy where the update had samples of it, NaN where none
    edges, means = slot_success_grid(rows, "samples_by_level", "entropy_by_level", means=True)
    assert edges == [0, 100, 200, 300] and means[2][0] == pytest.approx(2 / 3) and means[1][1] == 1.0
    assert math.isnan(means[0][1]) and all(math.isnan(m[2]) for m in means)
    assert (tmp_path / "out" / "milestones.png").stat().st_size > 10_000
    # several runs on one plot (a colour a milestone, a line style a run)
    other = tmp_path / "other"
    other.mkdir()
    (other / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text())
    assert "milestones.png" in {p.name for p in plot_runs([run, other], tmp_path / "both")}


def test_milestone_order_is_the_order_runs_first_reached_them():
    from gbxcule.rl.plot import milestone_order

    a = [{"env_steps": 1, "milestone/lab": 0.0, "milestone/town": 0.0, "milestone/gym": 0.0},
         {"env_steps": 2, "milestone/lab": 0.0, "milestone/town": 0.3, "milestone/gym": 0.0},
         {"env_steps": 3, "milestone/lab": 0.2, "milestone/town": 0.5, "milestone/gym": 0.0}]
    b = [{"env_steps": 1, "milestone/lab": 0.0, "milestone/cave": 0.0},
         {"env_steps": 5, "milestone/lab": 0.0, "milestone/cave": 0.1}]
    assert milestone_order([a, b], "env_steps") == ["town", "lab", "cave", "gym"]
    assert milestone_order([b], "env_steps") == ["cave", "lab"]


@pytest.mark.parametrize("stack_k, obs", [(1, "pixels"), (3, "pixels"), (2, "packed")])
def test_shown_milestones_are_the_flags_held_now_in_the_last_row_and_change_nothing_else(stack_k, obs):
    """show_milestones: every observation's last row is the flags held at that frame (4 pixels, or one packed byte,
    each), on every stacked frame, after resets too; the screen above it is the env's without the option."""
    plain = game_env("from_bed", stack_k=stack_k, obs=obs, max_steps=16)
    shown = game_env("from_bed", stack_k=stack_k, obs=obs, max_steps=16, show_milestones=True)
    per, ink = (4, 3) if obs == "pixels" else (1, 0xFF)

    def row(flags):
        r = torch.zeros(80 if obs == "pixels" else 20, dtype=torch.uint8)
        for i, f in enumerate(flags):
            r[i * per:(i + 1) * per] = ink * int(f)
        return r

    o_plain, _ = plain.reset(seed=0)
    o_shown, _ = shown.reset(seed=0)
    history = [[(False, False)] * stack_k, [(False, False)] * stack_k]  # per env, the flags of each stacked frame
    seen, ends = set(), 0
    for a in actions(LEAVE + " U N2 D N2 N3"):  # env 0 reaches town (flag 0); both are truncated at step 16
        assert torch.equal(o_plain[..., :71, :], o_shown[..., :71, :])
        for e in range(2):
            for f in range(stack_k):
                assert torch.equal(o_shown[e, f, 71], row(history[e][f])), (e, f)
        o_plain, _, term, trunc, _ = plain.step(torch.tensor([a, 0]))
        o_shown, _, _, _, _ = shown.step(torch.tensor([a, 0]))
        now = [tuple(bool(x) for x in shown._milestones.ram.each(shown.ram)[:, e]) for e in range(2)]
        for e in range(2):
            ended = bool(term[e] or trunc[e])
            history[e] = [now[e]] * stack_k if ended else history[e][1:] + [now[e]]
            seen |= {(e, f) for f in now[e] if f}
            ends += ended
    assert seen == {(0, True)} and ends == 2  # the flag was drawn for env 0 only, and both episodes restarted
    assert shown.describe()["show_milestones"] is True


def test_show_milestones_on_a_task_without_milestones_draws_a_blank_row():
    """"on" on a task that names no milestones: the observation's last row is blank (nothing held) and the rest of
    the frame is the game's, as with the row off; "auto" leaves such a task's frame alone."""
    from gbxcule.rl.env import GameEnv
    from gbxcule.rl.starts import EnvConfigError

    on, off = (GameEnv(num_envs=4, task="leave_house", show_milestones=m, device="cpu", seed=1) for m in ("on", "off"))
    obs = [on.reset(seed=1)[0], off.reset(seed=1)[0]]
    inked = int((obs[1][..., -1, :] != 0).sum())
    g = torch.Generator().manual_seed(0)
    for _ in range(12):
        a = torch.randint(0, 8, (4,), generator=g)
        obs = [on.step(a)[0], off.step(a)[0]]
        assert torch.equal(obs[0][..., :-1, :], obs[1][..., :-1, :])
        assert not obs[0][..., -1, :].any()
        inked += int((obs[1][..., -1, :] != 0).sum())
    assert inked > 0  # the game draws there: the blank row is the env's
    assert on.describe()["show_milestones"] is True
    with pytest.raises(EnvConfigError, match="show_milestones must be on, off or auto"):
        GameEnv(num_envs=1, task="leave_house", show_milestones="yes")
    assert not GameEnv(num_envs=1, task="leave_house", show_milestones="auto").show_milestones
    assert game_env("from_bed", n=1, show_milestones="auto").show_milestones


DETAIL = 'cell_detail = { when = [{ addr = 0xC107, value = 4 }], cells = [0xC1C5, 0xC1C7, 0xC1C4] }'


def test_cell_detail_applies_to_every_task_unless_the_task_names_its_own():
    text = PACK.replace('[pack]\n', f'[pack]\n{DETAIL}\n').replace(
        'fail_ram = []\n', 'fail_ram = []\ncell_detail = { when = [{ addr = 0xC10A, op = "ge", value = 1 }], '
        'cells = [0xC1C0] }\n')
    a, b = (parse_pack(text, "m.toml")[k] for k in ("a", "b"))
    assert [(c.addr, c.value, c.op) for c in a.cell_detail.when] == [(0xC107, 4, "eq")]
    assert a.cell_detail.cells == (0xC1C5, 0xC1C7, 0xC1C4)
    assert [(c.addr, c.op) for c in b.cell_detail.when] == [(0xC10A, "ge")] and b.cell_detail.cells == (0xC1C0,)
    assert parse_pack(PACK, "m.toml")["a"].cell_detail is None


@pytest.mark.parametrize("bad, needle", [
    ('cell_detail = [0xC1C5]', "must be a table of when"),
    ('cell_detail = { cells = [0xC1C5] }', "must be a table of when"),
    ('cell_detail = { when = [], cells = [0xC1C5] }', "at least one condition"),
    ('cell_detail = { when = [{ addr = 0xC107, value = 4 }], cells = [] }', "at least one condition"),
    ('cell_detail = { when = [{ addr = 0xC107 }], cells = [0xC1C5] }', "needs addr and value"),
    ('cell_detail = { when = [{ addr = 0xC107, value = 4 }], cells = [0x1234] }', "cell_detail"),
    ('cells = [0xC100, 0xC101, 0xC102]\ncell_detail = { when = [{ addr = 0xC107, value = 4 }], '
     'cells = [0xC1C5, 0xC1C6, 0xC1C7, 0xC1C8, 0xC1C9] }', "at most 7 together"),
])
def test_a_bad_cell_detail_is_one_task_error(bad, needle):
    with pytest.raises(TaskError, match=needle):
        parse_pack(PACK.replace('[pack]\n', f'[pack]\n{bad}\n'), "m.toml")


def test_keys_that_hash_the_place_are_not_read_back_as_places():
    """A RAM cell whose place, detail and milestone bits pass 62 is hashed (`archive.progress_key`): the archive
    says its keys no longer hold the place (`place_in_keys`), and the heat maps (`explore.area_grids`) draw none,
    where with the quest pack's own cells they read area, x and y back."""
    import re
    from importlib import resources

    from gbxcule.rl import explore
    from gbxcule.rl.env import GameEnv

    text = (resources.files("gbxcule.rl") / "packs" / "quest.toml").read_text()
    wide = re.sub(r"(cell_detail = .*cells = )\[[^]]*\]", r"\1[0xC1C5, 0xC1C7, 0xC1C4, 0xC1C9]", text)
    assert wide != text
    for pack, exact in ((text, True), (wide, False)):
        env = GameEnv(num_envs=2, task=parse_pack(pack, "q.toml")["quest_m5"], seed=0,
                      archive={"capacity": 64, "inserts": 2, "p_start": 1.0})
        for a in actions("U2 L2"):
            env.step(torch.tensor([a, a]))
        assert env.archive.place_in_keys is exact
        grids = explore.area_grids(explore.snapshot(env), "visits")
        if exact:  # the brute's pass in EAST WOODS (map 3): x to 13, y to 4 (the grid is [y, x])
            assert [a for a, _ in grids] == [3] and grids[0][1].shape == (5, 14), grids
        else:
            assert grids == []
        env.close()


def test_cell_detail_keeps_a_fights_states_apart_and_leaves_every_other_cell_as_it_was():
    """The quest's fight with the brute (quest_m4's solution), cells against a plain Python reference: (map, x, y),
    then, at the fight's menu (MODE 4) only, a set bit and the player's HP, the brute's and the berries, then the
    milestones held. Each fight menu on the brute's tile is a cell of its own; walking states have the keys of the
    pack without the detail."""
    from importlib import resources

    from gbxcule.rl.env import GameEnv
    from gbxcule.rl.goals import ram_rows
    from gbxcule.rl.tasks import load_task, parse_pack
    from gbxcule.roms.overworld.story import MODE_BATTLE

    text = (resources.files("gbxcule.rl") / "packs" / "quest.toml").read_text()
    detail = load_task("quest_m4")
    plain = parse_pack("\n".join(x for x in text.splitlines() if not x.startswith("cell_detail")), "q.toml")["quest_m4"]
    assert detail.cell_detail is not None and plain.cell_detail is None
    envs = [GameEnv(num_envs=1, task=t, archive={"capacity": 512, "inserts": 8, "p_start": 1.0}, max_steps=10**6)
            for t in (detail, plain)]
    rows = torch.tensor(ram_rows([0xC100, 0xC101, 0xC102, 0xC107, 0xC1C5, 0xC1C7, 0xC1C4, 0xC1C0, 0xC1C1],
                                 envs[0].backend.layout))

    def reference() -> tuple[int, int]:  # with the detail, without
        m, x, y, mode, hp, foe, berries, e0, e1 = envs[0].ram.index_select(0, rows)[:, 0].tolist()
        fight = ((hp | foe << 8 | berries << 16) << 1 | 1) if mode == MODE_BATTLE else 0
        held = e0 | (e1 & 7) << 8  # the eleven milestones in chain order
        return m | x << 8 | y << 16 | fight << 24 | held << 49, m | x << 8 | y << 16 | held << 24

    menus = []
    for a in actions("D4 L N L2 U8 L5 U L U A N A3 N A3 N A R A2 N A L A2 N A3 N"):  # to the last menu
        for env in envs:
            env.step(torch.tensor([a]))
        with_detail, without = (int(env.cell_keys()[0]) for env in envs)
        assert (with_detail, without) == reference()
        if (with_detail >> 24) & 1:
            menus.append(with_detail)
        else:  # the same cell under both keys: the detail's bits clear
            assert with_detail == (without & 0xFFFFFF) | (without >> 24) << 49
    assert len(set(k & 0xFFFFFF for k in menus)) == 1 and len(set(menus)) == 5  # one tile, five fight menus
    cells = set(envs[0].archive.keys[:int(envs[0].archive.count)].tolist())
    assert set(menus) <= cells
    for env in envs:
        env.close()


@pytest.mark.parametrize("stack_k, shown", [(1, False), (2, True)])
def test_a_screen_milestone_holds_from_the_step_its_template_matches_as_a_python_reference_says(tmp_path, stack_k,
                                                                                               shown):
    """A milestone can be a screen: a goal template file (relative to the pack) under its tau. Between two RAM
    milestones in chain order, it is held from the first step whose newest frame is that near (numpy's distances
    over the recorded frames) to the episode's end and paid once; with show_milestones its column shows it held
    and the drawn row does not count in its distance."""
    import numpy as np

    from gbxcule.rl.goals import GoalTemplate

    script = actions(LEAVE + " U N2 D N2") + [0] * 12  # env 0 walks out, home and out again; both reach the limit
    rec = game_env("from_bed", stack_k=stack_k)
    rec.reset(seed=0)
    frames = [rec.obs[:, -1].numpy().copy()]
    for a in script:
        rec.step(torch.tensor([a, 0]))
        frames.append(rec.obs[:, -1].numpy().copy())
    goal = frames[6][0]  # env 0 on its way to the door
    meta = rec.template_meta()
    GoalTemplate(goal[None], np.ones((72, 80), dtype=bool), meta).save(tmp_path / "hall.npz")
    pack = GAME.replace('{ name = "lab"', '{ name = "hall", template = "hall.npz", tau = 0.02 },\n              '
                                         '{ name = "lab"')
    task = parse_pack(pack, str(tmp_path / "ms.toml"), base_dir=str(tmp_path))["from_bed"]
    assert task.milestones[1].template == "hall.npz" and task.milestones[1].condition is None

    from gbxcule.rl.env import GameEnv

    env = GameEnv(num_envs=2, task=task, stack_k=stack_k, show_milestones=shown)
    env.reset(seed=0)
    near = [(np.abs(f.astype(int) - goal).sum(axis=(1, 2)) < np.ceil(0.02 * 3 * 72 * 80)) for f in frames]
    held, ram_held = near[0].copy(), np.zeros(2, dtype=bool)
    assert env.milestones[1].numpy().tolist() == held.tolist()
    for t, a in enumerate(script, 1):
        _, r, term, trunc, _ = env.step(torch.tensor([a, 0]))
        ended = (term | trunc).numpy()
        town = env.final_milestones[0].numpy() if ended.any() else env.milestones[0].numpy()
        new = near[t] & ~held
        held |= near[t]
        new_town = np.where(ended, False, town & ~ram_held)
        ram_held |= town
        assert r.numpy().tolist() == (new.astype(float) + new_town).tolist(), t
        if ended.any():
            assert env.final_milestones[1].numpy()[ended].tolist() == held[ended].tolist()
            held, ram_held = np.where(ended, False, held), np.where(ended, False, ram_held)
        assert env.milestones[1].numpy()[~ended].tolist() == held[~ended].tolist(), t
        if shown:
            col = env.obs[:, -1, 71, 4:8].numpy()  # the second milestone's 4 pixels
            assert ((col == 3).all(1))[~ended].tolist() == held[~ended].tolist(), t
    assert sum(n[0] for n in near) >= 1 and not any(n[1] for n in near)  # it matched on env 0's way only


def test_a_screen_milestone_whose_template_is_missing_or_does_not_fit_is_one_line(tmp_path):
    import numpy as np

    from gbxcule.rl.env import GameEnv
    from gbxcule.rl.goals import GoalTemplate, TemplateError

    pack = GAME.replace('{ name = "lab", addr = 0xC104, mask = 0x02, value = 0x02 }',
                        '{ name = "hall", template = "hall.npz" }')
    task = parse_pack(pack, str(tmp_path / "ms.toml"), base_dir=str(tmp_path))["from_bed"]
    with pytest.raises(TemplateError, match="cannot read goal template"):
        GameEnv(num_envs=1, task=task)
    meta = game_env("from_bed", n=1).template_meta()
    GoalTemplate(np.zeros((1, 72, 80), dtype=np.uint8), np.ones((72, 80), dtype=bool), meta).save(tmp_path / "hall.npz")
    with pytest.raises(TemplateError, match="does not fit"):
        GameEnv(num_envs=1, task=task, stack_k=2)


def test_a_screen_milestone_keys_archive_cells_and_an_episode_from_a_cell_holds_it_again(tmp_path):
    """With the state archive, a screen milestone is part of the cell: the same place before and after the screen
    are two cells (its bit in the key, as `archive.progress_key` packs it), each cell keeps the milestones its
    state held, and an episode started from a cell holds the cell's screens at its start although no RAM byte
    keeps them (and is not paid for them again)."""
    import numpy as np

    from gbxcule.rl.archive import progress_key
    from gbxcule.rl.env import GameEnv
    from gbxcule.rl.goals import GoalTemplate, ram_key, ram_rows

    n = 32
    script = actions(LEAVE + " U N2 D N2") + [0] * 12  # out of the house, back in through the door, out again
    rec = game_env("from_bed", n=1)
    rec.reset(seed=0)
    for a in script[:12]:
        rec.step(torch.tensor([a]))
    goal = rec.obs[0, -1].numpy().copy()  # the town, just outside
    GoalTemplate(goal[None], np.ones((72, 80), dtype=bool), rec.template_meta()).save(tmp_path / "out.npz")
    start = GAME.index("milestones = [")
    pack = (GAME[:start] + 'milestones = [{ name = "outside", template = "out.npz", tau = 0.02 }]\n'
            + GAME[GAME.index("[tasks.from_bed]"):])
    task = parse_pack(pack, str(tmp_path / "ms.toml"), base_dir=str(tmp_path))["from_bed"]
    env = GameEnv(num_envs=n, task=task, archive={"capacity": 64, "p_start": 0.0, "inserts": n, "max_steps": 30})
    env.reset(seed=0)
    a = env.archive
    rows = torch.tensor(ram_rows([0xC100, 0xC101, 0xC102], env.backend.layout))
    seen = set()
    for t, act in enumerate(script[:29], 1):
        env.step(torch.full((n,), act))
        place, bits = ram_key(env.ram, rows), env.milestones[0].to(torch.int64)
        assert env.cell_keys().tolist() == progress_key(place, bits, a._place_bits, 1).tolist(), t
        seen |= {(int(p), int(b)) for p, b in zip(place, bits, strict=True)}
    assert {p for p, b in seen if b} & {p for p, b in seen if not b}  # one place before and after: two cells
    flagged = int((a.flags[:int(a.count)] != 0).sum())
    assert 0 < flagged < int(a.count)
    _, r, term, trunc, _ = env.step(torch.zeros(n, dtype=torch.int64))  # the step limit: every env starts from a cell
    assert bool(trunc.all()) and bool(a.from_archive.all())
    from_cell = a.flags.gather(0, a.start_row) != 0
    shows = torch.tensor([bool(np.abs(env.obs[e, -1].numpy().astype(int) - goal).sum() < np.ceil(0.02 * 3 * 5760))
                          for e in range(n)])
    assert env.milestones[0].tolist() == (from_cell | shows).tolist()
    assert bool((from_cell & ~shows).any())  # held from the cell alone, not from its first frame
    _, r, *_ = env.step(torch.zeros(n, dtype=torch.int64))
    assert not bool(((r > 0) & from_cell).any())  # not paid again


# --- lives: a byte whose change the losing way is a life lost (a penalty; with life_ends the episode's end) ---------
LIVES_PACK = """
[pack]
name = "lv"
rom = "OVERWORLD"
lives = { addr = 0xC104, lost = "up" }  # FLAGS: its town bit rises on the way out, a stand-in for a losses counter

[tasks.out]
start = { script = "N5" }
step_limit = 30
goal_ram = [{ addr = 0xC100, value = 2 }]
reward = { step_cost = 0.0, goal_bonus = 0.0, life_lost = -3.0 }

[tasks.near_door]
start = { script = "N5 R4 D5" }
step_limit = 30
goal_ram = [{ addr = 0xC100, value = 2 }]
reward = { step_cost = 0.0, goal_bonus = 0.0, life_lost = -3.0 }

[tasks.counts_down]
start = { script = "N5" }
step_limit = 30
goal_ram = [{ addr = 0xC100, value = 2 }]
lives = { addr = 0xC104 }
reward = { step_cost = 0.0, goal_bonus = 0.0, life_lost = -3.0 }
"""


def test_a_pack_names_its_lives_byte_for_every_task_unless_the_task_names_its_own():
    from gbxcule.rl.tasks import Lives

    tasks = parse_pack(LIVES_PACK, "lv.toml")
    assert tasks["out"].lives == Lives(0xC104, "up") and tasks["counts_down"].lives == Lives(0xC104, "down")
    assert parse_pack(PACK, "m.toml")["a"].lives is None


def test_a_life_is_lost_when_the_byte_moves_the_losing_way_modulo_256():
    from types import SimpleNamespace

    from gbxcule.rl.goals import LivesByte
    from gbxcule.rl.tasks import Lives

    layout = SimpleNamespace(bases={"wram": 0, "hram": 0x2000})
    before = torch.tensor([0, 255, 5, 5, 5, 200], dtype=torch.uint8)
    now = torch.tensor([1, 0, 4, 5, 133, 72], dtype=torch.uint8)  # +1, +1 (wrapped), -1, 0, +128, -128
    ram = torch.zeros(8, 6, dtype=torch.uint8)
    for lost, want in (("up", [True, True, False, False, False, False]),
                       ("down", [False, False, True, False, False, False])):
        lives = LivesByte(Lives(0xC003, lost), layout, 6, "cpu")
        ram[3] = before
        lives.before(ram)
        ram[3] = now
        out = torch.zeros(6, dtype=torch.bool)
        assert lives.lost(ram, out).tolist() == want, lost


def lives_env(task: str, **kw):
    from gbxcule.rl.env import GameEnv

    return GameEnv(num_envs=2, task=parse_pack(LIVES_PACK, "lv.toml")[task], **kw)


@pytest.mark.parametrize("ends", [False, True])
def test_a_life_lost_pays_its_penalty_once_and_with_life_ends_ends_the_episode(ends):
    env = lives_env("out", life_ends=ends)
    env.reset(seed=0)
    paid, ended_at = torch.zeros(2), []
    for k, a in enumerate(actions(LEAVE + " N3"), 1):  # env 0 walks out (FLAGS' town bit rises), then waits
        _, r, term, trunc, _ = env.step(torch.tensor([a, 0]))
        paid += r
        assert not bool(trunc.any()) and not bool(term[1])
        if bool(term[0]):
            ended_at.append(k)
    assert paid.tolist() == [-3.0, 0.0]  # after the end, the restored start's lower byte is no loss
    assert len(ended_at) == (1 if ends else 0)
    if ends:
        assert not bool(env.final_success[0]) and int(env.steps[0]) == len(actions(LEAVE + " N3")) - ended_at[0]
    st = env.episode_stats()
    assert st["lives_lost"] == 1 and st["episodes"] == (1 if ends else 0)
    assert env.describe()["life_ends"] is ends


def test_a_byte_that_counts_down_is_no_life_lost_when_it_rises():
    env = lives_env("counts_down", life_ends=True)
    env.reset(seed=0)
    paid = sum(env.step(torch.tensor([a, 0]))[1] for a in actions(LEAVE))
    assert paid.tolist() == [0.0, 0.0] and env.episode_stats()["lives_lost"] == 0


def test_life_ends_and_its_penalty_need_a_lives_byte_and_evals_play_on():
    from gbxcule.rl.config import EnvConfig
    from gbxcule.rl.evaluate import make_eval_env
    from gbxcule.rl.starts import EnvConfigError

    for kw in ({"life_ends": True}, {"reward": {"life_lost": -1.0}}):
        with pytest.raises(EnvConfigError, match="need a task whose pack names its lives byte"):
            game_env("from_bed", **kw)
    env = make_eval_env(EnvConfig(task=parse_pack(LIVES_PACK, "lv.toml")["out"], life_ends=True), 2, "cpu", 0)
    try:
        assert env.life_ends is False and game_env("from_bed").episode_stats().get("lives_lost") is None
    finally:
        env.close()


def test_a_run_with_episodic_lives_logs_them_and_resumes_bit_for_bit(tmp_path):
    a, b = resumed_rows(tmp_path, LIVES_PACK, "near_door", {"max_steps": 12, "life_ends": True},
                        ("env_steps", "lives_lost", "episodes", "term_rate", "episode_return", "pg_loss"))
    assert a == b and len(a) == 3
    assert all(isinstance(r["lives_lost"], int) for r in a) and sum(r["lives_lost"] for r in a) > 0


@pytest.mark.parametrize("stack_k, obs, show, k", [(1, "pixels", True, 1), (3, "pixels", False, 1),
                                                   (2, "packed", True, 1), (1, "pixels", False, 4),
                                                   (2, "packed", True, 3)])
def test_the_still_reward_pays_exactly_the_steps_whose_screen_the_last_still_steps_were_taken_on(stack_k, obs, show, k):
    """reward.still: paid on a step whose screen above the last row (where show_milestones draws) is one the
    episode's last `still_steps` steps were taken on (1: the step left the screen as it was), as a Python reference
    over the observations says, after resets too; an env loaded from a state mid-episode pays the same; the env's
    buffers for it are counted in its memory."""
    from collections import deque

    from gbxcule.core.memory import env_bytes
    from gbxcule.rl.env import EnvConfigError

    kw = dict(stack_k=stack_k, obs=obs, max_steps=16, show_milestones=show, keep_final_obs=True,
              reward={"still": -0.5, "still_steps": k, "step_cost": 0.0, "milestone": 0.0, "goal_bonus": 0.0})

    def play(env, script: str, clone_at: int = 0):
        """Step env 0 through `script` (env 1 waits), checking each reward against the reference; with
        `clone_at` an env loaded from the state after that many steps pays the same from there."""
        o, _ = env.reset(seed=0)
        seen = [deque(maxlen=k), deque(maxlen=k)]  # per env: the screens its episode's last k steps were taken on
        still = torch.zeros(2, dtype=torch.int64)
        back = steps = ends = 0  # back: env 0's paid steps whose screen was not the one the step was taken on
        twins = []
        for a in actions(script):
            before = o[:, -1, :71].clone()
            o, r, term, trunc, info = env.step(torch.tensor([a, 0]))
            for twin in twins:
                assert torch.equal(twin.step(torch.tensor([a, 0]))[1], r), steps
            done = term | trunc
            after = torch.where(done[:, None, None], info["final_obs"][:, -1, :71], o[:, -1, :71])
            for i in range(2):
                seen[i].append(before[i])
                paid = any(torch.equal(x, after[i]) for x in seen[i])
                assert r[i].item() == (-0.5 if paid else 0.0), (steps, i, r)
                still[i] += paid
                back += i == 0 and paid and not torch.equal(before[i], after[i])
                if done[i]:
                    seen[i].clear()
            steps += 1
            ends += int(done.sum())
            if steps == clone_at:
                state = env.state_dict()
                twins.append(game_env("from_bed", **{**kw, "max_steps": env.max_steps}))
                twins[-1].load_state_dict(state)
                if k > 1:  # a state saved when the ring kept the screens themselves: the newest at still_pos
                    old = {x: v for x, v in state.items() if x != "still_hashes"}
                    old["still_screens"] = torch.zeros(k, 2, 71, after.shape[-1], dtype=torch.uint8)
                    for i in range(2):
                        for d, screen in enumerate(reversed(seen[i])):
                            old["still_screens"][(state["still_pos"] - d) % k, i] = screen
                    twins.append(game_env("from_bed", **{**kw, "max_steps": env.max_steps}))
                    twins[-1].load_state_dict(old)
        assert len(twins) == (0 if not clone_at else 1 + (k > 1))
        return still, back, steps, ends

    env = game_env("from_bed", **kw)
    # env 0 walks to and fro, out, back; both restart at 16
    still, back, steps, ends = play(env, "R2 L R L R2 D6 R N2 U N2 D N2 N3 B A L", 5)
    assert ends == 2 and 0 < still[0] < steps and still[1] > still[0]  # paid for some of env 0's steps, not all
    assert (back > 0) == (k > 1)  # to and fro: paid only where earlier screens count
    # 3-step episodes: the new episode's first step reaches a screen the last one's steps were taken on, unpaid
    assert play(game_env("from_bed", **{**kw, "max_steps": 3}), "R N N R N N")[3] == 4
    # the ring keeps a hash per screen: its bytes grow by 10 a step kept (the hash, two compare masks)
    assert env_bytes(obs, stack_k, still=k + 1) - env_bytes(obs, stack_k, still=k) == 10
    assert env_bytes(obs, stack_k, still=k) - env_bytes(obs, stack_k) < 4096
    assert env._before.shape == (k, 2) and env._before.dtype == torch.int64
    plain = game_env("from_bed", stack_k=stack_k, obs=obs)
    assert plain._before is None  # off (0.0): no buffer, no work
    with pytest.raises(EnvConfigError, match="still_steps"):
        game_env("from_bed", reward={"still": -0.5, "still_steps": 0})
