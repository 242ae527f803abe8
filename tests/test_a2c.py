"""A2C (streaming TD(0) and n-step windows): its math on tiny tensors (the one-step target with terminated and
truncated envs in one batch, gradient accumulation), and the trainer on the CPU device with tiny configs (trains,
checkpoints, resumes bit for bit, evaluates; bad knobs are one line). PPO's one-epoch learner with `learn_share`,
which was A2C's windowed mode, is tested in tests/test_ppo.py."""

import json
import math

import pytest

torch = pytest.importorskip("torch")

from gbxcule.cli.main import main  # noqa: E402
from gbxcule.rl import returns  # noqa: E402
from gbxcule.rl.algos.a2c import A2CCoefs, a2c_loss, adapt_ent_coef, bootstrap_obs  # noqa: E402
from gbxcule.rl.config import ConfigError  # noqa: E402
from gbxcule.rl.training import make_config, train  # noqa: E402

TIMING = {"sps", "updates_per_s", "wall_s", "time_env_s", "time_forward_s", "time_backward_s", "time_optimizer_s",
          "time_eval_s", "eval/wall_s", "eval/elapsed_s", "eval/seconds"}


def test_td_target_with_terminated_and_truncated_envs_in_one_batch():
    # four envs: running, terminated, truncated, truncated-and-goal-missed; obs are one number per env, and the
    # "value function" reads it, so which obs each env bootstraps from is visible in the target
    next_obs = torch.tensor([[10.0], [20.0], [30.0], [40.0]])  # after autoreset: the next episode's first for 1-3
    final_obs = torch.tensor([[0.0], [21.0], [31.0], [41.0]])  # the finished episodes' last observations
    term = torch.tensor([False, True, False, False])
    trunc = torch.tensor([False, False, True, True])
    boot = bootstrap_obs(next_obs, final_obs, trunc)
    assert boot.flatten().tolist() == [10.0, 20.0, 31.0, 41.0]
    v_next = boot.flatten() * 0.5
    reward = torch.tensor([1.0, 2.0, 3.0, 4.0])
    target = returns.td_target(reward, term, v_next, 0.9)
    # running: 1 + 0.9*5; terminated: 2 (no bootstrap); truncated: bootstrap from the final obs, not the next
    assert target.tolist() == pytest.approx([1 + 0.9 * 5.0, 2.0, 3 + 0.9 * 15.5, 4 + 0.9 * 20.5])
    out = torch.empty_like(next_obs)
    assert bootstrap_obs(next_obs, final_obs, trunc, out=out) is out and torch.equal(out, boot)


def _grads(params, loss_fn):
    for p in params:
        p.grad = None
    loss_fn()
    return [p.grad.clone() for p in params]


def test_k_accumulated_steps_equal_one_step_on_the_concatenated_batch():
    g = torch.Generator().manual_seed(7)
    k, n, a = 4, 5, 3
    net = torch.nn.Linear(6, a + 1)
    obs = torch.randn(k, n, 6, generator=g)
    acts = torch.randint(0, a, (k, n), generator=g)
    targets = torch.randn(k, n, generator=g)
    c = A2CCoefs(vf_coef=0.5, ent_coef=0.01, norm_adv=False)  # normalised advantages are per batch by design

    def loss_of(o, act, tgt):
        out = net(o)
        dist = torch.distributions.Categorical(logits=out[:, :a])
        return a2c_loss(dist.log_prob(act), dist.entropy(), out[:, a], tgt, c)[0]

    def accumulated():
        for i in range(k):
            (loss_of(obs[i], acts[i], targets[i]) / k).backward()

    def concatenated():
        loss_of(obs.reshape(k * n, 6), acts.reshape(-1), targets.reshape(-1)).backward()

    params = list(net.parameters())
    for x, y in zip(_grads(params, accumulated), _grads(params, concatenated), strict=True):
        assert torch.allclose(x, y, atol=1e-6)


def test_the_adaptive_entropy_weight_moves_toward_its_target_and_stays_in_bounds():
    log_c = torch.tensor(math.log(0.01))
    adapt_ent_coef(log_c, torch.tensor(0.5), target=1.5, lr=0.1)  # entropy 1 nat below the target: up by 0.1
    assert math.isclose(float(log_c), math.log(0.01) + 0.1, rel_tol=1e-6)
    adapt_ent_coef(log_c, torch.tensor(2.0), target=1.5, lr=0.1)  # 0.5 above: down by 0.05
    assert math.isclose(float(log_c), math.log(0.01) + 0.05, rel_tol=1e-6)
    for _ in range(200):
        adapt_ent_coef(log_c, torch.tensor(0.0), target=2.0, lr=0.1)
    assert math.isclose(float(log_c.exp()), 1.0, rel_tol=1e-6)  # the upper bound
    for _ in range(400):
        adapt_ent_coef(log_c, torch.tensor(2.0), target=0.0, lr=0.1)
    assert math.isclose(float(log_c.exp()), 1e-4, rel_tol=1e-5)  # the lower bound


def test_approx_kl_is_the_kl_of_the_acting_policy_from_the_trained_one():
    torch.manual_seed(0)
    old = torch.distributions.Categorical(logits=torch.tensor([0.0, 1.0, -1.0]))
    new = torch.distributions.Categorical(logits=torch.tensor([0.5, 0.2, -0.3]))
    a = old.sample((400_000,))
    est = returns.approx_kl(new.log_prob(a) - old.log_prob(a))
    exact = torch.distributions.kl_divergence(old, new)
    assert float(est) == pytest.approx(float(exact), rel=0.03)
    assert float(returns.approx_kl(torch.zeros(5))) == 0.0  # the same policy: no distance


def test_loss_has_no_gradient_through_the_target():
    v = torch.tensor([0.5, -0.5], requires_grad=True)
    tgt = v.detach() * 0 + torch.tensor([1.0, 0.0])
    loss, m = a2c_loss(torch.zeros(2), torch.zeros(2), v, tgt, A2CCoefs(vf_coef=1.0, ent_coef=0.0, norm_adv=False))
    loss.backward()
    assert v.grad.tolist() == pytest.approx([-0.25, -0.25])  # d/dv 0.5*mean((v - t)^2)
    assert m["adv_mean"].item() == pytest.approx(0.5)


def tiny(run_dir, a2c=None, env=None, **run):
    return make_config(None, {"algo": "a2c", "total_steps": 3 * 6 * 8, "env": {"num_envs": 6, **(env or {})},
                              "a2c": {"steps_per_update": 8, "model": "small", **(a2c or {})},
                              "run": {"run_dir": str(run_dir), "device": "cpu", "progress": False,
                                      "tensorboard": False, "checkpoint_every": 1, "eval_episodes": 0, **run}})


def metrics(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


@pytest.mark.parametrize("knobs", [{"level_heads": 3}, {"level_heads": 3, "n_step": 4}], ids=["td0", "window"])
def test_level_heads_log_each_levels_entropy_over_its_samples(tmp_path, knobs):
    """With `level_heads`, A2C logs `samples_by_level` and `entropy_by_level` as PPO does: from quest_m2's start
    (MOM held) every trained sample is on level 1, the counts are the update's samples and level 1's entropy is the
    update's logged entropy (every window the same size); without level heads neither is logged."""
    env = {"task": "quest_m2", "show_milestones": "auto"}
    train(tiny(tmp_path / "heads", knobs, env))
    rows = metrics(tmp_path / "heads")
    for row in rows:
        assert row["samples_by_level"] == [0, 8 * 6, 0]
        assert row["entropy_by_level"][1] == pytest.approx(row["entropy"], rel=1e-5)
        assert row["entropy_by_level"][0] == row["entropy_by_level"][2] == 0.0
    train(tiny(tmp_path / "plain", {k: v for k, v in knobs.items() if k != "level_heads"}, env))
    assert not any("entropy_by_level" in row or "samples_by_level" in row for row in metrics(tmp_path / "plain"))


@pytest.mark.parametrize("knobs", [{}, {"n_step": 4, "gae_lambda": 0.9}, {"gru": 8},
                                   {"n_step": 4, "update_every": 4, "target_entropy": 0.99, "ent_lr": 0.5},
                                   {"gru": 8, "level_heads": 3}],
                         ids=["td0", "window", "gru", "target_entropy", "level_heads"])
def test_tiny_run_trains_checkpoints_and_resumes_bit_for_bit(tmp_path, knobs):
    # level_heads reads the milestones shown over the last row: a task that names them (quest_m1), shown
    env = {"task": "quest_m1", "show_milestones": "auto"} if knobs.get("level_heads") else None
    straight = tmp_path / "straight"
    s = train(tiny(straight, knobs, env))
    assert s["updates"] == 3 and s["env_steps"] == 3 * 48 and s["stopped"] == "done"
    rows = metrics(straight)
    assert [r["update"] for r in rows] == [1, 2, 3]
    for key in ("pg_loss", "v_loss", "entropy", "grad_norm", "adv_mean", "adv_std", "value_mean", "ent_coef",
                "return_p50", "length_p90", "dist_p10", "done_rate", "trunc_rate"):
        assert key in rows[-1], key
    assert sum(rows[-1]["actions"]) == 8 * 6  # the trained samples' actions
    assert rows[0]["entropy"] > 2.0
    part = tmp_path / "part"
    assert train(tiny(part, knobs, env, stop_after_updates=1))["stopped"] == "stop_after_updates"
    resumed = train(tiny(part, knobs, env), resume=True)
    assert resumed["updates"] == 3
    assert metrics(part) == rows
    a = torch.load(straight / "checkpoint.pt", weights_only=False)
    b = torch.load(part / "checkpoint.pt", weights_only=False)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    # Adam's step count: one optimizer step per update_every env-steps
    steps = 3 * 8 // knobs.get("update_every", 4)
    assert all(st["step"].item() == steps for st in a["optimizer"]["state"].values())
    assert a["model_desc"].get("level_heads", 0) == knobs.get("level_heads", 0)
    if knobs.get("gru"):
        assert a["extra"]["state"].shape == (6, 8) and torch.equal(a["extra"]["state"], b["extra"]["state"])
    if knobs.get("target_entropy"):  # the adaptive weight moved, was checkpointed and resumed with the rest
        assert len({r["ent_coef"] for r in rows}) == 3 and torch.equal(a["extra"]["log_coef"], b["extra"]["log_coef"])


def test_eval_of_an_a2c_run_through_the_registry(tmp_path, capsys):
    run = tmp_path / "r"
    train(tiny(run, {"gru": 4}, stop_after_updates=1, checkpoint_every=1))
    assert main(["eval", str(run), "--device", "cpu", "--episodes", "2", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["algo"] == "a2c" and rep["greedy"]["episodes"] == 2 and "sampled" in rep


@pytest.mark.parametrize("bad, word", [({"update_every": 0}, "update_every"), ({"n_step": 8}, "n_step"),
                                       ({"gru": 0}, "gru"), ({"gru": 100_000}, "gru"),
                                       ({"steps_per_update": 6}, "multiple"),
                                       ({"ent_coef": "x"}, "ent_coef"), ({"norm_adv": "false"}, "norm_adv"),
                                       ({"n_step": 3, "update_every": 4}, "must divide"),
                                       ({"target_entropy": 0.5, "ent_coef_end": 0.0}, "exclude"),
                                       ({"target_entropy": 1.5}, "target_entropy"), ({"ent_lr": 0}, "ent_lr"),
                                       ({"n_step": 4, "update_every": 4, "gru": 8}, "gru"),
                                       ({"minibatches": 2}, "unknown setting 'minibatches'"),
                                       ({"clip": 0.1}, "unknown setting 'clip'"),
                                       ({"steps_per_update": 10**9}, "more than total_steps")])
def test_bad_knobs_are_one_line(tmp_path, bad, word):
    with pytest.raises(ConfigError, match=word):
        tiny(tmp_path, bad)


def test_unknown_algo_and_foreign_section_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:  # argparse: one usage line and the choices
        main(["train", "--algo", "nope", "--device", "cpu"])
    assert exc.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="unknown algo"):
        make_config(None, {"algo": "sarsa"})
    with pytest.raises(ConfigError, match=r"section \[a2c\] is for algo a2c"):
        make_config(None, {"a2c": {"lr": 1e-3}})
    assert main(["train", "--algo", "a2c", "--epochs", "3", "--device", "cpu", "--run-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--epochs is not a setting of a2c" in err[0]


def test_a_checkpoint_of_the_windowed_a2c_reads_as_the_ppo_it_is_for_eval_and_is_not_resumed(tmp_path):
    """Runs made before A2C and PPO were named for what they are (`--algo a2c` with clipped minibatch windows):
    their checkpoints are evaluated as PPO with one epoch, and a resume is refused in one line."""
    from gbxcule.rl.rundir import CheckpointError
    from gbxcule.rl.training import config_from_dict, resume_config

    old = {"algo": "a2c", "total_steps": 1000, "env": {"num_envs": 4},
           "a2c": {"n_step": 8, "update_every": 8, "gae_lambda": 0.95, "minibatches": 4, "learn_share": 0.5,
                   "clip": 0.1, "clip_vloss": True, "channels_last": True, "lr": 2.5e-4, "model": "small"},
           "run": {"device": "cpu"}}
    cfg = config_from_dict(old, evaluate_only=True)
    assert cfg.algo == "ppo" and cfg.ppo.epochs == 1 and cfg.ppo.rollout_steps == 8 and cfg.ppo.minibatches == 4
    assert cfg.ppo.learn_share == 0.5 and cfg.ppo.clip == 0.1 and cfg.ppo.model == "small"
    with pytest.raises(CheckpointError, match="can be evaluated, not resumed"):
        resume_config({"config": old, "update": 1, "global_step": 8}, {})
    assert config_from_dict({**old, "a2c": {"n_step": 1, "model": "small"}}).algo == "a2c"  # a plain A2C run stays
