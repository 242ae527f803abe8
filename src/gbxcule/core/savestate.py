"""Save states of either format for one ROM: PyBoy `.state` files mapped onto gbxcule env states and back,
and the dispatch between them and native snapshots (`core/snapshot.py`). docs/state_format.md has the
field-by-field mapping.

PyBoy -> gbxcule (`env_from_pyboy`) loads what PyBoy 2.8.1's own `load_state` loads into a fresh PyBoy, and
derives the rest the way that loader does: PyBoy's absolute 64-bit cycle counters become cycles relative to
`cpu.cycles` (gbxcule's cycle fields count from the start of the current step); what the loader leaves at a
fresh instance's values stays at them (`halted_during_ei`, `stat_mode_override`,
`lyc_changed_while_disabled`, the MBC1 low ROM bank, the RTC latches, the window line counter); what it
recomputes is recomputed with the kernels' own functions, which the caller passes in as `derive` (the STAT
interrupt line; the mode-3 length in mode 3). This module is pure Python: it imports no Warp. PyBoy's RTC
restarts its cycle bookkeeping at 0, so its first RTC access after a load advances the clock by `cpu.cycles`
of emulated time: gbxcule applies that advance at load. PyBoy also adds the wall-clock time since the save
to a running RTC; gbxcule never does (runs stay deterministic).

gbxcule -> PyBoy (`env_to_pyboy`) fills a PyBoy state of the ROM taken at power-on (the blocks gbxcule does
not emulate: sound, SGB, the screen buffer) with the env's state, choosing the absolute cycle origin so
that PyBoy's RTC catch-up on load equals the advance gbxcule still owes.

A PyBoy state names no ROM. It is refused when its cartridge block does not fit the ROM's header (MBC kind,
RAM bank count, MBC registers) or its ROM bank is past the ROM's end; CGB states are refused.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gbxcule.core.cartridge import Rom, cart_config
from gbxcule.core.errors import GbxculeError
from gbxcule.core.pyboy_state import (
    PyBoyState,
    PyBoyStateError,
    parse_pyboy_state,
    write_pyboy_state,
)
from gbxcule.core.schema import (
    BIG,
    FIELD_INDEX,
    FRAME_CYCLES,
    NUM_FIELDS,
    RTC_CYCLES_PER_SECOND,
    SERIAL_CAPTURE,
    power_on_fields,
    ram_layout,
)
from gbxcule.core.snapshot import EnvState, decode_snapshot, is_snapshot

MAX_CYCLES = 1 << 31  # PyBoy's "never" for cycles-to-interrupt
RTC_PERIOD = 512 * 86400  # seconds after which the RTC's time of day and day counter repeat
MIN_RTC_VERSION = 21  # older PyBoy states derive the RTC from the wall clock
_U64 = (1 << 64) - 1


def read_state_source(source: bytes | str | Path) -> bytes:
    """The bytes of a state given as bytes or as a file path."""
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source)
    p = Path(source)
    try:
        return p.read_bytes()
    except OSError as exc:
        raise GbxculeError(f"cannot read state file {p}: {exc.strerror or exc}") from None


# What PyBoy's loader recomputes instead of loading, as `derive(regs, oam, rtc, seconds)`: the STAT line and
# the mode-3 length from `regs` (stat, lcdc, scx, ly, first_frame) and OAM, and the RTC registers `rtc`
# advanced by `seconds`; returns {"stat_irq_line", "mode3_adj", rtc names: values}. It must be computed
# with the kernels' own functions, so the caller passes it: `gbxcule.kernels.pyboy_loader.pyboy_loader_values`.
Derive = Callable[[dict[str, int], np.ndarray, dict[str, int], int], dict[str, int]]


def ram_bytes(rom: Rom) -> int:
    return ram_layout(cart_config(rom).ram_banks * 0x2000).total


def decode_states(data: bytes, rom: Rom, derive: Derive) -> list[EnvState]:
    """The env states in a native snapshot (one or more) or a PyBoy state (one, see `env_from_pyboy`) for
    `rom`."""
    if is_snapshot(data):
        return decode_snapshot(data, rom.info.sha1, ram_bytes(rom)).envs
    return [env_from_pyboy(parse_for_rom(data, rom), rom, derive)]


def parse_for_rom(data: bytes, rom: Rom) -> PyBoyState:
    """Parse a PyBoy state and check it can belong to `rom` (see the module docstring)."""
    ctype, ram_code = rom.data[0x147], rom.data[0x149]
    try:
        state = parse_pyboy_state(data, cartridge_type=ctype, ram_size_code=ram_code)
    except PyBoyStateError as exc:
        try:
            other = parse_pyboy_state(data)
        except PyBoyStateError:
            raise exc from None
        kinds = {"mbc3_rtc": "MBC3 RTC registers", "mbc1": "MBC1 registers", "mbc5": "MBC5 registers",
                 "plain": "no MBC registers"}
        raise PyBoyStateError(
            f"PyBoy state is for another cartridge: it holds {kinds[other.cartridge.kind]} and "
            f"{np.shape(other.cartridge.ram)[0]} RAM bank(s); {rom.info.title!r} is "
            f"{rom.info.cartridge_name} with {cart_config(rom).ram_banks} RAM bank(s)") from None
    banks = len(rom.data) // 0x4000
    if state.cartridge.rom_bank >= banks:
        raise PyBoyStateError(f"PyBoy state is for another ROM: it selects ROM bank {state.cartridge.rom_bank}, "
                              f"{rom.info.title!r} has {banks} banks")
    if cart_config(rom).has_rtc and state.version < MIN_RTC_VERSION:
        raise PyBoyStateError(f"PyBoy state version {state.version} keeps the RTC as wall-clock time; "
                              f"RTC cartridges need version {MIN_RTC_VERSION} or later")
    return state


def _relative(value: int, origin: int) -> int:
    """An absolute PyBoy cycle count relative to `origin`, kept within int32 range (stale counters)."""
    return int(max(-BIG, min(BIG, value - origin)))


def _cti(value: int) -> int:
    """PyBoy's cycles-to-interrupt (u64, two's complement when negative) as a gbxcule field."""
    v = value - (1 << 64) if value >= 1 << 63 else value
    return int(min(v, BIG))


def live_cycle_fields(get) -> list[str]:
    """The cycle fields whose value matters (`get(name)` reads a field): the timer's and PPU's catch-up
    times always, the serial port's during a transfer, the OAM DMA start while it runs."""
    return ["timer_last", "lcd_last"] + ["serial_last"] * bool(get("serial_on")) + ["dma_start"] * bool(
        get("dma_active"))


def env_from_pyboy(s: PyBoyState, rom: Rom, derive: Derive) -> EnvState:
    """The gbxcule env state a fresh PyBoy has after `load_state` of `s` (see the module docstring);
    `derive` computes what the loader recomputes (see `Derive`)."""
    cart = cart_config(rom)
    layout = ram_layout(cart.ram_banks * 0x2000)
    fields = power_on_fields(cart, boot=True)  # what a fresh PyBoy holds where the state says nothing
    c, lcd, t, k = s.cpu, s.lcd, s.timer, s.cartridge
    now = c.cycles
    v = dict(a=c.a, f=c.f, b=c.b, c=c.c, d=c.d, e=c.e, h=c.h, l=c.l, sp=c.sp, pc=c.pc, ime=c.ime,
             ime_delay=c.ime_delay, halted=c.halted, stopped=c.stopped, intr_queued=c.interrupt_queued,
             if_=c.interrupt_flag, ie=c.interrupt_enable, bootrom=s.bootrom_enabled,
             lcdc=lcd.lcdc, stat=lcd.stat, stat_mode=lcd.stat & 3, ly=lcd.ly, lyc=lcd.lyc, scy=lcd.scy,
             scx=lcd.scx, wy=lcd.wy, wx=lcd.wx, bgp=lcd.bgp, obp0=lcd.obp0, obp1=lcd.obp1, lcd_clock=lcd.clock,
             lcd_target=lcd.clock_target, lcd_last=_relative(lcd.last_cycles, now),
             lcd_cti=lcd.clock_target - lcd.clock, lcd_ctf=FRAME_CYCLES - lcd.clock, next_mode=lcd.next_stat_mode,
             stat_transition=lcd.stat_transition, first_frame=lcd.first_frame, lcd_reset=lcd.reset,
             frame_done=lcd.frame_done, wy_latch=s.renderer.wy_activated_frame,
             joyp=int(s.ram.io_ports[0]), rom_bank=k.rom_bank, rom_bank_low=0, ram_bank=k.ram_bank,
             ram_enabled=k.ram_enabled, mbc_mode=k.memory_model)
    if t is not None:
        v |= dict(div_counter=t.div_counter, tima=t.tima, tma=t.tma, tac=t.tac, tima_reload=t.tima_reload_state,
                  tima_counter=t.tima_counter, timer_last=_relative(t.last_cycles, now),
                  timer_cti=_cti(t.cycles_to_interrupt))
    if s.oam_dma is not None:
        d = s.oam_dma
        v |= dict(dma_active=d.active, dma_source=d.source, dma_index=d.index,
                  dma_start=_relative(d.start_cycle, now))
    if s.serial is not None:
        sr = s.serial
        on = 1 if sr.transfer_enabled else 0
        v |= dict(sb=sr.sb, sc=sr.sc, serial_on=on, serial_internal=1 if sr.internal_clock else 0,
                  serial_left=sr.clock_target - sr.clock if on else BIG,
                  serial_last=_relative(sr.last_cycles, now), serial_cti=_cti(sr.cycles_to_interrupt))
    if s.interaction is not None:
        v |= dict(joy_dpad=s.interaction.directional & 15, joy_buttons=s.interaction.standard & 15)
    if k.mbc1 is not None:
        v |= dict(mbc_reg1=k.mbc1.bank_select1, mbc_reg2=k.mbc1.bank_select2)
    for name, value in v.items():
        fields[FIELD_INDEX[name]] = int(value)
    # Cycle fields that do not matter are set to now; `lag` is how far the oldest live one trails now
    # (states saved inside a CPU batch, e.g. from a PyBoy hook, have peripherals not yet caught up).
    live = live_cycle_fields(lambda name: fields[FIELD_INDEX[name]])
    for name in ("serial_last", "dma_start"):
        if name not in live:
            fields[FIELD_INDEX[name]] = 0
    lag = min([0] + [int(fields[FIELD_INDEX[name]]) for name in live])
    rtc, seconds, derived = {"rtc_s": 0, "rtc_m": 0, "rtc_h": 0, "rtc_dl": 0, "rtc_dh": 0, "rtc_carry": 0}, 0, {}
    if k.rtc is not None:
        r = k.rtc
        halt, cycles = r.halt & 1, r.rtc_cycles % RTC_CYCLES_PER_SECOND
        rtc = {"rtc_s": r.seconds & 0x3F, "rtc_m": r.minutes & 0x3F, "rtc_h": r.hours & 0x1F,
               "rtc_dl": r.day_low, "rtc_dh": r.day_high & 1, "rtc_carry": r.day_carry & 1}
        if not halt:  # PyBoy's first RTC tick after the load counts every cycle since 0: all but `lag` now
            seconds, cycles = divmod(cycles + now + lag, RTC_CYCLES_PER_SECOND)
            if seconds > RTC_PERIOD:  # a whole period wraps the day counter (carry) and comes back
                seconds = RTC_PERIOD + seconds % RTC_PERIOD
        derived = dict(rtc_halt=halt, rtc_cycles=cycles, rtc_last=lag)
    regs = {"stat": lcd.stat, "lcdc": lcd.lcdc, "scx": lcd.scx, "ly": lcd.ly, "first_frame": lcd.first_frame}
    derived |= derive(regs, lcd.oam, rtc, seconds)
    for name, value in derived.items():
        fields[FIELD_INDEX[name]] = int(value)
    b = layout.bases
    ram = np.zeros(layout.total, dtype=np.uint8)
    io = np.zeros(layout.sizes["io"], dtype=np.uint8)
    io[1:0x4C] = s.ram.io_ports[1:0x4C]  # FF00 (JOYP) is a field; owned registers stay 0 in both
    for region, data in (("vram", lcd.vram), ("wram", s.ram.wram[:0x2000]), ("oam", lcd.oam),
                         ("unusable", s.ram.unusable_fea0), ("io", io), ("hram", s.ram.hram),
                         ("cart", np.asarray(k.ram).reshape(-1)[:layout.sizes["cart"]])):
        ram[b[region]:b[region] + layout.sizes[region]] = data
    return EnvState(fields, ram, np.zeros(SERIAL_CAPTURE, dtype=np.uint8))


def env_to_pyboy(env: EnvState, rom: Rom, template: PyBoyState, wall_time: float | None = None) -> PyBoyState:
    """A PyBoy state of `env`, built on `template` (a PyBoy state of `rom` at power-on). `wall_time` is
    the time.time() the RTC is saved at (PyBoy adds the wall-clock time since then when it loads)."""
    cart = cart_config(rom)
    layout = ram_layout(cart.ram_banks * 0x2000)
    if np.shape(env.fields) != (NUM_FIELDS,) or np.shape(env.ram) != (layout.total,):
        raise GbxculeError(f"env state has shapes {np.shape(env.fields)}/{np.shape(env.ram)}, "
                           f"this ROM needs ({NUM_FIELDS},)/({layout.total},)")
    f = {name: int(env.fields[i]) for name, i in FIELD_INDEX.items()}
    s = copy.deepcopy(template)
    # Absolute cycle origin: the oldest live catch-up time, or the RTC's last catch-up (PyBoy's loader
    # resets the RTC's to 0) when that is older; cycle fields that do not matter are written as now.
    rel = {name: f[name] - f["cycles"] for name in live_cycle_fields(f.get)}
    rtc_rel = f["rtc_last"] - f["cycles"] if cart.has_rtc else 0
    origin = min(0, rtc_rel, *rel.values())
    now = -origin

    def ab(name: str) -> int:
        return now + rel.get(name, 0)

    def cti(value: int) -> int:
        return MAX_CYCLES if value >= BIG else value & _U64

    region = {r: env.ram[layout.bases[r]:layout.bases[r] + layout.sizes[r]] for r in layout.bases}
    s.bootrom_enabled = f["bootrom"]
    c = s.cpu
    for name in ("a", "f", "b", "c", "d", "e", "sp", "pc", "ime", "ime_delay", "halted", "stopped"):
        setattr(c, name, f[name])
    c.hl, c.interrupt_enable, c.interrupt_queued = (f["h"] << 8) | f["l"], f["ie"], f["intr_queued"]
    c.interrupt_flag, c.cycles = f["if_"], now
    d = s.oam_dma
    d.active, d.reading, d.source, d.index, d.start_cycle = (f["dma_active"], 0, f["dma_source"],
                                                             f["dma_index"], ab("dma_start"))
    lcd = s.lcd
    lcd.vram, lcd.oam = region["vram"].copy(), region["oam"].copy()
    for name in ("lcdc", "stat", "ly", "lyc", "scy", "scx", "wy", "wx", "bgp", "obp0", "obp1", "first_frame",
                 "frame_done"):
        setattr(lcd, name, f[name])
    lcd.reset, lcd.last_cycles, lcd.clock, lcd.clock_target = f["lcd_reset"], ab("lcd_last"), f["lcd_clock"], \
        f["lcd_target"]
    lcd.next_stat_mode, lcd.stat_transition = f["next_mode"], f["stat_transition"]
    s.sound.last_cycles = now
    s.renderer.wy_activated_frame = f["wy_latch"]
    s.ram.wram, s.ram.unusable_fea0, s.ram.hram = (region["wram"].copy(), region["unusable"].copy(),
                                                   region["hram"].copy())
    io = region["io"][:0x4C].copy()
    io[0] = f["joyp"]
    s.ram.io_ports = io
    t = s.timer
    t.div, t.tima, t.div_counter, t.tima_counter = f["div_counter"] >> 8, f["tima"], f["div_counter"], \
        f["tima_counter"]
    t.tma, t.tac, t.tima_reload_state = f["tma"], f["tac"], f["tima_reload"]
    t.last_cycles, t.cycles_to_interrupt = ab("timer_last"), cti(f["timer_cti"])
    k = s.cartridge
    k.rom_bank, k.ram_bank, k.ram_enabled, k.memory_model = f["rom_bank"] & 0xFF, f["ram_bank"], \
        f["ram_enabled"], f["mbc_mode"]
    k.ram = region["cart"].reshape(cart.ram_banks, 0x2000).copy()
    if k.mbc1 is not None:
        k.mbc1.bank_select1, k.mbc1.bank_select2 = f["mbc_reg1"], f["mbc_reg2"]
    if k.rtc is not None:
        r = k.rtc
        r.seconds, r.minutes, r.hours, r.day_low, r.day_high = f["rtc_s"], f["rtc_m"], f["rtc_h"], f["rtc_dl"], \
            f["rtc_dh"]
        r.halt = r.legacy_halt = f["rtc_halt"]
        r.day_carry = r.legacy_day_carry = f["rtc_carry"]
        # PyBoy's catch-up on load runs from the origin; the RTC caught up at rtc_rel already.
        r.rtc_cycles = f["rtc_cycles"] if r.halt else max(0, f["rtc_cycles"] - (rtc_rel - origin))
        wall = time.time() if wall_time is None else wall_time
        elapsed = (r.seconds + r.minutes * 60 + r.hours * 3600 + ((r.day_high << 8) | r.day_low) * 86400
                   + r.rtc_cycles / RTC_CYCLES_PER_SECOND)
        r.timezero, r.saved_time = wall - elapsed, wall
    s.interaction.directional, s.interaction.standard = f["joy_dpad"], f["joy_buttons"]
    sr = s.serial
    sr.sb, sr.sc, sr.transfer_enabled, sr.internal_clock = f["sb"], f["sc"], 0x80 if f["serial_on"] else 0, \
        f["serial_internal"]
    sr.last_cycles = sr.clock = ab("serial_last")
    sr.clock_target = sr.clock + f["serial_left"] if f["serial_on"] else MAX_CYCLES
    sr.cycles_to_interrupt = cti(f["serial_cti"])
    return s


def pyboy_bytes(data: bytes, rom: Rom, template: PyBoyState, env: int = 0) -> bytes:
    """A PyBoy state for `rom` from state bytes of either format: a PyBoy state as it is (checked), env
    `env` (modulo their number) of a native snapshot converted."""
    if is_snapshot(data):
        envs = decode_snapshot(data, rom.info.sha1, ram_bytes(rom)).envs
        return write_pyboy_state(env_to_pyboy(envs[env % len(envs)], rom, template))
    parse_for_rom(data, rom)
    return data
