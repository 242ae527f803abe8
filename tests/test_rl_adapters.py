"""The Gymnasium, PufferLib and SB3 adapters, each driven through its library's own entry point on the CPU
device with random actions: spaces, dtypes, autoreset, seeding, bad input, and the examples' smoke runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gymnasium = pytest.importorskip("gymnasium")

import gbxcule.rl  # noqa: E402  (registers the gymnasium ids)
from gbxcule.core.errors import GbxculeError  # noqa: E402
from gbxcule.rl.adapters.gym import ActionError, GbxculeVectorEnv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ID = "gbxcule/Overworld-LeaveHouse-v0"
# 4 start slots (random noop prefixes) so that the seed matters; 3-step episodes so autoreset happens often.
KW = {"start_states": ("random_actions", 4, 8), "max_episode_steps": 3}
N = 3


def _actions(seed: int, steps: int, n: int = N) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 8, size=(steps, n))


def _puffer():
    try:
        from gbxcule.rl.adapters import puffer
    except GbxculeError as exc:  # pufferlib missing: the adapter says how to install it
        pytest.skip(f"pufferlib not installed ({exc})")
    import pufferlib.vector

    return puffer, pufferlib


@pytest.fixture(scope="module")
def vec():
    envs = gymnasium.make_vec(ID, num_envs=N, vectorization_mode="vector_entry_point", **KW)
    yield envs
    envs.close()


# --- Gymnasium ----------------------------------------------------------------------------------------------
def test_ids_registered_without_building_anything():
    for env_id in ("gbxcule/Game-v0", ID, "gbxcule/Overworld-ReachLab-v0", "gbxcule/Overworld-TalkToHiker-v0"):
        assert env_id in gymnasium.registry and env_id in gbxcule.rl.GYM_IDS
    code = "import sys, gbxcule.rl; assert 'gbxcule.backends.warp_vec' not in sys.modules, 'warp at import'"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})


def test_gym_vector_spaces_dtypes_autoreset(vec):
    assert isinstance(vec, gymnasium.vector.VectorEnv) and isinstance(vec.unwrapped, GbxculeVectorEnv)
    assert vec.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.SAME_STEP
    assert vec.single_observation_space == gymnasium.spaces.Box(0, 3, (1, 72, 80), np.uint8)
    assert vec.single_action_space == gymnasium.spaces.Discrete(8)
    assert vec.observation_space.shape == (N, 1, 72, 80) and vec.action_space.shape == (N,)
    obs, info = vec.reset(seed=11)
    assert isinstance(obs, np.ndarray) and obs.dtype == np.uint8 and obs in vec.observation_space and info == {}
    first = obs.copy()
    slot_frames = vec.unwrapped.game.slot_obs.numpy()
    for t, a in enumerate(_actions(0, 7), start=1):
        obs, rew, term, trunc, info = vec.step(a)
        assert obs.dtype == np.uint8 and obs.shape == (N, 1, 72, 80) and obs in vec.observation_space
        assert rew.dtype == np.float32 and term.dtype == bool and trunc.dtype == bool and rew.shape == (N,)
        if t % 3:  # 3-step episodes; the random agent cannot leave the house in 3 steps
            assert not (term | trunc).any() and "final_obs" not in info
            continue
        assert trunc.all() and not term.any()
        assert info["_final_obs"].all() and info["final_obs"].dtype == object
        assert all(f.shape == (1, 72, 80) and f.dtype == np.uint8 for f in info["final_obs"])
        assert (info["final_info"]["episode"]["l"] == 3).all() and not info["final_info"]["is_success"].any()
        # SAME_STEP: the obs returned is the new episode's first frame, one of the start slots' frames
        for i in range(N):
            assert any(np.array_equal(obs[i, 0], f) for f in slot_frames)
    assert any(np.array_equal(first[i, 0], f) for i in range(N) for f in slot_frames)


def test_gym_vector_seeding(vec):
    assert len({f.tobytes() for f in vec.unwrapped.game.slot_obs.numpy()}) > 1, "start slots must differ"

    def run(seed):
        obs, _ = vec.reset(seed=seed)
        out = [obs.copy()]
        for a in _actions(5, 4):
            o, r, *_ = vec.step(a)
            out += [o.copy(), r.copy()]
        return out

    a, b = run(3), run(3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    starts = {run(s)[0].tobytes() for s in range(6)}
    assert len(starts) > 1, "different seeds must give different start slots"
    vec.reset(seed=4)
    o1 = vec.reset()[0].copy()  # seedless resets draw from the generator seeded by the last seed
    vec.reset(seed=4)
    assert np.array_equal(vec.reset()[0], o1)


def test_gym_vector_torch_matches_numpy_and_final_obs(vec):
    envs = gymnasium.make_vec(ID, num_envs=N, array="torch", start_states=KW["start_states"], max_episode_steps=50)
    try:
        o_t, _ = envs.reset(seed=9)
        o_n, _ = vec.reset(seed=9)
        assert isinstance(o_t, torch.Tensor) and o_t.dtype == torch.uint8 and o_t.device.type == "cpu"
        assert np.array_equal(o_t.numpy(), o_n)
        for a in _actions(1, 3):
            o_t, r_t, te_t, tr_t, info_t = envs.step(torch.as_tensor(a))
            o_n, r_n, te_n, tr_n, info_n = vec.step(a)
            assert r_t.dtype == torch.float32 and te_t.dtype == torch.bool and info_t["_final_obs"].dtype == torch.bool
            np.testing.assert_allclose(r_t.numpy(), r_n, rtol=1e-6)
        # the 3-step env just ended its episodes: its final obs is what the 50-step env shows now
        assert tr_n.all() and not info_t["_final_obs"].any()
        assert np.array_equal(np.stack(info_n["final_obs"]), o_t.numpy())
    finally:
        envs.close()


def test_gym_scale_option():
    envs = GbxculeVectorEnv(num_envs=2, task="leave_house", scale=True)
    try:
        assert envs.single_observation_space.high.max() == 255
        obs, _ = envs.reset(seed=0)
        assert set(np.unique(obs)) <= {0, 85, 170, 255} and obs.max() == 255
        assert np.array_equal(obs // 85, envs.game.obs.numpy())
    finally:
        envs.close()


def test_gym_single_env_passes_check_env():
    from gymnasium.utils.env_checker import check_env

    env = gymnasium.make(ID, render_mode="rgb_array", max_steps=2)
    try:
        check_env(env.unwrapped, skip_render_check=False)
        obs, _ = env.reset(seed=1)
        assert obs.shape == (1, 72, 80) and obs in env.observation_space
        frame = env.render()
        assert frame.shape == (144, 160, 3) and frame.dtype == np.uint8
        env.step(0)
        obs, r, term, trunc, info = env.step(0)
        assert trunc and info["episode"]["l"] == 2 and obs.shape == (1, 72, 80)
        with pytest.raises(gymnasium.error.InvalidAction, match="integer in"):
            env.step(1.5)
        with pytest.raises(ValueError):
            env.step(8)
    finally:
        env.close()


def test_gym_bad_input(vec):
    with pytest.raises(TypeError, match="unknown argument.*bogus"):
        gymnasium.make_vec(ID, num_envs=2, bogus=1)
    with pytest.raises(ValueError, match="num_envs must be an integer >= 1"):
        gymnasium.make_vec(ID, num_envs=0)
    with pytest.raises(ValueError, match="SHA-1"):
        gymnasium.make_vec("gbxcule/Game-v0", num_envs=2, rom="ALU_LOOP", task="leave_house")
    with pytest.raises(ValueError, match="names its lives byte"):  # passed through to GameEnv: leave_house has none
        gymnasium.make_vec(ID, num_envs=2, life_ends=True)
    with pytest.raises(ValueError, match="array must be"):
        gymnasium.make_vec(ID, num_envs=2, array="jax")
    vec.reset(seed=0)
    with pytest.raises(ActionError, match="shape"):
        vec.step(np.zeros(N + 1, dtype=np.int64))
    with pytest.raises(ActionError, match="integers"):
        vec.step(np.zeros(N, dtype=np.float32))
    with pytest.raises(ActionError, match="out of range|action"):
        vec.step(np.full(N, 99))
    with pytest.raises(ValueError, match="one integer"):
        vec.reset(seed=[1, 2, 3])


# --- PufferLib ----------------------------------------------------------------------------------------------
def test_puffer_native_env():
    puffer, pufferlib = _puffer()
    vecenv = pufferlib.vector.make(puffer.GbxculePufferEnv, backend=pufferlib.vector.PufferEnv, num_envs=1,
                                   env_kwargs=dict(num_envs=N, task="leave_house", start_states=KW["start_states"],
                                                   max_steps=3, report_interval=3))
    try:
        assert vecenv.num_agents == N and vecenv.single_observation_space.shape == (1, 72, 80)
        assert vecenv.single_action_space.n == 8
        slot_frames = vecenv.game.slot_obs.numpy()

        def run(seed):
            vecenv.async_reset(seed)
            obs, rew, term, trunc, infos, ids, masks = vecenv.recv()
            assert obs is vecenv.observations and obs.dtype == np.uint8 and masks.all() and list(ids) == [0, 1, 2]
            out, logs = [obs.copy()], []
            for t, a in enumerate(_actions(2, 6), start=1):
                vecenv.send(a.astype(np.int32))
                obs, rew, term, trunc, infos, *_ = vecenv.recv()
                assert obs is vecenv.observations and rew is vecenv.rewards and trunc is vecenv.truncations
                assert rew.dtype == np.float32 and term.dtype == bool and trunc.dtype == bool
                assert trunc.all() == (t % 3 == 0) and not term.any()
                if t % 3 == 0:
                    assert all(any(np.array_equal(obs[i, 0], f) for f in slot_frames) for i in range(N))
                out += [obs.copy(), rew.copy()]
                logs += infos
            return out, logs

        (a, logs), (b, _) = run(5), run(5)
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
        assert len(logs) == 2 and logs[0]["episodes"] == N and logs[0]["episode_length"] == 3.0
        assert logs[0]["success_rate"] == 0.0
        with pytest.raises(pufferlib.APIUsageError, match="shape"):
            vecenv.step(np.zeros(N + 1, dtype=np.int32))
        with pytest.raises(ValueError, match="integers"):
            vecenv.step(np.zeros(N, dtype=np.float32))
    finally:
        vecenv.close()


def test_puffer_serial_backend_uses_shared_buffers_and_bad_config():
    puffer, pufferlib = _puffer()
    vecenv = pufferlib.vector.make(puffer.GbxculePufferEnv, backend=pufferlib.vector.Serial, num_envs=2,
                                   env_kwargs=dict(num_envs=2, task="leave_house", max_steps=2))
    try:
        vecenv.async_reset(0)
        obs, *_ = vecenv.recv()
        assert obs.shape == (4, 1, 72, 80) and obs.max() == 3
        for t in (1, 2):
            vecenv.send(np.zeros(4, dtype=np.int32))
            obs, rew, term, trunc, *_ = vecenv.recv()
            assert trunc.all() == (t == 2) and np.allclose(rew[:2], rew[2:])
    finally:
        vecenv.close()
    with pytest.raises(TypeError, match="unknown argument.*bogus"):
        puffer.GbxculePufferEnv(num_envs=2, task="leave_house", bogus=1)
    with pytest.raises(ValueError, match="num_envs"):
        puffer.GbxculePufferEnv(num_envs=0, task="leave_house")


# --- Stable-Baselines3 --------------------------------------------------------------------------------------
def test_sb3_vecenv_and_ppo():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecEnv

    from gbxcule.rl.adapters.sb3 import GbxculeVecEnv

    env = GbxculeVecEnv(num_envs=N, task="leave_house", start_states=KW["start_states"], max_steps=3)
    try:
        assert isinstance(env, VecEnv) and env.observation_space == gymnasium.spaces.Box(0, 255, (1, 72, 80), np.uint8)
        slot_frames = env.game.slot_obs.numpy() * 85

        def run(seed):
            env.seed(seed)
            obs = env.reset()
            out = [obs.copy()]
            for t, a in enumerate(_actions(3, 6), start=1):
                prev, prev_copy = obs, obs.copy()
                obs, rew, done, infos = env.step(a)
                assert np.array_equal(prev, prev_copy), "the previous step's obs must survive one more step"
                assert obs.dtype == np.uint8 and set(np.unique(obs)) <= {0, 85, 170, 255}
                assert rew.dtype == np.float32 and done.dtype == bool and len(infos) == N
                assert done.all() == (t % 3 == 0)
                if t % 3 == 0:
                    for i in range(N):
                        info = infos[i]
                        assert info["TimeLimit.truncated"] and not info["is_success"]
                        assert info["episode"]["l"] == 3 and info["terminal_observation"].shape == (1, 72, 80)
                        assert any(np.array_equal(obs[i, 0], f) for f in slot_frames)
                else:
                    assert infos == [{}] * N
                out += [obs.copy(), rew.copy()]
            return out

        a, b = run(7), run(7)
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
        assert env.get_attr("num_actions") == [8] * N and env.env_method("describe", indices=[0])[0]["num_envs"] == N
        with pytest.raises(ValueError, match="shape"):
            env.step(np.zeros(N + 1, dtype=np.int64))
        model = PPO("CnnPolicy", env, n_steps=4, batch_size=6, n_epochs=1, seed=0, device="cpu")
        model.learn(2 * N * 4)
        assert model.num_timesteps == 2 * N * 4
    finally:
        env.close()


# --- examples -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("script,needs", [("gymnasium_cleanrl_ppo.py", None), ("pufferlib_train.py", "pufferlib"),
                                          ("sb3_ppo.py", "stable_baselines3")])
def test_example_smoke(script, needs, tmp_path):
    if needs == "pufferlib":
        _puffer()
    elif needs:
        pytest.importorskip(needs)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, str(ROOT / "examples" / script), "--smoke"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "success rate" in res.stdout


def _example(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", ["gymnasium_cleanrl_ppo", "pufferlib_train", "sb3_ppo"])
def test_each_examples_cnn_reads_every_pixel_of_the_frame(script):
    """Every weight and bias made positive (every ReLU passes): the gradient of the features is positive at each
    pixel of a 72x80 frame that reaches them, so a CNN that drops its last rows or columns fails."""
    mod = _example(script)
    if script == "sb3_ppo":
        layers = pytest.importorskip("stable_baselines3.common.torch_layers")
        space = gymnasium.spaces.Box(0, 255, (2, 72, 80), np.uint8)
        net = mod.full_frame_cnn(layers.BaseFeaturesExtractor)(space)
        features = net
    else:
        net = mod.Agent(2, 8)
        features = net.body
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(p.abs() + 0.01)
    x = torch.ones(1, 2, 72, 80, requires_grad=True)
    features(x).sum().backward()
    assert bool((x.grad > 0).all())
