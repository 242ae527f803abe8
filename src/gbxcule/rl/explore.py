"""Exploration you can see: envs' screens, the archive's deepest cells and heat maps of the cells over the
game's areas, as RGB images for TensorBoard (`run.image_every`) and PNGs (`gbxcule plot`), both drawn from one
snapshot that the run folder keeps (`archive.npz`, written with each checkpoint). Host side, numpy only.

A snapshot holds `screens` (the first 16 envs' screens), and with a state archive the used cells' records
(`keys`, `visits`, `steps`, `chosen`, `found`, `best`), the `frontier` (screens of the 16 deepest cells) and
`ram_cells` (1 when the keys hold RAM cells' bytes as they are: area, x, y in the low bytes; not where a place's
bytes and its milestones are hashed together, `archive.progress_key`).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from gbxcule.core.errors import GbxculeError
from gbxcule.core.screen import DMG_GREYS, mosaic

SCREENS = 16
CELL_PX = 8  # heat maps: pixels per cell
# a perceptually ordered ramp (dark blue -> green -> yellow), interpolated to 256 entries
_ANCHORS = np.array([(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)], dtype=np.float64)
_LUT = np.stack([np.interp(np.linspace(0, 4, 256), np.arange(5), _ANCHORS[:, c]) for c in range(3)], 1).astype(np.uint8)
_EMPTY = np.array((40, 40, 40), dtype=np.uint8)


def snapshot(env, screens: int = SCREENS) -> dict[str, np.ndarray]:
    """What the pictures need from a live `GameEnv`, on the host (synchronises: once per image or checkpoint)."""
    import torch
    import warp as wp

    out = {"screens": env.frames(range(min(screens, env.num_envs)))}
    if env.archive is not None:
        cells = env.archive.snapshot()
        out.update(cells)
        out["ram_cells"] = np.array(int(env.archive.place_in_keys))
        deepest = np.argsort(-cells["steps"], kind="stable")[:screens]
        slots = torch.as_tensor(deepest + env.num_slots, dtype=torch.int64, device=env.device)
        shots = wp.to_torch(env.backend.slot_frames()[1])  # on the host where the store is
        out["frontier"] = shots.index_select(0, slots.to(shots.device)).cpu().numpy()
    return out


def to_bytes(snap: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **snap)
    return buf.getvalue()


def load(path: str | Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError) as exc:
        raise GbxculeError(f"{path} is not a readable archive snapshot ({type(exc).__name__})") from None


def shades_rgb(shades: np.ndarray) -> np.ndarray:
    """Shade indices [H, W] as RGB uint8 [H, W, 3] in the DMG greys."""
    grey = np.asarray(DMG_GREYS, dtype=np.uint8)[np.asarray(shades) & 3]
    return np.repeat(grey[..., None], 3, axis=2)


def area_grids(snap: dict[str, np.ndarray], value: str) -> list[tuple[int, np.ndarray]]:
    """RAM cells: per area (the key's first byte), a grid [y, x] of `value` ("visits", "steps", "chosen") with
    NaN where no cell is; [] for pixel cells or an empty archive."""
    if not int(snap.get("ram_cells", 0)) or not len(snap.get("keys", ())):
        return []
    keys = snap["keys"].astype(np.int64)
    area, x, y = keys & 0xFF, (keys >> 8) & 0xFF, (keys >> 16) & 0xFF
    vals = snap[value].astype(np.float64)
    grids = []
    for a in np.unique(area):
        sel = area == a
        grid = np.full((int(y[sel].max()) + 1, int(x[sel].max()) + 1), np.nan)
        # several keys may share (area, x, y) when the cells have more bytes: keep the largest value
        for yy, xx, v in zip(y[sel], x[sel], vals[sel], strict=True):
            grid[yy, xx] = v if np.isnan(grid[yy, xx]) else max(grid[yy, xx], v)
        grids.append((int(a), grid))
    return grids


def heat_image(grids: list[tuple[int, np.ndarray]], log: bool = False) -> np.ndarray:
    """Area grids side by side (a gap between), CELL_PX pixels a cell, one colour scale over all of them."""
    finite = [g[np.isfinite(g)] for _, g in grids]
    f = (lambda v: np.log1p(np.maximum(v, 0))) if log else (lambda v: v)
    lo = min(float(f(v).min()) for v in finite)
    hi = max(float(f(v).max()) for v in finite)
    height = max(g.shape[0] for _, g in grids) * CELL_PX
    panels = []
    for _, g in grids:
        idx = np.zeros(g.shape, dtype=np.int64)
        ok = np.isfinite(g)
        idx[ok] = np.clip(np.rint(255 * (f(g[ok]) - lo) / max(hi - lo, 1e-9)), 0, 255)
        rgb = np.where(ok[..., None], _LUT[idx], _EMPTY)
        rgb = np.repeat(np.repeat(rgb, CELL_PX, 0), CELL_PX, 1)
        pad = np.zeros((height, rgb.shape[1] + 4, 3), dtype=np.uint8)
        pad[:rgb.shape[0], :rgb.shape[1]] = rgb
        panels.append(pad)
    return np.concatenate(panels, axis=1)[:, :-4]


def images(snap: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """RGB images (uint8 [H, W, 3]) by name: `explore/screens`, and with an archive `explore/frontier`, and for
    RAM cells `explore/visits` (log scale) and `explore/depth` (steps from the task's start of each cell)."""
    out = {"explore/screens": shades_rgb(mosaic(snap["screens"]))}
    if "frontier" in snap and len(snap["frontier"]):
        out["explore/frontier"] = shades_rgb(mosaic(snap["frontier"]))
    grids = area_grids(snap, "visits")
    if grids:
        out["explore/visits"] = heat_image(grids, log=True)
        out["explore/depth"] = heat_image(area_grids(snap, "steps"))
    return out


def achievement(last: dict, final: dict | None = None) -> str:
    """In plain words, what a run with a state archive achieved (its last log line, and the final eval)."""
    cells = last.get("archive/cells")
    if cells is None:
        return ""
    parts = []
    if final and final.get("success_rate") is not None:
        rate = 100 * final["success_rate"]
        parts.append(f"from the task's own start the greedy policy reached the goal in {rate:.0f}% of "
                     f"{final.get('episodes', 0)} episodes")
    if last.get("success_from_start") is not None:
        parts.append(f"in training, episodes from the task's start succeeded {100 * last['success_from_start']:.0f}% "
                     f"of the time (sampled policy)")
    areas = last.get("archive/areas")
    where = "" if areas is None else f" over {areas} area{'' if areas == 1 else 's'}"
    held = f"{cells:,} cell{'' if cells == 1 else 's'}{where}"
    parts.append(f"the archive holds {held}, the deepest {last.get('archive/max_depth', 0)} steps from the start; "
                 f"{100 * last.get('archive/p_start', 1.0):.0f}% of episodes now start at the task's start")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."
