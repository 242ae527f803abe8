"""The format of a world: the tables the engine (game.py) builds a game from.

A `World` is maps drawn as text with their doors, edges, people and signs, the texts, the graphics and
where the player starts. OVERWORLD's world (world.py) uses only that. A world may add a `Story` (the
quest's, gbxcule.roms.quest): event flags, scripts that people and signs run when talked to (a condition,
flags to set and clear, a text, an action), items in a BAG, items used in places, fights, dark maps and
map tiles that change with the flags. The engine emits the code for a story only for a world that has one,
so a world without one builds the same ROM as before stories existed.

Coordinates are map tiles (16x16 pixels, one metatile each), x to the right and y down from the map's
top-left corner. Facings and directions: 0 down, 1 up, 2 left, 3 right.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property

DOWN, UP, LEFT, RIGHT = 0, 1, 2, 3
PAD = 5  # border metatiles stored around every map, so the camera never reads outside it
LINE_CHARS = 17  # characters on a text-box line
MAX_PEOPLE = 4
FOE_NAME = 6  # characters of a foe's name in the fight box (its HP bar follows)
MAX_HP = 99  # HP the fight box shows as two digits

Pages = tuple[tuple[str, ...], ...]  # pages of up to two lines of up to LINE_CHARS characters


@dataclass(frozen=True)
class Warp:
    """Arriving at (x, y) moves the player to (dest_x, dest_y) on map `dest`, facing `facing`."""

    x: int
    y: int
    dest: str
    dest_x: int
    dest_y: int
    facing: int


@dataclass(frozen=True)
class Person:
    """Someone standing on a map. `text` names a text (a world without a story) or a script (with one)."""

    x: int
    y: int
    facing: int
    character: str
    text: str
    wander: bool = False  # wanders within 2 tiles of (x, y), DIV as the random source
    flag: int = 0  # OR-ed into wFlags when talked to
    palette: int = 0  # 0: OBP0, 1: OBP1
    shown: str | None = None  # story only: a condition (`Story.cond`) under which the person is there


@dataclass(frozen=True)
class Sign:
    """Something read with A while facing it; `text` names a text (no story) or a script (a story)."""

    x: int
    y: int
    text: str


@dataclass(frozen=True)
class Change:
    """Story only: while condition `when` holds, the map shows metatile `metatile` at (x, y)."""

    x: int
    y: int
    when: str
    metatile: str


@dataclass(frozen=True)
class Map:
    key: str
    title: str  # shown in the status bar
    bank: int  # ROM bank of its blocks
    border: str  # metatile shown outside it
    rows: tuple[str, ...]
    legend: Mapping[str, str]  # map character -> metatile name
    warps: tuple[Warp, ...] = ()
    people: tuple[Person, ...] = ()
    signs: tuple[Sign, ...] = ()
    edges: dict[int, tuple[str, int]] = field(default_factory=dict)  # direction -> (map, coordinate offset)
    enter_flag: int = 0
    # story only:
    changes: tuple[Change, ...] = ()
    dark: bool = False  # only the 3x3 tiles around the player are drawn, the rest is black
    enter_event: str | None = None  # a story flag set on entering

    @property
    def width(self) -> int:
        return len(self.rows[0])

    @property
    def height(self) -> int:
        return len(self.rows)

    def metatile(self, x: int, y: int) -> str:
        """The metatile at (x, y); the border outside the map."""
        if 0 <= x < self.width and 0 <= y < self.height:
            return self.legend[self.rows[y][x]]
        return self.border

    def shown(self, x: int, y: int, flags: Collection[str] = ()) -> str:
        """The metatile drawn at (x, y) while the story flags `flags` are set (the last change that holds)."""
        tile = self.metatile(x, y)
        for c in self.changes:
            if (c.x, c.y) == (x, y) and holds(c.when, flags):
                tile = c.metatile
        return tile

    def people_shown(self, flags: Collection[str] = ()) -> tuple[Person, ...]:
        """The people on the map while the story flags `flags` are set, in table order."""
        return tuple(p for p in self.people if holds(p.shown, flags))

    def blocks(self, ids: Mapping[str, int]) -> bytes:
        """Metatile ids, row by row, with PAD border metatiles on every side."""
        return bytes(ids[self.metatile(x, y)] for y in range(-PAD, self.height + PAD)
                     for x in range(-PAD, self.width + PAD))


def holds(when: str | None, flags: Collection[str]) -> bool:
    """Whether a story condition (None, "FLAG" or "!FLAG") holds while the flags `flags` are set."""
    if when is None:
        return True
    return when[1:] not in flags if when.startswith("!") else when in flags


# --- stories -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    """One branch of a script: when condition `when` holds (None: always), set the flags in `sets`, clear
    `clear`, show text `text`, then heal (HP to full, berries refilled), fight foe `battle`, or reload the
    map (after a change to its tiles or people)."""

    when: str | None = None
    sets: tuple[str, ...] = ()
    clear: str | None = None
    text: str | None = None
    heal: bool = False
    reload: bool = False
    battle: str | None = None


@dataclass(frozen=True)
class Item:
    """An item in the BAG: held while flag `flag` is set, or (flag None) while the berry count is above 0."""

    key: str
    name: str  # as listed in the BAG (at most 7 characters)
    flag: str | None


@dataclass(frozen=True)
class Use:
    """Using item `item` from the BAG while facing (x, y) on map `map` runs script `script`."""

    map: str
    x: int
    y: int
    item: str
    script: str


@dataclass(frozen=True)
class Foe:
    """A fight: the foe's HP and attack; `win` is the flag set when it is beaten; the box shows `name`."""

    key: str
    name: str
    hp: int
    attack: int
    win: str
    strikes: str  # text shown when it hits the player
    beaten: str  # text shown when its HP runs out


@dataclass(frozen=True)
class Story:
    """What a world with a quest adds to the engine (docs/quest.md).

    Flags are bits numbered 0-31, 8 to a byte from the flags address; a condition is a flag's name, or `!name`
    for its being clear. Fixed texts the engine shows are named in `texts` (keys of `ENGINE_TEXTS`).
    """

    flags: Mapping[str, int]  # name -> bit number (0-31)
    scripts: Mapping[str, tuple[Record, ...]]
    items: tuple[Item, ...]
    uses: tuple[Use, ...]
    foes: tuple[Foe, ...]
    hp: int  # the player's HP, full
    berry_heal: int  # HP a berry restores (up to full)
    berries: int  # berries a heal refills to
    power: int  # damage of the player's hit
    weapon: str  # the flag of the item that adds `weapon_power`
    weapon_power: int
    loss: tuple[str, int, int, int]  # where a lost fight sends the player: map, x, y, facing
    dark: str  # the metatile drawn for unlit tiles of a dark map
    texts: Mapping[str, str]  # ENGINE_TEXTS key -> text name

    def flag(self, name: str) -> int:
        if name not in self.flags:
            raise ValueError(f"unknown story flag {name!r}")
        return self.flags[name]

    def cond(self, when: str | None) -> int:
        """A condition's byte: $FF always, n flag n set, $80 | n flag n clear."""
        if when is None:
            return 0xFF
        return 0x80 | self.flag(when[1:]) if when.startswith("!") else self.flag(when)


# The texts the engine itself shows in a story (the world names a text of its own for each).
ENGINE_TEXTS = ("nothing", "ate_berry", "no_berries", "hit", "ran", "fainted", "full")


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: the engine caches per world
class World:
    """A game: its maps, texts, graphics and start; the engine builds a ROM from it (game.source)."""

    name: str
    cart_title: str
    maps: tuple[Map, ...]
    texts: Mapping[str, Pages]
    metatiles: Mapping[str, tuple[str, ...]]  # name -> 16 rows of 16 pixels; order fixes the ids
    solid: frozenset[str]
    heads: Mapping[str, Mapping[str, tuple[str, ...]]]  # character -> facing -> 8 rows (art.HEADS)
    characters: tuple[str, ...]
    start: tuple[str, int, int, int]  # map, x, y, facing
    read_sign_flag: int  # wFlags bits set by reading a sign and by saving
    saved_flag: int
    warp_tiles: str = "DM"  # map characters a warp may stand on
    sign_tiles: str = "SVB"  # map characters a sign may stand on
    story: Story | None = None

    @cached_property
    def map_ids(self) -> dict[str, int]:
        return {m.key: i for i, m in enumerate(self.maps)}

    @cached_property
    def map_by_key(self) -> dict[str, Map]:
        return {m.key: m for m in self.maps}

    @cached_property
    def text_ids(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.texts)}

    @cached_property
    def metatile_ids(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.metatiles)}

    @property
    def start_map(self) -> int:
        return self.map_ids[self.start[0]]

    def character_tile(self, character: str) -> int:
        """First sprite tile of a character's 6 frames (4 tiles each)."""
        return self.characters.index(character) * 24

    def talk_id(self, name: str) -> int:
        """The byte a person or sign stores: a text id, or in a story a script id."""
        return list(self.story.scripts).index(name) if self.story else self.text_ids[name]

    def check(self) -> None:
        """Reject inconsistent tables before any ROM is built from them."""
        problems = []
        talks = set(self.story.scripts) if self.story else set(self.texts)
        for m in self.maps:
            if any(len(r) != m.width for r in m.rows) or any(ch not in m.legend for r in m.rows for ch in r):
                problems.append(f"{m.key}: ragged rows or unknown map characters")
                continue
            if len(m.people) > MAX_PEOPLE:
                problems.append(f"{m.key}: more than {MAX_PEOPLE} people")
            problems += [f"{m.key}: {w} is not on a door or mat" for w in m.warps
                         if m.rows[w.y][w.x] not in self.warp_tiles]
            problems += [f"{m.key}: {w} lands on a solid tile" for w in m.warps
                         if self.map_by_key[w.dest].metatile(w.dest_x, w.dest_y) in self.solid]
            problems += [f"{m.key}: {s} is not on a sign tile" for s in m.signs
                         if m.rows[s.y][s.x] not in self.sign_tiles]
            problems += [f"{m.key}: {t} names no script or text" for t in (*m.people, *m.signs)
                         if t.text not in talks]
            problems += [f"{m.key}: unknown metatile in {c}" for c in m.changes if c.metatile not in self.metatiles]
            if (m.changes or m.dark or m.enter_event or any(p.shown for p in m.people)) and not self.story:
                problems.append(f"{m.key}: changes, darkness, enter events and shown people need a story")
        problems += [f"text {k}: pages must have 1-2 lines of at most {LINE_CHARS} characters"
                     for k, pages in self.texts.items()
                     if not all(1 <= len(p) <= 2 and all(len(line) <= LINE_CHARS for line in p) for p in pages)]
        if self.story:
            problems += self._check_story(self.story)
        if problems:
            raise ValueError("; ".join(problems))

    def _check_story(self, s: Story) -> list[str]:
        problems = []
        if not all(0 <= n < 32 for n in s.flags.values()) or len(set(s.flags.values())) != len(s.flags):
            problems.append("story flags must be distinct bits 0-31")
        for name, records in s.scripts.items():
            if not records or records[-1].when is not None:
                problems.append(f"script {name}: its last record must have no condition (the fallback)")
            for r in records:
                try:
                    s.cond(r.when)
                    [s.flag(f) for f in (*r.sets, *([r.clear] if r.clear else []))]
                except ValueError as exc:
                    problems.append(f"script {name}: {exc}")
                if len(r.sets) > 2:
                    problems.append(f"script {name}: a record sets at most 2 flags")
                if r.text is not None and r.text not in self.texts:
                    problems.append(f"script {name}: unknown text {r.text!r}")
                if r.battle is not None and r.battle not in [f.key for f in s.foes]:
                    problems.append(f"script {name}: unknown foe {r.battle!r}")
        keys = [i.key for i in s.items]
        problems += [f"use {u}: unknown item, map or script" for u in s.uses
                     if u.item not in keys or u.map not in self.map_ids or u.script not in s.scripts]
        problems += [f"item {i.key}: name longer than 7" for i in s.items if len(i.name) > 7]
        problems += [f"foe {f.key}: name longer than {FOE_NAME}" for f in s.foes if len(f.name) > FOE_NAME]
        problems += [f"foe {f.key}: HP must be 1-{MAX_HP}" for f in s.foes if not 1 <= f.hp <= MAX_HP]
        if not 1 <= s.hp <= MAX_HP:
            problems.append(f"story: the player's HP must be 1-{MAX_HP}")
        problems += [f"engine text {k} not named" for k in ENGINE_TEXTS if s.texts.get(k) not in self.texts]
        if sum(i.flag is None for i in s.items) != 1:
            problems.append("exactly one item (the berry) is counted rather than flagged")
        for m in self.maps:
            try:
                [s.cond(p.shown) for p in m.people]
                [s.cond(c.when) for c in m.changes]
                if m.enter_event:
                    s.flag(m.enter_event)
            except ValueError as exc:
                problems.append(f"{m.key}: {exc}")
        if s.dark not in self.metatiles or s.loss[0] not in self.map_ids:
            problems.append("story: unknown dark metatile or loss map")
        return problems
