"""The trial-and-keep policy behind sort_parts="auto" (backends/autotune.py), without a device."""

import pytest

from gbxcule.backends.autotune import Tuner


def run(tuner, steps, cost):
    """Plan `steps` steps, timing trial steps with cost(step, value); returns the values used."""
    used = []
    for k in range(steps):
        tuner.poll(lambda handle: handle)
        value, timed = tuner.plan()
        used.append(value)
        if timed:
            tuner.timed(value, float(cost(k, value)))
    return used


def test_trials_time_each_candidate_once_and_keep_the_fastest():
    t = Tuner((1, 2, 4, 8), first_gap=8, max_gap=32)
    used = run(t, 6, lambda k, v: {1: 10, 2: 9, 4: 7, 8: 8}[v])
    assert used == [1, 1, 2, 4, 8, 4]  # step 0 untimed, the trial, then the fastest
    assert t.best == 4 and t.history == [{1: 10.0, 2: 9.0, 4: 7.0, 8: 8.0}]


def test_trials_come_back_with_doubling_gaps_and_follow_the_game():
    t = Tuner((1, 2), first_gap=4, max_gap=8)
    used = run(t, 40, lambda k, v: (1 if v == 1 else 2) if k < 12 else (2 if v == 1 else 1))
    # trials start at 1 (read at 3), 3 + 4 = 7 (read at 9), 9 + 8 = 17, then 8 after each read: 27, 37
    # every other trial runs its candidates backwards
    assert used[:3] == [1, 1, 2] and used[3:7] == [1, 1, 1, 1]
    assert used[7:9] == [2, 1] and used[9:17] == [1] * 8
    assert used[17:19] == [1, 2] and used[19] == 2  # the game changed at step 12: 2 is faster now
    assert used[27:29] == [2, 1] and used[37:39] == [1, 2] and used[39] == 2
    assert len(t.history) == 5 and t.gap == 8


def test_a_trial_waits_for_its_times_before_the_next_starts():
    t = Tuner((1, 2), first_gap=1, max_gap=1)
    assert t.plan() == (1, False)
    assert t.plan() == (1, True)
    t.timed(1, 5.0)
    assert t.plan() == (2, True)  # no poll yet: one candidate still to time
    t.timed(2, 3.0)
    assert t.plan() == (1, False) and t.plan() == (1, False)  # not read: no new trial, the old choice
    t.poll(lambda h: h)
    assert t.best == 2 and t.plan() == (2, False) and t.plan() == (2, True)  # the second trial backwards


def test_ties_keep_the_earlier_candidate_and_bad_settings_are_refused():
    t = Tuner((1, 2, 4))
    run(t, 5, lambda k, v: 3)
    assert t.best == 1
    for bad in ({"candidates": ()}, {"first_gap": 0}, {"first_gap": 8, "max_gap": 4}):
        with pytest.raises(ValueError):
            Tuner(**bad)
