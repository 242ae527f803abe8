"""`gbxcule ram`: the cheat-finder search (core/ramsearch.py) on synthetic arrays, and on RAM recorded over walking
traces of the built-in game (harness/ram.py) where it must find MAP_ID and PLAYER_X (docs/overworld.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gbxcule.core import ramsearch as rs
from gbxcule.core.action_codec import get_codec
from gbxcule.core.schedule import ActionSchedule
from gbxcule.rl.tasks import TaskError, parse_script

CODEC = get_codec("pokemonred_puffer_v1")
MAP_ID, PLAYER_X = 0xC100, 0xC101
MAP_TRACE = "N5 |=0 R4 D6 R N2 |=1 D R6 D7 R6 U N |=2"  # home (0), town (1), the lab (2)
X_TRACE = "N5 | R |+ R |+ L |- D |= L |-"  # in the house: right, right, left, down, left


def parse(text: str, seed: int = 0) -> rs.Trace:
    return rs.parse_trace(text, lambda s: parse_script(s, CODEC), CODEC.num_actions, seed)


def test_trace_tokens_marks_and_random_segments():
    t = parse("N5 | R4 |+ ?3 |=0x10 D |!7 |! |- |=")
    assert t.actions[:9] == (0,) * 5 + (7,) * 4 and len(t.actions) == 13 and t.actions[-1] == 5
    assert [(m.step, m.rel, m.value) for m in t.marks] == [(5, "", None), (9, "+", None), (12, "==", 16),
                                                           (13, "!=", 7), (13, "!", None), (13, "-", None),
                                                           (13, "=", None)]
    assert parse("?50", seed=3).actions == parse("?50", seed=3).actions != parse("?50", seed=4).actions
    assert all(0 <= a < CODEC.num_actions for a in parse("?200").actions)
    for bad, needle in (("R4 |x", "bad mark"), ("R4 |=300", "not a byte"), ("R4 |=zz", "not a number"),
                        ("?0", "random segment"), ("?", "random segment"), ("| |+", "plays no action")):
        with pytest.raises(rs.RamSearchError, match=needle):
            parse(bad)
    with pytest.raises(TaskError, match="bad script token"):
        parse("Q4 |+")


def test_search_relations_narrow_over_traces():
    # 4 addresses over 3 steps: 0 climbs, 1 stays, 2 falls, 3 changes to 5 and stays
    a = np.array([[1, 9, 9, 0], [2, 9, 8, 5], [3, 9, 7, 5]], dtype=np.uint8)
    t = rs.Trace("", (0, 0), (rs.Mark(1, "+"), rs.Mark(2, "+")))
    assert rs.search([a], [t])[0].tolist() == [True, False, False, False]
    cases = {"-": [False, False, True, False], "=": [False, True, False, False], "!": [True, False, True, True]}
    for rel, want in cases.items():
        assert rs.search([a], [rs.Trace("", (0,), (rs.Mark(1, rel),))])[0].tolist() == want
    eq5 = rs.Trace("", (0,), (rs.Mark(1, "==", 5),))
    keep, left = rs.search([a], [eq5])
    assert keep.tolist() == [False, False, False, True] and left == [1]
    # a plain mark moves the reference moment: 9 -> 8 -> 7 only decreases from mark 1 on
    t2 = rs.Trace("", (0, 0), (rs.Mark(1, ""), rs.Mark(2, "-")))
    assert rs.search([a], [t2])[0].tolist() == [False, False, True, False]
    # a second trace narrows the first one's candidates; `start` limits the search
    b = np.array([[0, 0, 0, 0], [0, 1, 0, 5]], dtype=np.uint8)
    keep, left = rs.search([a, b], [rs.Trace("", (0,), (rs.Mark(1, "!"),)), rs.Trace("", (0,), (rs.Mark(1, "="),))])
    assert keep.tolist() == [True, False, True, False] and left == [3, 2]
    assert rs.search([a], [t], start=np.array([False, True, True, True]))[0].tolist() == [False] * 4


def test_rank_puts_the_byte_that_changes_only_at_the_marks_first():
    """A room change that copies the room into WRAM: hundreds of bytes pass `|!`, but the room's bytes are
    cleared and then filled (two changes in the asked interval), the animation and the timer change at other
    steps too, and the byte of the event (the room's number, last in address order) changes once, at the door."""
    steps, door = 12, 6
    rec = np.zeros((steps + 1, 400), dtype=np.uint8)
    rec[door - 1:, :300] = 0xFF  # the old room cleared a step before the new one is drawn
    rec[door:, :300] = np.arange(300) % 7 + 1
    rec[door:, 300:350] = 9  # bytes the new room sets ...
    rec[door + 3, 300:350] = 10  # ... and that blink once in it: two stray changes
    rec[:, 350:399] = np.arange(steps + 1)[:, None] % 2  # an animation: every step
    rec[door:, 399] = 1  # the room number
    trace = rs.Trace("", (0,) * steps, (rs.Mark(2, ""), rs.Mark(door + 1, "!"), rs.Mark(steps, "=")))
    keep, _ = rs.search([rec], [trace])
    assert keep.sum() == 351  # the animation fails |= (odd steps apart); everything else passes
    ranked = rs.rank([rec], [trace], np.flatnonzero(keep))
    assert [r.index for r in ranked[:1]] == [399] and ranked[0].stray == 0 and ranked[0].why == "only at marks (1x)"
    assert [r.stray for r in ranked[1:]] == [1] * 300 + [2] * 50 and ranked[1].why == "1 stray change"
    assert [r.index for r in ranked[1:4]] == [0, 1, 2]  # then by changes (2 each), then address
    # every trace counts: the room number changes back in a second trace, where only |= is asked: stray there
    back = rec[::-1].copy()
    t2 = rs.Trace("", (0,) * steps, (rs.Mark(steps, "="),))
    r2 = {r.index: r for r in rs.rank([rec, back], [trace, t2], [399, 300])}
    assert (r2[399].stray, r2[399].changes) == (1, 2) and (r2[300].stray, r2[300].changes) == (5, 6)
    assert rs.rank([rec], [rs.Trace("", (0,), ())], [0])[0].why == "2 stray changes"  # no mark: every change is stray


def test_addresses_runs_and_goal_line():
    assert rs.ADDRESSES[rs.address_index([0xC000, 0xDFFF, 0xFF80, 0xFFFE, 0xE100])].tolist() == [
        0xC000, 0xDFFF, 0xFF80, 0xFFFE, 0xC100]
    assert rs.parse_addresses("0xC100,C101 $FF80") == [0xC100, 0xC101, 0xFF80]
    for bad in ("0xA000", "0xFFFF", "zz", ""):
        with pytest.raises(rs.RamSearchError):
            rs.parse_addresses(bad)
    assert rs.runs([0, 0, 0, 1, 2, 2]) == "00x3 01 02x2" and rs.runs([]) == ""
    assert rs.goal_line(0xC100, 2) == "goal_ram = [{ addr = 0xC100, value = 0x02 }]"
    line = rs.goal_line(0xC104, 8, "ge", 0x08)
    assert line == 'goal_ram = [{ addr = 0xC104, mask = 0x08, value = 0x08, op = "ge" }]'
    # the line is a pack's: it parses back into the same condition
    from gbxcule.rl.tasks import parse_pack

    pack = f'[pack]\nname = "p"\nrom = "OVERWORLD"\n[tasks.t]\n{line}\n'
    cond = parse_pack(pack, "p.toml")["t"].goal_ram[0]
    assert (cond.addr, cond.mask, cond.value, cond.op) == (0xC104, 0x08, 0x08, "ge")


@pytest.fixture(scope="module")
def walks():
    """RAM recorded over the two walking traces of the built-in game, from power-on (one env each)."""
    from gbxcule.core.cartridge import load_rom
    from gbxcule.harness.ram import record
    from gbxcule.roms import resolve_rom

    traces = [parse(MAP_TRACE), parse(X_TRACE)]
    recs = record(load_rom(resolve_rom("OVERWORLD")), CODEC, ActionSchedule(24, 8), [t.actions for t in traces])
    return traces, recs


def test_recording_has_a_row_per_step(walks):
    traces, recs = walks
    assert [r.shape for r in recs] == [(len(t.actions) + 1, len(rs.ADDRESSES)) for t in traces]
    x = recs[1][:, rs.address_index([PLAYER_X])[0]]
    assert x[5] + 2 == x[7] and x[8] == x[7] - 1  # walking right twice, then left


def test_search_finds_map_id_and_player_x(walks):
    traces, recs = walks
    keep, left = rs.search(recs[:1], traces[:1])
    found = rs.ADDRESSES[keep].tolist()
    assert found[0] == MAP_ID and len(found) <= 4 and left[0] > left[-1]
    keep, _ = rs.search(recs[1:], traces[1:])
    found = rs.ADDRESSES[keep].tolist()
    assert found[0] == PLAYER_X and len(found) <= 4
    # narrowing over both traces at once keeps neither (MAP_ID does not move in the house)
    assert not rs.search(recs, traces)[0][rs.address_index([MAP_ID, PLAYER_X])].any()


def test_cli_ram_prints_candidates_and_a_goal_line(capsys, tmp_path):
    from gbxcule.cli.main import main

    rc = main(["ram", "OVERWORLD", "--trace", MAP_TRACE, "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["candidates"][0]["addr"] == MAP_ID and d["candidates"][0]["at_marks"] == [[0, 1, 2]]
    assert d["goal_ram"] == "goal_ram = [{ addr = 0xC100, value = 0x02 }]" and len(d["narrowing"]) == 3
    assert len(d["candidates"][0]["values"]) == len(parse(MAP_TRACE).actions) + 1
    assert d["ranked"] and d["candidates"][0]["why"] == "only at marks (2x)"
    # watching a task's goal bytes from its start (the env's start: script, then one NOOP)
    rc = main(["ram", "--task", "leave_house", "--addrs", "task", "--trace", "R4 D6 R N2 |", "--trace", "R4 |"])
    out = capsys.readouterr().out
    assert rc == 0 and "0xC100" in out and "task goal at its marks: holds" in out and "marks: no" in out
    # ... where the goal line is the task's own (MAP_ID == 1), not random play's value at the last mark (0,
    # which holds at the start)
    rc = main(["ram", "--task", "leave_house", "--addrs", "task", "--trace", "?10 |", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["candidates"][0]["at_marks"] == [[0]]
    assert d["goal_ram"] == "goal_ram = [{ addr = 0xC100, value = 0x01 }]"
    assert d["goal_note"] == "the task's goal; it does not hold at the start"
    # out of the house and back in: MAP_ID ranks first, but its value at the last mark (0) holds at the start,
    # so the suggested goal is the first candidate whose value there does not
    rc = main(["ram", "OVERWORLD", "--trace", "N5 | R4 D6 R N2 |! U N3 |!", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["candidates"][0]["addr"] == MAP_ID and d["candidates"][0]["at_marks"] == [[0, 1, 0]]
    cond = d["goal_ram"].split("addr = ")[1]
    first = next(c for c in d["candidates"] if c["at_marks"][0][-1] != c["values"][0])
    assert cond.startswith(f"0x{first['addr']:04X}, value = 0x{first['at_marks'][0][-1]:02X}")
    assert "the first whose value at trace 1's last mark does not hold at the start" in d["goal_note"]
    bad = [(["ram", "OVERWORLD", "--trace", "N5 R4 |"], "nothing to search"),
           (["ram", "OVERWORLD", "--trace", "N5 |=0x1FF"], "not a byte"),
           (["ram", "OVERWORLD", "--trace", "N5 |+", "--addrs", "0xA000"], "not a WRAM"),
           (["ram", "--trace", "N5 |+"], "give a ROM"),
           (["ram", "--task", "pokemon_red:leave_house", "--trace", "N5 |+"], "ROM you supply"),
           (["ram", "JOY_DIVERGE_PERSIST", "--task", "leave_house", "--trace", "N5 |+"], "is for the ROM"),
           (["ram", "OVERWORLD", "--task", "leave_house", "--codec", "dmg_buttons_v0", "--trace", "N |+"],
            "contradicts"),
           (["ram", "OVERWORLD", "--trace", "N5 |+", "--addrs", "task"], "--addrs task needs")]
    for args, needle in bad:
        rc = main(args)
        err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert rc == 2 and len(err) == 1 and needle in err[0], (args, err)


def test_cli_help_carries_the_built_in_example(capsys):
    from gbxcule.cli.main import main

    with pytest.raises(SystemExit):
        main(["ram", "--help"])
    out = capsys.readouterr().out
    assert MAP_TRACE in out and X_TRACE in out
