"""Frame-ring kernel of the RL env (gbxcule.rl.env): the first frame of a new episode into its whole stack."""

from __future__ import annotations

import warp as wp


@wp.kernel(enable_backward=False)
def ring_reset_kernel(done: wp.array(dtype=wp.bool), slots: wp.array(dtype=wp.int32),
                      slot_obs: wp.array3d(dtype=wp.uint8), ring: wp.array4d(dtype=wp.uint8)):
    """For every env whose `done` is set, copy row r of its start slot's frame into all ring positions;
    dim = (envs, 72). `slots` were reduced modulo the slot count by the caller (and are masked here too)."""
    e, r = wp.tid()
    if not done[e]:
        return
    k = slots[e] % slot_obs.shape[0]
    if k < 0:
        k = k + slot_obs.shape[0]
    for p in range(ring.shape[1]):
        for c in range(ring.shape[3]):
            ring[e, p, r, c] = slot_obs[k, r, c]
