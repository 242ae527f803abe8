"""The memory map: `bus_access`, the one path every CPU memory access goes through.

`bus_access(g, m, addr, value, write, now, mao)` reads (write=0) or writes one byte. `now` is the cycle
count at which the access happens (instruction start + its access offset) and `mao` the extra offset the
PPU sees for it (the reference model times PPU-visible accesses separately; see docs/timing.md). Every
subsystem the access touches is first caught up to that time: the timer, serial port, OAM DMA and PPU.
Each of those catch-ups appears once in this function, and the CPU calls it from one place, so the
step kernel holds one copy of the memory map (compile time, instruction cache, and lanes that take
different instructions still share this path).

Map: 0000-7FFF ROM (boot ROM over 0000-00FF until 0xFF50 is written), 8000-9FFF VRAM, A000-BFFF
cartridge RAM/RTC, C000-DFFF WRAM, E000-FDFF echo of C000-DDFF, FE00-FE9F OAM, FEA0-FEFF unusable
(stored, as in the reference), FF00-FF7F IO, FF80-FFFE HRAM, FFFF IE. Sound registers read 0 and ignore
writes: the APU is not emulated (the reference runs with sound emulation off).
"""

import warp as wp

from gbxcule.core.schema import BIG, SERIAL_CAPTURE
from gbxcule.kernels.mbc import cart_read, mbc_write, rom_fetch4, rom_read, rtc_advance
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
from gbxcule.kernels.state import Gb, Mem
from gbxcule.kernels.timer import (
    timer_advance,
    timer_read_tima,
    timer_schedule,
    timer_write_div,
    timer_write_tac,
    timer_write_tima,
    timer_write_tma,
)

INT_TIMER = wp.constant(4)
INT_SERIAL = wp.constant(8)
INT_JOYPAD = wp.constant(16)
SERIAL_RING = wp.constant(SERIAL_CAPTURE)


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
def dma_plain_read(g: wp.ref[Gb], m: Mem, addr: wp.int32) -> wp.int32:
    """A byte the OAM DMA copies from ROM (addr < 0x8000) or else WRAM and its echo (0xC000-0xFDFF)."""
    if addr < 0x8000:
        return rom_read(g, m, addr)
    return wp.int32(m.ram[g.env, m.wram + ((addr - 0xC000) & 0x1FFF)])


@wp.func
def dma_source_read(g: wp.ref[Gb], m: Mem, addr: wp.int32, now: wp.int32, mao: wp.int32) -> wp.int32:
    """A byte the OAM DMA copies. VRAM reads 0xFF when the PPU blocks it for a PPU-visible access (the
    caller has caught the PPU up to now + mao already)."""
    value = 0xFF
    if addr < 0x8000 or (addr >= 0xC000 and addr < 0xFE00):  # ROM, WRAM and its echo
        value = dma_plain_read(g, m, addr)
    elif addr < 0xA000:
        if mao == 0 or not vram_blocked_read(g):
            value = wp.int32(m.ram[g.env, m.vram + (addr - 0x8000)])
    elif addr < 0xC000:
        if m.has_rtc != 0 and g.ram_bank >= 0x08 and g.ram_bank <= 0x0C:
            rtc_advance(g, now)
        value = cart_read(g, m, addr)
    elif addr < 0xFEA0:  # (0xC000-0xFDFF went to the first branch)
        value = wp.int32(m.ram[g.env, m.oam + (addr - 0xFE00)])
    elif addr < 0xFF00:
        value = wp.int32(m.ram[g.env, m.unusable + (addr - 0xFEA0)])
    return value


@wp.func
def dma_sync(g: wp.ref[Gb], m: Mem, now: wp.int32, offset: wp.int32, mao: wp.int32):
    """Copy the OAM DMA bytes due by cycle now + offset (one byte per 4 cycles after dma_start). For a source in
    ROM or WRAM (`dma_plain_source`) the kernel calls `dma_copy_plain` instead wherever bytes may be owed to
    HRAM accesses, so none are owed here."""
    if g.dma_active == 0:
        return
    g.dma_index = wp.min(wp.max(g.dma_index, 0), 0xA0)  # (a wild state's index: OAM rows and loops stay bounded)
    elapsed = now + offset - g.dma_start
    if elapsed < 4:
        return
    target = wp.min(0xA0, elapsed / 4)
    src = g.dma_source
    if src >= 0xFE:
        src = src - 0x20
    while g.dma_index < target:
        value = dma_source_read(g, m, (src << 8) | g.dma_index, now, mao)
        m.ram[g.env, m.oam + g.dma_index] = wp.uint8(value)
        g.dma_index = g.dma_index + 1
    if g.dma_index == 0xA0:
        g.dma_active = 0


@wp.func
def dma_plain_source(g: wp.ref[Gb]) -> wp.bool:
    """The running OAM DMA copies from ROM or WRAM (and its echo; pages FE/FF read DE/DF), whose bytes only a
    write can change: such a copy may run late (`bus_access`, docs/timing.md)."""
    return g.dma_source < 0x80 or g.dma_source >= 0xC0


@wp.func
def dma_copy_plain(g: wp.ref[Gb], m: Mem, until: wp.int32):
    """`dma_sync` for a source in ROM or WRAM (`dma_plain_source`): copy the bytes due by cycle `until`, four
    at a time while four are due (one ROM word, or four WRAM loads issued together), then one at a time."""
    target = wp.min(0xA0, (until - g.dma_start) >> 2)
    g.dma_mark = -1
    g.dma_index = wp.min(wp.max(g.dma_index, 0), 0xA0)  # (as in dma_sync)
    src = wp.where(g.dma_source >= 0xFE, g.dma_source - 0x20, g.dma_source)
    wide = src >= 0xC0 or g.bootrom == 0 or src != 0  # (not the boot ROM's page)
    while wide and g.dma_index + 4 <= target:
        addr = (src << 8) | g.dma_index
        row = m.wram + ((addr - 0xC000) & 0x1FFF)
        word = wp.int32(0)
        if src < 0x80:
            word = rom_fetch4(g, m, addr)
        else:
            word = (wp.int32(m.ram[g.env, row]) | (wp.int32(m.ram[g.env, row + 1]) << 8)
                    | (wp.int32(m.ram[g.env, row + 2]) << 16) | (wp.int32(m.ram[g.env, row + 3]) << 24))
        for k in range(4):
            m.ram[g.env, m.oam + g.dma_index + k] = wp.uint8((word >> (8 * k)) & 0xFF)
        g.dma_index = g.dma_index + 4
    while g.dma_index < target:
        m.ram[g.env, m.oam + g.dma_index] = wp.uint8(dma_plain_read(g, m, (src << 8) | g.dma_index))
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
    g.spr_ok = 0  # OAM changes: the sprite bands are found again after the copy (ppu.sprite_bands_refresh)


# --- IO registers ---------------------------------------------------------------------------------

@wp.func
def ppu_reg_access(g: wp.ref[Gb], addr: wp.int32, value: wp.int32, write: wp.int32, now: wp.int32) -> wp.int32:
    """0xFF40-0xFF4B, after the PPU was caught up. Returns the value read, or IF bits raised by a write."""
    r = addr - 0xFF40
    out = 0
    if write == 0:
        if r == 0:
            out = g.lcdc
        elif r == 1:
            out = lcd_read_stat(g)
        elif r == 2:
            out = g.scy
        elif r == 3:
            out = g.scx
        elif r == 4:
            out = g.ly
        elif r == 5:
            out = g.lyc
        elif r == 6:
            out = g.dma_source
        elif r == 7:
            out = g.bgp
        elif r == 8:
            out = g.obp0
        elif r == 9:
            out = g.obp1
        elif r == 10:
            out = g.wy
        else:
            out = g.wx
    else:
        if r == 0:
            out = lcd_write_lcdc(g, value)
        elif r == 1:
            out = stat_write(g, value)
        elif r == 2:
            g.scy = value
        elif r == 3:
            g.scx = value
        elif r == 5:
            out = lcd_write_lyc(g, value)
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
        elif r == 11:
            g.wx = value
        # r == 4: LY is read-only
    return out


@wp.func
def io_access(g: wp.ref[Gb], m: Mem, addr: wp.int32, value: wp.int32, write: wp.int32, now: wp.int32) -> wp.int32:
    """0xFF00-0xFFFF except the PPU registers; the PPU and OAM DMA were caught up by the caller."""
    out = 0xFF
    if addr >= 0xFF80:
        if addr == 0xFFFF:
            if write != 0:
                g.ie = value
                g.bail = 1
            else:
                out = g.ie
        elif write != 0:
            m.ram[g.env, m.hram + (addr - 0xFF80)] = wp.uint8(value)
        else:
            out = wp.int32(m.ram[g.env, m.hram + (addr - 0xFF80)])
        return out
    if addr >= 0xFF4C:
        if write != 0 and addr == 0xFF50 and g.bootrom != 0 and (value == 0x01 or value == 0x11):
            g.bootrom = 0
            g.bail = 1
        return out
    if addr >= 0xFF10:
        if write != 0:
            g.bail = 1  # APU not emulated: writes are ignored (but end the batch, as any IO write)
        return 0
    if addr >= 0xFF04 and addr <= 0xFF07:
        if timer_advance(g, now) != 0:
            g.if_ = g.if_ | INT_TIMER
        if write == 0:
            if addr == 0xFF04:
                out = g.div_counter >> 8
            elif addr == 0xFF05:
                out = timer_read_tima(g)
            elif addr == 0xFF06:
                out = g.tma
            else:
                out = g.tac | 0xF8
        else:
            if addr == 0xFF04:
                timer_write_div(g)
            elif addr == 0xFF05:
                timer_write_tima(g, value)
            elif addr == 0xFF06:
                timer_write_tma(g, value)
            else:
                timer_write_tac(g, value)
            timer_schedule(g)  # (the next overflow as the reference predicts it at the batch end: frame.batch_boundary)
    elif addr == 0xFF01 or addr == 0xFF02:
        if serial_advance(g, now) != 0:
            g.if_ = g.if_ | INT_SERIAL
        if write == 0:
            out = wp.where(addr == 0xFF01, g.sb, g.sc)
        elif addr == 0xFF01:
            m.serial[(g.serial_count % SERIAL_RING) * g.n + g.env] = wp.uint8(value)
            g.serial_count = g.serial_count + 1
            g.sb = 0xFF  # no link partner: the reference shifts in 1s at once
        else:
            serial_write_sc(g, value)
    elif addr == 0xFF0F:
        if write != 0:
            g.if_ = value & 0x1F
        else:
            out = g.if_ | 0xE0
    elif addr == 0xFF00:
        if write != 0:
            g.joyp = joypad_value(g, value)
        else:
            out = g.joyp
    elif write != 0:
        m.ram[g.env, m.io + (addr - 0xFF00)] = wp.uint8(value)  # unused registers keep what was written
    if write != 0:
        g.bail = 1
    return out


# --- the bus --------------------------------------------------------------------------------------

@wp.func
def bus_access(g: wp.ref[Gb], m: Mem, addr: wp.int32, value: wp.int32, write: wp.int32, now: wp.int32,
               mao: wp.int32) -> wp.int32:
    """Read (write == 0) or write the byte at `addr` at cycle `now`; the PPU sees the access at now + mao.
    Returns the byte read (0 for writes)."""
    a = addr & 0xFFFF
    v = value & 0xFF
    out = 0
    # An OAM DMA from ROM or WRAM is not caught up at HRAM accesses (the wait loop every game runs from
    # HRAM during the copy): they only note their time in g.dma_mark (plain RAM below). The reference copies
    # at each of them, reading the source then; no HRAM access can change a ROM or WRAM byte, or look at
    # OAM, so the bytes owed are copied, with the same values, before the next access of any other kind, or
    # at the batch's end (run_frame). Sources in VRAM or cartridge RAM, which the PPU or the RTC can change,
    # are still caught up at every HRAM access.
    if g.dma_mark >= 0 and (a < 0xFF80 or a == 0xFFFF):
        dma_copy_plain(g, m, g.dma_mark)
    # Cartridge: ROM, bank registers, cartridge RAM and the RTC.
    if a < 0x8000 or (a >= 0xA000 and a < 0xC000):
        rtc_due = False
        if m.has_rtc != 0:
            if a < 0x8000:
                rtc_due = write != 0 and a >= 0x6000
            else:
                rtc_due = g.ram_bank >= 0x08 and g.ram_bank <= 0x0C
        if rtc_due:
            rtc_advance(g, now)
        if write != 0:
            mbc_write(g, m, a, v)
            if a < 0x8000:
                g.bail = 1
        elif a < 0x8000:
            out = rom_read(g, m, a)
        else:
            out = cart_read(g, m, a)
        return out
    # Plain RAM, whose accesses nothing else sees: WRAM and its echo, the unusable area, and HRAM unless an
    # OAM DMA from VRAM or cartridge RAM runs (caught up at HRAM accesses, below). One row by selects, one
    # load or store, so lanes touching different ones stay together.
    lazy_dma = g.dma_active == 0 or dma_plain_source(g)
    row = wp.where(a < 0xC000, -1, wp.where(a < 0xFE00, m.wram + ((a - 0xC000) & 0x1FFF), wp.where(
        a < 0xFEA0, -1, wp.where(a < 0xFF00, m.unusable + (a - 0xFEA0), wp.where(
            a < 0xFF80 or a == 0xFFFF or not lazy_dma, -1, m.hram + (a - 0xFF80))))))
    if row >= 0:
        g.dma_mark = wp.where(a >= 0xFF80 and g.dma_active != 0, now + mao, g.dma_mark)
        if write != 0:
            m.ram[g.env, row] = wp.uint8(v)
        else:
            out = wp.int32(m.ram[g.env, row])
        return out
    # VRAM, OAM and IO: catch the PPU up first when it can see this access.
    vram = a < 0xA000
    oam = a >= 0xFE00 and a < 0xFEA0
    ppu_reg = a >= 0xFF40 and a < 0xFF4C
    ppu_time = -1
    if (vram or oam) and mao != 0:
        ppu_time = now + mao
    elif ppu_reg:
        ppu_time = wp.where(write != 0, now, now + mao)
    elif a >= 0xFF00 and mao != 0 and g.dma_active != 0 and g.dma_source >= 0x80 and g.dma_source < 0xA0:
        ppu_time = now + mao  # the OAM DMA below reads VRAM as the PPU sees it at now + mao
    if ppu_time >= 0:
        lcd_advance(g, m, ppu_time, 0)  # (no band look-up: this copy sits in the instruction loop)
    blocked = False
    if mao != 0:
        if vram:
            if write != 0:
                blocked = (g.lcdc & 0x80) != 0 and g.stat_mode == 3
            else:
                blocked = vram_blocked_read(g)
        elif oam:
            blocked = wp.where(write != 0, oam_blocked_write(g), oam_blocked_read(g))
    if blocked:
        return wp.where(write != 0, 0, 0xFF)
    if vram:
        row = m.vram + (a - 0x8000)
        if write != 0:
            m.ram[g.env, row] = wp.uint8(v)
        else:
            out = wp.int32(m.ram[g.env, row])
        return out
    # OAM and IO: the OAM DMA first copies what is due (an OAM read at HL looks 4 cycles ahead).
    if g.dma_active != 0:
        offset = mao
        if oam and write == 0 and now + mao >= g.dma_start and ((g.h << 8) | g.l) == a:
            offset = wp.max(mao, 4)
        dma_sync(g, m, now, offset, mao)
    if oam:
        row = m.oam + (a - 0xFE00)
        if write != 0:
            if g.dma_active == 0:
                m.ram[g.env, row] = wp.uint8(v)
                g.spr_ok = 0  # (the sprite bands: ppu.sprite_bands_refresh)
        elif g.dma_active != 0 and now + mao >= g.dma_start:
            out = 0xFF
        else:
            out = wp.int32(m.ram[g.env, row])
        return out
    if ppu_reg:
        r = ppu_reg_access(g, a, v, write, now)
        if write != 0:
            g.if_ = g.if_ | r
            if a != 0xFF44:
                g.bail = 1  # (an LY write does not end the batch, as in the reference)
        else:
            out = r
        return out
    return io_access(g, m, a, v, write, now)
