"""Writing a command's output files: never over one of its inputs or a run's files, atomically, one clear line.

`check_outputs(outputs, inputs)` is the one guard every command runs on the files it will write, before any
work: it refuses (`OutputError`, one line) an output that is a directory, is one of the command's inputs (same
resolved path or same file by device and inode, so hard links and symlinks count), is an entry of a training
run's folder (`RUN_FILES` in a folder holding a run, `run_entry`), or is given for two outputs of the same
command. `check_output_dir(folder, inputs)` does the same for a folder a command writes files into.

`write_output(path, write, inputs)` checks again (with `inputs` given: the same guard; None: a program's own
file, such as the trainer's run files or a build cache, only the directory check), has `write(tmp)` write a
temporary file in the target's folder, and renames it over `path`: a killed run leaves the old file or the new
one, never half of one. Permission and disk-space errors become a GbxculeError with one line.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from gbxcule.core.errors import GbxculeError

RUN_FILES = ("config.json", "facts.json", "metrics.jsonl", "summary.json", "eval.json", "nonfinite.json",
             "checkpoint.pt", "policy.pt", "best_policy.pt", "archive.npz", "tb")
"""The entries of a training run's folder (rl/rundir.py `Run` writes them): no command's output replaces one."""
RUN_MARKERS = ("checkpoint.pt", "policy.pt", "best_policy.pt", "metrics.jsonl", "facts.json")
"""Files only a training run writes: a folder holding one is a run's folder (a config.json alone is not)."""

_UMASK = os.umask(0)
os.umask(_UMASK)

PathArg = str | os.PathLike


class OutputError(GbxculeError):
    """An output that would replace an input of the command, a run's file, or another output of it."""


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.resolve() == b.resolve():
            return True
        sa, sb = a.stat(), b.stat()
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def is_run_folder(folder: Path) -> bool:
    """Whether `folder` holds a training run (one of `RUN_MARKERS`)."""
    return any((folder / m).is_file() for m in RUN_MARKERS)


def run_entry(path: PathArg) -> tuple[Path, str] | None:
    """(the run folder, the entry) when `path` is, or lies inside, an entry named in `RUN_FILES` of a run's
    folder (`RUN/checkpoint.pt`, `RUN/tb/...`), as given or through symlinks; else None."""
    given = Path(os.path.abspath(path))
    try:
        resolved = given.resolve()
    except OSError:
        resolved = given
    for p in dict.fromkeys((given, resolved)):
        for folder in p.parents:
            entry = p.relative_to(folder).parts[0]
            if entry in RUN_FILES and is_run_folder(folder):
                return folder, entry
    return None


def _refusal(out: Path, inputs: list[Path], earlier: list[Path]) -> str | None:
    for given in inputs:
        if _same_file(out, given):
            return f"it is an input of this command ({given})"
    hit = run_entry(out)
    if hit is not None:
        folder, entry = hit
        return f"it is {entry!r} of the training run in {folder} (a run's files are never written over)"
    for other in earlier:
        if _same_file(out, other) or os.path.abspath(out) == os.path.abspath(other):
            return f"it is given for two outputs of this command ({other})"
    return None


def check_outputs(outputs: Iterable[PathArg | None], inputs: Iterable[PathArg | None] = ()) -> None:
    """The guard (module docstring): raise OutputError unless every output (None entries are skipped) may be
    written."""
    ins = [Path(i) for i in inputs if i is not None]
    done: list[Path] = []
    for given in outputs:
        if given is None:
            continue
        out = Path(given)
        if out.is_dir():
            raise OutputError(f"cannot write {out}: it is a directory")
        why = _refusal(out, ins, done)
        if why:
            raise OutputError(f"refusing to write {out}: {why}; choose another path")
        done.append(out)


def check_output(path: PathArg, inputs: Iterable[PathArg | None] = ()) -> Path:
    """`check_outputs` for one output, returned as a Path."""
    check_outputs([path], inputs)
    return Path(path)


def check_output_dir(folder: PathArg, inputs: Iterable[PathArg | None] = ()) -> Path:
    """The guard for a folder a command writes its files into: not a file, not an input, not an entry of a run's
    folder (`RUN/tb`); a run's folder itself may take new files (each checked by `write_output`)."""
    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise OutputError(f"cannot write into {out}: it is a file, not a folder")
    why = _refusal(out, [Path(i) for i in inputs if i is not None], [])
    if why:
        raise OutputError(f"refusing to write into {out}: {why}; choose another folder")
    return out


def write_output(path: PathArg, write: Callable[[Path], object] | bytes | str,
                 inputs: Iterable[PathArg | None] | None = None) -> Path:
    """Write `path` atomically: `write` is bytes, text, or a function that writes the path it is given. With
    `inputs` (a command's output, even with no inputs: `()`), `check_outputs` first; None: a program's own file
    (a run's files written by its trainer, a cache), which may replace anything but a directory."""
    if inputs is None:
        out = Path(path)
        if out.is_dir():
            raise OutputError(f"cannot write {out}: it is a directory")
    else:
        out = check_output(path, inputs)
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=out.suffix or ".tmp")
        os.close(fd)
        tmp = Path(name)
        if isinstance(write, bytes):
            tmp.write_bytes(write)
        elif isinstance(write, str):
            tmp.write_text(write)
        else:
            write(tmp)
        with open(tmp, "rb+") as f:  # on disk before the rename, so a crash never leaves an empty file
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, out)
        tmp = None
    except OSError as exc:
        raise GbxculeError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return out
