"""How commands report: one JSON object with --json, else human text; errors exit with EXIT_ERROR."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from gbxcule.core.fmt import json_safe

EXIT_ERROR = 2


def emit(args: argparse.Namespace, payload: dict, text: Callable[[dict], str]) -> None:
    """Print a command's report: one JSON object with --json, else the human text."""
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(json_safe(payload), sort_keys=True, default=str, allow_nan=False) + "\n")
    else:
        sys.stdout.write(text(payload).rstrip("\n") + "\n")
