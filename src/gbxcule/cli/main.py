"""The `gbxcule` command line: one subcommand per module in this package.

Every command has --help; commands that report take --json and then print exactly one JSON object on
stdout. Errors are one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from gbxcule import __version__
from gbxcule.cli.report import EXIT_ERROR
from gbxcule.core.errors import GbxculeError


def build_parser() -> argparse.ArgumentParser:
    from gbxcule.cli import (
        bench,
        bench_env,
        devcheck,
        evaluate,
        goal,
        info,
        play,
        plot,
        ram,
        roms,
        screenshot,
        testrom,
        train,
        verify,
    )

    parser = argparse.ArgumentParser(prog="gbxcule", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"gbxcule {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (roms, info, play, verify, testrom, bench, bench_env, screenshot, devcheck, goal, ram, train,
                   evaluate, plot):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as given (gbxcule train --gpus passes them on)
    try:
        return int(args.func(args) or 0)
    except (GbxculeError, ValueError) as exc:
        if not getattr(exc, "quiet", False):  # quiet: another process of a distributed run reports it
            sys.stderr.write(f"gbxcule {args.command}: error: {exc}\n")
        return EXIT_ERROR
    except ModuleNotFoundError as exc:  # an optional dependency (the rl extra: torch, gymnasium, matplotlib...)
        sys.stderr.write(f"gbxcule {args.command}: error: this command needs the Python package {exc.name!r}, "
                         f"which is not installed (pip install -e '.[rl]')\n")
        return EXIT_ERROR
    except OSError as exc:  # a file the checks could not foresee (permissions, disk full): still one line
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(f"gbxcule {args.command}: error: {where}{exc.strerror or exc}\n")
        return EXIT_ERROR
    except MemoryError:
        sys.stderr.write(f"gbxcule {args.command}: error: out of memory; try fewer envs\n")
        return EXIT_ERROR
    except RuntimeError as exc:  # Warp's allocator ("Failed to allocate N bytes on device ..."), or torch's
        text = str(exc)
        if "Failed to allocate" in text:
            sys.stderr.write(f"gbxcule {args.command}: error: {text.splitlines()[0]}; try fewer envs\n")
        elif "out of memory" in text or "not enough memory" in text:
            from gbxcule.core.memory import oom_summary

            sys.stderr.write(f"gbxcule {args.command}: error: out of memory ({oom_summary(text)}); try fewer envs\n")
        else:
            raise
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("gbxcule: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
