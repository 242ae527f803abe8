"""The quest's solution as data, one button script per milestone, and what the tests and the RL pack build from it.

The solution starts after `BOOT` (power-on, then waiting until the game takes input) and is the concatenation
of `SEGMENTS`: segment i ends with milestone i's flag set and the game back in walking mode, so the state after
`BOOT` and segments 1..i-1 is the start of milestone i's task (`quest_m<i>` in rl/packs/quest.toml). Scripts
are OVERWORLD's (gbxcule.roms.overworld.tasks.script: action letters with repeat counts, the
`pokemonred_puffer_v1` codec, 24 frames a step with the buttons held for 8).
"""

from __future__ import annotations

from gbxcule.roms.overworld.tasks import BOOT, CODEC, FRAMES_PER_STEP, RELEASE_AFTER_FRAMES, MemRead, script
from gbxcule.roms.quest.game import FAIL_FLAG, MILESTONE_CONDS, STATE, flag_cond
from gbxcule.roms.quest.world import MILESTONES

__all__ = ["BOOT", "CODEC", "FRAMES_PER_STEP", "RELEASE_AFTER_FRAMES", "script"]

BOOT_SCRIPT = "N5"  # power-on, then wait until the game takes input (BOOT as a script)

# (milestone, the script from the previous milestone's end to this one's): walk, talk, fight, use the BAG.
SEGMENTS: tuple[tuple[str, str], ...] = (
    ("MOM", "D3 R4 D A N A N A N A N"),  # to mom at the door, talk: berries; she steps aside
    ("ELDER", "D3 N R15 U N U3 A N A N A N A N A"),  # out, across the village to the hall, the elder: letter
    ("CLUB", "D4 N D2 R5 N R11 D5 R10 U N U3 R U A N A N A N A2"),  # east to the woods' hut: the letter for a club
    ("BRUTE", "D4 L N L2 U8 L5 U L U A N A3 N A3 N A R A2 N A L A2 N A3 N A N"),  # FIGHT, FIGHT, ITEM, FIGHT, FIGHT
    ("CAVE", "U4 N"),  # through the pass into the dark cave
    ("GEM", "U4 R2 D4 R2 U8 R2 U2 R2 D2 R4 U2 L2 U2 R5 A N A2 N"),  # the dark maze to the gem
    ("KEY", "L5 D2 R2 D2 L4 U2 L2 D2 L2 D8 L2 U4 L2 D5 N D7 L14 N L U2 L3 U N U3 A N A N A N A"),  # back to the elder
    ("GATE", "D4 N L4 U4 L4 U A N A N"),  # the key opens the north gate
    ("SHRINE", "U4 N U2 L3 U L U2 R8 U3 L8 U3 R7 U3 L7 U3 R6 U3 L5 U3 R6 U3 L4 U N"),  # up the hill path
    ("ALTAR", "U4 S A D2 N A N A N A N"),  # START, BAG, GEM, A in front of the altar
    ("SPRING", "D5 N D R4 D3 L6 D3 R5 D3 L6 D3 R7 D3 L7 D3 R8 D2 L8 D4 R4 D2 N D7 R8 U N U3 A N A N A"),  # the elder
)
SOLUTION = " ".join(text for _, text in SEGMENTS)

# The irreversible mistake, from the start of `quest_m8` (in the elder's hall with the gem and the key): out to the
# road below the north gate and, facing the peddler, START > BAG > GEM (the BAG: BERRY, CLUB, GEM, KEY) and A.
MISTAKE = "D4 N L4 U4 L4 S A D2 N A N A N A"
# A lost fight, from the start of `quest_m3` (the letter, no club yet): out to the brute and FIGHT three times; the
# third hit back ends the player's HP and sends them home (`Story.loss`).
LOSS = "D4 N D2 R5 N R11 U R2 U3 A N A3 N A3 N A3 N A N A N"


def segment_starts() -> tuple[str, ...]:
    """Per milestone, its task's start script: the boot and the segments before it."""
    return tuple(" ".join([BOOT_SCRIPT, *(t for _, t in SEGMENTS[:i])]) for i in range(len(SEGMENTS)))


def reached(read: MemRead) -> tuple[str, ...]:
    """The milestones whose flags are set."""
    return tuple(name for name, c in MILESTONE_CONDS if read(c["addr"]) & c["mask"] == c["value"])


def failed(read: MemRead) -> bool:
    """Whether the irreversible mistake was made (the gem given to the peddler)."""
    c = flag_cond(FAIL_FLAG)
    return read(c["addr"]) & c["mask"] == c["value"]


def state(read: MemRead) -> dict[str, int]:
    """The quest's documented state as numbers (gbxcule.roms.quest.STATE)."""
    from gbxcule.roms.overworld.tasks import state as decode

    return decode(read, STATE)


if [name for name, _ in SEGMENTS] != list(MILESTONES) or script(BOOT_SCRIPT) != BOOT:
    raise ValueError("quest tasks: one segment per milestone, in chain order, after OVERWORLD's boot")
