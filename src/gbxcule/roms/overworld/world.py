"""The game world as data: maps drawn as text, their doors, edges, people and signs, and the texts.

Coordinates are map tiles (16x16 pixels, one metatile each), x to the right and y down from the map's
top-left corner. Facings and directions: 0 down, 1 up, 2 left, 3 right.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gbxcule.roms.overworld.art import CHARACTERS, METATILES, SOLID

DOWN, UP, LEFT, RIGHT = 0, 1, 2, 3
PAD = 5  # border metatiles stored around every map, so the camera never reads outside it

# Flags (wFlags bits).
FLAG_LEFT_HOUSE, FLAG_VISITED_LAB, FLAG_VISITED_ROUTE = 0x01, 0x02, 0x04
FLAG_TALKED_HIKER, FLAG_READ_SIGN, FLAG_SAVED = 0x08, 0x10, 0x20

LEGEND = {
    ".": "grass", ":": "path", "T": "tree", ",": "tallgrass", "*": "flowers", "~": "water", "#": "fence",
    "S": "sign", "(": "roof_l", "^": "roof_m", ")": "roof_r", "=": "labroof", "w": "wall", "o": "window",
    "D": "door", "_": "floor", "H": "iwall", "h": "iwindow", "B": "shelf", "t": "table", "V": "tv",
    "b": "bed_top", "d": "bed_bot", "p": "plant", "M": "mat", " ": "void", "c": "counter", "X": "machine",
}
METATILE_IDS = {name: i for i, name in enumerate(METATILES)}

# name -> pages of up to two lines of up to 17 characters.
TEXTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "mom": (("MOM: MORNING,", "SLEEPYHEAD!"), ("THE PROFESSOR", "WANTS TO SEE YOU.")),
    "tv": (("IT'S A QUIZ SHOW.", "NOBODY KNOWS IT."),),
    "town_sign": (("PEBBLE TOWN", "SMALL AND QUIET."),),
    "lab_sign": (("PEBBLE LAB", "PLEASE COME IN!"),),
    "kid": (("I'M GUARDING THE", "GARDEN!"), ("THE HILL ROAD", "IS UP NORTH.")),
    "prof": (("PROF: AH, THERE", "YOU ARE!"), ("I STUDY LITTLE", "PIXEL WORLDS."),
             ("GO SEE THE HIKER", "ON THE HILL ROAD!")),
    "books": (("LOTS OF BOOKS", "ABOUT GAME BOYS."),),
    "route_sign": (("HILL ROAD", "TOWN TO THE SOUTH"),),
    "hiker": (("HIKER: YOU MADE", "IT TO THE TOP!"), ("WHAT A VIEW!",)),
    "bag": (("THE BAG IS EMPTY.",),),
    "saved": (("THE GAME WAS", "SAVED."),),
}
TEXT_IDS = {name: i for i, name in enumerate(TEXTS)}
LINE_CHARS = 17


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
    x: int
    y: int
    facing: int
    character: str
    text: str
    wander: bool = False  # wanders within 2 tiles of (x, y), DIV as the random source
    flag: int = 0  # OR-ed into wFlags when talked to
    palette: int = 0  # 0: OBP0, 1: OBP1


@dataclass(frozen=True)
class Sign:
    x: int
    y: int
    text: str


@dataclass(frozen=True)
class Map:
    key: str
    title: str  # shown in the status bar
    bank: int  # ROM bank of its blocks
    border: str  # metatile shown outside it
    rows: tuple[str, ...]
    warps: tuple[Warp, ...] = ()
    people: tuple[Person, ...] = ()
    signs: tuple[Sign, ...] = ()
    edges: dict[int, tuple[str, int]] = field(default_factory=dict)  # direction -> (map, coordinate offset)
    enter_flag: int = 0

    @property
    def width(self) -> int:
        return len(self.rows[0])

    @property
    def height(self) -> int:
        return len(self.rows)

    def metatile(self, x: int, y: int) -> str:
        """The metatile at (x, y); the border outside the map."""
        if 0 <= x < self.width and 0 <= y < self.height:
            return LEGEND[self.rows[y][x]]
        return self.border

    def blocks(self) -> bytes:
        """Metatile ids, row by row, with PAD border metatiles on every side."""
        return bytes(METATILE_IDS[self.metatile(x, y)] for y in range(-PAD, self.height + PAD)
                     for x in range(-PAD, self.width + PAD))


MAPS: tuple[Map, ...] = (
    Map("home", "HOME", 2, "void", (
        "HHhHHHHhHH",
        "b______pV_",
        "d__tt_____",
        "___tt___BB",
        "BBBBB_____",
        "_______t__",
        "p__BB__t__",
        "______M__p",
    ), warps=(Warp(6, 7, "town", 3, 6, DOWN),),
        people=(Person(1, 5, RIGHT, "girl", "mom"),),
        signs=(Sign(8, 1, "tv"),)),
    Map("town", "PEBBLE TOWN", 4, "tree", (
        "TTTTTTTTT::TTTTTTTTT",
        "T........::........T",
        "T.**.....::...*.*..T",
        "T.(^^)...::........T",
        "T.owwo.S.::..~~~~..T",
        "T.wDww...::..~~~~..T",
        "T..:.....::..~~~~..T",
        "T..::::::::.....*..T",
        "T........::........T",
        "T.##.##..::........T",
        "T.#...#..::........T",
        "T.#...#..::.======.T",
        "T.#...#..::.owwwwo.T",
        "T.#####..::SwwwDww.T",
        "T........:::::::::.T",
        "T..~~~.............T",
        "T..~~~....**..*....T",
        "TTTTTTTTTTTTTTTTTTTT",
    ), warps=(Warp(3, 5, "home", 6, 6, UP), Warp(15, 13, "lab", 4, 6, UP)),
        people=(Person(4, 11, DOWN, "boy", "kid", wander=True),),
        signs=(Sign(7, 4, "town_sign"), Sign(11, 13, "lab_sign")),
        edges={UP: ("route", -4)}, enter_flag=FLAG_LEFT_HOUSE),
    Map("lab", "PEBBLE LAB", 2, "void", (
        "BBHhHHhHBB",
        "X________X",
        "_cccc_____",
        "__________",
        "BB_____BB_",
        "__________",
        "p________p",
        "____M_____",
    ), warps=(Warp(4, 7, "town", 15, 14, DOWN),),
        people=(Person(6, 2, DOWN, "elder", "prof"),),
        signs=(Sign(8, 0, "books"),), enter_flag=FLAG_VISITED_LAB),
    Map("route", "HILL ROAD", 4, "tree", (
        "TTTTTTTTTTTT",
        "TTT*....*TTT",
        "TT........TT",
        "TT...::...TT",
        "TTTTT::TTTTT",
        "TT,,,::,,,TT",
        "TT,,,:::::TT",
        "TT,,,,,,,:TT",
        "TTTTTTTT.:TT",
        "TT~~TTTT.:TT",
        "TT~~.....:TT",
        "TT..::::::TT",
        "TT..:TTTTTTT",
        "TT,,:,,,,,TT",
        "TT,,:,,,,,TT",
        "TT,,:::::.TT",
        "TTTTTTTT:.TT",
        "TT*.....:.TT",
        "TT..:::::.TT",
        "TT..:TTTTTTT",
        "TT..:....*TT",
        "TTS.::::..TT",
        "TT...::...TT",
        "TTTTT::TTTTT",
    ), people=(Person(5, 1, DOWN, "girl", "hiker", flag=FLAG_TALKED_HIKER, palette=1),),
        signs=(Sign(2, 21, "route_sign"),),
        edges={DOWN: ("town", 4)}, enter_flag=FLAG_VISITED_ROUTE),
)
MAP_IDS = {m.key: i for i, m in enumerate(MAPS)}
MAP_BY_KEY = {m.key: m for m in MAPS}
HOME, TOWN, LAB, ROUTE = (MAP_IDS[k] for k in ("home", "town", "lab", "route"))

START_MAP, START_X, START_Y, START_FACING = HOME, 1, 1, DOWN


def character_tile(character: str) -> int:
    """First sprite tile of a character's 6 frames (4 tiles each)."""
    return CHARACTERS.index(character) * 24


def _check() -> None:
    """Reject inconsistent tables at import, before any ROM is built from them."""
    problems = []
    for m in MAPS:
        if any(len(r) != m.width for r in m.rows) or any(ch not in LEGEND for r in m.rows for ch in r):
            problems.append(f"{m.key}: ragged rows or unknown map characters")
        if len(m.people) > 4:
            problems.append(f"{m.key}: more than 4 people")
        problems += [f"{m.key}: {w} is not on a door or mat" for w in m.warps if m.rows[w.y][w.x] not in "DM"]
        problems += [f"{m.key}: {w} lands on a solid tile" for w in m.warps
                     if MAP_BY_KEY[w.dest].metatile(w.dest_x, w.dest_y) in SOLID]
        problems += [f"{m.key}: {s} is not on a sign, TV or shelf" for s in m.signs if m.rows[s.y][s.x] not in "SVB"]
    problems += [f"text {k}: pages must have 1-2 lines of at most {LINE_CHARS} characters"
                 for k, pages in TEXTS.items()
                 if not all(1 <= len(p) <= 2 and all(len(line) <= LINE_CHARS for line in p) for p in pages)]
    if problems:
        raise ValueError("; ".join(problems))


_check()
