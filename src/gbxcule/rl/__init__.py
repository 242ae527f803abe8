"""Reinforcement learning on gbxcule: the device vector env, tasks and goals, trainers (docs/rl_env.md,
docs/training.md). Needs torch (`pip install -e .[rl]`)."""

from __future__ import annotations

from gbxcule.rl.env import EnvConfigError, GameEnv
from gbxcule.rl.goals import GoalTemplate, RamCondition, RewardConfig, TemplateError
from gbxcule.rl.tasks import Task, TaskError, load_task

__all__ = ["EnvConfigError", "GameEnv", "GoalTemplate", "RamCondition", "RewardConfig", "Task", "TaskError",
           "TemplateError", "load_task"]
