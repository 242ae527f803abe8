"""The engine, and the OVERWORLD ROM: assembly generated from a world's tables (tables.World; OVERWORLD's is
world.WORLD), and OVERWORLD's manifest entry. A world with a story (the quest's) gets the story's code and tables
too (story.py), through hook slots in the routines below that stay empty otherwise.

Structure (docs/overworld.md): bank 0 holds the code and small tables; bank 1 the tile graphics, banks 2
and 4 the map blocks, bank 3 the texts. The main loop HALTs until the VBlank interrupt has run OAM DMA
and copied the shadow registers, does at most a small budget of queued VRAM copies while still in
VBlank, then reads the joypad and runs one frame of game logic. Text boxes, the menu and map
transitions are blocking loops around the same per-frame wait, as in commercial games.
"""

from __future__ import annotations

from functools import cache, partial

from gbxcule.asm import CartridgeHeader
from gbxcule.roms.micro.common import DMA_ROUTINE, DONE_ADDR, DONE_VALUE, HARDWARE, HRAM_DMA, MEMCPY
from gbxcule.roms.overworld import art
from gbxcule.roms.overworld import story as story_code
from gbxcule.roms.overworld.tables import DOWN, LEFT, LINE_CHARS, PAD, RIGHT, UP, World
from gbxcule.roms.overworld.world import WORLD
from gbxcule.roms.spec import RomSpec, VerifySettings

# --- documented state (WRAM) -------------------------------------------------------------------------
SHADOW_OAM = 0xC000
STATE = {  # name -> (address, size, meaning); docs/overworld.md has the same table
    "MAP_ID": (0xC100, 1, "current map (0 home, 1 town, 2 lab, 3 route)"),
    "PLAYER_X": (0xC101, 1, "player tile x (the destination tile while walking)"),
    "PLAYER_Y": (0xC102, 1, "player tile y"),
    "FACING": (0xC103, 1, "0 down, 1 up, 2 left, 3 right"),
    "FLAGS": (0xC104, 1, "event flags (world.FLAG_*)"),
    "STEPS": (0xC105, 2, "tile steps started, little-endian"),
    "MODE": (0xC107, 1, "0 walking, 1 text box, 2 start menu, 3 map transition or boot fade"),
    "MENU_CURSOR": (0xC108, 1, "start menu item (0 BAG, 1 SAVE, 2 EXIT)"),
    "MOVE_TIMER": (0xC109, 1, "frames left of the current tile step (0 standing)"),
    "LAST_TEXT": (0xC10A, 1, "id of the last text opened ($FF none)"),
    "BOOT_COUNT": (0xC10B, 1, "power-ons counted in cartridge RAM"),
    "TICKS": (0xC10C, 2, "timer interrupts (64 Hz), little-endian"),
}
ADDR = {name: spec[0] for name, spec in STATE.items()}
MODE_WALK, MODE_TEXT, MODE_MENU, MODE_TRANSITION = 0, 1, 2, 3
BOOT_FRAMES = 100  # frames from power-on (PyBoy boot ROM included) until the game is in walking mode

# --- internal WRAM and HRAM ----------------------------------------------------------------------------
WRAM = {
    "wMoveDir": 0xC110, "wParity": 0xC111, "wPOffX": 0xC112, "wPOffY": 0xC113,
    "wNextMap": 0xC114, "wNextX": 0xC115, "wNextY": 0xC116, "wNextFacing": 0xC117,
    "wTextPtr": 0xC118, "wCursor": 0xC11A, "wJobHead": 0xC11D, "wJobTail": 0xC11E,
    "wJobBytes": 0xC11F, "wJobArg": 0xC120, "wStripDst": 0xC122, "wNpcIdx": 0xC124, "wWaterFrame": 0xC125,
    "wMapHeader": 0xC130,  # a copy of the current map's header (MAP_HEADER fields follow)
    "wActX": 0xC150, "wActY": 0xC151, "wActChar": 0xC152, "wActFacing": 0xC153, "wActTimer": 0xC154,
    "wActParity": 0xC155, "wActPal": 0xC156,
    "wCur": 0xC160,  # the person being updated (16 bytes, PERSON layout)
    "wStrip": 0xC180,  # 40 bytes: tiles of a new map row or column
    "wJobs": 0xC200,  # 16 queued VRAM copies of 8 bytes: dst, src, length, mode
    "wPeople": 0xC280,  # 4 people of 16 bytes
    "wPokeBuf": 0xC300,  # 256 bytes: staging bytes for single-tile window writes, by address low byte
}
MAP_HEADER = ("wMapBank", 1), ("wMapBlocks", 2), ("wMapW", 1), ("wMapH", 1), ("wMapStride", 1), \
    ("wMapWarps", 2), ("wMapPeople", 2), ("wMapSigns", 2), ("wMapEdges", 8), ("wMapName", 2), \
    ("wMapEnterFlag", 1)
MAP_HEADER_SIZE = sum(n for _, n in MAP_HEADER)
PERSON = ("P_X", "P_Y", "P_FACING", "P_CHAR", "P_TEXT", "P_WANDER", "P_FLAG", "P_PAL",  # from ROM
          "P_ACTIVE", "P_TIMER", "P_DIR", "P_WAIT", "P_HOMEX", "P_HOMEY", "P_PARITY")
HRAM = {"hVBlankFlag": 0xFF90, "hSCX": 0xFF91, "hSCY": 0xFF92, "hWX": 0xFF93, "hWY": 0xFF94, "hLYC": 0xFF95,
        "hLcdcTop": 0xFF96, "hLcdcSplit": 0xFF97, "hBGP": 0xFF98, "hOBP0": 0xFF99, "hOBP1": 0xFF9A,
        "hJoyHeld": 0xFF9B, "hJoyPressed": 0xFF9C, "hAnimReq": 0xFF9D}
SRAM_MAGIC, SRAM_BOOTS, SRAM_SAVES, SRAM_SAVE = 0xA000, 0xA004, 0xA005, 0xA010
MAGIC = b"GBXC"

BANK_GFX, BANK_TEXT = 1, 3
LCDC_ALL, LCDC_NO_OBJ, LCDC_NO_WIN = 0xE7, 0xE5, 0xC7  # on, window map 9C00, tiles 8800, OBJ 8x16
STATUS_Y, TEXT_Y, MENU_W, MENU_H = 136, 96, 10, 9
BGP, OBP0, OBP1 = 0xE4, 0xE0, 0xD0
FADE_FRAMES, STEP_FRAMES, FIRST_WAIT, WANDER_MIN_WAIT = 4, 16, 60, 24
JOB_BUDGET = 16  # VRAM bytes copied per VBlank (a job, once started, is finished)
PLAYER_OAM_X, PLAYER_OAM_Y = 64 + 8, 64 + 16 - 4  # screen (64, 60): centred on its tile, 4 px up
MENU_ITEMS = ("BAG", "SAVE", "EXIT")
WIN_MAP, BG_MAP = 0x9C00, 0x9800
TEXT_LINE1, TEXT_LINE2, PROMPT_ADDR = WIN_MAP + 2 * 32 + 1, WIN_MAP + 4 * 32 + 1, WIN_MAP + 4 * 32 + 18
CTRL_END, CTRL_LINE, CTRL_PAGE = 0, 1, 2


def map_header(world: World) -> tuple[tuple[str, int], ...]:
    """The fields of a map header in WRAM: OVERWORLD's, then a story's."""
    return MAP_HEADER + (story_code.MAP_HEADER_STORY if world.story else ())


# --- graphics ------------------------------------------------------------------------------------------
@cache
def bg_tiles(world: World = WORLD) -> tuple[tuple[bytes, ...], tuple[tuple[int, int, int, int], ...]]:
    """(tiles, per metatile its 4 tile ids): the metatiles' quarters, identical ones shared."""
    tiles: list[bytes] = []
    ids: list[tuple[int, int, int, int]] = []
    for rows in world.metatiles.values():
        quad = []
        for q in art.quarters(rows):
            data = art.tile_bytes(q)
            if data not in tiles:
                tiles.append(data)
            quad.append(tiles.index(data))
        ids.append((quad[0], quad[1], quad[2], quad[3]))
    if len(tiles) > 128:
        raise ValueError(f"{len(tiles)} background tiles; at most 128 fit at $9000")
    return tuple(tiles), tuple(ids)


FONT_CHARS = tuple(art.GLYPHS)
FONT_BASE = 128  # font and box tiles live at $8800 (ids 128-255 with LCDC bit 4 clear)
BOX_IDS = {name: FONT_BASE + len(FONT_CHARS) + i for i, name in enumerate(art.BOX)}
TILE_BLANK = FONT_BASE + FONT_CHARS.index(" ")


TILE_STORY = FONT_BASE + len(FONT_CHARS) + len(art.BOX)  # a story's tiles (story.BAR_TILES) follow the box's


def font_tiles(world: World = WORLD) -> bytes:
    """The font's and the boxes' tiles; a world with a story adds its HP bars' tiles."""
    story = b"".join(art.tile_bytes(t) for t in story_code.BAR_TILES.values()) if world.story else b""
    return b"".join(art.tile_bytes(art.glyph_tile(g)) for g in art.GLYPHS.values()) + \
        b"".join(art.tile_bytes(t) for t in art.BOX.values()) + story


def sprite_tiles(world: World = WORLD) -> bytes:
    """Each character's 6 frames of 4 tiles, in 8x16 order: left column top/bottom, right column."""
    out = b""
    for ch in world.characters:
        for frame in range(len(art.FRAMES)):
            tl, tr, bl, br = art.quarters(art.sprite_frame(ch, frame, world.heads))
            out += b"".join(art.tile_bytes(t) for t in (tl, bl, tr, br))
    return out


def water_tile(world: World = WORLD) -> int:
    return bg_tiles(world)[1][world.metatile_ids["water"]][0]


def tile_address(tile: int) -> int:
    """VRAM address of a BG/window tile id with LCDC bit 4 clear."""
    return 0x9000 + tile * 16 if tile < 128 else 0x8800 + (tile - 128) * 16


def encode(text: str) -> bytes:
    return bytes(FONT_BASE + FONT_CHARS.index(ch) for ch in text)


def encode_pages(pages: tuple[tuple[str, ...], ...]) -> bytes:
    return bytes([CTRL_PAGE]).join(bytes([CTRL_LINE]).join(encode(line) for line in page) for page in pages) \
        + bytes([CTRL_END])


def _frame(width: int, height: int, inner: dict[int, str] | None = None) -> bytes:
    """A box of `width` x `height` tiles; `inner` puts text on rows (from column 2)."""
    rows = [bytes([BOX_IDS["tl"]] + [BOX_IDS["h"]] * (width - 2) + [BOX_IDS["tr"]])]
    for r in range(1, height - 1):
        text = encode((inner or {}).get(r, "").ljust(width - 3))
        rows.append(bytes([BOX_IDS["v"], TILE_BLANK]) + text + bytes([BOX_IDS["v"]]))
    rows.append(bytes([BOX_IDS["bl"]] + [BOX_IDS["h"]] * (width - 2) + [BOX_IDS["br"]]))
    return b"".join(rows)


def fade(palette: int, level: int) -> int:
    """A palette with every shade lightened by `level` steps (3: all white)."""
    return sum(max(0, (palette >> 2 * i & 3) - level) << 2 * i for i in range(4))


# --- assembly ------------------------------------------------------------------------------------------
def _db(data: bytes) -> str:
    return "\n".join("    db " + ", ".join(f"${b:02X}" for b in data[i:i + 16]) for i in range(0, len(data), 16))


def _equates(world: World) -> str:
    lines = [HARDWARE]
    lines += [f"DEF w{name.title().replace('_', '')} EQU ${addr:04X}" for name, (addr, _, _) in STATE.items()]
    lines += [f"DEF {name} EQU ${addr:04X}" for name, addr in {**WRAM, **HRAM}.items()]
    offset = WRAM["wMapHeader"]
    for name, size in map_header(world):
        lines.append(f"DEF {name} EQU ${offset:04X}")
        offset += size
    lines += [f"DEF {name} EQU {i}" for i, name in enumerate(PERSON)]
    consts = {
        "wShadowOAM": SHADOW_OAM, "HRAM_DMA": HRAM_DMA, "DONE_ADDR": DONE_ADDR, "DONE_VALUE": DONE_VALUE,
        "SRAM_MAGIC": SRAM_MAGIC, "SRAM_BOOTS": SRAM_BOOTS, "SRAM_SAVES": SRAM_SAVES, "SRAM_SAVE": SRAM_SAVE,
        "BANK_GFX": BANK_GFX, "BANK_TEXT": BANK_TEXT, "LCDC_ALL": LCDC_ALL, "LCDC_NO_OBJ": LCDC_NO_OBJ,
        "LCDC_NO_WIN": LCDC_NO_WIN, "MAP_HEADER_SIZE": sum(n for _, n in map_header(world)), "PAD": PAD,
        "MAX_PEOPLE": 4,
        "MODE_WALK": MODE_WALK, "MODE_TEXT": MODE_TEXT, "MODE_MENU": MODE_MENU,
        "MODE_TRANSITION": MODE_TRANSITION, "FADE_FRAMES": FADE_FRAMES, "STEP_FRAMES": STEP_FRAMES,
        "FIRST_WAIT": FIRST_WAIT, "WANDER_MIN_WAIT": WANDER_MIN_WAIT, "JOB_BUDGET": JOB_BUDGET,
        "PLAYER_OAM_X": PLAYER_OAM_X, "PLAYER_OAM_Y": PLAYER_OAM_Y, "WIN_MAP": WIN_MAP, "BG_MAP": BG_MAP,
        "TEXT_LINE1": TEXT_LINE1, "TEXT_LINE2": TEXT_LINE2, "PROMPT_ADDR": PROMPT_ADDR,
        "CTRL_LINE": CTRL_LINE, "CTRL_PAGE": CTRL_PAGE, "LINE_CHARS": LINE_CHARS, "TILE_BLANK": TILE_BLANK,
        "TILE_MORE": BOX_IDS["more"], "TILE_CURSOR": BOX_IDS["cursor"], "MENU_W": MENU_W, "MENU_H": MENU_H,
        "MENU_LAST": len(MENU_ITEMS) - 1, "TEXT_BAG": world.text_ids["bag"],
        "TEXT_SAVED": world.text_ids["saved"], "FLAG_READ_SIGN": world.read_sign_flag,
        "FLAG_SAVED": world.saved_flag, "WATER_VRAM": tile_address(water_tile(world)),
        "START_MAP": world.start_map, "START_X": world.start[1], "START_Y": world.start[2],
        "START_FACING": world.start[3],
        "DOWN": DOWN, "UP": UP, "LEFT": LEFT, "RIGHT": RIGHT, "MODE_ROW": 0, "MODE_COL": 1,
        "STAT_LYC": 0x40, "IE_GAME": 0x07, "TAC_GAME": 0x04, "TMA_GAME": 0xC0, "JOB_MASK": 15,
    }
    if world.story:
        consts |= story_code.equates(world, FONT_BASE + FONT_CHARS.index("0"), TILE_STORY)
    lines += [f"DEF {name} EQU ${value:04X}" for name, value in consts.items()]
    return "\n".join(lines)


VECTORS = """
SECTION "vec_vblank", ROM0[$0040]
    jp vblank_handler
SECTION "vec_stat", ROM0[$0048]
    jp stat_handler
SECTION "vec_timer", ROM0[$0050]
    jp timer_handler
SECTION "vec_serial", ROM0[$0058]
    reti
SECTION "vec_joypad", ROM0[$0060]
    reti
SECTION "entry", ROM0[$0100]
    nop
    jp main
"""

# Interrupt handlers, start-up and the main loop.
CORE = """
SECTION "code", ROM0[$0150]
; VBlank: OAM DMA and the shadow registers, then flag the frame.
vblank_handler:
    push af
    call apply_regs
    ldh a, [hLcdcTop]
    ldh [rLCDC], a
    ld a, 1
    ldh [hVBlankFlag], a
    pop af
    reti

; STAT on LY=LYC: the split line below which the window shows without sprites (or the menu ends).
stat_handler:
    push af
    ldh a, [hLcdcSplit]
    ldh [rLCDC], a
    pop af
    reti

; Timer, 64 Hz: count ticks; every 32nd asks for the next water frame.
timer_handler:
    push af
    push hl
    ld hl, wTicks
    inc [hl]
    ld a, [hl]
    jr nz, .low
    inc hl
    inc [hl]
.low:
    and 31
    jr nz, .done
    ld a, 1
    ldh [hAnimReq], a
.done:
    pop hl
    pop af
    reti

; apply_regs: OAM DMA from the shadow OAM and the scroll, window, LYC and palette shadows to the PPU.
apply_regs:
    ld a, HIGH(wShadowOAM)
    call HRAM_DMA
    ldh a, [hSCX]
    ldh [rSCX], a
    ldh a, [hSCY]
    ldh [rSCY], a
    ldh a, [hWX]
    ldh [rWX], a
    ldh a, [hWY]
    ldh [rWY], a
    ldh a, [hLYC]
    ldh [rLYC], a
    ldh a, [hBGP]
    ldh [rBGP], a
    ldh a, [hOBP0]
    ldh [rOBP0], a
    ldh a, [hOBP1]
    ldh [rOBP1], a
    ret

main:
    di
    ld sp, $FFFE
    xor a
    ldh [rIE], a
    ldh [rIF], a
    call lcd_off
    ld hl, $C000
    ld bc, $2000
    call zero_fill
    ld hl, $FF80
    ld bc, $7C
    call zero_fill
    ld hl, $8000
    ld bc, $2000
    call zero_fill
    ld hl, dma_code
    ld de, HRAM_DMA
    ld bc, dma_code_end - dma_code
    call memcpy
    ld a, HIGH(wShadowOAM)
    call HRAM_DMA
    ld a, BANK_GFX
    call bankswitch
    ld hl, gfx_sprites
    ld de, $8000
    ld bc, gfx_sprites_end - gfx_sprites
    call memcpy
    ld hl, gfx_bg
    ld de, $9000
    ld bc, gfx_bg_end - gfx_bg
    call memcpy
    ld hl, gfx_font
    ld de, $8800
    ld bc, gfx_font_end - gfx_font
    call memcpy
    call sram_boot
    ld a, START_MAP
    ld [wMapId], a
    ld a, START_X
    ld [wPlayerX], a
    ld a, START_Y
    ld [wPlayerY], a
    ld a, START_FACING
    ld [wFacing], a
    ld a, $FF
    ld [wLastText], a
{INIT}
    ld a, MODE_TRANSITION
    ld [wMode], a
    call load_map
    call update_view
    ld a, 3
    call set_fade
    call apply_regs
    ld a, TMA_GAME
    ldh [rTMA], a
    ldh [rTIMA], a
    ld a, TAC_GAME
    ldh [rTAC], a
    ld a, STAT_LYC
    ldh [rSTAT], a
    xor a
    ldh [rIF], a
    ld a, IE_GAME
    ldh [rIE], a
    ldh a, [hLcdcTop]
    ldh [rLCDC], a
    ei
    call fade_in
    xor a
    ld [wMode], a
    ld a, DONE_VALUE
    ld [DONE_ADDR], a
main_loop:
    call wait_frame
    call read_joypad
    call player_update
    call people_update
    call update_view
    jr main_loop

""" + DMA_ROUTINE + """
; sram_boot: stamp the cartridge RAM on first use and count this power-on.
sram_boot:
    ld a, $0A
    ld [$0000], a
    xor a
    ld [$4000], a
    ld hl, SRAM_MAGIC
    ld de, sram_magic
    ld b, 4
.check:
    ld a, [de]
    cp [hl]
    jr nz, .stamp
    inc de
    inc hl
    dec b
    jr nz, .check
    jr .count
.stamp:
    ld hl, sram_magic
    ld de, SRAM_MAGIC
    ld bc, 4
    call memcpy
    xor a
    ld [SRAM_BOOTS], a
    ld [SRAM_SAVES], a
.count:
    ld hl, SRAM_BOOTS
    inc [hl]
    ld a, [hl]
    ld [wBootCount], a
    xor a
    ld [$0000], a
    ret

; save_game: the state block (map .. steps) to cartridge RAM, and count the save.
save_game:
    ld a, [wFlags]
    or FLAG_SAVED
    ld [wFlags], a
    ld a, $0A
    ld [$0000], a
    xor a
    ld [$4000], a
    ld hl, wMapId
    ld de, SRAM_SAVE
    ld bc, 7
    call memcpy
    ld hl, SRAM_SAVES
    inc [hl]
    xor a
    ld [$0000], a
    ret
"""

# copy16: copy 16 bytes from HL to DE, unrolled (it runs for every person every frame).
COPY16 = "copy16:\n" + "    ld a, [hl+]\n    ld [de], a\n    inc de\n" * 16 + "    ret\n"

# Small routines: memory, banks, LCD, joypad, frame wait and the VRAM job queue.
LIBRARY = MEMCPY + """
; zero_fill: clear BC (> 0) bytes from HL.
zero_fill:
    xor a
    ld [hl+], a
    dec bc
    ld a, b
    or c
    jr nz, zero_fill
    ret

bankswitch:
    ld [$2000], a
    ret

; lcd_off: switch the LCD off in VBlank (interrupts must be off; no-op when it is off already).
lcd_off:
    ldh a, [rLCDC]
    bit 7, a
    ret z
.wait:
    ldh a, [rLY]
    cp 144
    jr c, .wait
    xor a
    ldh [rLCDC], a
    ret

; read_joypad: hJoyHeld = down up left right start select B A (1 = pressed), hJoyPressed = new presses.
read_joypad:
    ld a, $20
    ldh [rJOYP], a
    ldh a, [rJOYP]
    ld a, $20
    ldh [rJOYP], a
    ldh a, [rJOYP]
    cpl
    and $0F
    swap a
    ld b, a
    ld a, $10
    ldh [rJOYP], a
    ldh a, [rJOYP]
    ld a, $10
    ldh [rJOYP], a
    ldh a, [rJOYP]
    cpl
    and $0F
    or b
    ld b, a
    ldh a, [hJoyHeld]
    cpl
    and b
    ldh [hJoyPressed], a
    ld a, b
    ldh [hJoyHeld], a
    ld a, $30
    ldh [rJOYP], a
    ret

; wait_frame: HALT until the VBlank handler has run, then do this frame's VRAM jobs.
wait_frame:
    xor a
    ldh [hVBlankFlag], a
.halt:
    halt
    ldh a, [hVBlankFlag]
    and a
    jr z, .halt
    ; fall through
; process_jobs: early in VBlank (LY 144-149, so the copies end before line 0), run queued jobs until
; JOB_BUDGET bytes are copied; with none queued, advance the water animation if the timer asked for it.
process_jobs:
    ldh a, [rLY]
    cp 144
    ret c
    cp 150
    ret nc
    xor a
    ld [wJobBytes], a
.next:
    ld a, [wJobBytes]
    cp JOB_BUDGET
    ret nc
    call run_job
    jr nc, .next
    ld a, [wJobBytes]
    and a
    ret nz
    ldh a, [hAnimReq]
    and a
    ret z
    xor a
    ldh [hAnimReq], a
    ld a, [wWaterFrame]
    inc a
    and 3
    ld [wWaterFrame], a
    swap a
    ld e, a
    ld d, 0
    ld hl, water_frames
    add hl, de
    ld de, WATER_VRAM
    ld b, 16
.water:
    ld a, [hl+]
    ld [de], a
    inc de
    dec b
    jr nz, .water
    ret

; flush_jobs: run every queued job now (LCD off).
flush_jobs:
    call run_job
    jr nc, flush_jobs
    ret

; wait_jobs: wait frames until the queue is empty.
wait_jobs:
    ld a, [wJobTail]
    ld b, a
    ld a, [wJobHead]
    cp b
    ret z
    call wait_frame
    jr wait_jobs

; run_job: carry set when the queue is empty; else run the oldest job and add its length to wJobBytes.
run_job:
    ld a, [wJobTail]
    ld b, a
    ld a, [wJobHead]
    cp b
    scf
    ret z
    ld c, a
    inc a
    and JOB_MASK
    ld [wJobHead], a
    ld a, c
    add a
    add a
    add a
    ld l, a
    ld h, HIGH(wJobs)
    ld e, [hl]
    inc hl
    ld d, [hl]
    inc hl
    ld a, [hl+]
    ld c, a
    ld a, [hl+]
    ld b, a
    ld a, [hl+]
    push af
    ld a, [hl]
    ld h, d
    ld l, e
    ld d, b
    ld e, c
    ld c, a
    pop af
    ld b, a
    ld a, [wJobBytes]
    add b
    ld [wJobBytes], a
    ld a, c
    and a
    jr nz, .column
.row:
    ; copy B bytes from DE along a 32-tile map row at HL, wrapping within the row
    ld a, [de]
    inc de
    ld [hl], a
    ld a, l
    inc a
    and $1F
    jr nz, .same
    ld a, l
    sub 31
    ld l, a
    jr .row_next
.same:
    inc l
.row_next:
    dec b
    jr nz, .row
    and a
    ret
.column:
    ; copy B bytes from DE down a map column at HL, wrapping from $9BE0+ to $9800+
    ld a, [de]
    inc de
    ld [hl], a
    ld a, l
    add 32
    ld l, a
    jr nc, .col_next
    inc h
    res 2, h
.col_next:
    dec b
    jr nz, .column
    and a
    ret

; queue_job: copy B bytes from DE to VRAM at HL (mode C: MODE_ROW or MODE_COL) at a coming VBlank.
; Keeps BC and DE.
queue_job:
    ld a, l
    ld [wJobArg], a
    ld a, h
    ld [wJobArg + 1], a
    ld a, [wJobTail]
    ld l, a
    inc a
    and JOB_MASK
    ld [wJobTail], a
    ld a, l
    add a
    add a
    add a
    ld l, a
    ld h, HIGH(wJobs)
    ld a, [wJobArg]
    ld [hl+], a
    ld a, [wJobArg + 1]
    ld [hl+], a
    ld a, e
    ld [hl+], a
    ld a, d
    ld [hl+], a
    ld a, b
    ld [hl+], a
    ld [hl], c
    ret

; draw_rows: queue C rows of B bytes from DE to window/map rows from HL (32 bytes apart), then wait.
draw_rows:
    push bc
    push hl
    ld c, MODE_ROW
    call queue_job
    pop hl
    pop bc
    ld a, e
    add b
    ld e, a
    jr nc, .src
    inc d
.src:
    ld a, l
    add 32
    ld l, a
    jr nc, .dst
    inc h
.dst:
    dec c
    jr nz, draw_rows
    jp wait_jobs

; poke: write tile A to window-map address HL at the next VBlank (staged in wPokeBuf).
poke:
    ld e, l
    ld d, HIGH(wPokeBuf)
    ld [de], a
    ld bc, 1 << 8 | MODE_ROW
    jp queue_job
"""

# Maps: loading, drawing, collision, movement, people and the camera.
WORLD_CODE = """
; load_map: header copy, bank, entry flag, people, the visible blocks and the status bar (LCD off).
load_map:
    ld a, [wMapId]
    add a
    ld l, a
    ld h, 0
    ld de, map_headers
    add hl, de
    ld a, [hl+]
    ld h, [hl]
    ld l, a
    ld de, wMapHeader
    ld bc, MAP_HEADER_SIZE
    call memcpy
    ld a, [wMapBank]
    call bankswitch
    ld a, [wMapEnterFlag]
    ld hl, wFlags
    or [hl]
    ld [hl], a
{LOAD_BLOCKS}
    call load_people
    ld a, [wPlayerY]
    inc a
    ld c, a
    ld a, 9
.rows:
    push af
    push bc
    ld a, [wPlayerX]
    inc a
    ld b, a
    call build_row
    call flush_jobs
    pop bc
    inc c
    pop af
    dec a
    jr nz, .rows
    call restore_status
    call flush_jobs
    jp set_walk_regs

; load_people: the map's people into wPeople (8 bytes from ROM, then state).
load_people:
    ld hl, wPeople
    ld bc, 4 * 16
    call zero_fill
    ld a, [wMapPeople]
    ld l, a
    ld a, [wMapPeople + 1]
    ld h, a
    ld a, [hl+]
    and a
    ret z
    ld c, a
    ld de, wPeople
.person:
{PERSON_SHOWN}
    push de
    ld b, 8
.copy:
    ld a, [hl+]
    ld [de], a
    inc de
    dec b
    jr nz, .copy
{PERSON_NEXT}
    ld a, 1
    ld [de], a
    inc de
    inc de
    inc de
    ld a, FIRST_WAIT
    ld [de], a
    pop de
    push hl
    ld h, d
    ld l, e
    ld a, [hl+]
    ld b, [hl]
    push af
    ld a, l
    add P_HOMEX - 1
    ld l, a
    pop af
    ld [hl+], a
    ld [hl], b
    pop hl
    ld a, e
    add 16
    ld e, a
    dec c
    jr nz, .person
    ret

; restore_status: queue the status bar (the map's name) into window row 0.
restore_status:
    ld a, [wMapName]
    ld e, a
    ld a, [wMapName + 1]
    ld d, a
    ld hl, WIN_MAP
    ld bc, 20 << 8 | MODE_ROW
    jp queue_job

; block_addr: HL = address of the block at padded (B, C). Keeps BC.
block_addr:
    ld a, [wMapBlocks]
    ld l, a
    ld a, [wMapBlocks + 1]
    ld h, a
    ld a, [wMapStride]
    ld e, a
    ld d, 0
    ld a, c
    and a
    jr z, .col
.row:
    add hl, de
    dec a
    jr nz, .row
.col:
    ld e, b
    add hl, de
    ret

; bg_addr: HL = BG map address of the top-left tile of padded block (B, C) in the 16x16-block ring.
bg_addr:
    ld a, c
    and 15
    rrca
    rrca
    ld l, a
    and 3
    add HIGH(BG_MAP)
    ld h, a
    ld a, l
    and $C0
    ld l, a
    ld a, b
    and 15
    add a
    or l
    ld l, a
    ret

; metatile_ptr: HL = the 4 tile ids of metatile A. Keeps BC and DE.
metatile_ptr:
{DARK_PTR}
    ld l, a
    ld h, 0
    add hl, hl
    add hl, hl
    push de
    ld de, metatile_tiles
    add hl, de
    pop de
    ret

; build_row: queue the 2 tile rows of the 10 blocks from padded (B, C) rightwards.
build_row:
    call bg_addr
    ld a, l
    ld [wStripDst], a
    ld a, h
    ld [wStripDst + 1], a
    call block_addr
    ld de, wStrip
    ld c, 10
.block:
    ld a, [hl+]
    push hl
    call metatile_ptr
    ld a, [hl+]
    ld [de], a
    inc de
    ld a, [hl+]
    ld [de], a
    push de
    ld a, e
    add 19
    ld e, a
    ld a, [hl+]
    ld [de], a
    inc de
    ld a, [hl]
    ld [de], a
    pop de
    inc de
    pop hl
    dec c
    jr nz, .block
    ld a, [wStripDst]
    ld l, a
    ld a, [wStripDst + 1]
    ld h, a
    ld de, wStrip
    ld bc, 20 << 8 | MODE_ROW
    push hl
    call queue_job
    pop hl
    ld a, l
    add 32
    ld l, a
    ld de, wStrip + 20
    jp queue_job

; build_col: queue the 2 tile columns of the 9 blocks from padded (B, C) downwards.
build_col:
    call bg_addr
    ld a, l
    ld [wStripDst], a
    ld a, h
    ld [wStripDst + 1], a
    call block_addr
    ld de, wStrip
    ld c, 9
.block:
    ld a, [hl]
    push hl
    call metatile_ptr
    ld a, [hl+]
    ld [de], a
    inc de
    inc hl
    ld a, [hl-]
    ld [de], a
    push de
    ld a, e
    add 17
    ld e, a
    ld a, [hl+]
    ld [de], a
    inc de
    inc hl
    ld a, [hl]
    ld [de], a
    pop de
    inc de
    pop hl
    ld a, [wMapStride]
    add l
    ld l, a
    jr nc, .nc
    inc h
.nc:
    dec c
    jr nz, .block
    ld a, [wStripDst]
    ld l, a
    ld a, [wStripDst + 1]
    ld h, a
    ld de, wStrip
    ld bc, 18 << 8 | MODE_COL
    push hl
    call queue_job
    pop hl
    inc l
    ld de, wStrip + 18
    jp queue_job

; queue_strip: after a step started, queue the blocks that scroll into view.
queue_strip:
    ld a, [wPlayerX]
    inc a
    ld b, a
    ld a, [wPlayerY]
    inc a
    ld c, a
    ld a, [wMoveDir]
    and a
    jr z, .down
    dec a
    jp z, build_row
    dec a
    jp z, build_col
    ld a, b
    add 9
    ld b, a
    jp build_col
.down:
    ld a, c
    add 8
    ld c, a
    jp build_row

; front_of: (B, C) moved one tile in direction A; carry set (B, C unchanged) at the map's edge.
front_of:
    and a
    jr z, .down
    dec a
    jr z, .up
    dec a
    jr z, .left
    ld a, [wMapW]
    dec a
    cp b
    scf
    ret z
    inc b
    and a
    ret
.left:
    ld a, b
    and a
    scf
    ret z
    dec b
    and a
    ret
.up:
    ld a, c
    and a
    scf
    ret z
    dec c
    and a
    ret
.down:
    ld a, [wMapH]
    dec a
    cp c
    scf
    ret z
    inc c
    and a
    ret

; tile_blocked: carry set when (B, C) is a solid block or holds a person. Keeps BC.
tile_blocked:
    push bc
    ld a, b
    add PAD
    ld b, a
    ld a, c
    add PAD
    ld c, a
    call block_addr
    ld a, [hl]
{SOLID_ID}
    ld l, a
    ld h, 0
    ld de, metatile_solid
    add hl, de
    ld a, [hl]
    pop bc
    rrca
    ret c
    ; fall through
; person_at: carry set when a person stands at (B, C), with its index in A. Keeps BC.
person_at:
    ld hl, wPeople
    ld e, 0
.loop:
    ld a, l
    add P_ACTIVE
    ld l, a
    ld a, [hl]
    ld d, a
    ld a, l
    sub P_ACTIVE
    ld l, a
    ld a, d
    and a
    jr z, .next
    ld a, [hl+]
    cp b
    ld a, [hl-]
    jr nz, .next
    cp c
    jr nz, .next
    ld a, e
    scf
    ret
.next:
    ld a, l
    add 16
    ld l, a
    inc e
    ld a, e
    cp MAX_PEOPLE
    jr nz, .loop
    and a
    ret

; player_update: one frame of the player in walking mode.
player_update:
    ld a, [wMoveTimer]
    and a
    jr z, .idle
    dec a
    ld [wMoveTimer], a
    ret nz
    call check_warps
.idle:
    ldh a, [hJoyPressed]
    bit 3, a
    jp nz, open_menu
    bit 0, a
    jp nz, interact
    ldh a, [hJoyHeld]
    ld b, DOWN
    bit 7, a
    jr nz, .go
    ld b, UP
    bit 6, a
    jr nz, .go
    ld b, LEFT
    bit 5, a
    jr nz, .go
    ld b, RIGHT
    bit 4, a
    ret z
.go:
    ld a, b
    ; fall through
; try_step: face direction A and start a tile step if the tile there is free; at a map edge with a
; neighbour, move to that map.
try_step:
    ld [wFacing], a
    ld e, a
    ld a, [wPlayerX]
    ld b, a
    ld a, [wPlayerY]
    ld c, a
    ld a, e
    call front_of
    jr c, .edge
    call tile_blocked
    ret c
    ld a, b
    ld [wPlayerX], a
    ld a, c
    ld [wPlayerY], a
    ld a, [wFacing]
    ld [wMoveDir], a
    ld a, STEP_FRAMES
    ld [wMoveTimer], a
    ld a, [wParity]
    xor 1
    ld [wParity], a
    ld hl, wSteps
    inc [hl]
    jr nz, .strip
    inc hl
    inc [hl]
.strip:
{STEP_LIGHT}
    jp queue_strip
.edge:
    ld a, [wFacing]
    ld [wNextFacing], a
    add a
    ld e, a
    ld d, 0
    ld hl, wMapEdges
    add hl, de
    ld a, [hl+]
    cp $FF
    ret z
    ld [wNextMap], a
    ld d, [hl]
    add a
    ld l, a
    ld h, 0
    ld bc, map_sizes
    add hl, bc
    ld b, [hl]
    inc hl
    ld c, [hl]
    ld a, [wFacing]
    cp LEFT
    jr nc, .sideways
    ld a, [wPlayerX]
    add d
    ld [wNextX], a
    ld a, [wFacing]
    cp UP
    ld a, 0
    jr nz, .set_y
    ld a, c
    dec a
.set_y:
    ld [wNextY], a
    jp transition
.sideways:
    ld a, [wPlayerY]
    add d
    ld [wNextY], a
    ld a, [wFacing]
    cp LEFT
    ld a, 0
    jr nz, .set_x
    ld a, b
    dec a
.set_x:
    ld [wNextX], a
    jp transition

; check_warps: at the end of a step, a door or mat on this tile takes the player to its destination.
check_warps:
    ld a, [wMapWarps]
    ld l, a
    ld a, [wMapWarps + 1]
    ld h, a
    ld a, [hl+]
    and a
    ret z
    ld b, a
.warp:
    ld a, [wPlayerX]
    cp [hl]
    inc hl
    jr nz, .skip
    ld a, [wPlayerY]
    cp [hl]
    jr nz, .skip
    inc hl
    ld a, [hl+]
    ld [wNextMap], a
    ld a, [hl+]
    ld [wNextX], a
    ld a, [hl+]
    ld [wNextY], a
    ld a, [hl]
    ld [wNextFacing], a
    jp transition
.skip:
    ld a, l
    add 5
    ld l, a
    jr nc, .nc
    inc h
.nc:
    dec b
    jr nz, .warp
    ret

; transition: fade out, switch to the wNext* map and position with the LCD off, fade in.
transition:
    ld a, MODE_TRANSITION
    ld [wMode], a
    ld a, 1
    call fade_to
    ld a, 2
    call fade_to
    ld a, 3
    call fade_to
    di
    call lcd_off
    ld a, [wNextMap]
    ld [wMapId], a
    ld a, [wNextX]
    ld [wPlayerX], a
    ld a, [wNextY]
    ld [wPlayerY], a
    ld a, [wNextFacing]
    ld [wFacing], a
    xor a
    ld [wMoveTimer], a
    ldh [hJoyHeld], a
    ldh [hJoyPressed], a
    call load_map
    call update_view
    call apply_regs
    xor a
    ldh [rIF], a
    ldh a, [hLcdcTop]
    ldh [rLCDC], a
    ei
    call fade_in
    xor a
    ld [wMode], a
    ret

fade_in:
    ld a, 2
    call fade_to
    ld a, 1
    call fade_to
    xor a
    ; fall through
; fade_to: palettes at fade level A (0 normal .. 3 white), then wait FADE_FRAMES frames.
fade_to:
    call set_fade
    ld b, FADE_FRAMES
.wait:
    push bc
    call wait_frame
    pop bc
    dec b
    jr nz, .wait
    ret

set_fade:
    ld e, a
    ld d, 0
    ld hl, fade_bgp
    add hl, de
    ld a, [hl]
    ldh [hBGP], a
    ld hl, fade_obp0
    add hl, de
    ld a, [hl]
    ldh [hOBP0], a
    ld hl, fade_obp1
    add hl, de
    ld a, [hl]
    ldh [hOBP1], a
    ret

; person_ptr: HL = wPeople entry wNpcIdx.
person_ptr:
    ld a, [wNpcIdx]
    swap a
    add LOW(wPeople)
    ld l, a
    ld h, HIGH(wPeople)
    ret

; person_active: Z clear when person wNpcIdx is active.
person_active:
    call person_ptr
    ld a, l
    add P_ACTIVE
    ld l, a
    ld a, [hl]
    and a
    ret

person_load:
    call person_ptr
    ld de, wCur
    jp copy16

person_store:
    call person_ptr
    ld d, h
    ld e, l
    ld hl, wCur
    jp copy16

; people_update: walk or wait each person; wanderers pick a direction from DIV now and then.
people_update:
    xor a
    ld [wNpcIdx], a
.person:
    call person_active
    jr z, .next
    call person_load
    call person_think
    call person_store
.next:
    ld a, [wNpcIdx]
    inc a
    ld [wNpcIdx], a
    cp MAX_PEOPLE
    jr nz, .person
    ret

person_think:
    ld a, [wCur + P_TIMER]
    and a
    jr z, .idle
    dec a
    ld [wCur + P_TIMER], a
    ret
.idle:
    ld a, [wCur + P_WANDER]
    and a
    ret z
    ld hl, wCur + P_WAIT
    dec [hl]
    ret nz
    ldh a, [rDIV]
    ld d, a
    and $3F
    add WANDER_MIN_WAIT
    ld [hl], a
    ld a, d
    swap a
    and 3
    ld [wCur + P_FACING], a
    ld e, a
    ld a, [wCur + P_X]
    ld b, a
    ld a, [wCur + P_Y]
    ld c, a
    ld a, e
    call front_of
    ret c
    ld a, [wCur + P_HOMEX]
    sub b
    add 2
    cp 5
    ret nc
    ld a, [wCur + P_HOMEY]
    sub c
    add 2
    cp 5
    ret nc
    ld a, [wPlayerX]
    cp b
    jr nz, .free
    ld a, [wPlayerY]
    cp c
    ret z
.free:
    call tile_blocked
    ret c
    ld a, b
    ld [wCur + P_X], a
    ld a, c
    ld [wCur + P_Y], a
    ld a, [wCur + P_FACING]
    ld [wCur + P_DIR], a
    ld a, STEP_FRAMES
    ld [wCur + P_TIMER], a
    ld a, [wCur + P_PARITY]
    xor 1
    ld [wCur + P_PARITY], a
    ret

; vis_off: the pixel offset (D, E) of something stepping in direction B with A frames left.
vis_off:
    ld d, 0
    ld e, 0
    and a
    ret z
    ld c, a
    ld a, b
    and a
    jr z, .down
    dec a
    jr z, .up
    dec a
    jr z, .left
    xor a
    sub c
    ld d, a
    ret
.down:
    xor a
    sub c
    ld e, a
    ret
.up:
    ld e, c
    ret
.left:
    ld d, c
    ret

; update_view: camera scroll from the player's position and step, then the shadow OAM.
update_view:
    ld a, [wMoveDir]
    ld b, a
    ld a, [wMoveTimer]
    call vis_off
    ld a, d
    ld [wPOffX], a
    ld a, e
    ld [wPOffY], a
    ld a, [wPlayerX]
    inc a
    add a
    add a
    add a
    add a
    add d
    ldh [hSCX], a
    ld a, [wPlayerY]
    inc a
    add a
    add a
    add a
    add a
    add e
    ldh [hSCY], a
    ; fall through
; build_oam: the player, then the people on screen (none in the menu); the rest of the first 10
; entries (all that are ever used) get Y=0.
build_oam:
    ld de, wShadowOAM
    ld a, PLAYER_OAM_X
    ld [wActX], a
    ld a, PLAYER_OAM_Y
    ld [wActY], a
    xor a
    ld [wActChar], a
    ld [wActPal], a
    ld a, [wFacing]
    ld [wActFacing], a
    ld a, [wMoveTimer]
    ld [wActTimer], a
    ld a, [wParity]
    ld [wActParity], a
    call draw_actor
    ld a, [wMode]
    cp MODE_MENU
    jr z, .clear
    xor a
    ld [wNpcIdx], a
.person:
    call person_active
    jr z, .next
    push de
    call person_load
    pop de
    call screen_pos
    jr c, .next
    ld a, [wCur + P_CHAR]
    ld [wActChar], a
    ld a, [wCur + P_FACING]
    ld [wActFacing], a
    ld a, [wCur + P_TIMER]
    ld [wActTimer], a
    ld a, [wCur + P_PARITY]
    ld [wActParity], a
    ld a, [wCur + P_PAL]
    ld [wActPal], a
    call draw_actor
.next:
    ld a, [wNpcIdx]
    inc a
    ld [wNpcIdx], a
    cp MAX_PEOPLE
    jr nz, .person
.clear:
    ld a, e
    cp LOW(wShadowOAM + 4 * 10)
    ret nc
    xor a
    ld [de], a
    ld a, e
    add 4
    ld e, a
    jr .clear

; screen_pos: wActX/wActY (OAM coordinates) of wCur relative to the player; carry when off screen.
; Keeps DE.
screen_pos:
    push de
    ld a, [wCur + P_DIR]
    ld b, a
    ld a, [wCur + P_TIMER]
    call vis_off
    ld a, [wPlayerX]
    ld c, a
    ld a, [wCur + P_X]
    sub c
    add 5
    cp 11
    jr nc, .hidden
    sub 5
    add a
    add a
    add a
    add a
    add PLAYER_OAM_X
    add d
    ld hl, wPOffX
    sub [hl]
    ld [wActX], a
    ld a, [wPlayerY]
    ld c, a
    ld a, [wCur + P_Y]
    sub c
    add 5
    cp 11
    jr nc, .hidden
    sub 5
    add a
    add a
    add a
    add a
    add PLAYER_OAM_Y
    add e
    ld hl, wPOffY
    sub [hl]
    ld [wActY], a
    pop de
    and a
    ret
.hidden:
    pop de
    scf
    ret

; draw_actor: two 8x16 OAM entries at DE for a character (wAct*): the frame for its facing and step
; phase, mirrored for right and, on alternate steps, for the up/down walking frame.
draw_actor:
    ld a, [wActFacing]
    cp LEFT
    jr c, .vertical
    ld a, LEFT
.vertical:
    add a
    ld c, a
    ld a, [wActTimer]
    and 8
    jr z, .stand
    inc c
.stand:
    ld a, c
    add a
    add a
    ld c, a
    ld a, [wActChar]
    add c
    ld c, a
    ld b, 0
    ld a, [wActFacing]
    cp RIGHT
    jr nz, .not_right
    ld b, $20
    jr .attr
.not_right:
    cp LEFT
    jr nc, .attr
    ld a, [wActTimer]
    and 8
    jr z, .attr
    ld a, [wActParity]
    and a
    jr z, .attr
    ld b, $20
.attr:
    ld a, [wActPal]
    or b
    ld b, a
    ld a, [wActY]
    ld [de], a
    inc de
    ld a, [wActX]
    ld [de], a
    inc de
    ld a, b
    and $20
    ld a, c
    jr z, .left_tile
    add 2
.left_tile:
    ld [de], a
    inc de
    ld a, b
    ld [de], a
    inc de
    ld a, [wActY]
    ld [de], a
    inc de
    ld a, [wActX]
    add 8
    ld [de], a
    inc de
    ld a, b
    and $20
    ld a, c
    jr nz, .right_tile
    add 2
.right_tile:
    ld [de], a
    inc de
    ld a, b
    ld [de], a
    inc de
    ret
"""

# Talking, text boxes and the start menu.
UI = """
; interact: A pressed while standing: talk to the person or read the sign in front.
interact:
    ld a, [wPlayerX]
    ld b, a
    ld a, [wPlayerY]
    ld c, a
    ld a, [wFacing]
    call front_of
    ret c
    call person_at
    jr nc, .sign
    ld [wNpcIdx], a
    call person_load
    ld a, [wFacing]
    xor 1
    ld [wCur + P_FACING], a
    call person_store
    ld a, [wCur + P_FLAG]
    ld hl, wFlags
    or [hl]
    ld [hl], a
    ld a, [wCur + P_TEXT]
    push af
    call update_view
    pop af
    jp {TALK}
.sign:
    ld a, [wMapSigns]
    ld l, a
    ld a, [wMapSigns + 1]
    ld h, a
    ld a, [hl+]
    and a
    ret z
    ld e, a
.entry:
    ld a, [hl+]
    cp b
    jr nz, .skip_y
    ld a, [hl+]
    cp c
    jr nz, .skip_text
    ld a, [wFlags]
    or FLAG_READ_SIGN
    ld [wFlags], a
    ld a, [hl]
    jp {TALK}
.skip_y:
    inc hl
.skip_text:
    inc hl
    dec e
    jr nz, .entry
    ret

set_regs:
    ld a, [hl+]
    ldh [hWX], a
    ld a, [hl+]
    ldh [hWY], a
    ld a, [hl+]
    ldh [hLYC], a
    ld a, [hl+]
    ldh [hLcdcTop], a
    ld a, [hl]
    ldh [hLcdcSplit], a
    ret

set_walk_regs:
    ld hl, regs_walk
    jr set_regs

; hide_window: no window (and no split) while its tiles are rewritten.
hide_window:
    ld a, LCDC_NO_WIN
    ldh [hLcdcTop], a
    ldh [hLcdcSplit], a
    ret

; close_window: back to the status bar and walking.
close_window:
    call hide_window
    call restore_status
    call wait_jobs
    call set_walk_regs
    xor a
    ld [wMode], a
    jp update_view

; show_text: open the text box and print text A one character a frame; A or B turns a page and closes.
show_text:
    ld [wLastText], a
    ld e, a
    ld d, 0
    ld a, MODE_TEXT
    ld [wMode], a
    ld hl, text_ptrs
    add hl, de
    add hl, de
    ld a, [hl+]
    ld [wTextPtr], a
    ld a, [hl]
    ld [wTextPtr + 1], a
    call hide_window
    ld hl, WIN_MAP
    ld de, textbox_rows
    ld bc, 20 << 8 | 6
    call draw_rows
    ld hl, regs_text
    call set_regs
.page:
    ld hl, TEXT_LINE1
.line:
    ld a, l
    ld [wCursor], a
    ld a, h
    ld [wCursor + 1], a
.char:
    ld a, BANK_TEXT
    call bankswitch
    ld a, [wTextPtr]
    ld l, a
    ld a, [wTextPtr + 1]
    ld h, a
    ld b, [hl]
    inc hl
    ld a, l
    ld [wTextPtr], a
    ld a, h
    ld [wTextPtr + 1], a
    ld a, [wMapBank]
    call bankswitch
    ld a, b
    and a
    jr z, .end
    cp CTRL_LINE
    jr z, .second_line
    cp CTRL_PAGE
    jr z, .next_page
    ld a, [wCursor]
    ld l, a
    ld a, [wCursor + 1]
    ld h, a
    ld a, b
    call poke
    ld hl, wCursor
    inc [hl]
    call wait_frame
    jr .char
.second_line:
    ld hl, TEXT_LINE2
    jr .line
.next_page:
    call prompt
    ld hl, TEXT_LINE1
    ld de, blank_line
    ld bc, LINE_CHARS << 8 | MODE_ROW
    call queue_job
    ld hl, TEXT_LINE2
    call queue_job
    call wait_jobs
    jr .page
.end:
    call prompt
    jp close_window

; prompt: show the "more" arrow and wait for A or B.
prompt:
    ld hl, PROMPT_ADDR
    ld a, TILE_MORE
    call poke
.wait:
    call wait_frame
    call read_joypad
    ldh a, [hJoyPressed]
    and $03
    jr z, .wait
    ld hl, PROMPT_ADDR
    ld a, TILE_BLANK
    jp poke

; open_menu: the start menu (BAG, SAVE, EXIT) on the window at the right; B or START closes it.
open_menu:
    ld a, MODE_MENU
    ld [wMode], a
    call update_view
    call hide_window
    ld hl, WIN_MAP
    ld de, menu_rows
    ld bc, MENU_W << 8 | MENU_H
    call draw_rows
    ld hl, regs_menu
    call set_regs
    xor a
    ld [wMenuCursor], a
    call menu_cursor_draw
.loop:
    call wait_frame
    call read_joypad
    ldh a, [hJoyPressed]
    and $0A
    jr nz, .close
    ldh a, [hJoyPressed]
    bit 0, a
    jr nz, .select
    bit 6, a
    jr nz, .up
    bit 7, a
    jr z, .loop
    ld a, [wMenuCursor]
    cp MENU_LAST
    jr z, .loop
    call menu_cursor_erase
    ld hl, wMenuCursor
    inc [hl]
    call menu_cursor_draw
    jr .loop
.up:
    ld a, [wMenuCursor]
    and a
    jr z, .loop
    call menu_cursor_erase
    ld hl, wMenuCursor
    dec [hl]
    call menu_cursor_draw
    jr .loop
.select:
    ld a, [wMenuCursor]
    and a
    jr z, .bag
    dec a
    jr z, .save
.close:
    jp close_window
.bag:
    call close_window
{BAG}
.save:
    call save_game
    call close_window
    ld a, TEXT_SAVED
    jp show_text

; menu_cursor_addr: HL = window address of the cursor at item wMenuCursor (rows 2, 4, 6; column 1).
menu_cursor_addr:
    ld a, [wMenuCursor]
    swap a
    add a
    add a
    add $41
    ld l, a
    ld h, HIGH(WIN_MAP)
    ret

menu_cursor_draw:
    call menu_cursor_addr
    ld a, TILE_CURSOR
    jp poke

menu_cursor_erase:
    call menu_cursor_addr
    ld a, TILE_BLANK
    jp poke
"""


def _map_tables(world: World) -> str:
    """Bank 0: map headers with their warps, people, signs and names; sizes; metatile tables."""
    maps, ids = world.maps, world.map_ids
    out = ["map_headers:", "    dw " + ", ".join(f"header_{m.key}" for m in maps), "map_sizes:"]
    out += [f"    db {m.width}, {m.height}" for m in maps]
    for m in maps:
        edges = []
        for d in (DOWN, UP, LEFT, RIGHT):
            dest, offset = m.edges.get(d, (None, 0))
            edges += [ids[dest] if dest else 0xFF, offset & 0xFF]
        out += [
            f"header_{m.key}:",
            f"    db {m.bank}",
            f"    dw blocks_{m.key}",
            f"    db {m.width}, {m.height}, {m.width + 2 * PAD}",
            f"    dw warps_{m.key}, people_{m.key}, signs_{m.key}",
            "    db " + ", ".join(f"${v:02X}" for v in edges),
            f"    dw name_{m.key}",
            f"    db ${m.enter_flag:02X}",
            *(story_code.map_header_extra(world, m.key) if world.story else []),
            f"warps_{m.key}:",
            f"    db {len(m.warps)}",
            *(f"    db {w.x}, {w.y}, {ids[w.dest]}, {w.dest_x}, {w.dest_y}, {w.facing}" for w in m.warps),
            f"people_{m.key}:",
            f"    db {len(m.people)}",
            *(f"    db {p.x}, {p.y}, {p.facing}, {world.character_tile(p.character)}, {world.talk_id(p.text)}, "
              f"{int(p.wander)}, ${p.flag:02X}, ${0x10 * p.palette:02X}"
              + (story_code.person_extra(world, p.shown) if world.story else "") for p in m.people),
            f"signs_{m.key}:",
            f"    db {len(m.signs)}",
            *(f"    db {s.x}, {s.y}, {world.talk_id(s.text)}" for s in m.signs),
            f"name_{m.key}:",
            _db(status_bar(m.title)),
        ]
    _, quads = bg_tiles(world)
    out += ["metatile_tiles:", _db(bytes(t for quad in quads for t in quad)), "metatile_solid:",
            _db(bytes(int(name in world.solid) for name in world.metatiles))]
    return "\n".join(out)


def status_bar(title: str) -> bytes:
    return encode(" " + title.ljust(19))


def _bank0_data(world: World) -> str:
    menu = _frame(MENU_W, MENU_H, {2 + 2 * i: item for i, item in enumerate(MENU_ITEMS)})
    regs = {"walk": (7, STATUS_Y, STATUS_Y, LCDC_ALL, LCDC_NO_OBJ), "text": (7, TEXT_Y, TEXT_Y, LCDC_ALL, LCDC_NO_OBJ),
            "menu": (7 + 160 - 8 * MENU_W, 0, 8 * MENU_H, LCDC_ALL, LCDC_NO_WIN)}
    return "\n".join([
        'SECTION "tables", ROM0',
        _map_tables(world),
        "text_ptrs:", "    dw " + ", ".join(f"text_{k}" for k in world.texts),
        *(f"fade_{name}:\n    db " + ", ".join(f"${fade(p, lv):02X}" for lv in range(4))
          for name, p in (("bgp", BGP), ("obp0", OBP0), ("obp1", OBP1))),
        *(f"regs_{name}:\n    db " + ", ".join(f"${v:02X}" for v in vals) for name, vals in regs.items()),
        "water_frames:", _db(b"".join(art.water_frames())),
        "textbox_rows:", _db(_frame(20, 6)),
        "menu_rows:", _db(menu),
        "blank_line:", _db(bytes([TILE_BLANK]) * LINE_CHARS),
        "sram_magic:", _db(MAGIC),
        *(story_code.tables(world, encode, _frame) + [f"regs_bag:\n    db ${7 + 160 - 8 * story_code.BAG_W:02X}, "
          f"0, ${8 * (len(world.story.items) + 2):02X}, ${LCDC_ALL:02X}, ${LCDC_NO_WIN:02X}"] if world.story else []),
    ])


def _banked_data(world: World) -> str:
    tiles, _ = bg_tiles(world)
    out = [f'SECTION "gfx", ROMX, BANK[{BANK_GFX}]',
           "gfx_sprites:", _db(sprite_tiles(world)), "gfx_sprites_end:",
           "gfx_bg:", _db(b"".join(tiles)), "gfx_bg_end:",
           "gfx_font:", _db(font_tiles(world)), "gfx_font_end:",
           f'SECTION "texts", ROMX, BANK[{BANK_TEXT}]']
    out += [f"text_{k}:\n{_db(encode_pages(pages))}" for k, pages in world.texts.items()]
    for bank in sorted({m.bank for m in world.maps}):
        out.append(f'SECTION "maps_{bank}", ROMX, BANK[{bank}]')
        out += [f"blocks_{m.key}:\n{_db(m.blocks(world.metatile_ids))}" for m in world.maps if m.bank == bank]
    return "\n".join(out)


# What the engine's hook slots hold without a story (story.HOOKS: with one).
PLAIN_HOOKS = {"INIT": "", "LOAD_BLOCKS": "", "PERSON_SHOWN": "", "PERSON_NEXT": "", "DARK_PTR": "", "SOLID_ID": "",
               "STEP_LIGHT": "", "TALK": "show_text", "BAG": "    ld a, TEXT_BAG\n    jp show_text"}


def _fill(template: str, story: bool) -> str:
    """An engine routine's text with its hook slots filled for a world with or without a story."""
    hooks = story_code.HOOKS if story else PLAIN_HOOKS
    for name, text in hooks.items():
        template = template.replace("{" + name + "}", text)
    if "{" in template:
        raise ValueError(f"unfilled hook slot near {template[template.index('{'):][:40]!r}")
    return template


def source(world: World = WORLD) -> str:
    """The assembly text of the game built from `world`."""
    story = world.story is not None
    code = [_fill(t, story) for t in (CORE, LIBRARY, WORLD_CODE, UI)]
    return "\n".join([_equates(world), VECTORS, code[0], COPY16, *code[1:], *([story_code.CODE] if story else []),
                      _bank0_data(world), _banked_data(world)])


def header(world: World = WORLD) -> CartridgeHeader:
    """MBC3+RAM+BATTERY, 128 KiB ROM (8 banks), 32 KiB RAM; DMG only."""
    return CartridgeHeader(title=world.cart_title, cartridge_type=0x13, rom_size=2, ram_size=0x03)


# --- signature: the state after boot, modelled from the tables ------------------------------------------
def _actor_oam(world: World, oam_x: int, oam_y: int, character: str, facing: int, palette: int) -> bytes:
    """OAM entries of a standing character (draw_actor with no step in progress)."""
    base = world.character_tile(character) + 4 * (2 * min(facing, LEFT))
    flip = 0x20 if facing == RIGHT else 0
    attr = flip | 0x10 * palette
    left, right = (base + 2, base) if flip else (base, base + 2)
    return bytes([oam_y, oam_x, left, attr, oam_y, oam_x + 8, right, attr])


def boot_bg_map(world: World = WORLD) -> bytes:
    """The BG map after the start map is drawn: 9 block rows of 10 around the player, in the ring."""
    m, ids = world.maps[world.start_map], bg_tiles(world)[1]
    _, start_x, start_y, _ = world.start
    bg = bytearray(0x400)
    for r in range(9):
        for i in range(10):
            bx, by = start_x + 1 + i, start_y + 1 + r  # padded block coordinates
            quad = ids[world.metatile_ids[m.shown(bx - PAD, by - PAD)]]
            col, row = (bx & 15) * 2, (by & 15) * 2
            for k, t in enumerate(quad):
                bg[(row + k // 2) * 32 + col + k % 2] = t
    return bytes(bg)


def boot_oam(world: World = WORLD) -> bytes:
    _, start_x, start_y, start_facing = world.start
    oam = _actor_oam(world, PLAYER_OAM_X, PLAYER_OAM_Y, "player", start_facing, 0)
    for p in world.maps[world.start_map].people_shown():
        dx, dy = p.x - start_x, p.y - start_y
        if -5 <= dx <= 5 and -5 <= dy <= 5:
            oam += _actor_oam(world, PLAYER_OAM_X + 16 * dx, PLAYER_OAM_Y + 16 * dy, p.character, p.facing,
                              p.palette)
    return oam.ljust(160, b"\0")


def signature(world: World = WORLD) -> dict[int, bytes]:
    m = world.maps[world.start_map]
    _, start_x, start_y, start_facing = world.start
    state = bytes([world.start_map, start_x, start_y, start_facing, m.enter_flag, 0, 0, MODE_WALK, 0, 0, 0xFF, 1])
    tiles = b"".join(bg_tiles(world)[0])
    water = tile_address(water_tile(world)) - 0x9000
    return {
        DONE_ADDR: bytes([DONE_VALUE]),
        ADDR["MAP_ID"]: state,
        0x8000: sprite_tiles(world),
        0x8800: font_tiles(world),
        0x9000: tiles[:water],
        0x9000 + water + 16: tiles[water + 16:],
        BG_MAP: boot_bg_map(world),
        WIN_MAP: status_bar(m.title),
        0xFE00: boot_oam(world),
        HRAM_DMA: bytes([0xE0, 0x46, 0x3E, 0x28, 0x3D, 0x20, 0xFD, 0xC9]),  # the DMA routine
    }


OVERWORLD = RomSpec(
    name="OVERWORLD",
    description="a small top-down RPG overworld (4 maps, doors, people, signs, text boxes, start menu); "
                "the default workload for benchmarks, demos and RL",
    covers=("game", "mbc3", "ram", "rom_banking", "vblank_halt", "oam_dma", "timer_irq", "stat_lyc", "window",
            "sprites_8x16", "scroll", "joypad"),
    source=partial(source, WORLD),
    header=partial(header, WORLD),
    frames=BOOT_FRAMES,
    signature=partial(signature, WORLD),
    verify=VerifySettings(frames_per_step=24, release_after_frames=8, steps=2000, actions="seeded_random"),
)
