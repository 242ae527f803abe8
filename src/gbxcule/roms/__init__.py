"""The ROMs gbxcule builds from Python source: the micro-ROM suite, the overworld game and the quest.

Every ROM is an entry in `SUITE` with its manifest: what it tests, the verify settings it is meant to be
run with, how many frames it needs to finish its work, and the memory signature it must leave by then,
computed in Python independently of the ROM's code. ROMs are built at run time, never committed.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path

from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import write_output
from gbxcule.core.paths import cache_dir
from gbxcule.roms.spec import RomSpec

DEFAULT_ROM = "OVERWORLD"  # the default workload of the main job, demos and benchmarks
ALIASES = {"DEMO": DEFAULT_ROM}


@cache
def suite() -> dict[str, RomSpec]:
    from gbxcule.roms.micro import MICRO_ROMS
    from gbxcule.roms.overworld import OVERWORLD
    from gbxcule.roms.quest import QUEST

    return {r.name: r for r in (*MICRO_ROMS, OVERWORLD, QUEST)}


def canonical(name: str) -> str | None:
    """The suite name a ROM argument refers to (case-insensitive, aliases resolved), or None."""
    key = ALIASES.get(name.upper(), name.upper())
    return key if key in suite() else None


def get_spec(name: str) -> RomSpec:
    key = canonical(name)
    if key is None:
        raise GbxculeError(f"unknown built-in ROM {name!r}; known: {', '.join(suite())} (alias: demo)")
    return suite()[key]


@cache
def build_rom(name: str) -> bytes:
    return get_spec(name).build().rom


def write_rom(name: str, out_dir: Path) -> Path:
    """Build a ROM into out_dir/NAME.gb (rewritten only when its bytes change)."""
    data = build_rom(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{get_spec(name).name}.gb"
    if not path.is_file() or path.read_bytes() != data:
        write_output(path, data)
    return path


def write_manifest(out_dir: Path) -> Path:
    entries = []
    for spec in suite().values():
        m = spec.manifest()
        m["sha1"] = hashlib.sha1(build_rom(spec.name)).hexdigest()
        entries.append(m)
    path = out_dir / "manifest.json"
    path.write_text(json.dumps({"roms": entries}, indent=2) + "\n")
    return path


def resolve_rom(arg: str) -> Path:
    """A ROM argument on the command line: an existing file, or a built-in ROM's name (built on demand)."""
    p = Path(arg)
    if p.exists() or "/" in arg or p.suffix or canonical(arg) is None:
        return p
    return write_rom(get_spec(arg).name, cache_dir() / "roms")
