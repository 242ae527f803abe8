"""Where gbxcule keeps generated files: a project-local `.cache/` in a source checkout, else ~/.cache.

Override with GBXCULE_CACHE_DIR. Warp's kernel cache lives under it so repeated runs start warm.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    env = os.environ.get("GBXCULE_CACHE_DIR")
    if env:
        root = Path(env)
    else:
        checkout = Path(__file__).resolve().parents[3]
        root = checkout / ".cache" if (checkout / "pyproject.toml").is_file() else Path.home() / ".cache" / "gbxcule"
    root.mkdir(parents=True, exist_ok=True)
    return root
