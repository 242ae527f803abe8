"""`gbxcule roms build|list`: the ROMs gbxcule builds from its own Python source."""

from __future__ import annotations

from gbxcule.roms import get_spec, suite, write_manifest, write_rom


def register(sub) -> None:
    p = sub.add_parser("roms", help="build or list the built-in ROMs",
                       description="Build or list the ROMs gbxcule assembles from Python source.")
    rsub = p.add_subparsers(dest="roms_command", metavar="ACTION", required=True)
    b = rsub.add_parser("build", help="assemble the built-in ROMs and write them with manifest.json",
                        description="Assemble built-in ROMs into a folder, with a manifest.json.")
    b.add_argument("names", nargs="*", help="ROMs to build (default: all)")
    b.add_argument("--out", default="build/roms", help="output folder (default: build/roms)")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.set_defaults(func=run_build)
    ls = rsub.add_parser("list", help="list the built-in ROMs and what each tests",
                         description="List the built-in ROMs with their manifest entries.")
    ls.add_argument("--json", action="store_true", help="print one JSON object")
    ls.set_defaults(func=run_list)


def run_build(args) -> int:
    from gbxcule.cli import checks
    from gbxcule.cli.report import emit

    out = checks.check_output_dir(args.out)
    names = [get_spec(n).name for n in args.names] or list(suite())
    built = {n: str(write_rom(n, out)) for n in names}
    manifest = write_manifest(out)
    emit(args, {"out": str(out), "roms": built, "manifest": str(manifest)},
         lambda d: "\n".join([f"built {len(d['roms'])} ROMs into {d['out']}"]
                             + [f"  {n:24s} {p}" for n, p in d["roms"].items()]
                             + [f"manifest: {d['manifest']}"]))
    return 0


def run_list(args) -> int:
    from gbxcule.cli.report import emit

    entries = [{"name": s.name, "description": s.description, "covers": list(s.covers), "frames": s.frames,
                "verify": s.verify.__dict__} for s in suite().values()]
    emit(args, {"roms": entries},
         lambda d: "\n".join(f"{e['name']:24s} {e['description']}" for e in d["roms"]))
    return 0
