"""Evaluate a trained policy: M episodes from distinct start states, greedy and sampled (docs/training.md).

Success is ground truth from the task's RAM goal where it has one; where the episode ends on a pixel
template, the report also says how often the template agreed with the RAM goal.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gbxcule.core.errors import GbxculeError
from gbxcule.rl.shell import CheckpointError, load_checkpoint, resolve_device


def _policy_from(ck: dict, env, device: str):
    from gbxcule.rl.train_ppo import config_from_dict, make_model

    cfg = config_from_dict(ck["config"])
    model = make_model(env, cfg.ppo, device)
    if ck.get("model_desc") != model.describe():
        raise CheckpointError(f"checkpoint model {ck.get('model_desc')} does not fit this env's {model.describe()}")
    model.load_state_dict(ck["model"])
    model.eval()
    return model


def random_policy(num_actions: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)

    def act(obs):
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
    for step in range(1, max_steps + 1):
        if gif_envs:
            frames.append(env.frames(range(min(gif_envs, n))))
        a = act(obs)
        obs, r, term, trunc, _ = env.step(a)
        live = ~finished
        hit = env.success & live & ~success
        steps_to_goal = torch.where(hit, step, steps_to_goal)
        success |= env.success & live
        ret += r * live
        length += live
        if env.terminate_on == "template":
            fired |= term & live
        finished |= term | trunc
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


def evaluate(source: str | Path, episodes: int = 64, device: str = "auto", task: str | None = None,
             modes=("greedy", "sampled"), gif: str | Path | None = None, gif_envs: int = 16, seed: int = 1,
             random_baseline: bool = False) -> dict:
    """Evaluate the checkpoint at `source` (a run folder or a checkpoint file) over `episodes` episodes from
    `episodes` distinct start states (reached by random prefixes from the task's start)."""
    from gbxcule.rl.train_ppo import config_from_dict, make_env

    if episodes < 1:
        raise GbxculeError(f"episodes must be >= 1, got {episodes}")
    device = resolve_device(device)
    ck = load_checkpoint(source)
    cfg = config_from_dict(ck["config"])
    if task is not None:
        cfg.env.task = task
    cfg.env.start_states = ["random_actions", episodes, 8] if episodes > 1 else cfg.env.start_states
    env = make_env(cfg.env, device, seed, num_envs=episodes, info_mode="none")
    if env.codec.name != ck.get("codec") or list(env.single_obs_shape) != list(ck.get("obs_shape", [])):
        raise CheckpointError(f"checkpoint is for codec {ck.get('codec')} and observations {ck.get('obs_shape')}, "
                              f"the env has {env.codec.name} and {list(env.single_obs_shape)}")
    model = _policy_from(ck, env, device)
    has_ram = env.ram_goal is not None
    templ = env.terminate_on == "template"
    report = {"task": env.task.id if env.task else None, "checkpoint": str(source), "device": device,
              "start_states": env.num_slots, "env_steps_trained": ck.get("global_step")}
    policies = {}
    for mode in modes:
        def act(obs, mode=mode):
            with torch.no_grad():
                logits, _ = model(obs)
            if mode == "greedy":
                return logits.argmax(-1)
            return torch.distributions.Categorical(logits=logits.float(), validate_args=False).sample()

        policies[mode] = act
    if random_baseline:
        policies["random"] = random_policy(env.num_actions, seed)
    gif_frames = {}
    for name, act in policies.items():
        torch.manual_seed(seed)
        res = run_episodes(env, act, env.max_steps, gif_envs if gif else 0)
        report[name] = summarize(res, has_ram, templ)
        gif_frames[name] = res["frames"]
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
    env.close()
    return report


def write_gif_mosaic(frames: list, path: str | Path, frame_ms: int = 120) -> None:
    """A GIF of a mosaic of envs' screens, one picture per step."""
    from gbxcule.core.outputs import write_output
    from gbxcule.core.screen import mosaic, write_gif

    if not frames:
        raise GbxculeError("no frames recorded")
    tiles = [mosaic(f) if len(f) > 1 else f[0] for f in frames]
    write_output(path, lambda tmp: write_gif(tiles, tmp, frame_ms))
