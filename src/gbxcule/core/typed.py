"""Typed settings: a dataclass field's annotation and `knob` metadata decide which values it takes.

`check_fields(obj, where)` walks a (nested) dataclass and raises `SettingError` with one line naming the
setting and the value for the first one that does not fit: the wrong type (a string where a number is
wanted, "false" where a bool is, a bool where an int is), NaN or infinity, a value out of range or not
among the choices. Configs read from TOML, `--set` and checkpoints all pass through it before anything runs.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

from gbxcule.core.errors import GbxculeError

CHANGE = "change"  # a `resume` rule: continuing a run takes a new value
ONCE = "once"  # ... a setting of one invocation: continuing takes a new value, and the run does not keep it


class SettingError(GbxculeError, ValueError):
    """A setting of the wrong type or out of range."""


def knob(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, min: float | None = None,
         max: float | None = None, gt: float | None = None, choices: tuple | None = None, doc: str = "",
         resume: str | None = None, table: str | None = None):
    """A dataclass field with its limits: `min`/`max` inclusive, `gt` exclusive, `choices` for strings; `resume`:
    what continuing a run may do with it (the trainer's rule, read by `field_rule`; None: it must stay); `table`:
    for a table (dict) field whose keys a dataclass describes, that class as "module:Name" (`field_rule` reads the
    rules of the table's keys from it)."""
    meta = {k: v for k, v in (("min", min), ("max", max), ("gt", gt), ("choices", choices), ("doc", doc),
                              ("resume", resume), ("table", table)) if v not in (None, "")}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def field_rule(cls: Any, path: str, key: str) -> Any:
    """The `key` metadata of the field at dotted `path` in the dataclass `cls` (nested dataclasses followed, and a
    table field's `table` class; a path that goes on inside a table field without one, e.g. `env.backend.sort_key`,
    gets the table's), or None."""
    node: Any = cls
    for part in path.split("."):
        if not dataclasses.is_dataclass(node):
            return None
        hints = typing.get_type_hints(node if isinstance(node, type) else type(node))
        match = [f for f in dataclasses.fields(node) if f.name == part]
        if not match:
            return None
        meta = dict(match[0].metadata)
        if key in meta:
            return meta[key]
        node = _table_class(meta["table"]) if "table" in meta else hints.get(part)
    return None


def _table_class(where: str) -> Any:
    """The dataclass at "module:Name" (imported when a rule is asked for: the module may be heavier than this one)."""
    import importlib

    module, _, name = where.partition(":")
    return getattr(importlib.import_module(module), name)


def _describe(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _allowed(hint: Any) -> tuple[set, bool]:
    """The plain types a hint admits and whether None is one of them (X | None, Optional[X], unions)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        kinds, optional = set(), False
        for arg in typing.get_args(hint):
            if arg is type(None):
                optional = True
            else:
                sub, _ = _allowed(arg)
                kinds |= sub
        return kinds, optional
    if origin is not None:
        return {origin}, False
    return {hint}, False


def unsettable(hint: Any) -> bool:
    """Whether the word `none` unsets a setting of this annotation: it admits None and no string."""
    kinds, optional = _allowed(hint)
    return optional and not kinds & {str, Any, object}


def check_value(value: Any, hint: Any, meta: dict, name: str) -> None:
    """Raise SettingError unless `value` fits the annotation `hint` and the limits in `meta`."""
    kinds, optional = _allowed(hint)
    if value is None:
        if optional or Any in kinds:
            return
        raise SettingError(f"{name} must be set (got none)")
    if Any in kinds or object in kinds:
        return
    ok = False
    if isinstance(value, bool):
        ok = bool in kinds
        if not ok and kinds & {int, float}:
            raise SettingError(f"{name} must be a number, got {_describe(value)}")
    elif isinstance(value, int):
        ok = bool(kinds & {int, float})
    elif isinstance(value, float):
        ok = float in kinds
        if not ok and int in kinds and value.is_integer():
            raise SettingError(f"{name} must be an integer, got {value!r}")
    else:
        ok = any(isinstance(value, k) for k in kinds if isinstance(k, type))
    if not ok:
        want = " or ".join(sorted({_kind_word(k) for k in kinds}))
        hint_text = ""
        if bool in kinds and isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "on", "off"):
            hint_text = f" (write {value.lower() in ('true', 'yes', 'on')!s} without quotes: true or false)"
        raise SettingError(f"{name} must be {want}, got {_describe(value)}{hint_text}")
    if isinstance(value, float) and not math.isfinite(value):
        raise SettingError(f"{name} must be a finite number, got {value!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        lo, hi, gt = meta.get("min"), meta.get("max"), meta.get("gt")
        if lo is not None and value < lo:
            raise SettingError(f"{name} must be >= {lo}, got {value!r}")
        if hi is not None and value > hi:
            raise SettingError(f"{name} must be <= {hi}, got {value!r}")
        if gt is not None and value <= gt:
            raise SettingError(f"{name} must be > {gt}, got {value!r}")
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise SettingError(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}")


def _kind_word(kind: Any) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a table",
            list: "a list", tuple: "a list"}.get(kind, getattr(kind, "__name__", str(kind)))


def check_fields(obj: Any, where: str) -> None:
    """Check every field of the dataclass `obj` (nested dataclasses too) against its annotation and knob
    limits; the first misfit raises SettingError naming `where.field`."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        name = f"{where}.{f.name}" if where else f.name
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_fields(value, name)
            continue
        check_value(value, hints.get(f.name, Any), dict(f.metadata), name)
