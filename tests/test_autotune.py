"""The palindromic trials behind sort_parts="auto" (backends/autotune.py), without a device."""

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


def test_a_trial_times_every_candidate_twice_and_keeps_the_fastest():
    speed = {1: 10, 2: 11, 4: 7}  # not monotonic: 2 is slower than 1, 4 faster than both (as Geometrix)
    t = Tuner((1, 2, 4), first_gap=8, max_gap=16, first_trial=1)
    used = run(t, 40, lambda k, v: speed[v])
    assert used[:1] == [1]  # step 0 is not a trial (it may load kernels)
    assert used[1:7] == [1, 2, 4, 4, 2, 1] and t.history[0] == {1: 10.0, 2: 11.0, 4: 7.0}
    # read at step 7; the next trials 8 steps after that, then 16 (the most here)
    assert used[7:15] == [4] * 8 and used[15:21] == [1, 2, 4, 4, 2, 1]
    assert used[21:37] == [4] * 16 and used[37:40] == [1, 2, 4] and t.best == 4


def test_the_first_trial_waits_for_the_envs_to_spread():
    """By default nothing is timed before step 12: the first steps from a state run far faster than later ones."""
    t = Tuner((1, 2, 4))
    used = run(t, 30, lambda k, v: 1 if v == 4 else 2)
    assert used[:12] == [1] * 12 and used[12:18] == [1, 2, 4, 4, 2, 1] and used[19:] == [4] * 11


def test_steady_drift_favours_no_candidate():
    """Play that slows down step after step (envs spreading) adds the same to every candidate's two steps."""
    t = Tuner((1, 2, 4), first_trial=1)
    run(t, 8, lambda k, v: 100 + 50 * k)  # equal candidates, a strong drift
    assert t.best == 1 and len(set(t.history[0].values())) == 1
    t = Tuner((1, 2, 4), first_trial=1)
    run(t, 8, lambda k, v: 100 + 50 * k - (1 if v == 4 else 0))  # 4 a little faster despite the drift
    assert t.best == 4


def test_the_best_value_follows_the_game_and_a_trial_waits_for_its_times():
    t = Tuner((1, 2), first_gap=2, max_gap=2, first_trial=1)
    used = run(t, 40, lambda k, v: (1 if v == 1 else 2) if k < 20 else (2 if v == 1 else 1))
    assert used[5:7] == [1, 1] and t.best == 2 and used[-1] == 2  # 1 until the game changes, then 2
    t = Tuner((1, 2), first_gap=1, max_gap=1, first_trial=1)
    assert t.plan() == (1, False)
    for v in (1, 2, 2, 1):
        assert t.plan() == (v, True)
        t.timed(v, 5.0 if v == 1 else 3.0)
    assert t.plan() == (1, False) and t.plan() == (1, False)  # not read yet: no new trial, the old value
    t.poll(lambda h: h)
    assert t.best == 2 and t.plan() == (2, False) and t.plan() == (1, True)  # the next trial after 1 step


def test_bad_settings_are_refused():
    for bad in ({"candidates": (1,)}, {"first_gap": 0}, {"first_gap": 8, "max_gap": 4}, {"first_trial": -1}):
        with pytest.raises(ValueError):
            Tuner(**bad)
