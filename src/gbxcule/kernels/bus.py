"""The memory map: the one read path and the one write path every CPU access goes through.

`read8(g, m, addr, now, mao)` / `write8(g, m, addr, value, now, mao)`: `now` is the cycle count at which
the access happens (instruction start + its access offset) and `mao` the extra offset the PPU sees for
that access (the reference model times PPU-visible accesses separately; see docs/timing.md). Every
subsystem an access touches is first caught up to that time: the timer, serial port, OAM DMA and PPU.

Map: 0000-7FFF ROM (boot ROM over 0000-00FF until 0xFF50 is written), 8000-9FFF VRAM, A000-BFFF
cartridge RAM/RTC, C000-DFFF WRAM, E000-FDFF echo of C000-DDFF, FE00-FE9F OAM, FEA0-FEFF unusable
(stored, as in the reference), FF00-FF7F IO, FF80-FFFE HRAM, FFFF IE. Sound registers read 0 and ignore
writes: the APU is not emulated (the reference runs with sound emulation off).
"""

import warp as wp

from gbxcule.kernels.mbc import cart_read, mbc_write, rom_read, rtc_advance
from gbxcule.kernels.ppu import (
    lcd_advance,
    lcd_read_stat,
    lcd_write_lcdc,
    lcd_write_lyc,
    oam_blocked_read,
    oam_blocked_write,
    stat_write,
    vram_blocked_read,
)
from gbxcule.kernels.state import BIG, SERIAL_CAPTURE, Gb, Mem
from gbxcule.kernels.timer import (
    timer_advance,
    timer_read_tima,
    timer_write_div,
    timer_write_tac,
    timer_write_tima,
    timer_write_tma,
)

INT_TIMER = wp.constant(4)
INT_SERIAL = wp.constant(8)
INT_JOYPAD = wp.constant(16)
SERIAL_RING = wp.constant(SERIAL_CAPTURE)


@wp.func
def at(g: wp.ref[Gb], base: wp.int32, offset: wp.int32) -> wp.int32:
    """Index of byte `offset` of the region at `base` for this thread's env (interleaved layout)."""
    return (base + offset) * g.n + g.env


# --- serial ---------------------------------------------------------------------------------------

@wp.func
def serial_advance(g: wp.ref[Gb], now: wp.int32) -> wp.int32:
    cycles = now - g.serial_last
    if cycles == 0:
        return 0
    g.serial_last = now
    raised = 0
    if g.serial_on != 0:
        g.serial_left = g.serial_left - cycles
        if g.serial_left <= 0:
            g.sc = g.sc & 0x7F
            g.serial_on = 0
            g.serial_left = BIG
            raised = 1
    g.serial_cti = BIG
    if g.serial_on != 0:
        g.serial_cti = g.serial_left
    return raised


@wp.func
def serial_write_sc(g: wp.ref[Gb], value: wp.int32):
    g.sc = value | 0x7E
    g.serial_on = wp.where((g.sc & 0x80) != 0, 1, 0)
    g.serial_internal = g.sc & 1
    if g.serial_internal != 0:
        g.serial_left = 8 * 128  # 8 bits at 8192 Hz
        g.serial_cti = g.serial_left
    else:
        g.serial_on = 0  # no link partner: an external-clock transfer never completes
        g.serial_left = BIG
        g.serial_cti = BIG


# --- joypad ---------------------------------------------------------------------------------------

@wp.func
def joypad_value(g: wp.ref[Gb], select: wp.int32) -> wp.int32:
    """JOYP as seen after writing `select`: the selected lines, 0 = pressed."""
    p14 = (select >> 4) & 1
    p15 = (select >> 5) & 1
    value = (select | 0xCF) & 0xFF
    if p14 != 0 and p15 != 0:
        value = 0x0F
    elif p14 == 0 and p15 != 0:
        value = value & g.joy_dpad
    elif p15 == 0 and p14 != 0:
        value = value & g.joy_buttons
    return value | 0xC0


# --- OAM DMA --------------------------------------------------------------------------------------

@wp.func
def dma_source_read(g: wp.ref[Gb], m: Mem, addr: wp.int32, now: wp.int32, mao: wp.int32) -> wp.int32:
    value = 0xFF
    if addr < 0x8000:
        value = rom_read(g, m, addr)
    elif addr < 0xA000:
        blocked = False
        if mao != 0:
            g.if_ = g.if_ | lcd_advance(g, m, now + mao)
            blocked = vram_blocked_read(g)
        if not blocked:
            value = wp.int32(m.ram[at(g, m.vram, addr - 0x8000)])
    elif addr < 0xC000:
        if m.has_rtc != 0 and g.ram_bank >= 0x08 and g.ram_bank <= 0x0C:
            rtc_advance(g, now)
        value = cart_read(g, m, addr)
    elif addr < 0xFE00:
        value = wp.int32(m.ram[at(g, m.wram, (addr - 0xC000) & 0x1FFF)])
    elif addr < 0xFEA0:
        value = wp.int32(m.ram[at(g, m.oam, addr - 0xFE00)])
    elif addr < 0xFF00:
        value = wp.int32(m.ram[at(g, m.unusable, addr - 0xFEA0)])
    return value


@wp.func
def dma_sync(g: wp.ref[Gb], m: Mem, now: wp.int32, mao: wp.int32):
    """Copy the OAM DMA bytes due by cycle now + mao (one byte per 4 cycles after dma_start)."""
    if g.dma_active == 0:
        return
    elapsed = now + mao - g.dma_start
    if elapsed < 4:
        return
    target = wp.min(0xA0, elapsed / 4)
    while g.dma_index < target:
        src = g.dma_source
        if src >= 0xFE:
            src = src - 0x20
        value = dma_source_read(g, m, (src << 8) | g.dma_index, now, mao)
        m.ram[at(g, m.oam, g.dma_index)] = wp.uint8(value)
        g.dma_index = g.dma_index + 1
    if g.dma_index == 0xA0:
        g.dma_active = 0


@wp.func
def dma_start(g: wp.ref[Gb], value: wp.int32, now: wp.int32):
    if g.dma_active != 0 and g.dma_index == 0:
        g.dma_start = now + 8
    else:
        g.dma_start = now + 12
    g.dma_active = 1
    g.dma_source = value
    g.dma_index = 0


# --- reads ----------------------------------------------------------------------------------------

@wp.func
def io_read(g: wp.ref[Gb], m: Mem, addr: wp.int32, now: wp.int32, mao: wp.int32) -> wp.int32:
    if g.dma_active != 0:
        dma_sync(g, m, now, mao)
    value = 0xFF
    if addr >= 0xFF80:
        if addr == 0xFFFF:
            value = g.ie
        else:
            value = wp.int32(m.ram[at(g, m.hram, addr - 0xFF80)])
    elif addr >= 0xFF4C:
        value = 0xFF
    elif addr >= 0xFF40:
        g.if_ = g.if_ | lcd_advance(g, m, now + mao)
        r = addr - 0xFF40
        if r == 0:
            value = g.lcdc
        elif r == 1:
            value = lcd_read_stat(g)
        elif r == 2:
            value = g.scy
        elif r == 3:
            value = g.scx
        elif r == 4:
            value = g.ly
        elif r == 5:
            value = g.lyc
        elif r == 6:
            value = g.dma_source
        elif r == 7:
            value = g.bgp
        elif r == 8:
            value = g.obp0
        elif r == 9:
            value = g.obp1
        elif r == 10:
            value = g.wy
        else:
            value = g.wx
    elif addr >= 0xFF10:
        value = 0  # APU not emulated
    elif addr == 0xFF0F:
        value = g.if_ | 0xE0
    elif addr >= 0xFF04 and addr <= 0xFF07:
        if timer_advance(g, now) != 0:
            g.if_ = g.if_ | INT_TIMER
        if addr == 0xFF04:
            value = g.div_counter >> 8
        elif addr == 0xFF05:
            value = timer_read_tima(g)
        elif addr == 0xFF06:
            value = g.tma
        else:
            value = g.tac | 0xF8
    elif addr == 0xFF01 or addr == 0xFF02:
        if serial_advance(g, now) != 0:
            g.if_ = g.if_ | INT_SERIAL
        if addr == 0xFF01:
            value = g.sb
        else:
            value = g.sc
    elif addr == 0xFF00:
        value = g.joyp
    return value


@wp.func
def read8(g: wp.ref[Gb], m: Mem, addr: wp.int32, now: wp.int32, mao: wp.int32) -> wp.int32:
    """The CPU reads `addr` at cycle `now` (the PPU sees now + mao)."""
    value = 0xFF
    if addr < 0x8000:
        value = rom_read(g, m, addr)
    elif addr < 0xA000:
        blocked = False
        if mao != 0:
            g.if_ = g.if_ | lcd_advance(g, m, now + mao)
            blocked = vram_blocked_read(g)
        if not blocked:
            value = wp.int32(m.ram[at(g, m.vram, addr - 0x8000)])
    elif addr < 0xC000:
        if m.has_rtc != 0 and g.ram_bank >= 0x08 and g.ram_bank <= 0x0C:
            rtc_advance(g, now)
        value = cart_read(g, m, addr)
    elif addr < 0xFE00:
        value = wp.int32(m.ram[at(g, m.wram, (addr - 0xC000) & 0x1FFF)])
    elif addr < 0xFEA0:
        blocked = False
        if mao != 0:
            g.if_ = g.if_ | lcd_advance(g, m, now + mao)
            blocked = oam_blocked_read(g)
        if not blocked:
            if g.dma_active != 0:
                dma_sync(g, m, now, mao)
            started = now + mao >= g.dma_start
            if g.dma_active != 0 and started and ((g.h << 8) | g.l) == addr:
                dma_sync(g, m, now, wp.max(mao, 4))
                started = now + mao >= g.dma_start
            if g.dma_active != 0 and started:
                value = 0xFF
            else:
                value = wp.int32(m.ram[at(g, m.oam, addr - 0xFE00)])
    elif addr < 0xFF00:
        value = wp.int32(m.ram[at(g, m.unusable, addr - 0xFEA0)])
    else:
        value = io_read(g, m, addr, now, mao)
    return value


# --- writes ---------------------------------------------------------------------------------------

@wp.func
def io_write(g: wp.ref[Gb], m: Mem, addr: wp.int32, value: wp.int32, now: wp.int32, mao: wp.int32):
    if g.dma_active != 0:
        dma_sync(g, m, now, mao)
    if addr >= 0xFF80:
        if addr == 0xFFFF:
            g.ie = value
            g.bail = 1
        else:
            m.ram[at(g, m.hram, addr - 0xFF80)] = wp.uint8(value)
        return
    if addr >= 0xFF4C:
        if addr == 0xFF50 and g.bootrom != 0 and (value == 0x01 or value == 0x11):
            g.bootrom = 0
            g.bail = 1
        return
    if addr >= 0xFF40:
        g.if_ = g.if_ | lcd_advance(g, m, now)
        r = addr - 0xFF40
        if r == 0:
            g.if_ = g.if_ | lcd_write_lcdc(g, value)
        elif r == 1:
            g.if_ = g.if_ | stat_write(g, value)
        elif r == 2:
            g.scy = value
        elif r == 3:
            g.scx = value
        elif r == 4:
            return  # LY is read-only (and, as in the reference, this write does not end the batch)
        elif r == 5:
            g.if_ = g.if_ | lcd_write_lyc(g, value)
        elif r == 6:
            dma_start(g, value, now)
        elif r == 7:
            g.bgp = value
        elif r == 8:
            g.obp0 = value
        elif r == 9:
            g.obp1 = value
        elif r == 10:
            g.wy = value
        else:
            g.wx = value
    elif addr >= 0xFF10:
        pass  # APU not emulated: writes are ignored
    elif addr == 0xFF0F:
        g.if_ = value & 0x1F
    elif addr >= 0xFF04 and addr <= 0xFF07:
        if timer_advance(g, now) != 0:
            g.if_ = g.if_ | INT_TIMER
        if addr == 0xFF04:
            timer_write_div(g)
        elif addr == 0xFF05:
            timer_write_tima(g, value)
        elif addr == 0xFF06:
            timer_write_tma(g, value)
        else:
            timer_write_tac(g, value)
    elif addr == 0xFF01 or addr == 0xFF02:
        if serial_advance(g, now) != 0:
            g.if_ = g.if_ | INT_SERIAL
        if addr == 0xFF01:
            m.serial[(g.serial_count % SERIAL_RING) * g.n + g.env] = wp.uint8(value)
            g.serial_count = g.serial_count + 1
            g.sb = 0xFF  # no link partner: the reference shifts in 1s at once
        else:
            serial_write_sc(g, value)
    elif addr == 0xFF00:
        g.joyp = joypad_value(g, value)
    else:
        m.ram[at(g, m.io, addr - 0xFF00)] = wp.uint8(value)  # unused registers keep what was written
    g.bail = 1


@wp.func
def write8(g: wp.ref[Gb], m: Mem, addr: wp.int32, value: wp.int32, now: wp.int32, mao: wp.int32):
    """The CPU writes `value` to `addr` at cycle `now` (the PPU sees now + mao)."""
    v = value & 0xFF
    if addr < 0x8000:
        if m.has_rtc != 0 and addr >= 0x6000:
            rtc_advance(g, now)
        mbc_write(g, m, addr, v)
        g.bail = 1
    elif addr < 0xA000:
        blocked = False
        if mao != 0:
            g.if_ = g.if_ | lcd_advance(g, m, now + mao)
            blocked = (g.lcdc & 0x80) != 0 and g.stat_mode == 3
        if not blocked:
            m.ram[at(g, m.vram, addr - 0x8000)] = wp.uint8(v)
    elif addr < 0xC000:
        if m.has_rtc != 0 and g.ram_bank >= 0x08 and g.ram_bank <= 0x0C:
            rtc_advance(g, now)
        mbc_write(g, m, addr, v)
    elif addr < 0xFE00:
        m.ram[at(g, m.wram, (addr - 0xC000) & 0x1FFF)] = wp.uint8(v)
    elif addr < 0xFEA0:
        blocked = False
        if mao != 0:
            g.if_ = g.if_ | lcd_advance(g, m, now + mao)
            blocked = oam_blocked_write(g)
        if not blocked:
            if g.dma_active != 0:
                dma_sync(g, m, now, mao)
            if g.dma_active == 0:
                m.ram[at(g, m.oam, addr - 0xFE00)] = wp.uint8(v)
    elif addr < 0xFF00:
        m.ram[at(g, m.unusable, addr - 0xFEA0)] = wp.uint8(v)
    else:
        io_write(g, m, addr, v, now, mao)
