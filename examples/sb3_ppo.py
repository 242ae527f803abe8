"""Stable-Baselines3 PPO ("CnnPolicy") on gbxcule envs through `GbxculeVecEnv`, SB3's own VecEnv interface.

    python examples/sb3_ppo.py            # cuda if available, else cpu (sizes below)
    python examples/sb3_ppo.py --smoke    # seconds: checks that everything runs

Defaults: on a GPU 256 envs and 1,000,000 env-steps; on the CPU device 8 envs and 4,096 env-steps, a few minutes
on 2 cores (enough to see it train, not to learn the task; give --total-steps for more).

Swapping PyBoy for gbxcule is the `GbxculeVecEnv(...)` line (instead of SubprocVecEnv over PyBoy envs).
Observations are scaled to 0..255 (scale=True, the default) because CnnPolicy divides images by 255. The policy's
CNN is SB3's Nature one with its second convolution padded by one (`full_frame_cnn`): unpadded, on a 72x80 frame it
never reads the last 4 rows and 4 columns (where gbxcule draws a task's milestone flags, `show_milestones`).
Prints the success rate (the task's RAM goal reached) of the episodes finished during training. Needs the sb3 extra
(`pip install -e '.[rl,sb3]'`); without it, one line says so.
"""

from __future__ import annotations

import argparse

import torch

from gbxcule.core.errors import GbxculeError


def full_frame_cnn(base):
    """A features extractor class over SB3's `BaseFeaturesExtractor` (`base`, imported only with the extra): the
    Nature CNN (32-64-64 convolutions, 512 features) whose 4x4 convolution pads by one, so every pixel counts."""
    from torch import nn

    class FullFrameCNN(base):
        def __init__(self, observation_space, features_dim: int = 512):
            super().__init__(observation_space, features_dim)
            self.cnn = nn.Sequential(nn.Conv2d(observation_space.shape[0], 32, 8, 4), nn.ReLU(),
                                     nn.Conv2d(32, 64, 4, 2, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, 1), nn.ReLU(),
                                     nn.Flatten())
            with torch.no_grad():
                n = self.cnn(torch.zeros(1, *observation_space.shape)).shape[1]
            self.linear = nn.Sequential(nn.Linear(n, features_dim), nn.ReLU())

        def forward(self, obs):
            return self.linear(self.cnn(obs))

    return FullFrameCNN


def main(argv=None) -> float:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="leave_house")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--num-envs", type=int)
    p.add_argument("--total-steps", type=int)
    p.add_argument("--max-steps", type=int, help="override the task's step limit")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a seconds-long run")
    a = p.parse_args(argv)
    try:  # the optional extra: one line that names it, not a traceback
        from stable_baselines3 import PPO
        from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

        from gbxcule.rl.adapters.sb3 import GbxculeVecEnv
    except (GbxculeError, ImportError) as exc:
        hint = exc if isinstance(exc, GbxculeError) else "needs stable-baselines3: pip install -e '.[rl,sb3]'"
        raise SystemExit(f"sb3_ppo.py: {hint}") from None
    cuda = a.device.startswith("cuda")
    n_steps = 8 if a.smoke else 64
    if a.smoke:
        a.num_envs, a.total_steps, a.max_steps = a.num_envs or 4, 64, a.max_steps or 8
    a.num_envs = a.num_envs or (256 if cuda else 8)
    a.total_steps = a.total_steps or (1_000_000 if cuda else 4_096)
    extra = {"max_steps": a.max_steps} if a.max_steps else {}
    env = GbxculeVecEnv(num_envs=a.num_envs, task=a.task, device=a.device, **extra)
    model = PPO("CnnPolicy", env, policy_kwargs={"features_extractor_class": full_frame_cnn(BaseFeaturesExtractor)},
                n_steps=n_steps, batch_size=min(256, n_steps * a.num_envs),
                n_epochs=1 if a.smoke else 4, learning_rate=2.5e-4, ent_coef=0.01, seed=a.seed, device=a.device,
                verbose=0 if a.smoke else 1)
    model.learn(a.total_steps)
    s = env.episode_stats()  # every episode finished during training
    env.close()
    eps = s["episodes"]
    print(f"episodes {eps}  mean return {s['episode_return']:.3f}" if eps else "episodes 0  mean return -")
    print(f"success rate: {100 * s['success_rate']:.1f}%" if eps else "success rate: - (no episode ended)")
    return s["success_rate"]


if __name__ == "__main__":
    main()
