"""gbxcule.rl.GameEnv on warp_vec_cpu: the contract of docs/rl_env.md (shapes, autoreset, goals, packs)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gbxcule.core.errors import GbxculeError  # noqa: E402
from gbxcule.core.schema import FIELD_INDEX, NUM_FIELDS  # noqa: E402
from gbxcule.rl import EnvConfigError, GameEnv, GoalTemplate, RamCondition, TaskError, TemplateError  # noqa: E402
from gbxcule.rl.goals import (  # noqa: E402
    SCREEN_HASH_P,
    NoveltyTable,
    RamGoal,
    ScreenHash,
    TemplateScorer,
    frame_key,
    pack_shades,
)
from gbxcule.rl.tasks import load_task  # noqa: E402
from gbxcule.roms.overworld.game import ADDR  # noqa: E402
from gbxcule.roms.overworld.tasks import TASK_BY_NAME  # noqa: E402

TASKS = ("leave_house", "reach_lab", "talk_to_hiker")
# The step at which each task's scripted solution first reaches its goal (RAM goal and pixel template).
GOAL_STEP = {"leave_house": 12, "reach_lab": 22, "talk_to_hiker": 55}


def _peek(env, e):
    snap = env.backend.snapshot(e)
    return snap.peek


def test_shapes_dtypes_and_packed_obs():
    a = GameEnv(task="leave_house", num_envs=3, stack_k=2)
    b = GameEnv(task="leave_house", num_envs=3, obs="packed")
    obs, info = a.reset()
    pobs, _ = b.reset()
    assert obs.shape == (3, 2, 72, 80) and obs.dtype == torch.uint8 and obs.device.type == "cpu"
    assert pobs.shape == (3, 1, 72, 20) and pobs.dtype == torch.uint8
    assert set(info) >= {"episodes_done", "success_rate", "dist_p50"}
    for acts in ([1, 6, 7], [0, 5, 4]):
        obs, r, te, tr, info = a.step(torch.tensor(acts, dtype=torch.int64))
        pobs, *_ = b.step(torch.tensor(acts, dtype=torch.int32))
        assert r.dtype == torch.float32 and r.shape == (3,)
        assert te.dtype == torch.bool and tr.dtype == torch.bool and te.shape == tr.shape == (3,)
        assert int(obs.max()) <= 3
        assert np.array_equal(pack_shades(obs[:, -1].numpy()), pobs[:, -1].numpy())
        assert torch.equal(a.distance, b.distance)  # the LUT on packed bytes gives the same bits
    frames = a.frames()
    assert frames.shape == (3, 144, 160)
    assert np.array_equal(frames[:, ::2, ::2], obs[:, -1].numpy())  # obs is the stride view of the screen
    assert a.describe()["start_slots"] == 1


@pytest.mark.parametrize("name", TASKS)
def test_solution_terminates_and_ram_goal_matches_python_predicate(name):
    sol = TASK_BY_NAME[name].solution
    py_goal = TASK_BY_NAME[name].goal
    for terminate_on in ("template", "ram"):
        env = GameEnv(task=name, num_envs=2, info_mode="full", reward={"terminate_on": terminate_on})
        assert env.terminate_on == terminate_on
        env.reset()
        rng = np.random.default_rng(1)
        ended = None
        for t, a in enumerate(sol, 1):
            _, r, te, tr, info = env.step(np.array([a, rng.integers(0, 8)]))
            if terminate_on == "ram":  # the device goal equals the Python predicate on every state seen
                for e in range(2):
                    if not bool(info["done"][e]):
                        assert bool(info["success"][e]) == py_goal(_peek(env, e)), (t, e)
            if bool(te[0]):
                ended = t
                assert bool(info["success"][0]) and float(r[0]) > 0.5
                break
            assert not bool(tr[0])
        assert ended == GOAL_STEP[name], (terminate_on, ended)
        assert ended <= len(sol)
        s = env.episode_stats()
        assert s["episodes"] >= 1 and s["success_rate"] > 0


@pytest.mark.parametrize("name", TASKS)
def test_template_never_fires_off_goal_in_random_play(name):
    """256 episodes (64 envs x 4) that follow the solution for a random number of steps, then play at random:
    wherever the template ends an episode, the RAM goal holds."""
    sol = TASK_BY_NAME[name].solution
    n, length = 64, len(sol) + 4
    env = GameEnv(task=name, num_envs=n, info_mode="full", max_steps=length)
    env.reset(seed=3)
    rng = np.random.default_rng(7)
    prefix = rng.integers(0, len(sol), size=n)
    steps = np.zeros(n, dtype=np.int64)
    episodes = fires = 0
    while episodes < 4 * n:
        rand = rng.integers(0, 8, size=n)
        acts = np.where(steps < prefix, np.asarray(sol)[np.minimum(steps, len(sol) - 1)], rand)
        _, _, te, tr, info = env.step(acts)
        te, done = te.numpy(), info["done"].numpy()
        assert not (te & ~info["success"].numpy()).any(), "template fired where the RAM goal does not hold"
        fires += int(te.sum())
        episodes += int(done.sum())
        steps = np.where(done, 0, steps + 1)
        prefix = np.where(done, rng.integers(0, len(sol), size=n), prefix)
    s = env.episode_stats()
    assert s["episodes"] == episodes and s["template_fired"] == fires
    if fires:
        assert s["template_precision"] == 1.0


def test_same_step_autoreset_restores_start_slot_bit_equal():
    env = GameEnv(task="leave_house", num_envs=3, start_states=("random_noops", 4, 3), max_steps=3,
                  keep_final_obs=True, info_mode="full", stack_k=2)
    assert env.num_slots == 4
    slots = [env.backend.slot_state(k) for k in range(4)]
    assert len({f.tobytes() + r.tobytes() for f, r in slots}) > 1  # the generator made distinct starts
    env.reset(seed=5)
    for _ in range(3):
        before = env.obs.clone()
        obs, _, te, tr, info = env.step(np.array([7, 6, 5]))
    assert tr.all() and not te.any() and info["done"].all()
    assert torch.equal(info["final_obs"][:, 0], before[:, 1])  # final obs: the stack before the reset
    states = env.backend.env_states()
    ids = env._slots.tolist()
    for e in range(3):
        f, r = slots[ids[e]]
        assert np.array_equal(states[e].fields, f) and np.array_equal(states[e].ram, r)
        assert torch.equal(obs[e, 0], env.slot_obs[ids[e]]) and torch.equal(obs[e, 1], env.slot_obs[ids[e]])
    assert np.array_equal(env.frames()[:, ::2, ::2], obs[:, -1].numpy())
    assert env.steps.tolist() == [0, 0, 0] and env.episodes.tolist() == [1, 1, 1]
    # the slot rule is seeded: the same seed draws the same slots again
    again = GameEnv(task="leave_house", num_envs=3, start_states=("random_noops", 4, 3), max_steps=3)
    again.reset(seed=5)
    for _ in range(3):
        again.step(np.array([7, 6, 5]))
    assert again._slots.tolist() == ids
    again.reset(seed=2**40 + 5)  # any Python int seeds the rule (no int64 overflow)
    again.reset(seed=-1)


def test_stack_k_1_and_4_share_the_latest_frame():
    one = GameEnv(task="leave_house", num_envs=2, max_steps=4)
    four = GameEnv(task="leave_house", num_envs=2, stack_k=4, max_steps=4)
    o1, _ = one.reset()
    o4, _ = four.reset()
    assert torch.equal(o1[:, -1], o4[:, -1]) and all(torch.equal(o4[:, i], o4[:, -1]) for i in range(4))
    history = [o1[:, 0].clone()]
    rng = np.random.default_rng(0)
    for t in range(7):  # crosses an autoreset at step 4
        acts = rng.integers(0, 8, size=2)
        o1, r1, *_ = one.step(acts)
        o4, r4, *_ = four.step(torch.from_numpy(acts))
        assert torch.equal(o1[:, -1], o4[:, -1]) and torch.equal(r1, r4)
        history.append(o1[:, 0].clone())
        if t == 5:  # mid-episode (second episode, step 2): the stack holds the last frames, oldest first
            assert torch.equal(o4[:, 3], history[-1]) and torch.equal(o4[:, 2], history[-2])


def test_step_never_synchronises(monkeypatch):
    env = GameEnv(task="leave_house", num_envs=2, stack_k=2, max_steps=2, info_mode="full", keep_final_obs=True,
                  reward={"novelty_ram": 0.5, "novelty_pixels": 0.25})
    env.reset()
    acts32 = torch.tensor([1, 2], dtype=torch.int32)
    acts64 = torch.tensor([3, 9], dtype=torch.int64)  # 9 is out of range: flagged on the device, not raised
    env.step(acts32)

    def boom(*a, **k):
        raise AssertionError("step() synchronised with the host")

    for name in ("item", "cpu", "numpy", "tolist", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, boom)
    for acts in (acts32, acts64, acts32):
        env.step(acts)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="out-of-range"):
        env.episode_stats()
    env.episode_stats()  # reported once


def _trajectory(env, actions):
    out = []
    for a in actions:
        obs, r, te, tr, _ = env.step(torch.from_numpy(a))
        out.append((obs.clone(), r.clone(), te.clone(), tr.clone()))
    return out


def test_state_dict_round_trip_is_bit_exact():
    kw = dict(task="leave_house", num_envs=3, stack_k=3, max_steps=5, start_states=("random_actions", 3, 2),
              reward={"novelty_ram": 0.5, "novelty_pixels": 0.25})
    env = GameEnv(**kw)
    env.reset(seed=2)
    rng = np.random.default_rng(4)
    for _ in range(3):
        env.step(rng.integers(0, 8, size=3))
    sd = env.state_dict()
    # checkpoints hold the fields field-major ([field, env]) whatever the device layout, as they always have
    rows = sd["emu"]["fields"].view(NUM_FIELDS, 3)
    for name in ("pc", "sp", "frames"):
        assert rows[FIELD_INDEX[name]].tolist() == env.backend.field_values(name).tolist()
    acts = [rng.integers(0, 8, size=3) for _ in range(8)]
    ref = _trajectory(env, acts)
    stats = env.episode_stats()
    env.load_state_dict(sd)
    assert _equal(_trajectory(env, acts), ref)
    other = GameEnv(**kw)  # a fresh env resumes the same way
    other.load_state_dict(sd)
    assert _equal(_trajectory(other, acts), ref)
    got = other.episode_stats()
    assert [got.pop(k) for k in ("slot_episodes", "slot_successes")] == [stats.pop(k) for k in
                                                                         ("slot_episodes", "slot_successes")]
    assert got == pytest.approx(stats, nan_ok=True)
    for other_kw in (dict(stack_k=2), dict(start_states=("random_noops", 3, 2))):
        with pytest.raises(EnvConfigError):
            GameEnv(**(kw | other_kw)).load_state_dict(sd)
    bad = {**sd, "emu": {**sd["emu"], "fields": sd["emu"]["fields"][:-1]}}  # a cut field array: one typed error
    with pytest.raises(EnvConfigError, match="field words"):
        GameEnv(**kw).load_state_dict(bad)


def _equal(a, b) -> bool:
    return all(all(torch.equal(x, y) for x, y in zip(s, t, strict=True)) for s, t in zip(a, b, strict=True))


def test_novelty_ram_counts_first_visits_per_episode():
    env = GameEnv(task="leave_house", num_envs=2, max_steps=6, info_mode="full",
                  reward={"novelty_ram": 1.0, "step_cost": 0.0, "alpha": 0.0, "goal_bonus": 0.0})
    env.reset()
    seen = [set(), set()]
    rng = np.random.default_rng(0)
    total = 0
    for _ in range(12):  # two episodes: the table is cleared at the reset
        _, r, _, _, info = env.step(rng.choice([0, 5, 6, 7, 4], size=2))
        done = info["done"].tolist()
        for e in range(2):
            key = tuple(env.backend.snapshot(e).peek(ADDR[k]) for k in ("MAP_ID", "PLAYER_X", "PLAYER_Y"))
            if done[e]:  # the env was reset: its RAM is the start's; the reward was for the state before
                seen[e] = set()
                continue
            new = key not in seen[e]
            seen[e].add(key)
            assert float(r[e]) == float(new)
            total += new
    assert total >= 3


def test_novelty_table_and_frame_key():
    t = NoveltyTable(3, 64, "cpu")
    keys = torch.tensor([1, 2, 1])
    assert t.visit(keys).tolist() == [True, True, True]
    assert t.visit(keys).tolist() == [False, False, False]
    t.clear(torch.tensor([True, False, False]))
    assert t.visit(torch.tensor([1, 2, 5])).tolist() == [True, False, True]
    f = torch.randint(0, 4, (2, 72, 80), dtype=torch.uint8)
    g = f.clone()
    g[1, :8, :8] = 3  # one coarse cell far from its mean
    k1, k2 = frame_key(f), frame_key(g)
    assert k1[0] == k2[0] and k1[1] != k2[1]
    assert torch.equal(frame_key(torch.from_numpy(pack_shades(f.numpy()))), k1)


@pytest.mark.parametrize("width", [80, 20])
def test_screen_hash_is_the_weighted_word_sum_and_tells_every_one_byte_change(width):
    """ScreenHash: each env's screen (all but the last row of a strided frame, as the env hashes it) gives
    sum_j w_j r_j mod p over its int32 words, as Python's integers say; equal screens hash equal; changing any
    one byte, anywhere, changes the hash; calls reuse the output buffer."""
    n, words = 3, 71 * width // 4
    frames = torch.randint(0, 256, (n, 2, 72, width), dtype=torch.uint8)
    frames[1, 1] = frames[0, 1]
    screens = frames[:, 1, :-1]  # strided across envs, as the env's window of its frame ring
    h = ScreenHash(n, words, "cpu")
    out = torch.zeros(n, dtype=torch.int64)
    assert h(screens, out) is out
    r = h.weights.tolist()
    for i in range(n):
        w = np.frombuffer(screens[i].contiguous().numpy().tobytes(), dtype="<i4").tolist()
        assert out[i].item() == sum(a * b for a, b in zip(w, r, strict=True)) % SCREEN_HASH_P
    assert out[0] == out[1] and out[0] != out[2]
    base = out[0].item()
    one = ScreenHash(1, words, "cpu")
    got = torch.zeros(1, dtype=torch.int64)
    for pos in range(71 * width):  # every byte, changed by a different amount
        s = screens[:1].clone()
        s.view(1, -1)[0, pos] ^= 1 + pos % 255
        assert one(s, got).item() != base, pos


def test_ram_conditions_all_ops_match_host():
    env = GameEnv(task="leave_house", num_envs=1)
    layout = env.backend.layout
    ram = torch.zeros(layout.total, 4, dtype=torch.uint8)
    row = layout.bases["wram"] + 0x104
    ram[row] = torch.tensor([0, 7, 8, 0xFF], dtype=torch.uint8)
    for op in ("eq", "ne", "ge", "gt", "le", "lt"):
        for mask in (0xFF, 0x0F, 0x08):
            c = RamCondition(0xC104, 8 & mask if op != "gt" else 7 & mask, mask, op)
            got = RamGoal([c], layout, "cpu").evaluate(ram).tolist()
            want = [c.holds(lambda a, e=e: int(ram[row, e])) for e in range(4)]
            assert got == want, (op, mask)
    echo = RamGoal([RamCondition(0xE104, 8)], layout, "cpu").evaluate(ram).tolist()
    assert echo == [False, False, True, False]
    with pytest.raises(GbxculeError):
        RamCondition(0x8000, 1)
    with pytest.raises(GbxculeError):
        RamCondition(0xC000, 1, op="approx")


def test_template_file_format_and_fit(tmp_path):
    env = GameEnv(task="leave_house", num_envs=1)
    tpl = env.template
    p = tpl.save(tmp_path / "goal.npz")
    back = GoalTemplate.load(p)
    assert np.array_equal(back.frames, tpl.frames) and back.meta == tpl.meta
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 4, size=(5, 72, 80), dtype=np.uint8)
    px = TemplateScorer(tpl, "pixels", "cpu").distance(torch.from_numpy(obs))
    pk = TemplateScorer(tpl, "packed", "cpu").distance(torch.from_numpy(pack_shades(obs)))
    want = np.abs(obs.astype(int) - tpl.frames[0]).reshape(5, -1).mean(1) / 3
    assert torch.equal(px, pk) and np.allclose(px.numpy(), want, atol=1e-6)
    data = p.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    (tmp_path / "junk.npz").write_bytes(b"not a template")
    for bad in ("cut.npz", "junk.npz", "missing.npz"):
        with pytest.raises(TemplateError):
            GoalTemplate.load(tmp_path / bad)
    with pytest.raises(TemplateError, match="stack_k"):
        GameEnv(task="leave_house", num_envs=1, stack_k=2, goal=p)
    for field, value in (("rom_sha1", "0" * 40), ("codec", "other"), ("frames_per_step", 12), ("obs", "packed")):
        other = GoalTemplate(tpl.frames, tpl.mask, dataclasses.replace(tpl.meta, **{field: value}))
        with pytest.raises(TemplateError, match=field):
            GameEnv(task="leave_house", num_envs=1, goal=other)


def test_the_mean_view_from_a_config_samples_2x2_blocks_and_keeps_its_templates_apart(tmp_path):
    """env.obs_view: "stride" shows pixel (2r, 2c) of the screen, "mean" each 2x2 block's mean rounded half up, each
    checked against the full screen after a few steps; a task's template is captured in the env's view, a template of
    the other view is refused by name, and a template file from before the view loads as "stride"."""
    import io
    import json

    from gbxcule.rl.config import ConfigError, make_env
    from gbxcule.rl.training import make_config

    seen = {}
    for view in ("stride", "mean"):
        cfg = make_config(None, {"env": {"task": "leave_house", "num_envs": 2, "obs_view": view},
                                 "run": {"device": "cpu"}})
        env = make_env(cfg.env, "cpu", 0)
        env.reset(seed=0)
        for a in (5, 5, 7, 0):
            env.step(torch.full((2,), a, dtype=torch.int32))
        full = env.frames().astype(int)
        want = full[:, ::2, ::2] if view == "stride" else (full.reshape(2, 72, 2, 80, 2).sum((2, 4)) + 2) // 4
        assert np.array_equal(env.obs[:, -1].numpy(), want)
        assert env.template.meta.view == view
        seen[view] = env.template
        env.close()
    assert not np.array_equal(seen["stride"].frames, seen["mean"].frames)
    with pytest.raises(TemplateError, match="view 'stride'"):
        GameEnv(task="leave_house", num_envs=1, obs_view="mean", goal=seen["stride"])
    with pytest.raises(ConfigError, match="obs_view"):
        make_config(None, {"env": {"obs_view": "max"}})
    old = io.BytesIO()
    data = np.load(io.BytesIO(seen["stride"].to_bytes()))
    meta = json.loads(data["meta"].tobytes().decode())
    del meta["view"]
    np.savez(old, frames=data["frames"], mask=data["mask"], meta=np.frombuffer(json.dumps(meta).encode(), np.uint8))
    assert GoalTemplate.from_bytes(old.getvalue()).meta == seen["stride"].meta
    meta["view"] = "max"
    bad = io.BytesIO()
    np.savez(bad, frames=data["frames"], mask=data["mask"], meta=np.frombuffer(json.dumps(meta).encode(), np.uint8))
    with pytest.raises(TemplateError, match="view"):
        GoalTemplate.from_bytes(bad.getvalue())


def test_bad_input_is_a_typed_error(tmp_path):
    env = GameEnv(task="leave_house", num_envs=2)
    env.reset()
    with pytest.raises(TypeError):
        env.step(torch.zeros(2, dtype=torch.float32))
    with pytest.raises(ValueError):
        env.step(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError):
        env.step(np.array([0, 8]))
    with pytest.raises(ValueError):
        env.step(np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="meta"):
        env.step(torch.zeros(2, dtype=torch.int64, device="meta"))
    for kw in (dict(stack_k=0), dict(num_envs=0), dict(obs="rgb"), dict(info_mode="all"), dict(max_steps=0),
               dict(start_states=("random_noops",)), dict(start_states=42), dict(start_states=[])):
        with pytest.raises(EnvConfigError):
            GameEnv(**{"task": "leave_house", "num_envs": 1, **kw})
    with pytest.raises(TaskError, match="unknown task"):
        GameEnv(task="no_such_task")
    with pytest.raises(TaskError, match="SHA-1"):
        GameEnv("OVERWORLD", task="pokemon_red:leave_house")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EnvConfigError, match="no state"):
        GameEnv(task="leave_house", start_states=tmp_path / "empty")
    (tmp_path / "bad.state").write_bytes(b"\x00" * 100)
    with pytest.raises(EnvConfigError):
        GameEnv(task="leave_house", start_states=tmp_path / "bad.state")
    other = _other_game_state(tmp_path)
    if other is not None:
        with pytest.raises(EnvConfigError):
            GameEnv(task="leave_house", start_states=other)


def _other_game_state(tmp_path):
    """A snapshot of another built-in ROM, or None when there is none."""
    from gbxcule.backends.warp_vec import WarpVecBackend
    from gbxcule.roms import resolve_rom, suite

    names = [n for n in suite() if n != "OVERWORLD"]
    if not names:
        return None
    be = WarpVecBackend(str(resolve_rom(names[0])), 1)
    be.reset()
    return be.save_state(tmp_path / "other.gbxs")


def test_start_states_from_files_and_a_pack_round_trip(tmp_path):
    src = GameEnv(task="leave_house", num_envs=2, start_states=("random_noops", 2, 2))
    src.reset()
    folder = tmp_path / "starts"
    folder.mkdir()
    src.backend.save_state(folder / "a.gbxs", envs=[0])
    src.backend.save_state(folder / "b.gbxs", envs=[1])
    env = GameEnv(task="leave_house", num_envs=2, start_states=folder)
    assert env.num_slots == 2
    assert GameEnv(task="leave_house", start_states=[folder / "a.gbxs"]).num_slots == 1
    pack = tmp_path / "mine.toml"
    pack.write_text("""
[pack]
name = "mine"
rom = "OVERWORLD"
[tasks.out_the_door]
start = { script = "N5" }
step_limit = 30
solution = "R4 D6 R N2"
goal_ram = [{ addr = 0xC100, value = 1 }]
template = "solution"
reward = { tau = 0.1 }
[tasks.from_state]
start = { states = ["starts/a.gbxs"] }
step_limit = 5
goal_ram = [{ addr = 0xC100, value = 9 }]
""")
    task = load_task(f"{pack}:out_the_door")
    assert task.id == "mine:out_the_door"
    env = GameEnv(task=f"{pack}:out_the_door", num_envs=1, info_mode="full")
    env.reset()
    ended = None
    for t, a in enumerate(task.solution, 1):
        _, _, te, _, info = env.step(np.array([a]))
        if bool(te[0]):
            ended = t
            break
    assert ended == GOAL_STEP["leave_house"] and bool(info["success"][0])
    env = GameEnv(task=f"{pack}:from_state", num_envs=1)
    assert env.num_slots == 1 and env.terminate_on == "ram"
    with pytest.raises(TaskError, match="no task"):
        load_task(f"{pack}:nope")


def test_put_states_scatters_the_serial_ring():
    from gbxcule.backends.warp_vec import WarpVecBackend
    from gbxcule.core.snapshot import EnvState
    from gbxcule.roms import resolve_rom

    be = WarpVecBackend(str(resolve_rom("OVERWORLD")), 4)
    be.reset()
    states = be.env_states([0, 1])
    rng = np.random.default_rng(0)
    states = [EnvState(s.fields, s.ram, rng.integers(0, 256, size=s.serial.shape, dtype=np.uint8)) for s in states]
    before = be.env_states()
    be.put_states(states, envs=[3, 1, 2])
    after = be.env_states()
    assert np.array_equal(after[0].serial, before[0].serial)
    for env, k in ((3, 0), (1, 1), (2, 0)):
        assert np.array_equal(after[env].serial, states[k].serial)
        assert np.array_equal(after[env].ram, states[k].ram)


def test_solution_starts_lie_along_the_demonstration():
    """("solution", K, 0): slot i replays the first i/K of the task's solution, so slot 0 is the task's own
    start, the later slots are the states the solution passes through, and a task with no solution is refused."""
    task = load_task("leave_house")
    k = 4
    env = GameEnv(task="leave_house", num_envs=k, device="cpu", start_states=("solution", k, 0))
    env.reset()
    plain = GameEnv(task="leave_house", num_envs=1, device="cpu")
    plain.reset()
    assert torch.equal(env.slot_obs[0], plain.slot_obs[0])
    # replaying the same prefixes by hand from the task's start gives the same frames
    for i in range(1, k):
        ref = GameEnv(task="leave_house", num_envs=1, device="cpu", max_steps=1000)
        ref.reset()
        for a in task.solution[:i * len(task.solution) // k]:
            ref.step(torch.tensor([a]))
        assert torch.equal(ref.obs[0, -1], env.slot_obs[i]), i
    assert len({env.slot_obs[i].numpy().tobytes() for i in range(k)}) == k
    with pytest.raises(EnvConfigError):
        GameEnv(rom="OVERWORLD", num_envs=1, device="cpu", start_states=("solution", 4))


def test_episode_stats_count_episodes_and_successes_per_start_slot():
    """slot_episodes / slot_successes: the finished episodes and their successes by the slot each episode
    started from (counted here on the host from the env's per-step slots), summing to the totals."""
    sol = TASK_BY_NAME["leave_house"].solution
    env = GameEnv(task="leave_house", num_envs=6, start_states=("solution", 4, 0), max_steps=len(sol) + 2,
                  info_mode="full")
    env.reset(seed=1)
    k = env.num_slots
    eps, oks = np.zeros(k, np.int64), np.zeros(k, np.int64)
    rng = np.random.default_rng(2)
    t = np.zeros(6, np.int64)
    for _ in range(3 * len(sol)):
        slot = env._slots.numpy().copy()
        acts = np.where(np.arange(6) < 3, np.asarray(sol)[np.minimum(t, len(sol) - 1)], rng.integers(0, 8, 6))
        _, _, _, _, info = env.step(acts)
        done, ok = info["done"].numpy(), info["success"].numpy()
        np.add.at(eps, slot[done], 1)
        np.add.at(oks, slot[done & ok], 1)
        t = np.where(done, 0, t + 1)
    s = env.episode_stats()
    assert s["slot_episodes"] == eps.tolist() and s["slot_successes"] == oks.tolist()
    assert sum(s["slot_episodes"]) == s["episodes"] > 0 and sum(s["slot_successes"]) > 0
    assert len(s["slot_episodes"]) == k == 4
    assert env.episode_stats()["slot_episodes"] == [0] * k  # cleared once read
    assert "slot_episodes" not in GameEnv(task="leave_house", num_envs=2).episode_stats()  # one slot: no lists
