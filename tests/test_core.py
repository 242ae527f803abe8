"""Action codecs, the action schedule and action generators."""

import numpy as np
import pytest

from gbxcule.core.action_codec import BUTTONS, CODECS, ActionCodec, get_codec
from gbxcule.core.schedule import ActionSchedule
from gbxcule.harness.actions import make_action_gen


def test_codec_orders_and_sizes():
    v0, v1 = get_codec("pokemonred_puffer_v0"), get_codec("pokemonred_puffer_v1")
    assert v0.num_actions == 7 and v1.num_actions == 8
    assert [v0.pyboy_buttons(i) for i in range(7)] == [("a",), ("b",), ("start",), ("up",), ("down",),
                                                      ("left",), ("right",)]
    assert v1.pyboy_buttons(0) == () and v1.pyboy_buttons(1) == ("a",)
    up = get_codec("pokemonred_upstream_v0")
    assert [up.pyboy_buttons(i)[0] for i in range(7)] == ["down", "left", "right", "up", "a", "b", "start"]


def test_codec_names_its_actions_by_their_buttons():
    v1 = get_codec("pokemonred_puffer_v1")
    assert v1.names == ("noop", "a", "b", "start", "up", "down", "left", "right")
    combo = ActionCodec("combo_test", 0, 99, ((), ("a", "right")))
    assert combo.names == ("noop", "a+right")


def test_kernel_ids_unique_and_masks_match_names():
    ids = [c.kernel_id for c in CODECS.values()]
    assert len(ids) == len(set(ids))
    for codec in CODECS.values():
        for a in range(codec.num_actions):
            dpad, buttons = codec.to_joypad_mask(a)
            expect = [0, 0]
            for name in codec.pyboy_buttons(a):
                which, bit = BUTTONS[name]
                expect[which] |= 1 << bit
            assert (dpad, buttons) == tuple(expect)
    assert get_codec("pokemonred_puffer_v0").to_joypad_mask(0) == (0, 1)  # A
    assert get_codec("pokemonred_puffer_v0").to_joypad_mask(6) == (1, 0)  # RIGHT


@pytest.mark.parametrize("bad", [-1, 7, 100])
def test_out_of_range_action_names_codec_and_range(bad):
    codec = get_codec("pokemonred_puffer_v0")
    with pytest.raises(ValueError, match=r"pokemonred_puffer_v0.*0\.\.6"):
        codec.to_joypad_mask(bad)
    with pytest.raises(ValueError, match="pokemonred_puffer_v0"):
        codec.check_array(np.array([0, bad]))


def test_unknown_codec():
    with pytest.raises(ValueError, match="unknown action codec"):
        get_codec("nope")


def test_schedule_segments_and_frames():
    s = ActionSchedule(24, 8)
    assert s.segments() == ((8, True), (16, False))
    assert [s.held_in_frame(f) for f in range(24)] == [True] * 8 + [False] * 16
    assert ActionSchedule(4, 4).segments() == ((4, True),)
    assert ActionSchedule(4, 0).segments() == ((4, False),)
    for bad in [(0, 0), (4, 5), (4, -1)]:
        with pytest.raises(ValueError):
            ActionSchedule(*bad)


def test_action_generators_are_deterministic():
    codec = get_codec("pokemonred_puffer_v1")
    g1 = make_action_gen("seeded_random", codec, 64, seed=3)
    g2 = make_action_gen("seeded_random", codec, 64, seed=3)
    assert np.array_equal(g1(5), g2(5)) and not np.array_equal(g1(5), g1(6))
    assert g1(0).min() >= 0 and g1(0).max() < 8
    striped = make_action_gen("striped", codec, 10)
    assert list(striped(1)) == [(e + 1) % 8 for e in range(10)]
    assert set(make_action_gen("fixed", codec, 5, fixed_action=3)(9)) == {3}
    shared = make_action_gen("shared_random", codec, 16, seed=3)
    per_step = [shared(k) for k in range(40)]
    assert all(len(set(a)) == 1 and 0 <= a[0] < 8 for a in per_step)  # one action for every env
    assert len({int(a[0]) for a in per_step}) > 1  # drawn afresh each step
    assert np.array_equal(shared(7), make_action_gen("shared_random", codec, 16, seed=3)(7))
