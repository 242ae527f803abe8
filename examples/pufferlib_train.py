"""PPO on gbxcule envs through PufferLib 3's vectorisation API (`pufferlib.vector.make`, native PufferEnv).

    python examples/pufferlib_train.py            # cuda if available, else cpu (sizes below)
    python examples/pufferlib_train.py --smoke    # seconds: checks that everything runs

Defaults: on a GPU 1,024 envs and 2,000,000 env-steps; on the CPU device 8 envs and 4,096 env-steps, a minute or
two on 2 cores (enough to see it train, not to learn the task; give --total-steps for more).

The env is `GbxculePufferEnv`, a native PufferEnv that writes PufferLib's in-place buffers; the loop is the
usual `async_reset`/`send`/`recv` one. PufferLib's own trainer (`pufferlib.pufferl`) needs PufferLib's full
build (its CUDA extension and training extras); where it is installed, pass the same vecenv to it. PufferLib
is installed with scripts/install_pufferlib.sh (docs/adapters.md). Prints the success rate (the task's RAM
goal reached) from the env's PufferLib-style log infos.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn

from gbxcule.core.errors import GbxculeError


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
    p.add_argument("--task", default="leave_house")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--num-envs", type=int)
    p.add_argument("--num-steps", type=int, default=32)
    p.add_argument("--total-steps", type=int)
    p.add_argument("--max-steps", type=int, help="override the task's step limit")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a seconds-long run")
    a = p.parse_args(argv)
    # gbxcule.rl.adapters.puffer raises with the install route if pufferlib is missing (one line here, not a
    # traceback), and imports pufferlib.vector from a scratch directory (importing pufferlib links `resources`
    # into the working directory).
    try:
        from gbxcule.rl.adapters.puffer import GbxculePufferEnv, pufferlib
    except GbxculeError as exc:
        raise SystemExit(f"pufferlib_train.py: {exc}") from None
    cuda = a.device.startswith("cuda")
    if a.smoke:
        a.num_envs, a.num_steps, a.total_steps, a.max_steps = a.num_envs or 4, 8, 64, a.max_steps or 8
    a.num_envs = a.num_envs or (1024 if cuda else 8)
    a.total_steps = a.total_steps or (2_000_000 if cuda else 4_096)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    kw = dict(num_envs=a.num_envs, task=a.task, device=a.device, report_interval=a.num_steps)
    if a.max_steps:
        kw["max_steps"] = a.max_steps
    vecenv = pufferlib.vector.make(GbxculePufferEnv, backend=pufferlib.vector.PufferEnv, num_envs=1, env_kwargs=kw)
    agent = Agent(vecenv.single_observation_space.shape[0], vecenv.single_action_space.n).to(dev)
    opt = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    T, N = a.num_steps, vecenv.num_agents
    obs_buf = torch.zeros((T, N, *vecenv.single_observation_space.shape), dtype=torch.uint8, device=dev)
    act_buf = torch.zeros((T, N), dtype=torch.int64, device=dev)
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros((T, N), device=dev) for _ in range(4))

    vecenv.async_reset(a.seed)
    obs, _, term, trunc, _, _, _ = vecenv.recv()
    next_obs, next_done = torch.as_tensor(obs).to(dev), torch.zeros(N, device=dev)
    updates, start, rate = max(1, a.total_steps // (T * N)), time.time(), float("nan")
    for update in range(1, updates + 1):
        logs = []
        for t in range(T):
            obs_buf[t], done_buf[t] = next_obs, next_done
            with torch.no_grad():
                logits, value = agent(next_obs)
                dist = torch.distributions.Categorical(logits=logits)
                action = dist.sample()
            logp_buf[t], act_buf[t], val_buf[t] = dist.log_prob(action), action, value
            vecenv.send(action.cpu().numpy().astype(np.int32))
            obs, reward, term, trunc, infos, _, _ = vecenv.recv()  # PufferLib's buffers, filled in place
            next_obs = torch.as_tensor(obs).to(dev)
            rew_buf[t] = torch.as_tensor(reward).to(dev)
            next_done = torch.as_tensor(term | trunc).to(dev).float()
            logs += infos
        with torch.no_grad():  # GAE
            next_value = agent(next_obs)[1]
            adv, last = torch.zeros_like(rew_buf), torch.zeros(N, device=dev)
            for t in reversed(range(T)):
                nv, nd = (next_value, next_done) if t == T - 1 else (val_buf[t + 1], done_buf[t + 1])
                last = rew_buf[t] + 0.99 * nv * (1 - nd) - val_buf[t] + 0.99 * 0.95 * (1 - nd) * last
                adv[t] = last
            ret = adv + val_buf
        b_obs, b_act, b_logp, b_adv, b_ret = (x.flatten(0, 1) for x in (obs_buf, act_buf, logp_buf, adv, ret))
        for _ in range(1 if a.smoke else 2):
            perm = torch.randperm(T * N, device=dev)
            for i in range(0, T * N, T * N // 4):
                idx = perm[i:i + T * N // 4]
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
        eps = sum(x["episodes"] for x in logs)
        if eps:
            rate = sum(x["success_rate"] * x["episodes"] for x in logs) / eps
        print(f"update {update}/{updates}  steps {update * T * N}  {update * T * N / (time.time() - start):.0f} sps  "
              f"episodes {eps}  success rate {pct(rate)}")
    vecenv.close()
    print(f"final success rate: {pct(rate)}" + (" (no episode ended)" if np.isnan(rate) else ""))
    return rate


def pct(x: float) -> str:
    return "-" if np.isnan(x) else f"{100 * x:.1f}%"


if __name__ == "__main__":
    main()
