"""The step kernel: one thread per env runs a step's frames (kernels/frame.py), from its fields to its fields.

`load_kernels` builds one variant: its stage's epilogue (`STAGES`), drawing or lean (`draws`), the flat or the
nested instruction loop (`flat`, kernels/frame.py), and an optional register cap. Each variant is its own Warp
module (`gbxcule_step_...`), so its switches are constants when Warp generates its code (`wp.static`), and
Warp's kernel cache keys it by that code. docs/step_abi.md describes the launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import warp as wp

from gbxcule.kernels.bus import INT_JOYPAD
from gbxcule.kernels.frame import frame_func
from gbxcule.kernels.gen import load_ops
from gbxcule.kernels.mbc import rtc_advance
from gbxcule.kernels.render import fill_frame
from gbxcule.kernels.state import BIG, Gb, Mem

# The step kernel's epilogue per stage: "reward" writes rewards[e] (reward v0) after the step's last frame. The
# observation of `obs_only` and `full_step` is not written here: the backend launches `render.obs_kernel` after
# the step, one thread per 4 pixels, whose loads and stores coalesce (inside the step kernel, a thread per env
# read its own frame 23 KB from its neighbours': a quarter of the drawn launch's time on OVERWORLD,
# docs/rendering.md). Stages that differ only in the observation share one kernel.
STAGES: dict[str, str] = {"emulate_only": "none", "reward_only": "reward", "obs_only": "none", "full_step": "reward"}


@wp.func
def thread_env(perm: wp.array(dtype=wp.int32), t: wp.int32, n: wp.int32) -> wp.int32:
    """The env thread t runs: perm[t] when the backend sorted the envs (perm holds n entries), else t."""
    e = t
    if perm.shape[0] == n:
        e = perm[t]
        if e < 0 or e >= n:
            e = t
    return e


@dataclass(frozen=True)
class StepKernels:
    """One variant of the step kernel (`load_kernels`)."""

    step_kernel: wp.Kernel

    @property
    def module(self) -> wp.Module:
        """Its Warp module (for `wp.load_module`, `wp.force_load`, `wp.compile_aot_module`)."""
        return self.step_kernel.module


def step_kernel_func(module: str, draws: bool, reward: bool, flat: bool, max_registers: int | None):
    """The step kernel (a `wp.Kernel`) of one variant, with its functions, registered in the Warp module `module`."""
    ops = load_ops()
    load_fields, store_fields, shift_cycles = ops.load_fields, ops.store_fields, ops.shift_cycles
    run_frame = frame_func(module, ops, flat)

    @wp.func(module=module, name="rebase")
    def rebase(g: wp.ref[Gb]):
        """Keep cycle counts small: shift every absolute cycle field so that g.cycles is 0. The RTC's
        last-access count is the one that can lag far behind (it moves only on RTC accesses): past 2^30
        cycles (256 s) it is caught up first, so the int32 difference never wraps."""
        if g.cycles - g.rtc_last > 0x40000000:
            rtc_advance(g, g.cycles)
        c = g.cycles
        shift_cycles(g, c)

    @wp.kernel(module=module, name="step_kernel", enable_backward=False, cuda_max_registers=max_registers)
    def step_kernel(fields: wp.array(dtype=wp.int32), mem: Mem, actions: wp.array(dtype=wp.int32),
                    masks: wp.array(dtype=wp.int32), num_actions: wp.int32, frame_begin: wp.int32,
                    frame_end: wp.int32, frames_per_step: wp.int32, release_after: wp.int32,
                    stop_at_boot_exit: wp.int32, render: wp.int32,
                    rewards: wp.array(dtype=wp.float32), reward_lo: wp.int32,
                    reward_hi: wp.int32, perm: wp.array(dtype=wp.int32), resume: wp.int32, stop_dot: wp.int32,
                    waited: wp.array(dtype=wp.int32)):
        """Run frames [frame_begin, frame_end) of a step of frames_per_step frames in every env (a step may
        take several launches). render: 0 draw nothing, 1 draw the step's last frame, 2 every frame (the lean
        variant, `draws` off, draws nothing whatever render says).
        Thread t runs env perm[t] when perm holds n entries (envs grouped by state share warps), else env t.
        A frame may take several launches too: `resume` 1 continues frame_begin where the last launch left it,
        and the last frame stops at PPU dot `stop_dot` (BIG: at its end; see run_frame).
        With `reward`, the launch that ends the step writes rewards[e] (`STAGES`)."""
        t = wp.tid()
        n = mem.n_envs
        e = thread_env(perm, t, n)
        g = Gb()
        load_fields(g, fields, e)
        g.env = e
        g.n = n
        g.render = 0
        g.dma_mark = -1
        g.polling = 0
        g.waited = 0
        g.spr_ok = 0
        if frame_begin == 0 and resume == 0:
            rebase(g)  # cycle fields count from the start of the step, however many launches it takes
        action = actions[e]
        if action < 0 or action >= num_actions:
            action = 0
        dpad = masks[action * 2]
        buttons = masks[action * 2 + 1]
        for frame in range(frame_begin, frame_end):
            fresh = wp.where(resume != 0 and frame == frame_begin, 0, 1)
            if fresh == 0:
                pass  # the frame's start ran in an earlier launch
            elif frame == 0:
                if release_after > 0 and (dpad | buttons) != 0:
                    g.if_ = g.if_ | INT_JOYPAD  # buttons go down at the start of the step
                if release_after > 0:
                    g.joy_dpad = 15 & ~dpad
                    g.joy_buttons = 15 & ~buttons
                else:
                    g.joy_dpad = 15
                    g.joy_buttons = 15
            elif frame == release_after:
                g.joy_dpad = 15
                g.joy_buttons = 15
            if wp.static(draws):
                draw = wp.where(render == 2 or (render == 1 and frame == frames_per_step - 1), 1, 0)
            else:
                draw = 0
            if fresh != 0 and draw != 0 and g.render == 0 and g.screen_fill != 0:
                fill_frame(g, mem, g.screen_fill - 1)  # the screen was blanked while nothing was drawn
            g.render = draw
            run_frame(g, mem, stop_at_boot_exit, fresh, wp.where(frame == frame_end - 1, stop_dot, BIG))
            if stop_at_boot_exit != 0 and g.bootrom == 0:
                break
        if wp.static(reward):
            if frame_end >= frames_per_step and stop_dot == BIG:  # only the launch that ends the step
                # reward v0: (A + the bytes of WRAM[reward_lo, reward_hi)) mod 256, scaled to [0, 1]
                acc = g.a
                i = reward_lo
                while i < reward_hi:
                    acc = acc + wp.int32(mem.ram[g.env, mem.wram + ((i - 0xC000) & 0x1FFF)])
                    i = i + 1
                rewards[e] = wp.float32(acc & 0xFF) / 255.0
        # The env index again, from memory: store addresses computed afresh here cost less than keeping the
        # load's 64-bit addresses live (spilled) through the whole step.
        e = thread_env(perm, t, n)
        store_fields(g, fields, e)
        if g.waited != 0:
            waited[e] = waited[e] + g.waited  # (wraps, as `instructions` does)

    return step_kernel


@cache
def load_kernels(max_registers: int | None = None, stage: str = "emulate_only", draws: bool = True,
                 flat: bool = False) -> StepKernels:
    """The step kernel for one stage (stages with the same epilogue share one). `max_registers` caps the CUDA
    registers per thread (None: the compiler's choice); lower caps trade spills for occupancy, and lose (see
    BENCHMARKS.md). `draws=False` builds the lean kernel for frames that draw nothing: the render argument is
    ignored, `g.render` is always 0, and the compiler drops the renderer (on CUDA 30% of the code and three
    quarters of the spill stack). `flat` picks run_frame's instruction loop (kernels/frame.py)."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
    epilogue = STAGES[stage]
    first = next(s for s in STAGES if STAGES[s] == epilogue)  # one module per epilogue
    if first != stage:
        return load_kernels(max_registers, first, draws, flat)
    name = (f"gbxcule_step_{epilogue}_{'draw' if draws else 'lean'}_{'flat' if flat else 'nested'}"
            f"{f'_r{max_registers}' if max_registers else ''}")
    return StepKernels(step_kernel_func(name, draws, epilogue == "reward", flat, max_registers))
