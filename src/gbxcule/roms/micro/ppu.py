"""PPU_BG_STATIC, PPU_BG_SCROLL, PPU_WINDOW, PPU_SPRITES: scenes for the renderer, kept running.

Each ROM switches the LCD off, loads a shared tile set into $8000 and a BG map into $9800 (the window
ROM also a window map into $9C00), sets the palettes and registers, switches the LCD on, copies a read-back
of its PPU registers to $C000, writes the done marker and then animates from its interrupt handlers
while the main code HALTs in a loop (PPU_BG_STATIC just stops). The signature is the done marker, the
register read-back and the static VRAM contents; what the handlers change every frame is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from gbxcule.roms.micro.common import (
    HRAM_DMA,
    INT_STAT,
    INT_VBLANK,
    MARK_DONE,
    db,
    done,
    header,
    program,
)
from gbxcule.roms.spec import RomSpec, VerifySettings

REGS = 0xC000  # read-back of READBACK (STAT masked to its enable bits, $78)
READBACK = ("rLCDC", "rBGP", "rOBP0", "rOBP1", "rSCX", "rSCY", "rLYC", "rSTAT", "rWX", "rWY")
BGP, OBP0, OBP1 = 0xE4, 0xE4, 0xD8
SHADOW_OAM = 0xC100
FRAME = 0xFF90  # HRAM frame counter
TILE_DATA, BG_MAP, WIN_MAP = 0x8000, 0x9800, 0x9C00

_TILE_ART = (
    ["00000000"] * 8,  # 0 blank
    ["11111111"] * 8,  # 1..3 solid colours
    ["22222222"] * 8,
    ["33333333"] * 8,
    ["11221122", "11221122", "22112211", "22112211"] * 2,  # 4 checker
    ["".join(str((c + r) // 2 % 4) for c in range(8)) for r in range(8)],  # 5 stripes
    ["33333333", *["31111113"] * 6, "33333333"],  # 6 frame
    ["00033000"] * 3 + ["33333333"] * 2 + ["00033000"] * 3,  # 7 plus
    ["33333330", "32222220", "32000000", "33333000", "32222000", "32000000", "32000000", "11000000"],  # 8 F
    ["00333300", "03222230", "32211223", "32111123", "32111123", "32211223", "03222230", "00333300"],  # 9
    ["00033000", "00322300", "03222230", "32222223"] + ["00022000"] * 4,  # 10 arrow top (8x16)
    ["00011000"] * 4 + ["01111110", "01100110", "01000010", "33333333"],  # 11 arrow bottom
)
T_FRAME, T_F, T_BALL, T_TALL, T_SOLID3 = 6, 8, 9, 10, 3


def tile(rows: list[str]) -> bytes:
    """2bpp tile bytes from 8 rows of colour digits."""
    out = bytearray()
    for row in rows:
        out.append(sum(1 << (7 - i) for i, ch in enumerate(row) if int(ch) & 1))
        out.append(sum(1 << (7 - i) for i, ch in enumerate(row) if int(ch) & 2))
    return bytes(out)


TILES = b"".join(tile(art) for art in _TILE_ART)


def bg_map() -> bytes:
    """32x32 tiles: frame tiles on every 8th row and column, a repeating mix (blanks included) between."""
    cycle = (0, 4, 5, 7, 1, 2, 3, 0)
    return bytes(T_FRAME if x % 8 == 0 or y % 8 == 0 else cycle[(x + 2 * y) % 8]
                 for y in range(32) for x in range(32))


def window_map() -> bytes:
    """A framed 20x18 panel of checker blocks; solid colour 3 outside it."""
    def cell(x: int, y: int) -> int:
        if x >= 20 or y >= 18:
            return T_SOLID3
        if x in (0, 19) or y in (0, 17):
            return T_FRAME
        return 2 if (x // 2 + y // 2) % 2 else 0
    return bytes(cell(x, y) for y in range(32) for x in range(32))


def sprites_bg_map() -> bytes:
    """A calm backdrop for sprites: blank, a frame around the screen, a checker band behind the
    BG-priority sprites."""
    def cell(x: int, y: int) -> int:
        if x in (0, 19) and y < 18 or y in (0, 17) and x < 20:
            return T_FRAME
        return 4 if 3 <= x <= 5 and 7 <= y <= 8 else 0
    return bytes(cell(x, y) for y in range(32) for x in range(32))


def _sprites() -> bytes:
    """The initial shadow OAM: 40 entries of (Y+16, X+8, tile, attributes)."""
    oam: list[tuple[int, int, int, int]] = []
    oam += [(16, 4 + 12 * i, T_BALL, 0x10 * (i % 2)) for i in range(12)]  # 12 on a line: 10 shown
    oam += [(40, 16 + 16 * i, T_F, flip) for i, flip in enumerate((0x00, 0x20, 0x40, 0x60))]  # flips
    oam += [(40, 96, T_BALL, 0x00), (40, 96, T_SOLID3, 0x10)]  # same X: the lower OAM index wins
    oam += [(40, 124, T_SOLID3, 0x10), (40, 120, T_BALL, 0x00)]  # smaller X wins despite its index
    oam += [(60, 44, T_BALL, 0x80), (60, 60, T_F, 0x90)]  # behind BG colours 1-3 (the ball half)
    oam += [(72, 0, T_BALL, 0x00)]  # moved every frame (entry 22)
    oam += [(100, 40 + 24 * i, T_TALL, attr) for i, attr in enumerate((0x00, 0x40, 0x10, 0x30))]  # 8x16
    flat = bytearray(160)
    for i, (y, x, t, a) in enumerate(oam):
        flat[4 * i:4 * i + 4] = bytes([y + 16, x + 8, t, a])
    return bytes(flat)


MOVING_SPRITE_X = SHADOW_OAM + 4 * 22 + 1
_FRAME = f"${FRAME & 0xFF:02X}"


@dataclass(frozen=True)
class Scene:
    """One PPU ROM. With `handlers` (defining `vblank_handler`, and `stat_handler` when `lyc` is set)
    the ROM keeps animating; without, it stops once the picture is up."""

    name: str
    description: str
    covers: tuple[str, ...]
    lcdc: int
    bg: bytes
    handlers: str = ""
    lyc: int | None = None  # STAT interrupt on LY=LYC at this line
    wx: int = 0
    window: bool = False
    sprites: bool = False
    steps: int = 300

    def _loads(self) -> list[tuple[str, bytes, int]]:
        loads = [("tiles", TILES, TILE_DATA), ("bg_map", self.bg, BG_MAP)]
        if self.window:
            loads.append(("window_map", window_map(), WIN_MAP))
        if self.sprites:
            loads.append(("sprites", _sprites(), SHADOW_OAM))
        return loads

    def source(self) -> str:
        loads = self._loads()
        copies = "\n".join(f"    ld hl, {name}\n    ld de, ${dst:04X}\n    ld bc, {len(blob)}\n"
                           "    call memcpy" for name, blob, dst in loads)
        readback = []
        for i, reg in enumerate(READBACK):
            readback += [f"    ldh a, [{reg}]", *(["    and $78"] if reg == "rSTAT" else []),
                         f"    ld [${REGS + i:04X}], a"]
        readback_code = "\n".join(readback)
        data = "\n".join(f"{name}:\n{db(blob)}" for name, blob, _ in loads)
        ie = INT_VBLANK | (INT_STAT if self.lyc is not None else 0)
        if self.handlers:
            run = f"""    ld a, {ie}
    ldh [rIE], a
    xor a
    ldh [rIF], a
    ei
{MARK_DONE}
.idle:
    halt
    nop
    jr .idle
{self.handlers}"""
        else:
            run = "    jp finish"
        vectors = {0x40: "jp vblank_handler"} if self.handlers else {}
        if self.handlers and self.lyc is not None:
            vectors[0x48] = "jp stat_handler"
        return program(f"""    call lcd_off
{"    call install_dma" if self.sprites else ""}
{copies}
    ld a, ${BGP:02X}
    ldh [rBGP], a
    ld a, ${OBP0:02X}
    ldh [rOBP0], a
    ld a, ${OBP1:02X}
    ldh [rOBP1], a
    xor a
    ldh [rSCX], a
    ldh [rSCY], a
    ldh [rWY], a
    ldh [{_FRAME}], a
    ld a, {self.wx}
    ldh [rWX], a
    ld a, {self.lyc or 0}
    ldh [rLYC], a
    ld a, ${0x40 if self.lyc is not None else 0:02X}
    ldh [rSTAT], a
    ld a, ${self.lcdc:02X}
    ldh [rLCDC], a
{readback_code}
{run}

{data}
""", vectors)

    def signature(self) -> dict[int, bytes]:
        stat = 0x40 if self.lyc is not None else 0
        regs = bytes([self.lcdc, BGP, OBP0, OBP1, 0, 0, self.lyc or 0, stat, self.wx, 0])
        sig = done() | {REGS: regs, TILE_DATA: TILES, BG_MAP: self.bg}
        if self.window:
            sig[WIN_MAP] = window_map()
        return sig

    def spec(self) -> RomSpec:
        return RomSpec(name=self.name, description=self.description, covers=self.covers, source=self.source,
                       header=lambda: header(self.name), frames=74, signature=self.signature,
                       verify=VerifySettings(frames_per_step=1, release_after_frames=1, steps=self.steps))


# Frame counter bump shared by the animating VBlank handlers: leaves the new frame number in A.
_NEXT_FRAME = f"""    ldh a, [{_FRAME}]
    inc a
    ldh [{_FRAME}], a"""

BG_STATIC = Scene("PPU_BG_STATIC", "tiles, a BG map pattern and BGP, LCD on; a still picture",
                  ("ppu", "bg", "tiles", "bgp", "vram"), lcdc=0x91, bg=bg_map(), steps=100).spec()

BG_SCROLL = Scene("PPU_BG_SCROLL", "BG scrolled by SCX/SCY from VBlank each frame, SCX changed at LY=72",
                  ("ppu", "bg", "scx", "scy", "vblank", "stat_lyc", "mid_frame"), lcdc=0x91, bg=bg_map(),
                  lyc=72, handlers=f"""
; VBlank: the top of the screen scrolls right and down with the frame counter
vblank_handler:
    push af
{_NEXT_FRAME}
    ldh [rSCX], a
    srl a
    ldh [rSCY], a
    pop af
    reti

; STAT (LY=72): the bottom part scrolls the other way
stat_handler:
    push af
    ldh a, [{_FRAME}]
    cpl
    ldh [rSCX], a
    pop af
    reti""").spec()

WINDOW = Scene("PPU_WINDOW", "window from $9C00 over the BG, moved by WX/WY every frame",
               ("ppu", "window", "wx", "wy", "vblank"), lcdc=0xF1, bg=bg_map(), wx=7, window=True,
               handlers=f"""
; VBlank: the window slides right (WX 7..134) and down (WY 0..63)
vblank_handler:
    push af
{_NEXT_FRAME}
    and $7F
    add a, 7
    ldh [rWX], a
    ldh a, [{_FRAME}]
    srl a
    and $3F
    ldh [rWY], a
    pop af
    reti""").spec()

SPRITES = Scene("PPU_SPRITES", "8x8 and 8x16 sprites, both palettes, flips, BG priority, 10/line, X order",
                ("ppu", "sprites", "oam_dma", "obp", "flip", "obj_priority", "sprite_limit", "8x16"),
                lcdc=0x93, bg=sprites_bg_map(), lyc=80, sprites=True, handlers=f"""
; VBlank: OAM DMA from the shadow, 8x8 objects for the top part, move one sprite
vblank_handler:
    push af
    ld a, ${SHADOW_OAM >> 8:02X}
    call ${HRAM_DMA:04X}
    ldh a, [rLCDC]
    res 2, a
    ldh [rLCDC], a
    ld a, [${MOVING_SPRITE_X:04X}]
    inc a
    ld [${MOVING_SPRITE_X:04X}], a
    pop af
    reti

; STAT (LY=80): 8x16 objects for the bottom part
stat_handler:
    push af
    ldh a, [rLCDC]
    set 2, a
    ldh [rLCDC], a
    pop af
    reti""").spec()
