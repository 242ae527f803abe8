"""`gbxcule info ROM`: what a ROM's header says and whether gbxcule can run it."""

from __future__ import annotations

import sys

from gbxcule.cli.checks import cgb_only_note, rom_path
from gbxcule.core.cartridge import RomError, check_runnable, parse_header, read_rom_bytes


def register(sub) -> None:
    p = sub.add_parser("info", help="describe a ROM: title, cartridge type, sizes, checksums, CGB flag",
                       description="Describe a ROM file or built-in ROM from its cartridge header.")
    p.add_argument("rom", help="ROM file, or the name of a built-in ROM (see `gbxcule roms list`)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _text(d: dict) -> str:
    def size(n):
        return "unknown" if n is None else f"{n // 1024} KiB" if n >= 1024 else f"{n} B"

    ok = {True: "valid", False: "INVALID"}
    return "\n".join([
        f"file:             {d['path']}",
        f"title:            {d['title']!r}",
        f"cartridge type:   ${d['cartridge_type']:02X} {d['cartridge_name']} (mbc: {d['mbc'] or 'unsupported'})",
        f"ROM size:         {size(d['rom_size'])} (code ${d['rom_size_code']:02X}), file {d['file_size']} bytes",
        f"RAM size:         {size(d['ram_size'])} (code ${d['ram_size_code']:02X})",
        f"CGB flag:         ${d['cgb_flag']:02X} ({d['cgb_mode']})",
        f"SGB flag:         ${d['sgb_flag']:02X}",
        f"header checksum:  ${d['header_checksum']:02X} {ok[d['header_checksum_valid']]}",
        f"global checksum:  ${d['global_checksum']:04X} {ok[d['global_checksum_valid']]}",
        f"logo:             {ok[d['logo_valid']]}",
        f"sha1:             {d['sha1']}",
        f"runnable:         {'yes' if d['runnable'] else 'no: ' + d['problem']}",
    ] + [f"warning:          {w}" for w in d["warnings"]]
      + ([f"warning:          {d['warning']}"] if d["warning"] else []))


def run(args) -> int:
    from gbxcule.cli.report import EXIT_ERROR, emit

    path = rom_path(args.rom)
    info = parse_header(read_rom_bytes(path))
    warning = cgb_only_note(info)
    try:
        check_runnable(info)
        problem = None
    except RomError as exc:
        problem = str(exc)
    emit(args, {"path": str(path), **info.to_dict(), "runnable": problem is None, "problem": problem,
                "warning": warning}, _text)
    if not problem:
        for w in [*info.warnings, *([warning] if warning else [])]:
            sys.stderr.write(f"gbxcule info: warning: {w}\n")
    if problem:
        sys.stderr.write(f"gbxcule info: error: {problem}\n")
        return EXIT_ERROR
    return 0
