"""Screens on the host: shade indices (0 = lightest .. 3 = darkest) to images, and PyBoy's RGBA to shades.

gbxcule renders shade indices (docs/rendering.md); images use the four DMG greys `DMG_GREYS`. PyBoy draws
RGBA with its "Grey" palette, which gbxcule passes explicitly (`PYBOY_GREYS`), so its screen maps back to
shade indices exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

DMG_GREYS = (0xFF, 0xAA, 0x55, 0x00)  # grey level of shades 0-3 in written images
PYBOY_GREYS = (0xFFFFFF, 0x999999, 0x555555, 0x000000)  # the palette gbxcule gives PyBoy

_PYBOY_RED = np.full(256, 255, dtype=np.uint8)
for _shade, _rgb in enumerate(PYBOY_GREYS):
    _PYBOY_RED[_rgb >> 16] = _shade


def pyboy_shades(rgba: np.ndarray) -> np.ndarray:
    """PyBoy's screen (RGBA [144,160,4]) as shade indices; 255 where a pixel is no palette colour
    (PyBoy's buffer is all zero before its first blank or drawn frame)."""
    rgba = np.asarray(rgba)
    shades = _PYBOY_RED[rgba[..., 0]]
    shades[rgba[..., 3] != 0xFF] = 255
    return shades


def image_shades(rgb: np.ndarray) -> np.ndarray:
    """An image in the four `DMG_GREYS` (e.g. dmg-acid2's reference) as shade indices; 255 elsewhere."""
    grey = np.asarray(rgb)
    grey = grey if grey.ndim == 2 else grey[..., 0]
    lut = np.full(256, 255, dtype=np.uint8)
    for shade, level in enumerate(DMG_GREYS):
        lut[level] = shade
    return lut[grey]


def to_image(shades: np.ndarray):
    """A PIL palette image of shade indices."""
    from PIL import Image

    img = Image.fromarray(np.ascontiguousarray(shades, dtype=np.uint8) & 3, mode="P")
    img.putpalette([v for level in DMG_GREYS for v in (level, level, level)])
    return img


def write_png(shades: np.ndarray, path: str | Path) -> None:
    to_image(shades).save(path, format="PNG")


def write_gif(frames: Sequence[np.ndarray], path: str | Path, frame_ms: int) -> None:
    """An animated GIF of shade frames, `frame_ms` per frame, looping."""
    if not frames:
        raise ValueError("no frames to write")
    images = [to_image(f) for f in frames]
    images[0].save(path, format="GIF", save_all=True, append_images=images[1:], duration=max(frame_ms, 10),
                   loop=0, optimize=False, disposal=1)


def mosaic(frames: np.ndarray, cols: int | None = None, gap: int = 2) -> np.ndarray:
    """Tile [N,H,W] shade frames row by row (`cols` a row, default ceil(sqrt(N))) with `gap` pixels of
    shade 3 between them."""
    n, h, w = frames.shape
    cols = cols or math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    out = np.full((rows * (h + gap) - gap, cols * (w + gap) - gap), 3, dtype=np.uint8)
    for i in range(n):
        r, c = divmod(i, cols)
        out[r * (h + gap):r * (h + gap) + h, c * (w + gap):c * (w + gap) + w] = frames[i]
    return out
