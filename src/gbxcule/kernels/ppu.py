"""PPU timing: modes 2/3/0/1, LY, LYC coincidence, STAT interrupts with STAT blocking, LCD on/off.

The PPU is a state machine advanced lazily by `lcd_advance(g, m, now, bands)`: when the CPU touches a PPU
register, VRAM or OAM, and at the end of every CPU batch (there, with `bands` 1: mode 3's
start looks up which 8-line bands have sprites, `sprite_bands`, before it scans OAM). One call handles at most
one transition (`lcd_target` is the dot of the next one); the batch loop never lets the CPU run past a
transition, so the reference model's order of events is kept exactly. The light transitions (`lcd_tick_light`)
are also made inside the instruction loop, at the reference's batch ends a batch goes on over (frame.py
`batch_boundary`).

Line timing (DMG): mode 2 for 80 dots, mode 3 for 172 + `mode3_adj` dots (sprites on the line and SCX
fine scroll lengthen it), mode 0 for the rest of the 456-dot line; LY advances 4 dots before mode 2 of
the next line. Lines 144-153 are mode 1; VBlank and its STAT source fire at LY=144. The frame ends, and
`frame_done` is set, when LY wraps from 153 to 0 (or every 70224 cycles while the LCD is off, or at once
when the LCD is switched on).

When mode 0 starts on a visible line the renderer sees the line (`render.scanline`); the screen is
blanked at every LCD-off frame end and at VBlank of the first frame after LCD on (`render.blank_screen`).

The STAT interrupt is raised on a rising edge of the STAT line: the OR of the enabled mode sources (not in
mode 3) and LY=LYC. While the line stays high no new interrupt is raised (STAT blocking).
"""

import warp as wp

from gbxcule.core import schema
from gbxcule.kernels.render import (
    blank_screen,
    line_done,
    line_window,
    lowest_bit,
    oam_byte,
    oam_line_hits,
    oam_ys,
    scanline,
)
from gbxcule.kernels.state import Gb, Mem

FRAME_CYCLES = wp.constant(schema.FRAME_CYCLES)
INT_VBLANK = wp.constant(1)
INT_STAT = wp.constant(2)

# stat_transition values
ST_NONE = wp.constant(0)
ST_ADVANCE_LY = wp.constant(1)
ST_START_MODE2 = wp.constant(2)


@wp.func
def stat_update_line(g: wp.ref[Gb]) -> wp.int32:
    """Recompute the STAT line; returns INT_STAT on its rising edge."""
    line = 0
    if g.stat_mode != 3 and (g.stat & (1 << (g.stat_mode + 3))) != 0:
        line = 1
    if (g.stat & 0x44) == 0x44:
        line = 1
    raised = 0
    if line == 1 and g.stat_irq_line == 0:
        raised = INT_STAT
    g.stat_irq_line = line
    return raised


@wp.func
def stat_set_mode(g: wp.ref[Gb], mode: wp.int32) -> wp.int32:
    if g.stat_mode == mode:
        return 0
    g.stat_mode = mode
    g.stat = (g.stat & 0xFC) | mode
    return stat_update_line(g)


@wp.func
def stat_update_lyc(g: wp.ref[Gb]) -> wp.int32:
    if g.lyc == g.ly:
        g.stat = g.stat | 4
    else:
        g.stat = g.stat & 0xFB
    return stat_update_line(g)


@wp.func
def stat_write(g: wp.ref[Gb], value: wp.int32) -> wp.int32:
    g.stat = (g.stat & 0x87) | (value & 0x78)
    return stat_update_line(g)


# uint32 constants above 2**31 as typed Warp constants: a bare literal in `wp.uint32(...)` is emitted as an int32
# C++ constant first, which wraps to the same bits but makes clang warn (-Wconstant-conversion) on every compile.
BYTE_TOP_BITS = wp.constant(wp.uint32(0x80808080))
EMPTY_X_SET = wp.constant(wp.uint32(0xFFFFFFFF))  # four empty slots of `mode3_sprite_penalty`'s X set


@wp.func
def seen_x(set0: wp.uint32, set1: wp.uint32, set2: wp.uint32, x: wp.int32) -> wp.bool:
    """Whether X value `x` (0-167) is one of the bytes of the three words (`mode3_sprite_penalty`'s set; an
    empty slot holds 0xFF, which no such X equals): each word XOR x repeated has a zero byte where it holds x,
    and (v - 0x01010101) & ~v & 0x80808080 is non-zero exactly when v has a zero byte."""
    rep = wp.uint32(x) * wp.uint32(0x01010101)
    v0 = set0 ^ rep
    v1 = set1 ^ rep
    v2 = set2 ^ rep
    ones = wp.uint32(0x01010101)
    hi = BYTE_TOP_BITS
    return (((v0 - ones) & ~v0) | ((v1 - ones) & ~v1) | ((v2 - ones) & ~v2)) & hi != wp.uint32(0)


@wp.func
def put_x(word: wp.uint32, slot: wp.int32, x: wp.int32) -> wp.uint32:
    """`word` with byte `slot & 3` set to x."""
    sh = wp.uint32((slot & 3) * 8)
    return (word & ~(wp.uint32(0xFF) << sh)) | (wp.uint32(x) << sh)


@wp.func
def sprite_bands(g: wp.ref[Gb], m: Mem, height: wp.int32) -> wp.int32:
    """Bit b set when a sprite of OAM, `height` rows tall, covers any of lines 8b..8b+7 (b < 18). Sprite i covers
    lines Y-16 .. Y-16+height-1, as `oam_line_hits` tests them (whatever its X)."""
    bands = wp.int32(0)
    i = wp.int32(0)
    while i < 40:
        lo = oam_byte(m, g, i * 4) - 16
        hi = lo + height - 1
        b0 = wp.max(lo, 0) >> 3
        b1 = wp.max(wp.min(hi, 143), 0) >> 3
        bands = bands | wp.where(hi >= 0 and lo <= 143, ((2 << b1) - 1) & ~((1 << b0) - 1), 0)
        i = i + 1
    return bands


@wp.func
def sprite_tall(g: wp.ref[Gb]) -> wp.int32:
    """The sprite height in 8-line units (LCDC bit 2): what `g.spr_ok` holds when the bands are current."""
    return wp.where((g.lcdc & 4) != 0, 2, 1)


@wp.func
def sprite_bands_refresh(g: wp.ref[Gb], m: Mem):
    """Find the sprite bands again (`sprite_bands`) if OAM or the sprite height changed since they were found
    and no OAM DMA runs: g.spr_ok is then the height / 8. Called between CPU batches (frame.py batch_events),
    so that the scan of OAM stays out of the instruction loop (the PPU catch-up in bus_access)."""
    tall = sprite_tall(g)
    if (g.lcdc & 2) != 0 and g.spr_ok != tall and g.dma_active == 0:
        g.spr_bands = sprite_bands(g, m, tall * 8)
        g.spr_ok = tall


@wp.func
def sprite_band_clear(g: wp.ref[Gb], ly: wp.int32) -> wp.bool:
    """No sprite can be on line `ly`: its 8-line band is empty in the bands found for the current sprite height
    (`sprite_bands_refresh`; g.spr_ok 0 when they must be found again)."""
    tall = sprite_tall(g)
    return g.spr_ok == tall and ly < 144 and ((g.spr_bands >> (ly >> 3)) & 1) == 0


@wp.func
def mode3_sprite_penalty(g: wp.ref[Gb], m: Mem, ly: wp.int32, bands: wp.int32) -> wp.int32:
    """Extra mode-3 dots for the sprites on line `ly` (up to 10), by X group and fine alignment.

    A sprite whose X was already seen on the line adds no alignment penalty. The X values seen so far (at most
    10) are kept as bytes of three words and looked up all at once (`seen_x`), so a sprite costs the same few
    operations however many came before it, and the hits take no branch: where lanes meet different sprites,
    no lane waits on another's re-reading of OAM (the lookup of earlier entries it replaces ran 4% of a spread
    game's warp instructions at 7.7 active lanes; commit 9cdfdf7). The Y bytes are read four at a time
    into one word before any is tested (`oam_ys`), so four loads are in flight instead of one, and the four
    are tested at once (`oam_line_hits`): this scan runs on every line of every frame, and waiting on one OAM
    load after another was a tenth of the step kernel's stall samples on busy games; commit 92a7aa7). Between
    batches (`bands` 1), a line in an 8-line band that no sprite covers takes no scan at all (`sprite_bands`)."""
    if (g.lcdc & 2) == 0:
        return 0
    height = 8
    if (g.lcdc & 4) != 0:
        height = 16
    # A call with `bands` 0, a constant, leaves the look-up out of its inlined copy (the PPU catch-up in bus_access)
    if bands != 0 and sprite_band_clear(g, ly):
        return 0
    count = wp.int32(0)
    groups = wp.int32(0)  # distinct X values on screen so far: also the next free slot of the set
    penalty = wp.int32(0)
    set0 = EMPTY_X_SET
    set1 = EMPTY_X_SET
    set2 = EMPTY_X_SET
    w = wp.int32(0)  # OAM entries 4w..4w+3
    while w < 10 and count < 10:
        hits = oam_line_hits(oam_ys(m, g, w * 4), ly, height)
        while hits != 0 and count < 10:
            i = w * 4 + lowest_bit(hits)
            hits = hits & (hits - 1)
            x = oam_byte(m, g, i * 4 + 1)
            shown = x < 168
            new = shown and not seen_x(set0, set1, set2, x)
            penalty = penalty + wp.where(shown, 6, 0) + wp.where(new, wp.max(0, 5 - ((x + g.scx - 8) & 7)), 0)
            set0 = wp.where(new and groups < 4, put_x(set0, groups, x), set0)
            set1 = wp.where(new and groups >= 4 and groups < 8, put_x(set1, groups, x), set1)
            set2 = wp.where(new and groups >= 8, put_x(set2, groups, x), set2)
            groups = groups + wp.where(new, 1, 0)
            count = count + 1
        w = w + 1
    if count > 0 and groups == 0:
        return -4  # only off-screen sprites: one machine cycle less of mode-3 startup
    if count == 0:
        return 0
    return wp.max(0, penalty - 7)


@wp.func
def mode3_scx_dots(g: wp.ref[Gb]) -> wp.int32:
    """Mode 3's extra dots for SCX's fine scroll (0, 4 or 8; not on the first frame after LCD on)."""
    return ((g.scx & 7) + 3) / 4 * 4


@wp.func
def mode3_adjustment(g: wp.ref[Gb], m: Mem, ly: wp.int32, bands: wp.int32) -> wp.int32:
    penalty = mode3_sprite_penalty(g, m, ly, bands)
    if g.first_frame == 0:
        penalty = penalty + mode3_scx_dots(g)
    return penalty


@wp.func
def lcd_schedule(g: wp.ref[Gb]):
    g.lcd_cti = g.lcd_target - g.lcd_clock
    g.lcd_ctf = FRAME_CYCLES - g.lcd_clock


@wp.func
def wy_check(g: wp.ref[Gb]):
    if g.wy == g.ly:
        g.wy_latch = 1


@wp.func
def lcd_advance_ly(g: wp.ref[Gb]):
    """Transition ST_ADVANCE_LY: LY steps 4 dots before the next line's mode 2 (`lcd_advance`)."""
    g.ly = g.ly + 1
    if g.first_frame != 0:
        g.stat = g.stat & 0xFB  # coincidence is compared again when mode 2 starts
        g.if_ = g.if_ | stat_update_line(g)
    else:
        g.if_ = g.if_ | stat_update_lyc(g)
    g.lcd_target = g.lcd_target + 4
    g.stat_transition = ST_START_MODE2


@wp.func
def lcd_start_mode2(g: wp.ref[Gb]):
    """Transition ST_START_MODE2: a visible line's mode 2 (`lcd_advance`)."""
    g.if_ = g.if_ | stat_set_mode(g, 2)
    if g.first_frame != 0:
        g.if_ = g.if_ | stat_update_lyc(g)
    g.lcd_target = g.lcd_target + 80
    g.next_mode = 3
    g.stat_transition = ST_NONE
    wy_check(g)


@wp.func
def lcd_start_mode3(g: wp.ref[Gb], adj: wp.int32):
    """Mode 3 started (STAT already set) and lasts 172 + `adj` dots (`mode3_adjustment`)."""
    g.mode3_adj = adj
    g.lcd_target = g.lcd_target + 172 + adj
    g.next_mode = 0
    g.stat_transition = ST_NONE


@wp.func
def lcd_start_mode0(g: wp.ref[Gb]):
    """Mode 0 started (STAT already set): the rest of the line, then mode 2 or (after line 143) VBlank. The
    caller then runs the renderer's line (`render.scanline`, or its parts without drawing)."""
    if g.ly < 143:
        g.lcd_target = g.lcd_target + 200 - g.mode3_adj
        g.next_mode = 2
        g.stat_transition = ST_ADVANCE_LY
    else:
        extra = 4
        if g.first_frame != 0:
            extra = 0
        g.lcd_target = g.lcd_target + 200 + extra - g.mode3_adj
        g.next_mode = 1
        g.stat_transition = ST_NONE


@wp.func
def lcd_vblank_line(g: wp.ref[Gb]):
    """Mode 1 (STAT already set): the next VBlank line; at LY 144 VBlank's interrupts. (On the first frame after
    LCD on the caller then blanks the screen.)"""
    g.lcd_target = g.lcd_target + 456
    g.next_mode = 1
    g.stat_transition = ST_NONE
    g.ly = g.ly + 1
    g.if_ = g.if_ | stat_update_lyc(g)
    if g.ly == 144:
        if (g.stat & 0x20) != 0 and g.stat_irq_line == 0:
            g.if_ = g.if_ | INT_STAT  # the mode-2 source fires at the start of VBlank too
        g.if_ = g.if_ | INT_VBLANK
        g.wy_latch = 0


@wp.func
def lcd_advance(g: wp.ref[Gb], m: Mem, now: wp.int32, bands: wp.int32):
    """Catch the PPU up to cycle `now`, handling at most one transition; interrupts it raises go to IF.
    `bands`: whether mode 3's start may look up the sprite bands (`mode3_sprite_penalty`)."""
    cycles = now - g.lcd_last
    if cycles == 0:
        return
    g.lcd_last = now
    g.lcd_clock = g.lcd_clock + cycles
    if g.lcd_clock >= g.lcd_target:
        on = (g.lcdc & 0x80) != 0
        if on and g.lcd_reset != 0:
            # The LCD was just switched on: line 0 starts in mode 0, without its first mode 2.
            g.lcd_reset = 0
            g.frame_done = 1
            g.ly = 0
            g.lcd_clock = 0
            g.lcd_target = 76
            g.next_mode = 3
            g.stat_transition = ST_NONE
            g.if_ = g.if_ | stat_set_mode(g, 0)
            g.wy_latch = 0
            wy_check(g)
            g.if_ = g.if_ | stat_update_lyc(g)
        elif on and g.ly == 153:
            if g.first_frame != 0 and g.lcd_target < FRAME_CYCLES:
                g.lcd_target = FRAME_CYCLES  # the start-up line is 8 dots short
            else:
                g.frame_done = 1
                g.ly = 0
                g.lcd_clock = g.lcd_clock % FRAME_CYCLES
                g.first_frame = 0
                g.lcd_target = g.lcd_target % FRAME_CYCLES + 80
                g.next_mode = 3
                g.stat_transition = ST_NONE
                g.if_ = g.if_ | stat_set_mode(g, 2)
                g.wy_latch = 0
                wy_check(g)
                g.if_ = g.if_ | stat_update_lyc(g)
        elif on and g.stat_transition == ST_ADVANCE_LY:
            lcd_advance_ly(g)
        elif on and g.stat_transition == ST_START_MODE2:
            lcd_start_mode2(g)
        elif on:
            g.if_ = g.if_ | stat_set_mode(g, g.next_mode)
            mode = g.stat_mode
            if mode == 2:
                g.ly = g.ly + 1
                g.lcd_target = g.lcd_target + 80
                g.next_mode = 3
                g.stat_transition = ST_NONE
                g.if_ = g.if_ | stat_update_lyc(g)
                wy_check(g)
            elif mode == 3:
                lcd_start_mode3(g, mode3_adjustment(g, m, g.ly, bands))
            elif mode == 0:
                lcd_start_mode0(g)
                scanline(g, m)
            else:
                lcd_vblank_line(g)
                if g.ly == 144 and g.first_frame != 0:
                    blank_screen(g, m)  # the first frame after LCD on is not shown
        else:
            g.frame_done = 1
            g.lcd_clock = g.lcd_clock % FRAME_CYCLES
            g.lcd_target = FRAME_CYCLES
            blank_screen(g, m)
    lcd_schedule(g)


@wp.func
def lcd_tick_light(g: wp.ref[Gb], m: Mem, now: wp.int32, scan: wp.int32) -> wp.int32:
    """`lcd_advance(g, m, now, 1)` where it is light, else nothing: returns 1 when it ran, 0 when the caller must
    run `lcd_advance` itself. Light: no transition due, or one of LY's step, mode 2's start, mode 3's start on a
    line no sprite can be on (sprites off, or the line's 8-line band empty in `sprite_bands`), mode 0's start on
    a frame that is not drawn (on a drawn one it draws the line), or a VBlank line's, outside the first frame
    after LCD on and short of the frame's end. With `scan` 1, mode 3's start on a line with sprites is done too,
    OAM scan and all (`mode3_adjustment`). The CPU batch loop runs it at the reference's batch ends inside a
    longer batch (frame.py `batch_boundary`): it holds no drawing, so the instruction loop stays small; the flat
    loop's copy (`scan` 1, a constant) holds the OAM scan, the nested loop's (0) not, since a nested batch stops
    at mode 3's start anyway."""
    cycles = now - g.lcd_last
    if cycles == 0:
        return 1
    clock = g.lcd_clock + cycles
    due = clock >= g.lcd_target
    if due:
        if (g.lcdc & 0x80) == 0 or g.lcd_reset != 0 or g.ly == 153 or g.first_frame != 0:
            return 0
        if g.stat_transition == ST_NONE:
            if g.next_mode == 2 or (g.next_mode == 0 and g.render != 0):
                return 0  # (mode 0's start on a drawn frame draws the line: lcd_advance)
            if scan == 0 and g.next_mode == 3 and (g.lcdc & 2) != 0 and not sprite_band_clear(g, g.ly):
                return 0  # sprites may be on the line: the OAM scan is left to lcd_advance
    g.lcd_last = now
    g.lcd_clock = clock
    if due:
        if g.stat_transition == ST_ADVANCE_LY:
            lcd_advance_ly(g)
        elif g.stat_transition == ST_START_MODE2:
            lcd_start_mode2(g)
        else:
            g.if_ = g.if_ | stat_set_mode(g, g.next_mode)
            if g.stat_mode == 3:
                if scan != 0:
                    lcd_start_mode3(g, mode3_adjustment(g, m, g.ly, 1))
                else:
                    lcd_start_mode3(g, mode3_scx_dots(g))  # (mode3_adjustment without sprites)
            elif g.stat_mode == 0:
                lcd_start_mode0(g)
                line_window(g)
                line_done(g)
            else:
                lcd_vblank_line(g)
    lcd_schedule(g)
    return 1


@wp.func
def lcd_skip_lines(g: wp.ref[Gb], m: Mem, limit: wp.int32) -> wp.int32:
    """Fast-forward a PPU that nobody watches over whole visible lines; returns the cycles skipped (0: none).

    For a halted CPU with nothing to wake it (the caller checks that, and that no OAM DMA runs), the
    event loop would otherwise stop at four PPU transitions a line. From the point
    right after mode 0 started on line L (`stat_transition == ST_ADVANCE_LY`), lines L+1 .. L+k can be
    applied at once when their transitions cannot raise an interrupt or depend on anything that changes
    meanwhile: no mode STAT sources enabled, LY never equal to LYC on them, no frame end (L+k <= 142), and
    the mode-0 start of line L+k earlier than `limit` cycles from now (the next timer or serial event).
    The result is the state the transitions leave, ending at that mode-0 start: LY, the STAT bits and
    line, the WY latch and window line counter, the mode-3 length of line L+k, and, on a drawn frame, the
    lines drawn. It runs between batches only, so mode 3's length looks the sprite bands up (`bands` 1 in
    `lcd_advance`)."""
    if (g.lcdc & 0x80) == 0 or g.stat_transition != ST_ADVANCE_LY or g.first_frame != 0 or g.lcd_reset != 0:
        return 0
    if (g.stat & 0x38) != 0:
        return 0
    first = g.ly + 1
    last = 142
    if g.lyc >= first and g.lyc <= last:
        last = g.lyc - 1
    # line L+k's mode 0 starts at lcd_target + 456 (k - 1) + 256 + its mode-3 extra dots (>= 0, < 200)
    base = g.lcd_target + 256 - g.lcd_clock
    if base >= limit:
        return 0
    last = wp.min(last, g.ly + 1 + (limit - 1 - base) / 456)
    if last < first:
        return 0
    adj = mode3_adjustment(g, m, last, 1)
    if base + 456 * (last - first) + adj >= limit:
        last = last - 1
        if last < first:
            return 0
        adj = mode3_adjustment(g, m, last, 1)
    skipped = base + 456 * (last - first) + adj
    if g.render != 0:
        # drawn frame: each line as its transitions would (WY check at mode 2, the line at mode 0); the
        # registers, VRAM and OAM those read cannot change while the CPU is halted and no DMA runs
        line = first
        while line <= last:
            g.ly = line
            wy_check(g)
            scanline(g, m)
            line = line + 1
    else:
        start = first  # the first line the window counts on
        if g.wy_latch == 0:
            start = last + 1
            if g.wy >= first and g.wy <= last:
                g.wy_latch = 1
                start = g.wy
        if (g.lcdc & 0x20) != 0 and g.wx < 167 and start <= last:
            g.win_line = (g.win_line + last - start + 1) & 0xFF
        g.screen_fill = 0
    g.ly = last
    g.stat = g.stat & 0xF8  # mode 0, LY != LYC
    g.stat_irq_line = 0
    g.mode3_adj = adj
    g.lcd_clock = g.lcd_clock + skipped
    g.lcd_target = g.lcd_target + 456 * (last - first + 1)
    g.lcd_last = g.lcd_last + skipped
    lcd_schedule(g)
    return skipped


@wp.func
def lcd_write_lcdc(g: wp.ref[Gb], value: wp.int32) -> wp.int32:
    was_on = (g.lcdc & 0x80) != 0
    g.lcdc = value
    is_on = (value & 0x80) != 0
    intr = 0
    if was_on and not is_on:
        g.lcd_clock = 0
        g.lcd_target = 0
        g.lcd_ctf = 0
        stat_set_mode(g, 0)
        g.ly = 0
    elif is_on and not was_on:
        g.lcd_target = 0  # the next advance restarts the PPU
        g.first_frame = 1
        g.lcd_reset = 1
        if g.lyc_changed_off != 0:
            g.stat_mode_override = 1
            g.lyc_changed_off = 0
        if (g.stat & 0x40) != 0:
            intr = stat_update_lyc(g)
    return intr


@wp.func
def lcd_write_lyc(g: wp.ref[Gb], value: wp.int32) -> wp.int32:
    g.lyc = value
    intr = 0
    if (g.lcdc & 0x80) != 0:
        intr = stat_update_lyc(g)
    else:
        g.lyc_changed_off = 1
    return intr


@wp.func
def lcd_read_stat(g: wp.ref[Gb]) -> wp.int32:
    value = g.stat
    if g.stat_mode_override != 0:
        g.stat_mode_override = 0
        value = value & 0xFC
    return value


@wp.func
def vram_blocked_read(g: wp.ref[Gb]) -> wp.bool:
    """VRAM reads see 0xFF in mode 3 and in the last 4 dots of mode 2."""
    if (g.lcdc & 0x80) == 0:
        return False
    if g.stat_mode == 3:
        return True
    return g.stat_mode == 2 and g.lcd_clock <= g.lcd_target and g.lcd_target - g.lcd_clock <= 4


@wp.func
def oam_blocked_read(g: wp.ref[Gb]) -> wp.bool:
    if (g.lcdc & 0x80) == 0:
        return False
    if g.stat_mode == 2 or g.stat_mode == 3:
        return True
    return g.first_frame != 0 and g.stat_transition == ST_START_MODE2


@wp.func
def oam_blocked_write(g: wp.ref[Gb]) -> wp.bool:
    if (g.lcdc & 0x80) == 0:
        return False
    if g.stat_mode == 3:
        return True
    if g.stat_mode == 2:
        # OAM opens briefly during the last four start-up dots of mode 2.
        opening = g.first_frame != 0 and g.lcd_clock <= g.lcd_target and g.lcd_target - g.lcd_clock <= 4
        return not opening
    return False
