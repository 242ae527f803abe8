"""PQN on the CPU device with tiny configs: it trains (Q(lambda) targets, LayerNorm network), logs,
checkpoints, resumes bit for bit, evaluates through the registry; bad input gives one line."""

import json

import pytest

torch = pytest.importorskip("torch")

from gbxcule.cli.main import main  # noqa: E402
from gbxcule.rl.algos import pqn  # noqa: E402
from gbxcule.rl.rundir import load_checkpoint  # noqa: E402
from gbxcule.rl.training import make_config, train  # noqa: E402

TIMING = {"sps", "time_env_s", "time_inference_s", "time_update_s", "wall_s", "updates_per_s"}


def tiny(run_dir, **run):
    return make_config(None, {
        "algo": "pqn", "total_steps": 4 * 4 * 6, "env": {"num_envs": 4, "max_steps": 10},
        "pqn": {"rollout_steps": 6, "epochs": 2, "minibatches": 2, "model": "small", "exploration_fraction": 0.5},
        "run": {"run_dir": str(run_dir), "device": "cpu", "progress": False, "evals": 0, "tensorboard": False,
                "checkpoint_every": 1, **run}})


def metrics(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    d = tmp_path_factory.mktemp("pqn")
    return d, train(tiny(d))


def test_q_network_heads_and_inputs():
    from gbxcule.rl.models import QNetwork

    torch.manual_seed(0)
    obs = torch.randint(0, 4, (3, 2, 72, 80), dtype=torch.uint8)
    plain = QNetwork(8, 2, arch="small", layer_norm=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q = plain(obs)
    assert q.shape == (3, 8) and q.dtype == torch.float32  # the head runs outside autocast
    duel = QNetwork(8, 2, arch="small", dueling=True)
    h = duel.body(obs.float() / 3)
    a = duel.q(h)
    assert torch.allclose(duel(obs), duel.v(h) + a - a.mean(-1, keepdim=True), atol=1e-6)
    packed = QNetwork(8, 2, packed=True, arch="small")
    assert packed(torch.zeros((0, 2, 72, 20), dtype=torch.uint8)).shape == (0, 8)  # no truncation in a rollout
    assert plain.describe()["layer_norm"] and duel.describe()["head"] == "dueling"


def test_q_loss():
    assert float(pqn.q_loss(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 4.0]))) == pytest.approx(0.5 * 2.5)


def test_tiny_run_trains_and_writes_everything(straight):
    d, s = straight
    assert s["updates"] == 4 and s["env_steps"] == 96 and s["stopped"] == "done"
    rows = metrics(d)
    assert [r["update"] for r in rows] == [1, 2, 3, 4]
    for key in ("loss", "q_mean", "target_mean", "target_std", "explained_variance", "grad_norm", "epsilon", "lr",
                "success_rate", "trunc_rate", "actions"):
        assert key in rows[-1]
    assert sum(rows[-1]["actions"]) == 24 and rows[0]["epsilon"] > rows[-1]["epsilon"] == pytest.approx(0.01)
    assert any(r["trunc_rate"] > 0 for r in rows)
    assert rows[-1]["loss"] < rows[0]["loss"]  # the Q-network fits its targets
    ck = load_checkpoint(d)
    assert ck["update"] == 4 and ck["algo"] == "pqn" and ck["model_desc"]["layer_norm"] is True
    assert any("body.1." in k for k in ck["model"])  # the normalisation after the first conv layer


def test_a_run_on_the_epsilon_ladder_acts_otherwise(straight, tmp_path):
    """pqn.epsilon_ladder (tests/test_dqn.py tests the ladder): the logged epsilon stays the schedule's, the acts
    change."""
    d, _ = straight
    cfg = tiny(tmp_path / "ladder")
    cfg.pqn.epsilon_ladder = 7.0
    assert train(cfg)["updates"] == 4
    base, ladder = metrics(d), metrics(tmp_path / "ladder")
    assert [r["epsilon"] for r in ladder] == [r["epsilon"] for r in base]
    assert [r["actions"] for r in ladder] != [r["actions"] for r in base]


def test_killed_run_resumes_bit_for_bit(straight, tmp_path):
    d, _ = straight
    assert train(tiny(tmp_path, stop_after_updates=2))["updates"] == 2
    assert train(tiny(tmp_path), resume=True)["updates"] == 4
    assert metrics(tmp_path) == metrics(d)
    a, b = load_checkpoint(d)["model"], load_checkpoint(tmp_path)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_eval_through_the_registry(straight, capsys):
    d, _ = straight
    assert main(["eval", str(d), "--device", "cpu", "--episodes", "2", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["algo"] == "pqn" and rep["episodes"] == 2 and rep["greedy"]["mean_length"] <= 10


@pytest.mark.parametrize("item,needle", [("pqn.epsilon_end=2", "pqn.epsilon_end must be <= 1"),
                                         ("pqn.epsilon_ladder=17", "pqn.epsilon_ladder must be <= 16"),
                                         ("pqn.q_lambda=1.5", "pqn.q_lambda must be <= 1"),
                                         ("pqn.minibatches=100", "exceeds the batch")])
def test_bad_input_is_one_line(tmp_path, capsys, item, needle):
    argv = ["train", "--algo", "pqn", "--device", "cpu", "--num-envs", "2", "--rollout-steps", "4", "--run-dir",
            str(tmp_path / "r"), "--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and needle in err, err
    assert not (tmp_path / "r").exists()
