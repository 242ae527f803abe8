"""The A B B A hill-climbing policy behind sort_parts="auto" (backends/autotune.py), without a device."""

import pytest

from gbxcule.backends.autotune import Tuner


def run(tuner, steps, cost):
    """Plan `steps` steps, polling before each as the backend does and timing trial steps with
    cost(step, value); returns the values used."""
    used = []
    for k in range(steps):
        tuner.poll(lambda handle: handle)
        value, timed = tuner.plan()
        used.append(value)
        if timed:
            tuner.timed(value, float(cost(k, value)))
    return used


def test_the_climb_goes_on_while_a_neighbour_wins_then_checks_both_sides_later():
    speed = {1: 10, 2: 9, 4: 7, 8: 8}
    t = Tuner((1, 2, 4, 8), first_gap=8, max_gap=16)
    used = run(t, 30, lambda k, v: speed[v])
    assert used[:1] == [1]  # step 0 is not a trial (it may load kernels)
    assert used[1:5] == [1, 2, 2, 1] and used[5:9] == [2, 4, 4, 2]  # 2 wins, then 4 at once
    assert used[9:13] == [4, 8, 8, 4]  # 8 loses: the other side at once
    assert used[13:17] == [4, 2, 2, 4]  # 2 loses too: 4 stays, and the next trial is 8 steps later
    assert used[17:25] == [4] * 8 and used[25:29] == [4, 2, 2, 4] and t.best == 4
    assert t.history[0] == {1: 10.0, 2: 9.0} and len(t.history) == 5


def test_steady_drift_favours_neither_side():
    """Play that slows down step after step (envs spreading) adds the same to both sums of an A B B A trial."""
    t = Tuner((1, 2), first_gap=4, max_gap=4)
    used = run(t, 6, lambda k, v: 100 + 50 * k)  # no difference between 1 and 2, a strong drift
    assert used[1:5] == [1, 2, 2, 1] and t.best == 1
    t = Tuner((1, 2), first_gap=4, max_gap=4)
    run(t, 6, lambda k, v: 100 + 50 * k - (1 if v == 2 else 0))  # 2 a little faster despite the drift
    assert t.best == 2


def test_the_best_value_follows_the_game_and_a_trial_waits_for_its_times():
    t = Tuner((1, 2), first_gap=2, max_gap=2)
    used = run(t, 40, lambda k, v: (1 if v == 1 else 2) if k < 20 else (2 if v == 1 else 1))
    assert used[1:5] == [1, 2, 2, 1] and t.best == 2 and used[-1] == 2  # 1 until the game changes, then 2
    t = Tuner((1, 2), first_gap=1, max_gap=1)
    assert t.plan() == (1, False)
    for v in (1, 2, 2, 1):
        assert t.plan() == (v, True)
        t.timed(v, 5.0 if v == 1 else 3.0)
    assert t.plan() == (1, False) and t.plan() == (1, False)  # not read yet: no new trial, the old value
    t.poll(lambda h: h)
    assert t.best == 2 and t.plan() == (2, True)  # climbing: the next trial at once (2 against 1, the only side)


def test_bad_settings_are_refused():
    for bad in ({"candidates": (1,)}, {"first_gap": 0}, {"first_gap": 8, "max_gap": 4}):
        with pytest.raises(ValueError):
            Tuner(**bad)
