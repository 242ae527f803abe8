"""Scanline renderer: the picture PyBoy 2.8.1's DMG `Renderer` draws, as shade indices 0-3.

The PPU calls `scanline` when mode 0 starts on a visible line (as the reference calls `Renderer.scanline`
and `scanline_sprites`), and `blank_screen` where the reference blanks the screen (LCD off, first frame
after the LCD is switched on). Registers, VRAM and OAM are read at that moment; nothing here writes
emulated memory. A line is drawn only while `g.render` is set; the window line counter and the blank
bookkeeping run on every line either way, so the picture does not depend on which frames were drawn.

Frame buffer: `m.frame`, uint32 words, 40 per line (4 pixels each, pixel 4w+k in byte k, i.e. the
little-endian bytes of a uint8 [N,144,160] array), env e's line y at word (e * 144 + y) * 40.
Observation kernel: `obs_kernel` (stride or 2x2 mean to 72x80, optionally packed 4 pixels a byte).
docs/rendering.md describes all of it.

The PPU is advanced from two places only (the bus and the batch loop), so these functions are inlined
like everything else: out-of-line calls would force the thread's state struct into local memory.
"""

import warp as wp

from gbxcule.kernels.state import Gb, Mem

LINE_WORDS = wp.constant(40)
FRAME_WORDS = wp.constant(144 * 40)

vec10i = wp.types.vector(length=10, dtype=wp.int32)


@wp.func
def vram_byte(g: wp.ref[Gb], m: Mem, addr: wp.int32) -> wp.int32:
    return wp.int32(m.ram[g.env, m.vram + (addr & 0x1FFF)])


@wp.func
def oam_byte(m: Mem, g: wp.ref[Gb], index: wp.int32) -> wp.int32:
    return wp.int32(m.ram[g.env, m.oam + (index & 0xFF)])


@wp.func
def oam_ys(m: Mem, g: wp.ref[Gb], i: wp.int32) -> wp.int32:
    """The Y bytes of OAM entries i..i+3 in one word (entry i in the low byte): four loads issued before
    any is used, where a scan that tests one entry after another would wait on each load in turn."""
    return (oam_byte(m, g, i * 4) | (oam_byte(m, g, i * 4 + 4) << 8) | (oam_byte(m, g, i * 4 + 8) << 16)
            | (oam_byte(m, g, i * 4 + 12) << 24))


@wp.func
def oam_line_hits(ys: wp.int32, ly: wp.int32, height: wp.int32) -> wp.int32:
    """Which of the 4 OAM entries whose Y bytes `ys` holds (`oam_ys`) lie on line `ly` (0-239) as sprites
    `height` rows tall: bit k for entry k. All four at once, byte by byte in one word: t = ly + 16 - Y in each
    byte (a borrow-free byte subtraction), then which bytes of t are below the height (no bit of t & ~(height
    - 1) set). Lines with no sprite then cost a few operations per four entries."""
    y = wp.uint32(ys)
    ones = wp.uint32(0x01010101)
    lo7 = wp.uint32(0x7F7F7F7F)
    hi = ~lo7
    lrep = wp.uint32((ly + 16) & 0xFF) * ones
    t = ((lrep | hi) - (y & lo7)) ^ ((lrep ^ ~y) & hi)
    z = t & (wp.uint32(wp.where(height == 16, 0xF0, 0xF8)) * ones)
    h = ~(((z & lo7) + lo7) | z) & hi  # bit 7 of each byte: that byte of z is 0
    return wp.int32(((h >> wp.uint32(7)) & wp.uint32(1)) | ((h >> wp.uint32(14)) & wp.uint32(2))
                    | ((h >> wp.uint32(21)) & wp.uint32(4)) | ((h >> wp.uint32(28)) & wp.uint32(8)))


@wp.func
def lowest_bit(bits: wp.int32) -> wp.int32:
    """Index of the lowest set bit of a non-zero 4-bit mask."""
    return wp.where((bits & 1) != 0, 0, wp.where((bits & 2) != 0, 1, wp.where((bits & 4) != 0, 2, 3)))


@wp.func
def bg_tile_row(g: wp.ref[Gb], m: Mem, map_base: wp.int32, col: wp.int32, row: wp.int32) -> wp.int32:
    """Row `row & 7` of the BG/window tile at map position (col, row >> 3): low byte | high byte << 8."""
    tile = vram_byte(g, m, map_base + ((row >> 3) & 31) * 32 + (col & 31))
    if (g.lcdc & 0x10) == 0:
        tile = (tile ^ 0x80) + 128  # signed addressing: tiles 0-127 at 0x9000, 128-255 at 0x8800
    addr = tile * 16 + (row & 7) * 2
    return vram_byte(g, m, addr) | (vram_byte(g, m, addr + 1) << 8)


@wp.func
def color_at(bits: wp.int32, col: wp.int32) -> wp.int32:
    """Colour index of pixel `col` (0 = leftmost) of a tile row (low byte | high byte << 8)."""
    s = 7 - (col & 7)
    return ((bits >> s) & 1) | (((bits >> (s + 8)) & 1) << 1)


@wp.func
def fill_frame(g: wp.ref[Gb], m: Mem, shade: wp.int32):
    if (g.env + 1) * FRAME_WORDS > m.frame.shape[0]:
        return
    word = wp.uint32((shade & 3) * 0x01010101)
    base = g.env * FRAME_WORDS
    for i in range(FRAME_WORDS):
        m.frame[base + i] = word


@wp.func
def blank_screen(g: wp.ref[Gb], m: Mem):
    """The whole screen shows BGP colour 0 (LCD off; first frame after LCD on)."""
    g.screen_fill = 1 + (g.bgp & 3)
    if g.render != 0:
        fill_frame(g, m, g.bgp & 3)


@wp.func
def draw_line(g: wp.ref[Gb], m: Mem, ly: wp.int32, window: wp.int32):
    """Draw line `ly`: background, window (when `window`), then up to 10 sprites, as the reference does."""
    if ly < 0 or ly >= 144 or (g.env + 1) * FRAME_WORDS > m.frame.shape[0]:
        return
    lcdc = g.lcdc
    # Sprites on this line: the first 10 in OAM order, kept sorted by (X, OAM index), which is the
    # reference's DMG priority (first wins). data = tile row bits | attributes << 16.
    keys = vec10i()
    datas = vec10i()
    count = wp.int32(0)
    if (lcdc & 2) != 0:
        height = 8 + ((lcdc & 4) << 1)
        i = wp.int32(0)
        ys = wp.int32(0)
        while i < 40 and count < 10:
            if (i & 3) == 0:
                ys = oam_ys(m, g, i)
            y = ((ys >> ((i & 3) * 8)) & 0xFF) - 16
            if y <= ly and ly < y + height:
                tile = oam_byte(m, g, i * 4 + 2)
                attr = oam_byte(m, g, i * 4 + 3)
                if height == 16:
                    tile = tile & 0xFE
                dy = ly - y
                if (attr & 0x40) != 0:
                    dy = height - 1 - dy
                addr = tile * 16 + dy * 2
                key = (oam_byte(m, g, i * 4 + 1) << 8) | i
                data = vram_byte(g, m, addr) | (vram_byte(g, m, addr + 1) << 8) | (attr << 16)
                j = count
                while j > 0 and keys[j - 1] > key:
                    keys[j] = keys[j - 1]
                    datas[j] = datas[j - 1]
                    j = j - 1
                keys[j] = key
                datas[j] = data
                count = count + 1
            i = i + 1
    # Background and window.
    bgp = g.bgp
    # the reference draws BG left of a window even with LCDC.0 off
    use_bg = wp.where(window != 0 or (lcdc & 1) != 0, 1, 0)
    win_x = g.wx - 7
    win_start = wp.int32(160)
    if window != 0:
        win_start = wp.max(win_x, 0)
    bg_map = 0x1800 | ((lcdc & 0x08) << 7)
    win_map = 0x1800 | ((lcdc & 0x40) << 4)
    scx = g.scx
    bg_row = (ly + g.scy) & 0xFF
    win_row = g.win_line & 0xFF
    cached = wp.int32(-1)  # the tile row in `bits`: map column, + 256 for the window
    bits = wp.int32(0)
    cached2 = wp.int32(-1)  # the next tile's row, in `bits2` (words that straddle two tiles)
    bits2 = wp.int32(0)
    first = wp.int32(0)  # sprites before this one end left of the current word
    first_x = wp.int32(256)  # screen X of sprite `first` (256: none left)
    if count > 0:
        first_x = (keys[0] >> 8) - 8
    base = (g.env * 144 + ly) * LINE_WORDS
    for w in range(40):
        while first < count and first_x + 7 < w * 4:
            first = first + 1
            first_x = wp.where(first < count, (keys[first % 10] >> 8) - 8, 256)
        sprites = first_x <= w * 4 + 3  # some sprite reaches this word
        word = wp.int32(0)
        if sprites or (w * 4 < win_start and w * 4 + 3 >= win_start):
            for k in range(4):
                x = w * 4 + k
                in_win = wp.where(x >= win_start, 1, 0)
                shown = in_win | use_bg  # BG or window pixel (else BGP colour 0, and opaque for sprites)
                px = wp.where(in_win != 0, x - win_x, (x + scx) & 0xFF)
                tile = (in_win << 8) | (px >> 3)
                if tile != cached and shown != 0:
                    cached = tile
                    bits = bg_tile_row(g, m, wp.where(in_win != 0, win_map, bg_map), px >> 3,
                                       wp.where(in_win != 0, win_row, bg_row))
                c = color_at(bits, px) * shown
                shade = (bgp >> (c * 2)) & 3
                if sprites:
                    # sprites in priority order (X, then OAM index) from `first` that start at or left of x:
                    # the first with a non-zero colour that is not hidden behind an opaque BG pixel shows
                    hidden_behind = c != 0 or shown == 0  # BG off: behind-BG sprites stay hidden, as in the reference
                    s = first
                    while s < count:
                        d = x - ((keys[s] >> 8) - 8)
                        if d < 0:
                            break
                        if d < 8:
                            data = datas[s]
                            sc = color_at(data, wp.where((data & 0x200000) != 0, 7 - d, d))
                            if sc != 0 and ((data & 0x800000) == 0 or not hidden_behind):
                                shade = (wp.where((data & 0x100000) != 0, g.obp1, g.obp0) >> (sc * 2)) & 3
                                break
                        s = s + 1
                word = word | (shade << (k * 8))
        else:
            # No sprite and one layer (BG or window) over the 4 pixels: take their colour bits as two 4-bit
            # planes from the one or two tile rows they lie in, map them through BGP as planes, and spread
            # the planes into the word's bytes.
            in_win = wp.where(w * 4 >= win_start, 1, 0)
            px = wp.where(in_win != 0, w * 4 - win_x, (w * 4 + scx) & 0xFF)
            p0 = wp.int32(0)  # colour bit 0 of the 4 pixels, leftmost in bit 3
            p1 = wp.int32(0)  # colour bit 1
            if (in_win | use_bg) != 0:
                tile = (in_win << 8) | (px >> 3)
                tile2 = (in_win << 8) | (((px + 3) >> 3) & 31)
                if tile == cached2:
                    cached = cached2
                    bits = bits2
                if tile != cached:  # this tile and the next: two independent chains of loads in flight
                    cached = tile
                    cached2 = (in_win << 8) | (((px >> 3) + 1) & 31)
                    bits = bg_tile_row(g, m, wp.where(in_win != 0, win_map, bg_map), px >> 3,
                                       wp.where(in_win != 0, win_row, bg_row))
                    bits2 = bg_tile_row(g, m, wp.where(in_win != 0, win_map, bg_map), (px >> 3) + 1,
                                        wp.where(in_win != 0, win_row, bg_row))
                if tile2 != tile and tile2 != cached2:
                    cached2 = tile2
                    bits2 = bg_tile_row(g, m, wp.where(in_win != 0, win_map, bg_map), tile2 & 31,
                                        wp.where(in_win != 0, win_row, bg_row))
                # 16 pixels of each plane, this tile then the next, leftmost in bit 15; when the 4 pixels lie
                # in one tile the shift never reaches the next one's bits
                shift = 12 - (px & 7)
                p0 = ((((bits & 0xFF) << 8) | (bits2 & 0xFF)) >> shift) & 0xF
                p1 = (((bits & 0xFF00) | ((bits2 >> 8) & 0xFF)) >> shift) & 0xF
            word = palette_word(bgp, p0, p1)
        m.frame[base + w] = wp.uint32(word)


@wp.func
def spread4(n: wp.int32) -> wp.int32:
    """Bits 3..0 of n (bit 3 the leftmost pixel) to bit 0 of bytes 0..3 (byte 0 the leftmost pixel)."""
    return ((n * 0x08040201) >> 3) & 0x01010101


@wp.func
def palette_word(pal: wp.int32, p0: wp.int32, p1: wp.int32) -> wp.int32:
    """4 pixels' shades through palette `pal`, one byte each, from their colour bit planes (leftmost pixel
    in bit 3 of p0/p1): shade bit b of colour c is bit 2c + b of pal, taken for all 4 pixels at once."""
    c0 = ~(p0 | p1) & 0xF  # pixels of colour 0
    c1 = p0 & ~p1  # colour 1
    c2 = p1 & ~p0  # colour 2
    c3 = p0 & p1  # colour 3
    s0 = (c0 & -(pal & 1)) | (c1 & -((pal >> 2) & 1)) | (c2 & -((pal >> 4) & 1)) | (c3 & -((pal >> 6) & 1))
    s1 = (c0 & -((pal >> 1) & 1)) | (c1 & -((pal >> 3) & 1)) | (c2 & -((pal >> 5) & 1)) | (c3 & -((pal >> 7) & 1))
    return spread4(s0) | (spread4(s1) << 1)


@wp.func
def line_window(g: wp.ref[Gb]) -> wp.int32:
    """Mode 0 starts on line LY: 1 when the window shows on it (and count the line), else 0."""
    window = 0
    if (g.lcdc & 0x20) != 0 and g.wy_latch != 0 and g.wx < 167:
        window = 1
        g.win_line = (g.win_line + 1) & 0xFF  # only its value mod 256 addresses the map
    return window


@wp.func
def line_done(g: wp.ref[Gb]):
    """After line LY (drawn or not): the screen holds drawn lines, and the window count restarts after 143."""
    g.screen_fill = 0
    if g.ly == 143:
        g.win_line = -1


@wp.func
def scanline(g: wp.ref[Gb], m: Mem):
    """Mode 0 starts on line LY: count window lines, draw the line when rendering. (Without the drawing,
    `line_window` then `line_done`: the PPU's light transitions, ppu.lcd_tick_light.)"""
    window = line_window(g)
    if g.render != 0:
        draw_line(g, m, g.ly, window)
    line_done(g)


@wp.func
def obs_word(frame: wp.array(dtype=wp.uint32), e: wp.int32, r: wp.int32, q: wp.int32, mean: wp.int32) -> wp.int32:
    """Observation pixels (row r, columns 4q..4q+3) of env e, one per byte (4q in the low byte): frame pixel
    (2r, 2c), or with `mean` the rounded mean of the 2x2 block there. They lie in frame words 2q and 2q+1
    of line 2r (and 2r+1), read as words: shades are 0-3, so sums of four stay inside a 16-bit lane."""
    base = (e * 144 + 2 * r) * LINE_WORDS + 2 * q
    a = wp.int32(frame[base])  # frame pixels 8q..8q+3, one per byte
    b = wp.int32(frame[base + 1])  # 8q+4..8q+7
    if mean != 0:
        c = wp.int32(frame[base + LINE_WORDS])  # the line below
        d = wp.int32(frame[base + LINE_WORDS + 1])
        # byte pairs (0,1) and (2,3) summed into two 16-bit lanes, both lines, then (sum + 2) >> 2 per lane
        a = ((a & 0x00FF00FF) + ((a >> 8) & 0x00FF00FF) + (c & 0x00FF00FF) + ((c >> 8) & 0x00FF00FF) + 0x00020002) >> 2
        b = ((b & 0x00FF00FF) + ((b >> 8) & 0x00FF00FF) + (d & 0x00FF00FF) + ((d >> 8) & 0x00FF00FF) + 0x00020002) >> 2
    # the kept pixels are in bytes 0 and 2 of each word
    return ((a & 3) | (((a >> 16) & 3) << 8) | ((b & 3) << 16) | (((b >> 16) & 3) << 24))


@wp.kernel(enable_backward=False)
def obs_kernel(frame: wp.array(dtype=wp.uint32), out: wp.array(dtype=wp.uint8), out_words: wp.array(dtype=wp.uint32),
               mean: wp.int32, packed: wp.int32):
    """One thread per 4 observation pixels (row r, columns 4q..4q+3 of env e; q fastest, so a warp's loads
    and stores coalesce). Packed: one byte into `out` ([N,72,20] flat), pixel 4q in bits 7-6, 4q+1 in
    bits 5-4, 4q+2 in bits 3-2, 4q+3 in bits 1-0; else one word (4 bytes) into `out_words` ([N,72,80] as
    words)."""
    e, r, q = wp.tid()
    v = obs_word(frame, e, r, q, mean)
    i = (e * 72 + r) * 20 + q
    if packed != 0:
        out[i] = wp.uint8(((v & 3) << 6) | (((v >> 8) & 3) << 4) | (((v >> 16) & 3) << 2) | ((v >> 24) & 3))
    else:
        out_words[i] = wp.uint32(v)
