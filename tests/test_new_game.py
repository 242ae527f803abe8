"""docs/new_game.md stays true: its action table is the codecs', its pack parses and is for the game it names, and
(when GBXCULE_TEST_ROMS holds rex-run.gb, a ROM of the public game set fetched by SHA-1, never committed) its
commands find the score's bytes, check the pack against the game and make a start state."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib
from pathlib import Path

import pytest

from gbxcule.core.action_codec import CODECS
from gbxcule.rl.tasks import parse_pack

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "new_game.md").read_text()
SLUG = "rex-run"


def _game() -> dict:
    return next(g for g in tomllib.loads((ROOT / "benchmarks/games/games.toml").read_text())["game"]
                if g["slug"] == SLUG)


def _rom() -> Path | None:
    base = os.environ.get("GBXCULE_TEST_ROMS")
    if not base:
        return None
    for p in (Path(base) / f"{SLUG}.gb", Path(base) / "games" / f"{SLUG}.gb"):
        if p.is_file() and hashlib.sha1(p.read_bytes()).hexdigest() == _game()["sha1"]:
            return p
    return None


PACK = ROOT / "benchmarks/games/packs/rex_run.toml"


def _pack_text() -> str:
    return re.findall(r"```toml\n(.*?)```", DOC, re.S)[0]


def test_the_action_table_is_the_codecs():
    rows = [r for r in DOC.splitlines() if re.match(r"\| \d+ \|", r)]
    head = next(r for r in DOC.splitlines() if r.startswith("| index |"))
    names = [c.strip(" `") for c in head.strip("|").split("|")[1:]]
    assert sorted(names) == sorted(CODECS)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        i = int(cells[0])
        for name, cell in zip(names, cells[1:], strict=True):
            c = CODECS[name]
            want = ("+".join(b.upper() for b in c.actions[i]) or "NOOP") if i < c.num_actions else ""
            assert cell == want, (name, i)
    assert len(rows) == max(c.num_actions for c in CODECS.values())


def test_the_pack_parses_and_names_the_game():
    assert _pack_text() in PACK.read_text()  # the doc shows the pack file
    tasks = parse_pack(_pack_text(), "new_game.md")
    task = tasks["score_300"]
    assert task.rom_sha1 == _game()["sha1"] and task.goal_ram[0].addr == 0xFFB3 and task.goal_ram[0].op == "ge"
    assert task.start.generator == "random_actions" and task.novelty_ram == (0xFFB1, 0xFFB2, 0xFFB3)


needs_rom = pytest.mark.skipif(_rom() is None, reason=f"GBXCULE_TEST_ROMS holds no {SLUG}.gb with the game set's "
                                                      "SHA-1")


@needs_rom
def test_the_commands_find_the_score_and_check_the_pack(tmp_path, capsys):
    from gbxcule.cli.main import main

    rom = str(_rom())
    assert main(["ram", rom, "--trace", "N5 S N3 A |=0 N3 |! N3 |! N6 |=4", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [c["addr"] for c in d["candidates"]] == [0xFFB2]  # the tens digit, alone
    assert main(["ram", rom, "--trace", "N5 S N3 A | ?45 |", "--addrs", "FFB1,FFB2,FFB3", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    hundreds = d["candidates"][2]["values"]
    assert d["candidates"][2]["addr"] == 0xFFB3 and max(hundreds) == 1 and hundreds[-1] == 0  # 100+, then a new run
    pack = PACK
    assert main(["ram", rom, "--task", f"{pack}:score_300", "--addrs", "task", "--trace", "| ?20 |"]) == 0
    out = capsys.readouterr().out
    assert "task goal at its marks: no no" in out and "0xFFB3" in out
    state = tmp_path / "start.gbxs"
    assert main(["play", rom, "--backend", "warp_vec_cpu", "--script", "N5 S N3 A", "--save-state", str(state)]) == 0
    capsys.readouterr()
    from gbxcule.rl import GameEnv

    env = GameEnv(rom, 2, task=f"{pack}:score_300", start_states=state)
    assert env.success_source == "ram" and not env.goal_holds().any()
    env.close()


def test_play_script_saves_a_start_state(tmp_path, capsys):
    """`play --script` plays the same buttons in every env; here to the built-in game's town, where leave_house's
    goal already holds (an eval would skip such a start)."""
    pytest.importorskip("torch")
    from gbxcule.cli.main import main
    from gbxcule.rl import GameEnv

    state = tmp_path / "town.gbxs"
    assert main(["play", "OVERWORLD", "--backend", "warp_vec_cpu", "--envs", "2", "--script", "N5 R4 D6 R N2",
                 "--save-state", str(state), "--save-envs", "all", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["steps"] == 18 and d["actions"] == "script" and d["final"][0]["wram_sha1"] == d["final"][1]["wram_sha1"]
    env = GameEnv(task="leave_house", num_envs=2, start_states=state)
    assert env.num_slots == 2 and env.goal_holds().all()
    env.close()
    for script, needle in (("N5 Q", "bad script token"), ("", "plays no action")):
        assert main(["play", "OVERWORLD", "--backend", "warp_vec_cpu", "--script", script]) == 2
        err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert len(err) == 1 and needle in err[0]


def test_pokemon_red_pack_says_how_to_check_each_task(capsys):
    """Each task of the Pokemon Red pack (no ROM here) names the RAM facts it relies on and one `gbxcule ram`
    command that checks them; each command parses and runs up to the ROM check."""
    import shlex

    from gbxcule.cli.main import main
    from gbxcule.rl.tasks import builtin_packs

    text = (ROOT / "src/gbxcule/rl/packs/pokemon_red.toml").read_text()
    for name, task in builtin_packs()["pokemon_red"].items():
        before = text[:text.index(f"[tasks.{name}]")].rsplit("\n\n", 1)[-1]
        relies = before[before.index("# Relies on:"):before.index("# Check:")]
        for cond in task.goal_ram:
            assert f"0x{cond.addr:04X}" in relies, (name, relies)
        cmd = before[before.index("# Check:") + len("# Check:"):].splitlines()[0].strip()
        args = shlex.split(cmd)
        assert args[:3] == ["gbxcule", "ram", "pokemon_red.gb"] and f"pokemon_red:{name}" in args and "task" in args
        assert main([*args[1:2], "OVERWORLD", *args[3:]]) == 2  # parsed, then refused: not the pack's ROM
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is for the ROM with SHA-1 ea9bcae6" in err[0], err
