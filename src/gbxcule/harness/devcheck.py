"""CUDA equals CPU: the same ROMs, start state, seeds and actions must give the same bits on both devices.

Both devices run the `full_step` stage, so registers and every state field, all per-env RAM, the serial
capture, the rendered frame, the observation and the rewards are compared after every step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from gbxcule.backends.warp_vec import WarpVecBackend
from gbxcule.core.action_codec import get_codec
from gbxcule.core.cartridge import load_rom
from gbxcule.core.schedule import ActionSchedule
from gbxcule.harness.actions import make_action_gen
from gbxcule.roms import resolve_rom


@dataclass
class DeviceCheck:
    rom: str
    seed: int
    envs: int
    steps_compared: int
    ok: bool
    first_difference: str | None

    def to_dict(self) -> dict:
        return asdict(self)


def _arrays(b: WarpVecBackend) -> dict[str, np.ndarray]:
    return {"fields": b.fields.numpy(), "ram": b.ram.numpy(), "serial": b.serial.numpy(),
            "frame": b.frame_buffer().numpy(), "obs": b.obs.numpy(), "rewards": b.rewards.numpy()}


def compare_devices(rom_name: str, envs: int, steps: int, seed: int, schedule: ActionSchedule,
                    codec: str = "dmg_buttons_v0", device: str = "cuda", loop: str = "auto",
                    stream_groups: int | str = "auto") -> DeviceCheck:
    """`loop` is the compared device's instruction loop (the backend's `loop`; "auto" runs nested until the sort
    tuner's first trial, at step 12): "flat" checks the flat kernel from the first step; `stream_groups` its
    groups ("auto": one until that trial; 2: every launch in two groups, on two CUDA streams)."""
    rom = load_rom(resolve_rom(rom_name))
    cdc = get_codec(codec)
    kw = dict(num_envs=envs, codec=cdc, schedule=schedule, stage="full_step", boot="skip")
    cpu, dev = WarpVecBackend(rom, device="cpu", **kw), WarpVecBackend(rom, device=device, loop=loop,
                                                                          stream_groups=stream_groups, **kw)
    gen = make_action_gen("seeded_random", cdc, envs, seed)
    for k in range(steps):
        acts = gen(k)
        cpu.step(acts)
        dev.step(acts)
        a, b = _arrays(cpu), _arrays(dev)
        for name in a:
            if not np.array_equal(a[name], b[name]):
                return DeviceCheck(rom_name, seed, envs, k + 1, False, f"{name} differs after step {k}")
    return DeviceCheck(rom_name, seed, envs, steps, True, None)
