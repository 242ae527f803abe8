"""Adapters that put `GameEnv` behind the APIs users' trainers already speak: Gymnasium (`gym.py`), PufferLib 3
(`puffer.py`), Stable-Baselines3 (`sb3.py`), over what they share (`core.py`). They import the env and its
parts only (docs/adapters.md)."""
