"""Lane regrouping inside a warp (kernel option `regroup`): which lanes of a warp run the next instruction.

A warp of 32 envs whose emulated PCs differ walks each instruction family in turn. Envs that play the same
code but at different points of it (phase-shifted loops) stay apart for good. With `regroup`, the lanes of a
warp that reach the top of the instruction loop together let only one group run the next instruction; the
others wait a round. `min` runs the lanes at the lowest key (laggards in straight-line code catch up with
those ahead), `most` the largest group of equal keys, `nearN` the lowest key among the lanes whose keys share an
N-byte block (lanes far apart run together as before). The key is the PC (0 for an interrupt dispatch, which goes
first).

Only the interleaving of lanes changes: each env runs the same instructions in the same order, so results are
the same bit for bit. On the CPU device (one env at a time) every lane always runs."""

import warp as wp

_MIN = """
#if defined(__CUDA_ARCH__)
    unsigned m = __activemask();
    unsigned k = (unsigned)key;
    return k == __reduce_min_sync(m, k) ? 1 : 0;
#else
    return 1;
#endif
"""

_MOST = """
#if defined(__CUDA_ARCH__)
    unsigned m = __activemask();
    unsigned same = __match_any_sync(m, (unsigned)key);
    unsigned v = ((unsigned)__popc(same) << 5) | (31u - (unsigned)(__ffs(same) - 1));
    return v == __reduce_max_sync(m, v) ? 1 : 0;
#else
    return 1;
#endif
"""


_NEAR = """
#if defined(__CUDA_ARCH__)
    unsigned m = __activemask();
    unsigned k = (unsigned)key;
    unsigned near = __match_any_sync(m, k >> shift);
    return k == __reduce_min_sync(near, k) ? 1 : 0;
#else
    return 1;
#endif
"""


@wp.func_native(_MIN)
def turn_min(key: wp.int32) -> wp.int32: ...


@wp.func_native(_MOST)
def turn_most(key: wp.int32) -> wp.int32: ...


@wp.func_native(_NEAR)
def turn_near(key: wp.int32, shift: wp.int32) -> wp.int32: ...


# name -> (function, extra arguments after the key)
REGROUP = {"off": None, "min": ("turn_min", ""), "most": ("turn_most", ""), "near16": ("turn_near", ", 4"),
           "near64": ("turn_near", ", 6")}
