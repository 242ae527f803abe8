"""Evaluating a policy: M episodes from M distinct start states, greedy and sampled (docs/training.md).

Success is ground truth from the task's RAM goal where it has one; where the episode ends on a pixel
template, the report also says how often the template agreed with the RAM goal. The pieces here take a model
(any of `rl/models.py`, acting through its `policy_step`), never a trainer: `gbxcule eval` loads one from a
checkpoint through the algorithm registry (`rl/algos`), the training loop evaluates its live model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gbxcule.core.errors import GbxculeError

EVAL_PREFIX_LEN = 8  # eval start states: random action prefixes of 0..8 steps from the task's start
Q_SAMPLED_EPSILON = 0.05  # "sampled" for a Q-network: epsilon-greedy with this epsilon


def make_eval_env(env_cfg, episodes: int, device: str, seed: int, task: str | None = None):
    """A GameEnv of `episodes` envs, each from its own start state (random action prefixes from the task's
    start), with the config's task, ROM, goal, observations and reward."""
    import dataclasses

    from gbxcule.rl.shell import make_env

    if episodes < 1:
        raise GbxculeError(f"episodes must be >= 1, got {episodes}")
    cfg = dataclasses.replace(env_cfg, archive={}, spread_clocks=False)  # from the task's start, as it is
    if task is not None:
        cfg.task = task
    if episodes > 1:
        cfg.start_states = ["random_actions", episodes, EVAL_PREFIX_LEN]
    return make_env(cfg, device, seed, num_envs=episodes, info_mode="none")


class PolicyRunner:
    """Acts with a model in one mode: "greedy" (argmax), "sampled" (a categorical over the logits, or
    epsilon-greedy for a Q-network). Keeps a recurrent model's state, reset where an episode ended."""

    def __init__(self, model, mode: str, num_envs: int, device, epsilon: float = Q_SAMPLED_EPSILON):
        if mode not in ("greedy", "sampled"):
            raise ValueError(f"mode must be greedy or sampled, got {mode!r}")
        self.model, self.mode, self.epsilon = model, mode, epsilon
        self.state = model.initial_state(num_envs, device)

    def __call__(self, obs: torch.Tensor, done: torch.Tensor | None = None) -> torch.Tensor:
        with torch.no_grad():
            out, self.state = self.model.policy_step(obs, self.state, done)
        out = out.float()
        if self.mode == "greedy":
            return out.argmax(-1)
        if self.model.kind == "q":
            explore = torch.rand(out.shape[0], device=out.device) < self.epsilon
            return torch.where(explore, torch.randint_like(out[:, 0], out.shape[1], dtype=torch.int64),
                               out.argmax(-1))
        return torch.distributions.Categorical(logits=out, validate_args=False).sample()


def random_policy(num_actions: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)

    def act(obs, done=None):
        return torch.randint(0, num_actions, (obs.shape[0],), generator=gen).to(obs.device)

    return act


def run_episodes(env, act, max_steps: int, gif_envs: int = 0) -> dict:
    """Step every env until each has finished its first episode (or `max_steps` steps); per-env results."""
    n = env.num_envs
    finished = torch.zeros(n, dtype=torch.bool, device=env.device)
    success = torch.zeros_like(finished)
    steps_to_goal = torch.full((n,), -1, dtype=torch.int64, device=env.device)
    length = torch.zeros(n, dtype=torch.int64, device=env.device)
    ret = torch.zeros(n, dtype=torch.float32, device=env.device)
    fired = torch.zeros_like(finished)
    frames = []
    obs, _ = env.reset()
    done = None
    for step in range(1, max_steps + 1):
        if gif_envs:
            frames.append(env.frames(range(min(gif_envs, n))))
        a = act(obs, done)
        obs, r, term, trunc, _ = env.step(a)
        live = ~finished
        hit = env.success & live & ~success
        steps_to_goal = torch.where(hit, step, steps_to_goal)
        success |= env.success & live
        ret += r * live
        length += live
        if env.terminate_on == "template":
            fired |= term & live
        done = term | trunc
        finished |= done
        if bool(finished.all()):
            break
    if gif_envs:
        frames.append(env.frames(range(min(gif_envs, n))))
    return {"success": success.cpu().numpy(), "steps_to_goal": steps_to_goal.cpu().numpy(),
            "return": ret.cpu().numpy(), "length": length.cpu().numpy(), "finished": finished.cpu().numpy(),
            "template_fired": fired.cpu().numpy(), "frames": frames}


def summarize(res: dict, has_ram_goal: bool, template: bool) -> dict:
    succ = res["success"]
    steps = res["steps_to_goal"][succ]
    out = {"episodes": int(len(succ)), "success_rate": float(succ.mean()) if has_ram_goal else None,
           "median_steps": float(np.median(steps)) if steps.size else None,
           "p90_steps": float(np.percentile(steps, 90)) if steps.size else None,
           "mean_return": float(res["return"].mean()), "mean_length": float(res["length"].mean())}
    if template and has_ram_goal:
        out["template_agreement"] = float((res["template_fired"] == succ).mean())
        out["template_false_fires"] = int((res["template_fired"] & ~succ).sum())
    return out


def evaluate_model(model, env, modes=("greedy", "sampled"), seed: int = 1, random_baseline: bool = False,
                   gif: str | Path | None = None, gif_envs: int = 16) -> dict:
    """Run `model` over every env's first episode in each mode; a report with one summary per mode and the
    first mode's figures at the top level."""
    has_ram = env.ram_goal is not None
    templ = env.terminate_on == "template"
    report: dict = {"task": env.task.id if env.task else None, "device": env.device, "start_states": env.num_slots}
    policies = {mode: PolicyRunner(model, mode, env.num_envs, env.device) for mode in modes}
    if random_baseline:
        policies["random"] = random_policy(env.num_actions, seed)
    gif_frames = {}
    was_training = model.training
    model.eval()
    try:
        for name, act in policies.items():
            torch.manual_seed(seed)
            res = run_episodes(env, act, env.max_steps, gif_envs if gif else 0)
            report[name] = summarize(res, has_ram, templ)
            gif_frames[name] = res["frames"]
    finally:
        model.train(was_training)
    if gif:
        write_gif_mosaic(gif_frames[modes[0]], gif)
        report["gif"] = str(gif)
        if random_baseline:
            rp = Path(gif).with_name(Path(gif).stem + "_random" + Path(gif).suffix)
            write_gif_mosaic(gif_frames["random"], rp)
            report["gif_random"] = str(rp)
    primary = report[modes[0]]
    report.update({k: primary[k] for k in ("success_rate", "median_steps", "p90_steps", "mean_return", "episodes")})
    if "template_agreement" in primary:
        report["template_agreement"] = primary["template_agreement"]
    return report


def write_gif_mosaic(frames: list, path: str | Path, frame_ms: int = 120) -> None:
    """A GIF of a mosaic of envs' screens, one picture per step."""
    from gbxcule.core.outputs import write_output
    from gbxcule.core.screen import mosaic, write_gif

    if not frames:
        raise GbxculeError("no frames recorded")
    tiles = [mosaic(f) if len(f) > 1 else f[0] for f in frames]
    write_output(path, lambda tmp: write_gif(tiles, tmp, frame_ms))
