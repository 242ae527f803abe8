"""The micro-ROM suite: small ROMs that each exercise one area of the DMG (docs/microroms.md)."""

from __future__ import annotations

from gbxcule.roms.micro import (
    alu_loop,
    cb_bits,
    control_flow,
    flags_daa,
    idle_loops,
    interrupts,
    joy_diverge,
    loads,
    mbc,
    mem_rwb,
    oam_dma,
    oam_dma_race,
    ops16_sp,
    ppu,
    serial,
    timer,
)
from gbxcule.roms.spec import RomSpec

MICRO_ROMS: tuple[RomSpec, ...] = (
    alu_loop.SPEC,
    mem_rwb.SPEC,
    joy_diverge.SPEC,
    flags_daa.SPEC,
    cb_bits.SPEC,
    ops16_sp.SPEC,
    loads.SPEC,
    control_flow.SPEC,
    timer.SPEC,
    interrupts.SPEC,
    serial.SPEC,
    oam_dma.SPEC,
    oam_dma_race.SPEC,
    idle_loops.SPEC,
    mbc.MBC1_SPEC,
    mbc.MBC3_SPEC,
    mbc.MBC5_SPEC,
    ppu.BG_STATIC,
    ppu.BG_SCROLL,
    ppu.WINDOW,
    ppu.SPRITES,
)
