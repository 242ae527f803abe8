"""Malformed but runnable ROM files load with a warning and run in lockstep with PyBoy; the rest is refused.

Each case is a small ROM that reads 0x4000, 0x4063, 0x4064 and 0x7FFF after selecting ROM banks 1, 2 and 3
and stores what it read in WRAM, then counts in a loop. Short files are padded with 0xFF to whole 16 KiB
banks (at least two), and PyBoy is given the same padded bytes; a file of whole banks shorter than its
header is run as it is, so bank numbers wrap at the file's bank count exactly as in PyBoy.
"""

import hashlib
import io
import subprocess
import sys

import numpy as np
import pytest

from gbxcule.asm import CartridgeHeader, assemble
from gbxcule.core.cartridge import RomError, header_checksum, load_rom
from gbxcule.harness.verify import VerifyConfig, run_verify

ADDRS = (0x4000, 0x4063, 0x4064, 0x7FFF)
BANK = {0: 0xD8, 1: 0xA5, 2: 0xB6, 3: 0xC7}  # what the first 100 bytes of each bank hold
RESULT, COUNTER = 0xC000, 0xC010
FRAMES = 200  # PyBoy's boot ROM runs first; the program is done by then

SRC = f"""
SECTION "marker", ROM0[$0000]
    ds 100, ${BANK[0]:02X}
SECTION "entry", ROM0[$0100]
    nop
    jp main
SECTION "main", ROM0[$0150]
main:
    ld hl, ${RESULT:04X}
""" + "".join(
    f"    ld a, {bank}\n    ld [$2000], a\n" + "".join(f"    ld a, [${a:04X}]\n    ld [hl+], a\n" for a in ADDRS)
    for bank in (1, 2, 3)) + f"""
.loop:
    ld a, [${COUNTER:04X}]
    inc a
    ld [${COUNTER:04X}], a
    jr .loop
"""


def banks_src(banks: int) -> str:
    """ROMX banks 1..banks-1, each starting with 100 bytes of its marker."""
    return "".join(f'SECTION "b{n}", ROMX[$4000], BANK[{n}]\n    ds 100, ${BANK[n]:02X}\n'
                   for n in range(1, banks))


def build(cartridge_type: int, rom_size: int, length: int, size_code: int | None = None) -> bytes:
    """The test program with this header, cut to `length` bytes; `size_code` overrides 0x148."""
    header = CartridgeHeader(title="COMPAT", cartridge_type=cartridge_type, rom_size=rom_size, ram_size=0)
    data = bytearray(assemble(SRC + banks_src(min(4, 2 << rom_size)), header=header).rom)
    if size_code is not None:
        data[0x148] = size_code
        data[0x14D] = header_checksum(bytes(data))
    return bytes(data[:length])


# name -> (file bytes, padded length, warning needles, whether raw PyBoy runs the file as it is)
CASES = {
    "rom_only_16k_header_32k": (lambda: build(0x00, 0, 0x4000), 0x8000, ["16384 bytes", "padded"], False),
    "rom_only_16k_plus_100": (lambda: build(0x00, 0, 0x4064), 0x8000, ["16484 bytes", "padded"], False),
    "mbc1_32k_header_64k": (lambda: build(0x01, 1, 0x8000), 0x8000, ["declares 65536", "wrap at the 2"], True),
    "mbc1_32k_plus_100_header_64k": (lambda: build(0x01, 1, 0x8064), 0xC000,
                                     ["32868 bytes", "padded", "wrap at the 3"], False),
    "mbc1_unknown_size_code": (lambda: build(0x01, 0, 0x8000, size_code=0x52), 0x8000,
                               ["unknown ROM size code $52"], True),
}


def expected_reads(rom_only: bool, data: bytes) -> list[int]:
    """What the program stores: bank `n` is `n % banks` (ROM only: `n & 1`, 0 then reading bank 0)."""
    banks = len(data) // 0x4000
    out = []
    for n in (1, 2, 3):
        bank = (n & 1) if rom_only else n % banks
        out += [data[bank * 0x4000 + a - 0x4000] for a in ADDRS]
    return out


def write(tmp_path, name: str) -> tuple:
    make, padded, needles, raw_ok = CASES[name]
    data = make()
    p = tmp_path / f"{name}.gb"
    p.write_bytes(data)
    return p, data, padded, needles, raw_ok


def warp_reads(rom, frames: int = FRAMES) -> np.ndarray:
    from gbxcule.backends.warp_vec import WarpVecBackend
    from gbxcule.core.action_codec import get_codec
    from gbxcule.core.schedule import ActionSchedule

    dut = WarpVecBackend(rom, 1, get_codec("dmg_buttons_v0"), ActionSchedule(frames, 0), device="cpu")
    try:
        dut.step(np.zeros(1, dtype=np.int32))
        return dut.read_memory(0, RESULT, COUNTER + 1)
    finally:
        dut.close()


def pyboy_reads(data: bytes, frames: int = FRAMES) -> np.ndarray:
    from pyboy import PyBoy

    pb = PyBoy(io.BytesIO(data), window="null", sound_emulated=False, cgb=False, log_level="ERROR")
    try:
        pb.tick(frames, False)
        return np.asarray(pb.memory[RESULT:COUNTER + 1], dtype=np.uint8)
    finally:
        pb.stop(save=False)


@pytest.mark.parametrize("name", list(CASES))
def test_malformed_rom_loads_with_warning_and_runs_in_lockstep(name, tmp_path):
    p, data, padded, needles, raw_ok = write(tmp_path, name)
    rom = load_rom(p)
    assert len(rom.data) == padded and rom.data[:len(data)] == data
    assert set(rom.data[len(data):]) <= {0xFF}
    assert rom.file_bytes == data and rom.info.file_size == len(data)
    assert rom.info.sha1 == hashlib.sha1(data).hexdigest()  # of the file as given, not of the padded bytes
    text = " | ".join(rom.warnings)
    assert rom.warnings and all("\n" not in w for w in rom.warnings)
    for n in needles:
        assert n in text, text

    # reads of the missing area: 0xFF where padded, the wrapped bank where the file has whole banks
    reads = warp_reads(rom)
    want = expected_reads(rom.info.mbc == "none", rom.data)
    assert list(reads[:12]) == want
    assert np.array_equal(reads[:12], pyboy_reads(rom.data)[:12])
    if raw_ok:  # PyBoy runs the raw file the same way (whole banks: nothing padded)
        assert np.array_equal(reads[:12], pyboy_reads(data)[:12])

    cfg = VerifyConfig(rom=str(p), steps=10, frames_per_step=24, release_after_frames=8, actions="seeded_random",
                       seed=3, bundle_dir=str(tmp_path / "bundles"))
    result = run_verify(cfg, rom)
    assert result.ok, "\n".join(result.differences[:20])


def test_pyboy_refuses_or_misreads_the_raw_short_file(tmp_path):
    """Why padding is needed: PyBoy refuses a file that is not whole banks (it reads past its buffer on a
    single-bank file, so that is not a behaviour to match)."""
    from pyboy.utils import PyBoyException

    _, data, *_ = write(tmp_path, "rom_only_16k_plus_100")
    with pytest.raises(PyBoyException, match="divide evenly"):
        pyboy_reads(data)


def test_cart_config_sees_the_padded_bank_count(tmp_path):
    from gbxcule.core.cartridge import cart_config

    for name in CASES:
        p, _, padded, *_ = write(tmp_path, name)
        assert cart_config(load_rom(p)).rom_banks == padded // 0x4000


def test_rom_mirror_repeats_the_banks_up_to_a_power_of_two():
    """The kernels hold the ROM mirrored to a power-of-two length and mask the index (kernels/mbc.py
    rom_fetch4): every byte i of the mirror is byte i mod size of the ROM, for bank counts that are powers of
    two (unchanged) and those that are not (3 and 5 banks: bank numbers wrap as the modulo did)."""
    from gbxcule.core.cartridge import rom_mirror

    for banks in (2, 3, 4, 5, 64):
        data = bytes(np.random.default_rng(banks).integers(0, 256, banks * 0x4000, dtype=np.uint8))
        out = rom_mirror(data)
        assert len(out) & (len(out) - 1) == 0 and len(data) <= len(out) < 2 * len(data)
        idx = np.arange(len(out))
        assert np.array_equal(np.frombuffer(out, dtype=np.uint8), np.frombuffer(data, dtype=np.uint8)[idx % len(data)])
        for bank in (0, 1, banks - 1, banks, 7 * banks + 1, 1 << 16):  # in range, then wild
            got = out[((bank << 14) | 0x123) & (len(out) - 1)]
            if bank < banks or banks & (banks - 1) == 0:  # what the modulo read: power-of-two ROMs always
                assert got == data[(bank % banks) * 0x4000 + 0x123]


def test_well_formed_rom_has_no_warnings(tmp_path):
    p = tmp_path / "ok.gb"
    p.write_bytes(build(0x01, 1, 0x10000))
    rom = load_rom(p)
    assert rom.warnings == () and rom.data == p.read_bytes()


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "gbxcule", *args], capture_output=True, text=True, timeout=300)


def test_cli_prints_each_warning_as_one_line(tmp_path):
    p, *_ = write(tmp_path, "mbc1_32k_plus_100_header_64k")
    r = run_cli("info", str(p))
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 2 and all(x.startswith("gbxcule info: warning: ") for x in lines), r.stderr
    assert "padded" in lines[0] and "wrap at the 3" in lines[1]
    r = run_cli("play", str(p), "--steps", "1", "--backend", "warp_vec_cpu")
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if "warning" in x]
    assert len(lines) == 2 and all(x.startswith("gbxcule play: warning: ") for x in lines), r.stderr


def _patched(addr: int, value: int, fix: bool = True) -> bytes:
    """A well-formed 32 KiB ROM with one header byte changed (and its checksum fixed unless `fix` is off)."""
    data = bytearray(build(0x00, 0, 0x8000))
    data[addr] = value
    if fix:
        data[0x14D] = header_checksum(bytes(data))
    return bytes(data)


REFUSED = {
    "empty": (lambda: b"", "empty"),
    "no_header": (lambda: build(0x00, 0, 0x14F), "truncated"),
    "unsupported_type": (lambda: _patched(0x147, 0xFC), "unsupported cartridge type"),
    "unknown_ram_size": (lambda: _patched(0x149, 0x07), "unknown RAM size code"),
    "bad_header_checksum": (lambda: _patched(0x134, ord("X"), fix=False), "bad header checksum"),
    "oversized": (lambda: build(0x00, 0, 0x8000) + bytes(8 * 1024 * 1024), "oversized"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_cannot_run_is_still_refused(name, tmp_path):
    make, needle = REFUSED[name]
    p = tmp_path / f"{name}.gb"
    p.write_bytes(make())
    with pytest.raises(RomError, match=needle) as err:
        load_rom(p)
    assert "\n" not in str(err.value)


def test_cli_refuses_an_empty_file_with_one_line(tmp_path):
    p = tmp_path / "empty.gb"
    p.write_bytes(b"")
    r = run_cli("play", str(p), "--steps", "1")
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode != 0 and len(lines) == 1 and "empty" in lines[0] and "Traceback" not in r.stderr


def test_rom_words_hold_each_byte_and_the_three_after_it():
    """The kernels' ROM array (kernels/mbc.py rom_fetch4): word i = bytes i..i+3, wrapping at the end."""
    from gbxcule.core.cartridge import rom_words

    data = bytes(np.random.default_rng(5).integers(0, 256, 0x8000, dtype=np.uint8))
    w = rom_words(data)
    assert w.dtype == np.uint32 and len(w) == len(data)
    for i in (0, 1, 0x3FFD, 0x3FFF, 0x7FFD, 0x7FFF):
        assert [(int(w[i]) >> (8 * k)) & 0xFF for k in range(4)] == [data[(i + k) % len(data)] for k in range(4)]


def test_an_env_on_a_malformed_rom_warns_once(tmp_path):
    from gbxcule.rl.env import GameEnv

    p = write(tmp_path, next(iter(CASES)))[0]
    with pytest.warns(UserWarning) as caught:
        env = GameEnv(p, num_envs=1, device="cpu")
    env.close()
    assert len([w for w in caught if str(p) in str(w.message)]) == 1  # the env's ROM check, not its backend's too
