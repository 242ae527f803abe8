"""A picture of the quest's world, drawn from its tables with OVERWORLD's map renderer (no emulator involved).

The village in the middle with the hill path above it and the east woods to its right, where their edges join;
the dark cave above the woods, its ladder over the cave mouth (drawn lit: the game shows only the tiles next to
the player); the four interiors in a column on the right. Everyone stands where the game starts them (mom at
the door, the brute at the pass), the player at its start tile. Written to docs/quest_map.png by
`python -m gbxcule.roms.quest.picture docs/quest_map.png`.
"""

from __future__ import annotations

import sys

import numpy as np

from gbxcule.roms.overworld.picture import LABEL, MT, compose, write_picture
from gbxcule.roms.overworld.tables import UP, Warp
from gbxcule.roms.quest.world import WORLD

GAP = LABEL + MT  # between maps stacked in a column


def _places() -> list[tuple[str, int, int]]:
    """(map, x, y) in pixels: each map's top-left corner."""
    m = WORLD.map_by_key
    village, hill, woods, cave = m["village"], m["hill"], m["woods"], m["cave"]
    _, offset = village.edges[UP]  # village x + offset = hill x
    cave_warp: Warp = next(w for w in woods.warps if w.dest == "cave")
    ladder: Warp = cave.warps[0]
    village_x = max(0, offset * MT)
    hill_x, woods_x = village_x - offset * MT, village_x + village.width * MT
    cave_x = woods_x + (cave_warp.x - ladder.x) * MT
    top = LABEL
    village_y = max(top + hill.height * MT, top + cave.height * MT) + GAP
    hill_y, cave_y = village_y - GAP - hill.height * MT, village_y - GAP - cave.height * MT
    right = max(woods_x + woods.width * MT, cave_x + cave.width * MT) + 2 * MT
    out = [("hill", hill_x, hill_y), ("village", village_x, village_y), ("woods", woods_x, village_y), ("cave", cave_x,
                                                                                                   cave_y)]
    y = top
    for key in ("home", "hall", "hut", "shrine"):
        out.append((key, right, y))
        y += m[key].height * MT + GAP
    return out


def render_world() -> np.ndarray:
    """Shade indices (0 white .. 3 black) of the world picture."""
    return compose([(WORLD.map_by_key[k], x, y) for k, x, y in _places()], WORLD)


def main(argv: list[str]) -> int:
    write_picture(render_world(), argv[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
