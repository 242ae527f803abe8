"""Where gbxcule keeps generated files: a project-local `.cache/` in a source checkout, else ~/.cache.

Override with GBXCULE_CACHE_DIR. Warp's kernel cache lives under it so repeated runs start warm. A cache
folder that cannot be created or written falls back to a per-user folder in the temp dir, with a note.
"""

from __future__ import annotations

import os
import sys
import tempfile
from functools import cache
from pathlib import Path


def _writable(root: Path) -> bool:
    """Whether files can be created in `root` (made if missing): tried, not guessed from mode bits."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
        return True
    except OSError:
        return False


def _preferred() -> Path:
    env = os.environ.get("GBXCULE_CACHE_DIR")
    if env:
        return Path(env)
    checkout = Path(__file__).resolve().parents[3]
    return checkout / ".cache" if (checkout / "pyproject.toml").is_file() else Path.home() / ".cache" / "gbxcule"


def fallback_cache_dir() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    return Path(tempfile.gettempdir()) / f"gbxcule-cache-{uid}"


@cache
def _resolve(preferred: Path) -> Path:
    if _writable(preferred):
        return preferred
    root = fallback_cache_dir()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    sys.stderr.write(f"gbxcule: note: cache folder {preferred} is not writable; using {root}\n")
    return root


def cache_dir() -> Path:
    return _resolve(_preferred())
