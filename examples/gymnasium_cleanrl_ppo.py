"""CleanRL-style PPO on a gbxcule Gymnasium vector env, with the whole loop on the device (array="torch").

    python examples/gymnasium_cleanrl_ppo.py            # cuda if available, else cpu (sizes below)
    python examples/gymnasium_cleanrl_ppo.py --smoke    # seconds: checks that everything runs

Defaults: on a GPU 1,024 envs and 3,000,000 env-steps; on the CPU device 8 envs and 4,096 env-steps, about a
minute on 2 cores (some 90 env-steps/s there, training included: enough to see it train, not to learn the task;
give --total-steps for more).

Swapping a PyBoy env for gbxcule is the `gymnasium.make_vec` line; the rest is CleanRL's ppo_atari loop.
Prints the success rate (the task's RAM goal reached) of the episodes finished in each update.
"""

from __future__ import annotations

import argparse
import time

import gymnasium
import numpy as np
import torch
from torch import nn

import gbxcule.rl  # noqa: F401  (registers the gymnasium ids)


class Agent(nn.Module):
    def __init__(self, k: int, n_actions: int):
        super().__init__()
        # 72x80 -> 17x19 -> 8x9: the second convolution pads by one so the frame's last rows and columns count
        self.body = nn.Sequential(nn.Conv2d(k, 16, 8, 4), nn.ReLU(), nn.Conv2d(16, 32, 4, 2, padding=1), nn.ReLU(),
                                  nn.Flatten(), nn.Linear(32 * 8 * 9, 256), nn.ReLU())
        self.actor, self.critic = nn.Linear(256, n_actions), nn.Linear(256, 1)

    def forward(self, obs):
        h = self.body(obs.float() / 3.0)  # shades 0..3
        return self.actor(h), self.critic(h).squeeze(-1)


def main(argv=None) -> float:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="gbxcule/Overworld-LeaveHouse-v0")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--num-envs", type=int)
    p.add_argument("--num-steps", type=int, default=32, help="rollout length per update")
    p.add_argument("--total-steps", type=int)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--lr", type=float, default=2.5e-4)
    p.add_argument("--max-episode-steps", type=int, help="override the task's step limit")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a seconds-long run")
    a = p.parse_args(argv)
    cuda = a.device.startswith("cuda")
    if a.smoke:
        a.num_envs, a.num_steps, a.total_steps, a.epochs = a.num_envs or 4, 8, 64, 1
        a.max_episode_steps = a.max_episode_steps or 8
    a.num_envs = a.num_envs or (1024 if cuda else 8)
    a.total_steps = a.total_steps or (3_000_000 if cuda else 4_096)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)

    extra = {"max_episode_steps": a.max_episode_steps} if a.max_episode_steps else {}
    envs = gymnasium.make_vec(a.env_id, num_envs=a.num_envs, device=a.device, array="torch", **extra)
    agent = Agent(envs.single_observation_space.shape[0], envs.single_action_space.n).to(dev)
    opt = torch.optim.Adam(agent.parameters(), lr=a.lr, eps=1e-5)
    T, N = a.num_steps, a.num_envs
    obs_buf = torch.zeros((T, N, *envs.single_observation_space.shape), dtype=torch.uint8, device=dev)
    act_buf = torch.zeros((T, N), dtype=torch.int64, device=dev)
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros((T, N), device=dev) for _ in range(4))

    next_obs, _ = envs.reset(seed=a.seed)
    next_done = torch.zeros(N, device=dev)
    updates, start, rate = max(1, a.total_steps // (T * N)), time.time(), float("nan")
    for update in range(1, updates + 1):
        for t in range(T):
            obs_buf[t].copy_(next_obs)  # the env's obs is overwritten by the next step: copy it
            done_buf[t] = next_done
            with torch.no_grad():
                logits, value = agent(next_obs)
                action = torch.distributions.Categorical(logits=logits).sample()
            logp_buf[t] = torch.distributions.Categorical(logits=logits).log_prob(action)
            act_buf[t], val_buf[t] = action, value
            next_obs, reward, term, trunc, _ = envs.step(action)
            rew_buf[t] = reward
            next_done = (term | trunc).float()
        with torch.no_grad():  # GAE
            next_value = agent(next_obs)[1]
            adv = torch.zeros_like(rew_buf)
            last = torch.zeros(N, device=dev)
            for t in reversed(range(T)):
                nv, nd = (next_value, next_done) if t == T - 1 else (val_buf[t + 1], done_buf[t + 1])
                delta = rew_buf[t] + 0.99 * nv * (1 - nd) - val_buf[t]
                last = delta + 0.99 * 0.95 * (1 - nd) * last
                adv[t] = last
            ret = adv + val_buf
        b_obs, b_act, b_logp = obs_buf.flatten(0, 1), act_buf.flatten(), logp_buf.flatten()
        b_adv, b_ret = adv.flatten(), ret.flatten()
        mb = T * N // a.minibatches
        for _ in range(a.epochs):
            perm = torch.randperm(T * N, device=dev)
            for i in range(0, T * N, mb):
                idx = perm[i:i + mb]
                logits, value = agent(b_obs[idx])
                dist = torch.distributions.Categorical(logits=logits)
                ratio = (dist.log_prob(b_act[idx]) - b_logp[idx]).exp()
                adv_mb = (b_adv[idx] - b_adv[idx].mean()) / (b_adv[idx].std() + 1e-8)
                pg = torch.max(-adv_mb * ratio, -adv_mb * ratio.clamp(0.8, 1.2)).mean()
                loss = pg + 0.5 * ((value - b_ret[idx]) ** 2).mean() - 0.01 * dist.entropy().mean()
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                opt.step()
        s = envs.unwrapped.episode_stats()  # one host read per update
        rate = s["success_rate"] if s["episodes"] else rate
        print(f"update {update}/{updates}  steps {update * T * N}  {update * T * N / (time.time() - start):.0f} sps  "
              f"episodes {s['episodes']}  return {num(s['episode_return'])}  success rate {pct(s['success_rate'])}")
    envs.close()
    print(f"final success rate: {pct(rate)}" + (" (no episode ended)" if np.isnan(rate) else ""))
    return rate


def pct(x: float) -> str:
    return "-" if np.isnan(x) else f"{100 * x:.1f}%"


def num(x: float) -> str:
    return "-" if np.isnan(x) else f"{x:.3f}"


if __name__ == "__main__":
    main()
