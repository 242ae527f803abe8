"""Finding the RAM byte of an event the way cheat finders do (`gbxcule ram`, docs/new_game.md). Pure numpy.

A trace is whitespace-separated tokens played from a start state: button-script tokens as in task scripts
("N5 R4 D6 R"), random segments (`?20`: 20 uniformly random actions) and marks (`|`): moments at which RAM is
compared. The trace's start is moment 0; a mark may carry a relation to the moment before it:

    |      a moment (later marks compare with it)
    |+ |-  the byte increased / decreased since the previous moment
    |= |!  the byte stayed the same / changed since the previous moment
    |=V    the byte equals V here (decimal or 0x hex); |!V: differs from V

A recording is one uint8 array per trace, [steps + 1, len(ADDRESSES)]: row t is RAM after t actions. The
search keeps the addresses at which every relation of every trace holds, so each extra trace narrows it.

`rank` orders what is left: a game that copies a whole room into WRAM on a room change leaves hundreds of bytes
that pass every relation. The byte of an event changes where the marks ask for a change (once between such a
mark and the moment before it) and nowhere else; bytes that also change at other steps (animation, timers,
scrolling, the player's position) come after it, the more such "stray" changes the later.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gbxcule.core.errors import GbxculeError

WRAM = (0xC000, 0xE000)  # the addresses searched: WRAM and HRAM (what a task's goal_ram may name)
HRAM = (0xFF80, 0xFFFF)
ADDRESSES = np.concatenate([np.arange(*WRAM), np.arange(*HRAM)]).astype(np.int64)
RELATIONS = {"+": "increased", "-": "decreased", "=": "unchanged", "!": "changed", "==": "equals", "!=": "differs from"}
MAX_CELLS = 50_000  # traces x steps a recording may hold (8,319 bytes each: about 416 MB)


class RamSearchError(GbxculeError, ValueError):
    """A trace or search that cannot work (bad token, unknown address, nothing to search)."""


@dataclass(frozen=True)
class Mark:
    """A moment of a trace: after `step` actions; `rel` (a RELATIONS key, or "" for none) against the previous
    moment, or against `value` for "==" and "!="."""

    step: int
    rel: str = ""
    value: int | None = None
    text: str = "|"


@dataclass(frozen=True)
class Trace:
    text: str
    actions: tuple[int, ...]
    marks: tuple[Mark, ...]  # in order; the trace's start (moment 0) is not listed


def _byte(text: str, token: str) -> int:
    try:
        v = int(text, 0)
    except ValueError:
        raise RamSearchError(f"bad mark {token!r}: {text!r} is not a number (decimal or 0x hex)") from None
    if not 0 <= v <= 0xFF:
        raise RamSearchError(f"bad mark {token!r}: {v} is not a byte (0..255)")
    return v


def parse_mark(token: str, step: int) -> Mark:
    body = token[1:]
    if body in ("", "+", "-", "=", "!"):
        return Mark(step, body, None, token)
    if body[0] in "=!":
        return Mark(step, "==" if body[0] == "=" else "!=", _byte(body[1:], token), token)
    raise RamSearchError(f"bad mark {token!r}: use | |+ |- |= |! |=V |!V")


def parse_trace(text: str, script: Callable[[str], Sequence[int]], num_actions: int, seed: int) -> Trace:
    """The actions and marks of a trace's text. `script` turns button-script tokens into actions (the task
    scripts' parser); `?N` segments draw N actions from `num_actions` with a generator seeded by `seed`."""
    rng = np.random.default_rng([seed, 0x4A4D])
    actions: list[int] = []
    marks: list[Mark] = []
    pending: list[str] = []

    def flush() -> None:
        if pending:
            actions.extend(int(a) for a in script(" ".join(pending)))
            pending.clear()

    for token in text.split():
        if token.startswith("|"):
            flush()
            marks.append(parse_mark(token, len(actions)))
        elif token.startswith("?"):
            flush()
            if not token[1:].isdigit() or int(token[1:]) < 1:
                raise RamSearchError(f"bad random segment {token!r}: use ?N with N >= 1 actions")
            actions.extend(int(a) for a in rng.integers(0, num_actions, size=int(token[1:])))
        else:
            pending.append(token)
    flush()
    if not actions:
        raise RamSearchError(f"trace {text!r} plays no action")
    return Trace(text, tuple(actions), tuple(marks))


def relation_holds(mark: Mark, prev: np.ndarray, cur: np.ndarray) -> np.ndarray:
    """bool [A]: where `mark`'s relation holds between the byte rows `prev` and `cur`."""
    p, c = prev.astype(np.int16), cur.astype(np.int16)
    if mark.rel == "+":
        return c > p
    if mark.rel == "-":
        return c < p
    if mark.rel == "=":
        return c == p
    if mark.rel == "!":
        return c != p
    if mark.rel == "==":
        return c == mark.value
    if mark.rel == "!=":
        return c != mark.value
    return np.ones(c.shape, dtype=bool)


def search(recordings: Sequence[np.ndarray], traces: Sequence[Trace],
           start: np.ndarray | None = None) -> tuple[np.ndarray, list[int]]:
    """(bool [A] of the addresses every relation keeps, the count left after each relation in order).
    `start`: bool [A] of the addresses to search (default all)."""
    keep = np.ones(recordings[0].shape[1], dtype=bool) if start is None else np.asarray(start, dtype=bool).copy()
    left = []
    for rec, trace in zip(recordings, traces, strict=True):
        prev = 0
        for mark in trace.marks:
            if mark.rel:
                keep &= relation_holds(mark, rec[prev], rec[mark.step])
                left.append(int(keep.sum()))
            prev = mark.step
    return keep, left


ASKS_CHANGE = ("+", "-", "!", "==", "!=")  # relations a byte may change for (once) since the previous moment


@dataclass(frozen=True)
class Rank:
    """Why a candidate ranks where it does: `stray` changes (at steps no mark asks about, or past the first
    between two moments a mark relates), `changes` in all, over every trace."""

    index: int  # the candidate's column in a recording (ADDRESSES)
    stray: int
    changes: int

    @property
    def why(self) -> str:
        if not self.changes:
            return "never changes"
        if not self.stray:
            return f"only at marks ({self.changes}x)"
        return f"{self.stray} stray change{'s' if self.stray != 1 else ''}"


def rank(recordings: Sequence[np.ndarray], traces: Sequence[Trace], columns: Sequence[int] | np.ndarray) -> list[Rank]:
    """The candidates (`columns` of the recordings) ordered as the module docstring says: fewest stray changes,
    then fewest changes, then address."""
    cols = np.asarray(columns, dtype=np.int64)
    stray = np.zeros(len(cols), dtype=np.int64)
    changes = np.zeros(len(cols), dtype=np.int64)
    for rec, trace in zip(recordings, traces, strict=True):
        sub = rec[:, cols]
        changed = (sub[1:] != sub[:-1]).astype(np.int64)  # row t: changed at step t + 1
        changes += changed.sum(axis=0)
        prev = 0
        for step in sorted({m.step for m in trace.marks}):
            n = changed[prev:step].sum(axis=0)  # changes at steps prev+1 .. step
            asks = any(m.rel in ASKS_CHANGE for m in trace.marks if m.step == step)
            stray += np.maximum(n - 1, 0) if asks else n
            prev = step
        stray += changed[prev:].sum(axis=0)  # after the last mark
    out = [Rank(int(c), int(s), int(n)) for c, s, n in zip(cols, stray, changes, strict=True)]
    return sorted(out, key=lambda r: (r.stray, r.changes, r.index))


def address_index(addrs: Sequence[int]) -> np.ndarray:
    """Column indices into a recording (ADDRESSES) of WRAM/HRAM addresses; echo RAM (0xE000-0xFDFF) maps to WRAM."""
    out = []
    for a in addrs:
        a = int(a)
        if 0xE000 <= a <= 0xFDFF:
            a -= 0x2000
        if WRAM[0] <= a < WRAM[1]:
            out.append(a - WRAM[0])
        elif HRAM[0] <= a < HRAM[1]:
            out.append(WRAM[1] - WRAM[0] + a - HRAM[0])
        else:
            raise RamSearchError(f"0x{a:04X} is not a WRAM (0xC000-0xDFFF) or HRAM (0xFF80-0xFFFE) address")
    return np.asarray(out, dtype=np.int64)


def parse_addresses(text: str) -> list[int]:
    """Addresses in hex from "0xC100,C101 $C102" (commas or spaces)."""
    out = []
    for part in text.replace(",", " ").split():
        digits = part[2:] if part.lower().startswith("0x") else part.removeprefix("$")
        try:
            out.append(int(digits, 16))
        except ValueError:
            raise RamSearchError(f"bad address {part!r} (hex: 0xC100, C100 or $C100)") from None
    if not out:
        raise RamSearchError("no address given")
    address_index(out)
    return out


def runs(values: Sequence[int]) -> str:
    """Bytes over time as hex runs: "00x5 01x3 02" (a value, then how many steps in a row it held)."""
    out: list[str] = []
    vals = [int(v) for v in values]
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[i]:
            j += 1
        out.append(f"{vals[i]:02X}" + (f"x{j - i + 1}" if j > i else ""))
        i = j + 1
    return " ".join(out)


def goal_line(addr: int, value: int, op: str = "eq", mask: int = 0xFF) -> str:
    """A pack's goal_ram line for one condition."""
    return goal_ram_line([(addr, value, op, mask)])


def goal_ram_line(conditions: Sequence[tuple[int, int, str, int]]) -> str:
    """A pack's goal_ram line for (addr, value, op, mask) conditions (all must hold)."""
    items = []
    for addr, value, op, mask in conditions:
        parts = [f"addr = 0x{addr:04X}"] + ([f"mask = 0x{mask:02X}"] if mask != 0xFF else [])
        parts += [f"value = 0x{value:02X}"] + ([f'op = "{op}"'] if op != "eq" else [])
        items.append("{ " + ", ".join(parts) + " }")
    return "goal_ram = [" + ", ".join(items) + "]"
