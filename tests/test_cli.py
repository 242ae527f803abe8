"""The command line: bad input gives one clear error line and a non-zero exit, never a traceback."""

import json
import subprocess
import sys

import pytest

from gbxcule.asm import CartridgeHeader, assemble
from gbxcule.core.cartridge import header_checksum

SRC = 'SECTION "e", ROM0[$0100]\n nop\n jp $0150\nSECTION "m", ROM0[$0150]\n jr @\n'


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "gbxcule", *args], capture_output=True, text=True, timeout=120)


def make_rom(tmp_path, name="t.gb", **header):
    h = dict(title="TEST", cartridge_type=0, rom_size=0, ram_size=0) | header
    data = assemble(SRC, header=CartridgeHeader(**h)).rom
    p = tmp_path / name
    p.write_bytes(data)
    return p, bytearray(data)


def assert_one_line_error(r, *needles):
    assert r.returncode != 0
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0]


def test_info_describes_valid_rom(tmp_path):
    p, _ = make_rom(tmp_path, cartridge_type=0x13, rom_size=2, ram_size=3)
    r = run_cli("info", str(p), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["title"] == "TEST" and d["mbc"] == "mbc3" and d["rom_size"] == 128 * 1024
    assert d["ram_size"] == 32 * 1024 and d["header_checksum_valid"] and d["global_checksum_valid"]
    assert d["cgb_mode"] == "dmg" and d["runnable"]


def test_missing_rom(tmp_path):
    assert_one_line_error(run_cli("info", str(tmp_path / "nope.gb")), "ROM not found")


def test_truncated_rom(tmp_path):
    p = tmp_path / "short.gb"
    p.write_bytes(b"\0" * 0x120)
    assert_one_line_error(run_cli("info", str(p)), "truncated")


def test_oversized_rom(tmp_path):
    p = tmp_path / "big.gb"
    with open(p, "wb") as f:
        f.truncate(9 * 1024 * 1024)
    assert_one_line_error(run_cli("info", str(p)), "oversized")


def test_rom_smaller_than_header_declares_runs_with_a_warning(tmp_path):
    p, data = make_rom(tmp_path, rom_size=1)  # declares 64 KiB
    p.write_bytes(bytes(data[:0x8000]))
    r = run_cli("play", str(p), "--steps", "1")
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "warning: the header declares 65536 bytes" in lines[0], r.stderr


def test_unsupported_cartridge_type(tmp_path):
    p, data = make_rom(tmp_path)
    data[0x147] = 0xFC  # pocket camera
    data[0x14D] = header_checksum(bytes(data))
    p.write_bytes(bytes(data))
    r = run_cli("info", str(p), "--json")
    assert r.returncode != 0 and "unsupported cartridge type" in r.stderr
    assert json.loads(r.stdout)["runnable"] is False  # info still reports what the header says
    assert_one_line_error(run_cli("play", str(p), "--steps", "1"), "unsupported cartridge type")


def test_bad_header_checksum(tmp_path):
    p, data = make_rom(tmp_path)
    data[0x14D] ^= 0xFF
    p.write_bytes(bytes(data))
    assert_one_line_error(run_cli("play", str(p), "--steps", "1"), "bad header checksum")


def test_bad_codec_choice_is_usage_error(tmp_path):
    p, _ = make_rom(tmp_path)
    r = run_cli("play", str(p), "--codec", "nope")
    assert r.returncode == 2 and "invalid choice" in r.stderr


@pytest.mark.parametrize("cmd", [[], ["info"], ["roms"], ["roms", "build"], ["roms", "list"], ["play"]])
def test_help_everywhere(cmd):
    r = run_cli(*cmd, "--help")
    assert r.returncode == 0 and "usage:" in r.stdout


def test_source_digest_names_the_code(tmp_path):
    from gbxcule.harness.bench import source_digest

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    first = source_digest(tmp_path)
    assert source_digest(tmp_path) == first
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    assert source_digest(tmp_path) != first
