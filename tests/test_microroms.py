"""The micro-ROM suite: every ROM assembles with a valid header and leaves its signature in PyBoy."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyboy")

from gbxcule.asm import CartridgeHeader  # noqa: E402
from gbxcule.backends.pyboy_single import PyBoySingleBackend  # noqa: E402
from gbxcule.core.action_codec import get_codec  # noqa: E402
from gbxcule.core.cartridge import parse_header  # noqa: E402
from gbxcule.core.pyboy_state import snapshot_pyboy  # noqa: E402
from gbxcule.core.schedule import ActionSchedule  # noqa: E402
from gbxcule.roms import build_rom, get_spec, suite, write_rom  # noqa: E402
from gbxcule.roms.micro import joy_diverge  # noqa: E402
from gbxcule.roms.micro.common import DONE_ADDR, DONE_VALUE  # noqa: E402

CODEC = "dmg_buttons_v0"
REQUIRED = {"ALU_LOOP", "MEM_RWB", "JOY_DIVERGE_PERSIST", "FLAGS_DAA", "OPS16_SP", "CB_BITS", "LOADS",
            "CONTROL_FLOW", "INTERRUPTS", "TIMER", "SERIAL", "OAM_DMA", "OAM_DMA_RACE", "IDLE_LOOPS", "MBC1_RAM",
            "MBC3_RAM", "MBC5_RAM", "PPU_BG_STATIC", "PPU_BG_SCROLL", "PPU_WINDOW", "PPU_SPRITES"}
NAMES = sorted(suite())
EXTRA_FRAMES = 30  # the signature must still hold this much later


def test_suite_has_every_required_rom():
    assert set(NAMES) >= REQUIRED


@pytest.mark.parametrize("name", NAMES)
def test_rom_assembles_with_valid_header(name):
    spec = get_spec(name)
    rom = build_rom(name)
    info = parse_header(rom)
    hdr = spec.header()
    assert isinstance(hdr, CartridgeHeader)
    assert info.logo_valid and info.header_checksum_valid and info.global_checksum_valid
    assert (info.cartridge_type, info.rom_size_code, info.ram_size_code) == (hdr.cartridge_type, hdr.rom_size,
                                                                             hdr.ram_size)
    assert info.mbc is not None and info.rom_size == len(rom)
    assert info.cgb_flag == 0 and info.sgb_flag == 0
    assert rom[0x100:0x101] == b"\x00" and rom[0x101] == 0xC3  # nop / jp main


@pytest.mark.parametrize("name", NAMES)
def test_signature_is_well_formed(name):
    sig = get_spec(name).signature()
    assert sig[DONE_ADDR] == bytes([DONE_VALUE])
    spans = sorted((addr, addr + len(data)) for addr, data in sig.items())
    assert all(data for data in sig.values())
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False)), spans
    assert spans[-1][1] <= 0x10000


def _run(path, action: int, frames: int, held: bool) -> PyBoySingleBackend:
    backend = PyBoySingleBackend(str(path), num_envs=1, codec=CODEC,
                                 schedule=ActionSchedule(frames_per_step=1, release_after_frames=int(held)))
    backend.reset()
    for _ in range(frames):
        backend.step(np.array([action], dtype=np.int32))
    return backend


def _mismatches(backend: PyBoySingleBackend, sig: dict[int, bytes]) -> list[str]:
    out = []
    for addr, want in sorted(sig.items()):
        got = bytes(backend.read_memory(0, addr, addr + len(want)))
        out += [f"{addr + i:04X}: got {g:02X}, want {w:02X}" for i, (g, w) in enumerate(zip(got, want,
                                                                                             strict=True))
                if g != w]
    return out


@pytest.mark.parametrize("name", NAMES)
def test_signature_in_pyboy(name, tmp_path):
    spec = get_spec(name)
    sig = spec.signature()
    backend = _run(write_rom(name, tmp_path), action=0, frames=spec.frames, held=False)
    try:
        assert _mismatches(backend, sig)[:20] == []
        for _ in range(EXTRA_FRAMES):
            backend.step(np.array([0], dtype=np.int32))
        assert _mismatches(backend, sig)[:20] == []
        if "benchmark" in spec.covers:  # benchmark workloads never idle
            assert not snapshot_pyboy(backend.games[0].pyboy).cpu.halted
    finally:
        backend.close()


def test_joy_diverge_reaches_different_modes(tmp_path):
    path = write_rom("JOY_DIVERGE_PERSIST", tmp_path)
    codec = get_codec(CODEC)
    modes = set()
    for action in (1, 2, 3, 5):  # A, B, SELECT, RIGHT, each held from power-on
        backend = _run(path, action=action, frames=get_spec("JOY_DIVERGE_PERSIST").frames, held=True)
        try:
            dpad, buttons = codec.to_joypad_mask(action)
            start = joy_diverge.BLOCK
            block = bytes(backend.read_memory(0, start, start + joy_diverge.BLOCK_SIZE))
            assert block == joy_diverge.expected_block(dpad << 4 | buttons), codec.actions[action]
            modes.add(block[0])
        finally:
            backend.close()
    assert len(modes) >= 3
    assert len({m & 3 for m in modes}) >= 3  # and so different inner loops
