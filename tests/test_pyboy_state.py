"""Tests for the PyBoy 2.8.1 save-state codec, against real PyBoy states of hand-built test ROMs."""

from __future__ import annotations

import copy
import io
import random
import re

import numpy as np
import pytest

pyboy_mod = pytest.importorskip("pyboy")

from gbxcule.core.pyboy_state import (  # noqa: E402
    STATE_VERSION,
    PyBoyState,
    PyBoyStateError,
    parse_pyboy_state,
    pyboy_state_blocks,
    restore_pyboy,
    snapshot_pyboy,
    write_pyboy_state,
)

LOGO = bytes.fromhex(
    "CEED6666CC0D000B03730083000C000D0008111F8889000EDCCC6EE6DDDDD999BBBB67636E0EECCCDDDC999FBBB9333E"
)
FRAMES = 100  # PyBoy's built-in boot ROM hands over to 0x0100 well before this


def make_rom(cart_type: int, ram_code: int, program: bytes, rom_code: int = 1, cgb: bool = False) -> bytes:
    """A (32 KiB << rom_code) ROM with a valid header and `program` at 0x150."""
    rom = bytearray(0x8000 << rom_code)
    rom[0x100:0x104] = b"\x00\xc3\x50\x01"
    rom[0x104:0x134] = LOGO
    rom[0x134:0x13C] = b"GBXCULE\x00"
    rom[0x143] = 0x80 if cgb else 0x00
    rom[0x147], rom[0x148], rom[0x149] = cart_type, rom_code, ram_code
    x = 0
    for b in rom[0x134:0x14D]:
        x = (x - b - 1) & 0xFF
    rom[0x14D] = x
    rom[0x150 : 0x150 + len(program)] = program
    return bytes(rom)


def store(addr: int, value: int) -> bytes:
    """ld a,value ; ld (addr),a"""
    return bytes([0x3E, value, 0xEA, addr & 0xFF, addr >> 8])


def counter_program(setup: bytes = b"") -> bytes:
    """Start the timer, run `setup`, then loop: inc b, inc c, write b to WRAM (hl+) and cart RAM (de+)."""
    head = bytes([0xF3, 0x31, 0xFE, 0xFF])  # di ; ld sp,$FFFE
    head += bytes([0x3E, 0x05, 0xE0, 0x07, 0x3E, 0x42, 0xE0, 0x06])  # TAC=5, TMA=$42
    head += setup + bytes([0x21, 0x00, 0xC0, 0x11, 0x00, 0xA0])  # ld hl,$C000 ; ld de,$A000
    body = bytes([
        0x04, 0x0C, 0x78, 0x22, 0x12, 0x13,  # inc b ; inc c ; ld a,b ; ld (hl+),a ; ld (de),a ; inc de
        0x7C, 0xFE, 0xD0, 0x20, 0x03, 0x21, 0x00, 0xC0,  # wrap hl at $D000
        0x7A, 0xFE, 0xC0, 0x20, 0x03, 0x11, 0x00, 0xA0,  # wrap de at $C000
        0x18,  # jr loop
    ])
    return head + body + bytes([(-(len(body) + 1)) & 0xFF])


RAM_ON = store(0x0000, 0x0A)
BANK3 = store(0x2000, 3)
RTC_HALT = store(0x4000, 0x0C) + store(0xA000, 0x40)  # select RTC DH, set its halt bit: no wall-clock drift
# name: (cartridge type, RAM size code, MBC setup, expected kind, RAM banks, selected ROM bank, RAM bank)
CARTS = {
    "rom_only": (0x00, 0x00, b"", "plain", 1, 1, 0),
    "rom_ram": (0x08, 0x02, b"", "plain", 1, 1, 0),
    "mbc1": (0x01, 0x00, RAM_ON + store(0x2000, 3), "mbc1", 1, 3, 0),
    "mbc1_ram": (
        0x03, 0x03, RAM_ON + store(0x2000, 3) + store(0x6000, 1) + store(0x4000, 1), "mbc1", 4, 3, 1,
    ),
    "mbc2": (0x06, 0x00, RAM_ON + store(0x2100, 3), "plain", 1, 3, 0),
    "mbc3_ram": (0x13, 0x03, RAM_ON + store(0x2000, 3) + store(0x4000, 2), "plain", 4, 3, 2),
    "mbc3_rtc": (0x0F, 0x00, RAM_ON + RTC_HALT + store(0x4000, 0), "mbc3_rtc", 1, 1, 0),
    "mbc3_rtc_ram": (0x10, 0x03, RAM_ON + BANK3 + RTC_HALT + store(0x4000, 3), "mbc3_rtc", 4, 3, 3),
    "mbc5": (0x19, 0x00, RAM_ON + store(0x2000, 3), "mbc5", 1, 3, 0),
    "mbc5_ram": (0x1B, 0x03, RAM_ON + store(0x2000, 3) + store(0x4000, 2), "mbc5", 4, 3, 2),
    "mbc5_rumble_ram": (0x1E, 0x04, RAM_ON + store(0x2000, 3) + store(0x4000, 0x0D), "mbc5", 16, 3, 13),
}


def new_pyboy(rom: bytes, **kwargs):
    kwargs.setdefault("sound_emulated", False)
    return pyboy_mod.PyBoy(io.BytesIO(rom), window="null", **kwargs)


def save(pyboy) -> bytes:
    buf = io.BytesIO()
    pyboy.save_state(buf)
    return buf.getvalue()


def without_wall_clock(state: PyBoyState) -> bytes:
    """The state's bytes with the RTC's wall-clock stamps zeroed."""
    state = copy.deepcopy(state)
    if state.cartridge.rtc is not None:
        state.cartridge.rtc.timezero = state.cartridge.rtc.saved_time = 0.0
    return write_pyboy_state(state)


def cart_rom(name: str) -> bytes:
    cart_type, ram_code, setup, *_ = CARTS[name]
    return make_rom(cart_type, ram_code, counter_program(setup))


@pytest.fixture(scope="module")
def mbc1_state() -> tuple[bytes, bytes]:
    """(ROM, state bytes) of the 4-bank MBC1 cartridge after FRAMES frames."""
    rom = cart_rom("mbc1_ram")
    pyboy = new_pyboy(rom)
    pyboy.tick(FRAMES)
    data = save(pyboy)
    pyboy.stop(save=False)
    return rom, data


# --------------------------------------------------------------------------------------------------
# Real states: fields, exact round trip, continuation after a re-written state


@pytest.mark.parametrize("name", sorted(CARTS))
def test_cartridge_kinds_roundtrip_and_continue(name: str) -> None:
    cart_type, ram_code, _, kind, banks, rom_bank, ram_bank = CARTS[name]
    rom = cart_rom(name)
    pyboy = new_pyboy(rom)
    pyboy.tick(FRAMES)
    data = save(pyboy)

    hinted = parse_pyboy_state(data, cartridge_type=cart_type, ram_size_code=ram_code)
    state = parse_pyboy_state(data)
    assert write_pyboy_state(state) == data
    assert write_pyboy_state(hinted) == data
    assert hinted.version == STATE_VERSION == 29
    assert hinted.cartridge.kind == kind
    if cart_type not in (0x1C, 0x1D, 0x1E):  # without the header a rumble MBC5 reads as MBC1
        assert state.cartridge.kind == kind

    regs = pyboy.register_file
    cpu = hinted.cpu
    assert (cpu.a, cpu.b, cpu.c, cpu.d, cpu.e) == (regs.A, regs.B, regs.C, regs.D, regs.E)
    assert (cpu.f, cpu.hl, cpu.sp, cpu.pc) == (regs.F, regs.HL, regs.SP, regs.PC)
    assert 0x150 <= cpu.pc < 0x200 and hinted.bootrom_enabled == 0
    assert hinted.ram.wram[:64].tolist() == pyboy.memory[0xC000:0xC040]
    assert hinted.ram.hram.tolist() == pyboy.memory[0xFF80:0xFFFF]
    assert hinted.lcd.vram[:32].tolist() == pyboy.memory[0x8000:0x8020]
    assert hinted.lcd.ly == pyboy.memory[0xFF44] and hinted.lcd.lcdc == pyboy.memory[0xFF40]
    assert (hinted.timer.tac, hinted.timer.tma, hinted.timer.div) == (5, 0x42, pyboy.memory[0xFF04])
    assert hinted.timer.div == hinted.timer.div_counter >> 8

    cart = hinted.cartridge
    assert cart.ram.shape == (banks, 0x2000)
    assert (cart.rom_bank, cart.ram_bank) == (rom_bank, ram_bank)
    assert cart.ram[ram_bank, :64].tolist() == pyboy.memory[ram_bank, 0xA000:0xA040]
    if kind == "mbc3_rtc":
        assert cart.rtc.halt == 1 and cart.rtc.legacy_halt == 1
    if name == "mbc1_ram":
        assert (cart.mbc1.bank_select1, cart.mbc1.bank_select2, cart.memory_model) == (3, 1, 1)
    if name == "mbc5_rumble_ram":
        assert cart.mbc5.rumble_supported == 1 and cart.mbc5.rumble_enabled
    if name == "mbc5":
        assert (cart.mbc5.rumble_supported, cart.mbc5.rumble_enabled) == (0, None)

    summary = hinted.summary()
    assert summary["PC"] == regs.PC and summary["H"] == regs.HL >> 8 and summary["L"] == regs.HL & 0xFF
    assert summary["mbc_rom_bank"] == rom_bank and summary["mbc_ram_enabled"] == int(name != "rom_only")

    # A fresh PyBoy loaded with the re-written state runs on exactly like the original.
    other = new_pyboy(rom)
    restore_pyboy(other, hinted)
    assert without_wall_clock(snapshot_pyboy(other)) == without_wall_clock(hinted)
    pyboy.tick(20)
    other.tick(20)
    assert without_wall_clock(snapshot_pyboy(other)) == without_wall_clock(snapshot_pyboy(pyboy))
    pyboy.stop(save=False)
    other.stop(save=False)


def test_block_layout_matches_docstring(mbc1_state: tuple[bytes, bytes]) -> None:
    _, data = mbc1_state
    blocks = pyboy_state_blocks(data)
    sizes = {name: size for name, _, size in blocks}
    assert [name for name, _, _ in blocks] == [
        "header", "cpu", "oam_dma", "lcd", "sound", "renderer", "ram", "wram_select", "timer",
        "cartridge", "interaction", "serial", "sgb",
    ]
    assert sizes == {
        "header": 6, "cpu": 27, "oam_dma": 12, "lcd": 9116, "sound": 422 + 2 * (804 + 1), "renderer": 115201,
        "ram": 8491, "wram_select": 1, "timer": 25, "cartridge": 4 + 4 * 0x2000 + 2, "interaction": 2,
        "serial": 36, "sgb": 10379,
    }
    offsets = [offset for _, offset, _ in blocks]
    assert offsets == [0, *np.cumsum([size for _, _, size in blocks])[:-1].tolist()]
    assert len(data) == 143300 + sizes["sound"] + 4 * 0x2000 + 2


@pytest.mark.parametrize("sample_rate", [22050, 44100, 96000])
def test_sound_block_is_self_delimiting(sample_rate: int) -> None:
    rom = cart_rom("mbc5_ram")
    pyboy = new_pyboy(rom, sound_emulated=True, sound_sample_rate=sample_rate)
    pyboy.tick(FRAMES)
    data = save(pyboy)
    state = parse_pyboy_state(data)
    spf = (sample_rate * 70224 + 4194304 - 1) // 4194304
    assert state.sound.samples_per_frame == spf
    assert state.sound.audio_buffer.shape == (2 * (spf + 1),)
    assert dict((n, s) for n, _, s in pyboy_state_blocks(data))["sound"] == 422 + 2 * (spf + 1)
    assert write_pyboy_state(state) == data
    pyboy.stop(save=False)


def test_sound_fields_and_continuation_with_sound_emulated() -> None:
    # Power the APU, set master volume/panning, and trigger channel 1 at full envelope volume.
    setup = b"".join(store(a, v) for a, v in [(0xFF26, 0x80), (0xFF24, 0x77), (0xFF25, 0xFF),
                                                (0xFF12, 0xF0), (0xFF13, 0x00), (0xFF14, 0x87)])
    rom = make_rom(0x1B, 0x03, counter_program(RAM_ON + setup))
    pyboy = new_pyboy(rom, sound_emulated=True)
    pyboy.tick(FRAMES)
    state = snapshot_pyboy(pyboy)
    assert state.sound.poweron and state.sound.nr50 == 0x77
    assert state.sound.sweep.envelope_volume == 0xF and state.sound.audio_buffer_head > 0
    assert state.sound.cycles_per_sample == pytest.approx(4194304 / 48000)
    other = new_pyboy(rom, sound_emulated=True)
    restore_pyboy(other, state)
    for p in (pyboy, other):
        p.tick(15)
    assert write_pyboy_state(snapshot_pyboy(other)) == write_pyboy_state(snapshot_pyboy(pyboy))
    pyboy.stop(save=False)
    other.stop(save=False)


def test_halt_interrupts_and_joypad() -> None:
    # IE = VBlank, ei, then halt forever; the VBlank handler at 0x40 increments C.
    program = bytes([0x3E, 0x01, 0xE0, 0xFF, 0xFB, 0x76, 0x00, 0x18, 0xFC])
    rom = bytearray(make_rom(0x00, 0x00, program))
    rom[0x40:0x42] = b"\x0c\xd9"  # inc c ; reti
    pyboy = new_pyboy(bytes(rom))
    pyboy.tick(FRAMES)
    c0 = snapshot_pyboy(pyboy).cpu.c
    pyboy.button_press("a")
    pyboy.button_press("down")
    pyboy.tick(3)
    state = snapshot_pyboy(pyboy)
    s = state.summary()
    assert (s["IE"], s["ime"], s["halted"]) == (1, 1, 1)
    assert state.cpu.c == (c0 + 3) & 0xFF
    assert s["joypad_standard"] == 0b1110 and s["joypad_directional"] == 0b0111
    assert write_pyboy_state(state) == save(pyboy)
    pyboy.stop(save=False)


def test_summary_keys(mbc1_state: tuple[bytes, bytes]) -> None:
    s = parse_pyboy_state(mbc1_state[1]).summary()
    keys = (
        "A F B C D E H L SP PC ime ime_delay halted stopped IE IF cpu_cycles DIV div_counter TIMA TMA TAC "
        "LCDC STAT SCY SCX LY LYC BGP OBP0 OBP1 WY WX lcd_clock lcd_clock_target mbc_rom_bank mbc_ram_bank "
        "mbc_ram_enabled mbc_mode JOYP joypad_directional joypad_standard SB SC"
    )
    for key in keys.split():  # noqa: SIM905
        assert isinstance(s[key], int), key
    assert s["SC"] & 0x7E == 0x7E and s["SB"] == 0xFF


# --------------------------------------------------------------------------------------------------
# Older state versions, as PyBoy 2.8.1 reads them


def as_version(state: PyBoyState, version: int) -> PyBoyState:
    """`state` re-labelled as `version`, with the legacy-only fields that version needs."""
    old = copy.deepcopy(state)
    old.version = version
    if version < 11:
        old.renderer.legacy_scanline_parameters = np.arange(144 * (5 if version > 3 else 4), dtype=np.uint8)
        old.renderer.legacy_scanline_parameters.shape = (144, -1)
    if version <= 15:
        old.legacy_io_ff4c = np.arange(0x34, dtype=np.uint8)
    if version < 3:
        old.cartridge.mbc1 = None
    return old


@pytest.mark.parametrize("name", ["mbc1_ram", "mbc3_rtc_ram", "mbc5_rumble_ram"])
def test_older_versions_read_exactly_as_pyboy_reads_them(name: str) -> None:
    cart_type, ram_code, *_ = CARTS[name]
    rom = cart_rom(name)
    pyboy = new_pyboy(rom)
    pyboy.tick(FRAMES)
    state = snapshot_pyboy(pyboy)
    for version in range(2, STATE_VERSION + 1):
        data = write_pyboy_state(as_version(state, version))
        again = parse_pyboy_state(data, cartridge_type=cart_type, ram_size_code=ram_code)
        assert again.version == version and write_pyboy_state(again) == data
        if name != "mbc5_rumble_ram":
            assert write_pyboy_state(parse_pyboy_state(data)) == data
        buf = io.BytesIO(data)
        pyboy.load_state(buf)  # PyBoy 2.8.1 must consume exactly the bytes we wrote
        assert buf.tell() == len(data), version
        assert state.cpu.pc == pyboy.register_file.PC
    pyboy.stop(save=False)


# --------------------------------------------------------------------------------------------------
# Errors


def test_truncation_at_every_block_boundary(mbc1_state: tuple[bytes, bytes]) -> None:
    _, data = mbc1_state
    hints = {"cartridge_type": 0x03, "ram_size_code": 0x03}
    for name, offset, size in pyboy_state_blocks(data):
        for cut in {offset, offset + 1, offset + size - 1}:
            with pytest.raises(PyBoyStateError, match="truncated") as err:
                parse_pyboy_state(data[:cut], **hints)
            if offset < cut < offset + size:
                assert f"the {name} block ran out" in str(err.value)
            with pytest.raises(PyBoyStateError):
                parse_pyboy_state(data[:cut])


def test_truncation_messages_without_hints(mbc1_state: tuple[bytes, bytes]) -> None:
    _, data = mbc1_state
    blocks = {name: (offset, size) for name, offset, size in pyboy_state_blocks(data)}
    for name in ("header", "cpu", "lcd", "sound", "renderer", "timer"):
        offset, size = blocks[name]
        with pytest.raises(PyBoyStateError, match=f"the {name} block ran out"):
            parse_pyboy_state(data[: offset + size // 2])
    with pytest.raises(PyBoyStateError, match="the cartridge block ran out"):
        parse_pyboy_state(data[: blocks["cartridge"][0] + 100])
    for name in ("cartridge", "interaction", "serial", "sgb"):  # which one is ambiguous without the header
        offset, size = blocks[name]
        with pytest.raises(PyBoyStateError, match="ends in the cartridge block .* or a block after it"):
            parse_pyboy_state(data[: offset + size - 1])
    with pytest.raises(PyBoyStateError, match="truncated"):
        parse_pyboy_state(b"")


def test_trailing_garbage(mbc1_state: tuple[bytes, bytes]) -> None:
    _, data = mbc1_state
    for extra in (b"\x00", b"\x00\x00", b"\xff" * 7, b"\x00" * 33):
        with pytest.raises(PyBoyStateError, match="trailing garbage"):
            parse_pyboy_state(data + extra, cartridge_type=0x03, ram_size_code=0x03)
        with pytest.raises(PyBoyStateError, match="trailing garbage"):
            parse_pyboy_state(data + extra)


def test_unsupported_versions(mbc1_state: tuple[bytes, bytes]) -> None:
    _, data = mbc1_state
    for version in (0, 1, STATE_VERSION + 1, 0xFF):
        with pytest.raises(PyBoyStateError, match="unsupported PyBoy state version"):
            parse_pyboy_state(bytes([version]) + data[1:])
    state = parse_pyboy_state(data)
    state.version = STATE_VERSION + 1
    with pytest.raises(PyBoyStateError, match="unsupported"):
        write_pyboy_state(state)


def test_cgb_states_are_refused(mbc1_state: tuple[bytes, bytes]) -> None:
    _, data = mbc1_state
    lcd_offset = dict((n, o) for n, o, _ in pyboy_state_blocks(data))["lcd"]
    cgb_flag_in_lcd = lcd_offset + 0x2000 + 0xA0 + 4 + 3 + 4 + 1 + 144 * 5
    for at in (5, cgb_flag_in_lcd):
        bad = bytearray(data)
        bad[at] = 1
        with pytest.raises(PyBoyStateError, match="CGB states are not supported"):
            parse_pyboy_state(bytes(bad))
    pyboy = new_pyboy(make_rom(0x00, 0x00, counter_program(), cgb=True))
    pyboy.tick(5)
    with pytest.raises(PyBoyStateError, match="CGB states are not supported"):
        snapshot_pyboy(pyboy)
    pyboy.stop(save=False)


def test_bad_hints_and_inputs(mbc1_state: tuple[bytes, bytes]) -> None:
    _, data = mbc1_state
    with pytest.raises(PyBoyStateError, match="cartridge type"):
        parse_pyboy_state(data, cartridge_type=0x20)
    with pytest.raises(PyBoyStateError, match="RAM size code"):
        parse_pyboy_state(data, ram_size_code=9)
    with pytest.raises(PyBoyStateError, match="must be bytes"):
        parse_pyboy_state("not bytes")  # type: ignore[arg-type]
    with pytest.raises(PyBoyStateError, match="MBC5 rumble flag"):
        parse_pyboy_state(data, cartridge_type=0x1B, ram_size_code=0x03)  # MBC1 BANK1=3 read as rumble flag
    assert write_pyboy_state(parse_pyboy_state(bytearray(data))) == data


def test_bad_values_on_write(mbc1_state: tuple[bytes, bytes]) -> None:
    _, data = mbc1_state
    state = parse_pyboy_state(data)
    edits = {
        "cpu.a": lambda s: setattr(s.cpu, "a", 256),
        "cpu.pc": lambda s: setattr(s.cpu, "pc", -1),
        "cpu.cycles": lambda s: setattr(s.cpu, "cycles", 1.5),
        "lcd.vram": lambda s: setattr(s.lcd, "vram", np.zeros(100, np.uint8)),
        "ram.hram": lambda s: setattr(s.ram, "hram", np.full(0x7F, 300)),
        "cartridge.ram": lambda s: setattr(s.cartridge, "ram", np.zeros((3, 0x2000), np.uint8)),
        "sound.audio_buffer": lambda s: setattr(s.sound, "audio_buffer", np.zeros(5, np.uint8)),
        "timer": lambda s: setattr(s, "timer", None),
        "cartridge": lambda s: setattr(s.cartridge, "rtc", copy.deepcopy(s.cartridge.mbc1)),
    }
    for what, edit in edits.items():
        bad = copy.deepcopy(state)
        edit(bad)
        with pytest.raises(PyBoyStateError, match=re.escape(f"bad value for {what}")):
            write_pyboy_state(bad)
    assert write_pyboy_state(state) == data


def test_restore_refuses_a_different_cartridge(mbc1_state: tuple[bytes, bytes]) -> None:
    _, data = mbc1_state
    pyboy = new_pyboy(cart_rom("mbc5_ram"))
    with pytest.raises(PyBoyStateError, match="does not fit the loaded cartridge"):
        restore_pyboy(pyboy, parse_pyboy_state(data))
    pyboy.stop(save=False)


def _parse_or_error(data: bytes, **hints: int) -> None:
    """Parsing either succeeds, and then writes back the same bytes, or raises PyBoyStateError."""
    try:
        state = parse_pyboy_state(data, **hints)
    except PyBoyStateError as err:
        assert "\n" not in str(err)
        return
    assert write_pyboy_state(state) == data


def test_fuzz_flips_truncations_and_noise(mbc1_state: tuple[bytes, bytes]) -> None:
    _, data = mbc1_state
    rng = random.Random(1234)
    boundaries = [offset for _, offset, _ in pyboy_state_blocks(data)]
    for _ in range(300):
        bad = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            # Favour the first bytes of blocks, where versions, flags and sizes live.
            near_start = rng.random() < 0.6
            at = rng.choice(boundaries) + rng.randint(0, 40) if near_start else rng.randrange(len(bad))
            bad[min(at, len(bad) - 1)] = rng.randrange(256)
        if rng.random() < 0.3:
            del bad[rng.randrange(len(bad)) :]
        _parse_or_error(bytes(bad))
        _parse_or_error(bytes(bad), cartridge_type=0x03, ram_size_code=0x03)
    for version in range(256):  # every version byte on an otherwise valid state
        _parse_or_error(bytes([version]) + data[1:])
    for n in (0, 1, 5, 100, 2000, 150_000, 200_000):
        _parse_or_error(rng.randbytes(n))
