"""`gbxcule goal ...`, `gbxcule bench-env` and `gbxcule play --save-state` on warp_vec_cpu."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")

from gbxcule.cli.main import main  # noqa: E402


def cli(capsys, *args):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(capsys, *args, needle=""):
    rc, out, err = cli(capsys, *args)
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2 and len(lines) == 1 and needle in lines[0], err
    return lines[0]


def test_goal_capture_show_calibrate(tmp_path, capsys):
    from gbxcule.rl import GameEnv, GoalTemplate

    tpl = tmp_path / "house.npz"
    rc, out, _ = cli(capsys, "goal", "capture", "--task", "leave_house", "--out", str(tpl), "--json")
    rep = json.loads(out)
    assert rc == 0 and rep["steps"] == 13 and rep["ram_goal_holds"] is True
    assert (tmp_path / "house.png").is_file() and rep["meta"]["task"] == "leave_house"
    # the captured template is the one the env builds for the task (same frames), and it ends the solution
    env = GameEnv(task="leave_house", num_envs=1, goal=tpl)
    assert np.array_equal(GoalTemplate.load(tpl).frames, env.template.frames)
    rc, out, _ = cli(capsys, "goal", "show", str(tpl), "--png", str(tmp_path / "show.png"))
    assert rc == 0 and "rom_sha1" in out and (tmp_path / "show.png").is_file()
    rc, out, _ = cli(capsys, "goal", "calibrate", str(tpl), "--task", "leave_house", "--envs", "4", "--steps", "4")
    assert rc == 0 and "suggested tau" in out and (tmp_path / "house_calibrate.png").is_file()
    rc, out, _ = cli(capsys, "goal", "calibrate", str(tpl), "--task", "leave_house", "--envs", "4", "--steps", "3",
                     "--plot", str(tmp_path / "c.png"), "--json")
    r = json.loads(out)
    assert r["separated"] and r["false_fires_at_tau"] == 0 and r["goal_max"] < r["suggested_tau"] < r["off_goal_min"]
    assert sum(r["solution_hist"]) == 13 and sum(r["random_hist"]) + r["random_at_goal"] == 12
    # random play all along the solution's route comes nearer the goal than play from the start
    rc, out, _ = cli(capsys, "goal", "calibrate", str(tpl), "--task", "leave_house", "--envs", "8", "--steps", "3",
                     "--start-states", "solution:8:0", "--plot", str(tmp_path / "c2.png"), "--json")
    near = json.loads(out)
    assert rc == 0 and near["random_p"]["0"] < r["random_p"]["0"]
    rc, _, err = cli(capsys, "goal", "calibrate", str(tpl), "--task", "leave_house", "--start-states", "solution:x")
    assert rc != 0 and len(err.strip().splitlines()) == 1
    # a template for envs of the mean view: captured, calibrated and used in that view
    mean = tmp_path / "mean.npz"
    rc, out, _ = cli(capsys, "goal", "capture", "--task", "leave_house", "--view", "mean", "--out", str(mean), "--json")
    assert rc == 0 and json.loads(out)["meta"]["view"] == "mean"
    env = GameEnv(task="leave_house", num_envs=1, obs_view="mean", goal=mean)
    assert np.array_equal(GoalTemplate.load(mean).frames, env.template.frames)
    rc, out, _ = cli(capsys, "goal", "calibrate", str(mean), "--task", "leave_house", "--envs", "4", "--steps", "3",
                     "--plot", str(tmp_path / "m.png"), "--json")
    assert rc == 0 and json.loads(out)["separated"] and sum(json.loads(out)["solution_hist"]) == 13
    # a trace file (indices) and a ROM with no task
    trace = tmp_path / "trace.txt"
    trace.write_text("0 0 0 0 0 7 7 7 7 5 5 5 5 5 5 7 0 0\n")
    rc, out, _ = cli(capsys, "goal", "capture", "--rom", "OVERWORLD", "--trace", str(trace), "--out",
                     str(tmp_path / "t.npz"), "--name", "door", "--mask-box", "0,0,36,80", "--json")
    rep = json.loads(out)
    assert rc == 0 and rep["meta"]["task"] == "door" and rep["meta"]["mask_pixels"] == 36 * 80


def test_goal_capture_from_a_task_whose_start_is_a_generator(tmp_path, capsys):
    """docs/new_game.md's pack shape (a script start with a random_actions generator): capture plays the actions
    from the generator's base, the script's end (deterministic), as from the same start without a generator."""
    from gbxcule.rl import GoalTemplate

    pack = tmp_path / "pack.toml"
    pack.write_text('[pack]\nname = "p"\nrom = "OVERWORLD"\n'
                    '[tasks.gen]\nstart = { script = "N5", generator = "random_actions", count = 8, max_len = 8 }\n'
                    'goal_ram = [{ addr = 0xC100, value = 1 }]\n'
                    '[tasks.plain]\nstart = { script = "N5" }\ngoal_ram = [{ addr = 0xC100, value = 1 }]\n')
    got = {}
    for name in ("gen", "plain"):
        rc, out, err = cli(capsys, "goal", "capture", "--task", f"{pack}:{name}", "--actions", "R4 D6 R N2", "--out",
                           str(tmp_path / f"{name}.npz"), "--json")
        assert rc == 0, err
        got[name] = json.loads(out)
    assert got["gen"]["ram_goal_holds"] is True and got["gen"]["mid_transition"] is False
    assert got["gen"]["start"] == "p:gen's start (its random_actions generator's extra steps left out)"
    assert got["plain"]["start"] == "p:plain's start"
    frames = {name: GoalTemplate.load(tmp_path / f"{name}.npz").frames for name in got}
    assert np.array_equal(frames["gen"], frames["plain"])
    # a start of several state files names none to capture from: the error says how to give one
    states = tmp_path / "states"
    rc, _, _ = cli(capsys, "play", "OVERWORLD", "--backend", "warp_vec_cpu", "--envs", "2", "--steps", "5",
                   "--save-state", str(states / "a.gbxs"), "--save-envs", "all")
    (states / "b.gbxs").write_bytes((states / "a.gbxs").read_bytes())
    pack.write_text(pack.read_text() + '[tasks.two]\nstart = { states = ["states"] }\n'
                                       'goal_ram = [{ addr = 0xC100, value = 1 }]\n')
    one_line_error(capsys, "goal", "capture", "--task", f"{pack}:two", "--actions", "R4", "--out",
                   str(tmp_path / "two.npz"), needle="give the one to capture from with --start-state FILE")


def test_goal_bad_input_is_one_line(tmp_path, capsys):
    tpl = tmp_path / "x.npz"
    tpl.write_bytes(b"PK\x03\x04 truncated")
    before = tpl.read_bytes()
    one_line_error(capsys, "goal", "show", str(tpl), needle="not a readable goal template")
    one_line_error(capsys, "goal", "capture", "--task", "leave_house", "--out", str(tpl), "--png", str(tpl),
                   needle="refusing")
    bad = tmp_path / "bad.txt"
    bad.write_text("0 1 99")
    one_line_error(capsys, "goal", "capture", "--task", "leave_house", "--trace", str(bad), "--out", str(tpl),
                   needle="out of range")
    one_line_error(capsys, "goal", "capture", "--task", "nope", "--out", str(tpl), needle="unknown task")
    one_line_error(capsys, "goal", "capture", "--task", "leave_house", "--stack-k", "0", "--out", str(tpl))
    one_line_error(capsys, "goal", "calibrate", str(tpl), "--task", "leave_house", needle="goal template")
    assert tpl.read_bytes() == before  # nothing overwritten


def test_bench_env_artifact(tmp_path, capsys):
    out = tmp_path / "b.json"
    rc, text, _ = cli(capsys, "bench-env", "--envs", "2", "--stack-k", "1,2", "--steps", "2", "--warmup", "1",
                      "--out", str(out))
    assert rc == 0 and text.rstrip().splitlines()[-1].startswith("env_reset")  # the table comes last
    data = json.loads(out.read_text())
    kinds = [(r["kind"], r["stack_k"]) for r in data["results"]]
    assert kinds == [("backend", None), ("env", 1), ("env_reset", 1), ("env", 2), ("env_reset", 2)]
    assert all(r["env_steps_per_s"] > 0 for r in data["results"])
    assert data["results"][2]["resets_per_step"] == 2  # every env reset on every step
    one_line_error(capsys, "bench-env", "--envs", "0", needle="--envs")
    one_line_error(capsys, "bench-env", "--task", "none", needle="--rom")


def test_play_save_state_feeds_game_env(tmp_path, capsys):
    from gbxcule.rl import GameEnv

    state = tmp_path / "s.gbxs"
    rc, _, _ = cli(capsys, "play", "OVERWORLD", "--backend", "warp_vec_cpu", "--envs", "2", "--steps", "3",
                   "--save-state", str(state), "--save-envs", "all")
    assert rc == 0 and state.is_file()
    assert GameEnv(task="leave_house", num_envs=1, start_states=state).num_slots == 2
    before = state.read_bytes()
    one_line_error(capsys, "play", "OVERWORLD", "--backend", "warp_vec_cpu", "--steps", "1", "--state", str(state),
                   "--save-state", str(state), needle="refusing")
    one_line_error(capsys, "play", "OVERWORLD", "--backend", "warp_vec_cpu", "--steps", "1", "--save-state",
                   str(tmp_path / "o.gbxs"), "--save-envs", "5", needle="--save-envs")
    one_line_error(capsys, "play", "OVERWORLD", "--steps", "1", "--save-state", str(tmp_path / "o.gbxs"),
                   needle="warp backend")
    assert state.read_bytes() == before
