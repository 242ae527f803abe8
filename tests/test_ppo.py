"""PPO's math (gbxcule.rl.algos.ppo; GAE in gbxcule.rl.returns) on tiny tensors checked by hand or loops, and its
one-epoch learner on a share of the envs (`learn_share`, `channels_last`) and its recurrent policy (`gru`) trained,
checkpointed and resumed bit for bit on the CPU device."""

import copy
import json
import math

import pytest

torch = pytest.importorskip("torch")

from gbxcule.cli.main import main  # noqa: E402
from gbxcule.rl import returns  # noqa: E402
from gbxcule.rl.algos import ppo  # noqa: E402
from gbxcule.rl.config import ConfigError  # noqa: E402
from gbxcule.rl.training import make_config, train  # noqa: E402


def gae_loop(rewards, values, dones, last_value, gamma, lam, truncated=None, final_values=None):
    """GAE written the slow way: one env, one step at a time."""
    t_len, n = rewards.shape
    adv = [[0.0] * n for _ in range(t_len)]
    for e in range(n):
        running = 0.0
        for t in reversed(range(t_len)):
            r = float(rewards[t, e])
            if truncated is not None and truncated[t, e]:
                r += gamma * float(final_values[t, e])
            nxt = float(last_value[e]) if t == t_len - 1 else float(values[t + 1, e])
            nd = 0.0 if dones[t, e] else 1.0
            delta = r + gamma * nxt * nd - float(values[t, e])
            running = delta + gamma * lam * nd * running
            adv[t][e] = running
    return torch.tensor(adv)


def test_gae_matches_a_plain_loop():
    g = torch.Generator().manual_seed(0)
    t_len, n = 7, 5
    rewards, values = torch.randn(t_len, n, generator=g), torch.randn(t_len, n, generator=g)
    dones = torch.rand(t_len, n, generator=g) < 0.3
    truncated = dones & (torch.rand(t_len, n, generator=g) < 0.5)
    final_values, last = torch.randn(t_len, n, generator=g), torch.randn(n, generator=g)
    adv, ret = returns.gae(rewards, values, dones, last, 0.97, 0.9, truncated, final_values)
    want = gae_loop(rewards, values, dones, last, 0.97, 0.9, truncated, final_values)
    assert torch.allclose(adv, want, atol=1e-5)
    assert torch.allclose(ret, want + values, atol=1e-5)


def test_gae_by_hand_terminal_and_truncation():
    # one env, three steps; gamma 0.5, lambda 1 (plain discounted returns minus values)
    r = torch.tensor([[1.0], [0.0], [2.0]])
    v = torch.zeros(3, 1)
    last = torch.tensor([4.0])
    # no episode end: returns 1 + 0.5*0 + 0.25*2 + 0.125*4 = 2.0, 0 + 0.5*2 + 0.25*4 = 2.0, 2 + 0.5*4 = 4.0
    adv, _ = returns.gae(r, v, torch.zeros(3, 1, dtype=torch.bool), last, 0.5, 1.0)
    assert adv.flatten().tolist() == [2.0, 2.0, 4.0]
    # terminated at step 1: nothing flows back from steps 2.. into 0..1
    dones = torch.tensor([[False], [True], [False]])
    adv, _ = returns.gae(r, v, dones, last, 0.5, 1.0)
    assert adv.flatten().tolist() == [1.0, 0.0, 4.0]
    # truncated at step 1 with V(final obs) = 6: step 1 bootstraps 0.5 * 6 = 3, which flows back to step 0
    adv, _ = returns.gae(r, v, dones, last, 0.5, 1.0, truncated=dones, final_values=torch.full((3, 1), 6.0))
    assert adv.flatten().tolist() == [2.5, 3.0, 4.0]
    with pytest.raises(ValueError, match="final_values"):
        returns.gae(r, v, dones, last, 0.5, 1.0, truncated=dones)


def test_weighting_the_advantages_weights_each_samples_clipped_term():
    """ppo.overlap scales each advantage by pi_learner / pi_acted (> 0): each sample's clipped term scales alike."""
    g = torch.Generator().manual_seed(3)
    logratio, adv = 0.3 * torch.randn(64, generator=g), torch.randn(64, generator=g)
    w = torch.rand(64, generator=g) * 2 + 0.1
    terms = [returns.clipped_surrogate(logratio[i:i + 1], adv[i:i + 1], 0.1) for i in range(64)]
    want = (w * torch.stack(terms)).mean()
    assert torch.allclose(returns.clipped_surrogate(logratio, adv * w, 0.1), want, atol=1e-6)


def test_clipped_surrogate_stops_the_gradient_outside_the_clip():
    c = ppo.LossCoefs(clip=0.2, vf_coef=0.0, ent_coef=0.0)
    old = torch.zeros(2)
    adv = torch.tensor([1.0, -1.0])
    # ratio e^0.5 ~ 1.65 > 1.2 with positive advantage: clipped, no gradient; negative advantage: not clipped
    new = torch.tensor([0.5, 0.5], requires_grad=True)
    zeros = torch.zeros(2)
    loss, m = ppo.ppo_loss(new, old, adv, zeros, zeros, zeros, zeros, c)
    loss.backward()
    assert new.grad[0].item() == 0.0
    assert new.grad[1].item() == pytest.approx(math.exp(0.5) / 2)
    assert m["clipfrac"].item() == 1.0
    assert m["approx_kl"].item() == pytest.approx((math.exp(0.5) - 1) - 0.5)


def test_value_loss_clipping_takes_the_larger_error():
    c = ppo.LossCoefs(clip=0.1, vf_coef=1.0, ent_coef=0.0, clip_vloss=True)
    z = torch.zeros(1)
    # old value 0, new 1, return 1: unclipped error 0, clipped value 0.1 -> error 0.81; max -> 0.405
    _, m = ppo.ppo_loss(z, z, z, torch.ones(1), z, torch.ones(1), z, c)
    assert m["v_loss"].item() == pytest.approx(0.5 * 0.81)
    c2 = ppo.LossCoefs(clip=0.1, vf_coef=1.0, ent_coef=0.0, clip_vloss=False)
    _, m = ppo.ppo_loss(z, z, z, torch.ones(1), z, torch.ones(1), z, c2)
    assert m["v_loss"].item() == 0.0


def test_golden_loss_on_a_fixed_batch():
    """A fixed synthetic batch: the loss equals the objective written out again here, and the number
    recorded when the code was written (a guard against silent changes to the objective)."""
    g = torch.Generator().manual_seed(1234)
    n = 16
    new, old = torch.randn(n, generator=g) * 0.1, torch.randn(n, generator=g) * 0.1
    adv, nv, ov, ret = (torch.randn(n, generator=g) for _ in range(4))
    ent = torch.rand(n, generator=g)
    c = ppo.LossCoefs(clip=0.2, vf_coef=0.5, ent_coef=0.01)
    loss, m = ppo.ppo_loss(new, old, adv, nv, ov, ret, ent, c)
    ratio = (new - old).exp()
    pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
    vc = ov + (nv - ov).clamp(-0.2, 0.2)
    vl = 0.5 * torch.maximum((nv - ret) ** 2, (vc - ret) ** 2).mean()
    assert loss.item() == pytest.approx((pg - 0.01 * ent.mean() + 0.5 * vl).item(), abs=1e-6)
    assert loss.item() == pytest.approx(GOLDEN_LOSS, abs=1e-5)


GOLDEN_LOSS = 0.9273722767829895  # ppo_loss on the batch above, 2026-11-23


def test_explained_variance_and_lr():
    ret = torch.tensor([1.0, 2.0, 3.0])
    assert returns.explained_variance(ret, ret).item() == 1.0
    ev = returns.explained_variance(torch.zeros(3), ret).item()
    assert ev == pytest.approx(1 - ret.var().item() / ret.var().item())
    assert math.isnan(returns.explained_variance(ret, torch.ones(3)).item())
    assert returns.linear_lr(1.0, 0, 4, True) == 1.0 and returns.linear_lr(1.0, 3, 4, True) == 0.25
    assert returns.linear_lr(1.0, 3, 4, False) == 1.0
    assert ppo.normalize(torch.tensor([1.0, 3.0])).tolist() == pytest.approx([-0.7071, 0.7071], abs=1e-4)


def test_the_clipped_loss_is_the_plain_one_at_the_acting_policy_and_stops_past_the_clip():
    logits = torch.tensor([[0.3, -0.2, 0.1], [0.0, 0.5, -0.4]], requires_grad=True)
    act, adv, v = torch.tensor([0, 1]), torch.tensor([1.0, -1.0]), torch.zeros(2)
    c = ppo.LossCoefs(clip=0.1, vf_coef=0.0, ent_coef=0.0)

    def grad(old_logp):
        logits.grad = None
        dist = torch.distributions.Categorical(logits=logits)
        loss, m = ppo.ppo_loss(dist.log_prob(act), old_logp, adv, v, v, v, dist.entropy(), c)
        loss.backward()
        return logits.grad.clone(), m

    logp = torch.distributions.Categorical(logits=logits).log_prob(act).detach()
    clipped, m1 = grad(logp)
    logits.grad = None
    (-(torch.distributions.Categorical(logits=logits).log_prob(act) * adv).mean()).backward()
    assert torch.allclose(logits.grad, clipped) and m1["clipfrac"].item() == 0.0  # at the acting policy: plain PG
    # sample 0 (advantage +1) already 20% likelier than when it acted: past the clip, no gradient; sample 1
    # (advantage -1) 20% likelier too: its ratio is clipped only on the other side, so it still pushes down
    g, m2 = grad(logp - math.log(1.2))
    assert torch.count_nonzero(g[0]) == 0 and torch.count_nonzero(g[1]) == 3
    assert m2["clipfrac"].item() == 1.0


TIMING = {"sps", "updates_per_s", "wall_s", "time_env_s", "time_inference_s", "time_update_s"}


def test_epsilon_soft_acting_replaces_a_share_of_the_actions_by_uniform_ones():
    """ppo.explore_eps: each action is replaced with probability eps by one drawn uniformly (so it may be the same);
    at 0 nothing changes, at 1 every action is uniform whatever the policy chose."""
    from gbxcule.rl.models import epsilon_soft

    torch.manual_seed(0)
    chosen = torch.full((80_000,), 3)
    assert torch.equal(epsilon_soft(chosen, 8, 0.0), chosen)
    counts = torch.bincount(epsilon_soft(chosen, 8, 1.0), minlength=8).float() / len(chosen)
    assert torch.allclose(counts, torch.full((8,), 1 / 8), atol=0.01)
    moved = (epsilon_soft(chosen, 8, 0.25) != 3).float().mean()
    assert abs(float(moved) - 0.25 * 7 / 8) < 0.01


def tiny(run_dir, knobs=None, total_steps=3 * 6 * 8, **run):
    return make_config(None, {"total_steps": total_steps, "env": {"num_envs": 6},
                              "ppo": {"rollout_steps": 8, "epochs": 1, "minibatches": 2, "model": "small",
                                      **(knobs or {})},
                              "run": {"run_dir": str(run_dir), "device": "cpu", "progress": False,
                                      "tensorboard": False, "checkpoint_every": 1, "eval_episodes": 0, **run}})


def metrics(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


@pytest.mark.parametrize("knobs", [{"minibatches": 3}, {"learn_share": 0.4, "channels_last": True},
                                   {"clip": 0.01, "learn_share": 0.5, "minibatches": 4},
                                   {"explore_eps": 0.5, "learn_share": 0.5}],
                         ids=["one_epoch", "share", "clip", "explore"])
def test_one_epoch_on_a_share_of_the_envs_trains_and_resumes_bit_for_bit(tmp_path, knobs):
    straight = tmp_path / "straight"
    s = train(tiny(straight, knobs))
    assert s["updates"] == 3 and s["env_steps"] == 3 * 48 and s["stopped"] == "done"
    rows = metrics(straight)
    share = knobs.get("learn_share", 1.0)
    learn = math.ceil(share * 6)
    assert sum(rows[-1]["actions"]) == 8 * learn  # the trained samples' actions: the block of learning envs
    assert all(0 <= r["approx_kl"] < 10 for r in rows) and all(0 <= r["clipfrac"] <= 1 for r in rows)
    if knobs.get("clip") == 0.01:  # a tight clip: the later minibatches find samples past it
        assert any(r["clipfrac"] > 0 for r in rows)
    if knobs.get("explore_eps"):  # the knob acts: without it the same run takes other actions
        train(tiny(tmp_path / "plain", dict(knobs, explore_eps=0.0)))
        assert [r["actions"] for r in metrics(tmp_path / "plain")] != [r["actions"] for r in rows]
    part = tmp_path / "part"
    assert train(tiny(part, knobs, stop_after_updates=1))["stopped"] == "stop_after_updates"
    assert train(tiny(part, knobs), resume=True)["updates"] == 3
    assert metrics(part) == rows
    a = torch.load(straight / "checkpoint.pt", weights_only=False)
    b = torch.load(part / "checkpoint.pt", weights_only=False)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    steps = 3 * knobs.get("minibatches", 2)  # one epoch: an optimizer step per minibatch
    assert all(st["step"].item() == steps for st in a["optimizer"]["state"].values())


@pytest.mark.parametrize("knobs", [{"overlap": True, "epochs": 2, "minibatches": 3},
                                   {"overlap": True, "learn_share": 0.5, "minibatches": 4}], ids=["all", "share"])
def test_an_overlapped_learner_trains_one_rollout_behind_and_resumes_bit_for_bit(tmp_path, knobs):
    """ppo.overlap: update k collects with the weights it began with while the learner trains on update k-1's
    rollout; the first update only collects. The waiting rollout is checkpointed with the envs, so a killed run
    resumes to the same bits."""
    straight = tmp_path / "straight"
    s = train(tiny(straight, knobs, total_steps=4 * 48))
    assert s["updates"] == 4 and s["env_steps"] == 4 * 48 and s["stopped"] == "done"
    rows = metrics(straight)
    assert "pg_loss" not in rows[0] and all(0 <= r["approx_kl"] < 10 for r in rows[1:])
    # the clip is against the learner's own policy as its update begins; the samples are weighted by its ratio to
    # the policy that acted: the same weights for update 1's rollout (trained on at update 2), one update apart after
    assert abs(rows[1]["lag_kl"]) < 1e-6 and all(r["lag_kl"] > 0 for r in rows[2:])
    # the actions logged are those of the rollout trained on: update 1's collected rollout, trained on at update 2
    assert rows[1]["actions"] == rows[0]["actions"] and sum(rows[0]["actions"]) == 8 * math.ceil(
        knobs.get("learn_share", 1.0) * 6)
    a = torch.load(straight / "checkpoint.pt", weights_only=False)
    steps = 3 * knobs.get("epochs", 1) * knobs["minibatches"]  # no optimizer step in the first update
    assert all(st["step"].item() == steps for st in a["optimizer"]["state"].values())
    assert a["extra"]["pending"]["obs"].shape[:2] == (8, math.ceil(knobs.get("learn_share", 1.0) * 6))
    part = tmp_path / "part"
    assert train(tiny(part, knobs, total_steps=4 * 48, stop_after_updates=2))["stopped"] == "stop_after_updates"
    assert train(tiny(part, knobs, total_steps=4 * 48), resume=True)["updates"] == 4
    assert metrics(part) == rows
    b = torch.load(part / "checkpoint.pt", weights_only=False)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert all(torch.equal(a["extra"]["pending"][k], b["extra"]["pending"][k]) for k in a["extra"]["pending"])


def test_an_overlapped_learner_differs_from_one_in_turn_and_needs_a_feed_forward_policy(tmp_path):
    """The acting policy of an overlapped run is one update behind: its second update's rollout is collected with
    the initial weights, so from the third on the runs part; a recurrent policy is refused."""
    plain = tmp_path / "plain"
    lagged = tmp_path / "lagged"
    train(tiny(plain, {"minibatches": 3}))
    train(tiny(lagged, {"minibatches": 3, "overlap": True}))
    p, q = metrics(plain), metrics(lagged)
    assert p[0]["actions"] == q[0]["actions"]  # the same first rollout, from the same initial weights
    a = torch.load(plain / "checkpoint.pt", weights_only=False)
    b = torch.load(lagged / "checkpoint.pt", weights_only=False)
    assert not all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    with pytest.raises(ConfigError, match="ppo.overlap needs a feed-forward policy"):
        train(tiny(tmp_path / "gru", {"gru": 8, "overlap": True}))


def test_the_learning_block_moves_on_each_update_so_every_env_takes_its_turn(tmp_path, monkeypatch):
    seen = []
    real = torch.index_select

    def spy(x, dim, index, *a, **k):
        if x.dim() >= 4 and x.dtype == torch.uint8 and index.numel() == 2:  # observations of the learning block
            seen.append(tuple(index.tolist()))
        return real(x, dim, index, *a, **k)

    monkeypatch.setattr(torch, "index_select", spy)
    train(tiny(tmp_path, {"learn_share": 0.3, "rollout_steps": 2, "minibatches": 1}, eval_episodes=0))
    blocks = list(dict.fromkeys(seen))
    assert blocks[:3] == [(0, 1), (2, 3), (4, 5)]


@pytest.mark.parametrize("bad, word", [({"learn_share": 0}, "learn_share"), ({"learn_share": 1.5}, "learn_share"),
                                       ({"learn_share": 0.2, "minibatches": 17}, "exceeds"),
                                       ({"channels_last": "yes"}, "channels_last")])
def test_bad_knobs_are_one_line(tmp_path, bad, word):
    with pytest.raises(ConfigError, match=word):
        tiny(tmp_path, bad)


@pytest.mark.parametrize("skip,levels", [(False, 0), (True, 0), (True, 3)], ids=["gru", "skip", "level_heads"])
def test_unroll_replays_acting_with_resets_at_episode_ends(skip, levels):
    """ppo.unroll (the recurrent update's forward) against acting step by step with the state reset before the step
    after an episode's end, as the eval's `policy_step` does: the same logits and values at every step, and the
    resets matter (with `gru_skip` too, whose heads also read the features; with `level_heads`, each step read by
    its shown level's heads)."""
    from gbxcule.rl.models import ActorCritic

    torch.manual_seed(1)
    model = ActorCritic(5, 1, False, "small", gru=8, gru_skip=skip, level_heads=levels)
    for head in (model.pi, model.v):  # weights large enough that the state shows in the outputs
        torch.nn.init.normal_(head.weight, std=1.0)
    t_len, n = 6, 3
    obs = torch.randint(0, 4, (t_len, n, 1, 72, 80), dtype=torch.uint8) * 60
    if levels:  # the shown row: 0, 1 or 2 milestones held (4 pixels of shade 3 each), differing across steps
        obs[..., 71, :] = 0
        held = torch.arange(t_len * n).reshape(t_len, n) % 3
        obs[..., 71, :8] = torch.where(torch.arange(8) < 4 * held[..., None, None], 3, 0).to(torch.uint8)
        assert torch.equal(model.levels(obs), held)
    dones = torch.zeros(t_len, n, dtype=torch.bool)
    dones[1, 0] = dones[3, 2] = True
    h0 = torch.randn(n, 8)
    with torch.no_grad():
        logits, values = ppo.unroll(model, obs, h0, dones)
        state, done, h = h0, None, h0
        for t in range(t_len):
            eval_logits, state = model.policy_step(obs[t], state, done)
            if t:
                h = h * (~dones[t - 1]).unsqueeze(-1).float()
            lg, v, h = model.forward_step(obs[t], h)
            # unroll runs the CNN over every step at once: float32 rounding differs from one step at a time (by
            # the outputs' size: the skip's heads read the large features of these bright screens directly)
            tol = 1e-4 * max(1.0, float(logits.abs().max()), float(values.abs().max()))
            assert torch.allclose(logits[t], eval_logits, atol=tol) and torch.allclose(logits[t], lg, atol=tol)
            assert torch.allclose(values[t], v, atol=tol)
            done = dones[t]
        no_reset, _ = ppo.unroll(model, obs, h0, torch.zeros_like(dones))
    assert torch.equal(no_reset[:2], logits[:2]) and not torch.allclose(no_reset[2, 0], logits[2, 0], atol=10 * tol)


def test_a_recurrent_policy_trains_evaluates_and_resumes_bit_for_bit(tmp_path, capsys):
    """ppo.gru: minibatches of whole env rollouts; the carried state is checkpointed, so a killed run resumes to the
    same bits; the policy evaluates through the registry with its state."""
    knobs = {"gru": 16, "minibatches": 3, "epochs": 2}
    straight = tmp_path / "straight"
    s = train(tiny(straight, knobs, eval_every=48, eval_episodes=2))  # a periodic eval each update
    assert s["updates"] == 3 and s["stopped"] == "done"
    rows = metrics(straight)
    assert sum(rows[-1]["actions"]) == 8 * 6 and all(0 <= r["approx_kl"] < 10 for r in rows)
    assert [r.get("eval/greedy_success") is not None for r in rows] == [True] * 3  # the periodic eval, recurrent
    ck = torch.load(straight / "checkpoint.pt", weights_only=False)
    assert ck["model_desc"]["gru"] == 16 and ck["extra"]["state"].shape == (6, 16)
    assert bool(ck["extra"]["state"].abs().sum() > 0)
    assert all(st["step"].item() == 3 * 2 * 3 for st in ck["optimizer"]["state"].values())
    assert main(["eval", str(straight), "--device", "cpu", "--episodes", "2", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["algo"] == "ppo" and rep["greedy"]["episodes"] == 2 and "sampled" in rep
    assert main(["eval", str(straight), "--device", "cpu", "--episodes", "2", "--json", "--greedy-only"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert "sampled" not in alone and alone["greedy"] == rep["greedy"]  # the same greedy episodes, the sampled left out
    part = tmp_path / "part"
    evals = {"eval_every": 48, "eval_episodes": 2}
    assert train(tiny(part, knobs, **evals, stop_after_updates=1))["stopped"] == "stop_after_updates"
    assert train(tiny(part, knobs, **evals), resume=True)["updates"] == 3
    clock = {"eval/elapsed_s", "eval/seconds", "eval/wall_s", "time_eval_s"}
    assert [{k: v for k, v in r.items() if k not in clock} for r in metrics(part)] == [
        {k: v for k, v in r.items() if k not in clock} for r in rows]
    b = torch.load(part / "checkpoint.pt", weights_only=False)
    assert all(torch.equal(ck["model"][k], b["model"][k]) for k in ck["model"])
    assert torch.equal(ck["extra"]["state"], b["extra"]["state"])


@pytest.mark.parametrize("skip", [False, True])
def test_a_recurrent_policy_on_a_share_of_the_envs_replays_each_blocks_acting(tmp_path, skip):
    """ppo.gru with learn_share < 1: every env carries its state, the moving block of learning envs is unrolled
    from the states those envs started the rollout with. With one epoch of one minibatch the update's first forward
    replays acting, so its ratio is 1 (approx_kl under 1e-10: float32 rounding at most); a block unrolled from other
    envs' states is not (the next test). The run resumes bit for bit. The same with `gru_skip`."""
    knobs = {"gru": 16, "learn_share": 0.5, "minibatches": 1, "epochs": 1, "lr": 1e-3, "gru_skip": skip}

    def cfg(run_dir, **run):
        c = tiny(run_dir, knobs, **run)
        c.total_steps = 5 * 48
        return c

    straight = tmp_path / "straight"
    s = train(cfg(straight))
    rows = metrics(straight)
    assert s["updates"] == 5 and [sum(r["actions"]) for r in rows] == [8 * 3] * 5  # 3 of the 6 envs each update
    assert all(r["approx_kl"] < 1e-10 and r["clipfrac"] == 0 for r in rows), [r["approx_kl"] for r in rows]
    ck = torch.load(straight / "checkpoint.pt", weights_only=False)
    assert ck["extra"]["state"].shape == (6, 16) and bool((ck["extra"]["state"].abs().sum(1) > 0).all())
    assert ck["model_desc"].get("gru_skip", False) is skip and ck["model"]["pi.weight"].shape[1] == 16 + 256 * skip
    part = tmp_path / "part"
    assert train(cfg(part, stop_after_updates=2))["stopped"] == "stop_after_updates"
    train(cfg(part), resume=True)
    assert metrics(part) == rows


def test_the_replay_check_above_sees_a_block_unrolled_from_the_wrong_states(tmp_path, monkeypatch):
    """The check's other side: the same run with each block's rollouts unrolled from the first envs' states (not
    the block's own) has a ratio away from 1 once the states differ."""
    real = ppo.unroll

    def wrong_rows(model, obs, state, dones, starts=None):
        return real(model, obs, state.roll(1, 0), dones, starts)

    monkeypatch.setattr(ppo, "unroll", wrong_rows)
    c = tiny(tmp_path, {"gru": 16, "learn_share": 0.5, "minibatches": 1, "epochs": 1, "lr": 1e-3})
    c.total_steps = 5 * 48
    train(c)
    assert max(r["approx_kl"] for r in metrics(tmp_path)) > 1e-10  # 1.5e-7 on the development machine


def test_a_recurrent_state_in_bf16_is_stored_for_a_share_of_the_envs(tmp_path, monkeypatch):
    """Under CUDA's bf16 autocast the GRU's step returns a bf16 state (the CPU device has no autocast): the block
    of learning envs' states goes into the float32 store all the same (index_select's out= would refuse it)."""
    from gbxcule.rl.models import ActorCritic

    real = ActorCritic.forward_step

    def bf16_state(self, obs, state):
        logits, value, h = real(self, obs, state)
        return logits, value, None if h is None else h.bfloat16()

    monkeypatch.setattr(ActorCritic, "forward_step", bf16_state)
    c = tiny(tmp_path, {"gru": 16, "learn_share": 0.5, "minibatches": 1, "epochs": 1})
    c.total_steps = 2 * 48
    assert train(c)["updates"] == 2
    assert all(r["approx_kl"] < 1e-3 for r in metrics(tmp_path))  # acting saw bf16-rounded states, so near 1


@pytest.mark.parametrize("bad, word", [({"gru": 8, "learn_share": 0.5, "minibatches": 4}, "group of envs"),
                                       ({"gru": 8, "minibatches": 7}, "groups of envs|num_envs"),
                                       ({"gru": 0}, "gru"), ({"gru_skip": True}, "gru_skip needs ppo.gru")])
def test_recurrent_knobs_that_cannot_work_are_one_line(tmp_path, bad, word):
    with pytest.raises(ConfigError, match=word):
        tiny(tmp_path, bad)


def test_gru_skip_heads_read_the_features_beside_the_state():
    """With the GRU's weights zero its state forgets the observation (h' = h / 2 whatever it sees): the plain recurrent
    heads then give one output for every screen, the skip's heads still tell screens apart, and a recurrent
    model without the skip keeps its checkpoint description (old checkpoints load)."""
    from gbxcule.rl.models import ActorCritic

    torch.manual_seed(2)
    obs = torch.randint(0, 4, (4, 1, 72, 80), dtype=torch.uint8)
    state = torch.randn(1, 8).expand(4, 8)
    out = {}
    for skip in (False, True):
        model = ActorCritic(5, 1, False, "small", gru=8, gru_skip=skip)
        for w in model.rnn.parameters():
            torch.nn.init.zeros_(w)
        torch.nn.init.normal_(model.pi.weight, std=1.0)
        with torch.no_grad():
            logits, value, h = model.forward_step(obs, state)
            assert torch.allclose(h, state / 2) and torch.allclose(model.value(obs, state), value)
        out[skip] = logits
        assert ("gru_skip" in model.describe()) is skip
    assert torch.allclose(out[False], out[False][:1].expand(4, 5))
    assert not torch.allclose(out[True], out[True][:1].expand(4, 5), atol=1e-3)
    with pytest.raises(ValueError, match="gru_skip needs a gru"):
        ActorCritic(5, 1, False, "small", gru_skip=True)


@pytest.mark.parametrize("arch", ["nature", "small"])
def test_the_torso_sees_every_pixel_and_the_cropped_one_misses_the_last_rows_and_columns(arch):
    """Which pixels reach the features, read off the gradient with every weight and bias positive (every ReLU
    passes, so a pixel's gradient is positive exactly where some feature's receptive field covers it): all of
    the 72x80 frame with the full view; the cropped one (older checkpoints) misses rows 68-71 and columns 76-79."""
    from gbxcule.rl.models import cnn_torso

    seen = {}
    for view in ("full", "cropped"):
        body, _ = cnn_torso(2, arch, view=view)
        with torch.no_grad():
            for p in body.parameters():
                p.copy_(p.abs() + 0.01)
        x = torch.ones(1, 2, 72, 80, requires_grad=True)
        body(x).sum().backward()
        seen[view] = (x.grad[0] > 0).all(0)
    assert bool(seen["full"].all())
    missed = torch.zeros(72, 80, dtype=torch.bool)
    missed[68:], missed[:, 76:] = True, True
    assert torch.equal(~seen["cropped"], missed)


@pytest.mark.parametrize("kind", ["ac", "gru_skip", "q_ln"])
def test_the_shown_milestones_row_moves_the_policy_with_the_full_view(kind):
    """Two frames that differ only in the last row's milestone flags (env.show_milestones) give different outputs
    from a freshly initialised model of every kind; the cropped view (older checkpoints) never told them apart
    (with layer norm, only through the first convolution's normalisation over the whole frame)."""
    from gbxcule.rl.models import ActorCritic, QNetwork

    torch.manual_seed(3)
    frame = torch.randint(0, 4, (1, 1, 72, 80), dtype=torch.uint8)
    frame[..., 71, :] = 0
    shown = frame.clone()
    shown[..., 71, 4:12] = 3  # the second and third milestones held, 4 pixels each
    for view in ("full", "cropped"):
        torch.manual_seed(4)
        model = (QNetwork(8, 1, False, "small", layer_norm=True, view=view) if kind == "q_ln"
                 else ActorCritic(8, 1, False, "small", gru=8 if kind == "gru_skip" else None,
                                  gru_skip=kind == "gru_skip", view=view))
        state = model.initial_state(2, "cpu")
        with torch.no_grad():
            out, _ = model.policy_step(torch.cat([frame, shown]), state)
        same = torch.equal(out[0], out[1])
        assert not same if view == "full" else (same or kind == "q_ln"), view
        assert model.describe()["view"] == view


@pytest.mark.parametrize("kind", ["ac", "gru_skip", "q_ln"])
def test_the_milestone_row_reaches_the_hidden_layer_as_a_vector(kind):
    """With `milestone_row` the newest frame's last row joins the flattened convolutions before the hidden layer:
    even the cropped view (whose convolutions never see that row) then tells apart two frames that differ only in
    the shown milestones, and only the newest frame's row enters; the parameters keep a plain body's names (the
    hidden layer 80 inputs wider) and the description names it only when on (older checkpoints still load)."""
    from gbxcule.rl.models import ROW, ActorCritic, QNetwork

    def build(row, view="cropped"):
        torch.manual_seed(4)
        if kind == "q_ln":
            return QNetwork(8, 2, False, "small", layer_norm=True, view=view, milestone_row=row)
        return ActorCritic(8, 2, False, "small", gru=8 if kind == "gru_skip" else None, gru_skip=kind == "gru_skip",
                           view=view, milestone_row=row)

    torch.manual_seed(3)
    frame = torch.randint(0, 4, (1, 2, 72, 80), dtype=torch.uint8)
    frame[..., 71, :] = 0
    shown, older = frame.clone(), frame.clone()
    shown[:, 1, 71, 4:12] = 3  # the newest frame: the second and third milestones held, 4 pixels each
    older[:, 0, 71, 4:12] = 3  # the same drawn in the older frame only
    for row in (False, True):
        model = build(row)
        with torch.no_grad():
            out, _ = model.policy_step(torch.cat([frame, shown, older]), model.initial_state(3, "cpu"))
        assert torch.equal(out[0], out[1]) is (not row) or kind == "q_ln" and not row
        if row and kind != "q_ln":  # the cropped convolutions see row 71 of no frame (layer norm's whole-frame
            assert torch.equal(out[0], out[2])  # statistics do, a little)
        assert model.describe().get("milestone_row", False) is row
    plain, wide = build(False).state_dict(), build(True).state_dict()
    assert list(plain) == list(wide)
    grew = [k for k in plain if plain[k].shape != wide[k].shape]
    assert len(grew) == 1 and wide[grew[0]].shape[1] == plain[grew[0]].shape[1] + ROW


@pytest.mark.parametrize("knob,value", [("milestone_row", True), ("level_heads", 3)])
def test_the_milestone_row_trains_checkpoints_and_evaluates_on_a_task_with_milestones(tmp_path, knob, value):
    """ppo.milestone_row or ppo.level_heads on quest_m1 (the flags shown): training writes its model, the checkpoint
    says so, and `gbxcule eval`'s loader rebuilds it from the run's config; without shown milestones it is one
    config line."""
    from gbxcule.rl.training import evaluate

    knobs = {knob: value, "gru": 8, "gru_skip": True, "minibatches": 1}
    c = make_config(None, {"total_steps": 3 * 6 * 8,
                           "env": {"num_envs": 6, "task": "quest_m1", "show_milestones": "auto"},
                           "ppo": {"rollout_steps": 8, "epochs": 1, "model": "small", **knobs},
                           "run": {"run_dir": str(tmp_path / "run"), "device": "cpu", "progress": False,
                                   "tensorboard": False, "eval_episodes": 0}})
    assert train(c)["updates"] == 3
    ck = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    assert ck["model_desc"][knob] == value
    rep = evaluate(tmp_path / "run", episodes=2, device="cpu", modes=("greedy",))
    assert rep["greedy"]["episodes"] == 2
    with pytest.raises(ConfigError, match=f"ppo.{knob} reads the milestones env.show_milestones draws"):
        tiny(tmp_path / "off", knobs)


@pytest.mark.parametrize("task,level", [("quest_m1", 0), ("quest_m2", 1)])
def test_level_heads_log_each_levels_entropy_over_its_samples(tmp_path, task, level):
    """With `level_heads`, each update logs `samples_by_level` (the learner's samples by the level their
    observation shows, every epoch's) and `entropy_by_level` (their policy's mean entropy, 0 where none): from
    quest_m1's start (nothing held) and quest_m2's (MOM held) every sample is on that level, the counts add up to the
    update's samples and the level's entropy is the update's logged entropy (one minibatch, one epoch); without
    level heads neither is logged. TensorBoard gets `entropy/level_J` for the levels with samples only."""
    import json

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def run(name, heads):
        c = make_config(None, {"total_steps": 2 * 8 * 6,
                               "env": {"num_envs": 6, "task": task, "show_milestones": "auto"},
                               "ppo": {"rollout_steps": 8, "epochs": 1, "minibatches": 1, "model": "small",
                                       "level_heads": heads},
                               "run": {"run_dir": str(tmp_path / name), "device": "cpu", "progress": False,
                                       "tensorboard": heads > 0, "eval_episodes": 0}})
        assert train(c)["updates"] == 2
        return [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]

    rows = run("heads", 3)
    for row in rows:
        want = [0, 0, 0]
        want[level] = 8 * 6
        assert row["samples_by_level"] == want
        assert row["entropy_by_level"][level] == pytest.approx(row["entropy"], rel=1e-5)
        assert [x for j, x in enumerate(row["entropy_by_level"]) if j != level] == [0.0, 0.0]
    ev = EventAccumulator(str(tmp_path / "heads" / "tb"))
    ev.Reload()
    assert {t for t in ev.Tags()["scalars"] if "/level_" in t} == {f"entropy/level_{level}"}
    got = [e.value for e in ev.Scalars(f"entropy/level_{level}")]
    assert got == pytest.approx([row["entropy"] for row in rows], rel=1e-5)
    assert not any("entropy_by_level" in row or "samples_by_level" in row for row in run("plain", 0))


@pytest.mark.parametrize("packed", [False, True])
def test_level_heads_read_each_observation_by_its_shown_level(packed):
    """`level_heads` L: an observation's level is the milestones shown over its newest frame's last row (4 pixels
    of shade 3 each; packed, one byte), at most L - 1; its logits and value come from that level's heads alone (a
    change to another level's heads leaves them), so Adam steps on other levels leave a level's pair as made; the
    model without it keeps one pair of the same shapes."""
    from gbxcule.rl.goals import pack_shades
    from gbxcule.rl.models import ActorCritic

    torch.manual_seed(5)
    frames = torch.randint(0, 4, (5, 2, 72, 80), dtype=torch.uint8)
    frames[..., 71, :] = 0
    for i, held in enumerate((0, 1, 2, 5)):  # the newest frame shows `held` milestones
        frames[i, 1, 71, 8:8 + 4 * held] = 3  # (not the first: the count, not the place, is the level)
    frames[4, 0, 71, :8] = 3  # two shown in the older frame only: level 0
    obs = torch.from_numpy(pack_shades(frames.numpy())) if packed else frames
    model = ActorCritic(8, 2, packed, "small", level_heads=3)
    assert model.levels(obs).tolist() == [0, 1, 2, 2, 0]
    assert model.describe()["level_heads"] == 3
    with torch.no_grad():
        logits, value = model(obs)
        assert logits.shape == (5, 8) and value.shape == (5,)
        assert torch.equal(model.value(obs), value)
        for level in range(3):
            changed = copy.deepcopy(model)
            changed.pi.weight[level * 8:(level + 1) * 8] += 1.0
            changed.v.bias[level] += 1.0
            lg, v = changed(obs)
            moved = (lg != logits).any(-1)
            assert moved.tolist() == (model.levels(obs) == level).tolist() == (v != value).tolist()
        with pytest.raises(ValueError, match="needs each observation's level"):
            model.heads(model.features(obs))
    # what the knob is for: Adam steps on observations of levels 0 and 1 leave level 2's pair as it was made
    def pair(k):
        return [t.detach().clone() for t in (model.pi.weight[8 * k:8 * k + 8], model.pi.bias[8 * k:8 * k + 8],
                                             model.v.weight[k], model.v.bias[k])]

    fresh, level0 = pair(2), pair(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, eps=1e-5)
    for _ in range(3):
        logits, value = model(obs[[0, 1, 4]])
        loss = -torch.log_softmax(logits, -1)[:, 3].mean() + value.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert all(torch.equal(a, b) for a, b in zip(pair(2), fresh, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(pair(0), level0, strict=True))  # level 0's pair learned
    one = ActorCritic(8, 2, packed, "small")
    assert one.levels(obs) is None and "level_heads" not in one.describe()
    width = one.pi.weight.shape[1]
    assert one.pi.weight.shape == (8, width) and one.v.weight.shape == (1, width)  # older checkpoints' shapes
    assert model.pi.weight.shape == (24, width) and model.v.weight.shape == (3, width)
    for bad in (-1, True, 2.0):
        with pytest.raises(ValueError, match="level_heads"):
            ActorCritic(8, 2, packed, "small", level_heads=bad)


@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn", "pqn"])
def test_every_algorithm_builds_level_heads_from_its_config_and_refuses_them_unshown(tmp_path, algo):
    """`<algo>.level_heads` reaches the model each algorithm builds (its description names it; the policy head, or
    the Q head, has a set of action columns per level), and reads the row env.show_milestones draws: off, it is one
    config line; "auto" on a task without milestones draws a blank row."""
    from gbxcule.rl.algos import get

    env = {"num_envs": 4, "task": "quest_m1"}
    run = {"run_dir": str(tmp_path), "device": "cpu", "progress": False, "tensorboard": False}
    on = {"algo": algo, "total_steps": 100_000, algo: {"level_heads": 4, "model": "small"}, "run": run}
    cfg = make_config(None, {**on, "env": {**env, "show_milestones": "auto"}})
    model = get(algo).build_model(cfg.section, 8, cfg.env.stack_k, cfg.env.obs == "packed")
    assert model.describe()["level_heads"] == 4
    assert (model.q if algo in ("dqn", "pqn") else model.pi).out_features == 32
    with pytest.raises(ConfigError, match=f"{algo}.level_heads reads the milestones"):
        make_config(None, {**on, "env": env})
    # "auto" on a task without milestones: a blank row (level 0), recorded as "on" for evals and resumes
    bare = make_config(None, {**on, "env": {**env, "task": "leave_house", "show_milestones": "auto"}})
    assert bare.env.show_milestones == "on" and cfg.env.show_milestones == "auto"


@pytest.mark.parametrize("packed,dueling", [(False, False), (True, True)])
def test_q_level_heads_read_each_observation_by_its_shown_level(packed, dueling):
    """QNetwork with `level_heads` L: each observation's action values come from its level's Q columns (and, dueling,
    its level's V) alone, the level read as ActorCritic reads it; Adam steps on observations of other levels leave a
    level's columns as made; without it the head keeps one set of the same shapes."""
    from gbxcule.rl.goals import pack_shades
    from gbxcule.rl.models import ActorCritic, QNetwork

    torch.manual_seed(6)
    frames = torch.randint(0, 4, (5, 2, 72, 80), dtype=torch.uint8)
    frames[..., 71, :] = 0
    for i, held in enumerate((0, 1, 2, 5)):
        frames[i, 1, 71, 8:8 + 4 * held] = 3
    frames[4, 0, 71, :8] = 3  # shown in the older frame only: level 0
    obs = torch.from_numpy(pack_shades(frames.numpy())) if packed else frames
    model = QNetwork(8, 2, packed, "small", dueling=dueling, level_heads=3)
    levels = ActorCritic(8, 2, packed, "small", level_heads=3).levels(obs)
    assert levels.tolist() == [0, 1, 2, 2, 0] and model.describe()["level_heads"] == 3
    with torch.no_grad():
        q = model(obs)
        assert q.shape == (5, 8)
        for level in range(3):
            changed = copy.deepcopy(model)
            changed.q.weight[level * 8 + 1] += 1.0  # one action's column of that level
            if dueling:
                changed.v.bias[level] += 1.0
            moved = (changed(obs) != q).any(-1)
            assert moved.tolist() == (levels == level).tolist()

    def cols(k):
        return [t.detach().clone() for t in (model.q.weight[8 * k:8 * k + 8], model.q.bias[8 * k:8 * k + 8])]

    fresh, level0 = cols(2), cols(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, eps=1e-5)
    for _ in range(3):
        loss = (model(obs[[0, 1, 4]]) - 1.0).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert all(torch.equal(a, b) for a, b in zip(cols(2), fresh, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(cols(0), level0, strict=True))
    one = QNetwork(8, 2, packed, "small", dueling=dueling)
    assert "level_heads" not in one.describe() and one.q.out_features == 8
    assert model.q.out_features == 24 and (not dueling or model.v.out_features == 3)
    with pytest.raises(ValueError, match="level_heads"):
        QNetwork(8, 2, packed, "small", level_heads=True)


@pytest.mark.parametrize("algo", ["dqn", "pqn"])
def test_q_learners_with_level_heads_train_checkpoint_resume_and_evaluate(tmp_path, algo):
    """dqn/pqn.level_heads on quest_m1 (the flags shown): a run trains, its checkpoint names the heads, a resumed
    run continues bit for bit, and `gbxcule eval`'s loader rebuilds the model from the run's config."""
    from gbxcule.rl.training import evaluate

    knobs = {"dqn": {"buffer_size": 4 * 20, "batch_size": 16, "learning_starts": 20, "replay_ratio": 0.5,
                     "target_every": 2, "dueling": True, "checkpoint_buffer": True, "log_every": 6},
             "pqn": {"rollout_steps": 6, "epochs": 1, "minibatches": 2}}[algo]

    def cfg(d, **run):
        return make_config(None, {
            "algo": algo, "total_steps": 3 * 24, "env": {"num_envs": 4, "task": "quest_m1", "show_milestones": "auto"},
            algo: {**knobs, "model": "small", "level_heads": 3, "exploration_fraction": 0.5},
            "run": {"run_dir": str(d), "device": "cpu", "progress": False, "tensorboard": False, "eval_episodes": 0,
                    "checkpoint_every": 1, **run}})

    assert train(cfg(tmp_path / "whole"))["updates"] == 3
    ck = torch.load(tmp_path / "whole" / "checkpoint.pt", weights_only=False)
    assert ck["model_desc"]["level_heads"] == 3
    train(cfg(tmp_path / "part", stop_after_updates=2))
    before = torch.load(tmp_path / "part" / "checkpoint.pt", weights_only=False)["model"]
    assert train(cfg(tmp_path / "part"), resume=True)["updates"] == 3
    ck2 = torch.load(tmp_path / "part" / "checkpoint.pt", weights_only=False)
    assert all(torch.equal(ck["model"][k], ck2["model"][k]) for k in ck["model"])
    assert not all(torch.equal(before[k], ck2["model"][k]) for k in before)  # it trained after the resume
    rep = evaluate(tmp_path / "whole", episodes=2, device="cpu", modes=("greedy",))
    assert rep["greedy"]["episodes"] == 2


@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn", "pqn"])
def test_every_algorithm_builds_the_milestone_row_from_its_config_and_refuses_it_unshown(tmp_path, algo):
    """`<algo>.milestone_row` reaches the model each algorithm builds (its description names it); with
    env.show_milestones off it is one config line naming the knob; "auto" on a task without milestones draws a
    blank row."""
    from gbxcule.rl.algos import get

    env = {"num_envs": 4, "task": "quest_m1"}
    run = {"run_dir": str(tmp_path), "device": "cpu", "progress": False, "tensorboard": False}
    on = {"algo": algo, "total_steps": 100_000, algo: {"milestone_row": True, "model": "small"}, "run": run}
    cfg = make_config(None, {**on, "env": {**env, "show_milestones": "auto"}})
    model = get(algo).build_model(cfg.section, 8, cfg.env.stack_k, cfg.env.obs == "packed")
    assert model.describe()["milestone_row"] is True
    with pytest.raises(ConfigError, match=f"{algo}.milestone_row reads the milestones"):
        make_config(None, {**on, "env": env})
    # "auto" on a task without milestones: a blank row (level 0), recorded as "on" for evals and resumes
    bare = make_config(None, {**on, "env": {**env, "task": "leave_house", "show_milestones": "auto"}})
    assert bare.env.show_milestones == "on" and cfg.env.show_milestones == "auto"
