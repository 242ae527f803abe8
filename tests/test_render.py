"""Rendering: warp_vec_cpu's screens against PyBoy's, pixel for pixel, and the observation outputs.

The scene ROMs are built here: random tiles, maps and sprites (seeded), then every frame a VBlank routine
changes scroll, window, sprites, palettes or LCDC, and a routine at a fixed line changes registers
mid-frame. PyBoy draws every frame (tick(1, True)); its RGBA screen is reduced to shade indices.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from gbxcule.asm import CartridgeHeader, assemble
from gbxcule.backends.pyboy_single import PyBoyGame
from gbxcule.backends.warp_vec import WarpVecBackend
from gbxcule.cli.main import main
from gbxcule.core.action_codec import get_codec
from gbxcule.core.cartridge import Rom, load_rom
from gbxcule.core.schedule import ActionSchedule
from gbxcule.core.screen import image_shades
from gbxcule.harness.verify import VerifyConfig, run_verify
from gbxcule.roms.micro.common import MEMCPY

ROMS = Path(os.environ["GBXCULE_TEST_ROMS"]) if os.environ.get("GBXCULE_TEST_ROMS") else None
needs_roms = pytest.mark.skipif(ROMS is None, reason="GBXCULE_TEST_ROMS is not set")

PROGRAM = """
SECTION "entry", ROM0[$0100]
    nop
    jp main
SECTION "main", ROM0[$0150]
main:
    di
    ld sp, $FFFE
.vb:
    ldh a, [$FF44]
    cp 144
    jr nz, .vb
    xor a
    ldh [$FF40], a
    ldh [$FF80], a
    ld hl, tiles
    ld de, $8000
    ld bc, $1800
    call memcpy
    ld hl, maps
    ld de, $9800
    ld bc, $0800
    call memcpy
    ld hl, sprites
    ld de, $FE00
    ld bc, 160
    call memcpy
    ld a, $E4
    ldh [$FF47], a
    ld a, $D2
    ldh [$FF48], a
    ld a, $27
    ldh [$FF49], a
    ld a, {lcdc}
    ldh [$FF40], a
frame:
    ldh a, [$FF44]
    cp 144
    jr nz, frame
    ld hl, $FF80
    inc [hl]
{vblank}
.mid:
    ldh a, [$FF44]
    cp {midline}
    jr nz, .mid
{midframe}
    jp frame

{MEMCPY}
move_sprites:  ; add B to the X of every sprite and C to the Y of every fourth
    ld hl, $FE00
    ld d, 40
.loop:
    ld a, [hl]
    bit 0, d
    jr z, .y_done
    bit 1, d
    jr z, .y_done
    add c
    ld [hl], a
.y_done:
    inc l
    ld a, [hl]
    add b
    ld [hl+], a
    inc l
    inc l
    dec d
    jr nz, .loop
    ret

tiles:
{tiles}
maps:
{maps}
sprites:
{sprites}
lcdc_table:
    db $91, $93, $B7, $F3, $83, $92, $B2, $DB
"""


def _db(data: bytes) -> str:
    rows = (data[i:i + 16] for i in range(0, len(data), 16))
    return "\n".join("    db " + ", ".join(f"${b:02X}" for b in row) for row in rows)


def scene_rom(tmp_path, name: str, *, lcdc: int, vblank: str = "", midframe: str = "", midline: int = 72,
              seed: int = 0, sprite_band: tuple[int, int] = (0, 176)) -> Rom:
    """A ROM that draws random tiles/maps/sprites and runs `vblank` each frame and `midframe` at line
    `midline` (assembly snippets; A, B, C, D, E, HL are free, the frame counter is at $FF80)."""
    rng = np.random.default_rng(seed)
    tiles = rng.integers(0, 256, 0x1800, dtype=np.uint8)
    tiles[:32] = 0  # tiles 0 and 1 blank: colour 0 shows through in places
    for t in range(16):  # tiles $F0-$FF: stripes, the window map's tiles (so the window is easy to see)
        lo, hi = (0xFF * (t & 1), 0xFF * (t >> 1 & 1)) if t & 4 else (0xF0 >> (t & 3), 0x0F << (t & 3) & 0xFF)
        tiles[(0xF0 + t) * 16:(0xF1 + t) * 16] = [lo, hi] * 8
    maps = np.concatenate([rng.integers(0, 0xF0, 0x400), rng.integers(0xF0, 0x100, 0x400)]).astype(np.uint8)
    oam = np.zeros((40, 4), dtype=np.uint8)
    oam[:, 0] = rng.integers(*sprite_band, 40)
    oam[:, 1] = rng.integers(0, 176, 40)
    oam[:, 2] = rng.integers(0, 256, 40)
    oam[:, 3] = rng.integers(0, 256, 40) & 0xF0
    src = PROGRAM.format(lcdc=f"${lcdc:02X}", vblank=vblank, midframe=midframe, midline=midline, MEMCPY=MEMCPY,
                         tiles=_db(tiles.tobytes()), maps=_db(maps.tobytes()), sprites=_db(oam.tobytes()))
    data = assemble(src, header=CartridgeHeader(title=name[:11].upper(), cartridge_type=0, rom_size=0)).rom
    path = tmp_path / f"{name}.gb"
    path.write_bytes(data)
    return load_rom(path)


def compare_screens(rom: Rom, frames: int, render="all", frames_per_step: int = 1) -> None:
    """Step PyBoy (drawing every frame) and warp_vec_cpu side by side; every screen must match."""
    codec = get_codec("dmg_buttons_v0")
    schedule = ActionSchedule(frames_per_step, 0)
    ref = PyBoyGame(rom, codec, schedule)
    dut = WarpVecBackend(rom, 1, codec, schedule)
    try:
        for k in range(frames // frames_per_step):
            ref.step(0, render=True)
            dut.step(np.zeros(1, dtype=np.int32), render=render)
            want, got = ref.screen_shades(), dut.frames_host(0)
            bad = np.argwhere(want != got)
            assert bad.size == 0, (f"step {k}: {len(bad)} pixels differ, first at (y, x) = {tuple(bad[0])}: "
                                   f"ref {want[tuple(bad[0])]} dut {got[tuple(bad[0])]}")
    finally:
        ref.close()
        dut.close()


SCROLL = """
    ldh a, [$FF43]
    inc a
    ldh [$FF43], a
    ldh a, [$FF42]
    add 3
    ldh [$FF42], a
"""
MID_SCX = """
    ldh a, [$FF43]
    add 37
    ldh [$FF43], a
"""
WINDOW_SWEEP = """
    ldh a, [$FF80]
    ldh [$FF4B], a
    rrca
    and $7F
    ldh [$FF4A], a
"""
MID_WINDOW_TOGGLE = """
    ldh a, [$FF40]
    xor $20
    ldh [$FF40], a
"""
# Every frame: the next LCDC of lcdc_table every 8 frames, OBP0/OBP1 rotated every 4; every 64 frames the
# LCD is off for about 3 frames with BGP rotated (the blank shade changes).
CYCLE = """
    ldh a, [$FF80]
    rrca
    rrca
    rrca
    and 7
    ld e, a
    ld d, 0
    ld hl, lcdc_table
    add hl, de
    ld a, [hl]
    ldh [$FF40], a
    ld b, 2
    ld c, 1
    call move_sprites
    ldh a, [$FF80]
    and 3
    jr nz, .palettes_done
    ldh a, [$FF48]
    rrca
    rrca
    ldh [$FF48], a
    ldh a, [$FF49]
    rlca
    rlca
    ldh [$FF49], a
.palettes_done:
    ldh a, [$FF80]
    and $3F
    jr nz, .lcd_done
    xor a
    ldh [$FF40], a
    ldh a, [$FF47]
    rlca
    rlca
    ldh [$FF47], a
    ld bc, 7500
.off:
    dec bc
    ld a, b
    or c
    jr nz, .off
    ld a, $93
    ldh [$FF40], a
.lcd_done:
"""
MID_BGP = """
    ldh a, [$FF47]
    cpl
    ldh [$FF47], a
"""


def test_background_scroll_and_midframe_scx(tmp_path):
    compare_screens(scene_rom(tmp_path, "bg", lcdc=0x91, vblank=SCROLL, midframe=MID_SCX), 300)


def test_background_signed_tiles_and_second_map(tmp_path):
    compare_screens(scene_rom(tmp_path, "bg2", lcdc=0x89, vblank=SCROLL, midframe=MID_SCX, seed=3), 200)


def test_window_sweep_and_midframe_toggle(tmp_path):
    rom = scene_rom(tmp_path, "win", lcdc=0xF3, vblank=WINDOW_SWEEP, midframe=MID_WINDOW_TOGGLE, midline=50,
                    sprite_band=(16, 60))
    compare_screens(rom, 340)  # WX sweeps 0-255: the window from left of the screen to past its edge


def test_sprites_8x8_priority_flips_and_line_limit(tmp_path):
    # 40 sprites in 40 lines: most lines have more than 10; random flips, palettes and behind-BG flags.
    rom = scene_rom(tmp_path, "spr", lcdc=0x93, vblank="    ld b, 1\n    ld c, 1\n    call move_sprites",
                    sprite_band=(40, 80), seed=1)
    compare_screens(rom, 300)


def test_sprites_8x16(tmp_path):
    rom = scene_rom(tmp_path, "spr16", lcdc=0x97, vblank="    ld b, 255\n    ld c, 3\n    call move_sprites",
                    sprite_band=(30, 90), seed=2)
    compare_screens(rom, 300)


def test_lcdc_palettes_and_lcd_off(tmp_path):
    rom = scene_rom(tmp_path, "cycle", lcdc=0x93, vblank=CYCLE, midframe=MID_BGP, midline=100, seed=4,
                    sprite_band=(16, 170))
    compare_screens(rom, 400)


def test_last_frame_render_matches_every_frame(tmp_path):
    """Drawing only each step's last frame shows what drawing every frame shows, LCD switching included."""
    rom = scene_rom(tmp_path, "last", lcdc=0x93, vblank=CYCLE, midframe=MID_BGP, midline=100, seed=5)
    compare_screens(rom, 400, render=True, frames_per_step=3)


def test_rendering_changes_no_emulated_state(tmp_path):
    """Drawing every frame leaves every field and every byte of RAM as emulating alone does."""
    rom = scene_rom(tmp_path, "state", lcdc=0x93, vblank=CYCLE, midframe=MID_BGP, midline=100, seed=6)
    plain, drawn = (WarpVecBackend(rom, 2, schedule=ActionSchedule(5, 2)) for _ in range(2))
    acts = np.array([0, 3], dtype=np.int32)
    for _ in range(40):
        plain.step(acts)
        drawn.step(acts, render="all")
    assert np.array_equal(plain.fields.numpy(), drawn.fields.numpy())
    assert np.array_equal(plain.ram.numpy(), drawn.ram.numpy())
    assert plain.frames_host().max() == 0 and drawn.frames_host().max() > 0


def test_observation_layouts(tmp_path):
    """Stride, 2x2 mean and packed observations, each against numpy on a random frame buffer."""
    import warp as wp

    b = WarpVecBackend(scene_rom(tmp_path, "obs", lcdc=0x91), 3)
    frames = np.random.default_rng(0).integers(0, 4, (3, 144, 160)).astype(np.uint8)
    wp.copy(b.frame_buffer(), wp.array(frames, dtype=wp.uint8, device=b.device))
    stride = frames[:, ::2, ::2]
    blocks = frames.reshape(3, 72, 2, 80, 2).astype(int)
    mean = (blocks.sum(axis=(2, 4)) + 2) // 4
    for mode, want in (("stride", stride), ("mean", mean)):
        got = b.observation(mode).numpy()
        assert got.shape == (3, 72, 80) and np.array_equal(got, want)
        packed = b.observation(mode, packed=True).numpy()
        w = want.reshape(3, 72, 20, 4).astype(np.uint8)
        assert packed.shape == (3, 72, 20)
        assert np.array_equal(packed, w[..., 0] << 6 | w[..., 1] << 4 | w[..., 2] << 2 | w[..., 3])
    with pytest.raises(ValueError):
        b.observation("max")
    with pytest.raises(ValueError):
        b.step(np.zeros(3, dtype=np.int32), render="some")


@needs_roms
def test_dmg_acid2_matches_reference():
    from PIL import Image

    folder = ROMS / "dmg-acid2"
    if not (folder / "dmg-acid2.gb").is_file():
        pytest.skip("dmg-acid2 not present")
    b = WarpVecBackend(load_rom(folder / "dmg-acid2.gb"), 1, schedule=ActionSchedule(100, 0))
    b.step(np.zeros(1, dtype=np.int32), render=True)
    want = image_shades(np.asarray(Image.open(folder / "reference-dmg.png").convert("RGB")))
    assert int((b.frames_host(0) != want).sum()) == 0


def _ppu_roms() -> list[str]:
    return sorted(p.name for p in (ROMS / "mooneye/acceptance/ppu").glob("*.gb")) if ROMS else []


@needs_roms
@pytest.mark.parametrize("name", _ppu_roms())
def test_mooneye_ppu_passes_while_drawing(name):
    """The mooneye PPU timing tests pass with every frame drawn (mooneye's register verdict)."""
    b = WarpVecBackend(load_rom(ROMS / "mooneye/acceptance/ppu" / name), 1, schedule=ActionSchedule(30, 0))
    for _ in range(40):
        b.step(np.zeros(1, dtype=np.int32), render="all")
        s = b.get_cpu_state(0)
        if (s.b, s.c, s.d, s.e, s.h, s.l) in ((3, 5, 8, 13, 21, 34), (0x42,) * 6):
            break
    assert (s.b, s.c, s.d, s.e, s.h, s.l) == (3, 5, 8, 13, 21, 34)


def test_verify_screens_reports_and_bundles_a_screen_difference(tmp_path, monkeypatch):
    rom = scene_rom(tmp_path, "vfy", lcdc=0xF3, vblank=WINDOW_SWEEP, sprite_band=(16, 60))
    cfg = VerifyConfig(rom=rom.path, steps=100, screens=True, bundle_dir=str(tmp_path / "bundles"))
    assert run_verify(cfg, rom).ok
    real = WarpVecBackend.frames_host

    def off_by_one_pixel(self, env=None):
        frames = real(self, env)
        frames[..., 100, 50] ^= 1
        return frames

    monkeypatch.setattr(WarpVecBackend, "frames_host", off_by_one_pixel)
    result = run_verify(cfg, rom)
    assert not result.ok and result.mismatch_step == 0
    assert result.differences == ["screen: 1 pixels differ (first at y=100 x=50: ref=0 dut=1)"]
    written = {p.name for p in Path(result.bundle).iterdir()}
    assert {"ref_screen.png", "dut_screen.png", "screen_diff.png"} <= written


def test_screenshot_cli_same_screen_on_both_backends(tmp_path, capsys):
    from PIL import Image

    rom = scene_rom(tmp_path, "shot", lcdc=0xF3, vblank=WINDOW_SWEEP, sprite_band=(16, 60))
    shots = {}
    for backend in ("warp_vec_cpu", "pyboy_single"):
        out = tmp_path / f"{backend}.png"
        assert main(["screenshot", rom.path, "--frames", "150", "--out", str(out), "--backend", backend,
                     "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert min(report["shade_counts"]) > 0 and Image.open(out).size == (160, 144)
        shots[backend] = (report["screen_sha1"], np.asarray(Image.open(out).convert("L")))
    assert shots["warp_vec_cpu"][0] == shots["pyboy_single"][0]
    assert np.array_equal(shots["warp_vec_cpu"][1], shots["pyboy_single"][1])


def test_play_records_gif_and_mosaic(tmp_path, capsys):
    from PIL import Image

    rom = scene_rom(tmp_path, "play", lcdc=0x93, vblank="    ld b, 1\n    ld c, 1\n    call move_sprites")
    gif, png = tmp_path / "out" / "rec.gif", tmp_path / "out" / "mosaic.png"
    assert main(["play", rom.path, "--backend", "warp_vec_cpu", "--envs", "3", "--steps", "4",
                 "--frames-per-step", "30", "--release-after-frames", "1", "--record", str(gif), "--mosaic",
                 str(png), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["record"] == str(gif) and report["mosaic"] == str(png)
    mosaic_img = np.asarray(Image.open(png).convert("L"))
    assert mosaic_img.shape == (2 * 146 - 2, 2 * 162 - 2)
    with Image.open(gif) as anim:
        assert anim.size == (160, 144) and 1 <= anim.n_frames <= 4
        anim.seek(anim.n_frames - 1)
        last = np.asarray(anim.convert("L"))
    assert np.array_equal(last, mosaic_img[:144, :160])  # env 0's last screen, in both files
    assert main(["play", rom.path, "--backend", "pyboy_single", "--mosaic", str(png)]) == 2
    assert "need a warp backend" in capsys.readouterr().err


def test_palette_word_maps_every_palette_and_plane_pair():
    """The plane renderer's palette step (render.palette_word) against a per-pixel model: every BGP value,
    every 4-pixel pair of colour bit planes."""
    import warp as wp

    from gbxcule.kernels import init_warp
    from gbxcule.kernels.render import palette_word

    @wp.kernel(enable_backward=False)
    def palette_kernel(cases: wp.array2d(dtype=wp.int32), out: wp.array(dtype=wp.int32)):
        i = wp.tid()
        out[i] = palette_word(cases[i, 0], cases[i, 1], cases[i, 2])

    init_warp()
    pal, p0, p1 = np.meshgrid(np.arange(256), np.arange(16), np.arange(16), indexing="ij")
    cases = np.stack([pal.ravel(), p0.ravel(), p1.ravel()], axis=1).astype(np.int32)
    out = wp.zeros(len(cases), dtype=wp.int32, device="cpu")
    wp.launch(palette_kernel, dim=len(cases), inputs=[wp.array(cases, dtype=wp.int32, device="cpu"), out],
              device="cpu")
    k = np.arange(4)
    colour = ((cases[:, 1:2] >> (3 - k)) & 1) | (((cases[:, 2:3] >> (3 - k)) & 1) << 1)  # pixel k, leftmost first
    shade = (cases[:, 0:1] >> (2 * colour)) & 3
    want = (shade << (8 * k)).sum(axis=1)
    assert np.array_equal(out.numpy(), want)


def test_oam_line_hits_tests_four_entries_at_once():
    """render.oam_line_hits (4 OAM Y bytes tested in one word) against the per-entry rule Y-16 <= ly <
    Y-16+height: every Y byte value in each byte position, every line 0-153, both sprite heights, and
    random words."""
    import warp as wp

    from gbxcule.kernels import init_warp
    from gbxcule.kernels.render import lowest_bit, oam_line_hits

    @wp.kernel(enable_backward=False)
    def hits_kernel(cases: wp.array2d(dtype=wp.int32), out: wp.array2d(dtype=wp.int32)):
        i = wp.tid()
        h = oam_line_hits(cases[i, 0], cases[i, 1], cases[i, 2])
        out[i, 0] = h
        out[i, 1] = wp.where(h != 0, lowest_bit(h), -1)

    init_warp()
    rng = np.random.default_rng(3)
    y, ly, height = np.meshgrid(np.arange(256), np.arange(154), np.array([8, 16]), indexing="ij")
    y, ly, height = y.ravel(), ly.ravel(), height.ravel()
    other = rng.integers(0, 256, (len(y), 4))
    pos = rng.integers(0, 4, len(y))
    other[np.arange(len(y)), pos] = y
    words = np.concatenate([(other << (8 * np.arange(4))).sum(axis=1), rng.integers(0, 1 << 32, 20000)])
    ly = np.concatenate([ly, rng.integers(0, 154, 20000)])
    height = np.concatenate([height, rng.choice([8, 16], 20000)])
    cases = np.stack([words.astype(np.uint32).view(np.int32), ly, height], axis=1).astype(np.int32)
    out = wp.zeros((len(cases), 2), dtype=wp.int32, device="cpu")
    wp.launch(hits_kernel, dim=len(cases), inputs=[wp.array(cases, dtype=wp.int32, device="cpu"), out], device="cpu")
    ys = (words[:, None].astype(np.int64) >> (8 * np.arange(4))) & 0xFF
    on = (ys - 16 <= ly[:, None]) & (ly[:, None] < ys - 16 + height[:, None])
    want = (on << np.arange(4)).sum(axis=1)
    got = out.numpy()
    assert np.array_equal(got[:, 0], want) and 0 < want.mean() < 15
    assert np.array_equal(got[:, 1], np.where(want != 0, np.argmax(on, axis=1), -1))
