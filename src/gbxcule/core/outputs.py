"""Writing a command's output files: never over one of its inputs, atomically, one clear line on failure.

`write_output(path, write, inputs)` checks that `path` is not any input (same resolved path or same file
by device and inode, so hard links and symlinks count), has `write(tmp)` write a temporary file in the
target's folder, and renames it over `path`: a killed run leaves the old file or the new one, never half
of one. Permission and disk-space errors become a GbxculeError with one line.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from gbxcule.core.errors import GbxculeError

_UMASK = os.umask(0)
os.umask(_UMASK)


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.resolve() == b.resolve():
            return True
        sa, sb = a.stat(), b.stat()
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def check_not_input(path: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = ()) -> Path:
    """Raise GbxculeError if `path` names one of `inputs` (None entries are skipped); return it as a Path."""
    out = Path(path)
    if out.is_dir():
        raise GbxculeError(f"cannot write {out}: it is a directory")
    for given in inputs:
        if given is not None and _same_file(out, Path(given)):
            raise GbxculeError(f"refusing to write {out}: it is an input of this command ({given})")
    return out


def write_output(path: str | os.PathLike, write: Callable[[Path], object] | bytes | str,
                 inputs: Iterable[str | os.PathLike | None] = ()) -> Path:
    """Write `path` atomically: `write` is bytes, text, or a function that writes the path it is given."""
    out = check_not_input(path, inputs)
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
