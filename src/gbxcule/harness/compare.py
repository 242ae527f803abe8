"""Canonical views of one env's state, for lockstep comparison between the reference and a DUT.

Both sides are reduced to the same flat dict: scalar registers and timing state by gbxcule's field names,
plus memory regions as bytes. The reference view comes from a parsed PyBoy state, the DUT view from a
Warp backend snapshot. Cycle counters are compared as the cycles elapsed in the step, since the two sides
count from different origins.
"""

from __future__ import annotations

import numpy as np

from gbxcule.core.pyboy_state import PyBoyState

# Scalars every view has; grouped for the report.
SCALARS = {
    "cpu": ("a", "f", "b", "c", "d", "e", "h", "l", "sp", "pc", "ime", "ime_delay", "halted", "ie", "if_",
            "bootrom"),
    "timer": ("div_counter", "tima", "tma", "tac", "tima_reload"),
    "ppu": ("lcdc", "stat", "ly", "lyc", "scy", "scx", "wy", "wx", "bgp", "obp0", "obp1", "lcd_clock",
            "lcd_target", "next_mode", "stat_transition", "first_frame"),
    "dma": ("dma_active", "dma_source", "dma_index"),
    "cart": ("rom_bank", "ram_bank", "ram_enabled", "mbc_mode"),
    "io": ("joyp", "joy_dpad", "joy_buttons", "sb", "sc"),
}
REGIONS = ("wram", "hram", "oam", "vram", "cart", "unusable")
DEFAULT_REGIONS = ("wram", "hram", "oam", "vram", "cart")


def reference_view(s: PyBoyState, ram_banks: int) -> dict:
    c, lcd, t, cart = s.cpu, s.lcd, s.timer, s.cartridge
    v = {
        "a": c.a, "f": c.f, "b": c.b, "c": c.c, "d": c.d, "e": c.e, "h": c.h, "l": c.l, "sp": c.sp, "pc": c.pc,
        "ime": c.ime, "ime_delay": c.ime_delay, "halted": c.halted, "ie": c.interrupt_enable,
        "if_": c.interrupt_flag, "bootrom": s.bootrom_enabled,
        "div_counter": t.div_counter, "tima": t.tima, "tma": t.tma, "tac": t.tac,
        "tima_reload": t.tima_reload_state,
        "lcdc": lcd.lcdc, "stat": lcd.stat, "ly": lcd.ly, "lyc": lcd.lyc, "scy": lcd.scy, "scx": lcd.scx,
        "wy": lcd.wy, "wx": lcd.wx, "bgp": lcd.bgp, "obp0": lcd.obp0, "obp1": lcd.obp1,
        "lcd_clock": lcd.clock, "lcd_target": lcd.clock_target, "next_mode": lcd.next_stat_mode,
        "stat_transition": lcd.stat_transition, "first_frame": lcd.first_frame,
        "dma_active": s.oam_dma.active, "dma_source": s.oam_dma.source, "dma_index": s.oam_dma.index,
        "rom_bank": cart.rom_bank, "ram_bank": cart.ram_bank, "ram_enabled": cart.ram_enabled,
        "mbc_mode": cart.memory_model,
        "joyp": int(s.ram.io_ports[0]), "joy_dpad": s.interaction.directional,
        "joy_buttons": s.interaction.standard, "sb": s.serial.sb, "sc": s.serial.sc,
        "cycles": c.cycles,
    }
    v = {k: int(x) for k, x in v.items()}
    v["wram"] = bytes(np.asarray(s.ram.wram, dtype=np.uint8)[:0x2000])
    v["hram"] = bytes(np.asarray(s.ram.hram, dtype=np.uint8))
    v["unusable"] = bytes(np.asarray(s.ram.unusable_fea0, dtype=np.uint8))
    v["oam"] = bytes(np.asarray(lcd.oam, dtype=np.uint8))
    v["vram"] = bytes(np.asarray(lcd.vram, dtype=np.uint8))
    v["cart"] = bytes(np.asarray(cart.ram, dtype=np.uint8).reshape(-1)[:ram_banks * 0x2000])
    return v


def dut_view(fields: dict[str, int], regions: dict[str, np.ndarray]) -> dict:
    v = {k: int(fields[k]) for group in SCALARS.values() for k in group}
    v["cycles"] = int(fields["cycles"])
    for r in REGIONS:
        v[r] = bytes(np.asarray(regions[r], dtype=np.uint8))
    return v


def diff(ref: dict, dut: dict, regions: tuple[str, ...] = DEFAULT_REGIONS) -> list[str]:
    """Readable differences, scalars first, then the first differing bytes of each region."""
    out = []
    for group, keys in SCALARS.items():
        for k in keys:
            if ref[k] != dut[k]:
                out.append(f"{group}.{k}: ref={ref[k]:#x} dut={dut[k]:#x}")
    for r in regions:
        a, b = np.frombuffer(ref[r], np.uint8), np.frombuffer(dut[r], np.uint8)
        if a.shape != b.shape:
            out.append(f"{r}: sizes differ (ref {a.size}, dut {b.size})")
            continue
        idx = np.flatnonzero(a != b)
        if idx.size:
            shown = ", ".join(f"+{i:#06x}: ref={a[i]:02x} dut={b[i]:02x}" for i in idx[:6])
            out.append(f"{r}: {idx.size} bytes differ ({shown}{' ...' if idx.size > 6 else ''})")
    return out
