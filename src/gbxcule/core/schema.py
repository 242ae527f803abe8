"""The per-env state schema: the one description of everything a Game Boy env holds (pure Python).

Two kinds of state:
- **Fields**: int32 scalars (CPU registers, IO registers, timer, PPU, serial, DMA, MBC and RTC state).
  In a kernel they live in the thread-local `Gb` struct (`kernels/state.py` builds it from `FIELDS`);
  between launches they live in one int32 device array `fields[env * NUM_FIELDS + f]` (env-major: an env's
  fields are consecutive words, so a thread loading its env's fields touches a few 32-byte sectors even when
  the backend's sort gives a warp scattered envs; field-major, such a warp touched a sector per field and lane,
  four times the time at 262,144 envs: docs/kernel_style.md rule 11).
- **RAM regions**: bytes of the address space that belong to an env (VRAM, WRAM, OAM, IO, HRAM,
  cartridge RAM), env-major in one [num_envs, bytes] array: byte `o` of env `e` is `ram[e, o]` (flat
  offset `e * bytes + o`, 64-bit in Warp's indexing, so the array may pass 2 GiB), where `o` is the
  region's base in `ram_layout()` plus the offset inside the region. Env-major for the reason the fields
  are: a sorted warp holds scattered envs, and a lane's nearby bytes (the stack, an OAM DMA, a tile row,
  the sprite table) then share sectors (+10% to +23% at 262,144 envs over `ram[o, e]`, which coalesced only
  for envs in order: docs/kernel_style.md rule 11). The ROM is not here:
  it is stored once and shared by all envs.

Kernel arguments, reset and state I/O (native snapshots, PyBoy states) are all derived from `FIELDS` and
`ram_layout()`; nothing else lists them. `power_on_fields` is the state a fresh env starts from.
docs/step_abi.md describes the layout for readers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gbxcule.core.cartridge import CartConfig

# (name, meaning). Order is the order in the fields array.
FIELDS: tuple[tuple[str, str], ...] = (
    # CPU
    ("a", "A"), ("f", "F (low nibble always 0)"), ("b", "B"), ("c", "C"), ("d", "D"), ("e", "E"),
    ("h", "H"), ("l", "L"), ("sp", "SP"), ("pc", "PC (stays on a HALT while halted)"),
    ("ime", "interrupt master enable"),
    ("ime_delay", "EI delay: 2 after EI, IME set when it counts down to 0"),
    ("halted", "CPU is halted"), ("halted_during_ei", "HALT executed in EI's shadow"),
    ("stopped", "STOP executed (kept for state I/O; DMG STOP runs on like PyBoy)"),
    ("intr_queued", "interrupt queued flag of the reference model (0 between batches)"),
    ("halt_bug", "the next opcode fetch does not advance PC (HALT with IME=0 and a pending interrupt)"),
    ("locked", "an illegal opcode locked the CPU; the rest of the machine runs on"),
    ("if_", "IF (0xFF0F), low 5 bits"), ("ie", "IE (0xFFFF)"),
    ("cycles", "T-cycles since the start of the current step"),
    ("bail", "end the current CPU batch after this instruction"),
    ("bootrom", "boot ROM mapped at 0x0000-0x00FF"),
    # timer
    ("div_counter", "16-bit internal divider; DIV is its high byte"), ("tima", "TIMA"), ("tma", "TMA"),
    ("tac", "TAC (3 bits)"), ("tima_reload", "TIMA overflow reload state: 0 none, 1 pending, 2 reloaded"),
    ("tima_counter", "cycles left in the current reload state"),
    ("timer_last", "cycle count the timer was last advanced to"), ("timer_cti", "cycles to timer event"),
    # PPU
    ("lcdc", "LCDC"), ("stat", "STAT value incl. mode and coincidence bits"), ("stat_mode", "PPU mode 0-3"),
    ("stat_irq_line", "STAT interrupt line (for STAT blocking)"), ("ly", "LY"), ("lyc", "LYC"),
    ("scy", "SCY"), ("scx", "SCX"), ("wy", "WY"), ("wx", "WX"), ("bgp", "BGP"), ("obp0", "OBP0"),
    ("obp1", "OBP1"), ("lcd_clock", "dots into the frame"), ("lcd_target", "dot of the next PPU transition"),
    ("lcd_last", "cycle count the PPU was last advanced to"), ("lcd_cti", "cycles to the next transition"),
    ("lcd_ctf", "cycles to the end of the frame"), ("next_mode", "mode the next transition enters"),
    ("stat_transition", "pending sub-step of a line change"), ("first_frame", "first frame after LCD on"),
    ("lcd_reset", "LCD was switched on: restart at the next advance"), ("frame_done", "a frame ended"),
    ("mode3_adj", "extra mode-3 dots of the current line"), ("stat_mode_override", "next STAT read shows mode 0"),
    ("lyc_changed_off", "LYC written while the LCD was off"), ("wy_latch", "window Y condition met this frame"),
    ("win_line", "window line counter, mod 256 (-1 after line 143 is drawn)"),
    ("screen_fill", "1 + the shade the whole screen was blanked to, until a line is drawn; else 0"),
    # serial
    ("sb", "SB"), ("sc", "SC"), ("serial_on", "transfer in progress"), ("serial_internal", "internal clock"),
    ("serial_left", "cycles until the transfer in progress completes"), ("serial_last", "cycle count last seen"),
    ("serial_cti", "cycles to serial event"), ("serial_count", "bytes written to SB so far"),
    # OAM DMA
    ("dma_active", "OAM DMA running"), ("dma_source", "source page"), ("dma_index", "bytes copied"),
    ("dma_start", "cycle count the first byte is due"),
    # joypad
    ("joy_dpad", "d-pad lines, 1 = released (bit0 right, 1 left, 2 up, 3 down)"),
    ("joy_buttons", "button lines, 1 = released (bit0 A, 1 B, 2 select, 3 start)"),
    ("joyp", "JOYP as last computed (on write, like the reference)"),
    # cartridge
    ("rom_bank", "ROM bank at 0x4000-0x7FFF"), ("rom_bank_low", "ROM bank at 0x0000-0x3FFF"),
    ("ram_bank", "RAM bank (or RTC register 8-12)"), ("ram_enabled", "cartridge RAM enabled"),
    ("mbc_mode", "MBC1 banking mode"), ("mbc_reg1", "MBC1 bank register 1"), ("mbc_reg2", "MBC1 register 2"),
    ("rtc_s", "RTC seconds"), ("rtc_m", "RTC minutes"), ("rtc_h", "RTC hours"), ("rtc_dl", "RTC day low"),
    ("rtc_dh", "RTC day high bit"), ("rtc_halt", "RTC halted"), ("rtc_carry", "RTC day carry"),
    ("rtc_cycles", "cycles into the current RTC second"), ("rtc_last", "cycle count the RTC was last advanced to"),
    ("rtc_latch_on", "latch command armed"), ("rtc_ls", "latched seconds"), ("rtc_lm", "latched minutes"),
    ("rtc_lh", "latched hours"), ("rtc_ldl", "latched day low"), ("rtc_ldh", "latched day high"),
    # bookkeeping
    ("frames", "frames completed since reset"),
    ("instructions", "instructions executed (wraps; skipped wait-loop rounds count their instructions)"),
)
FIELD_INDEX: dict[str, int] = {name: i for i, (name, _) in enumerate(FIELDS)}
NUM_FIELDS = len(FIELDS)

# Fields that hold absolute cycle counts; rebased to 0 with `cycles` at the start of every step.
CYCLE_FIELDS = ("cycles", "timer_last", "lcd_last", "serial_last", "dma_start", "rtc_last")

BIG = 0x3FFFFFFF  # "never" in cycle arithmetic

# Per-env RAM regions: (name, size). Cartridge RAM comes last; its size depends on the ROM.
FIXED_REGIONS: tuple[tuple[str, int], ...] = (
    ("vram", 0x2000), ("wram", 0x2000), ("oam", 0xA0), ("unusable", 0x60), ("io", 0x80), ("hram", 0x7F),
)
SERIAL_CAPTURE = 4096  # bytes of SB writes kept per env (a ring)


@dataclass(frozen=True)
class RamLayout:
    bases: dict[str, int]
    sizes: dict[str, int]
    total: int


def ram_layout(cart_ram_size: int) -> RamLayout:
    bases, sizes, off = {}, {}, 0
    for name, size in (*FIXED_REGIONS, ("cart", cart_ram_size)):
        bases[name], sizes[name] = off, size
        off += size
    return RamLayout(bases, sizes, off)


# Per-thread values that are not state (members of the kernels' `Gb` struct after the fields): which env
# this thread is, how many envs there are, whether the current frame is drawn into the frame buffer, and the
# cycle of the last HRAM access whose OAM DMA bytes are still owed (-1: none; kernels/bus.py `bus_access`;
# always -1 again when a frame's batch ends, so it never needs storing), and whether the last CPU batch found
# its wait loop polling WRAM or HRAM at a fixed point (kernels/idle.py; 0 at a launch's start: merely a
# missed chance to skip lines), and the instructions of wait-loop rounds this launch skipped (added to the
# backend's per-env `waited` counter at the launch's end, for the `path` sort key: not state), and the CPU
# batch under way: the cycle it ends at and whether it starts with an interrupt dispatch (kernels/frame.py
# `batch_start`; a batch never outlives a launch) and the cycle before which it may go on over the reference's
# batch ends (-1: never; `batch_boundary`), and which 8-line bands of the screen OAM's sprites cover, with
# the sprite height they were found for (kernels/ppu.py `sprite_bands_refresh`; 0 at a launch's start, and after
# any OAM write or OAM DMA: found again from OAM when next needed).
TRANSIENT = ("env", "n", "render", "dma_mark", "polling", "waited", "batch_end", "batch_cap", "dispatch", "spr_ok",
             "spr_bands")

FRAME_CYCLES = 70224  # T-cycles in a frame (154 lines of 456 dots)
RTC_CYCLES_PER_SECOND = 4194304  # T-cycles in an RTC second (the CPU clock)


def power_on_fields(cart: CartConfig, boot: bool) -> np.ndarray:
    """Field values at power-on (boot ROM mapped, PC=0), as the reference initialises them."""
    v = np.zeros(NUM_FIELDS, dtype=np.int32)
    values = dict(bootrom=1 if boot else 0, stat=0x80, bgp=0xFC, obp0=0xFF, obp1=0xFF, lcd_target=FRAME_CYCLES,
                  lcd_ctf=FRAME_CYCLES, next_mode=2, sb=0xFF, sc=0x7E, serial_left=BIG, joy_dpad=15,
                  joy_buttons=15, rom_bank=1, mbc_reg1=1, ram_enabled=1 if cart.sram else 0)
    for k, x in values.items():
        v[FIELD_INDEX[k]] = x
    return v


def apply_dmg_boot_values(fields: np.ndarray, rom: bytes) -> None:
    """Overwrite CPU and IO registers with a real DMG's values at the hand-over to 0x0100 (Pan Docs,
    "Power Up Sequence"). The PPU position and VRAM stay as PyBoy's boot ROM left them."""
    checksum_zero = rom[0x14D] == 0
    values = dict(a=0x01, f=0x80 if checksum_zero else 0xB0, b=0x00, c=0x13, d=0x00, e=0xD8, h=0x01, l=0x4D,
                  sp=0xFFFE, pc=0x0100, ime=0, ie=0x00, if_=0x01, div_counter=0xABCC, tima=0, tma=0, tac=0,
                  lcdc=0x91, scy=0, scx=0, lyc=0, bgp=0xFC, obp0=0xFF, obp1=0xFF, wy=0, wx=0, sb=0x00,
                  sc=0x7E, joyp=0xCF, dma_source=0xFF)
    for k, v in values.items():
        fields[FIELD_INDEX[k]] = v
