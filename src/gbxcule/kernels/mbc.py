"""Cartridges: ROM banking, cartridge RAM and the MBC3 real-time clock, as Warp functions.

Kinds (`Mem.mbc`): 0 ROM only (+RAM), 1 MBC1, 2 MBC2, 3 MBC3, 30 MBC30 (MBC3 with 8 RAM / 256 ROM
banks), 5 MBC5. Register semantics follow the reference (PyBoy 2.8.1) so lockstep holds; where it
departs from hardware the difference is listed in docs/hardware.md. The RTC is driven by
emulated cycles only (4,194,304 per second), never by wall time, so runs are deterministic.

Every index into ROM or cartridge RAM is reduced into the array's range before use.
"""

import warp as wp

from gbxcule.core import schema
from gbxcule.kernels.state import Gb, Mem

RTC_CYCLES_PER_SECOND = wp.constant(schema.RTC_CYCLES_PER_SECOND)


@wp.func
def rom_fetch4(g: wp.ref[Gb], m: Mem, addr: wp.int32) -> wp.int32:
    """Bytes addr..addr+3 of the cartridge ROM as mapped now (boot ROM not mapped) in one word, the first in
    the low byte; only bytes in addr's 16 KiB window (bank 0 or the switchable bank) are the mapped ones.
    `m.rom` holds, for every byte, that byte and the three after it (`rom_words`) of the ROM mirrored up to
    a power of two (`rom_mirror`), so one load fetches a whole instruction and one mask keeps any bank
    number in range: the bank registers hold numbers below `rom_banks` (the MBC writes reduce them), and a
    wild one from a state reads a mirrored bank, never outside the array. (A modulo here was 6% of the
    kernel's code and a tenth of its executed instructions on busy games.) The bank is chosen by a select,
    so lanes fetching from bank 0 and from the switchable bank share one load."""
    bank = wp.where(addr < 0x4000, g.rom_bank_low, g.rom_bank)
    return wp.int32(m.rom[((bank << 14) | (addr & 0x3FFF)) & m.rom_mask])


@wp.func
def rom_read(g: wp.ref[Gb], m: Mem, addr: wp.int32) -> wp.int32:
    """0x0000-0x7FFF, with the boot ROM overlaid on 0x0000-0x00FF while it is mapped."""
    if g.bootrom != 0 and addr <= 0xFF:
        return wp.int32(m.boot[addr & (m.boot.shape[0] - 1)])
    return rom_fetch4(g, m, addr) & 0xFF


@wp.func
def cart_ram_row(m: Mem, bank: wp.int32, addr: wp.int32) -> wp.int32:
    idx = bank * 0x2000 + (addr & 0x1FFF)
    size = m.cart_ram_banks * 0x2000
    if idx >= size or idx < 0:
        idx = ((idx % size) + size) % size
    return m.cart + idx


# --- MBC3 real-time clock -------------------------------------------------------------------------

@wp.func
def rtc_advance_seconds(g: wp.ref[Gb], seconds: wp.int32):
    s = seconds
    while s > 0:
        old_s = g.rtc_s
        old_m = g.rtc_m
        old_h = g.rtc_h
        if g.rtc_s == 59 or g.rtc_s == 0x3F:
            g.rtc_s = 0
        else:
            g.rtc_s = g.rtc_s + 1
        if old_s == 59:
            if g.rtc_m == 59 or g.rtc_m == 0x3F:
                g.rtc_m = 0
            else:
                g.rtc_m = g.rtc_m + 1
            if old_m == 59:
                if g.rtc_h == 23 or g.rtc_h == 0x1F:
                    g.rtc_h = 0
                else:
                    g.rtc_h = g.rtc_h + 1
                if old_h == 23:
                    day = (((g.rtc_dh & 1) << 8) | g.rtc_dl) + 1
                    if day > 0x1FF:
                        day = 0
                        g.rtc_carry = 1
                    g.rtc_dl = day & 0xFF
                    g.rtc_dh = (day >> 8) & 1
        s = s - 1


@wp.func
def rtc_advance(g: wp.ref[Gb], now: wp.int32):
    if now < g.rtc_last:
        g.rtc_last = now
        return
    elapsed = now - g.rtc_last
    g.rtc_last = now
    if g.rtc_halt != 0:
        return
    g.rtc_cycles = g.rtc_cycles + elapsed
    seconds = g.rtc_cycles / RTC_CYCLES_PER_SECOND
    g.rtc_cycles = g.rtc_cycles - seconds * RTC_CYCLES_PER_SECOND
    rtc_advance_seconds(g, seconds)


@wp.func
def rtc_read(g: wp.ref[Gb], reg: wp.int32) -> wp.int32:
    value = 0
    if reg == 0x08:
        value = g.rtc_ls
    elif reg == 0x09:
        value = g.rtc_lm
    elif reg == 0x0A:
        value = g.rtc_lh
    elif reg == 0x0B:
        value = g.rtc_ldl
    else:
        value = (g.rtc_ldh & 1) + (g.rtc_halt << 6) + (g.rtc_carry << 7)
    return value


@wp.func
def rtc_write(g: wp.ref[Gb], reg: wp.int32, value: wp.int32):
    if reg == 0x08:
        g.rtc_s = value & 0x3F
        g.rtc_cycles = 0
    elif reg == 0x09:
        g.rtc_m = value & 0x3F
    elif reg == 0x0A:
        g.rtc_h = value & 0x1F
    elif reg == 0x0B:
        g.rtc_dl = value & 0xFF
    else:
        g.rtc_dh = value & 1
        g.rtc_halt = (value >> 6) & 1
        g.rtc_carry = (value >> 7) & 1


@wp.func
def rtc_command(g: wp.ref[Gb], value: wp.int32):
    if value == 0:
        g.rtc_latch_on = 0
    elif value == 1:
        if g.rtc_latch_on == 0:
            g.rtc_ls = g.rtc_s & 0x3F
            g.rtc_lm = g.rtc_m & 0x3F
            g.rtc_lh = g.rtc_h & 0x1F
            g.rtc_ldl = g.rtc_dl
            g.rtc_ldh = g.rtc_dh & 1
        g.rtc_latch_on = 1


# --- MBC registers and cartridge RAM --------------------------------------------------------------

@wp.func
def mbc1_update_banks(g: wp.ref[Gb], m: Mem):
    if g.mbc_mode == 1:
        shift = 5
        if m.mbc1_multicart != 0:
            shift = 4
        g.rom_bank_low = (g.mbc_reg2 << shift) % m.rom_banks
    else:
        g.rom_bank_low = 0
    if m.mbc1_multicart != 0:
        bank = (g.mbc_reg2 << 4) | (g.mbc_reg1 & 0x0F)
        if (g.mbc_reg1 & 0x0F) == 0 and (g.mbc_reg1 & 0x10) == 0:
            bank = bank | 1
        g.rom_bank = bank % m.rom_banks
    else:
        g.rom_bank = ((g.mbc_reg2 << 5) | g.mbc_reg1) % m.rom_banks


@wp.func
def mbc_write(g: wp.ref[Gb], m: Mem, addr: wp.int32, value: wp.int32):
    """A CPU write to 0x0000-0x7FFF (bank registers) or 0xA000-0xBFFF (cartridge RAM / RTC)."""
    kind = m.mbc
    cart = addr >= 0xA000
    if kind == 0:
        if cart:
            # ROM only / ROM+RAM: written whether or not RAM is enabled, as in the reference
            m.ram[g.env, cart_ram_row(m, g.ram_bank, addr)] = wp.uint8(value)
        elif addr >= 0x2000 and addr < 0x4000:
            v = value
            if v == 0:
                v = 1
            g.rom_bank = v & 1
    elif kind == 1:
        if cart:
            if g.ram_enabled != 0:
                g.ram_bank = 0
                if g.mbc_mode == 1:
                    g.ram_bank = g.mbc_reg2
                m.ram[g.env, cart_ram_row(m, g.ram_bank % m.cart_ram_banks, addr)] = wp.uint8(value)
        elif addr < 0x2000:
            g.ram_enabled = wp.where((value & 0x0F) == 0x0A, 1, 0)
        elif addr < 0x4000:
            v = value & 0x1F
            if v == 0:
                v = 1
            g.mbc_reg1 = v
        elif addr < 0x6000:
            g.mbc_reg2 = value & 3
        else:
            g.mbc_mode = value & 1
        mbc1_update_banks(g, m)
    elif kind == 2:
        if cart:
            if g.ram_enabled != 0:
                m.ram[g.env, cart_ram_row(m, 0, addr & 0x1FF)] = wp.uint8(value | 0xF0)
        elif addr < 0x4000:
            v = value & 0x0F
            if (addr & 0x100) == 0:
                g.ram_enabled = wp.where(v == 0x0A, 1, 0)
            else:
                if v == 0:
                    v = 1
                g.rom_bank = v % m.rom_banks
    elif kind == 3 or kind == 30:
        if cart:
            if g.ram_enabled != 0:
                top = 3
                if kind == 30:
                    top = 7
                if g.ram_bank <= top:
                    m.ram[g.env, cart_ram_row(m, g.ram_bank, addr)] = wp.uint8(value)
                elif m.has_rtc != 0 and g.ram_bank >= 0x08 and g.ram_bank <= 0x0C:
                    rtc_write(g, g.ram_bank, value)
        elif addr < 0x2000:
            g.ram_enabled = wp.where((value & 0x0F) == 0x0A, 1, 0)
        elif addr < 0x4000:
            v = value & 0x7F
            if kind == 30:
                v = value
            if v == 0:
                v = 1
            g.rom_bank = v % m.rom_banks
        elif addr < 0x6000:
            if value >= 0x08 and value <= 0x0C:
                g.ram_bank = value
            else:
                g.ram_bank = value % m.cart_ram_banks
        else:
            if m.has_rtc != 0:
                rtc_command(g, value)
    elif kind == 5:
        if cart:
            if g.ram_enabled != 0:
                m.ram[g.env, cart_ram_row(m, g.ram_bank, addr)] = wp.uint8(value)
        elif addr < 0x2000:
            g.ram_enabled = wp.where(value == 0x0A, 1, 0)
        elif addr < 0x3000:
            g.rom_bank = ((g.rom_bank & 0x100) | value) % m.rom_banks
        elif addr < 0x4000:
            g.rom_bank = (((value & 1) << 8) | (g.rom_bank & 0xFF)) % m.rom_banks
        elif addr < 0x6000:
            g.ram_bank = (value & 0x0F) % m.cart_ram_banks


@wp.func
def cart_read(g: wp.ref[Gb], m: Mem, addr: wp.int32) -> wp.int32:
    """A CPU read of 0xA000-0xBFFF."""
    if g.ram_enabled == 0:
        return 0xFF
    kind = m.mbc
    if kind == 2:
        return wp.int32(m.ram[g.env, cart_ram_row(m, 0, addr & 0x1FF)]) | 0xF0
    if kind == 1:
        g.ram_bank = 0
        if g.mbc_mode == 1:
            g.ram_bank = g.mbc_reg2 % m.cart_ram_banks
    if m.has_rtc != 0 and g.ram_bank >= 0x08 and g.ram_bank <= 0x0C:
        return rtc_read(g, g.ram_bank)
    if g.ram_bank >= m.cart_ram_banks:
        return 0  # banks the cartridge lacks read as the reference's zeroed spare banks
    return wp.int32(m.ram[g.env, cart_ram_row(m, g.ram_bank, addr)])
