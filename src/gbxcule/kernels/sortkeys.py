"""The keys `WarpVecBackend`'s `sort_envs` orders threads by, one thread per env (docs/divergence.md):

- `sort_key_kernel`: (PC, action).
- `path_key_kernel`: (instructions run since the last sort, PC, action).
- `stack_key_kernel`: (the word at SP, PC, action).
- `offset_kernel`: a stream group's sorted env numbers moved up to the group's first env.
"""

import warp as wp

from gbxcule.core.schema import NUM_FIELDS

# The `path` key's work bucket: instructions >> PATH_SHIFT, at most PATH_TOP (11 bits above PC and action).
PATH_SHIFT = wp.constant(3)
PATH_TOP = wp.constant(2047)
_NF = wp.constant(NUM_FIELDS)  # words a env's fields take (they are consecutive: fields[e * _NF + f])


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
