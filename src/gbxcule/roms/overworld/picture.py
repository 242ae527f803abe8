"""A picture of the whole game world, drawn from the art and map tables (no emulator involved).

The hill road sits above the town where the two join, the house and the lab to the right; people stand
where they start, the player at its start tile. Written to docs/overworld_map.png by
`python -m gbxcule.roms.overworld.picture docs/overworld_map.png`.
"""

from __future__ import annotations

import sys

import numpy as np

from gbxcule.roms.overworld import art
from gbxcule.roms.overworld.game import OBP0, OBP1
from gbxcule.roms.overworld.tables import LEFT, RIGHT, UP, Map, World
from gbxcule.roms.overworld.world import MAP_BY_KEY, WORLD

MT = 16  # pixels per map tile
LABEL = 12  # pixels above each map for its name


def _pixels(rows: tuple[str, ...]) -> np.ndarray:
    return np.array([[0 if ch in ". " else int(ch) for ch in r] for r in rows], dtype=np.uint8)


def draw_text(img: np.ndarray, x: int, y: int, text: str) -> None:
    """`text` in the game's font with its top-left at (x, y)."""
    for i, ch in enumerate(text):
        img[y:y + 8, x + 8 * i:x + 8 * i + 8] = _pixels(art.glyph_tile(art.GLYPHS[ch]))


def _sprite(img: np.ndarray, x: int, y: int, character: str, facing: int, obp: int, heads=None) -> None:
    """A standing character with its top-left at (x, y); colour 0 is transparent."""
    frame = 2 * min(facing, LEFT)
    pix = _pixels(art.sprite_frame(character, frame, heads))
    if facing == RIGHT:
        pix = pix[:, ::-1]
    shade = np.array([obp >> 2 * c & 3 for c in range(4)], dtype=np.uint8)
    view = img[y:y + 16, x:x + 16]
    view[pix != 0] = shade[pix[pix != 0]]


def render_map(m: Map, world: World = WORLD) -> np.ndarray:
    """Shade indices of map `m` of `world` as the game starts: its tiles (a story's changes and darkness not
    applied, no flag set), the people there, the player at its start tile."""
    img = np.zeros((m.height * MT, m.width * MT), dtype=np.uint8)
    tiles = {name: _pixels(rows) for name, rows in world.metatiles.items()}
    for y in range(m.height):
        for x in range(m.width):
            img[y * MT:(y + 1) * MT, x * MT:(x + 1) * MT] = tiles[m.shown(x, y)]
    for p in m.people_shown():
        _sprite(img, p.x * MT, p.y * MT - 4, p.character, p.facing, OBP1 if p.palette else OBP0, world.heads)
    key, start_x, start_y, start_facing = world.start
    if m.key == key:
        _sprite(img, start_x * MT, start_y * MT - 4, "player", start_facing, OBP0, world.heads)
    return img


def compose(places, world: World = WORLD) -> np.ndarray:
    """Shade indices of the maps of `world` at their places ((map, x, y): each map's top-left pixel), each with its
    name above it."""
    width = max(x + m.width * MT for m, x, _ in places)
    height = max(y + m.height * MT for m, _, y in places)
    img = np.zeros((height, width), dtype=np.uint8)
    for m, x, y in places:
        pic = render_map(m, world)
        img[y:y + pic.shape[0], x:x + pic.shape[1]] = pic
        draw_text(img, x, y - LABEL + 1, m.title)
    return img


def render_world() -> np.ndarray:
    """Shade indices (0 white .. 3 black) of the world picture."""
    route, town, home, lab = (MAP_BY_KEY[k] for k in ("route", "town", "home", "lab"))
    _, offset = town.edges[UP]  # town x + offset = route x
    route_x = -offset * MT
    town_y = LABEL + route.height * MT + 2 * MT
    right_x = town.width * MT + 2 * MT
    return compose(((route, route_x, LABEL), (town, 0, town_y), (home, right_x, town_y),
                    (lab, right_x, town_y + home.height * MT + LABEL + MT)))


def write_picture(img: np.ndarray, path: str) -> None:
    """A world picture as a PNG, each pixel doubled."""
    from gbxcule.core.screen import write_png

    write_png(np.kron(img, np.ones((2, 2), dtype=np.uint8)), path)


def main(argv: list[str]) -> int:
    write_picture(render_world(), argv[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
