"""The QUEST game (docs/quest.md): the solution reaches every milestone in order, each milestone task starts where
the previous milestone ended, the irreversible mistake, a lost fight, the BAG, the dark cave, the pack, lockstep
against PyBoy, and the map picture in the docs. Played in PyBoy under the default schedule with OVERWORLD's test
harness (tests/test_overworld.py: `Game`, `steps_to_goal`)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyboy")

from gbxcule.core.cartridge import load_rom  # noqa: E402
from gbxcule.core.screen import image_shades  # noqa: E402
from gbxcule.harness.verify import VerifyConfig, run_verify  # noqa: E402
from gbxcule.rl.tasks import load_task  # noqa: E402
from gbxcule.roms import write_rom  # noqa: E402
from gbxcule.roms.overworld.game import MODE_WALK  # noqa: E402
from gbxcule.roms.overworld.story import MODE_BATTLE, STORY_WRAM  # noqa: E402
from gbxcule.roms.overworld.tables import PAD  # noqa: E402
from gbxcule.roms.quest import ADDR  # noqa: E402
from gbxcule.roms.quest.game import FAIL_FLAG, MILESTONE_CONDS, flag_cond  # noqa: E402
from gbxcule.roms.quest.picture import render_world  # noqa: E402
from gbxcule.roms.quest.tasks import (  # noqa: E402
    BOOT,
    BOOT_SCRIPT,
    CODEC,
    LOSS,
    MISTAKE,
    SEGMENTS,
    SOLUTION,
    failed,
    reached,
    script,
    segment_starts,
    state,
)
from gbxcule.roms.quest.world import FLAGS, MILESTONES, STORY, TEXTS, WORLD  # noqa: E402
from test_overworld import Game, steps_to_goal  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs"
TEXT_IDS = {name: i for i, name in enumerate(TEXTS)}
STARTS = segment_starts()  # per milestone, the script to the state after the previous one


@pytest.fixture(scope="module")
def rom_path(tmp_path_factory):
    return write_rom("QUEST", tmp_path_factory.mktemp("rom"))


@pytest.fixture
def game(rom_path):
    g = Game(rom_path)
    yield g
    g.backend.close()


def has(read, flag: str) -> bool:
    c = flag_cond(flag)
    return read(c["addr"]) & c["mask"] == c["value"]


def test_the_solution_reaches_every_milestone_in_order(game):
    game.play(BOOT)
    assert reached(game.read) == () and game.mode() == MODE_WALK
    for i, (name, segment) in enumerate(SEGMENTS):
        n = steps_to_goal(game, script(segment), lambda read, name=name: name in reached(read))
        assert n is not None, f"{name}: not reached by its {len(script(segment))}-step segment"
        assert reached(game.read) == MILESTONES[:i + 1], f"at {name}: {reached(game.read)}"  # none early
        game.play(script(segment)[n:])
        assert reached(game.read) == MILESTONES[:i + 1], f"after {name}: {reached(game.read)}"
        assert game.mode() == MODE_WALK and not failed(game.read)
    assert len(script(SOLUTION)) >= 500


def test_the_pack_holds_the_solution_data():
    whole = load_task("quest")
    assert whole.rom == "QUEST" and whole.codec == CODEC and (whole.frames_per_step, whole.release_after_frames) == (
        24, 8)
    assert whole.start.script == BOOT and whole.solution == script(SOLUTION)
    assert 3 * len(whole.solution) <= whole.step_limit <= 6 * len(whole.solution)
    conds = {name: c for name, c in MILESTONE_CONDS}
    for i, (name, segment) in enumerate(SEGMENTS, 1):
        t = load_task(f"quest:quest_m{i}")
        assert t.start.script == script(STARTS[i - 1]) and t.solution == script(segment), t.name
        assert [(c.addr, c.mask, c.value) for c in t.goal_ram] == [tuple(conds[name].values())]
        assert t.step_limit >= 3 * len(t.solution)
    for t in (whole, load_task("quest_m7")):
        assert [(m.name, m.condition.addr, m.condition.mask, m.condition.value) for m in t.milestones] == [
            (name, *c.values()) for name, c in MILESTONE_CONDS]
        assert [(c.addr, c.mask, c.value) for c in t.fail_ram] == [tuple(flag_cond(FAIL_FLAG).values())]
        assert t.cells[:3] == (ADDR["MAP_ID"], ADDR["PLAYER_X"], ADDR["PLAYER_Y"])
        d = t.cell_detail  # at a fight's menu: both HPs and the berries (docs/rl_env.md "Cell detail")
        assert [(c.addr, c.mask, c.value, c.op) for c in d.when] == [(ADDR["MODE"], 0xFF, MODE_BATTLE, "eq")]
        assert d.cells == (ADDR["HP"], ADDR["FOE_HP"], ADDR["BERRIES"])
    assert [m.condition for m in whole.milestones][-1] == whole.goal_ram[0]


def test_each_milestone_task_starts_in_the_state_after_the_previous_milestone_and_its_solution_works(game, rom_path):
    """Along one play of the whole solution, the state at each milestone's end (and one NOOP step, as the env's
    start slot adds: docs/rl_env.md) is the state `quest_m<i>`'s start script reaches; from there its solution
    reaches its goal within its step limit."""
    game.play(BOOT)
    ref = game.backend.games[0]
    for i, (name, segment) in enumerate(SEGMENTS):
        saved = ref.pyboy_state_bytes()
        game.play(script("N"))
        expected = state(game.read)
        ref.load_state(saved)
        task = load_task(f"quest_m{i + 1}")
        other = Game(rom_path)
        try:
            other.play(task.start.script + script("N"))
            assert state(other.read) == expected, name
            assert reached(other.read) == MILESTONES[:i] and other.mode() == MODE_WALK
            n = steps_to_goal(other, task.solution, lambda read, t=task: all(c.holds(read) for c in t.goal_ram))
            assert n is not None and n <= task.step_limit, name
        finally:
            other.backend.close()
        game.play(script(segment))
        assert reached(game.read) == MILESTONES[:i + 1]


def test_the_env_start_slot_of_the_last_milestone_task_is_the_state_after_the_previous_milestone(game):
    """The RL env's own start machinery (rl/starts.py, on the CPU device) from `quest_m11`'s start."""
    from gbxcule.rl.starts import build_starts, open_backend

    task = load_task("quest_m11")
    be = open_backend(task, None, 1, "cpu")
    try:
        build_starts(be, task.start, 0)
        _, ram = be.slot_state(0)
    finally:
        be.close()
    wram = ram[be.layout.bases["wram"]:][:0x2000]
    game.play(script(STARTS[-1] + " N"))
    assert state(lambda a: int(wram[a - 0xC000])) == state(game.read)
    assert reached(lambda a: int(wram[a - 0xC000])) == MILESTONES[:-1]


def test_the_mistake_sets_its_flag_and_leaves_no_way_to_the_altar(game):
    game.play(script(STARTS[7]))  # quest_m8's start: the gem and the key in the BAG
    assert has(game.read, "HAS_GEM") and not failed(game.read)
    n = steps_to_goal(game, script(MISTAKE), failed)
    assert n is not None
    game.play(script(MISTAKE)[n:])
    assert game.mode() == MODE_WALK
    assert not has(game.read, "HAS_GEM") and game.read(ADDR["LAST_TEXT"]) == TEXT_IDS["peddler_takes"]
    assert reached(game.read) == MILESTONES[:7]
    # no way back: the altar's flag needs the gem in the BAG; only the pedestal gives it, only while GEM is clear,
    # and no script clears GEM
    records = [(name, r) for name, rs in STORY.scripts.items() for r in rs]
    assert not [n for n, r in records if r.clear == "GEM"]
    givers = [(n, i) for n, rs in STORY.scripts.items() for i, r in enumerate(rs) if "HAS_GEM" in r.sets]
    assert givers == [("pedestal", 1)] and STORY.scripts["pedestal"][0].when == "GEM"
    assert [u for u in STORY.uses if u.script == "place_gem"] == [u for u in STORY.uses if u.item == "gem"
                                                                   and u.map == "shrine"]


env_source = Path(__file__).resolve().parents[1] / "src/gbxcule/rl/env.py"


@pytest.mark.skipif("fail_ram" not in env_source.read_text(),
                    reason="rl/env.py does not end episodes on a task's fail_ram yet (being added in main)")
def test_the_env_ends_the_episode_on_the_mistake(game):
    torch = pytest.importorskip("torch")
    from gbxcule.rl.env import GameEnv

    game.play(script(STARTS[7] + " N"))  # the env's start slot: the start script and one NOOP
    fail_at = steps_to_goal(game, script(MISTAKE), failed)
    assert fail_at is not None
    env = GameEnv(task="quest_m8", num_envs=1, device="cpu", info_mode="none")
    try:
        env.reset(seed=0)
        for k, a in enumerate(script(MISTAKE)[:fail_at], 1):
            _, _, term, trunc, _ = env.step(torch.tensor([a], dtype=torch.int32))
            assert bool(term[0]) == (k == fail_at) and not bool(trunc[0]), k
        assert bool(env.failed[0]) and not bool(env.success[0])
    finally:
        env.close()


def test_the_packs_lives_byte_counts_a_lost_fight_as_one_life_lost():
    """The pack's `lives` is LOSSES: with life_ends the env ends the episode on the fight's last step, once."""
    torch = pytest.importorskip("torch")
    from gbxcule.rl.env import GameEnv

    env = GameEnv(task="quest_m3", num_envs=1, device="cpu", info_mode="none", life_ends=True,
                  reward={"life_lost": -1.0, "milestone": 0.0, "step_cost": 0.0})
    try:
        env.reset(seed=0)
        ended = [k for k, a in enumerate(script(LOSS), 1)
                 if bool(env.step(torch.tensor([a], dtype=torch.int32))[2][0])]
        assert len(ended) == 1 and ended[0] > len(script(LOSS)) - 8  # the loss, among the fight's last steps
        assert float(env.final_return[0]) == -1.0 and env.episode_stats()["lives_lost"] == 1
    finally:
        env.close()


def test_a_lost_fight_sends_the_player_home_with_full_hp_and_keeps_the_rest(game):
    game.play(script(STARTS[2]))  # quest_m3's start: the letter, no club
    before = state(game.read)
    game.play(script(LOSS))
    after = state(game.read)
    s = STORY
    loss_map, loss_x, loss_y, loss_facing = s.loss
    assert (after["MAP_ID"], after["PLAYER_X"], after["PLAYER_Y"], after["FACING"]) == (
        WORLD.map_ids[loss_map], loss_x, loss_y, loss_facing)
    assert after["HP"] == after["HP_MAX"] == s.hp and after["LOSSES"] == before["LOSSES"] + 1
    assert after["FOE_HP"] == s.foes[0].hp - 3 * s.power  # three hits landed, unarmed
    for key in ("EVENTS_0", "EVENTS_1", "EVENTS_2", "EVENTS_3", "BERRIES"):
        assert after[key] == before[key], key  # flags, items and berries kept
    assert not has(game.read, "BRUTE") and has(game.read, "HAS_LETTER") and game.mode() == MODE_WALK


def test_the_fight_box_draws_both_hps_as_bars_that_the_agents_view_tells_apart():
    """Along the fight in quest_m4's solution the box's bars hold the foe's and the player's HP (two a full tile, a
    half for an odd one), and in the default view (every other pixel) the menus of different turns differ in the
    bars' columns: the digits' thin strokes alone differed by 2 of the frame's pixels between 8 HP and 2."""
    torch = pytest.importorskip("torch")
    from gbxcule.core.schema import ram_layout
    from gbxcule.rl.env import GameEnv
    from gbxcule.roms.overworld.game import TILE_BLANK, TILE_STORY, WIN_MAP, encode
    from gbxcule.roms.overworld.story import BAR_COL, BAR_W

    base = ram_layout(0).bases

    def at(addr: int) -> int:  # the env's RAM row of a VRAM or WRAM address
        return base["vram"] + addr - 0x8000 if addr < 0xA000 else base["wram"] + addr - 0xC000

    env = GameEnv(task="quest_m4", num_envs=1, device="cpu", info_mode="none", obs_view="stride")
    menus = {}
    try:
        env.reset(seed=0)
        for a in script(SEGMENTS[3][1]):
            env.step(torch.tensor([a], dtype=torch.int32))
            ram = env.ram[:, 0]
            if int(ram[at(WIN_MAP + 4 * 32 + 2)]) != encode("F")[0]:  # the choices are not shown
                continue
            hps = int(ram[at(ADDR["FOE_HP"])]), int(ram[at(ADDR["HP"])])
            for row, hp in zip((1, 2), hps, strict=True):
                bar = [int(ram[at(WIN_MAP + row * 32 + BAR_COL + i)]) for i in range(BAR_W)]
                assert bar == [TILE_STORY] * (hp // 2) + [TILE_STORY + 1] * (hp % 2) + \
                    [TILE_BLANK] * (BAR_W - (hp + 1) // 2), (row, hp)
            menus.setdefault(hps, env.obs[0, -1].clone())
    finally:
        env.close()
    assert len(menus) >= 4 and any(hp % 2 for hps in menus for hp in hps)  # the turns, an odd HP among them
    cols = slice(4 * BAR_COL, 4 * (BAR_COL + BAR_W))  # the bars' columns in the 80-wide frame
    frames = list(menus.values())
    for i, a in enumerate(frames):
        for b in frames[i + 1:]:
            assert int((a[:, cols] != b[:, cols]).sum()) >= 12  # a 2-HP tile: 4 columns of 3 rows at least


@pytest.mark.parametrize("change, needle", [
    (lambda s: {"foes": (replace(s.foes[0], name="BRUTISH"),)}, "name longer than 6"),
    (lambda s: {"foes": (replace(s.foes[0], hp=100),)}, "HP must be 1-99"),
    (lambda s: {"hp": 0}, "the player's HP must be 1-99"),
])
def test_a_story_whose_fight_box_cannot_show_it_is_refused(change, needle):
    world = replace(WORLD, story=replace(STORY, **change(STORY)))
    with pytest.raises(ValueError, match=needle):
        world.check()


def test_the_bag_uses_the_chosen_item_in_the_right_place_only(game):
    game.play(script(STARTS[9]))  # quest_m10's start: in the shrine; BAG: BERRY, CLUB, GEM
    game.play(script("U4 S A D N A"))  # the CLUB, facing the altar
    assert game.read(ADDR["LAST_TEXT"]) == TEXT_IDS["nothing"]
    game.play(script("N A N"))
    assert not has(game.read, "ALTAR") and has(game.read, "HAS_GEM") and game.mode() == MODE_WALK
    game.play(script("S A D2 N A"))  # the GEM
    assert has(game.read, "ALTAR") and not has(game.read, "HAS_GEM")


def test_berries_heal_outside_a_fight_unless_hp_is_full(game, rom_path):
    game.play(script(STARTS[1]))  # after mom: two berries, full HP
    game.play(script("S A N A N A N"))  # START, BAG, BERRY
    assert game.read(ADDR["LAST_TEXT"]) == TEXT_IDS["full"] and game.read(ADDR["BERRIES"]) == STORY.berries
    hurt = Game(rom_path)
    try:
        hurt.play(script(STARTS[4]))  # after the fight: one berry left, HP low
        hp = hurt.read(ADDR["HP"])
        assert hp < STORY.hp and hurt.read(ADDR["BERRIES"]) == 1
        hurt.play(script("S A N A N A N"))
        assert hurt.read(ADDR["LAST_TEXT"]) == TEXT_IDS["ate_berry"] and hurt.read(ADDR["BERRIES"]) == 0
        assert hurt.read(ADDR["HP"]) == min(hp + STORY.berry_heal, STORY.hp)
    finally:
        hurt.backend.close()


def test_the_dark_cave_shows_only_the_tiles_next_to_the_player(game):
    game.play(script(STARTS[5]))  # quest_m6's start: just inside the cave
    cave = WORLD.map_by_key["cave"]
    stride = cave.width + 2 * PAD
    g = game.backend.games[0]
    moves = 0
    for step in ("N", "U", "U", "U", "U", "R", "R"):
        x0 = (game.read(ADDR["PLAYER_X"]), game.read(ADDR["PLAYER_Y"]))
        g.step(script(step)[0], render=True)  # the step, and the tiles it queued, done within the step
        x, y = game.read(ADDR["PLAYER_X"]), game.read(ADDR["PLAYER_Y"])
        moves += abs(x - x0[0]) + abs(y - x0[1])
        assert abs(x - x0[0]) + abs(y - x0[1]) == (step != "N")  # one tile a d-pad step
        assert (game.read(ADDR["LIGHT_X"]), game.read(ADDR["LIGHT_Y"])) == (x, y)
        start = STORY_WRAM["wBlocks"]
        blocks = game.backend.read_memory(0, start, start + stride * (cave.height + 2 * PAD)).astype(np.int32)
        lit = np.argwhere((blocks.reshape(-1, stride) & 0x80) == 0)
        assert sorted(map(tuple, lit)) == [(y + PAD + dy, x + PAD + dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
        screen = g.screen_shades()
        outside = np.ones((144, 160), dtype=bool)
        outside[48:96, 48:96] = False  # the 3x3 tiles around the player (16x16 each), the player's at (64, 64)
        outside[136:] = False  # the status bar
        assert (screen[outside] == 3).all() and (screen[48:96, 48:96] != 3).any()
    assert moves == 6


def test_verify_lockstep_over_the_solution_to_the_gem(tmp_path):
    _verify(len(script(BOOT_SCRIPT + " " + " ".join(t for _, t in SEGMENTS[:6]))), tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("GBXCULE_SLOW"), reason="the whole solution in lockstep: set GBXCULE_SLOW=1")
def test_verify_lockstep_over_the_whole_solution(tmp_path):
    _verify(len(script(BOOT_SCRIPT + " " + SOLUTION)), tmp_path)


def _verify(steps: int, tmp_path) -> None:
    """`gbxcule verify --rom QUEST --task quest --steps STEPS --screens` (the task's start and solution)."""
    actions = script(BOOT_SCRIPT + " " + SOLUTION)
    cfg = VerifyConfig(rom="QUEST", steps=steps, frames_per_step=24, release_after_frames=8, actions="solution",
                       codec=CODEC, screens=True, bundle_dir=str(tmp_path), task="quest", script=actions)
    from gbxcule.roms import resolve_rom

    result = run_verify(cfg, load_rom(resolve_rom("QUEST")))
    assert result.ok and result.steps_run == steps, "\n".join(result.differences[:20])


def test_flags_table_names_every_milestone_and_the_mistake_once():
    assert set(MILESTONES) <= set(FLAGS) and FAIL_FLAG in FLAGS
    assert len(set(FLAGS.values())) == len(FLAGS)


def test_docs_quest_map_is_current():
    from PIL import Image

    path = DOCS / "quest_map.png"
    shades = image_shades(np.asarray(Image.open(path).convert("L")))
    assert path.stat().st_size < 300_000
    np.testing.assert_array_equal(shades[::2, ::2], render_world())


def test_play_reports_the_task_goal_and_milestones(capsys):
    import json

    from gbxcule.cli.main import main

    assert main(["play", "QUEST", "--task", "quest_m1", "--actions", "solution", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["steps"] == len(script(SEGMENTS[0][1])) and d["task"]["goal"]["envs"] == 1
    assert [(m["name"], m["envs"]) for m in d["task"]["milestones"]] == [
        (name, int(name == "MOM")) for name in MILESTONES]
    assert d["task"]["fail"] == {"envs": 0, "first_step": None}


@pytest.mark.parametrize("args, needle", [
    (["play", "OVERWORLD", "--task", "quest"], "is for the built-in ROM QUEST"),
    (["play", "QUEST", "--actions", "solution"], "give --task"),
    (["play", "QUEST", "--task", "quest", "--script", "N"], "use one"),
    (["verify", "--rom", "QUEST", "--actions", "solution"], "give --task"),
    (["verify", "--rom", "QUEST", "--task", "quest", "--codec", "dmg_buttons_v0"], "defined with codec"),
    (["verify", "--rom", "QUEST", "--task", "quest", "--actions", "striped"], "drop --actions"),
])
def test_task_actions_are_refused_in_one_line(capsys, args, needle):
    from gbxcule.cli.main import main

    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("task, needle", [("quest_m5", "does not start in a dark map"), ("quest_m99", "quest_m99")])
def test_bench_maze_views_refuses_a_task_outside_the_dark_maze_in_one_line(tmp_path, capsys, task, needle):
    """scripts/bench/bench_maze_views.py measures the dark maze's screens (BENCHMARKS.md "The quest"); a task that
    does not start there, or no task, is one error line and exit 2, and no artifact."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("bench_maze_views", root / "scripts/bench/bench_maze_views.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "views.json"
    assert mod.main(["--tasks", task, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert not out.exists()


QUEST_TASKS = [f"quest_m{i}" for i in range(1, len(MILESTONES) + 1)]


@pytest.mark.parametrize("name", [n for n in QUEST_TASKS if load_task(n).template])
def test_a_milestone_task_with_a_template_ends_its_episode_at_its_flag_not_at_the_solutions_last_screen(name):
    """The templates are the solution's last frame, which a policy that takes the milestone another way never shows
    (a greedy policy's episodes on quest_m1, m8 and m10 agreed with them in 0 of 16): episodes end on the RAM goal,
    at the step its flag is first set, with the goal bonus, and success is the flag's."""
    import torch

    from gbxcule.rl.env import GameEnv

    task = load_task(name)
    env = GameEnv(task=task, num_envs=1, device="cpu", info_mode="none")
    try:
        env.reset(seed=0)
        assert env.terminate_on == "ram" and env.success_source == "ram"
        ended = []
        for a in task.solution:
            env.step(torch.tensor([a]))
            ended.append((bool(env.terminated[0]), bool(env.success[0]), float(env.rewards[0])))
        first = next(k for k, (t, ok, _) in enumerate(ended) if ok)
        assert [t for t, _, _ in ended[:first + 1]] == [False] * first + [True], (name, first)
        assert ended[first][2] > task.reward["goal_bonus"] / 2  # the bonus, less at most a step's cost
        assert first < len(task.solution) - 1  # the template's frame (the last step's) comes later
    finally:
        env.close()


@pytest.mark.parametrize("name", [n for n in QUEST_TASKS if load_task(n).template])
def test_a_milestone_template_fires_only_where_its_flag_holds_along_the_whole_quest(name):
    """A milestone task that ends on a pixel template (docs/quest.md) must not end anywhere its RAM goal does not
    hold: along the whole quest's solution, which walks every map (the elder's hall, the shrine) before and after
    each milestone, every frame under the template's tau is one where the task's flag is set. (quest_m9's template
    matched the elder's hall at 0.023 against its tau of 0.168, and 90% of its fires in training were false.)"""
    import dataclasses

    from gbxcule.rl.capture import task_template
    from gbxcule.rl.env import GameEnv
    from gbxcule.rl.templates import replay

    task, quest = load_task(name), load_task("quest")
    env = GameEnv(task=task, num_envs=1, device="cpu", info_mode="none")
    tpl = task_template(task, env.template_meta(task.id), "cpu")
    env.close()
    tau = task.reward["tau"]
    r = replay(dataclasses.replace(task, start=quest.start), tpl, actions=quest.solution, hold=0)
    false = [k for k, (d, ok) in enumerate(zip(r["along"], r["along_ok"], strict=True)) if d < tau and not ok]
    assert any(ok for ok in r["along_ok"]) and not false, (name, tau, false[:5])
