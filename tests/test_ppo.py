"""PPO's math (gbxcule.rl.algos.ppo.loss; GAE in gbxcule.rl.returns) on tiny tensors checked by hand or loops."""

import math

import pytest

torch = pytest.importorskip("torch")

from gbxcule.rl import returns  # noqa: E402
from gbxcule.rl.algos.ppo import loss as ppo  # noqa: E402


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
