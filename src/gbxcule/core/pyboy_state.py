"""Exact codec for PyBoy 2.8.1 save states (``PyBoy.save_state``) of DMG games.

PyBoy's compiled build hides its internals; its save state is the one complete window into them. This
module parses such a state into a tree of dataclasses (`PyBoyState`) and writes it back byte for byte
(`write_pyboy_state(parse_pyboy_state(b)) == b`). PyBoy 2.8.1 writes ``STATE_VERSION`` 29; the older
versions 2..28 are read and written the way PyBoy 2.8.1's own loader reads them. CGB states are refused.

Encoding: PyBoy writes every value through ``IntIOWrapper``: ``u8`` is one byte, ``u16``/``u64`` are
little-endian, ``f64``/``f32`` are native (little-endian) IEEE floats. Booleans are ``u8`` (usually 0/1).

Layout of a version-29 DMG state (``S`` = size of the sound block, ``n`` = cartridge RAM banks):

=============  =====================  ================================  =====================================
block          offset                 size                              contents
=============  =====================  ================================  =====================================
header         0                      6                                 version, bootrom_enabled, key0 (v16+),
                                                                        key1 (v8+), double_speed (v8+),
                                                                        cgb flag (v8+, must be 0)
cpu            6                      27                                A F B C D E, HL SP PC (u16), IME,
                                                                        IME delay (v19+), halted, stopped,
                                                                        IE (v5+), interrupt_queued and IF
                                                                        (v8+), cycles (u64, v12+)
oam_dma        33                     12 (v19+)                         active, reading, source, index,
                                                                        start_cycle (u64)
lcd            45                     9116                              VRAM 8192, OAM 160, LCDC BGP OBP0
                                                                        OBP1, STAT LY LYC (v5+), SCY SCX WY
                                                                        WX, object priority (v16+), 144x5
                                                                        scanline parameters (v11+), then
                                                                        (v8+) cgb flag (must be 0),
                                                                        downgraded (v17+), speed_shift,
                                                                        frame_done first_frame reset (v13+),
                                                                        last_cycles (u64, v12+), clock and
                                                                        clock_target (u64), next_stat_mode,
                                                                        stat_transition
sound          9161                   S = 422 + 2*(spf+1) (v13+)        self-delimiting: 3 header words, the
                                                                        audio buffer of ``2*(spf+1)`` bytes
                                                                        where spf = samples per frame (804
                                                                        at 48 kHz, S = 2032), APU timing,
                                                                        then sweep 105, tone 60, wave 74,
                                                                        noise 90 bytes of channel state
renderer       9161+S                 115201                            144x160 pixels of (u32 colour, u8
                                                                        attributes), wy_activated_frame (v18+)
ram            124362+S               8491                              WRAM 8192, FEA0-FEFF 96, IO
                                                                        FF00-FF4B 76, HRAM FF80-FFFE 127
wram_select    132853+S               1 (v16+; v<=15: 52)               v<=15: FF4C-FF7F image instead
timer          132854+S               25 (v5+)                          DIV TIMA, DIV counter and TIMA
                                                                        counter (u16), TMA TAC, reload state
                                                                        (v20+), last_cycles (v12+),
                                                                        cycles_to_interrupt (v13+)
cartridge      132879+S               4 + 8192*n + ext                  ROM bank, RAM bank, RAM enable, mode,
                                                                        n RAM banks, then ext: MBC3 RTC 33,
                                                                        MBC1 2, MBC5 1 (2 with rumble), else 0
interaction    after cartridge        2 (v7+)                           directional and button nibbles
serial         +2                     36 (v15+)                         SB SC transfer_enabled internal_clock,
                                                                        4 x u64 clocks
sgb            +38                    10379 (v23+)                      7 flags, joypad data 4, border tiles
                                                                        8192, map 2048, palettes 128
=============  =====================  ================================  =====================================

A version-29 DMG state is thus ``143300 + S + 8192*n + ext`` bytes long (153524 at 48 kHz with one RAM
bank). Versions before 29 omit the fields marked with a later version; a few blocks change shape (see the
field specs below).

The state does not say how many RAM banks the cartridge has (PyBoy takes ``n`` from the ROM header:
codes 0-2 give 1 bank, 3 gives 4, 4 gives 16, 5 gives 8) nor which MBC it is. Pass the header bytes
0x147/0x149 (``cartridge_type``/``ram_size_code``) for an exact parse; without them the cartridge block
is delimited from the fixed-size blocks after it (choosing, among the layouts that fit, one whose values
PyBoy could have written), and a 2-byte extension is read as MBC1 (an MBC5 rumble cartridge writes the
same two bytes).

PyBoy does not save some internal state at all (CPU ``halted_during_ei``, LCD ``stat_mode_override``,
MBC1 ``rombank_selected_low``, the RTC latch registers); the RTC fields ``timezero``/``saved_time`` are
wall-clock times, and loading a state whose RTC is not halted advances the RTC by the wall-clock time
since it was saved.
"""

from __future__ import annotations

import io
import math
import struct
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from gbxcule.core.errors import GbxculeError

STATE_VERSION = 29
"""The state version PyBoy 2.8.1 writes (``pyboy.utils.STATE_VERSION``)."""
MIN_STATE_VERSION = 2
"""Oldest version with a version byte; PyBoy 2.8.1 reads 0-1 by guessing, this codec refuses them."""

RAM_BANK_SIZE = 0x2000
PYBOY_RAM_BANKS: dict[int, int] = {0x00: 1, 0x01: 1, 0x02: 1, 0x03: 4, 0x04: 16, 0x05: 8}
"""Header RAM size code (0x149) -> RAM banks PyBoy allocates and saves (at least one, always)."""
MBC1_TYPES = frozenset({0x01, 0x02, 0x03})
MBC3_RTC_TYPES = frozenset({0x0F, 0x10})
MBC5_TYPES = frozenset({0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E})
MBC5_RUMBLE_TYPES = frozenset({0x1C, 0x1D, 0x1E})
PYBOY_CARTRIDGE_TYPES = frozenset({0x00, 0x05, 0x06, 0x08, 0x09, 0x11, 0x12, 0x13}).union(
    MBC1_TYPES, MBC3_RTC_TYPES, MBC5_TYPES
)
"""Cartridge types (0x147) PyBoy 2.8.1 runs."""

_ROWS, _COLS = 144, 160


class PyBoyStateError(GbxculeError):
    """A PyBoy save state that is truncated, malformed, of an unsupported version, or CGB."""


# --------------------------------------------------------------------------------------------------
# Field specs: (name, format, shape, first version, last version). A format is a struct code, "array"
# for a uint8 array of the given shape, or "cgb" for a CGB flag that must be 0 and is not kept.


@dataclass(frozen=True)
class _Field:
    name: str
    fmt: str
    shape: tuple[int, ...] = ()
    since: int = MIN_STATE_VERSION
    until: int = STATE_VERSION

    def present(self, version: int) -> bool:
        return self.since <= version <= self.until


def _u8(name: str, since: int = MIN_STATE_VERSION) -> _Field:
    return _Field(name, "B", (), since)


def _u16(name: str, since: int = MIN_STATE_VERSION) -> _Field:
    return _Field(name, "<H", (), since)


def _u64(name: str, since: int = MIN_STATE_VERSION, until: int = STATE_VERSION) -> _Field:
    return _Field(name, "<Q", (), since, until)


def _f64(name: str, since: int = MIN_STATE_VERSION) -> _Field:
    return _Field(name, "<d", (), since)


def _arr(name: str, *shape: int, since: int = MIN_STATE_VERSION) -> _Field:
    return _Field(name, "array", shape, since)


_CGB_FLAG = "cgb"
_STRUCTS = {code: struct.Struct(code) for code in ("B", "<H", "<Q", "<d", "<f")}


def _spec_size(spec: tuple[_Field, ...], version: int) -> int:
    return sum(
        math.prod(f.shape) if f.fmt == "array" else 1 if f.fmt == _CGB_FLAG else _STRUCTS[f.fmt].size
        for f in spec
        if f.present(version)
    )


class _Reader:
    """Cursor over the state bytes; every shortfall becomes a `PyBoyStateError` naming the block."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.starts: list[tuple[str, int]] = []

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, block: str) -> bytes:
        if n > self.remaining:
            raise PyBoyStateError(
                f"truncated PyBoy state: the {block} block ran out at byte {self.pos} "
                f"(needs {n} bytes, {self.remaining} left)"
            )
        self.pos += n
        return self.data[self.pos - n : self.pos]

    def unpack(self, code: str, block: str) -> Any:
        st = _STRUCTS[code]
        return st.unpack(self.take(st.size, block))[0]

    def array(self, shape: tuple[int, ...], block: str) -> np.ndarray:
        return np.frombuffer(self.take(math.prod(shape), block), np.uint8).reshape(shape).copy()

    def fields(self, spec: tuple[_Field, ...], version: int, block: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in spec:
            if not f.present(version):
                continue
            if f.fmt == "array":
                out[f.name] = self.array(f.shape, block)
            elif f.fmt == _CGB_FLAG:
                if self.unpack("B", block):
                    raise PyBoyStateError(f"CGB states are not supported (CGB flag set in the {block} block)")
            else:
                out[f.name] = self.unpack(f.fmt, block)
        return out

    def begin(self, block: str) -> None:
        """Mark the start of the next top-level block (and so the end of the previous one)."""
        self.starts.append((block, self.pos))

    def blocks(self) -> list[tuple[str, int, int]]:
        ends = [start for _, start in self.starts[1:]] + [self.pos]
        return [(name, start, end - start) for (name, start), end in zip(self.starts, ends, strict=True)]


class _Writer:
    """Byte sink; every value that does not fit its field becomes a `PyBoyStateError`."""

    def __init__(self) -> None:
        self.out = bytearray()

    def pack(self, code: str, value: Any, what: str) -> None:
        if code != "<d" and code != "<f" and not isinstance(value, int | np.integer):
            raise PyBoyStateError(f"bad value for {what}: {value!r} is not an integer")
        try:
            self.out += _STRUCTS[code].pack(value)
        except (struct.error, TypeError, OverflowError):
            raise PyBoyStateError(f"bad value for {what}: {value!r}") from None

    def array(self, value: Any, shape: tuple[int, ...], what: str, dtype: Any = np.uint8) -> None:
        self.out += _checked_array(value, shape, what, dtype).tobytes()

    def fields(self, obj: Any, spec: tuple[_Field, ...], version: int, block: str) -> None:
        for f in spec:
            if not f.present(version):
                continue
            if f.fmt == _CGB_FLAG:
                self.out.append(0)
            elif f.fmt == "array":
                self.array(getattr(obj, f.name), f.shape, f"{block}.{f.name}")
            else:
                self.pack(f.fmt, getattr(obj, f.name), f"{block}.{f.name}")


def _checked_array(value: Any, shape: tuple[int, ...], what: str, dtype: Any = np.uint8) -> np.ndarray:
    """`value` as a little-endian array of `dtype` and `shape`, or a `PyBoyStateError`."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        raise PyBoyStateError(f"bad value for {what}: not an array") from None
    if arr.shape != shape:
        raise PyBoyStateError(f"bad value for {what}: shape {arr.shape}, expected {shape}")
    info = np.iinfo(dtype)
    if arr.dtype.kind not in "ui" or (arr.size and (arr.min() < info.min or arr.max() > info.max)):
        raise PyBoyStateError(f"bad value for {what}: needs integers in [{info.min}, {info.max}]")
    return arr.astype(np.dtype(dtype).newbyteorder("<"))


def _read_block(cls: Any, r: _Reader, version: int, block: str) -> Any:
    return cls(**r.fields(cls.SPEC, version, block))


# --------------------------------------------------------------------------------------------------
# Blocks


@dataclass(kw_only=True, eq=False)
class PyBoyCpuState:
    """PyBoy's CPU block: SM83 registers and interrupt state (a backend's register view is
    `backends.base.CpuState`). ``cycles`` is PyBoy's running CPU cycle (T-state) count."""

    a: int
    f: int
    b: int
    c: int
    d: int
    e: int
    hl: int
    sp: int
    pc: int
    ime: int
    ime_delay: int = 0
    """PyBoy ``interrupt_enable_delay``: EI's one-instruction delay still pending."""
    halted: int
    stopped: int
    interrupt_enable: int = 0
    """IE (0xFFFF). Before version 5 it is stored after the RAM block."""
    interrupt_queued: int = 0
    interrupt_flag: int = 0
    """IF (0xFF0F), the raw flag bits."""
    cycles: int = 0

    SPEC: ClassVar[tuple[_Field, ...]] = (
        *(_u8(n) for n in ("a", "f", "b", "c", "d", "e")),
        *(_u16(n) for n in ("hl", "sp", "pc")),
        _u8("ime"),
        _u8("ime_delay", 19),
        _u8("halted"),
        _u8("stopped"),
        _u8("interrupt_enable", 5),
        _u8("interrupt_queued", 8),
        _u8("interrupt_flag", 8),
        _u64("cycles", 12),
    )

    @property
    def h(self) -> int:
        return self.hl >> 8

    @property
    def l(self) -> int:  # noqa: E743
        return self.hl & 0xFF


@dataclass(kw_only=True, eq=False)
class OamDmaState:
    """OAM DMA in progress (0xFF46): source page, bytes copied so far, CPU cycle it started at."""

    active: int
    reading: int
    source: int
    index: int
    start_cycle: int

    SPEC: ClassVar[tuple[_Field, ...]] = (
        _u8("active"), _u8("reading"), _u8("source"), _u8("index"), _u64("start_cycle")
    )


@dataclass(kw_only=True, eq=False)
class LcdState:
    """PPU: VRAM, OAM, registers and the position within the frame.

    ``clock`` counts T-states since the start of the frame as of CPU cycle ``last_cycles``;
    ``clock_target`` is when the next mode change happens, ``next_stat_mode``/``stat_transition``
    what it will be. ``scanline_parameters`` holds per line (SCX, SCY, WX+7, WY, tile data select).
    """

    vram: np.ndarray
    oam: np.ndarray
    lcdc: int
    bgp: int
    obp0: int
    obp1: int
    stat: int = 0
    ly: int = 0
    lyc: int = 0
    scy: int
    scx: int
    wy: int
    wx: int
    object_priority_mode: int = 0
    """CGB OPRI (0xFF6C); before version 16 it lives in the FF4C-FF7F image after the RAM block."""
    scanline_parameters: np.ndarray | None = None
    downgraded_to_dmg: int = 0
    speed_shift: int = 0
    frame_done: int = 0
    first_frame: int = 0
    reset: int = 0
    last_cycles: int = 0
    clock: int = 0
    clock_target: int = 0
    next_stat_mode: int = 0
    stat_transition: int = 0

    SPEC: ClassVar[tuple[_Field, ...]] = (
        _arr("vram", 0x2000),
        _arr("oam", 0xA0),
        *(_u8(n) for n in ("lcdc", "bgp", "obp0", "obp1")),
        *(_u8(n, 5) for n in ("stat", "ly", "lyc")),
        *(_u8(n) for n in ("scy", "scx", "wy", "wx")),
        _u8("object_priority_mode", 16),
        _arr("scanline_parameters", _ROWS, 5, since=11),
        _Field("", _CGB_FLAG, since=8),
        _u8("downgraded_to_dmg", 17),
        _u8("speed_shift", 8),
        *(_u8(n, 13) for n in ("frame_done", "first_frame", "reset")),
        _u64("last_cycles", 12),
        _u64("clock", 8),
        _u64("clock_target", 8),
        _u8("next_stat_mode", 8),
        _u8("stat_transition", 8),
    )


@dataclass(kw_only=True, eq=False)
class ToneChannelState:
    """APU channel 2 (square); channel 1 adds the sweep unit."""

    wave_duty: int
    init_length_timer: int
    envelope_volume: int
    envelope_direction: int
    envelope_pace: int
    sound_period: int
    length_enable: int
    enable: int
    length_timer: int
    envelope_timer: int
    period_timer: int
    period: int
    wave_frame: int
    volume: int
    sample_suppressed: int = 0
    pending_wave_duty: int = 0
    duty_update_pending: int = 0

    SPEC: ClassVar[tuple[_Field, ...]] = (
        *(_u8(n) for n in ("wave_duty", "init_length_timer", "envelope_volume", "envelope_direction")),
        _u8("envelope_pace"),
        _u16("sound_period"),
        _u8("length_enable"),
        _u8("enable"),
        *(_u64(n) for n in ("length_timer", "envelope_timer", "period_timer", "period", "wave_frame")),
        _u64("volume"),
        *(_u8(n, 23) for n in ("sample_suppressed", "pending_wave_duty", "duty_update_pending")),
    )


@dataclass(kw_only=True, eq=False)
class SweepChannelState(ToneChannelState):
    """APU channel 1 (square with frequency sweep)."""

    sweep_pace: int
    sweep_direction: int
    sweep_magnitude: int
    sweep_timer: int
    sweep_check_timer: int
    sweep_calc_timer: int = 0
    sweep_restart_hold: int = 0
    sweep_negate_used: int
    sweep_enable: int
    shadow: int

    SPEC: ClassVar[tuple[_Field, ...]] = (
        *ToneChannelState.SPEC,
        *(_u8(n) for n in ("sweep_pace", "sweep_direction", "sweep_magnitude")),
        _u64("sweep_timer"),
        _u64("sweep_check_timer"),
        _u64("sweep_calc_timer", 27),
        _u64("sweep_restart_hold", 28),
        _u8("sweep_negate_used"),
        _u8("sweep_enable"),
        _u64("shadow"),
    )


@dataclass(kw_only=True, eq=False)
class WaveChannelState:
    """APU channel 3 (wave RAM 0xFF30-0xFF3F in ``wavetable``)."""

    wavetable: np.ndarray
    dac_power: int
    init_length_timer: int
    volume_register: int
    sound_period: int
    length_enable: int
    enable: int
    length_timer: int
    period_timer: int
    period: int
    wave_frame: int
    sample_suppressed: int
    volume_shift: int
    wave_access: int
    restart_pending: int = 0
    sample_frame: int = 0

    SPEC: ClassVar[tuple[_Field, ...]] = (
        _arr("wavetable", 16),
        *(_u8(n) for n in ("dac_power", "init_length_timer", "volume_register")),
        _u16("sound_period"),
        _u8("length_enable"),
        _u8("enable"),
        *(_u64(n) for n in ("length_timer", "period_timer", "period", "wave_frame")),
        _u8("sample_suppressed"),
        _u64("volume_shift"),
        _u8("wave_access"),
        _u8("restart_pending", 24),
        _u64("sample_frame", 25),
    )


@dataclass(kw_only=True, eq=False)
class NoiseChannelState:
    """APU channel 4 (LFSR noise)."""

    init_length_timer: int
    envelope_volume: int
    envelope_direction: int
    envelope_pace: int
    clock_shift: int
    lfsr_width: int
    clock_divider: int
    length_enable: int
    enable: int
    length_timer: int
    period_timer: int
    envelope_timer: int
    period: int
    shift_register: int
    lfsr_feed: int
    volume: int
    counter: int = 0
    counter_countdown: int = 0
    alignment: int = 0
    counter_running: int = 0

    SPEC: ClassVar[tuple[_Field, ...]] = (
        *(_u8(n) for n in ("init_length_timer", "envelope_volume", "envelope_direction", "envelope_pace")),
        *(_u8(n) for n in ("clock_shift", "lfsr_width", "clock_divider", "length_enable", "enable")),
        *(_u64(n) for n in ("length_timer", "period_timer", "envelope_timer", "period", "shift_register")),
        _u64("lfsr_feed"),
        _u64("volume"),
        *(_u64(n, 26) for n in ("counter", "counter_countdown", "alignment")),
        _u8("counter_running", 26),
    )


@dataclass(kw_only=True, eq=False)
class SoundState:
    """APU. ``audio_buffer`` (version 14+) holds ``2*(samples_per_frame+1)`` int8 samples as raw bytes."""

    audio_buffer_head: int = 0
    samples_per_frame: int = 0
    cycles_per_sample: float = 0.0
    audio_buffer: np.ndarray | None = None
    speed_shift: int = 0
    cycles_target: float = 0.0
    cycles_target_512hz: float = 0.0
    cycles_to_interrupt: int = 0
    cycles: int = 0
    last_cycles: int = 0
    div_apu_counter: int = 0
    div_apu: int = 0
    apu_poweron_after_div_write: int = 0
    poweron: int = 0
    disable_sampling: int = 0
    noise_left: int = 0
    wave_left: int = 0
    tone_left: int = 0
    sweep_left: int = 0
    noise_right: int = 0
    wave_right: int = 0
    tone_right: int = 0
    sweep_right: int = 0
    nr50: int = 0
    sweep: SweepChannelState
    tone: ToneChannelState
    wave: WaveChannelState
    noise: NoiseChannelState

    HEAD: ClassVar[tuple[_Field, ...]] = (
        _u64("last_cycles", 13, 13),  # version 13 has only these two words before the channels
        _u64("cycles", 13, 13),
        _u64("audio_buffer_head", 14),
        _u64("samples_per_frame", 14),
        _f64("cycles_per_sample", 14),
    )
    BODY: ClassVar[tuple[_Field, ...]] = (
        _u8("speed_shift", 14),
        _f64("cycles_target", 14),
        _f64("cycles_target_512hz", 14),
        *(_u64(n, 14) for n in ("cycles_to_interrupt", "cycles", "last_cycles", "div_apu_counter")),
        _u64("div_apu", 14),
        _u8("apu_poweron_after_div_write", 22),
        *(_u8(n, 14) for n in ("poweron", "disable_sampling", "noise_left", "wave_left", "tone_left")),
        *(_u8(n, 14) for n in ("sweep_left", "noise_right", "wave_right", "tone_right", "sweep_right")),
        _u8("nr50", 14),
    )


def _audio_buffer_length(samples_per_frame: int) -> int:
    return 2 * (samples_per_frame + 1)


def _read_sound(r: _Reader, version: int) -> SoundState:
    head = r.fields(SoundState.HEAD, version, "sound")
    if version >= 14:
        head["audio_buffer"] = r.array((_audio_buffer_length(head["samples_per_frame"]),), "sound")
    head.update(r.fields(SoundState.BODY, version, "sound"))
    return SoundState(
        **head,
        sweep=_read_block(SweepChannelState, r, version, "sound"),
        tone=_read_block(ToneChannelState, r, version, "sound"),
        wave=_read_block(WaveChannelState, r, version, "sound"),
        noise=_read_block(NoiseChannelState, r, version, "sound"),
    )


def _write_sound(w: _Writer, s: SoundState, version: int) -> None:
    w.fields(s, SoundState.HEAD, version, "sound")
    if version >= 14:
        spf = s.samples_per_frame  # packed (and so checked) with the head above
        w.array(s.audio_buffer, (_audio_buffer_length(int(spf)),), "sound.audio_buffer")
    w.fields(s, SoundState.BODY, version, "sound")
    w.fields(s.sweep, SweepChannelState.SPEC, version, "sound.sweep")
    w.fields(s.tone, ToneChannelState.SPEC, version, "sound.tone")
    w.fields(s.wave, WaveChannelState.SPEC, version, "sound.wave")
    w.fields(s.noise, NoiseChannelState.SPEC, version, "sound.noise")


_PIXEL = np.dtype([("color", "<u4"), ("attributes", "u1")])


@dataclass(kw_only=True, eq=False)
class RendererState:
    """PyBoy's screen buffer: 144x160 ABGR colours (+ per-pixel attributes from version 10)."""

    screen: np.ndarray | None = None
    """uint32 (144, 160), version 6+."""
    attributes: np.ndarray | None = None
    """uint8 (144, 160), version 10+."""
    wy_activated_frame: int = 0
    legacy_scanline_parameters: np.ndarray | None = None
    """Versions 2-10 only: (144, 4 or 5) bytes that PyBoy 2.8.1 reads and discards."""


def _legacy_scanline_shape(version: int) -> tuple[int, int]:
    return (_ROWS, 5 if version > 3 else 4)


def _read_renderer(r: _Reader, version: int) -> RendererState:
    out = RendererState()
    if version < 11:
        out.legacy_scanline_parameters = r.array(_legacy_scanline_shape(version), "renderer")
    if version >= 10:
        pixels = np.frombuffer(r.take(_ROWS * _COLS * _PIXEL.itemsize, "renderer"), _PIXEL)
        out.screen = pixels["color"].astype(np.uint32).reshape(_ROWS, _COLS)
        out.attributes = pixels["attributes"].copy().reshape(_ROWS, _COLS)
    elif version >= 6:
        out.screen = np.frombuffer(r.take(_ROWS * _COLS * 4, "renderer"), "<u4").astype(np.uint32)
        out.screen = out.screen.reshape(_ROWS, _COLS)
    if version >= 18:
        out.wy_activated_frame = r.unpack("B", "renderer")
    return out


def _write_renderer(w: _Writer, rs: RendererState, version: int) -> None:
    if version < 11:
        shape = _legacy_scanline_shape(version)
        w.array(rs.legacy_scanline_parameters, shape, "renderer.legacy_scanline_parameters")
    if version >= 10:
        pixels = np.empty((_ROWS, _COLS), _PIXEL)
        pixels["color"] = _checked_array(rs.screen, (_ROWS, _COLS), "renderer.screen", np.uint32)
        pixels["attributes"] = _checked_array(rs.attributes, (_ROWS, _COLS), "renderer.attributes")
        w.out += pixels.tobytes()
    elif version >= 6:
        w.array(rs.screen, (_ROWS, _COLS), "renderer.screen", np.uint32)
    if version >= 18:
        w.pack("B", rs.wy_activated_frame, "renderer.wy_activated_frame")


@dataclass(kw_only=True, eq=False)
class RamState:
    """Internal RAM as PyBoy stores it (DMG: one 8 KiB WRAM bank).

    ``io_ports`` is PyBoy's backing store for 0xFF00-0xFF4B: only bytes no component owns are kept here
    (0xFF00 holds the last computed JOYP value); timer, LCD, sound, serial and IF live in their blocks.
    """

    wram: np.ndarray
    unusable_fea0: np.ndarray
    """0xFEA0-0xFEFF."""
    io_ports: np.ndarray
    hram: np.ndarray
    """0xFF80-0xFFFE."""

    SPEC: ClassVar[tuple[_Field, ...]] = (
        _arr("wram", 0x2000), _arr("unusable_fea0", 0x60), _arr("io_ports", 0x4C), _arr("hram", 0x7F)
    )


_LEGACY_IO_SIZE = 0x34  # FF4C-FF7F image written before version 16
_LEGACY_OPRI, _LEGACY_SVBK = 0x20, 0x24


@dataclass(kw_only=True, eq=False)
class TimerState:
    """DIV/TIMA/TMA/TAC and PyBoy's internals: ``div_counter`` is the 16-bit divider (DIV = its top byte)."""

    div: int
    tima: int
    div_counter: int
    tima_counter: int
    tma: int
    tac: int
    tima_reload_state: int = 0
    last_cycles: int = 0
    cycles_to_interrupt: int = 0

    SPEC: ClassVar[tuple[_Field, ...]] = (
        _u8("div"),
        _u8("tima"),
        _u16("div_counter"),
        _u16("tima_counter"),
        _u8("tma"),
        _u8("tac"),
        _u8("tima_reload_state", 20),
        _u64("last_cycles", 12),
        _u64("cycles_to_interrupt", 13),
    )


@dataclass(kw_only=True, eq=False)
class RtcState:
    """MBC3 real-time clock. ``timezero`` and ``saved_time`` are wall-clock (``time.time()``) values."""

    timezero: float
    legacy_halt: int
    """First copy of ``halt`` (the only one before version 21); PyBoy 2.8.1 overwrites it on load."""
    legacy_day_carry: int
    seconds: int = 0
    minutes: int = 0
    hours: int = 0
    day_low: int = 0
    day_high: int = 0
    halt: int = 0
    day_carry: int = 0
    rtc_cycles: int = 0
    """T-states into the current RTC second."""
    saved_time: float = 0.0

    SPEC: ClassVar[tuple[_Field, ...]] = (
        _Field("timezero", "<f", until=12),
        _f64("timezero", 13),
        _u8("legacy_halt"),
        _u8("legacy_day_carry"),
        *(_u8(n, 21) for n in ("seconds", "minutes", "hours", "day_low", "day_high", "halt", "day_carry")),
        _u64("rtc_cycles", 21),
        _f64("saved_time", 21),
    )


@dataclass(kw_only=True, eq=False)
class Mbc1State:
    """MBC1 bank registers: 5-bit BANK1 (0x2000-0x3FFF) and 2-bit BANK2 (0x4000-0x5FFF); version 3+."""

    bank_select1: int
    bank_select2: int

    SPEC: ClassVar[tuple[_Field, ...]] = (_u8("bank_select1"), _u8("bank_select2"))


@dataclass(kw_only=True, eq=False)
class Mbc5State:
    """MBC5 rumble flags; ``rumble_enabled`` is stored only when ``rumble_supported`` is nonzero."""

    rumble_supported: int
    rumble_enabled: int | None = None


@dataclass(kw_only=True, eq=False)
class CartridgeState:
    """MBC registers and cartridge RAM; at most one of ``rtc``/``mbc1``/``mbc5`` is set.

    ``ram`` has one row per 8 KiB bank PyBoy allocates (ROM ONLY and MBC2 carts included).
    ``memory_model`` is the MBC1 banking mode; ``ram_bank`` may be 0x08-0x0C (RTC register) on MBC3.
    """

    rom_bank: int
    ram_bank: int
    ram_enabled: int
    memory_model: int
    ram: np.ndarray
    rtc: RtcState | None = None
    mbc1: Mbc1State | None = None
    mbc5: Mbc5State | None = None

    SPEC: ClassVar[tuple[_Field, ...]] = (
        _u8("rom_bank"), _u8("ram_bank"), _u8("ram_enabled"), _u8("memory_model")
    )

    @property
    def kind(self) -> str:
        """Layout kind: mbc3_rtc, mbc1, mbc5 or plain (ROM ONLY, ROM+RAM, MBC2, MBC3 without RTC)."""
        if self.rtc is not None:
            return "mbc3_rtc"
        return "mbc1" if self.mbc1 is not None else "mbc5" if self.mbc5 is not None else "plain"


@dataclass(kw_only=True, eq=False)
class InteractionState:
    """Joypad: pressed buttons as active-low nibbles (directional: R L U D; standard: A B Select Start)."""

    directional: int
    standard: int

    SPEC: ClassVar[tuple[_Field, ...]] = (_u8("directional"), _u8("standard"))


@dataclass(kw_only=True, eq=False)
class SerialState:
    """Serial port SB/SC and PyBoy's transfer clock."""

    sb: int
    sc: int
    transfer_enabled: int
    internal_clock: int
    last_cycles: int
    cycles_to_interrupt: int
    clock: int
    clock_target: int

    SPEC: ClassVar[tuple[_Field, ...]] = (
        *(_u8(n) for n in ("sb", "sc", "transfer_enabled", "internal_clock")),
        *(_u64(n) for n in ("last_cycles", "cycles_to_interrupt", "clock", "clock_target")),
    )


@dataclass(kw_only=True, eq=False)
class SgbState:
    """Super Game Boy command state and border (present, mostly zero, for every DMG game)."""

    sgb_detected: int
    multiplayer_enabled: int
    multiplayer_players: int
    mask_mode: int
    border_enabled: int
    last_command: int
    current_joypad: int
    joypad_data: np.ndarray
    border_tiles: np.ndarray
    border_map: np.ndarray
    border_palettes: np.ndarray

    SPEC: ClassVar[tuple[_Field, ...]] = (
        *(_u8(n) for n in ("sgb_detected", "multiplayer_enabled", "multiplayer_players", "mask_mode")),
        *(_u8(n) for n in ("border_enabled", "last_command", "current_joypad")),
        _arr("joypad_data", 4),
        _arr("border_tiles", 0x2000),
        _arr("border_map", 0x800),
        _arr("border_palettes", 0x80),
    )


_HEADER_SPEC: tuple[_Field, ...] = (
    _u8("bootrom_enabled"),
    _u8("key0", 16),
    _u8("key1", 8),
    _u8("double_speed", 8),
    _Field("", _CGB_FLAG, since=8),
)


@dataclass(kw_only=True, eq=False)
class PyBoyState:
    """A whole PyBoy save state. Blocks absent from ``version`` are None; absent fields keep defaults.

    Compare two states with ``write_pyboy_state(a) == write_pyboy_state(b)`` or their `summary()`.
    """

    version: int = STATE_VERSION
    bootrom_enabled: int
    key0: int = 0
    key1: int = 0
    double_speed: int = 0
    cpu: PyBoyCpuState
    oam_dma: OamDmaState | None = None
    lcd: LcdState
    sound: SoundState | None = None
    renderer: RendererState
    ram: RamState
    wram_select: int = 0
    """CGB SVBK (0xFF70); PyBoy saves it for DMG games too."""
    legacy_io_ff4c: np.ndarray | None = None
    """Versions <= 15: the FF4C-FF7F image (52 bytes); OPRI and SVBK in it mirror the fields above."""
    timer: TimerState | None = None
    cartridge: CartridgeState
    interaction: InteractionState | None = None
    serial: SerialState | None = None
    sgb: SgbState | None = None

    def summary(self) -> dict[str, int]:
        """Flat dict of the architectural and timing values the lockstep verifier compares.

        Keys: A F B C D E H L SP PC, ime ime_delay halted stopped interrupt_queued IE IF cpu_cycles,
        DIV div_counter TIMA TMA TAC tima_reload_state, LCDC STAT SCY SCX LY LYC BGP OBP0 OBP1 WY WX,
        lcd_clock lcd_clock_target lcd_last_cycles lcd_next_stat_mode lcd_stat_transition lcd_frame_done
        lcd_first_frame, oam_dma_active oam_dma_source oam_dma_index oam_dma_start_cycle, mbc_rom_bank
        mbc_ram_bank mbc_ram_enabled mbc_mode (+ mbc1_bank_select1/2, mbc5_rumble_enabled, rtc_* when that
        hardware is present), JOYP joypad_directional joypad_standard, SB SC, bootrom_enabled. Values are
        as PyBoy stores them, not bus reads (TAC lacks its set high bits, TIMA is raw during a reload).
        Keys of blocks the state's version lacks are left out.
        """
        c, lcd, cart = self.cpu, self.lcd, self.cartridge
        out = {
            "A": c.a, "F": c.f, "B": c.b, "C": c.c, "D": c.d, "E": c.e, "H": c.h, "L": c.l,
            "SP": c.sp, "PC": c.pc, "ime": c.ime, "ime_delay": c.ime_delay, "halted": c.halted,
            "stopped": c.stopped, "interrupt_queued": c.interrupt_queued, "IE": c.interrupt_enable,
            "IF": c.interrupt_flag, "cpu_cycles": c.cycles,
            "LCDC": lcd.lcdc, "STAT": lcd.stat, "SCY": lcd.scy, "SCX": lcd.scx, "LY": lcd.ly, "LYC": lcd.lyc,
            "BGP": lcd.bgp, "OBP0": lcd.obp0, "OBP1": lcd.obp1, "WY": lcd.wy, "WX": lcd.wx,
            "lcd_clock": lcd.clock, "lcd_clock_target": lcd.clock_target, "lcd_last_cycles": lcd.last_cycles,
            "lcd_next_stat_mode": lcd.next_stat_mode, "lcd_stat_transition": lcd.stat_transition,
            "lcd_frame_done": lcd.frame_done, "lcd_first_frame": lcd.first_frame,
            "mbc_rom_bank": cart.rom_bank, "mbc_ram_bank": cart.ram_bank,
            "mbc_ram_enabled": cart.ram_enabled, "mbc_mode": cart.memory_model,
            "JOYP": int(self.ram.io_ports[0]), "bootrom_enabled": self.bootrom_enabled,
        }
        if self.timer is not None:
            t = self.timer
            out |= {"DIV": t.div, "div_counter": t.div_counter, "TIMA": t.tima, "TMA": t.tma, "TAC": t.tac,
                    "tima_reload_state": t.tima_reload_state}
        if self.oam_dma is not None:
            d = self.oam_dma
            out |= {"oam_dma_active": d.active, "oam_dma_source": d.source, "oam_dma_index": d.index,
                    "oam_dma_start_cycle": d.start_cycle}
        if cart.mbc1 is not None:
            out |= {"mbc1_bank_select1": cart.mbc1.bank_select1, "mbc1_bank_select2": cart.mbc1.bank_select2}
        if cart.mbc5 is not None and cart.mbc5.rumble_enabled is not None:
            out["mbc5_rumble_enabled"] = cart.mbc5.rumble_enabled
        if cart.rtc is not None:
            out |= {f"rtc_{n}": getattr(cart.rtc, n) for n in
                    ("seconds", "minutes", "hours", "day_low", "day_high", "halt", "day_carry", "rtc_cycles")}
        if self.interaction is not None:
            out |= {"joypad_directional": self.interaction.directional,
                    "joypad_standard": self.interaction.standard}
        if self.serial is not None:
            out |= {"SB": self.serial.sb, "SC": self.serial.sc}
        return {k: int(v) for k, v in out.items()}


# --------------------------------------------------------------------------------------------------
# Cartridge block delimiting


_TAIL_BLOCKS: tuple[tuple[str, Any, int], ...] = (
    ("interaction", InteractionState, 7), ("serial", SerialState, 15), ("sgb", SgbState, 23)
)
"""The blocks after the cartridge block: (name, class, first version)."""


def _tail_size(version: int) -> int:
    return sum(_spec_size(cls.SPEC, version) for _, cls, since in _TAIL_BLOCKS if version >= since)


def _rtc_size(version: int) -> int:
    return _spec_size(RtcState.SPEC, version)


def _extensions(version: int, cartridge_type: int | None) -> list[tuple[str, int]]:
    """Possible (kind, extension size) pairs after the RAM banks, most likely first."""
    mbc1 = ("mbc1", 2) if version >= 3 else ("plain", 0)
    if cartridge_type is None:
        return [("plain", 0), mbc1, ("mbc5", 1), ("mbc5", 2), ("mbc3_rtc", _rtc_size(version))]
    if cartridge_type in MBC1_TYPES:
        return [mbc1]
    if cartridge_type in MBC3_RTC_TYPES:
        return [("mbc3_rtc", _rtc_size(version))]
    if cartridge_type in MBC5_TYPES:
        return [("mbc5", 2 if cartridge_type in MBC5_RUMBLE_TYPES else 1)]
    return [("plain", 0)]


def _cartridge_layout(
    r: _Reader, version: int, cartridge_type: int | None, ram_size_code: int | None
) -> tuple[str, int, int]:
    """(kind, RAM banks, extension size) of the cartridge block at the reader's position."""
    banks = [PYBOY_RAM_BANKS[ram_size_code]] if ram_size_code is not None else [1, 4, 8, 16]
    candidates = [(kind, n, ext) for n in banks for kind, ext in _extensions(version, cartridge_type)]
    if len(candidates) == 1:  # both header bytes given: read sequentially, errors name the exact block
        return candidates[0]
    base = _spec_size(CartridgeState.SPEC, version)
    avail = r.remaining - _tail_size(version)
    sizes = {c: base + c[1] * RAM_BANK_SIZE + c[2] for c in candidates}
    for c in candidates:
        if sizes[c] == avail and _plausible(r, version, c, sizes[c] - c[2]):
            return c
    nearest = min(sizes.values(), key=lambda size: (abs(avail - size), size > avail))
    if nearest < avail:
        raise PyBoyStateError(
            f"PyBoy state has trailing garbage or fits no PyBoy cartridge layout ({avail - nearest} bytes"
            " over the nearest); pass cartridge_type and ram_size_code to pinpoint"
        )
    if r.remaining < min(sizes.values()):
        raise PyBoyStateError(f"truncated PyBoy state: the cartridge block ran out at byte {r.pos}")
    raise PyBoyStateError(
        f"truncated PyBoy state: it ends in the cartridge block (at byte {r.pos}) or a block after it; "
        "pass cartridge_type and ram_size_code to pinpoint"
    )


def _plausible(r: _Reader, version: int, layout: tuple[str, int, int], ext_at: int) -> bool:
    """Whether PyBoy could have written this cartridge layout: its and the next blocks' values fit."""
    d, at = r.data, r.pos + ext_at
    kind, tail = layout[0], at + layout[2]
    ok = d[r.pos + 2] <= 1 and d[r.pos + 3] <= 1  # RAM enable and banking mode
    if kind == "mbc1":
        ok &= d[at] <= 0x1F and d[at + 1] <= 3
    elif kind == "mbc5":
        ok &= bool(d[at]) == (layout[2] == 2)  # rumble flag, then rumble state if set
    elif kind == "mbc3_rtc" and version >= 21:
        seconds, minutes, hours, _, day_high, halt, carry = d[at + 10 : at + 17]
        ok &= seconds < 64 and minutes < 64 and hours < 32 and max(day_high, halt, carry) <= 1
    if version >= 7:
        ok &= d[tail] <= 0x0F and d[tail + 1] <= 0x0F  # joypad nibbles
    if version >= 15:
        ok &= d[tail + 3] & 0x7E == 0x7E  # DMG SC reads back bits 1-6 set
    return ok


def _read_cartridge(
    r: _Reader, version: int, cartridge_type: int | None, ram_size_code: int | None
) -> CartridgeState:
    kind, n, ext = _cartridge_layout(r, version, cartridge_type, ram_size_code)
    cart = CartridgeState(**r.fields(CartridgeState.SPEC, version, "cartridge"),
                          ram=r.array((n, RAM_BANK_SIZE), "cartridge"))
    if kind == "mbc3_rtc":
        cart.rtc = _read_block(RtcState, r, version, "cartridge")
    elif kind == "mbc1":
        cart.mbc1 = _read_block(Mbc1State, r, version, "cartridge")
    elif kind == "mbc5":
        cart.mbc5 = Mbc5State(rumble_supported=r.unpack("B", "cartridge"))
        if bool(cart.mbc5.rumble_supported) != (ext == 2):
            raise PyBoyStateError(
                f"bad value in the cartridge block: MBC5 rumble flag {cart.mbc5.rumble_supported} "
                f"for a cartridge {'with' if ext == 2 else 'without'} rumble"
            )
        if cart.mbc5.rumble_supported:
            cart.mbc5.rumble_enabled = r.unpack("B", "cartridge")
    return cart


def _write_cartridge(w: _Writer, cart: CartridgeState, version: int) -> None:
    w.fields(cart, CartridgeState.SPEC, version, "cartridge")
    n = np.shape(cart.ram)[0] if np.ndim(cart.ram) == 2 else -1
    if n not in PYBOY_RAM_BANKS.values():
        raise PyBoyStateError(f"bad value for cartridge.ram: shape {np.shape(cart.ram)}, expected (n, 8192)")
    w.array(cart.ram, (n, RAM_BANK_SIZE), "cartridge.ram")
    if sum(x is not None for x in (cart.rtc, cart.mbc1, cart.mbc5)) > 1:
        raise PyBoyStateError("bad value for cartridge: more than one of rtc, mbc1, mbc5 is set")
    if cart.rtc is not None:
        w.fields(cart.rtc, RtcState.SPEC, version, "cartridge.rtc")
    elif cart.mbc1 is not None:
        if version < 3:
            raise PyBoyStateError(f"bad value for cartridge.mbc1: version {version} has no MBC1 registers")
        w.fields(cart.mbc1, Mbc1State.SPEC, version, "cartridge.mbc1")
    elif cart.mbc5 is not None:
        w.pack("B", cart.mbc5.rumble_supported, "cartridge.mbc5.rumble_supported")
        if cart.mbc5.rumble_supported:
            w.pack("B", cart.mbc5.rumble_enabled, "cartridge.mbc5.rumble_enabled")


# --------------------------------------------------------------------------------------------------
# Public API


def _parse(
    data: bytes, cartridge_type: int | None, ram_size_code: int | None
) -> tuple[PyBoyState, list[tuple[str, int, int]]]:
    if cartridge_type is not None and cartridge_type not in PYBOY_CARTRIDGE_TYPES:
        raise PyBoyStateError(f"cartridge type 0x{cartridge_type:02X} is not one PyBoy 2.8.1 runs")
    if ram_size_code is not None and ram_size_code not in PYBOY_RAM_BANKS:
        raise PyBoyStateError(f"RAM size code 0x{ram_size_code:02X} is not one PyBoy 2.8.1 accepts")
    r = _Reader(data)
    r.begin("header")
    v = r.unpack("B", "header")
    if v < MIN_STATE_VERSION:
        raise PyBoyStateError(f"unsupported PyBoy state version {v} (versions 0-1 have no version byte)")
    if v > STATE_VERSION:
        raise PyBoyStateError(f"unsupported PyBoy state version {v} (newest known: {STATE_VERSION})")
    header = r.fields(_HEADER_SPEC, v, "header")

    def block(name: str, cls: Any, since: int = MIN_STATE_VERSION) -> Any:
        if v < since:
            return None
        r.begin(name)
        return _read_block(cls, r, v, name)

    cpu = block("cpu", PyBoyCpuState)
    oam_dma = block("oam_dma", OamDmaState, 19)
    lcd = block("lcd", LcdState)
    sound = None
    if v >= 13:
        r.begin("sound")
        sound = _read_sound(r, v)
    r.begin("renderer")
    renderer = _read_renderer(r, v)
    ram = block("ram", RamState)
    legacy_io = None
    if v <= 15:
        r.begin("legacy_io_ff4c")
        legacy_io = r.array((_LEGACY_IO_SIZE,), "legacy_io_ff4c")
        lcd.object_priority_mode = int(legacy_io[_LEGACY_OPRI])
        wram_select = int(legacy_io[_LEGACY_SVBK])
    else:
        r.begin("wram_select")
        wram_select = r.unpack("B", "wram_select")
    if v < 5:
        r.begin("interrupt_enable")
        cpu.interrupt_enable = r.unpack("B", "interrupt_enable")
    timer = block("timer", TimerState, 5)
    r.begin("cartridge")
    cart = _read_cartridge(r, v, cartridge_type, ram_size_code)
    interaction = block("interaction", InteractionState, 7)
    serial = block("serial", SerialState, 15)
    sgb = block("sgb", SgbState, 23)
    if r.remaining:
        raise PyBoyStateError(f"PyBoy state has {r.remaining} bytes of trailing garbage after byte {r.pos}")
    state = PyBoyState(
        version=v, **header, cpu=cpu, oam_dma=oam_dma, lcd=lcd, sound=sound, renderer=renderer, ram=ram,
        wram_select=wram_select, legacy_io_ff4c=legacy_io, timer=timer, cartridge=cart,
        interaction=interaction, serial=serial, sgb=sgb,
    )
    return state, r.blocks()


def _as_bytes(data: Any) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise PyBoyStateError(f"a PyBoy state must be bytes, not {type(data).__name__}")
    return bytes(data)


def parse_pyboy_state(
    data: bytes, *, cartridge_type: int | None = None, ram_size_code: int | None = None
) -> PyBoyState:
    """Parse a PyBoy save state. ``cartridge_type``/``ram_size_code`` are ROM header bytes 0x147/0x149.

    Without them the cartridge block is delimited by size (see the module docstring). Raises only
    `PyBoyStateError`.
    """
    return _parse(_as_bytes(data), cartridge_type, ram_size_code)[0]


def pyboy_state_blocks(
    data: bytes, *, cartridge_type: int | None = None, ram_size_code: int | None = None
) -> list[tuple[str, int, int]]:
    """(block name, offset, size) of every top-level block of a PyBoy save state, in file order."""
    return _parse(_as_bytes(data), cartridge_type, ram_size_code)[1]


def _need(block: Any, name: str, version: int) -> Any:
    if block is None:
        raise PyBoyStateError(f"bad value for {name}: version {version} needs this block")
    return block


def write_pyboy_state(state: PyBoyState) -> bytes:
    """Serialize ``state`` in the layout of ``state.version``; exact inverse of `parse_pyboy_state`."""
    v = state.version
    if not isinstance(v, int) or not MIN_STATE_VERSION <= v <= STATE_VERSION:
        raise PyBoyStateError(f"unsupported PyBoy state version {v!r}")
    w = _Writer()
    w.pack("B", v, "version")
    w.fields(state, _HEADER_SPEC, v, "header")
    w.fields(state.cpu, PyBoyCpuState.SPEC, v, "cpu")
    if v >= 19:
        w.fields(_need(state.oam_dma, "oam_dma", v), OamDmaState.SPEC, v, "oam_dma")
    w.fields(state.lcd, LcdState.SPEC, v, "lcd")
    if v >= 13:
        _write_sound(w, _need(state.sound, "sound", v), v)
    _write_renderer(w, state.renderer, v)
    w.fields(state.ram, RamState.SPEC, v, "ram")
    if v <= 15:
        legacy = _checked_array(state.legacy_io_ff4c, (_LEGACY_IO_SIZE,), "legacy_io_ff4c").copy()
        legacy[_LEGACY_OPRI] = _checked_array(state.lcd.object_priority_mode, (), "lcd.object_priority_mode")
        legacy[_LEGACY_SVBK] = _checked_array(state.wram_select, (), "wram_select")
        w.out += legacy.tobytes()
    else:
        w.pack("B", state.wram_select, "wram_select")
    if v < 5:
        w.pack("B", state.cpu.interrupt_enable, "cpu.interrupt_enable")
    else:
        w.fields(_need(state.timer, "timer", v), TimerState.SPEC, v, "timer")
    _write_cartridge(w, state.cartridge, v)
    for name, cls, since in _TAIL_BLOCKS:
        if v >= since:
            w.fields(_need(getattr(state, name), name, v), cls.SPEC, v, name)
    return bytes(w.out)


def snapshot_pyboy(pyboy: Any) -> PyBoyState:
    """Save a running PyBoy into memory and parse it (cartridge layout taken from its ROM header)."""
    buf = io.BytesIO()
    pyboy.save_state(buf)
    return parse_pyboy_state(
        buf.getvalue(), cartridge_type=pyboy.memory[0, 0x147], ram_size_code=pyboy.memory[0, 0x149]
    )


def _layout_key(state: PyBoyState) -> tuple[Any, ...]:
    cart = state.cartridge
    return np.shape(cart.ram), cart.kind, cart.mbc5 is not None and bool(cart.mbc5.rumble_supported)


def restore_pyboy(pyboy: Any, state: PyBoyState) -> None:
    """Load ``state`` into a running PyBoy after checking it fits the loaded cartridge and sound setup."""
    data = write_pyboy_state(state)
    current = snapshot_pyboy(pyboy)
    if _layout_key(current) != _layout_key(state):
        raise PyBoyStateError(
            f"state does not fit the loaded cartridge: {state.cartridge.kind} with RAM"
            f" {np.shape(state.cartridge.ram)}, PyBoy has {current.cartridge.kind}"
            f" with {np.shape(current.cartridge.ram)}"
        )
    spf = state.sound.samples_per_frame if state.sound is not None and state.version >= 14 else None
    if current.sound is not None and spf not in (None, current.sound.samples_per_frame):
        raise PyBoyStateError(
            f"state has {spf} sound samples per frame, PyBoy uses {current.sound.samples_per_frame}"
            " (a different sound_sample_rate)"
        )
    buf = io.BytesIO(data)
    pyboy.load_state(buf)
    if buf.tell() != len(data):
        raise PyBoyStateError(f"PyBoy read {buf.tell()} of the state's {len(data)} bytes")
