"""Shared value functions against plain Python references: lambda-returns (PQN's Q(lambda) targets) with both
kinds of episode ends, n-step returns (the replay writer's), the epsilon schedule."""

import random

import pytest

torch = pytest.importorskip("torch")

from gbxcule.rl import returns  # noqa: E402


def random_rollout(t_len, n, seed):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(t_len, n, generator=g)
    values = torch.randn(t_len, n, generator=g)
    last = torch.randn(n, generator=g)
    final_values = torch.randn(t_len, n, generator=g)
    u = torch.rand(t_len, n, generator=g)
    term = u < 0.12
    trunc = (u >= 0.12) & (u < 0.22)
    term[3] = True  # every env ends on the same step
    trunc[3] = False
    return rewards, values, last, final_values, term, trunc


def lambda_reference(rewards, values, last, final_values, term, trunc, gamma, lam):
    t_len, n = rewards.shape
    out = [[0.0] * n for _ in range(t_len)]
    for e in range(n):
        g = float(last[e])
        for t in reversed(range(t_len)):
            next_v = float(last[e]) if t == t_len - 1 else float(values[t + 1, e])
            r = float(rewards[t, e])
            if term[t, e]:
                g = r
            elif trunc[t, e]:
                g = r + gamma * float(final_values[t, e])
            else:
                g = r + gamma * ((1 - lam) * next_v + lam * g)
            out[t][e] = g
    return torch.tensor(out)


@pytest.mark.parametrize("lam", [0.0, 0.65, 1.0])
def test_lambda_returns_match_the_reference_and_gae(lam):
    rewards, values, last, final_values, term, trunc = random_rollout(12, 7, seed=int(lam * 100))
    gamma = 0.97
    got = returns.lambda_returns(rewards, values, term | trunc, last, gamma, lam, trunc, final_values)
    want = lambda_reference(rewards, values, last, final_values, term, trunc, gamma, lam)
    assert torch.allclose(got, want, atol=1e-5)
    _, gae_ret = returns.gae(rewards, values, term | trunc, last, gamma, lam, trunc, final_values)
    assert torch.allclose(got, gae_ret, atol=1e-5)  # the same targets GAE's returns are
    if lam == 0.0:  # one-step Q-learning targets
        nxt = torch.cat([values[1:], last[None]])
        one = rewards + gamma * torch.where(trunc, final_values, nxt * ~term)
        assert torch.allclose(got, torch.where(term, rewards, one), atol=1e-6)
    with pytest.raises(ValueError, match="final_values"):
        returns.lambda_returns(rewards, values, term, last, gamma, lam, trunc)


def nstep_reference(rewards, term, trunc, gamma):
    n, envs = rewards.shape
    out = []
    for e in range(envs):
        ret, k, disc, final = 0.0, n, gamma ** n, False
        for j in range(n):
            ret += gamma ** j * float(rewards[j, e])
            if term[j, e]:
                k, disc = j + 1, 0.0
                break
            if trunc[j, e]:
                k, disc, final = j + 1, gamma ** (j + 1), True
                break
        out.append((ret, disc, k, final))
    return out


@pytest.mark.parametrize("n", [1, 2, 5])
def test_nstep_returns_match_the_reference(n):
    rng = random.Random(n)
    envs = 40
    rewards = torch.tensor([[rng.uniform(-1, 1) for _ in range(envs)] for _ in range(n)])
    kind = [[rng.choice("....tT") for _ in range(envs)] for _ in range(n)]
    kind[0][0] = "t"
    for j in range(n):  # env 1 truncates on the last step
        kind[j][1] = "T" if j == n - 1 else "."
    for e in range(2, 6):  # several envs ending on the same step, by both kinds
        kind[0][e] = "tT"[e % 2]
    term = torch.tensor([[c == "t" for c in row] for row in kind])
    trunc = torch.tensor([[c == "T" for c in row] for row in kind])
    ret, disc, k, final = returns.nstep_returns(rewards, term, trunc, 0.9)
    for e, (r, d, kk, f) in enumerate(nstep_reference(rewards, term, trunc, 0.9)):
        assert float(ret[e]) == pytest.approx(r, rel=1e-5, abs=1e-6)
        assert float(disc[e]) == pytest.approx(d, rel=1e-6)
        assert int(k[e]) == kk and bool(final[e]) == f
    assert bool(final[1]) and int(k[1]) == n and float(disc[0]) == 0.0 and int(k[0]) == 1


def test_linear_decay():
    assert returns.linear_decay(1.0, 0.1, 0, 100) == 1.0
    assert returns.linear_decay(1.0, 0.1, 50, 100) == pytest.approx(0.55)
    assert returns.linear_decay(1.0, 0.1, 100, 100) == pytest.approx(0.1)
    assert returns.linear_decay(1.0, 0.1, 10**6, 100) == pytest.approx(0.1)


def test_minibatches_partition_the_batch():
    g = torch.Generator().manual_seed(0)
    mbs = returns.minibatches(10, 3, g, "cpu")
    assert [len(m) for m in mbs] == [4, 3, 3]
    assert sorted(torch.cat(mbs).tolist()) == list(range(10))
    with pytest.raises(ValueError):
        returns.minibatches(4, 5, g, "cpu")


def test_truncated_values_evaluate_only_truncated_steps_in_chunks():
    g = torch.Generator().manual_seed(3)
    final_obs = torch.randn(5, 7, 2, generator=g)
    truncated = torch.rand(5, 7, generator=g) < 0.3
    seen = []

    def value(o):
        seen.append(len(o))
        return o.sum(-1).double()  # any dtype comes back float32

    out = returns.truncated_values(value, final_obs, truncated, chunk=3)
    want = torch.where(truncated, final_obs.sum(-1), torch.zeros(()))
    assert out.dtype == torch.float32 and torch.equal(out, want.float())
    count = int(truncated.sum())
    assert sum(seen) == count and max(seen) <= 3  # only the truncated steps, at most a chunk at a time
    assert not returns.truncated_values(value, final_obs, torch.zeros(5, 7, dtype=torch.bool)).any()
    # a recurrent model's value reads each truncated step's own state beside its last observation
    states = torch.randn(5, 7, 4, generator=g)
    out = returns.truncated_values(lambda o, h: o.sum(-1) * h[:, 0], final_obs, truncated, chunk=2, states=states)
    assert torch.equal(out, torch.where(truncated, final_obs.sum(-1) * states[..., 0], torch.zeros(())))


def test_policy_over_a_batch_in_chunks_is_the_whole_batch_at_once():
    """returns.policy_over (ppo.overlap's proximal pass): the log-probabilities of the taken actions and the values,
    the same in any chunking as a whole-batch Categorical, with no graph kept."""
    g = torch.Generator().manual_seed(5)
    w = torch.randn(6, 5, generator=g, requires_grad=True)

    def net(x):
        h = x @ w
        return h[:, :4], h[:, 4]

    obs, actions = torch.randn(23, 6, generator=g), torch.randint(0, 4, (23,), generator=g)
    logits, values = net(obs)
    want = torch.distributions.Categorical(logits=logits).log_prob(actions)
    for chunk in (1, 5, 23, 64):
        logp, val = returns.policy_over(net, obs, actions, chunk)
        assert torch.allclose(logp, want, atol=1e-6) and torch.allclose(val, values, atol=1e-6)
        assert logp.dtype == val.dtype == torch.float32 and not logp.requires_grad and not val.requires_grad


def test_level_means_are_each_levels_mean_over_its_samples_across_minibatches():
    """LevelMeans: over minibatches of rows (a sample may come twice, as over two epochs) the mean of each level's
    values and their count, against a plain Python tally; a level without samples reads 0 with count 0; values
    tallied with their own levels give the same; without levels nothing is kept and nothing read."""
    g = torch.Generator().manual_seed(4)
    levels = torch.randint(0, 3, (40,), generator=g)  # four levels, the last never shown
    values = torch.rand(40, generator=g)
    lm = returns.LevelMeans(4, "cpu", levels)
    batches = [torch.randperm(40, generator=g)[:15] for _ in range(4)]
    for rows in batches:
        lm.add(rows, values[rows])
    got = lm.read("entropy")
    sums, counts = [0.0] * 4, [0] * 4
    for rows in batches:
        for r in rows.tolist():
            sums[int(levels[r])] += float(values[r])
            counts[int(levels[r])] += 1
    assert got["samples_by_level"].tolist() == counts and counts[3] == 0
    assert got["entropy_by_level"].tolist() == pytest.approx([x / max(1, c) for x, c in zip(sums, counts, strict=True)],
                                                             rel=1e-5)
    own = returns.LevelMeans(4, "cpu")  # the same values, each with its own level, as A2C tallies them
    for rows in batches:
        own.tally(levels[rows], values[rows])
    assert all(torch.equal(own.read("entropy")[k], got[k]) for k in got)
    own.tally(None, values)  # no levels: nothing kept
    assert all(torch.equal(own.read("entropy")[k], got[k]) for k in got)
    none = returns.LevelMeans(0, "cpu")
    none.add(batches[0], values[batches[0]])
    none.tally(levels, values)
    assert none.read("entropy") == {}


def test_action_counts_are_bincounts():
    g = torch.Generator().manual_seed(9)
    actions = torch.randint(0, 5, (7, 11), generator=g)
    counts = returns.action_counts(actions, 7)
    assert counts.dtype == torch.int64 and counts.tolist() == torch.bincount(actions.reshape(-1), minlength=7).tolist()
