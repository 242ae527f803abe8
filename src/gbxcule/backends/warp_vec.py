"""`warp_vec_cpu` / `warp_vec_cuda`: N Game Boys as one Warp kernel launch per step.

All state lives in device arrays laid out by `gbxcule.core.schema`; a step is one launch of the
generated step kernel with no host synchronisation. Introspection (`get_cpu_state`, `read_memory`,
`snapshot`, `frames_host`) copies state to the host and is meant for verification, not the hot path.
Save states (`load_state`, `save_state`, `pyboy_state`) and whole env states copied on the device: a slot
store (`alloc_slots`/`load_slots`), masked saves into it (`save_slots`), masked restores from it (`restore`)
and env-to-env clones (`clone`): docs/state_format.md. This class is the only door to the kernels.

Screens (docs/rendering.md): `step(actions, render=...)` draws nothing (default), the step's last frame
(`True`/"last") or every frame ("all") into `frame_buffer()`, uint8 [N,144,160] shade indices 0-3 on the
device; `observation()` derives the 72x80 view from it on the device.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cache
from importlib import resources
from itertools import pairwise

import numpy as np

from gbxcule.backends.autotune import AUTO_CANDIDATES, Tuner
from gbxcule.backends.base import CpuState, check_actions, check_env
from gbxcule.core.action_codec import DEFAULT_CODEC, ActionCodec, get_codec
from gbxcule.core.cartridge import CartConfig, Rom, cart_config, load_rom, rom_mirror, rom_words
from gbxcule.core.errors import GbxculeError
from gbxcule.core.pyboy_state import write_pyboy_state
from gbxcule.core.savestate import decode_states, env_to_pyboy, read_state_source
from gbxcule.core.schedule import ActionSchedule
from gbxcule.core.schema import (
    BIG,
    FIELD_INDEX,
    FIELDS,
    FRAME_CYCLES,
    NUM_FIELDS,
    SERIAL_CAPTURE,
    apply_dmg_boot_values,
    power_on_fields,
    ram_layout,
)
from gbxcule.core.screen import OBS_VIEWS
from gbxcule.core.snapshot import EnvState, Snapshot, encode_snapshot, write_snapshot

RENDER_MODES = {"none": 0, "last": 1, "all": 2}
SORT_KEYS = ("pc", "path", "path_light", "stack")
DEFAULT_SORT_KEY = "path"  # docs/divergence.md, "What is built"
MAX_SORT_PARTS = 64
AUTO = "auto"  # sort_parts chosen by timing (backends/autotune.py)
OBS_STAGES = ("obs_only", "full_step")  # stages whose step ends with obs_kernel (kernels/step.py STAGES)
# The speed knobs of WarpVecBackend (results do not depend on them): what configs may set.
TUNING_OPTIONS = ("sort_envs", "sort_every", "sort_parts", "sort_key", "lean", "block_dim", "loop", "stream_groups")
LOOPS = (AUTO, "nested", "flat")  # the step kernel's instruction loop (kernels/frame.py)


def parse_sort_parts(text: str) -> int | str:
    """A sort_parts value from text (command lines, variant names): "auto" or an integer 1-MAX_SORT_PARTS."""
    if text == AUTO:
        return AUTO
    if text.isdigit() and 1 <= int(text) <= MAX_SORT_PARTS:
        return int(text)
    raise ValueError(f"sort_parts must be {AUTO!r} or an integer from 1 to {MAX_SORT_PARTS}, got {text!r}")


def parse_stream_groups(text: str) -> int | str:
    """A stream_groups value from text (command lines, variant names): "auto" or an integer >= 1 (at most the env
    count, which the backend checks)."""
    if text == AUTO:
        return AUTO
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise ValueError(f"stream_groups must be {AUTO!r} or an integer >= 1, got {text!r}")


@cache
def pyboy_boot_rom() -> bytes:
    """The DMG boot ROM shipped inside the installed pyboy package (never stored in this repository)."""
    try:
        data = (resources.files("pyboy.core") / "bootrom_dmg.bin").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        raise GbxculeError("power-on through the boot ROM needs the pyboy package (pip install pyboy); "
                           "use boot='skip' to start after the boot ROM instead") from None
    if len(data) != 256:
        raise GbxculeError(f"pyboy's DMG boot ROM has {len(data)} bytes, expected 256")
    return data


BOOT_MODES = ("pyboy", "skip", "dmg")
BOOT_FRAME_LIMIT = 600


def load_env_states(state, rom: Rom) -> list[EnvState]:
    """The env states in a saved state for `rom` (bytes or a file path; a native snapshot or a PyBoy
    `.state`), checked completely; PyBoy's loader values come from the kernels' own functions."""
    from gbxcule.kernels.pyboy_loader import pyboy_loader_values

    return decode_states(read_state_source(state), rom, pyboy_loader_values)


BLOCK_DIMS = (256, 128, 64, 32)
WARP_SIZE = 32  # threads a warp runs together
# Flat int32 indexes (`row * num_envs + env`, `env * NUM_FIELDS + f`) into the 1D per-env arrays stay below 2**31;
# RAM is 2D.
MAX_ENVS = (2**31 - 1) // max(NUM_FIELDS, SERIAL_CAPTURE, 144 * 40)


def default_sort_envs(device: str, num_envs: int) -> bool:
    """Whether envs are sorted by default: on a GPU, once they fill more than one warp (32 threads)."""
    return device.startswith("cuda") and num_envs > WARP_SIZE


def step_block_dim(num_envs: int, sm_count: int) -> int:
    """Threads per block for the step kernel on a GPU of `sm_count` SMs. At 255 registers a thread an SM
    runs one 256-thread block (8 warps) at a time, so a grid of fewer 256-thread blocks than SMs leaves SMs
    idle: then take the block size that gives no SM more warps than it must (ceil(blocks / SMs) x warps a
    block), the largest such. Measured on the H100 (132 SMs, commit 4354990): 32 at 4,096 envs
    (+28% over 256), 128 at 16,384 (+19% to +39%). With fewer than four waves of 256-thread blocks, 128: an
    SM then frees half its warps at a time, so the launch's last blocks end closer together (65,536 envs,
    heaviest first: +2% to +5% on four games spread apart, OVERWORLD +1.8%; commit 78f8eb2). From
    four waves on, 256 (262,144 envs: 128 and 64 within -1% to +4%)."""
    if num_envs >= 4 * BLOCK_DIMS[0] * sm_count:
        return BLOCK_DIMS[0]
    if num_envs >= BLOCK_DIMS[0] * sm_count:
        return BLOCK_DIMS[1]

    def busiest_sm_warps(block: int) -> int:
        blocks = -(-num_envs // block)
        return -(-blocks // sm_count) * (block // 32)

    return min(BLOCK_DIMS, key=lambda b: (busiest_sm_warps(b), -b))


def render_mode(render: bool | str) -> int:
    """The step kernel's render argument for `step(render=...)`."""
    if isinstance(render, bool):
        return int(render)
    if render in RENDER_MODES:
        return RENDER_MODES[render]
    raise ValueError(f"render must be True, False or one of {', '.join(RENDER_MODES)}, not {render!r}")


class WarpVecBackend:
    """N envs in Warp device arrays, stepped by the generated kernel."""

    def __init__(self, rom: str | Rom, num_envs: int = 1, codec: str | ActionCodec = DEFAULT_CODEC,
                 schedule: ActionSchedule | None = None, device: str = "cpu", boot: str = "pyboy",
                 max_registers: int | None = None, stage: str = "emulate_only", obs_mode: str = "stride",
                 obs_packed: bool = False, reward_window: tuple[int, int] = (0xC100, 0xC110),
                 sort_envs: bool | None = None, sort_every: int = 1, lean: bool | None = None,
                 block_dim: int | None = None, sort_key: str = DEFAULT_SORT_KEY, sort_parts: int | str = "auto",
                 loop: str = AUTO, stream_groups: int | str = AUTO):
        import warp as wp

        from gbxcule.kernels import init_warp
        from gbxcule.kernels.gen import op_table
        from gbxcule.kernels.state import Mem
        from gbxcule.kernels.step import load_kernels

        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        init_warp()
        if device.startswith("cuda") and not wp.is_cuda_available():
            raise GbxculeError("warp_vec_cuda needs an NVIDIA GPU with a working CUDA driver; none was found")
        self.rom = rom if isinstance(rom, Rom) else load_rom(rom)
        self.num_envs = num_envs
        self.codec = codec if isinstance(codec, ActionCodec) else get_codec(codec)
        self.schedule = schedule or ActionSchedule()
        self.device = device
        self.name = "warp_vec_cuda" if device.startswith("cuda") else "warp_vec_cpu"
        self.cart = cart_config(self.rom)
        self.layout = ram_layout(self.cart.ram_banks * 0x2000)
        if num_envs > MAX_ENVS:
            raise GbxculeError(f"at most {MAX_ENVS} envs: the per-env arrays indexed with int32 (serial capture, "
                               f"fields, drawn frames) stop there; got {num_envs}")
        self._wp = wp
        if obs_mode not in OBS_VIEWS:
            raise ValueError(f"observation mode must be one of {', '.join(OBS_VIEWS)}, not {obs_mode!r}")
        lo, hi = reward_window
        if not 0xC000 <= lo <= hi <= 0xE000:
            raise ValueError(f"reward_window must lie in WRAM 0xC000-0xDFFF, got {lo:#x}-{hi:#x}")
        self.stage = stage
        self._kernels = load_kernels(max_registers, stage)
        self._max_registers = max_registers
        # lean (default: on for CUDA): frames that draw nothing run a second kernel built without the
        # renderer (kernels/step.py load_kernels(draws=False)); off, every frame runs the one full kernel.
        self.lean = device.startswith("cuda") if lean is None else bool(lean)
        self.obs_view = obs_mode
        self._stage_args = (int(obs_mode == "mean"), int(obs_packed), lo, hi)
        boot_rom = pyboy_boot_rom()
        n = num_envs
        self.fields = wp.zeros(NUM_FIELDS * n, dtype=wp.int32, device=device)  # env-major: [env, field]
        self.ram = wp.zeros((n, self.layout.total), dtype=wp.uint8, device=device)  # [env, byte]: 64-bit offsets
        self.serial = wp.zeros(SERIAL_CAPTURE * n, dtype=wp.uint8, device=device)
        self.actions = wp.zeros(n, dtype=wp.int32, device=device)
        # Pageable on purpose: the driver stages a pageable upload before returning, so the next step may
        # overwrite this buffer while the previous upload still waits behind a running kernel.
        self._actions_host = wp.zeros(n, dtype=wp.int32, device="cpu")
        self.masks = wp.array(self.codec.mask_table.reshape(-1), dtype=wp.int32, device=device)
        mem = Mem()
        mirrored = rom_mirror(self.rom.data)
        mem.rom = wp.array(rom_words(mirrored), dtype=wp.uint32, device=device)
        mem.rom_banks = self.cart.rom_banks
        mem.rom_mask = len(mirrored) - 1
        mem.boot = wp.array(np.frombuffer(boot_rom, dtype=np.uint8), dtype=wp.uint8, device=device)
        mem.ram = self.ram
        mem.serial = self.serial
        mem.ops = wp.array(op_table(), dtype=wp.int32, device=device)
        mem.n_envs = n
        mem.cart_ram_banks = self.cart.ram_banks
        mem.mbc = self.cart.mbc
        mem.has_rtc = int(self.cart.has_rtc)
        mem.sram = int(self.cart.sram)
        mem.mbc1_multicart = int(self.cart.mbc1_multicart)
        for region, base in self.layout.bases.items():
            setattr(mem, region, base)
        mem.frame = wp.zeros(1, dtype=wp.uint32, device=device)  # the real buffer comes with the first render
        self.mem = mem
        # sort_envs (default: on for CUDA with more envs than a warp holds; off for the CPU device, which has
        # no warps): every `sort_every` frames (default 1; a step then takes one launch per sort), order the
        # threads by a key (sort_key below; a stable radix sort), so envs at the same code with the same input
        # share warps; results still land at each env's own index, bit for bit (docs/divergence.md, "What is
        # built"). Up to 32 envs share one warp in any order, so there sorting would only cost (and build
        # the sort and flat-loop kernels, e.g. for a goal template's one-env capture).
        self.sort_envs = default_sort_envs(device, n) if sort_envs is None else bool(sort_envs)
        if sort_every < 1:
            raise ValueError(f"sort_every must be >= 1 frame, got {sort_every}")
        self.sort_every = sort_every
        # sort_parts: split every frame into this many launches at equal PPU dot counts and sort before
        # each (envs that parted ways within a frame are regrouped); 1: whole frames. "auto" (the default):
        # with sorting every frame, chosen among 1, 2 and 4 by timed trials now and then from step 12 on
        # (backends/autotune.py; commit 8813a1a: at 262,144 envs once the envs have spread,
        # Geometrix +23% and Shock Lobster +15%, five other games within 1%); 1 without sorting every frame
        # (the CPU device's default). Results never depend on it, bit for bit (kernels/idle.py).
        if sort_parts != AUTO and (isinstance(sort_parts, bool) or not isinstance(sort_parts, int)
                                   or not 1 <= sort_parts <= MAX_SORT_PARTS):
            raise ValueError(f"sort_parts must be {AUTO!r} or an integer from 1 to {MAX_SORT_PARTS}, "
                             f"got {sort_parts!r}")
        if sort_parts != AUTO and sort_parts > 1 and sort_every != 1:
            raise ValueError("sort_parts > 1 sorts within every frame: it needs sort_every = 1")
        self.sort_parts = sort_parts
        self.tuner = None
        self._modules_loaded = False
        if sort_key not in SORT_KEYS:
            raise ValueError(f"sort_key must be one of {', '.join(SORT_KEYS)}, not {sort_key!r}")
        # loop: the step kernel's instruction loop (kernels/frame.py). "nested": a warp runs its lanes'
        # CPU batches to the slowest one's end before any lane goes on; "flat": lanes go on from batch to batch
        # without waiting (on one spread state: Tobu Tobu Girl +38% over nested, Carazu, Airaki and Corrib75 -10%
        # to -24%; commit 9ca8808). "auto" (the default): tried by the sort tuner where there is
        # one, else nested. Results never depend on it.
        if loop not in LOOPS:
            raise ValueError(f"loop must be one of {', '.join(LOOPS)}, not {loop!r}")
        self.loop = loop
        # sort_key: "pc" orders by (PC, action); "path" (the default) puts in front of them the instructions each
        # env ran since the last sort, so envs waiting at the same HALT but in different game modes part
        # (commit 9f84adf: +3% median, +26% on the slowest game of the public set), the heaviest
        # envs first: blocks go to SMs in thread order, and heavy blocks started last leave SMs idle at the
        # launch's end (commit c36ff0a: +8% to +40% on three of four games spread apart). Where
        # the work since the last sort predicts badly (envs whose frames spike), the lightest first runs faster
        # (Tobu Tobu Girl, 6%), so "auto" tries both orders; "path_light" is that order fixed. "stack" puts the
        # word at SP (the waiting routine's caller) in front of (PC, action) instead.
        self.sort_key = sort_key
        # threads per block of the step kernel (default: step_block_dim for the GPU's SM count; Warp's 256 on
        # the CPU device, where it means nothing).
        if block_dim is not None and block_dim not in BLOCK_DIMS:
            raise ValueError(f"block_dim must be one of {', '.join(map(str, BLOCK_DIMS))}, got {block_dim}")
        if block_dim is None and device.startswith("cuda"):
            block_dim = step_block_dim(n, wp.get_device(device).sm_count)
        self.block_dim = block_dim
        self._no_perm = wp.zeros(1, dtype=wp.int32, device=device)
        # per env, the instructions of the wait-loop rounds its launches skipped (kernels/idle.py): the `path`
        # key's work count is `instructions` less this. Not state: it depends on where launches end.
        self._waited = wp.zeros(n, dtype=wp.int32, device=device)
        if self.sort_envs:
            self._sort_keys = wp.zeros(2 * n, dtype=wp.int32, device=device)
            self._sort_vals = wp.zeros(2 * n, dtype=wp.int32, device=device)
            self._perm = self._sort_vals[:n]
            self._sort_prev = wp.zeros(n, dtype=wp.int32, device=device)
        self._groups: list[dict] = []
        self.set_stream_groups(stream_groups)  # (and the sort tuner, whose choices include the groups)
        self._frame = self._frame_words = None
        self._store = None  # the slot store (alloc_slots)
        self._no_screen = wp.zeros((1, 1, 1), dtype=wp.uint8, device=device)  # for clones without a frame buffer
        self._obs: dict[tuple[str, bool], object] = {}
        self._obs_views: dict[tuple[int, bool], tuple] = {}  # flat byte or word aliases of the obs arrays
        # Stage outputs: rewards from the step kernel's epilogue, the observation from obs_kernel after the
        # step (kernels/step.py STAGES).
        self.rewards = wp.zeros(n if "reward" in stage or stage == "full_step" else 1, dtype=wp.float32,
                                device=device)
        with_obs = stage in OBS_STAGES
        self.obs = wp.zeros((n, 72, 20 if obs_packed else 80) if with_obs else (1, 1, 1), dtype=wp.uint8,
                            device=device)
        if with_obs:
            self.frame_buffer()
        if boot not in BOOT_MODES:
            raise ValueError(f"unknown boot mode {boot!r}; choose one of {', '.join(BOOT_MODES)}")
        self.boot = boot
        fields, ram = self._start_state(boot)
        # The start state once on the device; reset() copies it into every env (no per-env host copy).
        self._start_fields = wp.array(fields, dtype=wp.int32, device=device)
        self._start_ram = wp.array(np.zeros(self.layout.total, dtype=np.uint8) if ram is None else ram,
                                   dtype=wp.uint8, device=device)
        self.reset()

    def _launch(self, frames: int, release_after: int, stop_at_boot_exit: int = 0, render: int = 0,
                actions=None, dim: int | None = None) -> None:
        """One step of `frames` frames. One kernel launch, or several: with sort_envs a sort of the envs (by
        `sort_key`) before every `sort_every` frames (or `sort_parts` times a frame, a launch per part), and
        with the lean kernel, frames that draw nothing apart from the drawn ones. Nothing here waits for the
        device."""
        wp, n = self._wp, self.num_envs
        if not self._modules_loaded:
            self._load_step_modules()
        lo, hi = self._stage_args[2:]
        actions = self.actions if actions is None else actions
        sort = self.sort_envs and dim is None
        every = self.sort_every if sort else frames
        lean = self.lean and render != 2 and dim is None
        starts = set(range(0, frames, every))
        if lean and render == 1:
            starts.add(frames - 1)  # the drawn last frame runs alone in the full kernel
        bounds = sorted(starts) + [frames]
        # (begin, end, resume, stop_dot): whole frames [begin, end), or with sort_parts one part of a frame
        parts, heavy_first, flat, timed = 1, self.sort_key != "path_light", self.loop == "flat", False
        grouped = bool(self._groups) and self.stream_groups != AUTO
        if sort and self.tuner is not None:  # (sort: a step, not the boot's one-env launch)
            self.tuner.poll(self._tuner_elapsed)
            choice, timed = self.tuner.plan()
            parts, heavy_first, flat, grouped = choice[0], choice[1], choice[2], choice[3] > 1
            if timed:  # a module's first launch builds it: never inside a timed step (on a GPU all are built already)
                for draws in {not lean, not lean or render == 1}:
                    wp.load_module(self._step_kernels(draws, flat).module, device=self.device, block_dim=self.block_dim)
            if timed and self.device.startswith("cuda"):
                events = self._tuner_events[len(self.tuner.pending)]
                wp.get_stream(self.device).record_event(events[0])
            elif timed:
                started = time.perf_counter()
        elif sort and self.sort_parts != AUTO:
            parts = self.sort_parts
        segments = [(b, e, 0, BIG) for b, e in pairwise(bounds)] if parts == 1 else [
            (f, f + 1, int(j > 0), BIG if j == parts - 1 else (j + 1) * FRAME_CYCLES // parts)
            for f in range(frames) for j in range(parts)]
        perm = self._perm if sort else self._no_perm
        # with stream_groups, each group sorted and launched on its own stream (the launches of a segment in turn)
        groups = self._groups if sort and grouped else [None]
        streams = groups[0] is not None and self.device.startswith("cuda")
        if streams:
            main = wp.get_stream(self.device)
            for grp in groups:
                grp["stream"].wait_stream(main)
        for begin, end, resume, stop_dot in segments:
            kernels = self._step_kernels(not (lean and not (render == 1 and end == frames)), flat)
            for grp in groups:
                with wp.ScopedStream(grp["stream"], sync_enter=False) if streams else nullcontext():
                    if sort and (parts > 1 or begin % every == 0):
                        self._sort(grp, actions, heavy_first)
                    wp.launch(kernels.step_kernel, dim=(n if dim is None else dim) if grp is None else grp["count"],
                              device=self.device, block_dim=self.block_dim,
                              inputs=[self.fields, self.mem, actions, self.masks, self.codec.num_actions, begin, end,
                                      frames, release_after, stop_at_boot_exit, render, self.rewards, lo, hi,
                                      perm if grp is None else grp["perm"], resume, stop_dot, self._waited])
        if streams:
            for grp in groups:
                main.wait_stream(grp["stream"])
        if timed and self.device.startswith("cuda"):
            wp.get_stream(self.device).record_event(events[1])
            self.tuner.timed(choice, events)
        elif timed:
            self.tuner.timed(choice, (time.perf_counter() - started) * 1000)

    def _sort(self, grp: dict | None, actions, heavy_first: bool) -> None:
        """Order the envs (all of them, or one stream group's) by `sort_key` into the perm the step kernel reads."""
        from gbxcule.kernels.sortkeys import offset_kernel, path_key_kernel, sort_key_kernel, stack_key_kernel

        wp = self._wp
        if grp is None:
            m, keys, vals = self.num_envs, self._sort_keys, self._sort_vals
            fields, ram, prev, waited = self.fields, self.ram, self._sort_prev, self._waited
        else:  # the group's slices: the key kernels number its envs from 0, the sorted values are moved up after
            m, keys, vals = grp["count"], grp["keys"], grp["vals"]
            fields, ram, prev, waited = grp["fields"], grp["ram"], grp["prev"], grp["waited"]
            o = grp["offset"]
            actions = grp["actions"] if actions is self.actions else actions[o:o + m]
        if self.sort_key in ("path", "path_light"):
            wp.launch(path_key_kernel, dim=m, device=self.device,
                      inputs=[fields, actions, prev, keys, vals, FIELD_INDEX["pc"], FIELD_INDEX["instructions"], waited,
                              int(heavy_first)])
        elif self.sort_key == "stack":
            wp.launch(stack_key_kernel, dim=m, device=self.device,
                      inputs=[fields, actions, ram, keys, vals, FIELD_INDEX["pc"], FIELD_INDEX["sp"],
                              self.layout.bases["wram"], self.layout.bases["hram"]])
        else:
            wp.launch(sort_key_kernel, dim=m, device=self.device,
                      inputs=[fields, actions, keys, vals, FIELD_INDEX["pc"]])
        if grp is not None and self._sort_events:  # one sort at a time across the streams
            stream = wp.get_stream(self.device)
            stream.wait_event(self._sort_events[self._sort_turn % 2])
        wp.utils.radix_sort_pairs(keys, vals, m, end_bit=24 if self.sort_key == "pc" else 31)
        if grp is not None:
            if self._sort_events:
                self._sort_turn += 1
                stream.record_event(self._sort_events[self._sort_turn % 2])
            if grp["offset"]:
                wp.launch(offset_kernel, dim=m, device=self.device, inputs=[vals, grp["offset"]])

    def set_stream_groups(self, groups: int | str) -> None:
        """stream_groups G > 1: the envs in G groups of consecutive indices, each sorted on its own and launched
        on its own CUDA stream, so that one group's next frame fills the SMs another group's launch leaves idle
        at its end (blocks of uneven work finish at different times). "auto" (the default): where the sort tuner
        runs (below), it also tries 2 groups (whole frames, heaviest first, in each loop it tries); else 1.
        On the H100 at 262,144 spread envs, 2 groups: Tobu Tobu Girl +6.4% (flat loop) and +20% (nested), Rex
        Run +0.8%, Corrib75 -0.2% (nested) and -2.3% (flat); 4 groups lost to 2 on both games tried
        (commit 03cb804; docs/divergence.md). Results never depend on it, bit for bit. The sorts run one at a
        time (Warp's radix sort may share scratch memory between streams). Rebuilds the sort tuner."""
        wp, n, device = self._wp, self.num_envs, self.device
        if groups != AUTO and (isinstance(groups, bool) or not isinstance(groups, int) or not 1 <= groups <= n):
            raise ValueError(f"stream_groups must be {AUTO!r} or an integer from 1 to the env count, got {groups!r}")
        if groups != AUTO and groups > 1 and not self.sort_envs:
            raise ValueError("stream_groups > 1 sorts each group on its own: it needs sort_envs")
        self.synchronize()
        self.stream_groups, self._groups = groups, []
        self._build_tuner()
        count = groups if groups != AUTO else 2 if self.tuner is not None and n >= 2 else 1
        cuda = device.startswith("cuda")
        for g in range(count if count > 1 else 0):
            o, m = g * n // count, (g + 1) * n // count - g * n // count
            keys = wp.zeros(max(n, 2 * m), dtype=wp.int32, device=device)
            vals = wp.zeros(max(n, 2 * m), dtype=wp.int32, device=device)
            # the step kernel takes a perm of n entries (thread t runs env perm[t]); a group's launch of m threads
            # reads the first m, the group's envs sorted (global numbers)
            self._groups.append({"offset": o, "count": m, "keys": keys, "vals": vals, "perm": vals[:n],
                                 "stream": wp.Stream(device) if cuda else None,
                                 "fields": self.fields[o * NUM_FIELDS:(o + m) * NUM_FIELDS],
                                 "ram": self.ram[o:o + m], "actions": self.actions[o:o + m],
                                 "prev": self._sort_prev[o:o + m], "waited": self._waited[o:o + m]})
        self._sort_events = [wp.Event(device) for _ in range(2)] if cuda and self._groups else []
        self._sort_turn = 0
        if self._sort_events:  # (the first group's first sort waits on it)
            wp.get_stream(device).record_event(self._sort_events[0])

    def _build_tuner(self) -> None:
        """The sort tuner (sort_parts "auto" with sorting every frame), or None. Its choices are (parts,
        heaviest first, flat loop, stream groups): with the `path` key whole frames are also tried lightest
        first (in parts, the lightest first was the slowest choice on all 17 games, commit f52ccbe),
        and whole frames in the flat loop (loop "auto"; in parts the flat loop lost to the nested one: Shock
        Lobster -2.5%, Geometrix -0.7% at 4 parts, commit e53e6d3), and with stream_groups
        "auto" whole frames heaviest first in 2 groups, in each loop."""
        self.tuner = None
        if not (self.sort_parts == AUTO and self.sort_envs and self.sort_every == 1):
            return
        heavy, flat = self.sort_key != "path_light", self.loop == "flat"
        orders = (heavy, False) if self.sort_key == "path" else (heavy,)
        loops = (False, True) if self.loop == AUTO else (flat,)
        g = self.stream_groups if self.stream_groups != AUTO else 1
        choices = [*((1, h, f, g) for f in loops for h in orders), *((p, heavy, flat, g) for p in AUTO_CANDIDATES[1:])]
        if self.stream_groups == AUTO and self.num_envs >= 2:
            choices += [(1, heavy, f, 2) for f in loops]
        self.tuner = Tuner(tuple(dict.fromkeys(choices)))
        if self.device.startswith("cuda"):  # (the CPU device runs each launch before returning: a host clock)
            wp = self._wp
            self._tuner_events = [(wp.Event(self.device, enable_timing=True),
                                   wp.Event(self.device, enable_timing=True)) for _ in self.tuner.trial]

    def sort_trials(self) -> list[dict[str, float]] | None:
        """The sort tuner's trials so far (ms per step by choice: "4" for 4 parts heaviest first, "1/light"
        lightest first, "1/flat" in the flat loop, "1/flat+2" in 2 stream groups), or None without a tuner."""
        if self.tuner is None:
            return None
        return [{f"{p}{'' if heavy else '/light'}{'/flat' if flat else ''}{f'+{g}' if g > 1 else ''}": ms
                 for (p, heavy, flat, g), ms in t.items()} for t in self.tuner.history]

    def _tuner_elapsed(self, handle) -> float:
        """A timed step's milliseconds: between its two CUDA events (waiting for the second), or as measured on
        the host (the CPU device)."""
        if isinstance(handle, float):
            return handle
        return self._wp.get_event_elapsed_time(handle[0], handle[1], synchronize=True)

    def _load_step_modules(self) -> None:
        """Before the first launch on a GPU, build every step module this backend may launch, side by side
        (`wp.force_load` compiles modules in parallel threads): lean and drawn, and with a tuner that tries the
        flat loop, both loops. One at a time, each on first use, a fresh machine paused about 9 s a module: at
        the first step for two, and again mid-run at the tuner's first trial for the flat pair (commit b3e411b;
        BENCHMARKS.md, "Cold start"). On the CPU device modules still build on first use (the flat pair never runs there
        unless asked for, and CI's two cores gain nothing from building more at once)."""
        self._modules_loaded = True
        if not self.device.startswith("cuda"):
            return
        modules = [self._step_kernels(draws, flat).step_kernel.module for draws, flat in self.step_variants()]
        self._wp.force_load(device=self.device, modules=modules, block_dim=self.block_dim, max_workers=len(modules))

    def step_variants(self) -> list[tuple[bool, bool]]:
        """(draws, flat) of every step module this backend may launch: drawn, and lean too with the lean
        kernel; the nested loop, the flat one, or both where the sort tuner tries both."""
        loops = {self.loop == "flat"} | ({c[2] for c in self.tuner.candidates} if self.tuner else set())
        draws = {True, False} if self.lean else {True}
        return [(d, f) for d in sorted(draws) for f in sorted(loops)]

    def _step_kernels(self, draws: bool = True, flat: bool = False):
        """The step kernel: with the renderer or lean (draws=False), with the nested or flat loop."""
        from gbxcule.kernels.step import load_kernels

        return load_kernels(self._max_registers, self.stage, draws, flat)

    def _start_state(self, boot: str) -> tuple[np.ndarray, np.ndarray | None]:
        """Fields (and RAM, when not all zero) every env starts from."""
        power_on = power_on_fields(self.cart, boot=True)
        if boot == "pyboy":
            return power_on, None
        # Run PyBoy's boot ROM once in env 0, stopping right after it unmaps itself (PC = 0x0100).
        wp = self._wp
        self._start_fields = wp.array(power_on, dtype=wp.int32, device=self.device)
        self._start_ram = wp.zeros(self.layout.total, dtype=wp.uint8, device=self.device)
        self.reset()
        self._launch(BOOT_FRAME_LIMIT, 0, stop_at_boot_exit=1, dim=1)
        fields = self._gather(self._field_rows(), NUM_FIELDS, [0])[:, 0].copy()
        ram = self._gather(self.ram.transpose(), self.layout.total, [0])[:, 0].copy()
        if fields[FIELD_INDEX["bootrom"]] != 0:
            raise GbxculeError(f"the boot ROM did not hand over to the cartridge within {BOOT_FRAME_LIMIT} frames")
        fields[FIELD_INDEX["frames"]] = 0
        fields[FIELD_INDEX["instructions"]] = 0
        if boot == "dmg":
            apply_dmg_boot_values(fields, self.rom.data)
        return fields, ram

    # --- VecBackend ---------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        from gbxcule.kernels.slots import broadcast_kernel

        self._wp.launch(broadcast_kernel, dim=(self.num_envs, NUM_FIELDS + self.layout.total), device=self.device,
                        inputs=[self._start_fields, self._start_ram, self.fields, self.ram, NUM_FIELDS])
        self.serial.zero_()
        if self._frame is not None:
            self._frame.zero_()

    def step(self, actions, render: bool | str = False) -> None:
        """Advance every env one step; `render`: False/"none", True/"last" (the step's last frame), "all".

        `actions`: a host int array (validated here: an out-of-range action raises ValueError), or an int32
        device array / torch tensor on the backend's device, used in place with no copy and no
        synchronisation (out-of-range values are read as action 0 by the kernel). Nothing here waits for
        the device."""
        mode = render_mode(render)
        if self.stage in OBS_STAGES:
            mode = max(mode, 1)  # the observation comes from the step's last frame
        if mode:
            self.frame_buffer()
        self._launch(self.schedule.frames_per_step, self.schedule.release_after_frames, render=mode,
                     actions=self._device_actions(actions))
        if self.stage in OBS_STAGES:  # the observation of the step's last frame (kernels/step.py STAGES)
            self._write_observation(self.obs, *self._stage_args[:2])

    def _write_observation(self, out, mean: int, packed: int) -> None:
        """`render.obs_kernel` from the frame buffer into `out` (uint8 [N,72,20] packed, else [N,72,80]),
        which it writes as flat bytes or as words through aliases made once per array."""
        from gbxcule.kernels.render import obs_kernel

        wp = self._wp
        views = self._obs_views.get((out.ptr, bool(packed)))
        if views is None:
            flat = wp.array(ptr=out.ptr, dtype=wp.uint8, shape=(out.size,), device=self.device)
            words = wp.array(ptr=out.ptr, dtype=wp.uint32, shape=(out.size // 4,), device=self.device)
            none8, none32 = wp.zeros(1, dtype=wp.uint8, device=self.device), wp.zeros(1, dtype=wp.uint32,
                                                                                      device=self.device)
            views = self._obs_views[(out.ptr, bool(packed))] = (flat, none32) if packed else (none8, words)
        self.frame_buffer()
        wp.launch(obs_kernel, dim=(self.num_envs, 72, 20), device=self.device,
                  inputs=[self._frame_words, views[0], views[1], int(mean), int(packed)])

    def _device_actions(self, actions):
        wp = self._wp
        if isinstance(actions, wp.array):
            dev = actions
        elif type(actions).__module__.startswith("torch"):
            dev = wp.from_torch(actions, dtype=wp.int32)
        else:
            self._actions_host.numpy()[:] = check_actions(self, actions)
            wp.copy(self.actions, self._actions_host)
            return self.actions
        if dev.shape != (self.num_envs,) or dev.dtype != wp.int32 or str(dev.device) != str(self.actions.device):
            raise ValueError(f"{self.name} expects int32 actions of shape ({self.num_envs},) on {self.device}, "
                             f"got {dev.dtype.__name__} {dev.shape} on {dev.device}")
        return dev

    # --- screens ------------------------------------------------------------------------------------
    def frame_buffer(self):
        """The device frame buffer, uint8 [N,144,160] shade indices, written in place by rendering steps
        (all 0 until the first one)."""
        if self._frame is None:
            wp = self._wp
            n = self.num_envs
            self._frame = wp.zeros((n, 144, 160), dtype=wp.uint8, device=self.device)
            # The kernel writes 4 pixels at a time through a uint32 alias of the same memory.
            self._frame_words = wp.array(ptr=self._frame.ptr, dtype=wp.uint32, shape=(n * 144 * 40,),
                                         device=self.device)
            self.mem.frame = self._frame_words
        return self._frame

    def frames_host(self, env: int | None = None) -> np.ndarray:
        """Frame buffer on the host: [144,160] for one env, [N,144,160] without `env` (synchronises)."""
        if env is None:
            return self.frame_buffer().numpy()
        return self.frame_buffer()[check_env(self, env)].numpy().copy()

    def observation(self, mode: str = "stride", packed: bool = False):
        """The 72x80 view of the frame buffer on the device, recomputed into the same array on each call:
        uint8 [N,72,80] (`packed`: [N,72,20], 4 pixels a byte, first pixel in bits 7-6). `mode`
        "stride" takes pixel (2r, 2c); "mean" the 2x2 block's mean rounded half up, (sum + 2) // 4."""
        if mode not in OBS_VIEWS:
            raise ValueError(f"observation mode must be one of {', '.join(OBS_VIEWS)}, not {mode!r}")
        wp = self._wp
        key = (mode, bool(packed))
        if key not in self._obs:
            self._obs[key] = wp.zeros((self.num_envs, 72, 20 if packed else 80), dtype=wp.uint8,
                                      device=self.device)
        out = self._obs[key]
        self._write_observation(out, int(mode == "mean"), int(bool(packed)))
        return out

    def get_cpu_state(self, env: int) -> CpuState:
        f = self.env_fields(env)
        return CpuState(a=f["a"], f=f["f"], b=f["b"], c=f["c"], d=f["d"], e=f["e"], h=f["h"], l=f["l"],
                        sp=f["sp"], pc=f["pc"], ime=bool(f["ime"]), halted=bool(f["halted"]))

    def read_memory(self, env: int, lo: int, hi: int) -> np.ndarray:
        snap = self.snapshot(env)
        return np.array([snap.peek(a) for a in range(lo, hi)], dtype=np.uint8)

    def close(self) -> None:
        self.synchronize()

    def synchronize(self) -> None:
        """Wait until every launch so far has finished."""
        self._wp.synchronize_device(self.device)

    def field_values(self, name: str) -> np.ndarray:
        """Field `name` (`core/schema.py`) of every env, int32 [num_envs] on the host (synchronises)."""
        return self._field_rows()[FIELD_INDEX[name]].numpy().copy()

    def skipped_instructions(self) -> np.ndarray:
        """Per env, the instructions of the wait-loop rounds its launches skipped at once (kernels/idle.py), a
        wrapping int32 counter [num_envs] on the host (synchronises). `instructions` counts them too; less this,
        it counts the instructions executed one by one."""
        return self._waited.numpy().copy()

    def wram_bytes(self, addr: int) -> np.ndarray:
        """The WRAM byte at `addr` (0xC000-0xDFFF) of every env, uint8 [num_envs] (synchronises)."""
        if not 0xC000 <= addr < 0xE000:
            raise ValueError(f"WRAM address must lie in 0xC000-0xDFFF, got {addr:#x}")
        o = self.layout.bases["wram"] + addr - 0xC000
        return self.ram[:, o].numpy().copy()

    def device_bytes_per_env(self) -> int:
        """Bytes of per-env device state: fields, RAM, serial capture, stage outputs and the frame buffer."""
        arrays = [self.fields, self.ram, self.serial, self.obs, self.rewards]
        if self._frame is not None:
            arrays.append(self._frame)
        return sum(a.capacity for a in arrays) // self.num_envs

    # --- introspection ------------------------------------------------------------------------------
    def _field_rows(self):
        """The fields as a [NUM_FIELDS, num_envs] device view (they are stored env-major: core/schema.py)."""
        return self.fields.reshape((self.num_envs, NUM_FIELDS)).transpose()

    def _gather(self, arr, rows: int, ids: list[int]) -> np.ndarray:
        """[rows, len(ids)] host copy of the envs `ids` of a device array of rows over envs: interleaved (flat,
        the serial ring) or a [rows, num_envs] view such as `_field_rows()` or `ram.transpose()` (synchronises)."""
        from gbxcule.kernels.slots import gather_kernel

        wp = self._wp
        view = arr if arr.ndim == 2 else arr.reshape((rows, self.num_envs))
        if len(ids) == self.num_envs and ids == list(range(self.num_envs)):
            return view.numpy()
        out = wp.empty((rows, len(ids)), dtype=arr.dtype, device=self.device)
        wp.launch(gather_kernel, dim=(rows, len(ids)), device=self.device,
                  inputs=[view, wp.array(np.asarray(ids, dtype=np.int32), dtype=wp.int32, device=self.device), out])
        return out.numpy()

    def env_fields(self, env: int) -> dict[str, int]:
        host = self._gather(self._field_rows(), NUM_FIELDS, [check_env(self, env)])[:, 0]
        return {name: int(host[i]) for i, (name, _) in enumerate(FIELDS)}

    def env_region(self, env: int, region: str) -> np.ndarray:
        base, size = self.layout.bases[region], self.layout.sizes[region]
        return self._gather(self.ram.transpose(), self.layout.total, [check_env(self, env)])[base:base + size, 0].copy()

    def serial_bytes(self, env: int) -> bytes:
        count = self.env_fields(env)["serial_count"]
        ring = self._gather(self.serial, SERIAL_CAPTURE, [env])[:, 0]
        if count <= SERIAL_CAPTURE:
            return bytes(ring[:count])
        start = count % SERIAL_CAPTURE
        return bytes(np.concatenate([ring[start:], ring[:start]]))

    def snapshot(self, env: int) -> EnvSnapshot:
        ram = self._gather(self.ram.transpose(), self.layout.total, [check_env(self, env)])[:, 0]
        regions = {r: ram[b:b + self.layout.sizes[r]].copy() for r, b in self.layout.bases.items()}
        return EnvSnapshot(self.env_fields(env), regions, self.rom.data, self.cart)

    # --- save states and device slots (docs/state_format.md) ----------------------------------------
    def load_state(self, state, envs=None) -> None:
        """Put `envs` (default: all) in a saved state: a PyBoy `.state` or a native snapshot, as bytes or a
        file path. The i-th env listed takes state i mod M of the M states the file holds. The file is
        decoded and checked completely before any env changes."""
        self.put_states(load_env_states(state, self.rom), envs)

    def put_states(self, states, envs=None) -> None:
        """Write host `EnvState`s into `envs` (default: all; the i-th listed takes states[i mod M])."""
        from gbxcule.kernels.slots import SlotStore, serial_scatter_kernel

        wp, n = self._wp, self.num_envs
        ids = np.arange(n) if envs is None else np.array([check_env(self, int(e)) for e in envs], dtype=np.int64)
        store = SlotStore(len(states), NUM_FIELDS, self.layout.total, self.device)
        store.upload(0, np.stack([s.fields for s in states]), np.stack([s.ram for s in states]))
        mask, slots = np.zeros(n, dtype=np.int32), np.zeros(n, dtype=np.int32)
        mask[ids], slots[ids] = 1, np.arange(len(ids)) % len(states)
        store.restore(self.fields, self.ram, n, self._device_index(mask), self._device_index(slots))
        # only the listed envs' SB rings: no host round trip of the whole ring
        src = wp.array(np.stack([np.asarray(s.serial, dtype=np.uint8) for s in states]), dtype=wp.uint8,
                       device=self.device)
        wp.launch(serial_scatter_kernel, dim=(SERIAL_CAPTURE, len(ids)), device=self.device,
                  inputs=[src, wp.array(ids.astype(np.int32), dtype=wp.int32, device=self.device), self.serial, n])

    def env_states(self, envs=None) -> list:
        """`EnvState`s (fields, RAM, SB ring) of `envs` (default: all) on the host (synchronises)."""
        ids = list(range(self.num_envs)) if envs is None else [check_env(self, int(e)) for e in envs]
        fields = self._gather(self._field_rows(), NUM_FIELDS, ids)
        ram = self._gather(self.ram.transpose(), self.layout.total, ids)
        ring = self._gather(self.serial, SERIAL_CAPTURE, ids)
        return [EnvState(fields[:, j].copy(), ram[:, j].copy(), ring[:, j].copy()) for j in range(len(ids))]

    def save_state(self, path=None, envs=None) -> bytes:
        """A native snapshot of `envs` (default: all); written atomically to `path` when given."""
        data = encode_snapshot(Snapshot(self.rom.info.sha1, self.rom.info.title, self.env_states(envs),
                                        self.schedule.frames_per_step, self.schedule.release_after_frames,
                                        self.codec.name))
        if path is not None:
            write_snapshot(path, data)
        return data

    def pyboy_state(self, env: int) -> bytes:
        """A PyBoy 2.8.1 `.state` of env `env` (PyBoy's `load_state` reads it)."""
        from gbxcule.backends.pyboy_single import power_on_state

        return write_pyboy_state(env_to_pyboy(self.env_states([env])[0], self.rom, power_on_state(self.rom)))

    # Device copies of whole env states. Every index array is [num_envs], indexed by env: a device array or a
    # torch tensor on the backend's device (used in place), or a host array (copied: for setup, not a hot path).
    # Masks are int32, uint8 or bool (non-zero: the env takes part); slot and env numbers int32, reduced into
    # range. Each call is one or two launches and never synchronises.
    def alloc_slots(self, num_slots: int, seed: int = 0, host: bool = False) -> None:
        """A store of `num_slots` zeroed env states (replacing any store); with an observation stage
        (stage "obs_only"/"full_step") each slot also holds the observation and screen saved with it. `seed`
        keys the seeded rule of `restore`. `host`: the slots live in host memory (pinned), which the device's
        kernels read and write over the bus (kernels/slots.py): the same bits, room for many more slots."""
        from gbxcule.kernels.slots import SlotStore

        width = self.obs.shape[2] if self.stage in OBS_STAGES else 0
        self._store = SlotStore(num_slots, NUM_FIELDS, self.layout.total, self.device, seed, obs_width=width,
                                host=host)

    def load_slots(self, state, seed: int = 0) -> None:
        """The reset cache: a slot store holding the M states of a saved state (PyBoy or native); their
        observations and screens are zero."""
        states = load_env_states(state, self.rom)
        self.alloc_slots(len(states), seed)
        self._store.upload(0, np.stack([s.fields for s in states]), np.stack([s.ram for s in states]))

    @property
    def num_slots(self) -> int:
        """Slots in the store (0 before `alloc_slots`/`load_slots`)."""
        return 0 if self._store is None else self._store.num_slots

    @property
    def slot_words(self) -> int:
        """32-bit words of machine state a slot holds (fields, then RAM packed 4 bytes a word)."""
        return NUM_FIELDS + (self.layout.total + 3) // 4

    def save_slots(self, mask, slots, chunk: int | None = None) -> None:
        """Copy every masked env e into slot `slots[e]`, with its observation and screen when the store holds
        frames. Masked envs must name distinct slots (else the slot's contents are undefined)."""
        store = self._slot_store()
        chunk = self._chunk(chunk)
        store.save(self.fields, self.ram, self.num_envs, self._device_index(mask), self._device_index(slots),
                   chunk, self.obs if store.obs is not None else None, self._frame)

    def save_slot(self, env: int, slot: int) -> None:
        """Copy env `env` into slot `slot` (host numbers, checked; see `save_slots`)."""
        self._slot_store().check_slot(slot)
        mask, slots = np.zeros(self.num_envs, dtype=np.int32), np.zeros(self.num_envs, dtype=np.int32)
        mask[check_env(self, env)], slots[env] = 1, slot
        self.save_slots(mask, slots)

    def restore(self, mask, slots=None, chunk: int | None = None, obs=None) -> None:
        """Reset every masked env to a slot: `slots[e]`, or without `slots` the seeded rule hash(seed, env,
        restore count) mod K (docs/state_format.md). With a store that holds frames, also the env's screen
        (the frame buffer) and its slot's observation into every position of `obs`: a frame stack [N, P, 72,
        W] (uint8 device array or torch tensor), default the backend's observation. The SB ring is not
        touched. `chunk`: slot words per thread (default per device, see kernels/slots.py)."""
        store = self._slot_store()
        frames = store.obs is not None
        store.restore(self.fields, self.ram, self.num_envs, self._device_index(mask),
                      None if slots is None else self._device_index(slots), self._chunk(chunk),
                      self._frame_stack(obs) if frames else None, self._frame if frames else None)

    def clone(self, src, mask, obs=None, chunk: int | None = None) -> None:
        """Give every masked env e the whole state of env `src[e]`: fields, RAM, the SB ring, the frame buffer
        (once it exists) and the observation: with an observation stage, `obs` (a frame stack [N, P, 72, W],
        default the backend's observation). The destination then steps on bit for bit as its source does under
        the same actions. A source must not itself be a masked destination (it would be read while written)."""
        from gbxcule.kernels.slots import GATHER, check_env_array, clone_kernel, frames_kernel, threads_per_env

        wp, n = self._wp, self.num_envs
        mask, src = self._device_index(mask), self._device_index(src)
        check_env_array(mask, n, self.device, "mask", (wp.int32, wp.uint8, wp.bool))
        check_env_array(src, n, self.device, "src", (wp.int32,))
        threads = threads_per_env(NUM_FIELDS + self.layout.total + SERIAL_CAPTURE, self._chunk(chunk))
        wp.launch(clone_kernel, dim=(n, threads), device=self.device,
                  inputs=[mask, src, self.fields, self.ram, self.serial, n, NUM_FIELDS, self.layout.total,
                          SERIAL_CAPTURE, threads])
        with_obs = self.stage in OBS_STAGES
        if with_obs or self._frame is not None:
            stack = self._frame_stack(obs)
            screen = self._frame if self._frame is not None else self._no_screen
            wp.launch(frames_kernel, dim=(n, 72), device=self.device,
                      inputs=[mask, src, GATHER, n, 0, 0, 0, stack, stack, screen, screen, int(with_obs),
                              int(self._frame is not None)])

    def slot_frames(self):
        """(observations uint8 [K, 72, W], screens uint8 [K, 144, 160]) of the slots, or None when the store
        holds no frames: device arrays, or host arrays (after the device's queued work) for a store in host
        memory."""
        _, _, obs, screen = self._slot_store().views()
        return None if obs is None else (obs, screen)

    def slot_arrays(self) -> tuple:
        """The slot store's arrays, as views for copying many slots at once (checkpoints of slots saved during a
        run): fields int32 [K, NUM_FIELDS], RAM uint32 [K, words] (4 bytes a word, as `slot_state` unpacks them),
        and the observations [K, 72, W] and screens [K, 144, 160] (None without frames). Device arrays, or host
        arrays (after the device's queued work) for a store in host memory (`alloc_slots(host=True)`)."""
        store = self._slot_store()
        fields, ram, obs, screen = store.views()
        return (fields.reshape((store.num_slots, store.num_fields)), ram.reshape((store.num_slots, store.ram_words)),
                obs, screen)

    def slot_state(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """(fields int32 [NUM_FIELDS], RAM uint8 [bytes]) of slot `slot` on the host (synchronises)."""
        return self._slot_store().download(slot)

    def slots_digest(self, count: int | None = None) -> str:
        """SHA-1 of the first `count` slots (default all): fields, RAM words and observations, as stored
        (synchronises). Identifies a reset cache."""
        import hashlib

        store = self._slot_store()
        k = store.num_slots if count is None else store.check_slot(count - 1) + 1
        fields, ram, obs, _ = store.views()
        data = fields.numpy()[:k * store.num_fields].tobytes() + ram.numpy()[:k * store.ram_words].tobytes()
        if obs is not None:
            data += obs.numpy()[:k].tobytes()
        return hashlib.sha1(data).hexdigest()

    def _slot_store(self):
        if self._store is None:
            raise GbxculeError("no slot store: call alloc_slots(K) or load_slots(state) first")
        return self._store

    def _chunk(self, chunk: int | None) -> int | None:
        from gbxcule.kernels.slots import default_chunk

        return default_chunk(self.device) if chunk is None else chunk

    def _device_index(self, a):
        """`a` as a Warp array on the backend's device: in place for Warp arrays and torch tensors, a copy of
        host arrays."""
        wp = self._wp
        if isinstance(a, wp.array):
            return a
        if type(a).__module__.startswith("torch"):
            return wp.from_torch(a)
        a = np.asarray(a)
        return wp.array(a.astype(np.int32) if a.dtype.kind in "iu" and a.dtype != np.uint8 else a,
                        device=self.device)

    def _frame_stack(self, obs):
        """A frame stack [N, P, 72, W] to write observations into: `obs` (checked), or the backend's observation."""
        from gbxcule.kernels.slots import as_stack

        if obs is None:
            return as_stack(self.obs)
        stack = as_stack(self._device_index(obs))
        want = (self.num_envs, 72, self.obs.shape[2])
        if stack.dtype != self._wp.uint8 or (stack.shape[0], stack.shape[2], stack.shape[3]) != want:
            raise ValueError(f"obs must be a uint8 frame stack [{want[0]}, P, {want[1]}, {want[2]}], got "
                             f"{stack.dtype.__name__} {stack.shape}")
        return stack


@dataclass
class EnvSnapshot:
    """One env's state on the host, with a side-effect-free view of its address space."""

    fields: dict[str, int]
    regions: dict[str, np.ndarray]
    rom: bytes
    cart: CartConfig

    def peek(self, addr: int) -> int:
        f, r = self.fields, self.regions
        if addr < 0x4000:
            if f["bootrom"] and addr < 0x100:
                return pyboy_boot_rom()[addr]
            return self.rom[(f["rom_bank_low"] * 0x4000 + addr) % len(self.rom)]
        if addr < 0x8000:
            return self.rom[(f["rom_bank"] * 0x4000 + addr - 0x4000) % len(self.rom)]
        if addr < 0xA000:
            return int(r["vram"][addr - 0x8000])
        if addr < 0xC000:
            if not f["ram_enabled"]:
                return 0xFF
            bank = 0 if self.cart.mbc == 2 else f["ram_bank"]
            if bank >= self.cart.ram_banks:
                return 0
            value = int(r["cart"][(bank * 0x2000 + (addr & (0x1FF if self.cart.mbc == 2 else 0x1FFF)))])
            return value | 0xF0 if self.cart.mbc == 2 else value
        if addr < 0xFE00:
            return int(r["wram"][(addr - 0xC000) & 0x1FFF])
        if addr < 0xFEA0:
            return int(r["oam"][addr - 0xFE00])
        if addr < 0xFF00:
            return int(r["unusable"][addr - 0xFEA0])
        return self.io(addr)

    def io(self, addr: int) -> int:
        f = self.fields
        regs = {0xFF00: f["joyp"], 0xFF01: f["sb"], 0xFF02: f["sc"], 0xFF04: f["div_counter"] >> 8,
                0xFF05: 0 if f["tima_reload"] == 1 else f["tima"], 0xFF06: f["tma"], 0xFF07: f["tac"] | 0xF8,
                0xFF0F: f["if_"] | 0xE0, 0xFF40: f["lcdc"], 0xFF41: f["stat"], 0xFF42: f["scy"],
                0xFF43: f["scx"], 0xFF44: f["ly"], 0xFF45: f["lyc"], 0xFF46: f["dma_source"],
                0xFF47: f["bgp"], 0xFF48: f["obp0"], 0xFF49: f["obp1"], 0xFF4A: f["wy"], 0xFF4B: f["wx"],
                0xFFFF: f["ie"]}
        if addr in regs:
            return regs[addr] & 0xFF
        if 0xFF80 <= addr < 0xFFFF:
            return int(self.regions["hram"][addr - 0xFF80])
        if 0xFF10 <= addr < 0xFF40:
            return 0
        return 0xFF
