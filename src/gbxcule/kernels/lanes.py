"""The warp vote behind run_frame's "flat" instruction loop (kernels/frame.py).

In the flat loop a warp leaves its instruction loop as soon as one of its lanes has ended its CPU batch: that
lane processes its events (DMA, serial, timer, PPU) and starts its next batch, and the warp goes back into
the loop with every lane. The vote makes the exit uniform, so the loop stays one tight loop (the event code
outside it), and no lane waits there for the warp's slowest batch.

Only the interleaving of lanes changes: each env runs the same computation, so results are the same bit for
bit. On the CPU device (one env at a time) a lane leaves when its own batch has ended."""

import warp as wp

_READY = """
#if defined(__CUDA_ARCH__)
    return __ballot_sync(__activemask(), go == 0) != 0 ? 1 : 0;
#else
    return go == 0 ? 1 : 0;
#endif
"""


@wp.func_native(_READY)
def lanes_ready(go: wp.int32) -> wp.int32:
    """1 when a lane of the warp (of those running this together) has ended its batch (go == 0)."""
    ...
