"""The OVERWORLD game in PyBoy: header, every RL task solved by its script, the start menu, text boxes,
saving, the wandering person, random agents, and the world picture in the docs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyboy")

from gbxcule.backends.pyboy_single import PyBoySingleBackend  # noqa: E402
from gbxcule.core.action_codec import get_codec  # noqa: E402
from gbxcule.core.pyboy_state import snapshot_pyboy  # noqa: E402
from gbxcule.core.screen import image_shades  # noqa: E402
from gbxcule.harness.actions import make_action_gen  # noqa: E402
from gbxcule.roms import get_spec, write_rom  # noqa: E402
from gbxcule.roms.overworld import ADDR  # noqa: E402
from gbxcule.roms.overworld.game import (  # noqa: E402
    MAGIC,
    MODE_MENU,
    MODE_TEXT,
    MODE_WALK,
    SRAM_BOOTS,
    SRAM_MAGIC,
    SRAM_SAVE,
    SRAM_SAVES,
    WRAM,
)
from gbxcule.roms.overworld.picture import render_world  # noqa: E402
from gbxcule.roms.overworld.tasks import BOOT, CODEC, TASK_BY_NAME, TASKS, script, state  # noqa: E402
from gbxcule.roms.overworld.world import (  # noqa: E402
    FLAG_READ_SIGN,
    FLAG_SAVED,
    HOME,
    MAP_BY_KEY,
    TEXT_IDS,
    TOWN,
)

DOCS = Path(__file__).resolve().parents[1] / "docs"
RANDOM_SEEDS = 4


@pytest.fixture(scope="module")
def rom_path(tmp_path_factory):
    return write_rom("OVERWORLD", tmp_path_factory.mktemp("rom"))


class Game:
    """One PyBoy under the default schedule (24 frames a step, buttons held for 8)."""

    def __init__(self, path: Path):
        self.backend = PyBoySingleBackend(str(path), codec=CODEC)

    def read(self, addr: int) -> int:
        return int(self.backend.read_memory(0, addr, addr + 1)[0])

    def play(self, actions) -> None:
        for a in actions:
            self.backend.step(np.array([a], dtype=np.int32))

    def mode(self) -> int:
        return self.read(ADDR["MODE"])


def steps_to_goal(game: Game, actions, goal) -> int | None:
    """Play the actions one at a time; how many were played when the goal first held (None: never)."""
    for n, action in enumerate(actions, 1):
        game.play([action])
        if goal(game.read):
            return n
    return None


@pytest.fixture
def game(rom_path):
    g = Game(rom_path)
    yield g
    g.backend.close()


def test_info_reports_a_valid_mbc3_cartridge(rom_path):
    r = subprocess.run([sys.executable, "-m", "gbxcule", "info", str(rom_path), "--json"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["mbc"] == "mbc3" and d["cartridge_type"] == 0x13 and d["has_ram"] and d["has_battery"]
    assert d["rom_size"] == 128 * 1024 and d["ram_size"] == 32 * 1024 and d["cgb_mode"] == "dmg"
    assert d["logo_valid"] and d["header_checksum_valid"] and d["global_checksum_valid"] and d["runnable"]


def test_data_lives_in_switched_banks():
    sections = get_spec("OVERWORLD").build().sections
    banks = {s.name: s.bank for s in sections if s.kind == "ROMX"}
    assert banks["gfx"] != banks["texts"] and {b for n, b in banks.items() if n.startswith("maps_")} == {2, 4}
    assert len(set(banks.values())) >= 4


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_scripted_solution_reaches_goal(game, task):
    game.play(task.start)
    assert game.mode() == MODE_WALK and not task.goal(game.read)
    steps = steps_to_goal(game, task.solution, task.goal)
    assert steps is not None, f"{task.name}: goal not reached by its {len(task.solution)}-step solution"
    assert steps <= task.step_limit


def test_start_menu_opens_and_closes(game):
    game.play(BOOT + script("S"))
    assert game.mode() == MODE_MENU
    game.play(script("D"))
    assert game.read(ADDR["MENU_CURSOR"]) == 1
    game.play(script("B"))
    assert game.mode() == MODE_WALK
    game.play(script("S"))
    assert game.mode() == MODE_MENU and game.read(ADDR["MENU_CURSOR"]) == 0
    game.play(script("S"))  # START closes it too
    assert game.mode() == MODE_WALK
    assert (game.read(ADDR["PLAYER_X"]), game.read(ADDR["PLAYER_Y"])) == (1, 1)  # the d-pad moved the cursor


def test_text_box_opens_and_closes_with_a(game):
    game.play(BOOT + script("R4 D4 L3"))  # next to mom, facing her
    game.play(script("A"))
    assert game.mode() == MODE_TEXT and game.read(ADDR["LAST_TEXT"]) == TEXT_IDS["mom"]
    game.play(script("N3"))
    assert game.mode() == MODE_TEXT  # waits for A
    game.play(script("A N2"))
    assert game.mode() == MODE_TEXT  # second page
    game.play(script("A"))
    assert game.mode() == MODE_WALK
    assert not game.read(ADDR["FLAGS"]) & FLAG_READ_SIGN


def test_sign_reads_and_sets_its_flag(game):
    game.play(BOOT + script("R4 D R3 U A"))  # below the TV, face it, A
    assert game.mode() == MODE_TEXT and game.read(ADDR["LAST_TEXT"]) == TEXT_IDS["tv"]
    assert game.read(ADDR["FLAGS"]) & FLAG_READ_SIGN
    game.play(script("N2 A"))
    assert game.mode() == MODE_WALK


def test_save_writes_cartridge_ram(game):
    game.play(BOOT + script("R2 S D A"))
    assert game.mode() == MODE_TEXT and game.read(ADDR["LAST_TEXT"]) == TEXT_IDS["saved"]
    now = state(game.read)
    assert (now["MAP_ID"], now["PLAYER_X"], now["PLAYER_Y"]) == (HOME, 3, 1) and now["FLAGS"] & FLAG_SAVED
    saved = bytes(game.read(ADDR["MAP_ID"] + i) for i in range(7))  # map, x, y, facing, flags, steps
    ram = bytes(np.asarray(snapshot_pyboy(game.backend.games[0].pyboy).cartridge.ram, dtype=np.uint8).reshape(-1))
    assert ram[SRAM_MAGIC - 0xA000:][:4] == MAGIC
    assert (ram[SRAM_BOOTS - 0xA000], ram[SRAM_SAVES - 0xA000]) == (1, 1)
    assert ram[SRAM_SAVE - 0xA000:][:7] == saved
    assert now["BOOT_COUNT"] == 1


def test_wanderer_walks_within_its_area(game):
    game.play(TASK_BY_NAME["reach_lab"].start)  # in town
    assert game.read(ADDR["MAP_ID"]) == TOWN
    kid = MAP_BY_KEY["town"].people[0]
    seen = set()
    for _ in range(40):
        game.play(script("N"))
        seen.add((game.read(WRAM["wPeople"]), game.read(WRAM["wPeople"] + 1)))
    assert len(seen) >= 3
    assert all(abs(x - kid.x) <= 2 and abs(y - kid.y) <= 2 for x, y in seen)


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_random_agents_rarely_reach_goal(rom_path, task):
    gen = make_action_gen("seeded_random", get_codec(CODEC), RANDOM_SEEDS, seed=1)
    schedule = np.stack([gen(step) for step in range(task.step_limit)], axis=1)  # [agent, step]
    solved = 0
    for actions in schedule:
        g = Game(rom_path)
        try:
            g.play(task.start)
            steps_before = g.read(ADDR["STEPS"])
            solved += steps_to_goal(g, actions.tolist(), task.goal) is not None
            assert g.read(ADDR["STEPS"]) > steps_before  # the agent did walk around
        finally:
            g.backend.close()
    assert solved <= 1, f"{solved} of {RANDOM_SEEDS} random agents solved {task.name}"


def test_docs_world_picture_is_current():
    from PIL import Image

    shades = image_shades(np.asarray(Image.open(DOCS / "overworld_map.png").convert("L")))
    assert (DOCS / "overworld_map.png").stat().st_size < 200_000
    np.testing.assert_array_equal(shades[::2, ::2], render_world())
