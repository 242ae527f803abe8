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
OBS_VIEWS = ("stride", "mean")  # how the 72x80 observation samples the screen: pixel (2r, 2c), or each 2x2 block's mean

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


# A 3x5 pixel font for captions: each glyph is 5 rows of 3 bits, most significant bit leftmost.
_GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001010010010",
    "8": "111101111101111", "9": "111101111001111", "A": "010101111101101", "B": "110101110101110",
    "C": "011100100100011", "D": "110101101101110", "E": "111100110100111", "F": "111100110100100",
    "G": "011100101101011", "H": "101101111101101", "I": "111010010010111", "J": "001001001101010",
    "K": "101101110101101", "L": "100100100100111", "M": "101111111101101", "N": "110101101101101",
    "O": "010101101101010", "P": "110101110100100", "Q": "010101101110011", "R": "110101110101101",
    "S": "011100010001110", "T": "111010010010010", "U": "101101101101111", "V": "101101101101010",
    "W": "101101111111101", "X": "101101010101101", "Y": "101101010010010", "Z": "111001010100111",
    " ": "000000000000000", "/": "001001010100100", "%": "101001010100101", ".": "000000000000010",
    ":": "000010000010000", "-": "000000111000000", "(": "010100100100010", ")": "010001001001010",
}


def text_bitmap(text: str, scale: int = 1) -> np.ndarray:
    """`text` (upper-cased; characters without a glyph drawn as spaces) in the 3x5 font, one column between
    glyphs: bool [5*scale, 4*len*scale - scale]."""
    cols = []
    for ch in text.upper():
        g = np.array([c == "1" for c in _GLYPHS.get(ch, _GLYPHS[" "])], dtype=bool).reshape(5, 3)
        cols += [g, np.zeros((5, 1), dtype=bool)]
    bits = np.concatenate(cols[:-1], axis=1) if cols else np.zeros((5, 0), dtype=bool)
    return np.kron(bits, np.ones((scale, scale), dtype=bool)).astype(bool)


def caption(frame: np.ndarray, text: str, scale: int = 1) -> np.ndarray:
    """`frame` (shades) with a band above it holding `text` in shade 3 on shade 0, cut at the frame's width."""
    bits = text_bitmap(text, scale)
    h, w = frame.shape
    band = np.zeros((bits.shape[0] + 2 * scale, w), dtype=np.uint8)
    shown = bits[:, :max(0, w - scale)]
    band[scale:scale + bits.shape[0], scale:scale + shown.shape[1]][shown] = 3
    return np.concatenate([band, np.asarray(frame, dtype=np.uint8)])


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
