"""RL tasks on the OVERWORLD game, at rising difficulty.

A task starts from power-on followed by a fixed button script (save states come later), and is solved
when its goal predicate holds on the documented WRAM state (`gbxcule.roms.overworld.STATE`), read after
any step. Actions are those of the `pokemonred_puffer_v1` codec under the default schedule (24 frames a
step, buttons held for the first 8). Agents see only pixels; the state is for scoring and debugging.

Scripts are written as tokens of an action letter and an optional repeat count: `N` noop, `A`, `B`,
`S` start, `U` up, `D` down, `L` left, `R` right; e.g. `"R4 D6 R"`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gbxcule.roms.overworld.game import ADDR, BOOT_FRAMES, STATE
from gbxcule.roms.overworld.world import FLAG_TALKED_HIKER, LAB, TOWN

CODEC = "pokemonred_puffer_v1"
FRAMES_PER_STEP, RELEASE_AFTER_FRAMES = 24, 8
ACTION_LETTERS = "NABSUDLR"  # the codec's action order

MemRead = Callable[[int], int]  # address -> byte


def script(text: str) -> tuple[int, ...]:
    """Action indices from a script such as "N5 R4 D6 R"."""
    out: list[int] = []
    for token in text.split():
        if token[0] not in ACTION_LETTERS or not (token[1:] == "" or token[1:].isdigit()):
            raise ValueError(f"bad script token {token!r}")
        out += [ACTION_LETTERS.index(token[0])] * int(token[1:] or 1)
    return tuple(out)


@dataclass(frozen=True)
class GameTask:
    """A task of the built-in game in Python (its goal a test on memory), checked against the ROM by
    tests/test_overworld.py; the RL env's tasks are data (`gbxcule.rl.tasks.Task`, rl/packs/overworld.toml)."""

    name: str
    description: str
    start: tuple[int, ...]  # actions from power-on that reach the start state
    goal: Callable[[MemRead], bool]
    step_limit: int  # steps an episode may take after the start script
    solution: tuple[int, ...]  # a known action sequence from the start state that reaches the goal


BOOT = script(f"N{-(-BOOT_FRAMES // FRAMES_PER_STEP)}")  # wait until the game takes input
LEAVE_HOUSE = script("R4 D6 R N2")  # from the bed to the door mat, then the transition
TO_ROUTE = script("D R6 U8 N")  # from the house door north out of town (and the transition)
ROUTE_CLIMB = script("U3 L U2 R4 U3 L4 U4 R4 U4 L3 U6 A")  # up the hill road to the hiker, and talk

TASKS: tuple[GameTask, ...] = (
    GameTask("leave_house", "walk from the bed out of the front door into town",
         BOOT, lambda read: read(ADDR["MAP_ID"]) == TOWN, 100, LEAVE_HOUSE),
    GameTask("reach_lab", "from the house door, cross town and enter the lab's door",
         BOOT + LEAVE_HOUSE, lambda read: read(ADDR["MAP_ID"]) == LAB, 200, script("D R6 D7 R6 U N")),
    GameTask("talk_to_hiker", "from the house door, climb the hill road north of town and talk to the hiker",
         BOOT + LEAVE_HOUSE, lambda read: bool(read(ADDR["FLAGS"]) & FLAG_TALKED_HIKER), 400,
         TO_ROUTE + ROUTE_CLIMB),
)
TASK_BY_NAME = {t.name: t for t in TASKS}


def state(read: MemRead, table: dict[str, tuple[int, int, str]] = STATE) -> dict[str, int]:
    """The documented state (`table`: name -> address, size, meaning) as numbers (two-byte fields little-endian)."""
    return {name: sum(read(addr + i) << 8 * i for i in range(size)) for name, (addr, size, _) in table.items()}
