"""Every built-in ROM and its manifest entry are pinned: refactoring the ROM sources must not change a byte.

`tests/data/rom_hashes.json` holds, per ROM, the SHA-1 of the built ROM and of its manifest entry (canonical
JSON, signature included). A deliberate change to a ROM updates that table in the same commit.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from gbxcule.roms import build_rom, suite, write_manifest

PINNED = json.loads((Path(__file__).parent / "data" / "rom_hashes.json").read_text())


def test_pinned_table_names_every_rom():
    assert sorted(PINNED) == sorted(suite())


@pytest.mark.parametrize("name", sorted(PINNED))
def test_rom_and_manifest_are_byte_identical(name):
    spec = suite()[name]
    assert hashlib.sha1(build_rom(name)).hexdigest() == PINNED[name]["rom_sha1"]
    manifest = json.dumps(spec.manifest(), sort_keys=True).encode()
    assert hashlib.sha1(manifest).hexdigest() == PINNED[name]["manifest_sha1"]


def test_roms_build_manifest_carries_the_pinned_hashes(tmp_path):
    entries = json.loads(write_manifest(tmp_path).read_text())["roms"]
    assert {e["name"]: e["sha1"] for e in entries} == {n: p["rom_sha1"] for n, p in PINNED.items()}
