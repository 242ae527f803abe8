"""`gbxcule goal calibrate` and friends: the separation verdict on separable and inseparable templates, a tau
never below the goal's own noise, the nearest off-goal frames as pictures, and captures that end
mid-transition."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")

from gbxcule.cli.main import main  # noqa: E402
from gbxcule.core.action_codec import get_codec  # noqa: E402
from gbxcule.rl.tasks import load_task, parse_script  # noqa: E402
from gbxcule.rl.templates import calibrate, capture, replay, suggest_tau  # noqa: E402

TASK = load_task("leave_house")
CODEC = get_codec(TASK.codec)


def test_suggest_tau_verdicts_and_never_below_the_noise():
    r = suggest_tau([0.0, 0.01], [0.2, 0.3])
    assert r["separated"] and 0.01 < r["suggested_tau"] < 0.2 and r["false_fires_at_tau"] == 0
    seq = np.array([[0.3, 0.01], [0.01, 0.01], [0.01, 0.3], [0.3, 0.01]])  # env 1 sits near the goal 2 steps
    r = suggest_tau([0.05], [0.01, 0.3], seq, np.zeros_like(seq, dtype=bool))
    assert not r["separated"] and r["suggested_tau"] >= 0.05 and r["suggested_k_consecutive"] == 3
    rng = np.random.default_rng(0)
    for _ in range(200):
        goal, off = rng.random(rng.integers(1, 5)) * 0.3, rng.random(rng.integers(1, 20))
        assert suggest_tau(goal, off)["suggested_tau"] > goal.max()


@pytest.fixture(scope="module")
def templates():
    """The task's own goal frame, one captured mid-transition (the door's fade) and the house at the start."""
    return {"goal": capture(TASK)[0], "mid": capture(TASK, parse_script("R4 D6 R", CODEC))[0],
            "house": capture(TASK, parse_script("N", CODEC))[0]}


def test_separable_and_inseparable_templates(templates):
    ok = calibrate(TASK, templates["goal"], num_envs=4, steps=6)
    assert ok["verdict"] == "separated" and ok["within_noise"] == 0 and not ok["mid_transition"]
    assert ok["noise"] <= ok["suggested_tau"] < ok["off_goal_min"] and len(ok["nearest"]) == 4
    assert [d for d, _ in ok["nearest"]] == sorted(d for d, _ in ok["nearest"]) and ok["nearest"][0][0] >= 0.3
    assert all(f.shape == (72, 80) for _, f in ok["nearest"])
    # the house at the start looks like the start, not like the town: random play in the house lies at 0
    bad = calibrate(TASK, templates["house"], num_envs=4, steps=6)
    assert bad["verdict"] == "NOT separated" and bad["within_noise"] > 0 and bad["off_goal_min"] == 0.0
    assert bad["suggested_tau"] > bad["noise"] > 0.3  # the goal's own frames are far from this template
    assert bad["nearest"][0][0] == 0.0
    # without a RAM goal the verdict cannot be checked and says so
    import dataclasses

    pixel = dataclasses.replace(TASK, goal_ram=())
    assert calibrate(pixel, templates["goal"], num_envs=2, steps=4)["verdict"] == "unchecked"


def test_a_capture_that_ends_mid_transition_is_detected(templates):
    mid = replay(TASK, templates["mid"], parse_script("R4 D6 R", CODEC))
    assert mid["mid_transition"] and mid["settled_distance"] > 0.2
    done = replay(TASK, templates["goal"])
    assert not done["mid_transition"] and done["held"] == [0.0] * len(done["held"])


def test_cli_says_so_and_draws_pictures(templates, tmp_path, capsys):
    mid = tmp_path / "mid.npz"
    assert main(["goal", "capture", "--task", "leave_house", "--actions", "R4 D6 R", "--out", str(mid)]) == 0
    out = capsys.readouterr().out
    assert "still changing" in out and "add N4" in out
    assert main(["goal", "calibrate", str(mid), "--task", "leave_house", "--envs", "2", "--steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "NOT separated" in out and "still changing" in out and "mid_nearest.png" in out
    from PIL import Image

    with Image.open(tmp_path / "mid_nearest.png") as img:
        assert img.width >= 2 * 4 * 80 and img.height >= 4 * 72  # the goal and a neighbour, 4x
    house = tmp_path / "house.npz"
    templates["house"].save(house)
    assert main(["goal", "calibrate", str(house), "--task", "leave_house", "--envs", "2", "--steps", "3",
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["verdict"] == "NOT separated" and not r["separated"] and r["nearest"][0] < 0.01
    assert main(["goal", "show", str(house), "--png", str(tmp_path / "s.png"), "--task", "leave_house", "--envs",
                 "2", "--steps", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    with Image.open(tmp_path / "s.png") as img:  # goal, the nearest frames, the mask: side by side, 4x
        assert img.width >= (2 + len(d["nearest_distances"])) * 4 * 80
    assert main(["goal", "show", str(house), "--task", "leave_house"]) == 2
    assert "give --png" in capsys.readouterr().err
