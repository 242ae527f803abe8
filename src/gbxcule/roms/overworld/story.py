"""The engine's story features (tables.Story): event flags, scripts, the BAG, item uses, fights, dark maps and
map tiles that change with the flags. game.py emits this code and these tables only for a world with a story
(the quest, docs/quest.md); OVERWORLD's world has none, and its ROM does not change.

Scripts are records of 6 bytes: condition, two flags to set, one to clear, a text ($FF none) and an action
(bit 0 heal, bit 1 reload the map, bit 2 fight the foe in bits 4-7). A condition byte is $FF (always), n
(flag n set) or $80 | n (flag n clear); flags are bits of the flag bytes at `wStoryFlags`, 8 to a byte.
"""

from __future__ import annotations

from gbxcule.roms.overworld.tables import ENGINE_TEXTS, FOE_NAME, PAD, World

RECORD_SIZE, FOE_SIZE, USE_SIZE = 6, 8, 5
ITEM_NAME = 8  # bytes per item name in ROM (7 characters and a blank)
MAX_FLAGS = 32
ACT_HEAL, ACT_RELOAD, ACT_BATTLE = 0x01, 0x02, 0x04
MODE_BATTLE = 4
BAG_W = 10
BOX_W, BOX_H = 20, 6  # the fight box (the text box's size and place)
# Rows 1 (the foe) and 2 (the player): the name from column 2, the HP bar (two HP a tile) right after it, columns
# 8-15, and the HP number in columns 17-18.
BAR_COL, BAR_W, HP_COL = 2 + FOE_NAME, 8, 17
# The bars' tiles, loaded after the font's (game.font_tiles): two HP a tile, so a bar of 8 tiles shows up to 16 HP
# one by one. Solid rows 1-6 survive an observation of every other pixel (the digits' thin strokes mostly do not).
BAR_TILES = {
    "full": ("........",) + ("33333333",) * 6 + ("........",),
    "half": ("........",) + ("3333....",) * 6 + ("........",),
}

# Documented state (docs/quest.md); the quest's STATE adds these to OVERWORLD's.
STORY_STATE = {  # name -> (address, size, meaning)
    "STORY_FLAGS": (0xC1C0, 4, "event flags, 8 to a byte (the world's Story.flags numbers)"),
    "BERRIES": (0xC1C4, 1, "berries in the BAG"),
    "HP": (0xC1C5, 1, "the player's HP"),
    "HP_MAX": (0xC1C6, 1, "the player's HP when full"),
    "FOE_HP": (0xC1C7, 1, "the foe's HP in the current or last fight"),
    "LOSSES": (0xC1C8, 1, "fights lost"),
    "BATTLE_CURSOR": (0xC1C9, 1, "fight choice under the cursor (0 FIGHT, 1 ITEM, 2 RUN)"),
    "BAG_CURSOR": (0xC1CA, 1, "BAG row under the cursor"),
    "BAG_COUNT": (0xC1CB, 1, "items listed in the BAG when last opened"),
    "FOE": (0xC1CC, 1, "foe of the current or last fight (index in Story.foes)"),
    "LIGHT_X": (0xC1CD, 1, "in a dark map, the tile at the centre of the lit 3x3 (x)"),
    "LIGHT_Y": (0xC1CE, 1, "in a dark map, the tile at the centre of the lit 3x3 (y)"),
}
STORY_WRAM = {  # internal
    "wLightIdx": 0xC1CF, "wUseItem": 0xC1D0, "wItemIdx": 0xC1D1, "wLightMode": 0xC1D2, "wCount": 0xC1D3,
    "wBagItems": 0xC1D8,  # 8 bytes: the items listed, by row
    "wBlocks": 0xD000,  # the current map's blocks (its changes applied; bit 7: unlit)
    "wBagBox": 0xD800,  # the BAG box's tiles
    "wBattleBox": 0xD850,  # the fight box's tiles
    "wLightBuf": 0xD900,  # 24 bytes: tiles of blocks queued for lighting
}
MAX_BLOCKS = 0x800  # bytes of wBlocks: (width + 2 PAD) * (height + 2 PAD) at most
MAP_HEADER_STORY = ("wMapSize", 2), ("wMapChanges", 2), ("wMapDark", 1), ("wMapEnterEvent", 1)


def equates(world: World, tile_digit0: int, tile_bar: int) -> dict[str, int]:
    """The story's WRAM names and constants, for the assembly."""
    s = world.story
    assert s is not None
    bag_h = len(s.items) + 2
    names = {f"w{n.title().replace('_', '')}": a for n, (a, _, _) in STORY_STATE.items()} | STORY_WRAM
    return names | {
        "RECORD_SIZE": RECORD_SIZE, "NUM_ITEMS": len(s.items), "ITEM_BERRY": [i.flag for i in s.items].index(None),
        "BAG_W": BAG_W, "BAG_H": bag_h, "HP_FULL": s.hp, "BERRY_HEAL": s.berry_heal, "BERRY_REFILL": s.berries,
        "POWER": s.power, "WEAPON_FLAG": s.flag(s.weapon), "WEAPON_POWER": s.weapon_power,
        "LOSS_MAP": world.map_ids[s.loss[0]], "LOSS_X": s.loss[1], "LOSS_Y": s.loss[2], "LOSS_FACING": s.loss[3],
        "DARK_METATILE": world.metatile_ids[s.dark], "MODE_BATTLE": MODE_BATTLE,
        "TILE_DIGIT0": tile_digit0, "TILE_BAR_FULL": tile_bar, "TILE_BAR_HALF": tile_bar + 1, "BAR_W": BAR_W,
        "FOE_HP_POS": BOX_W + HP_COL, "HP_POS": 2 * BOX_W + HP_COL, "FOE_BAR_POS": BOX_W + BAR_COL,
        "BAR_POS": 2 * BOX_W + BAR_COL, "BOX_SIZE": BOX_W * BOX_H, "ITEM_NAME": ITEM_NAME,
        **{f"TEXT_{k.upper()}": world.text_ids[s.texts[k]] for k in ENGINE_TEXTS},
    }


# Hooks: lines the engine's routines carry only in a story (game.py fills its templates with them).
HOOKS = {
    "INIT": "    call story_init",
    "LOAD_BLOCKS": "    call load_blocks",
    "PERSON_SHOWN": """    push bc
    push de
    push hl
    ld de, 8
    add hl, de
    ld a, [hl]
    call check_cond
    pop hl
    pop de
    pop bc
    jr c, .shown
    ld a, l
    add 9
    ld l, a
    jr nc, .hidden
    inc h
.hidden:
    dec c
    jr nz, .person
    ret
.shown:""",
    "PERSON_NEXT": "    inc hl",
    "DARK_PTR": """    bit 7, a
    jr z, .lit
    ld a, DARK_METATILE
.lit:""",
    "SOLID_ID": "    and $7F",
    "STEP_LIGHT": "    call light_step",
    "TALK": "run_script",
    "BAG": "    jp open_bag",
}

CODE = """
; story_init: HP full at power-on.
story_init:
    ld a, HP_FULL
    ld [wHpMax], a
    ld [wHp], a
    ret

; flag_ptr: HL = the byte of flag A (0-31), B = its bit. Keeps C and DE.
flag_ptr:
    push af
    and 7
    ld b, 1
    jr z, .bit
.shift:
    sla b
    dec a
    jr nz, .shift
.bit:
    pop af
    rrca
    rrca
    rrca
    and $03
    add LOW(wStoryFlags)
    ld l, a
    ld h, HIGH(wStoryFlags)
    ret

; check_cond: carry set when condition A holds ($FF always; n: flag n set; $80 | n: flag n clear). Keeps DE.
check_cond:
    cp $FF
    jr z, .holds
    ld c, a
    and $7F
    call flag_ptr
    ld a, [hl]
    and b
    jr z, .clear
    bit 7, c
    ret nz
.holds:
    scf
    ret
.clear:
    bit 7, c
    jr nz, .holds
    ret

; set_flag: set flag A ($FF: none). Keeps DE.
set_flag:
    cp $FF
    ret z
    call flag_ptr
    ld a, [hl]
    or b
    ld [hl], a
    ret

; clear_flag: clear flag A ($FF: none). Keeps DE.
clear_flag:
    cp $FF
    ret z
    call flag_ptr
    ld a, b
    cpl
    and [hl]
    ld [hl], a
    ret

; run_script: the first record of script A whose condition holds: its flags set and cleared, its text shown,
; then its action (heal, fight, reload the map).
run_script:
    ld e, a
    ld d, 0
    ld hl, script_ptrs
    add hl, de
    add hl, de
    ld a, [hl+]
    ld h, [hl]
    ld l, a
.record:
    ld a, [hl]
    push hl
    call check_cond
    pop hl
    jr c, .found
    ld de, RECORD_SIZE
    add hl, de
    jr .record
.found:
    inc hl
    ld a, [hl+]
    push hl
    call set_flag
    pop hl
    ld a, [hl+]
    push hl
    call set_flag
    pop hl
    ld a, [hl+]
    push hl
    call clear_flag
    pop hl
    ld a, [hl+]
    ld b, [hl]
    push bc
    cp $FF
    call nz, show_text
    pop bc
    bit 0, b
    jr z, .no_heal
    push bc
    call heal
    pop bc
.no_heal:
    bit 2, b
    jr z, .no_battle
    ld a, b
    swap a
    and $0F
    jp battle
.no_battle:
    bit 1, b
    ret z
    ; fall through
; reload_map: load the map again where the player stands (its tiles or people changed), with a fade.
reload_map:
    ld a, [wMapId]
    ld [wNextMap], a
    ld a, [wPlayerX]
    ld [wNextX], a
    ld a, [wPlayerY]
    ld [wNextY], a
    ld a, [wFacing]
    ld [wNextFacing], a
    jp transition

; heal: HP full, and the berries refilled to BERRY_REFILL.
heal:
    ld a, [wHpMax]
    ld [wHp], a
    ld a, [wBerries]
    cp BERRY_REFILL
    ret nc
    ld a, BERRY_REFILL
    ld [wBerries], a
    ret

; load_blocks: the map's blocks into wBlocks with the changes whose condition holds; in a dark map every
; block unlit (bit 7) but the 3x3 around the player. Sets the map's enter event first.
load_blocks:
    ld a, [wMapEnterEvent]
    call set_flag
    ld a, [wMapBlocks]
    ld l, a
    ld a, [wMapBlocks + 1]
    ld h, a
    ld de, wBlocks
    ld a, [wMapSize]
    ld c, a
    ld a, [wMapSize + 1]
    ld b, a
    call memcpy
    ld a, LOW(wBlocks)
    ld [wMapBlocks], a
    ld a, HIGH(wBlocks)
    ld [wMapBlocks + 1], a
    ld a, [wMapChanges]
    ld l, a
    ld a, [wMapChanges + 1]
    ld h, a
    ld a, [hl+]
    and a
    jr z, .dark
    ld [wCount], a
.change:
    ld a, [hl+]
    push hl
    call check_cond
    pop hl
    jr nc, .skip
    ld a, [hl+]
    add PAD
    ld b, a
    ld a, [hl+]
    add PAD
    ld c, a
    ld a, [hl+]
    push hl
    push af
    call block_addr
    pop af
    ld [hl], a
    pop hl
    jr .next
.skip:
    inc hl
    inc hl
    inc hl
.next:
    ld a, [wCount]
    dec a
    ld [wCount], a
    jr nz, .change
.dark:
    ld a, [wMapDark]
    and a
    ret z
    ld hl, wBlocks
    ld a, [wMapSize]
    ld c, a
    ld a, [wMapSize + 1]
    ld b, a
.unlit:
    set 7, [hl]
    inc hl
    dec bc
    ld a, b
    or c
    jr nz, .unlit
    ld a, [wPlayerX]
    ld [wLightX], a
    ld a, [wPlayerY]
    ld [wLightY], a
    ; fall through
; light_around: the 3x3 blocks around (wLightX, wLightY) lit (LCD off: drawn with the map).
light_around:
    ld a, [wLightY]
    add PAD - 1
    ld c, a
    ld d, 3
.row:
    ld a, [wLightX]
    add PAD - 1
    ld b, a
    push de
    call block_addr
    pop de
    res 7, [hl]
    inc hl
    res 7, [hl]
    inc hl
    res 7, [hl]
    inc c
    dec d
    jr nz, .row
    ret

; light_step: a step started in a dark map: the line of 3 blocks it leaves behind goes dark, the line it
; comes to is lit, both queued for drawing; the light's centre moves to the player.
light_step:
    ld a, [wMapDark]
    and a
    ret z
    xor a
    ld [wLightIdx], a
    call step_delta
    ld a, [wLightX]
    add PAD
    sub d
    ld b, a
    ld a, [wLightY]
    add PAD
    sub e
    ld c, a
    ld a, $80
    call light_line
    call step_delta
    ld a, [wPlayerX]
    ld [wLightX], a
    add PAD
    add d
    ld b, a
    ld a, [wPlayerY]
    ld [wLightY], a
    add PAD
    add e
    ld c, a
    xor a
    ; fall through
; light_line: the 3 blocks across the step direction centred on padded (B, C) lit (A = 0) or unlit ($80).
light_line:
    ld [wLightMode], a
    ld a, [wMoveDir]
    cp LEFT
    jr nc, .column
    dec b
    call light_block
    inc b
    call light_block
    inc b
    jr light_block
.column:
    dec c
    call light_block
    inc c
    call light_block
    inc c
    ; fall through
; light_block: block (B, C) lit or unlit as wLightMode says, and queued for drawing. Keeps BC.
light_block:
    push bc
    call block_addr
    ld a, [hl]
    and $7F
    ld e, a
    ld a, [wLightMode]
    or e
    ld [hl], a
    pop bc
    push bc
    call queue_block
    pop bc
    ret

; step_delta: D, E = the x and y change of a step in direction wMoveDir.
step_delta:
    ld de, 0
    ld a, [wMoveDir]
    and a
    jr z, .down
    dec a
    jr z, .up
    dec a
    jr z, .left
    inc d
    ret
.down:
    inc e
    ret
.up:
    dec e
    ret
.left:
    dec d
    ret

; queue_block: queue the 4 tiles of padded block (B, C) into the BG map ring (staged in wLightBuf).
queue_block:
    call bg_addr
    push hl
    call block_addr
    ld a, [hl]
    call metatile_ptr
    ld a, [wLightIdx]
    add a
    add a
    add LOW(wLightBuf)
    ld e, a
    ld d, HIGH(wLightBuf)
    ld a, [wLightIdx]
    inc a
    ld [wLightIdx], a
    push de
    ld b, 4
.copy:
    ld a, [hl+]
    ld [de], a
    inc de
    dec b
    jr nz, .copy
    pop de
    pop hl
    ld bc, 2 << 8 | MODE_ROW
    push hl
    call queue_job
    pop hl
    ld a, l
    add 32
    ld l, a
    jr nc, .below
    inc h
.below:
    inc de
    inc de
    jp queue_job

; item_held: carry set when item A is in the BAG (its flag set; the berry: any left).
item_held:
    ld e, a
    ld d, 0
    ld hl, item_flags
    add hl, de
    ld a, [hl]
    cp $FF
    jp nz, check_cond
    ld a, [wBerries]
    cp 1
    ccf
    ret

; open_bag: the items held, listed in a box at the top right; A uses the one under the cursor, B or START
; closes. An empty BAG says so.
open_bag:
    xor a
    ld [wBagCount], a
    ld [wItemIdx], a
.item:
    ld a, [wItemIdx]
    call item_held
    jr nc, .next
    ld a, [wBagCount]
    ld e, a
    ld d, 0
    ld hl, wBagItems
    add hl, de
    ld a, [wItemIdx]
    ld [hl], a
    ld hl, wBagCount
    inc [hl]
.next:
    ld hl, wItemIdx
    inc [hl]
    ld a, [hl]
    cp NUM_ITEMS
    jr nz, .item
    ld a, [wBagCount]
    and a
    jr nz, .list
    ld a, TEXT_BAG
    jp show_text
.list:
    ld hl, bag_rows
    ld de, wBagBox
    ld bc, BAG_W * BAG_H
    call memcpy
    xor a
    ld [wItemIdx], a
.name:
    ld a, [wItemIdx]
    ld e, a
    ld d, 0
    ld hl, wBagItems
    add hl, de
    ld a, [hl]
    add a
    add a
    add a
    ld e, a
    ld d, 0
    ld hl, item_names
    add hl, de
    push hl
    ld a, [wItemIdx]
    inc a
    ld c, a
    ld hl, wBagBox + 2
    ld de, BAG_W
.row:
    add hl, de
    dec c
    jr nz, .row
    ld d, h
    ld e, l
    pop hl
    ld bc, ITEM_NAME - 1
    call memcpy
    ld hl, wItemIdx
    inc [hl]
    ld a, [wBagCount]
    cp [hl]
    jr nz, .name
    ld a, MODE_MENU
    ld [wMode], a
    call update_view
    call hide_window
    ld hl, WIN_MAP
    ld de, wBagBox
    ld bc, BAG_W << 8 | BAG_H
    call draw_rows
    ld hl, regs_bag
    call set_regs
    xor a
    ld [wBagCursor], a
    call bag_cursor_draw
.loop:
    call wait_frame
    call read_joypad
    ldh a, [hJoyPressed]
    and $0A
    jp nz, close_window
    ldh a, [hJoyPressed]
    bit 0, a
    jr nz, .use
    bit 6, a
    jr nz, .up
    bit 7, a
    jr z, .loop
    ld a, [wBagCount]
    dec a
    ld b, a
    ld a, [wBagCursor]
    cp b
    jr z, .loop
    call bag_cursor_erase
    ld hl, wBagCursor
    inc [hl]
    call bag_cursor_draw
    jr .loop
.up:
    ld a, [wBagCursor]
    and a
    jr z, .loop
    call bag_cursor_erase
    ld hl, wBagCursor
    dec [hl]
    call bag_cursor_draw
    jr .loop
.use:
    ld a, [wBagCursor]
    ld e, a
    ld d, 0
    ld hl, wBagItems
    add hl, de
    ld a, [hl]
    ld [wUseItem], a
    call close_window
    ; fall through
; use_item: item wUseItem used facing the tile in front: the script of a matching use, else a berry is
; eaten, else nothing happens.
use_item:
    ld a, [wPlayerX]
    ld b, a
    ld a, [wPlayerY]
    ld c, a
    ld a, [wFacing]
    call front_of
    ld hl, item_uses
.entry:
    ld a, [hl+]
    cp $FF
    jr z, .none
    ld d, a
    ld a, [wMapId]
    cp d
    jr nz, .skip3
    ld a, [hl+]
    cp b
    jr nz, .skip2
    ld a, [hl+]
    cp c
    jr nz, .skip1
    ld a, [wUseItem]
    cp [hl]
    jr nz, .skip1
    inc hl
    ld a, [hl]
    jp run_script
.skip3:
    inc hl
.skip2:
    inc hl
.skip1:
    inc hl
    inc hl
    jr .entry
.none:
    ld a, [wUseItem]
    cp ITEM_BERRY
    jr z, .berry
    ld a, TEXT_NOTHING
    jp show_text
.berry:
    call berry_heal
    jp show_text

; berry_heal: eat a berry: BERRY_HEAL HP more, at most full; A = the text to show (TEXT_FULL, and no berry
; eaten, when HP is full already).
berry_heal:
    ld a, [wHpMax]
    ld b, a
    ld a, [wHp]
    cp b
    ld a, TEXT_FULL
    ret z
    ld hl, wBerries
    dec [hl]
    ld a, [wHp]
    add BERRY_HEAL
    cp b
    jr c, .set
    ld a, b
.set:
    ld [wHp], a
    ld a, TEXT_ATE_BERRY
    ret

; bag_cursor_addr: HL = window address of the BAG cursor (row 1 + wBagCursor, column 1).
bag_cursor_addr:
    ld a, [wBagCursor]
    inc a
    swap a
    add a
    inc a
    ld l, a
    ld h, HIGH(WIN_MAP)
    ret

bag_cursor_draw:
    call bag_cursor_addr
    ld a, TILE_CURSOR
    jp poke

bag_cursor_erase:
    call bag_cursor_addr
    ld a, TILE_BLANK
    jp poke

; foe_ptr: HL = the record of foe wFoe.
foe_ptr:
    ld a, [wFoe]
    add a
    add a
    add a
    ld e, a
    ld d, 0
    ld hl, foes
    add hl, de
    ret

; battle: fight foe A. Each turn the box shows both HPs and FIGHT, ITEM, RUN (left/right, A). FIGHT hits for
; POWER (more with the weapon), ITEM eats a berry, RUN ends the fight where it stands; the foe hits back after
; FIGHT or ITEM. The foe's HP at 0: its flag is set and the map reloaded; the player's: `lose`.
battle:
    ld [wFoe], a
    call foe_ptr
    ld a, [hl]
    ld [wFoeHp], a
    xor a
    ld [wBattleCursor], a
.turn:
    call draw_battle
.input:
    call wait_frame
    call read_joypad
    ldh a, [hJoyPressed]
    bit 0, a
    jr nz, .choose
    bit 5, a
    jr nz, .left
    bit 4, a
    jr z, .input
    ld a, [wBattleCursor]
    cp 2
    jr z, .input
    call battle_cursor_erase
    ld hl, wBattleCursor
    inc [hl]
    call battle_cursor_draw
    jr .input
.left:
    ld a, [wBattleCursor]
    and a
    jr z, .input
    call battle_cursor_erase
    ld hl, wBattleCursor
    dec [hl]
    call battle_cursor_draw
    jr .input
.choose:
    ld a, [wBattleCursor]
    and a
    jr z, .fight
    dec a
    jr z, .item
    ld a, TEXT_RAN
    jp show_text
.fight:
    ld b, POWER
    ld a, WEAPON_FLAG
    push bc
    call check_cond
    pop bc
    jr nc, .hit
    ld a, b
    add WEAPON_POWER
    ld b, a
.hit:
    ld a, [wFoeHp]
    sub b
    jr nc, .foe_left
    xor a
.foe_left:
    ld [wFoeHp], a
    ld a, TEXT_HIT
    call show_text
    ld a, [wFoeHp]
    and a
    jr z, .won
    jr .foe_turn
.item:
    ld a, [wBerries]
    and a
    ld a, TEXT_NO_BERRIES
    jr z, .no_turn
    call berry_heal
    cp TEXT_FULL
    jr z, .no_turn
    call show_text
.foe_turn:
    call foe_ptr
    inc hl
    ld b, [hl]
    ld a, [wHp]
    sub b
    jr nc, .hp_left
    xor a
.hp_left:
    ld [wHp], a
    call foe_ptr
    inc hl
    inc hl
    inc hl
    ld a, [hl]
    call show_text
    ld a, [wHp]
    and a
    jp nz, .turn
    ld a, TEXT_FAINTED
    call show_text
    jp lose
.no_turn:
    call show_text
    jp .turn
.won:
    call foe_ptr
    inc hl
    inc hl
    ld a, [hl+]
    push hl
    call set_flag
    pop hl
    inc hl
    ld a, [hl]
    call show_text
    jp reload_map

; draw_battle: the fight box (the foe's name, both HPs as bars and numbers, the choices) with its cursor.
draw_battle:
    ld a, MODE_BATTLE
    ld [wMode], a
    call foe_ptr
    ld de, 5
    add hl, de
    ld a, [hl+]
    ld h, [hl]
    ld l, a
    ld de, wBattleBox
    ld bc, BOX_SIZE
    call memcpy
    ld a, [wFoeHp]
    ld hl, wBattleBox + FOE_HP_POS
    call put_number
    ld a, [wFoeHp]
    ld hl, wBattleBox + FOE_BAR_POS
    call put_bar
    ld a, [wHp]
    ld hl, wBattleBox + HP_POS
    call put_number
    ld a, [wHp]
    ld hl, wBattleBox + BAR_POS
    call put_bar
    call hide_window
    ld hl, WIN_MAP
    ld de, wBattleBox
    ld bc, 20 << 8 | 6
    call draw_rows
    ld hl, regs_text
    call set_regs
    ; fall through
battle_cursor_draw:
    call battle_cursor_addr
    ld a, TILE_CURSOR
    jp poke

battle_cursor_erase:
    call battle_cursor_addr
    ld a, TILE_BLANK
    jp poke

; battle_cursor_addr: HL = window address of the cursor before FIGHT, ITEM or RUN (row 4; columns 1, 7, 13).
battle_cursor_addr:
    ld a, [wBattleCursor]
    ld b, a
    add a
    add b
    add a
    add 4 * 32 + 1
    ld l, a
    ld h, HIGH(WIN_MAP)
    ret

; put_number: A (< 100) as two digit tiles at HL (a blank for a leading zero).
put_number:
    ld c, 0
.tens:
    cp 10
    jr c, .ones
    sub 10
    inc c
    jr .tens
.ones:
    ld b, a
    ld a, c
    and a
    ld a, TILE_BLANK
    jr z, .lead
    ld a, c
    add TILE_DIGIT0
.lead:
    ld [hl+], a
    ld a, b
    add TILE_DIGIT0
    ld [hl], a
    ret

; put_bar: A (HP) as BAR_W tiles at HL, two HP a tile: full, then a half for an odd one, then blanks (a bar of
; more than 2 * BAR_W HP shows full).
put_bar:
    ld b, BAR_W
.tile:
    cp 2
    jr c, .short
    sub 2
    ld [hl], TILE_BAR_FULL
    jr .next
.short:
    ld [hl], TILE_BLANK
    and a
    jr z, .next
    ld [hl], TILE_BAR_HALF
    xor a
.next:
    inc hl
    dec b
    jr nz, .tile
    ret

; lose: the player's HP ran out: back to LOSS_MAP with full HP (flags, items and the berries left kept).
lose:
    ld hl, wLosses
    inc [hl]
    ld a, [wHpMax]
    ld [wHp], a
    ld a, LOSS_MAP
    ld [wNextMap], a
    ld a, LOSS_X
    ld [wNextX], a
    ld a, LOSS_Y
    ld [wNextY], a
    ld a, LOSS_FACING
    ld [wNextFacing], a
    jp transition
"""


def map_header_extra(world: World, key: str) -> list[str]:
    """The story's fields of a map's header (after OVERWORLD's): block bytes, changes, darkness, enter event."""
    s, m = world.story, world.map_by_key[key]
    assert s is not None
    size = (m.width + 2 * PAD) * (m.height + 2 * PAD)
    if size > MAX_BLOCKS:
        raise ValueError(f"map {key}: {size} blocks with its border; at most {MAX_BLOCKS} fit in wBlocks")
    event = s.flag(m.enter_event) if m.enter_event else 0xFF
    return [f"    dw {size}, changes_{key}", f"    db {int(m.dark)}, ${event:02X}",
            f"changes_{key}:", f"    db {len(m.changes)}",
            *(f"    db ${s.cond(c.when):02X}, {c.x}, {c.y}, {world.metatile_ids[c.metatile]}" for c in m.changes)]


def person_extra(world: World, shown: str | None) -> str:
    assert world.story is not None
    return f", ${world.story.cond(shown):02X}"


def tables(world: World, encode, frame) -> list[str]:
    """Bank 0 tables of the story: scripts, items, uses, foes and the BAG and fight boxes."""
    s = world.story
    assert s is not None
    foe_ids = {f.key: i for i, f in enumerate(s.foes)}
    out = ["script_ptrs:", "    dw " + ", ".join(f"script_{k}" for k in s.scripts)]
    for name, records in s.scripts.items():
        out.append(f"script_{name}:")
        for r in records:
            sets = [s.flag(f) for f in r.sets] + [0xFF] * (2 - len(r.sets))
            action = (ACT_HEAL * r.heal) | (ACT_RELOAD * r.reload)
            if r.battle is not None:
                action |= ACT_BATTLE | foe_ids[r.battle] << 4
            text = world.text_ids[r.text] if r.text is not None else 0xFF
            clear = s.flag(r.clear) if r.clear else 0xFF
            out.append("    db " + ", ".join(f"${v:02X}" for v in (s.cond(r.when), *sets, clear, text, action)))
    out += ["item_flags:", "    db " + ", ".join(f"${s.flag(i.flag) if i.flag else 0xFF:02X}" for i in s.items),
            "item_names:", *(f"    db {', '.join(f'${b:02X}' for b in encode(i.name.ljust(ITEM_NAME)))}"
                             for i in s.items), "item_uses:"]
    items = [i.key for i in s.items]
    out += [f"    db {world.map_ids[u.map]}, {u.x}, {u.y}, {items.index(u.item)}, {list(s.scripts).index(u.script)}"
            for u in s.uses] + ["    db $FF", "foes:"]
    out += [f"    db {f.hp}, {f.attack}, {s.flag(f.win)}, {world.text_ids[f.strikes]}, {world.text_ids[f.beaten]}\n"
            f"    dw foe_box_{f.key}\n    db 0" for f in s.foes]
    for f in s.foes:
        box = frame(BOX_W, BOX_H, {1: f.name, 2: "YOU", 4: "FIGHT ITEM  RUN"})  # bars and numbers: draw_battle
        out += [f"foe_box_{f.key}:", "    db " + ", ".join(f"${b:02X}" for b in box)]
    bag = frame(BAG_W, len(s.items) + 2)
    out += ["bag_rows:", "    db " + ", ".join(f"${b:02X}" for b in bag)]
    return out
