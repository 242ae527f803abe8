"""`lcd_skip_lines` (a halted CPU skips whole PPU lines) leaves the PPU exactly as stepping its transitions
one by one does, and the step kernel's state does not depend on it."""

import numpy as np
import pytest
import warp as wp

from gbxcule.backends.warp_vec import WarpVecBackend
from gbxcule.core.schedule import ActionSchedule
from gbxcule.core.schema import ram_layout
from gbxcule.kernels import init_warp
from gbxcule.kernels.ppu import (
    ST_ADVANCE_LY,
    lcd_advance,
    lcd_skip_lines,
    mode3_adjustment,
    mode3_sprite_penalty,
    sprite_bands_refresh,
)
from gbxcule.kernels.state import Gb, Mem
from gbxcule.roms import resolve_rom

# inputs per case: ly, lyc, wy, wx, lcdc, stat, scx, wy_latch, win_line, clock_offset, limit, render
OUT = ("ly", "stat", "stat_mode", "stat_irq_line", "wy_latch", "win_line", "mode3_adj", "lcd_clock", "lcd_target",
       "lcd_cti", "lcd_ctf", "next_mode", "stat_transition", "screen_fill", "lcd_last", "frame_done")


@wp.func
def ppu_case(c: wp.array2d(dtype=wp.int32), i: wp.int32, m: Mem) -> Gb:
    g = Gb()
    g.n = c.shape[0]
    g.env = i
    g.ly = c[i, 0]
    g.lyc = c[i, 1]
    g.wy = c[i, 2]
    g.wx = c[i, 3]
    g.lcdc = c[i, 4]
    g.stat = (c[i, 5] & 0x78) | wp.where(g.ly == g.lyc, 4, 0)
    g.scx = c[i, 6]
    g.wy_latch = c[i, 7]
    g.win_line = c[i, 8]
    g.screen_fill = 1
    g.render = c[i, 11]
    g.bgp = 0xE4
    g.obp0 = 0xD2
    g.obp1 = 0x1B
    g.stat_irq_line = wp.where((g.stat & 0x44) == 0x44, 1, 0)
    g.mode3_adj = mode3_adjustment(g, m, g.ly, 0)
    g.lcd_target = (g.ly + 1) * 456 - 4  # mode 0 of line ly has just started: LY advances next
    g.lcd_clock = wp.min(g.ly * 456 + 252 + g.mode3_adj + c[i, 9], g.lcd_target - 1)
    g.lcd_last = 1000
    g.lcd_cti = g.lcd_target - g.lcd_clock
    g.lcd_ctf = 70224 - g.lcd_clock
    g.next_mode = 2
    g.stat_transition = ST_ADVANCE_LY
    return g


@wp.func
def ppu_out(g: Gb, out: wp.array3d(dtype=wp.int32), i: wp.int32, k: wp.int32):
    vals = wp.vector(g.ly, g.stat, g.stat_mode, g.stat_irq_line, g.wy_latch, g.win_line, g.mode3_adj, g.lcd_clock,
                     g.lcd_target, g.lcd_cti, g.lcd_ctf, g.next_mode, g.stat_transition, g.screen_fill, g.lcd_last,
                     g.frame_done, length=16, dtype=wp.int32)
    for j in range(16):
        out[i, k, j] = vals[j]


@wp.kernel(enable_backward=False)
def skip_vs_step(cases: wp.array2d(dtype=wp.int32), m: Mem, m2: Mem, out: wp.array3d(dtype=wp.int32),
                 info: wp.array2d(dtype=wp.int32)):
    """The skip draws into m's frame buffer, the stepped transitions into m2's."""
    i = wp.tid()
    g = ppu_case(cases, i, m)
    sprite_bands_refresh(g, m)  # the skip looks the sprite bands up; the stepped transitions below scan OAM
    skipped = lcd_skip_lines(g, m, cases[i, 10])
    ppu_out(g, out, i, 0)
    h = ppu_case(cases, i, m2)
    now = h.lcd_last
    h.if_ = 0  # collects the interrupts the transitions raise
    done = wp.int32(0)
    while done < skipped:  # the batch loop of a halted CPU: stop at every transition
        d = wp.max(1, wp.min(h.lcd_cti, skipped - done))
        now = now + d
        done = done + d
        lcd_advance(h, m2, now, 1)
    ppu_out(h, out, i, 1)
    info[i, 0] = skipped
    info[i, 1] = h.if_


def test_skip_equals_stepping_the_transitions():
    init_warp()
    rng = np.random.default_rng(7)
    n = 4000
    ly = rng.integers(0, 150, n)
    cases = np.stack([
        ly, np.where(rng.random(n) < 0.5, rng.integers(0, 154, n), 255), rng.integers(0, 150, n),
        rng.integers(0, 175, n), rng.choice([0x91, 0x93, 0x97, 0xB3, 0xF7, 0xE3], n),
        rng.choice([0x00, 0x40, 0x08, 0x48, 0x20], n, p=[0.4, 0.3, 0.1, 0.1, 0.1]), rng.integers(0, 256, n),
        rng.integers(0, 2, n), rng.integers(-1, 256, n), rng.integers(0, 150, n),
        np.where(rng.random(n) < 0.5, 0x3FFFFFFF, rng.integers(1, 70224, n)), rng.integers(0, 2, n),
    ], axis=1).astype(np.int32)
    layout = ram_layout(0)
    ram = np.zeros((layout.total, n), dtype=np.uint8)
    oam = rng.integers(0, 170, (n, 160)).astype(np.uint8)  # sprites all over the screen
    ram[layout.bases["oam"]:layout.bases["oam"] + 160] = oam.T
    ram[layout.bases["vram"]:layout.bases["vram"] + 0x2000] = rng.integers(0, 256, (0x2000, n), dtype=np.uint8)
    mems = []
    for _ in range(2):
        m = Mem()
        m.ram = wp.array(np.ascontiguousarray(ram.T), dtype=wp.uint8, device="cpu")  # env-major
        m.oam, m.vram, m.n_envs = layout.bases["oam"], layout.bases["vram"], n
        m.frame = wp.zeros(n * 144 * 40, dtype=wp.uint32, device="cpu")
        mems.append(m)
    out = wp.zeros((n, 2, len(OUT)), dtype=wp.int32, device="cpu")
    info = wp.zeros((n, 2), dtype=wp.int32, device="cpu")
    wp.launch(skip_vs_step, dim=n, inputs=[wp.array(cases, dtype=wp.int32, device="cpu"), *mems, out, info],
              device="cpu")
    frames = [m.frame.numpy().reshape(n, -1) for m in mems]
    out, info = out.numpy(), info.numpy()
    skipped = info[:, 0] > 0
    assert skipped.mean() > 0.3  # the cases do exercise the skip
    assert not info[skipped, 1].any(), "a skipped line raised an interrupt"
    bad = np.nonzero((out[:, 0] != out[:, 1]).any(axis=1))[0]
    assert bad.size == 0, [(cases[i].tolist(), info[i].tolist(), dict(zip(OUT, out[i, 0].tolist(), strict=True)),
                            dict(zip(OUT, out[i, 1].tolist(), strict=True))) for i in bad[:3]]
    drawn = skipped & (cases[:, 11] == 1)
    assert drawn.sum() > 100 and frames[0][drawn].any()
    assert np.array_equal(frames[0], frames[1])
    # never past line 142, an LY=LYC line or the limit
    assert (out[skipped, 0, 0] <= 142).all()
    lo, hi, lyc = cases[skipped, 0], out[skipped, 0, 0], cases[skipped, 1]
    assert not ((lyc > lo) & (lyc <= hi)).any()
    assert (info[skipped, 0] < cases[skipped, 10]).all()


@pytest.mark.parametrize("name", ["OVERWORLD", "PPU_WINDOW"])
def test_step_state_does_not_depend_on_drawing(name):
    """Drawn frames skip lines by drawing them one by one, others arithmetically: fields and RAM agree."""
    rom = str(resolve_rom(name))
    plain, drawn = (WarpVecBackend(rom, 4, schedule=ActionSchedule(1, 1)) for _ in range(2))
    rng = np.random.default_rng(3)
    for _ in range(120):
        acts = rng.integers(0, plain.codec.num_actions, 4).astype(np.int32)
        plain.step(acts)
        drawn.step(acts, render="all")
        assert np.array_equal(plain.fields.numpy(), drawn.fields.numpy())
    assert np.array_equal(plain.ram.numpy(), drawn.ram.numpy())


def penalty_model(oam: np.ndarray, lcdc: int, scx: int, ly: int) -> int:
    """Mode-3 sprite penalty of line ly, written plainly: the first 10 sprites on the line, 6 dots each
    on screen, plus the fine-alignment dots of the first sprite at each X."""
    if not lcdc & 2:
        return 0
    height = 16 if lcdc & 4 else 8
    count = groups = penalty = 0
    seen: set[int] = set()
    for i in range(40):
        y, x = int(oam[4 * i]) - 16, int(oam[4 * i + 1])
        if count == 10 or not y <= ly < y + height:
            continue
        count += 1
        if x < 168:
            penalty += 6
            if x not in seen:
                groups += 1
                penalty += max(0, 5 - ((x + scx - 8) & 7))
            seen.add(x)
    if count and not groups:
        return -4
    return max(0, penalty - 7) if count else 0


def distinct_on_screen(oam, lcdc, scx, ly) -> int:
    """Distinct on-screen X values among the first 10 sprites on line ly (the set's fill)."""
    height = 16 if lcdc & 4 else 8
    hits = [int(oam[4 * i + 1]) for i in range(40) if int(oam[4 * i]) - 16 <= ly < int(oam[4 * i]) - 16 + height]
    return len({x for x in hits[:10] if x < 168})


@wp.kernel(enable_backward=False)
def penalty_kernel(cases: wp.array2d(dtype=wp.int32), m: Mem, out: wp.array(dtype=wp.int32), bands: wp.int32):
    i = wp.tid()
    g = Gb()
    g.env = i
    g.lcdc = cases[i, 0]
    g.scx = cases[i, 1]
    if bands != 0:
        sprite_bands_refresh(g, m)  # as between batches: then lines in bands no sprite covers take no scan
        out[n_cases(out) + i] = g.spr_bands
    out[i] = mode3_sprite_penalty(g, m, cases[i, 2], bands)


@wp.func
def n_cases(out: wp.array(dtype=wp.int32)) -> wp.int32:
    return out.shape[0] / 2


def test_sprite_penalty_matches_a_plain_model():
    """Crowded lines with repeated X values (the kernel keeps the X values seen in a set of packed bytes)."""
    init_warp()
    rng = np.random.default_rng(11)
    n = 3000
    cases = np.stack([rng.choice([0x91, 0x93, 0x97], n), rng.integers(0, 256, n), rng.integers(0, 144, n)],
                     axis=1).astype(np.int32)
    oam = np.zeros((n, 160), dtype=np.uint8)
    oam[:, 0::4] = (cases[:, 2:3] + rng.integers(0, 24, (n, 40))).clip(0, 255)  # near the line
    spread = rng.random(n) < 0.4  # or anywhere, a few on screen: many lines with no sprite, some in a covered band
    oam[spread, 0::4] = np.where(rng.random((spread.sum(), 40)) < 0.1, rng.integers(0, 256, (spread.sum(), 40)), 0)
    xs = rng.integers(0, 176, (n, 12))  # few distinct X values per line: many repeats, some off screen
    xs[: n // 10] = rng.integers(168, 256, (n // 10, 12))  # only off-screen sprites
    kinds = rng.choice([3, 6, 12], (n, 1))  # up to 12 distinct X values a line: the set's three words all fill
    oam[:, 1::4] = np.take_along_axis(xs, rng.integers(0, 12, (n, 40)) % kinds, axis=1)
    layout = ram_layout(0)
    ram = np.zeros((layout.total, n), dtype=np.uint8)
    ram[layout.bases["oam"]:layout.bases["oam"] + 160] = oam.T
    m = Mem()
    m.ram = wp.array(np.ascontiguousarray(ram.T), dtype=wp.uint8, device="cpu")  # env-major
    m.oam, m.n_envs = layout.bases["oam"], n
    want = [penalty_model(oam[i], *cases[i]) for i in range(n)]
    assert len(set(want)) > 10 and sum(w == -4 for w in want) > 0
    assert max(distinct_on_screen(oam[i], *cases[i]) for i in range(n)) == 10  # the third word is used
    for bands in (0, 1):  # the full scan (the PPU catch-up in bus_access), and with the sprite bands looked up
        out = wp.zeros(2 * n, dtype=wp.int32, device="cpu")
        wp.launch(penalty_kernel, dim=n, inputs=[wp.array(cases, dtype=wp.int32, device="cpu"), m, out, bands],
                  device="cpu")
        assert out.numpy()[:n].tolist() == want
    # the bands: bit b when a sprite covers one of lines 8b..8b+7 (lines below 144); none found with sprites off
    got = out.numpy()
    for i in range(n):
        height = 16 if cases[i, 0] & 4 else 8
        lines = {y - 16 + r for y in oam[i, 0::4].astype(int) for r in range(height)} & set(range(144))
        assert int(got[n + i]) == sum(1 << b for b in {ln >> 3 for ln in lines}) * (cases[i, 0] >> 1 & 1), i
    free = [i for i in range(n) if cases[i, 0] & 2 and not (got[n + i] >> (cases[i, 2] >> 3)) & 1]
    assert len(free) > n // 10  # lines the look-up answers without a scan
