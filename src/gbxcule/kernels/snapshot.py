"""Env states on the device: a slot store, per-env snapshots into it and masked restores from it.

A slot holds one env's state contiguously: its `FIELDS` (int32), then its RAM regions packed 4 bytes to a
little-endian uint32 word (the last word zero-padded). An env's fields are consecutive words
(`fields[e * NUM_FIELDS + f]`) and so are its RAM bytes (`ram[e, o]`; `core/schema.py`): a copy between an env
and a slot moves one run of words.

- `save_slot_kernel`: one thread per word of the slot, copying one env into it.
- `restore_kernel`: threads over (env, thread) pairs, a run of threads per env; a thread of an env whose
  mask entry is 0 returns at once, a thread of a masked env copies every `threads`-th word of its slot
  into the env, starting at its own index, so an env's threads store adjacent words (the state is
  env-major). A chunk of the whole slot gives one thread per env (best on the CPU device, where threads run
  in turn); smaller chunks spread one env over many GPU threads. The slot of env e is `slots[e]` (reduced
  into range), or by the seeded rule `reset_slot(seed, e, epoch) % K`.
- `gather_kernel`: the rows of a few envs, for reading them on the host.
- `sort_key_kernel`, `path_key_kernel`, `stack_key_kernel`: the keys the backend's `sort_envs` orders threads
  by: (PC, action), (instructions run since the last sort, PC, action), or (the word at SP, PC, action).
- `broadcast_kernel`: one state into every env (the backend's reset to its start state).
- `pyboy_loader_kernel`: what PyBoy's state loader recomputes instead of loading (the STAT line, the
  mode-3 length, the RTC catch-up), run on the CPU device with the kernels' own functions.

`SlotStore` owns the device arrays and launches these; `WarpVecBackend` exposes it (docs/state_format.md).
"""

from typing import Any

import numpy as np
import warp as wp

from gbxcule.core.schema import NUM_FIELDS
from gbxcule.kernels.mbc import rtc_advance_seconds
from gbxcule.kernels.ppu import mode3_adjustment, stat_update_line
from gbxcule.kernels.state import Gb, Mem

# Multipliers of the slot rule (golden ratio, MurmurHash3's constants).
_K_SEED = wp.constant(wp.uint32(0x9E3779B1))
_K_ENV = wp.constant(wp.uint32(0x85EBCA77))
_K_EPOCH = wp.constant(wp.uint32(0xC2B2AE3D))
# The `path` key's work bucket: instructions >> PATH_SHIFT, at most PATH_TOP (11 bits above PC and action).
PATH_SHIFT = wp.constant(3)
PATH_TOP = wp.constant(2047)
_K_MIX1 = wp.constant(wp.uint32(0x85EBCA6B))
_K_MIX2 = wp.constant(wp.uint32(0xC2B2AE35))
_NF = wp.constant(NUM_FIELDS)  # words a env's fields take (they are consecutive: fields[e * _NF + f])


@wp.func
def reset_slot(seed: wp.int32, env: wp.int32, epoch: wp.int32, num_slots: wp.int32) -> wp.int32:
    """The seeded slot rule: a 32-bit hash of (seed, env, epoch) (MurmurHash3's finaliser) modulo K."""
    h = (wp.uint32(seed) * _K_SEED) ^ (wp.uint32(env) * _K_ENV) ^ (wp.uint32(epoch) * _K_EPOCH)
    h = h ^ (h >> wp.uint32(16))
    h = h * _K_MIX1
    h = h ^ (h >> wp.uint32(13))
    h = h * _K_MIX2
    h = h ^ (h >> wp.uint32(16))
    return wp.int32(h % wp.uint32(num_slots))


@wp.kernel(enable_backward=False)
def save_slot_kernel(fields: wp.array(dtype=wp.int32), ram: wp.array2d(dtype=wp.uint8),
                     slot_fields: wp.array(dtype=wp.int32), slot_ram: wp.array(dtype=wp.uint32),
                     n: wp.int32, env: wp.int32, slot: wp.int32, num_fields: wp.int32, ram_bytes: wp.int32):
    """Copy env `env` into slot `slot`; one thread per slot word (fields, then RAM words)."""
    w = wp.tid()
    ram_words = (ram_bytes + 3) / 4
    if w < num_fields:
        slot_fields[slot * num_fields + w] = fields[env * num_fields + w]
        return
    q = w - num_fields
    word = wp.uint32(0)
    for i in range(4):
        o = q * 4 + i
        if o < ram_bytes:
            word = word | (wp.uint32(ram[env, o]) << wp.uint32(8 * i))
    slot_ram[slot * ram_words + q] = word


@wp.kernel(enable_backward=False)
def restore_kernel(mask: wp.array(dtype=Any), slots: wp.array(dtype=wp.int32), fields: wp.array(dtype=wp.int32),
                   ram: wp.array2d(dtype=wp.uint8), slot_fields: wp.array(dtype=wp.int32),
                   slot_ram: wp.array(dtype=wp.uint32), n: wp.int32, num_slots: wp.int32, seeded: wp.int32,
                   seed: wp.int32, epoch: wp.int32, num_fields: wp.int32, ram_bytes: wp.int32, threads: wp.int32):
    """Copy the slot of every env whose mask entry is non-zero into it; dim = (n, threads): thread c of env e
    copies words c, c + threads, c + 2 * threads ... of the slot, so the lanes of a warp (one env's threads,
    when it has 32 or more) store adjacent words."""
    e, c = wp.tid()
    if wp.int32(mask[e]) == 0:
        return
    k = wp.int32(0)
    if seeded != 0:
        k = reset_slot(seed, e, epoch, num_slots)
    else:
        k = slots[e] % num_slots
        if k < 0:
            k = k + num_slots
    ram_words = (ram_bytes + 3) / 4
    end = num_fields + ram_words
    w = c
    while w < end:
        if w < num_fields:
            fields[e * num_fields + w] = slot_fields[k * num_fields + w]
        else:
            q = w - num_fields
            word = slot_ram[k * ram_words + q]
            for i in range(4):
                o = q * 4 + i
                if o < ram_bytes:
                    ram[e, o] = wp.uint8((word >> wp.uint32(8 * i)) & wp.uint32(0xFF))
        w = w + threads


# regs of pyboy_loader_kernel: inputs, then outputs
@wp.kernel(enable_backward=False)
def broadcast_kernel(src_fields: wp.array(dtype=wp.int32), src_ram: wp.array(dtype=wp.uint8),
                     fields: wp.array(dtype=wp.int32), ram: wp.array2d(dtype=wp.uint8), num_fields: wp.int32):
    """Every env gets one state (fields, then RAM bytes); dim = (n, fields + RAM bytes). Consecutive
    threads are consecutive words of one env: adjacent stores on both devices (both are env-major)."""
    e, w = wp.tid()
    if w < num_fields:
        fields[e * num_fields + w] = src_fields[w]
    else:
        ram[e, w - num_fields] = src_ram[w - num_fields]


@wp.kernel(enable_backward=False)
def gather_kernel(src: wp.array2d(dtype=Any), ids: wp.array(dtype=wp.int32), out: wp.array2d(dtype=Any)):
    """Columns `ids` of a [rows, n] array (or view) into a compact one ([rows, len(ids)]), so reading a
    few envs moves only their bytes off the device; dim = (rows, len(ids))."""
    w, j = wp.tid()
    out[w, j] = src[w, ids[j]]


@wp.kernel(enable_backward=False)
def sort_key_kernel(fields: wp.array(dtype=wp.int32), actions: wp.array(dtype=wp.int32), keys: wp.array(dtype=wp.int32),
                    envs: wp.array(dtype=wp.int32), pc_row: wp.int32):
    """Key of env e for grouping envs into warps: its PC, then its action this step (low 8 bits)."""
    e = wp.tid()
    keys[e] = ((fields[e * _NF + pc_row] & 0xFFFF) << 8) | (actions[e] & 0xFF)
    envs[e] = e


@wp.kernel(enable_backward=False)
def path_key_kernel(fields: wp.array(dtype=wp.int32), actions: wp.array(dtype=wp.int32), prev: wp.array(dtype=wp.int32),
                    keys: wp.array(dtype=wp.int32), envs: wp.array(dtype=wp.int32), pc_row: wp.int32,
                    instr_row: wp.int32, waited: wp.array(dtype=wp.int32), heavy_first: wp.int32):
    """Key of env e by the path it took since the last sort: the instructions it ran since then, less those
    of skipped wait-loop rounds (`waited`, kernels/idle.py) (a fingerprint of the code path: envs in the same
    game mode run the same count; time halted or waiting counts nothing), then its PC, then its action (low 4
    bits). Sorting on it groups envs that will likely run the same code this frame even when they all wait at
    the same HALT. `heavy_first` 1 puts the most work first (blocks go to SMs in thread order: heavy ones
    started last leave SMs idle at the launch's end), 0 the least. `prev` keeps each env's work count for the
    next sort; 31 key bits."""
    e = wp.tid()
    now = wp.int32(wp.uint32(fields[e * _NF + instr_row]) - wp.uint32(waited[e]))
    ran = wp.int32(wp.uint32(now) - wp.uint32(prev[e]))  # the counter wraps: a uint32 difference
    prev[e] = now
    bucket = wp.clamp(ran >> PATH_SHIFT, 0, PATH_TOP)  # a restore or reset in between gives any value: in range
    bucket = wp.where(heavy_first != 0, PATH_TOP - bucket, bucket)
    keys[e] = (bucket << 20) | ((fields[e * _NF + pc_row] & 0xFFFF) << 4) | (actions[e] & 0xF)
    envs[e] = e


@wp.kernel(enable_backward=False)
def offset_kernel(envs: wp.array(dtype=wp.int32), offset: wp.int32):
    """A stream group's sorted env numbers (from 0 within the group) moved up to the group's first env."""
    i = wp.tid()
    envs[i] = envs[i] + offset


@wp.kernel(enable_backward=False)
def stack_key_kernel(fields: wp.array(dtype=wp.int32), actions: wp.array(dtype=wp.int32),
                     ram: wp.array2d(dtype=wp.uint8), keys: wp.array(dtype=wp.int32), envs: wp.array(dtype=wp.int32),
                     pc_row: wp.int32, sp_row: wp.int32, wram: wp.int32, hram: wp.int32):
    """Key of env e by its caller: the 16-bit word at SP (the return address of the routine it waits in,
    when SP lies in WRAM or HRAM, else 0), then its PC's low 11 bits, then its action (low 4 bits): envs that
    wait at the same HALT from different game modes part. RAM rows are masked into the region: a wild SP
    reads inside it. 31 key bits."""
    e = wp.tid()
    sp = fields[e * _NF + sp_row] & 0xFFFF
    w_lo = wram + ((sp - 0xC000) & 0x1FFF)
    w_hi = wram + ((sp + 1 - 0xC000) & 0x1FFF)  # 0xDFFF + 1 reads 0xC000, as the echo does
    h_lo = hram + wp.min((sp - 0xFF80) & 0x7F, 125)
    h_hi = hram + wp.min((sp + 1 - 0xFF80) & 0x7F, 126)
    in_w = sp >= 0xC000 and sp <= 0xDFFF
    in_h = sp >= 0xFF80 and sp <= 0xFFFD
    w_word = wp.int32(ram[e, w_lo]) | (wp.int32(ram[e, w_hi]) << 8)
    h_word = wp.int32(ram[e, h_lo]) | (wp.int32(ram[e, h_hi]) << 8)
    caller = wp.where(in_w, w_word, wp.where(in_h, h_word, 0))
    keys[e] = (caller << 15) | ((fields[e * _NF + pc_row] & 0x7FF) << 4) | (actions[e] & 0xF)
    envs[e] = e


LOADER_IN = ("stat", "lcdc", "scx", "ly", "first_frame")
LOADER_OUT = ("stat_irq_line", "mode3_adj")
LOADER_RTC = ("rtc_s", "rtc_m", "rtc_h", "rtc_dl", "rtc_dh", "rtc_carry")


@wp.kernel(enable_backward=False)
def pyboy_loader_kernel(m: Mem, regs: wp.array(dtype=wp.int32), rtc: wp.array(dtype=wp.int32), seconds: wp.int32):
    """One env: the STAT line from STAT, the mode-3 length when in mode 3 (OAM in m.ram, one env), and the
    RTC advanced by `seconds`."""
    g = Gb()
    g.n = 1
    g.stat = regs[0]
    g.stat_mode = regs[0] & 3
    g.lcdc = regs[1]
    g.scx = regs[2]
    g.first_frame = regs[4]
    stat_update_line(g)
    regs[5] = g.stat_irq_line
    if g.stat_mode == 3:
        regs[6] = mode3_adjustment(g, m, regs[3], 0)
    g.rtc_s = rtc[0]
    g.rtc_m = rtc[1]
    g.rtc_h = rtc[2]
    g.rtc_dl = rtc[3]
    g.rtc_dh = rtc[4]
    g.rtc_carry = rtc[5]
    rtc_advance_seconds(g, seconds)
    rtc[0] = g.rtc_s
    rtc[1] = g.rtc_m
    rtc[2] = g.rtc_h
    rtc[3] = g.rtc_dl
    rtc[4] = g.rtc_dh
    rtc[5] = g.rtc_carry


def pyboy_loader_values(regs: dict[str, int], oam: np.ndarray, rtc: dict[str, int], seconds: int) -> dict[str, int]:
    """Run `pyboy_loader_kernel` on the CPU device: {LOADER_OUT and LOADER_RTC names: values}. This is the
    `derive` argument of `gbxcule.core.savestate.env_from_pyboy` and `decode_states`."""
    from gbxcule.kernels import init_warp

    init_warp()
    m = Mem()
    m.ram = wp.array(np.asarray(oam, dtype=np.uint8).reshape(-1, 1), dtype=wp.uint8, device="cpu")
    m.oam = 0
    r = wp.array(np.array([regs[k] for k in LOADER_IN] + [0, 0], dtype=np.int32), dtype=wp.int32, device="cpu")
    t = wp.array(np.array([rtc[k] for k in LOADER_RTC], dtype=np.int32), dtype=wp.int32, device="cpu")
    wp.launch(pyboy_loader_kernel, dim=1, inputs=[m, r, t, seconds], device="cpu")
    out = dict(zip(LOADER_OUT, (int(x) for x in r.numpy()[len(LOADER_IN):]), strict=True))
    return out | dict(zip(LOADER_RTC, (int(x) for x in t.numpy()), strict=True))


GPU_CHUNK = 64  # slot words per thread on CUDA devices (see the module docstring; `gbxcule bench --reset`)


def default_chunk(device: str) -> int | None:
    """Words per restore thread: the whole slot on the CPU device, `GPU_CHUNK` on CUDA."""
    return None if str(device).startswith("cpu") else GPU_CHUNK


def pack_ram(ram: np.ndarray, ram_words: int) -> np.ndarray:
    """RAM bytes of envs ([M, bytes]) as little-endian uint32 words ([M, ram_words]), zero-padded."""
    ram = np.atleast_2d(np.asarray(ram, dtype=np.uint8))
    buf = np.zeros((ram.shape[0], ram_words * 4), dtype=np.uint8)
    buf[:, :ram.shape[1]] = ram
    return buf.view("<u4").astype(np.uint32)


class SlotStore:
    """`num_slots` env states on a device (see the module docstring)."""

    def __init__(self, num_slots: int, num_fields: int, ram_bytes: int, device: str, seed: int = 0):
        if num_slots < 1:
            raise ValueError(f"a slot store needs at least one slot, got {num_slots}")
        self.num_slots, self.num_fields, self.ram_bytes, self.device = num_slots, num_fields, ram_bytes, device
        self.seed = seed
        self.ram_words = (ram_bytes + 3) // 4
        self.words = num_fields + self.ram_words
        self.fields = wp.zeros(num_slots * num_fields, dtype=wp.int32, device=device)
        self.ram = wp.zeros(num_slots * self.ram_words, dtype=wp.uint32, device=device)
        self._dummy_slots = wp.zeros(1, dtype=wp.int32, device=device)
        self.epoch = 0  # seeded restores so far: the rule's third input

    def check_slot(self, slot: int) -> int:
        if not 0 <= slot < self.num_slots:
            raise IndexError(f"slot {slot} out of range for a store of {self.num_slots} slots")
        return slot

    def upload(self, first: int, fields: np.ndarray, ram: np.ndarray) -> None:
        """Write host states (fields int32 [M, F], RAM uint8 [M, ram_bytes]) into slots first..first+M-1."""
        fields = np.atleast_2d(np.asarray(fields, dtype=np.int32))
        self.check_slot(first)
        self.check_slot(first + len(fields) - 1)
        f = wp.array(fields.reshape(-1), dtype=wp.int32, device=self.device)
        r = wp.array(pack_ram(ram, self.ram_words).reshape(-1), dtype=wp.uint32, device=self.device)
        wp.copy(self.fields, f, dest_offset=first * self.num_fields, count=f.shape[0])
        wp.copy(self.ram, r, dest_offset=first * self.ram_words, count=r.shape[0])

    def download(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """(fields int32 [F], RAM uint8 [ram_bytes]) of `slot` on the host (synchronises)."""
        self.check_slot(slot)
        f = self.fields.numpy()[slot * self.num_fields:(slot + 1) * self.num_fields].copy()
        words = self.ram.numpy()[slot * self.ram_words:(slot + 1) * self.ram_words]
        return f, words.astype("<u4").view(np.uint8)[:self.ram_bytes].copy()

    def save(self, fields, ram, n: int, env: int, slot: int) -> None:
        """Copy env `env` of the backend's arrays into `slot` (one launch, no synchronisation)."""
        self.check_slot(slot)
        wp.launch(save_slot_kernel, dim=self.words, device=self.device,
                  inputs=[fields, ram, self.fields, self.ram, n, env, slot, self.num_fields, self.ram_bytes])

    def restore(self, fields, ram, n: int, mask, slots=None, chunk: int | None = None) -> None:
        """Restore every env whose `mask` entry (int32, uint8 or bool device array [n]) is non-zero from
        `slots[e]` (int32 device array [n]) or, without `slots`, from the seeded rule (advancing the epoch).
        One launch, no synchronisation. `chunk`: about that many words per thread, every `chunks`-th word of
        the slot (default: the whole slot, one thread per env)."""
        _check_env_array(mask, n, self.device, "mask", (wp.int32, wp.uint8, wp.bool))
        if slots is not None:
            _check_env_array(slots, n, self.device, "slots", (wp.int32,))
        step = self.words if chunk is None else max(1, min(int(chunk), self.words))
        chunks = (self.words + step - 1) // step
        seeded = slots is None
        wp.launch(restore_kernel, dim=(n, chunks), device=self.device,
                  inputs=[mask, self._dummy_slots if seeded else slots, fields, ram, self.fields, self.ram, n,
                          self.num_slots, int(seeded), self.seed & 0x7FFFFFFF, self.epoch & 0x7FFFFFFF,
                          self.num_fields, self.ram_bytes, chunks])
        if seeded:
            self.epoch += 1


def _check_env_array(arr, n: int, device: str, what: str, dtypes: tuple) -> None:
    if not isinstance(arr, wp.array) or arr.ndim != 1 or arr.shape[0] != n or arr.dtype not in dtypes:
        got = f"{getattr(arr, 'dtype', type(arr))} {getattr(arr, 'shape', '')}"
        names = "/".join(d.__name__ for d in dtypes)
        raise ValueError(f"{what} must be a Warp {names} array of shape ({n},), got {got}")
    if str(arr.device) != str(wp.get_device(device)):
        raise ValueError(f"{what} is on {arr.device}, the envs are on {device}")
