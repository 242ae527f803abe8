"""DQN: the target and loss math, then the trainer on the CPU device with tiny configs: it trains, logs,
checkpoints, resumes bit for bit with the buffer in the checkpoint and refills it without, evaluates through
the registry; bad input gives one line before anything is allocated."""

import json

import pytest

torch = pytest.importorskip("torch")

from gbxcule.cli.main import main  # noqa: E402
from gbxcule.rl.algos import dqn  # noqa: E402
from gbxcule.rl.config import ConfigError  # noqa: E402
from gbxcule.rl.rundir import load_checkpoint  # noqa: E402
from gbxcule.rl.training import make_config, train  # noqa: E402

TIMING = {"sps", "time_env_s", "time_inference_s", "time_update_s", "time_replay_s", "wall_s", "updates_per_s"}


def test_double_dqn_target_and_losses():
    ret = torch.tensor([1.0, 0.5])
    disc = torch.tensor([0.9, 0.0])
    online = torch.tensor([[1.0, 3.0, 2.0], [0.0, 1.0, 5.0]])
    target = torch.tensor([[10.0, 20.0, 30.0], [7.0, 8.0, 9.0]])
    assert torch.allclose(dqn.q_target(ret, disc, online, target), torch.tensor([1.0 + 0.9 * 20.0, 0.5]))
    assert torch.allclose(dqn.q_target(ret, disc, None, target), torch.tensor([1.0 + 0.9 * 30.0, 0.5]))
    q, y = torch.tensor([0.0, 3.0]), torch.tensor([0.5, 0.0])
    loss, td = dqn.td_loss(q, y, kind="huber")
    assert torch.allclose(td, torch.tensor([-0.5, 3.0])) and float(loss) == pytest.approx((0.125 + 2.5) / 2)
    loss, _ = dqn.td_loss(q, y, torch.tensor([2.0, 0.0]), kind="mse")
    assert float(loss) == pytest.approx(0.25 / 2)
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    before = a.weight.detach().clone()
    dqn.soft_update(a, b, 0.25)
    assert torch.allclose(a.weight, 0.75 * before + 0.25 * b.weight)
    dqn.soft_update(a, b, 1.0)
    assert torch.equal(a.weight, b.weight)


def test_epsilon_ladder_spreads_exploration_over_the_envs():
    """Ape-X's ladder: env i of N explores with epsilon ** (1 + alpha * i / (N - 1)); epsilon_greedy takes one epsilon
    per row; alpha 0 is every env at epsilon."""
    from gbxcule.rl.models import epsilon_greedy, epsilon_ladder, ladder_epsilons

    n = 4096
    exps = epsilon_ladder(n, 7.0, "cpu")
    assert exps[0] == 1.0 and exps[-1] == pytest.approx(8.0) and bool((exps[1:] > exps[:-1]).all())
    assert torch.equal(epsilon_ladder(n, 0.0, "cpu"), torch.ones(n)) and torch.equal(epsilon_ladder(1, 7.0, "cpu"),
                                                                                     torch.ones(1))
    # on 2 processes of n envs each the ladder runs over all 2n: rank 0 the top half, rank 1 the rest
    both = torch.cat([epsilon_ladder(n, 7.0, "cpu", rank=r, world=2) for r in (0, 1)])
    assert torch.allclose(both, epsilon_ladder(2 * n, 7.0, "cpu")) and both[n - 1] < 4.5 < both[n]
    eps = ladder_epsilons(0.4, exps, torch.empty(n))
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4 ** 8) and bool((eps[1:] < eps[:-1]).all())
    assert torch.equal(ladder_epsilons(1.0, exps, torch.empty(n)), torch.ones(n))
    torch.manual_seed(0)
    q = torch.zeros(n, 8)
    q[:, 3] = 1.0  # the argmax is action 3 everywhere
    off = torch.stack([epsilon_greedy(q, eps) != 3 for _ in range(64)]).float().mean(0)  # share of non-argmax acts
    quarter = n // 4
    # a random action is the argmax one time in 8: the expected share is 7/8 of each env's epsilon
    assert off[:quarter].mean() == pytest.approx(7 / 8 * float(eps[:quarter].mean()), rel=0.05)
    assert off[-quarter:].mean() < 0.002 and off[-quarter:].mean() == pytest.approx(
        7 / 8 * float(eps[-quarter:].mean()), abs=5e-4)


def test_a_run_on_the_ladder_acts_otherwise_and_logs_the_schedules_epsilon(straight, tmp_path):
    d, _ = straight
    cfg = tiny(tmp_path / "ladder")
    cfg.dqn.epsilon_ladder = 7.0
    s = train(cfg)
    assert s["updates"] == 4 and s["stopped"] == "done"
    base, ladder = metrics(d), metrics(tmp_path / "ladder")
    assert [r["epsilon"] for r in ladder] == [r["epsilon"] for r in base]  # the ladder's top: the schedule
    assert [r["actions"] for r in ladder] != [r["actions"] for r in base]


def tiny(run_dir, keep_buffer=True, **run):
    return make_config(None, {
        "algo": "dqn", "total_steps": 4 * 4 * 6, "env": {"num_envs": 4, "max_steps": 10},
        "dqn": {"buffer_size": 4 * 20, "batch_size": 16, "learning_starts": 20, "log_every": 6, "replay_ratio": 0.5,
                "target_every": 2, "model": "small", "dueling": True, "prioritized": True,
                "checkpoint_buffer": keep_buffer, "exploration_fraction": 0.5},
        "run": {"run_dir": str(run_dir), "device": "cpu", "progress": False, "evals": 0, "tensorboard": False,
                "checkpoint_every": 1, **run}})


def metrics(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    d = tmp_path_factory.mktemp("dqn")
    return d, train(tiny(d))


def test_tiny_run_trains_and_writes_everything(straight):
    d, s = straight
    assert s["updates"] == 4 and s["env_steps"] == 96 and s["stopped"] == "done"
    rows = metrics(d)
    assert [r["update"] for r in rows] == [1, 2, 3, 4]
    # 24 steps per update: transitions of steps 0-3 complete in update 1 (16 < learning_starts 20), then one
    # gradient step every second step of all envs
    assert rows[0]["buffer_size"] == 16 and rows[0]["grad_steps"] == 0 and rows[0]["loss"] is None
    assert [r["grad_steps"] for r in rows[1:]] == [3, 3, 3] and rows[-1]["grad_steps_total"] == 9
    assert rows[-1]["buffer_size"] == (20 - 1 - 3 + 1) * 4  # the ring is full and wraps
    for key in ("loss", "q_mean", "target_mean", "td_abs", "grad_norm", "epsilon", "lr", "success_rate",
                "trunc_rate", "actions"):
        assert key in rows[-1]
    assert all(r["loss"] is not None and r["loss"] >= 0 for r in rows[1:])
    assert rows[0]["epsilon"] > rows[-1]["epsilon"] == pytest.approx(0.01)
    assert sum(rows[-1]["actions"]) == 24 and any(r["trunc_rate"] > 0 for r in rows)
    ck = load_checkpoint(d)
    assert ck["update"] == 4 and ck["algo"] == "dqn" and ck["extra"]["grad_steps"] == 9
    assert ck["extra"]["buffer"]["frames"].shape == (20, 4, 72, 80) and "tree" in ck["extra"]["buffer"]
    assert set(ck["extra"]["target"]) == set(ck["model"])


def test_killed_run_resumes_bit_for_bit_with_the_buffer(straight, tmp_path):
    d, _ = straight
    part = train(tiny(tmp_path, stop_after_updates=2))
    assert part["updates"] == 2
    before = load_checkpoint(tmp_path)["model"]
    resumed = train(tiny(tmp_path), resume=True)
    assert resumed["updates"] == 4
    assert metrics(tmp_path) == metrics(d)
    a, b = load_checkpoint(d), load_checkpoint(tmp_path)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert all(torch.equal(a["extra"]["target"][k], b["extra"]["target"][k]) for k in a["model"])
    assert not all(torch.equal(before[k], b["model"][k]) for k in before)  # it trained after the resume


def test_resume_without_the_buffer_refills_it(straight, tmp_path):
    d, _ = straight
    train(tiny(tmp_path, keep_buffer=False, stop_after_updates=2))
    assert "buffer" not in load_checkpoint(tmp_path)["extra"]
    resumed = train(tiny(tmp_path, keep_buffer=False), resume=True)
    assert resumed["updates"] == 4
    rows, full = metrics(tmp_path), metrics(d)
    assert rows[:2] == full[:2]
    # the refilled buffer holds the 4 steps completed since the resume; the uninterrupted run kept its 16
    assert rows[2]["buffer_size"] == (6 - 3 + 1) * 4 < full[2]["buffer_size"]
    assert rows[2]["grad_steps"] == 0 and rows[3]["grad_steps"] == 3


def test_eval_through_the_registry(straight, capsys):
    d, _ = straight
    assert main(["eval", str(d), "--device", "cpu", "--episodes", "2", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["algo"] == "dqn" and rep["episodes"] == 2 and 0.0 <= rep["success_rate"] <= 1.0
    assert rep["greedy"]["mean_length"] <= 10 and "sampled" in rep


@pytest.mark.parametrize("sets,needle", [
    (["dqn.epsilon_end=1.5"], "dqn.epsilon_end must be <= 1"),
    (["dqn.epsilon_start=-0.1"], "dqn.epsilon_start must be >= 0"),
    (["dqn.epsilon_ladder=-1"], "dqn.epsilon_ladder must be >= 0"),
    (["dqn.replay_ratio=0"], "dqn.replay_ratio must be > 0"),
    (["dqn.n_step=11"], "dqn.n_step (11) is larger than the episode limit (10 steps)"),
    (["dqn.buffer_size=12"], "needs at least 4"),
    (["dqn.learning_starts=100"], "learning would never start"),
    (["dqn.buffer_size=4000000000000000"], "host memory"),
])
def test_bad_input_is_one_line_before_anything_is_allocated(tmp_path, capsys, sets, needle):
    run_dir = tmp_path / "r"
    argv = ["train", "--algo", "dqn", "--device", "cpu", "--num-envs", "4", "--max-steps", "10", "--run-dir",
            str(run_dir), "--set", "dqn.buffer_size=80", "--set", "dqn.learning_starts=20"]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and needle in err, err
    assert not run_dir.exists()


def test_algo_sections_do_not_mix():
    with pytest.raises(ConfigError, match=r"section \[ppo\]"):
        make_config(None, {"algo": "dqn", "ppo": {"lr": 1e-3}})
    cfg = make_config(None, {"algo": "dqn", "dqn": {"lr": 1e-3}})
    assert cfg.section.lr == 1e-3 and cfg.run.run_dir == "runs/dqn"


@pytest.mark.parametrize("config", ["leave_house_dqn.toml", "leave_house_pqn.toml"])
def test_the_q_configs_discount_leaves_an_action_gap_a_q_learner_can_resolve(config):
    """On the real env with the shipped config's reward and discount, the solution's discounted return beats
    "wait a step, then the solution" by at least 3% of its value: at 0.99 the gap was about 1% (the greedy
    argmax flipped between evals); a Q-learner's fitting noise is about that size."""
    from pathlib import Path

    from gbxcule.core.action_codec import get_codec
    from gbxcule.rl.config import make_env
    from gbxcule.rl.tasks import load_task, parse_script

    root = Path(__file__).resolve().parent.parent
    cfg = make_config(root / "configs" / config)
    gamma = cfg.section.gamma
    task = load_task("leave_house")
    sol = list(task.solution)
    noop = list(parse_script("N", get_codec(task.codec)))
    cfg.env.start_states, cfg.env.spread_clocks = None, False  # both from the task's own start, no early end
    env = make_env(cfg.env, "cpu", 0, num_envs=2, info_mode="none")
    env.reset(seed=0)
    ret = torch.zeros(2, dtype=torch.float64)
    live = torch.ones(2, dtype=torch.bool)
    rewards: list[list[float]] = [[], []]
    plans = [sol + noop * 4, noop + sol + noop * 3]  # env 1 waits one step first
    for t in range(len(plans[0])):
        _, r, term, trunc, _ = env.step(torch.tensor([plans[0][t], plans[1][t]]))
        ret += (gamma ** t) * r.double() * live
        for i in range(2):
            rewards[i].append(float(r[i]) if live[i] else 0.0)
        live &= ~(term | trunc)
    assert not live.any()  # both reached the goal
    assert (ret[0] - ret[1]) / ret[0].abs() >= 0.03, (gamma, ret.tolist())
    if config == "leave_house_dqn.toml":  # the test can fail: at 0.99 the gap is about 1%
        old = [sum(0.99 ** (t - k) * x for t, x in enumerate(rw) if t >= k) for rw, k in ((rewards[0], 0),
                                                                                          (rewards[1], 0))]
        assert (old[0] - old[1]) / abs(old[0]) < 0.03
