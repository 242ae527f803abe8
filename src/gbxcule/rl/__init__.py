"""Reinforcement learning on gbxcule: the device vector env, tasks and goals, trainers (docs/rl_env.md,
docs/training.md), adapters for Gymnasium, PufferLib and Stable-Baselines3 (docs/adapters.md). Needs torch
(`pip install -e .[rl]`). Importing it registers the Gymnasium ids (gbxcule/Game-v0 and the built-in game's
tasks, e.g. gbxcule/Overworld-LeaveHouse-v0) when gymnasium is installed; nothing is compiled at import."""

from __future__ import annotations

from gbxcule.rl.env import GameEnv
from gbxcule.rl.goals import GoalTemplate, RamCondition, RewardConfig, TemplateError
from gbxcule.rl.starts import EnvConfigError
from gbxcule.rl.tasks import Task, TaskError, load_task

__all__ = ["EnvConfigError", "GameEnv", "GoalTemplate", "RamCondition", "RewardConfig", "Task", "TaskError",
           "TemplateError", "load_task"]

try:
    import gymnasium  # noqa: F401
except ImportError:  # the adapters are optional: without gymnasium there is nothing to register
    GYM_IDS: list[str] = []
else:
    from gbxcule.rl.adapters.gym import register_envs

    GYM_IDS = register_envs()
