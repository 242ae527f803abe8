"""Small kernels of the RL env (gbxcule.rl.env) and the backend's state upload: the first frame of a new
episode into its whole frame stack (and its full screen into the frame buffer), and the SB serial ring of a
few envs written from uploaded states without a round trip of the whole ring through the host."""

from __future__ import annotations

import warp as wp


@wp.kernel(enable_backward=False)
def ring_reset_kernel(done: wp.array(dtype=wp.bool), slots: wp.array(dtype=wp.int32),
                      slot_obs: wp.array3d(dtype=wp.uint8), ring: wp.array4d(dtype=wp.uint8),
                      slot_screen: wp.array3d(dtype=wp.uint8), screen: wp.array3d(dtype=wp.uint8)):
    """For every env whose `done` is set, copy row r of its start slot's frame into all ring positions and
    rows 2r, 2r+1 of the slot's full screen into the frame buffer; dim = (envs, 72). `slots` were reduced
    modulo the slot count by the caller (and are masked here too)."""
    e, r = wp.tid()
    if not done[e]:
        return
    k = slots[e] % slot_obs.shape[0]
    if k < 0:
        k = k + slot_obs.shape[0]
    for p in range(ring.shape[1]):
        for c in range(ring.shape[3]):
            ring[e, p, r, c] = slot_obs[k, r, c]
    for h in range(2):
        for c in range(screen.shape[2]):
            screen[e, 2 * r + h, c] = slot_screen[k, 2 * r + h, c]


@wp.kernel(enable_backward=False)
def serial_scatter_kernel(src: wp.array2d(dtype=wp.uint8), ids: wp.array(dtype=wp.int32),
                          ring: wp.array(dtype=wp.uint8), n: wp.int32):
    """SB rings of uploaded states (`src` [M, capture]) into envs `ids` (the j-th takes state j mod M) of the
    interleaved ring (`ring[s * n + env]`); dim = (capture, len(ids))."""
    s, j = wp.tid()
    ring[s * n + ids[j]] = src[j % src.shape[0], s]
