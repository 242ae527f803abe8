"""What PyBoy's state loader recomputes instead of loading (the STAT line, the mode-3 length, the RTC catch-up),
computed with the kernels' own functions on the CPU device (`pyboy_loader_values`: the `derive` argument of
`gbxcule.core.savestate.decode_states`)."""

import numpy as np
import warp as wp

from gbxcule.kernels.mbc import rtc_advance_seconds
from gbxcule.kernels.ppu import mode3_adjustment, stat_update_line
from gbxcule.kernels.state import Gb, Mem

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
