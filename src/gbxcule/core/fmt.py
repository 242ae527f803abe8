"""One number format for every report: rates as percent with one decimal, other numbers with three, `-` for
none (None, NaN); and strict JSON (NaN and infinities become null)."""

from __future__ import annotations

import math
from typing import Any


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and not math.isfinite(x))


def pct(x: float | None) -> str:
    """A rate in [0, 1] as a percent with one decimal ("62.5%"), or "-"."""
    return "-" if _missing(x) else f"{100 * x:.1f}%"


def num(x: float | None, spec: str = ".3f") -> str:
    """A number formatted with `spec`, or "-"."""
    return "-" if _missing(x) else format(x, spec)


def json_safe(obj: Any) -> Any:
    """`obj` with every non-finite float replaced by None (recursively through dicts, lists and tuples), and numpy
    scalars as Python numbers, so `json.dumps(..., allow_nan=False)` succeeds and the file is strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    item = getattr(obj, "item", None)  # numpy / torch scalars
    if callable(item) and getattr(obj, "ndim", None) == 0:
        return json_safe(item())
    return obj
