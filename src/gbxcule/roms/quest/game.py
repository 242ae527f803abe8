"""The QUEST ROM: OVERWORLD's engine (gbxcule.roms.overworld.game) built from the quest's world, its documented
state and its manifest entry (docs/quest.md)."""

from __future__ import annotations

from functools import partial

from gbxcule.roms.overworld import game as engine
from gbxcule.roms.overworld.story import STORY_STATE
from gbxcule.roms.quest.world import FLAGS, MILESTONES, WORLD
from gbxcule.roms.spec import RomSpec, VerifySettings

MAP_NAMES = ", ".join(f"{i} {m.key}" for i, m in enumerate(WORLD.maps))
FLAG_BYTES = 4

# name -> (address, size, meaning); docs/quest.md has the same table.
STATE = {
    **engine.STATE,
    "MAP_ID": (0xC100, 1, f"current map ({MAP_NAMES})"),
    "FLAGS": (0xC104, 1, "engine flags: bit 4 read a sign, 5 saved"),
    "MODE": (0xC107, 1, "0 walking, 1 text box, 2 start menu or BAG, 3 map transition or boot fade, 4 fight"),
    **{f"EVENTS_{i}": (STORY_STATE["STORY_FLAGS"][0] + i, 1, "story flags " + ", ".join(
        f"bit {n % 8} {name}" for name, n in FLAGS.items() if n // 8 == i)) for i in range(FLAG_BYTES)},
    **{k: v for k, v in STORY_STATE.items() if k != "STORY_FLAGS"},
}
ADDR = {name: spec[0] for name, spec in STATE.items()}


def flag_cond(name: str) -> dict[str, int]:
    """A story flag as a RAM condition (addr, mask, value): set."""
    n = FLAGS[name]
    return {"addr": STORY_STATE["STORY_FLAGS"][0] + n // 8, "mask": 1 << n % 8, "value": 1 << n % 8}


MILESTONE_CONDS = tuple((name, flag_cond(name)) for name in MILESTONES)
FAIL_FLAG = "GEM_LOST"


def signature() -> dict[int, bytes]:
    """OVERWORLD's signature of the state after boot, built from the quest's tables, and the story's state."""
    story = WORLD.story
    assert story is not None
    start = STORY_STATE["STORY_FLAGS"][0]
    return engine.signature(WORLD) | {start: bytes(FLAG_BYTES) + bytes([0, story.hp, story.hp])}


QUEST = RomSpec(
    name="QUEST",
    description="a long quest on OVERWORLD's engine (8 maps, 11 milestones, items and a BAG, a fight, a dark maze, "
                "gates); the long benchmark for RL",
    covers=("game", "mbc3", "ram", "rom_banking", "vblank_halt", "oam_dma", "timer_irq", "stat_lyc", "window",
            "sprites_8x16", "scroll", "joypad"),
    source=partial(engine.source, WORLD),
    header=partial(engine.header, WORLD),
    frames=engine.BOOT_FRAMES,
    signature=signature,
    verify=VerifySettings(frames_per_step=24, release_after_frames=8, steps=2000, actions="seeded_random"),
)
