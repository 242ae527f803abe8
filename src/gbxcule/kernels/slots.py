"""Whole env states copied on the device: between envs and the slots of a slot store, from env to env, and
from or to the host (docs/state_format.md, "Device slots").

A slot holds one env's state contiguously: its `FIELDS` (int32), then its RAM regions packed 4 bytes to a
little-endian uint32 word (the last word zero-padded); a store made with frames also holds each slot's
observation ([72, W] uint8) and screen ([144, 160] uint8). An env's fields are consecutive words
(`fields[e * NUM_FIELDS + f]`) and so are its RAM bytes (`ram[e, o]`; `core/schema.py`): a copy between an env
and a slot moves one run of words.

Every copy kernel is masked and runs on a grid of (env, thread) pairs, a run of threads per env: a thread of
an env whose mask entry is 0 returns at once, a thread of a masked env copies every `threads`-th word of the
state, starting at its own index, so an env's threads store adjacent words (the state is env-major). A chunk
of the whole state gives one thread per env (best on the CPU device, where threads run in turn); smaller
chunks spread one env over many GPU threads. Indices given by the caller (slots, source envs) are reduced
into range before use.

- `save_kernel`: masked env e into slot `slots[e]`.
- `restore_kernel`: masked env e from slot `slots[e]`, or from the seeded rule `reset_slot(seed, e, epoch)`.
- `clone_kernel`: masked env e from env `src[e]` (fields, RAM and the SB ring).
- `frames_kernel`: the observation and screen that go with a save, restore or clone; a restored env's
  observation fills every position of a frame stack.
- `broadcast_kernel`: one state into every env (the backend's reset to its start state).
- `gather_kernel`: the rows of a few envs, for reading them on the host.
- `serial_scatter_kernel`: uploaded SB rings into a few envs.

`SlotStore` owns a store's arrays and launches these; `WarpVecBackend` is the door to them. A store made with
`host=True` keeps its arrays in host memory (pinned where the device is a GPU) and hands the kernels arrays of the
device at the same addresses (CUDA's unified addressing maps pinned host memory into every device), so the kernels
read and write the slots over the bus and the store's size is bounded by the host's memory, not the GPU's.
"""

from typing import Any

import numpy as np
import warp as wp

# Multipliers of the slot rule (golden ratio, MurmurHash3's constants).
_K_SEED = wp.constant(wp.uint32(0x9E3779B1))
_K_ENV = wp.constant(wp.uint32(0x85EBCA77))
_K_EPOCH = wp.constant(wp.uint32(0xC2B2AE3D))
_K_MIX1 = wp.constant(wp.uint32(0x85EBCA6B))
_K_MIX2 = wp.constant(wp.uint32(0xC2B2AE35))
# frames_kernel directions
GATHER = wp.constant(0)  # env e takes item idx[e] (restore from a slot, clone from an env)
SCATTER = wp.constant(1)  # item idx[e] takes env e (save into a slot)


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


@wp.func
def in_range(i: wp.int32, count: wp.int32) -> wp.int32:
    """`i` mod `count`, never negative: a caller's index made safe to address with."""
    k = i % count
    if k < 0:
        k = k + count
    return k


@wp.kernel(enable_backward=False)
def save_kernel(mask: wp.array(dtype=Any), slots: wp.array(dtype=wp.int32), fields: wp.array(dtype=wp.int32),
                ram: wp.array2d(dtype=wp.uint8), slot_fields: wp.array(dtype=wp.int32),
                slot_ram: wp.array(dtype=wp.uint32), num_slots: wp.int32, num_fields: wp.int32, ram_bytes: wp.int32,
                threads: wp.int32):
    """Copy every env whose mask entry is non-zero into slot `slots[e]`; dim = (n, threads), thread c of env e
    writing words c, c + threads ... of the slot (RAM words packed from 4 bytes)."""
    e, c = wp.tid()
    if wp.int32(mask[e]) == 0:
        return
    k = in_range(slots[e], num_slots)
    ram_words = (ram_bytes + 3) / 4
    end = num_fields + ram_words
    w = c
    while w < end:
        if w < num_fields:
            slot_fields[k * num_fields + w] = fields[e * num_fields + w]
        else:
            q = w - num_fields
            word = wp.uint32(0)
            for i in range(4):
                o = q * 4 + i
                if o < ram_bytes:
                    word = word | (wp.uint32(ram[e, o]) << wp.uint32(8 * i))
            slot_ram[k * ram_words + q] = word
        w = w + threads


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
        k = in_range(slots[e], num_slots)
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


@wp.kernel(enable_backward=False)
def clone_kernel(mask: wp.array(dtype=Any), src: wp.array(dtype=wp.int32), fields: wp.array(dtype=wp.int32),
                 ram: wp.array2d(dtype=wp.uint8), serial: wp.array(dtype=wp.uint8), n: wp.int32,
                 num_fields: wp.int32, ram_bytes: wp.int32, serial_bytes: wp.int32, threads: wp.int32):
    """Copy env `src[e]` into every env e whose mask entry is non-zero: fields, RAM bytes, then the SB ring
    (interleaved: `serial[s * n + env]`); dim = (n, threads) as in `restore_kernel`."""
    e, c = wp.tid()
    if wp.int32(mask[e]) == 0:
        return
    s = in_range(src[e], n)
    end = num_fields + ram_bytes + serial_bytes
    w = c
    while w < end:
        if w < num_fields:
            fields[e * num_fields + w] = fields[s * num_fields + w]
        elif w < num_fields + ram_bytes:
            ram[e, w - num_fields] = ram[s, w - num_fields]
        else:
            q = w - num_fields - ram_bytes
            serial[q * n + e] = serial[q * n + s]
        w = w + threads


@wp.kernel(enable_backward=False)
def frames_kernel(mask: wp.array(dtype=Any), idx: wp.array(dtype=wp.int32), direction: wp.int32, count: wp.int32,
                  seeded: wp.int32, seed: wp.int32, epoch: wp.int32, src_obs: wp.array4d(dtype=wp.uint8),
                  dst_obs: wp.array4d(dtype=wp.uint8), src_screen: wp.array3d(dtype=wp.uint8),
                  dst_screen: wp.array3d(dtype=wp.uint8), with_obs: wp.int32, with_screen: wp.int32):
    """The observation and screen that go with a state copy, for every env e whose mask entry is non-zero;
    dim = (n, 72), one observation row and two screen rows a thread. GATHER: env e takes item k (a slot,
    `idx[e]` or the seeded rule, or a source env `idx[e]`), SCATTER: item k = `idx[e]` takes env e; k is
    reduced modulo `count`. Observations are frame stacks [items, P, 72, W]: position p of the destination
    takes position p mod P_src of the source, so a slot's one frame fills a restored env's whole stack."""
    e, r = wp.tid()
    if wp.int32(mask[e]) == 0:
        return
    k = wp.int32(0)
    if seeded != 0:
        k = reset_slot(seed, e, epoch, count)
    else:
        k = in_range(idx[e], count)
    s = wp.where(direction == GATHER, k, e)
    d = wp.where(direction == GATHER, e, k)
    if with_obs != 0:
        for p in range(dst_obs.shape[1]):
            q = p % src_obs.shape[1]
            for c in range(dst_obs.shape[3]):
                dst_obs[d, p, r, c] = src_obs[s, q, r, c]
    if with_screen != 0:
        for h in range(2):
            for c in range(dst_screen.shape[2]):
                dst_screen[d, 2 * r + h, c] = src_screen[s, 2 * r + h, c]


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
def serial_scatter_kernel(src: wp.array2d(dtype=wp.uint8), ids: wp.array(dtype=wp.int32),
                          ring: wp.array(dtype=wp.uint8), n: wp.int32):
    """SB rings of uploaded states (`src` [M, capture]) into envs `ids` (the j-th takes state j mod M) of the
    interleaved ring (`ring[s * n + env]`); dim = (capture, len(ids))."""
    s, j = wp.tid()
    ring[s * n + ids[j]] = src[j % src.shape[0], s]


GPU_CHUNK = 64  # state words per thread on CUDA devices (see the module docstring; `gbxcule bench --reset`)


def default_chunk(device: str) -> int | None:
    """Words per copy thread: the whole state on the CPU device, `GPU_CHUNK` on CUDA."""
    return None if str(device).startswith("cpu") else GPU_CHUNK


def pack_ram(ram: np.ndarray, ram_words: int) -> np.ndarray:
    """RAM bytes of envs ([M, bytes]) as little-endian uint32 words ([M, ram_words]), zero-padded."""
    ram = np.atleast_2d(np.asarray(ram, dtype=np.uint8))
    buf = np.zeros((ram.shape[0], ram_words * 4), dtype=np.uint8)
    buf[:, :ram.shape[1]] = ram
    return buf.view("<u4").astype(np.uint32)


def threads_per_env(words: int, chunk: int | None) -> int:
    """Threads per env for a state of `words` words copied about `chunk` words a thread (None: one thread)."""
    step = words if chunk is None else max(1, min(int(chunk), words))
    return (words + step - 1) // step


def as_stack(obs):
    """A [N, 72, W] observation array as a frame stack [N, 1, 72, W] (a view); a stack as it is."""
    return obs if obs.ndim == 4 else obs.reshape((obs.shape[0], 1, obs.shape[1], obs.shape[2]))


class SlotStore:
    """`num_slots` env states on a device (see the module docstring); `obs_width` > 0: with frames (each
    slot's observation [72, obs_width] and screen [144, 160])."""

    def __init__(self, num_slots: int, num_fields: int, ram_bytes: int, device: str, seed: int = 0,
                 obs_width: int = 0, host: bool = False):
        if num_slots < 1:
            raise ValueError(f"a slot store needs at least one slot, got {num_slots}")
        self.num_slots, self.num_fields, self.ram_bytes, self.device = num_slots, num_fields, ram_bytes, device
        self.seed, self.host = seed, bool(host)
        self.ram_words = (ram_bytes + 3) // 4
        self.words = num_fields + self.ram_words
        self._host_views: dict[str, Any] = {}  # with `host`: each array's host array (the same memory)
        self.fields = self._zeros("fields", num_slots * num_fields, wp.int32)
        self.ram = self._zeros("ram", num_slots * self.ram_words, wp.uint32)
        self.obs = self.screen = None
        if obs_width:
            self.obs = self._zeros("obs", (num_slots, 72, obs_width), wp.uint8)
            self.screen = self._zeros("screen", (num_slots, 144, 160), wp.uint8)
        self._dummy_slots = wp.zeros(1, dtype=wp.int32, device=device)
        self.epoch = 0  # seeded restores so far: the rule's third input

    def _zeros(self, name: str, shape, dtype):
        """A zeroed array for the kernels: on the device, or with `host` in host memory (pinned on a GPU) seen
        through an array of the device at the same address, the host array kept for `views`."""
        if not self.host:
            return wp.zeros(shape, dtype=dtype, device=self.device)
        dev = wp.get_device(self.device)
        mem = wp.zeros(shape, dtype=dtype, device="cpu", pinned=dev.is_cuda)
        self._host_views[name] = mem
        return wp.array(ptr=mem.ptr, dtype=dtype, shape=mem.shape, device=dev)

    def views(self) -> tuple:
        """(fields, ram, obs, screen): the arrays to read or write many slots at once from outside the kernels.
        The device arrays; with `host` the host arrays, once the device's queued work is done (synchronises)."""
        if not self.host:
            return self.fields, self.ram, self.obs, self.screen
        wp.synchronize_device(self.device)
        v = self._host_views
        return v["fields"], v["ram"], v.get("obs"), v.get("screen")

    def check_slot(self, slot: int) -> int:
        if not 0 <= slot < self.num_slots:
            raise IndexError(f"slot {slot} out of range for a store of {self.num_slots} slots")
        return slot

    def upload(self, first: int, fields: np.ndarray, ram: np.ndarray) -> None:
        """Write host states (fields int32 [M, F], RAM uint8 [M, ram_bytes]) into slots first..first+M-1."""
        fields = np.atleast_2d(np.asarray(fields, dtype=np.int32))
        self.check_slot(first)
        self.check_slot(first + len(fields) - 1)
        words = pack_ram(ram, self.ram_words).reshape(-1)
        if self.host:  # straight into the host memory, once the device is done with it
            vf, vr = self.views()[:2]
            vf.numpy()[first * self.num_fields:first * self.num_fields + fields.size] = fields.reshape(-1)
            vr.numpy()[first * self.ram_words:first * self.ram_words + words.size] = words
            return
        f = wp.array(fields.reshape(-1), dtype=wp.int32, device=self.device)
        r = wp.array(words, dtype=wp.uint32, device=self.device)
        wp.copy(self.fields, f, dest_offset=first * self.num_fields, count=f.shape[0])
        wp.copy(self.ram, r, dest_offset=first * self.ram_words, count=r.shape[0])

    def download(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """(fields int32 [F], RAM uint8 [ram_bytes]) of `slot` on the host (synchronises)."""
        self.check_slot(slot)
        vf, vr = self.views()[:2]
        f = vf.numpy()[slot * self.num_fields:(slot + 1) * self.num_fields].copy()
        words = vr.numpy()[slot * self.ram_words:(slot + 1) * self.ram_words]
        return f, words.astype("<u4").view(np.uint8)[:self.ram_bytes].copy()

    def save(self, fields, ram, n: int, mask, slots, chunk: int | None = None, obs=None, screen=None) -> None:
        """Copy every env e of the backend's arrays whose `mask` entry is non-zero into slot `slots[e]`, with
        its observation `obs` ([n, 72, W]) and screen when the store holds frames. The masked envs must name
        distinct slots. One launch (two with frames), no synchronisation."""
        check_env_array(mask, n, self.device, "mask", (wp.int32, wp.uint8, wp.bool))
        check_env_array(slots, n, self.device, "slots", (wp.int32,))
        threads = threads_per_env(self.words, chunk)
        wp.launch(save_kernel, dim=(n, threads), device=self.device,
                  inputs=[mask, slots, fields, ram, self.fields, self.ram, self.num_slots, self.num_fields,
                          self.ram_bytes, threads])
        if self.obs is not None:
            wp.launch(frames_kernel, dim=(n, 72), device=self.device,
                      inputs=[mask, slots, SCATTER, self.num_slots, 0, 0, 0, as_stack(obs), as_stack(self.obs),
                              screen, self.screen, 1, 1])

    def restore(self, fields, ram, n: int, mask, slots=None, chunk: int | None = None, obs=None,
                screen=None) -> None:
        """Restore every env whose `mask` entry (int32, uint8 or bool device array [n]) is non-zero from
        `slots[e]` (int32 device array [n]) or, without `slots`, from the seeded rule (advancing the epoch).
        With frames also the env's screen and its observation into every position of `obs` (a frame stack
        [n, P, 72, W] or an observation [n, 72, W]). One launch (two with frames), no synchronisation.
        `chunk`: about that many words per thread (default: the whole slot, one thread per env)."""
        check_env_array(mask, n, self.device, "mask", (wp.int32, wp.uint8, wp.bool))
        if slots is not None:
            check_env_array(slots, n, self.device, "slots", (wp.int32,))
        threads = threads_per_env(self.words, chunk)
        seeded = slots is None
        seed, epoch = self.seed & 0x7FFFFFFF, self.epoch & 0x7FFFFFFF
        idx = self._dummy_slots if seeded else slots
        wp.launch(restore_kernel, dim=(n, threads), device=self.device,
                  inputs=[mask, idx, fields, ram, self.fields, self.ram, n, self.num_slots, int(seeded), seed, epoch,
                          self.num_fields, self.ram_bytes, threads])
        if self.obs is not None:
            wp.launch(frames_kernel, dim=(n, 72), device=self.device,
                      inputs=[mask, idx, GATHER, self.num_slots, int(seeded), seed, epoch, as_stack(self.obs),
                              as_stack(obs), self.screen, screen, 1, 1])
        if seeded:
            self.epoch += 1


def check_env_array(arr, n: int, device: str, what: str, dtypes: tuple) -> None:
    """Raise ValueError unless `arr` is a Warp array [n] of one of `dtypes` on `device` (no synchronisation)."""
    if not isinstance(arr, wp.array) or arr.ndim != 1 or arr.shape[0] != n or arr.dtype not in dtypes:
        got = f"{getattr(arr, 'dtype', type(arr))} {getattr(arr, 'shape', '')}"
        names = "/".join(d.__name__ for d in dtypes)
        raise ValueError(f"{what} must be a Warp {names} array of shape ({n},), got {got}")
    if str(arr.device) != str(wp.get_device(device)):
        raise ValueError(f"{what} is on {arr.device}, the envs are on {device}")
