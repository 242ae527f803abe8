"""OVERWORLD's world as data: maps drawn as text, their doors, edges, people and signs, and the texts.

The format (`Map`, `Person`, ..., `World`) is tables.py's; coordinates are map tiles, x to the right and y
down from the map's top-left corner; facings and directions 0 down, 1 up, 2 left, 3 right.
"""

from __future__ import annotations

from gbxcule.roms.overworld import art
from gbxcule.roms.overworld.tables import (
    DOWN,
    LEFT,
    LINE_CHARS,
    PAD,
    RIGHT,
    UP,
    Map,
    Person,
    Sign,
    Warp,
    World,
)

__all__ = ["DOWN", "LEFT", "LINE_CHARS", "PAD", "RIGHT", "UP", "Map", "Person", "Sign", "Warp", "World"]

# Flags (wFlags bits).
FLAG_LEFT_HOUSE, FLAG_VISITED_LAB, FLAG_VISITED_ROUTE = 0x01, 0x02, 0x04
FLAG_TALKED_HIKER, FLAG_READ_SIGN, FLAG_SAVED = 0x08, 0x10, 0x20

LEGEND = {
    ".": "grass", ":": "path", "T": "tree", ",": "tallgrass", "*": "flowers", "~": "water", "#": "fence",
    "S": "sign", "(": "roof_l", "^": "roof_m", ")": "roof_r", "=": "labroof", "w": "wall", "o": "window",
    "D": "door", "_": "floor", "H": "iwall", "h": "iwindow", "B": "shelf", "t": "table", "V": "tv",
    "b": "bed_top", "d": "bed_bot", "p": "plant", "M": "mat", " ": "void", "c": "counter", "X": "machine",
}
METATILE_IDS = {name: i for i, name in enumerate(art.METATILES)}

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
    ), LEGEND, warps=(Warp(6, 7, "town", 3, 6, DOWN),),
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
    ), LEGEND, warps=(Warp(3, 5, "home", 6, 6, UP), Warp(15, 13, "lab", 4, 6, UP)),
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
    ), LEGEND, warps=(Warp(4, 7, "town", 15, 14, DOWN),),
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
    ), LEGEND, people=(Person(5, 1, DOWN, "girl", "hiker", flag=FLAG_TALKED_HIKER, palette=1),),
        signs=(Sign(2, 21, "route_sign"),),
        edges={DOWN: ("town", 4)}, enter_flag=FLAG_VISITED_ROUTE),
)
MAP_IDS = {m.key: i for i, m in enumerate(MAPS)}
MAP_BY_KEY = {m.key: m for m in MAPS}
HOME, TOWN, LAB, ROUTE = (MAP_IDS[k] for k in ("home", "town", "lab", "route"))

WORLD = World("OVERWORLD", "GBXCULE WORLD", MAPS, TEXTS, art.METATILES, art.SOLID, art.HEADS, art.CHARACTERS,
              ("home", 1, 1, DOWN), FLAG_READ_SIGN, FLAG_SAVED)
WORLD.check()
START_MAP, START_X, START_Y, START_FACING = WORLD.start_map, *WORLD.start[1:]


def character_tile(character: str) -> int:
    """First sprite tile of a character's 6 frames (4 tiles each)."""
    return WORLD.character_tile(character)
