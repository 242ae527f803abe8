"""Throughput through each RL adapter: env-steps/s of random actions (docs/adapters.md).

    python scripts/bench/bench_adapters.py --device cuda --envs 1024,16384 --steps 300 [--out FILE]

Rows: `GameEnv` direct (torch actions on the device), Gymnasium numpy (one device-to-host copy a step) and
torch, PufferLib native PufferEnv, SB3 VecEnv, each at every --envs count; and PyBoy baselines on
--pyboy-workers processes through the same libraries: Gymnasium AsyncVectorEnv, PufferLib Multiprocessing
and SB3 SubprocVecEnv over a small PyBoy Gymnasium env (written here, for this benchmark only: one PyBoy,
the same action schedule, the screen's last frame as [1, 72, 80] shades). Each adapter's overhead is its
loss against `GameEnv` direct at the same count. A library that is not installed is skipped with a note.
Prints a table; writes JSON to --out, or to $OUT/bench_adapters.json when $OUT is set.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import sys
import time
import traceback

import gymnasium
import numpy as np

OBS = (1, 72, 80)


# --- a small PyBoy Gymnasium env (benchmark only) -----------------------------------------------------------
class PyBoyPixelsEnv(gymnasium.Env):
    """One PyBoy under gbxcule's action schedule; obs: the last frame, 2x downsampled shades [1, 72, 80];
    reward 0; truncated after `max_steps` (then it restarts from power-on on reset)."""

    def __init__(self, rom_path: str, max_steps: int = 100):
        from gbxcule.core.action_codec import get_codec
        from gbxcule.core.schedule import ActionSchedule

        self.rom_path, self.max_steps = rom_path, max_steps
        self.codec = get_codec("pokemonred_puffer_v1")
        self.schedule = ActionSchedule(24, 8)
        self.observation_space = gymnasium.spaces.Box(0, 3, OBS, np.uint8)
        self.action_space = gymnasium.spaces.Discrete(self.codec.num_actions)
        self.pyboy, self.t = None, 0

    def _obs(self) -> np.ndarray:
        from gbxcule.core.screen import pyboy_shades

        return np.minimum(pyboy_shades(self.pyboy.screen.ndarray)[::2, ::2], 3)[None]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.pyboy is None:
            from gbxcule.backends.pyboy_single import new_pyboy
            from gbxcule.core.cartridge import load_rom

            self.pyboy = new_pyboy(load_rom(self.rom_path))
        self.t = 0
        self.pyboy.tick(1, True)
        return self._obs(), {}

    def step(self, action):
        buttons = self.codec.pyboy_buttons(int(action))
        rel, fps = self.schedule.release_after_frames, self.schedule.frames_per_step
        for b in buttons:
            self.pyboy.button_press(b)
        self.pyboy.tick(rel, False)
        for b in buttons:
            self.pyboy.button_release(b)
        self.pyboy.tick(fps - rel - 1, False)
        self.pyboy.tick(1, True)
        self.t += 1
        return self._obs(), 0.0, False, self.t >= self.max_steps, {}

    def close(self):
        if self.pyboy is not None:
            self.pyboy.stop(save=False)
            self.pyboy = None


def _pyboy_env_fn(rom_path: str):
    return lambda: PyBoyPixelsEnv(rom_path)


def _puffer_pyboy(rom_path: str, buf=None, seed=0):
    from pufferlib.emulation import GymnasiumPufferEnv

    return GymnasiumPufferEnv(PyBoyPixelsEnv(rom_path), buf=buf, seed=seed)


# --- timing -------------------------------------------------------------------------------------------------
def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _time(step, steps: int, warmup: int, device: str) -> float:
    for i in range(warmup):
        step(i)
    _sync(device)
    t = time.perf_counter()
    for i in range(steps):
        step(i)
    _sync(device)
    return time.perf_counter() - t


def _actions_np(n: int, k: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 8, size=(k, n)).astype(np.int64)


def bench_gbxcule(kind: str, n: int, a) -> dict:
    import torch

    kw = {"task": a.task}
    acts = _actions_np(n, 16)
    if kind == "direct":
        from gbxcule.rl import GameEnv

        env = GameEnv(num_envs=n, device=a.device, info_mode="none", **kw)
        env.reset(seed=0)
        act = torch.zeros(n, dtype=torch.int64, device=env.device)
        gen = torch.Generator(device=env.device).manual_seed(0)

        def step(i):
            torch.randint(0, 8, (n,), generator=gen, device=env.device, out=act)
            env.step(act)
    elif kind in ("gym_numpy", "gym_torch"):
        env = gymnasium.make_vec("gbxcule/Overworld-" + "".join(w.capitalize() for w in a.task.split("_")) + "-v0",
                                 num_envs=n, device=a.device, array=kind[4:])
        env.reset(seed=0)
        if kind == "gym_torch":
            act = torch.zeros(n, dtype=torch.int64, device=env.unwrapped.device)
            gen = torch.Generator(device=env.unwrapped.device).manual_seed(0)

            def step(i):
                torch.randint(0, 8, (n,), generator=gen, device=act.device, out=act)
                env.step(act)
        else:
            def step(i):
                env.step(acts[i % 16])
    elif kind == "puffer":
        from gbxcule.rl.adapters.puffer import GbxculePufferEnv, pufferlib

        env = pufferlib.vector.make(GbxculePufferEnv, backend=pufferlib.vector.PufferEnv, num_envs=1,
                                    env_kwargs=dict(num_envs=n, device=a.device, **kw))
        env.async_reset(0)
        env.recv()
        acts32 = acts.astype(np.int32)

        def step(i):
            env.send(acts32[i % 16])
            env.recv()
    elif kind == "sb3":
        from gbxcule.rl.adapters.sb3 import GbxculeVecEnv

        env = GbxculeVecEnv(num_envs=n, device=a.device, **kw)
        env.reset()

        def step(i):
            env.step_async(acts[i % 16])
            env.step_wait()
    else:
        raise ValueError(kind)
    try:
        dt = _time(step, a.steps, a.warmup, a.device)
    finally:
        env.close()
        gc.collect()
        if a.device.startswith("cuda"):
            torch.cuda.empty_cache()
    row = {"adapter": kind, "backend": "gbxcule", "num_envs": n, "steps": a.steps, "seconds": dt,
           "env_steps_per_s": n * a.steps / dt}
    if kind in ("gym_numpy", "puffer", "sb3"):
        row["d2h_bytes_per_step"] = n * (int(np.prod(OBS)) + 16)  # obs + reward, return, length, 4 flags
    return row


def bench_pyboy(kind: str, a) -> dict:
    from gbxcule.roms import resolve_rom

    rom = str(resolve_rom("OVERWORLD"))
    n, w = a.pyboy_envs, a.pyboy_workers
    acts = _actions_np(n, 16)
    if kind == "gym_async":
        env = gymnasium.vector.AsyncVectorEnv([_pyboy_env_fn(rom) for _ in range(n)],
                                              autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)
        env.reset(seed=0)

        def step(i):
            env.step(acts[i % 16])
    elif kind == "puffer_mp":
        from gbxcule.backends.pyboy_puffer_vec import import_pufferlib_vector

        pvec = import_pufferlib_vector()
        env = pvec.make(_puffer_pyboy, env_args=[rom], num_envs=n, backend=pvec.Multiprocessing, num_workers=w,
                        batch_size=n)
        env.async_reset(0)
        env.recv()
        acts32 = acts.astype(np.int32)

        def step(i):
            env.send(acts32[i % 16])
            env.recv()
    elif kind == "sb3_subproc":
        from stable_baselines3.common.vec_env import SubprocVecEnv

        env = SubprocVecEnv([_pyboy_env_fn(rom) for _ in range(n)])
        env.reset()

        def step(i):
            env.step(acts[i % 16])
    else:
        raise ValueError(kind)
    steps = a.pyboy_steps
    try:
        dt = _time(step, steps, min(a.warmup, 5), "cpu")
    finally:
        env.close()
    return {"adapter": kind, "backend": "pyboy", "num_envs": n, "workers": w, "steps": steps, "seconds": dt,
            "env_steps_per_s": n * steps / dt}


NEEDS = {"puffer": "pufferlib", "sb3": "stable_baselines3", "puffer_mp": "pufferlib",
         "sb3_subproc": "stable_baselines3"}


def _have(kind: str) -> str | None:
    """None if the library is importable, else a note."""
    lib = NEEDS.get(kind)
    if lib is None:
        return None
    if lib == "pufferlib":
        try:
            from gbxcule.backends.pyboy_puffer_vec import import_pufferlib_vector

            import_pufferlib_vector()
            return None
        except Exception as exc:  # noqa: BLE001
            return f"skipped {kind}: {exc}"
    try:
        __import__(lib)
        return None
    except ImportError:
        return f"skipped {kind}: {lib} not installed"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--envs", default="1024,16384", help="comma-separated env counts for the gbxcule rows")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--task", default="leave_house")
    p.add_argument("--adapters", default="direct,gym_numpy,gym_torch,puffer,sb3")
    p.add_argument("--pyboy", default="gym_async,puffer_mp,sb3_subproc", help="PyBoy rows ('' for none)")
    p.add_argument("--pyboy-workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--pyboy-envs", type=int, help="PyBoy envs (default: --pyboy-workers; one per process)")
    p.add_argument("--pyboy-steps", type=int, default=100)
    p.add_argument("--out", help="JSON output (default $OUT/bench_adapters.json when $OUT is set)")
    a = p.parse_args(argv)
    a.pyboy_envs = a.pyboy_envs or a.pyboy_workers
    import torch

    import gbxcule.rl  # noqa: F401  (registers the gymnasium ids)

    rows, notes = [], []
    for n in [int(x) for x in a.envs.split(",") if x]:
        for kind in [k for k in a.adapters.split(",") if k]:
            note = _have(kind)
            if note:
                notes.append(note)
                continue
            try:
                rows.append(bench_gbxcule(kind, n, a))
            except Exception as exc:  # noqa: BLE001  (a failing row is reported, the others still run)
                notes.append(f"{kind} at {n} envs failed: {type(exc).__name__}: {exc}")
                traceback.print_exc()
            print(rows[-1] if rows else "", file=sys.stderr)
    for kind in [k for k in a.pyboy.split(",") if k]:
        note = _have(kind)
        if note:
            notes.append(note)
            continue
        try:
            rows.append(bench_pyboy(kind, a))
        except Exception as exc:  # noqa: BLE001
            notes.append(f"pyboy {kind} failed: {type(exc).__name__}: {exc}")
            traceback.print_exc()
    direct = {r["num_envs"]: r["env_steps_per_s"] for r in rows if r["adapter"] == "direct"}
    for r in rows:
        base = direct.get(r["num_envs"]) if r["backend"] == "gbxcule" else None
        r["overhead_vs_direct"] = None if base is None else 1.0 - r["env_steps_per_s"] / base
    gpu = torch.cuda.get_device_name() if a.device.startswith("cuda") and torch.cuda.is_available() else None
    result = {"device": a.device, "gpu": gpu, "cpu_count": os.cpu_count(), "platform": platform.platform(),
              "task": a.task, "rows": rows, "notes": notes}
    print(f"{'adapter':<12} {'backend':<8} {'envs':>7} {'env-steps/s':>13} {'overhead':>9}")
    for r in rows:
        ov = "" if r["overhead_vs_direct"] is None else f"{100 * r['overhead_vs_direct']:.1f}%"
        print(f"{r['adapter']:<12} {r['backend']:<8} {r['num_envs']:>7} {r['env_steps_per_s']:>13,.0f} {ov:>9}")
    for note in notes:
        print("note:", note)
    out = a.out or (os.path.join(os.environ["OUT"], "bench_adapters.json") if os.environ.get("OUT") else None)
    if out:
        with contextlib.suppress(FileExistsError):
            os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(result, f, indent=2)
        print("wrote", out)
    return result


if __name__ == "__main__":
    main()
