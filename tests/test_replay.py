"""The device replay buffer and its n-step writer against a plain Python reference: random episodes with both
kinds of ends and envs ending on the same step, frame stacks rebuilt by index (synthetic frames and the real
env's), the ring wrapping, uniform and prioritized sampling, the sum-tree, checkpoints, bad sizes."""

import random

import pytest

torch = pytest.importorskip("torch")

from gbxcule.rl.replay import ReplayBuffer, ReplayError, SumTree, check_memory, plan  # noqa: E402

FRAME = (2, 3)


class FakeEnv:
    """Episodes of random length with the env's observation rules: a ring of the last K frames (the first
    frame repeated at an episode's start), SAME_STEP autoreset, `final_obs` the finished episode's last obs.
    Every frame is unique (its id in two bytes, the env in the third)."""

    def __init__(self, n, k, max_steps, p_term, seed):
        self.n, self.k, self.max_steps, self.p_term = n, k, max_steps, p_term
        self.rng = random.Random(seed)
        self.next_id = 1
        self.steps = [0] * n
        self.stacks = [[self.frame(e)] * k for e in range(n)]

    def frame(self, env):
        f = torch.zeros(FRAME, dtype=torch.uint8)
        f[0, 0], f[0, 1], f[0, 2] = self.next_id % 256, self.next_id // 256, env
        self.next_id += 1
        return f

    @property
    def obs(self):
        return torch.stack([torch.stack(s) for s in self.stacks])

    def step(self, all_end=None):
        reward = torch.tensor([self.rng.uniform(-1, 1) for _ in range(self.n)], dtype=torch.float32)
        term = torch.zeros(self.n, dtype=torch.bool)
        trunc = torch.zeros(self.n, dtype=torch.bool)
        finals = []
        for e in range(self.n):
            self.steps[e] += 1
            shifted = self.stacks[e][1:] + [self.frame(e)]
            finals.append(torch.stack(shifted))
            if all_end == "term" or (all_end is None and self.rng.random() < self.p_term):
                term[e] = True
            elif self.steps[e] >= self.max_steps:
                trunc[e] = True
            if term[e] or trunc[e]:
                self.steps[e] = 0
                self.stacks[e] = [self.frame(e)] * self.k
            else:
                self.stacks[e] = shifted
        return reward, term, trunc, torch.stack(finals)


def reference(log, t, e, n_step, gamma):
    """The n-step transition of step t of env e from the per-step log, in plain Python."""
    ret, k = 0.0, n_step
    nxt = None
    discount = gamma ** n_step
    for j in range(n_step):
        rec = log[t + j]
        ret += gamma ** j * float(rec["reward"][e])
        if rec["term"][e]:
            k, discount, nxt = j + 1, 0.0, None
            break
        if rec["trunc"][e]:
            k, discount, nxt = j + 1, gamma ** (j + 1), rec["final"][e]
            break
    if nxt is None and discount:
        nxt = log[t + k - 1]["next"][e]
    return {"obs": log[t]["obs"][e], "action": int(log[t]["action"][e]), "ret": ret, "discount": discount,
            "next": nxt}


def check_all(buf, log, n_step, gamma):
    """Every sampleable transition equals the reference; returns how many were checked."""
    lo, hi = buf.bounds()
    n = buf.plan.num_envs
    checked = 0
    for r in range(lo, hi + 1):
        b = buf.gather(torch.full((n,), r % buf.plan.rows), torch.arange(n))
        for e in range(n):
            want = reference(log, r - buf.first, e, n_step, gamma)
            assert torch.equal(b.obs[e], want["obs"]), (r, e)
            assert int(b.action[e]) == want["action"]
            assert float(b.ret[e]) == pytest.approx(want["ret"], rel=1e-5, abs=1e-6)
            assert float(b.discount[e]) == pytest.approx(want["discount"], rel=1e-6)
            if want["discount"]:
                assert torch.equal(b.next_obs[e], want["next"]), (r, e)
            checked += 1
    return checked


def drive(buf, env, steps, log, rng, check_every=1, n_step=3, gamma=0.9, num_actions=5):
    for i in range(steps):
        obs = env.obs
        action = torch.tensor([rng.randrange(num_actions) for _ in range(env.n)])
        all_end = "term" if i % 17 == 16 else None  # every env ends on the same step now and then
        reward, term, trunc, final = env.step(all_end)
        log.append({"obs": obs, "action": action, "reward": reward, "term": term, "trunc": trunc, "final": final,
                    "next": env.obs})
        buf.add(action, reward, term, trunc, final, env.obs)
        if i % check_every == 0:
            check_all(buf, log, n_step, gamma)


@pytest.mark.parametrize("k,n_step,rows,max_steps", [(1, 3, 40, 6), (3, 3, 9, 5), (2, 1, 4, 3), (4, 5, 30, 7)])
def test_writer_matches_the_python_reference(k, n_step, rows, max_steps):
    n, gamma = 5, 0.9
    rng = random.Random(k * 100 + n_step)
    env = FakeEnv(n, k, max_steps, p_term=0.12, seed=k + n_step)
    buf = ReplayBuffer(plan(rows * n, n, FRAME, k, n_step, max_steps), gamma, "cpu")
    buf.begin(env.obs)
    assert buf.size == 0
    log = []
    drive(buf, env, 70, log, rng, n_step=n_step, gamma=gamma)
    assert buf.size == (rows - k - n_step + 1) * n  # full after wrapping many times
    ends = [(bool(r["term"].any()), bool(r["trunc"].any()), int((r["term"] | r["trunc"]).sum())) for r in log]
    assert any(t for t, _, _ in ends) and any(u for _, u, _ in ends)
    assert any(c == n for _, _, c in ends)  # all envs ended on one step
    assert check_all(buf, log, n_step, gamma) == buf.size


def test_sampling_draws_only_complete_transitions_uniformly():
    n, k, n_step, gamma = 4, 2, 3, 0.95
    rng = random.Random(7)
    env = FakeEnv(n, k, 6, 0.1, seed=3)
    buf = ReplayBuffer(plan(12 * n, n, FRAME, k, n_step, 6), gamma, "cpu")
    buf.begin(env.obs)
    log = []
    drive(buf, env, 5, log, rng, check_every=10**9, n_step=n_step, gamma=gamma)
    lo, hi = buf.bounds()
    assert (lo, hi) == (buf.first, buf.first + 2) and buf.size == 3 * n  # steps 0-2 have their 3 steps
    drive(buf, env, 30, log, rng, check_every=10**9, n_step=n_step, gamma=gamma)
    torch.manual_seed(0)
    b = buf.sample(4000)
    lo, hi = buf.bounds()
    rows_abs = [lo + ((int(i) // n - lo) % buf.plan.rows) for i in b.index]
    assert min(rows_abs) == lo and max(rows_abs) == hi
    counts = torch.bincount(b.index, minlength=buf.plan.capacity).float()
    valid = counts[counts > 0]
    assert len(valid) == buf.size and valid.std() / valid.mean() < 0.3 and b.weights is None
    for j in range(0, 4000, 97):
        r, e = rows_abs[j], int(b.index[j]) % n
        want = reference(log, r - buf.first, e, n_step, gamma)
        assert torch.equal(b.obs[j], want["obs"]) and int(b.action[j]) == want["action"]
        assert float(b.ret[j]) == pytest.approx(want["ret"], rel=1e-5, abs=1e-6)
        if want["discount"]:
            assert torch.equal(b.next_obs[j], want["next"])


def test_sum_tree_samples_in_proportion_and_never_a_zero():
    tree = SumTree(10, "cpu")
    tree.set_range(0, 10, 1.0)
    assert float(tree.total) == 10.0
    pri = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 5.0, 0.0, 5.0])
    tree.set(torch.arange(10), pri)
    tree.set(torch.tensor([3, 3]), torch.tensor([3.0, 3.0]))  # repeated indices with equal values
    assert float(tree.total) == pytest.approx(20.0)
    for order in ([1.0, 3.0], [3.0, 1.0]):  # different values: the largest, whatever the order of the writes
        tree.set(torch.tensor([3, 3]), torch.tensor(order))
        assert float(tree.get(torch.tensor([3]))) == 3.0 and float(tree.total) == pytest.approx(20.0)
    torch.manual_seed(1)
    leaves = tree.sample(200_000)
    freq = torch.bincount(leaves, minlength=10).double() / 200_000
    assert torch.allclose(freq, pri.double() / 20.0, atol=0.002)
    assert int(freq[pri == 0].sum() * 200_000) == 0
    tree.set_range(7, 10, 0.0)
    assert float(tree.total) == pytest.approx(10.0)
    assert int(torch.isin(tree.sample(50_000), torch.tensor([0, 5, 6, 7, 8, 9])).sum()) == 0


def test_prioritized_buffer_samples_valid_transitions_by_priority():
    n, k, n_step = 3, 2, 2
    rng = random.Random(5)
    env = FakeEnv(n, k, 5, 0.1, seed=9)
    buf = ReplayBuffer(plan(10 * n, n, FRAME, k, n_step, 5, prioritized=True), 0.9, "cpu", alpha=1.0)
    buf.begin(env.obs)
    log = []
    drive(buf, env, 40, log, rng, check_every=10**9, n_step=n_step, gamma=0.9)
    lo, hi = buf.bounds()
    valid = {(r % buf.plan.rows) * n + e for r in range(lo, hi + 1) for e in range(n)}
    tree_valid = {int(i) for i in torch.nonzero(buf.tree.tree[buf.tree.leaves:]).flatten()}
    assert tree_valid == valid  # new transitions in at the max priority, overwritten ones out
    torch.manual_seed(2)
    b = buf.sample(3000, beta=0.5)
    assert {int(i) for i in b.index} == valid and float(b.weights.max()) == 1.0
    favourite = b.index[:1]
    buf.update_priorities(favourite, torch.tensor([3.0]))  # the others keep the first priority, 1
    b2 = buf.sample(30_000, beta=0.5)
    hit = b2.index == favourite
    assert float(hit.double().mean()) == pytest.approx(3 / (3 + len(valid) - 1), abs=0.01)
    assert float(buf.max_priority) == pytest.approx(3.0)
    assert float(b2.weights[hit].max()) == pytest.approx(3 ** -0.5, rel=1e-4)  # (N P)^-beta, scaled to max 1
    assert float(b2.weights[~hit].min()) == 1.0
    drive(buf, env, 15, log, rng, check_every=10**9, n_step=n_step, gamma=0.9)
    lo, hi = buf.bounds()
    valid = {(r % buf.plan.rows) * n + e for r in range(lo, hi + 1) for e in range(n)}
    assert {int(i) for i in torch.nonzero(buf.tree.tree[buf.tree.leaves:]).flatten()} == valid


def test_state_dict_round_trip_continues_identically():
    n, k = 3, 2
    env_a, env_b = FakeEnv(n, k, 4, 0.1, seed=1), FakeEnv(n, k, 4, 0.1, seed=1)
    p = plan(8 * n, n, FRAME, k, 2, 4, prioritized=True)
    a, b = ReplayBuffer(p, 0.9, "cpu"), ReplayBuffer(p, 0.9, "cpu")
    a.begin(env_a.obs)
    b.begin(env_b.obs)
    for i in range(25):
        for buf, env in ((a, env_a), (b, env_b)):
            reward, term, trunc, final = env.step()
            buf.add(torch.full((n,), i % 4), reward, term, trunc, final, env.obs)
        if i == 11:
            c = ReplayBuffer(p, 0.9, "cpu")
            c.load_state_dict(a.state_dict())
            a = c
    for name in ("frames", "ret", "discount", "final_frames", "depth"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert torch.equal(a.tree.tree, b.tree.tree) and a.bounds() == b.bounds()
    with pytest.raises(ReplayError, match="steps x"):
        ReplayBuffer(plan(9 * n, n, FRAME, k, 2, 4), 0.9, "cpu").load_state_dict(a.state_dict())


def test_stacks_rebuild_the_real_envs_observations():
    """A GameEnv with 2-frame stacks and a 4-step limit: every stored obs and bootstrap obs (the final obs at a
    truncation) equals what the env returned."""
    from gbxcule.rl.env import GameEnv

    n, k, n_step = 3, 2, 3
    env = GameEnv(None, n, "cpu", task="leave_house", stack_k=k, max_steps=4, keep_final_obs=True, info_mode="none",
                  start_states=["random_actions", 3, 4])
    try:
        env.reset(seed=0)
        buf = ReplayBuffer(plan(40 * n, n, (72, 80), k, n_step, 4), 0.99, "cpu")
        buf.begin(env.obs)
        gen = torch.Generator().manual_seed(0)
        log = []
        for _ in range(12):
            obs = env.obs.clone()
            action = torch.randint(0, env.num_actions, (n,), generator=gen)
            _, reward, term, trunc, _ = env.step(action)
            log.append({"obs": obs, "action": action, "reward": reward.clone(), "term": term.clone(),
                        "trunc": trunc.clone(), "final": env.final_obs.clone(), "next": env.obs.clone()})
            buf.add(action, reward, term, trunc, env.final_obs, env.obs)
        assert sum(int(r["trunc"].sum()) for r in log) >= n * 2
        assert check_all(buf, log, n_step, 0.99) == (12 - n_step + 1) * n
    finally:
        env.close()


def test_bad_sizes_are_one_line():
    with pytest.raises(ReplayError, match="needs at least 6") as exc:
        plan(5 * 16, 16, FRAME, 3, 3, 100)
    assert "\n" not in str(exc.value)
    huge = plan(10**13, 1000, (72, 80), 1, 3, 100)
    with pytest.raises(ReplayError, match="host memory") as exc:
        check_memory(huge, "cpu")
    assert "\n" not in str(exc.value) and "at most about" in str(exc.value)
    assert huge.bytes == 10**13 * (5760 + 17) + 1000 * huge.final_slots * 5760 + 1000 * (3 * 6 + 10)
