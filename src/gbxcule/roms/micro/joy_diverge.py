"""JOY_DIVERGE_PERSIST (benchmark): joypad-driven divergence between environments, forever.

Each outer iteration reads JOYP (d-pad then buttons, 1 = pressed, as ``dpad << 4 | buttons``). When any
button is pressed the mode byte becomes ``fold(pressed)`` (index of the highest pressed bit, 1-8, plus
$10 per pressed button); otherwise it keeps its value, so the mode persists. ``mode & 3`` picks the inner
loop: 0 ALU-heavy, 1 stride-1 WRAM writes, 2 stride-17 WRAM writes, 3 branchy LFSR code; each is seeded
with the mode and writes its result. Signature block at $C000-$C010:

    $C000 mode          $C001 loop 0 result (2)   $C003 loop 1 (2)   $C005 loop 2 (2)
    $C007 loop 3 (4)    $C00B ran flags, one per loop (4)   $C00F last non-zero pressed byte
    $C010 loop index run last
"""

from __future__ import annotations

from gbxcule.roms.micro import model
from gbxcule.roms.micro.common import MARK_DONE, done, program, spec, store
from gbxcule.roms.spec import VerifySettings

BLOCK = 0xC000
MODE, RESULTS, RAN, LAST, LOOP_INDEX = 0xC000, 0xC001, 0xC00B, 0xC00F, 0xC010
BLOCK_SIZE = 17
PAGE1, PAGE2 = 0xD000, 0xD100


def fold(pressed: int) -> int:
    """The mode a non-zero pressed byte selects."""
    mode = 0
    for i in range(8):
        if pressed >> i & 1:
            mode = ((mode & 0xF0) + 0x10) | (i + 1)
    return mode


def _rlc(v: int) -> int:
    return (v << 1 | v >> 7) & 0xFF


def loop_result(loop: int, seed: int) -> bytes:
    """The bytes inner loop `loop` writes for mode `seed`."""
    if loop == 0:
        h, l = 0xAC, seed
        for _ in range(128):
            l, f = model.alu8("add", l, h, 0)
            a, f = model.alu8("adc", h, 0x35, f)
            h, _ = model.rot_a("rrc", a, f)
            l ^= h
        return bytes([l, h])
    if loop == 1:
        return (sum((seed + 3 * i) & 0xFF for i in range(256)) & 0xFFFF).to_bytes(2, "little")
    if loop == 2:
        page = bytearray(256)
        for k in range(256):
            page[(k * 17) & 0xFF] = seed ^ k
        c = 0
        for v in page:
            c = _rlc((c + v) & 0xFF)
        return bytes([c, page[0x55]])
    x, counts = seed | 1, [0, 0, 0, 0]  # x >= $80, bit 2, neither, taps
    for _ in range(255):
        x, tap = x >> 1, x & 1
        if tap:
            x ^= 0xB8
            counts[3] += 1
        counts[0 if x & 0x80 else 1 if x & 4 else 2] += 1
    return bytes(counts)


def expected_block(pressed: int) -> bytes:
    """$C000-$C010 once the ROM has run with `pressed` held from power-on (0: no buttons)."""
    block = bytearray(BLOCK_SIZE)
    mode = fold(pressed) if pressed else 0
    loop = mode & 3
    block[MODE - BLOCK] = mode
    offset = (RESULTS - BLOCK) + 2 * loop
    res = loop_result(loop, mode)
    block[offset:offset + len(res)] = res
    block[RAN - BLOCK + loop] = 1
    block[LAST - BLOCK] = pressed
    block[LOOP_INDEX - BLOCK] = loop
    return bytes(block)


def signature() -> dict[int, bytes]:
    return done() | {BLOCK: expected_block(0)}


def _finish_loop(k: int) -> str:
    return f"""    ld a, 1
    ld [${RAN + k:04X}], a
    jp outer"""


def source() -> str:
    return program(f"""
    ld hl, ${BLOCK:04X}
    ld bc, {BLOCK_SIZE}
    ld e, 0
    call memset
outer:
    ; pressed = d-pad << 4 | buttons, 1 = pressed
    ld a, $20
    ldh [rJOYP], a
    ldh a, [rJOYP]
    ldh a, [rJOYP]
    cpl
    and $0F
    swap a
    ld b, a
    ld a, $10
    ldh [rJOYP], a
    ldh a, [rJOYP]
    ldh a, [rJOYP]
    ldh a, [rJOYP]
    ldh a, [rJOYP]
    cpl
    and $0F
    or b
    ld b, a
    ld a, $30
    ldh [rJOYP], a
    ld a, b
    or a
    jr z, .keep
    ld [${LAST:04X}], a
    call fold
    ld [${MODE:04X}], a
.keep:
{MARK_DONE}
    ld a, [${MODE:04X}]
    and 3
    ld [${LOOP_INDEX:04X}], a
    add a, a
    ld l, a
    ld h, 0
    ld de, loop_table
    add hl, de
    ld a, [hl+]
    ld h, [hl]
    ld l, a
    jp hl

loop_table:
    dw loop_alu, loop_stride1, loop_stride17, loop_branchy

; fold: A = pressed (non-zero) -> A = mode
fold:
    ld b, a
    ld d, 0
    ld e, 1
.bit:
    srl b
    jr nc, .clear
    ld a, d
    and $F0
    add a, $10
    or e
    ld d, a
.clear:
    inc e
    ld a, b
    or a
    jr nz, .bit
    ld a, d
    ret

loop_alu:
    ld a, [${MODE:04X}]
    ld l, a
    ld h, $AC
    ld b, 128
.mix:
    ld a, l
    add a, h
    ld l, a
    ld a, h
    adc a, $35
    rrca
    ld h, a
    xor l
    ld l, a
    dec b
    jr nz, .mix
    ld a, l
    ld [${RESULTS:04X}], a
    ld a, h
    ld [${RESULTS + 1:04X}], a
{_finish_loop(0)}

loop_stride1:
    ld a, [${MODE:04X}]
    ld hl, ${PAGE1:04X}
    ld b, 0
.fill:
    ld [hl+], a
    add a, 3
    dec b
    jr nz, .fill
    ld hl, ${PAGE1:04X}
    ld de, 0
.sum:
    ld a, [hl+]
    add a, e
    ld e, a
    jr nc, .no_carry
    inc d
.no_carry:
    dec b
    jr nz, .sum
{store(RESULTS + 2, "ed")}
{_finish_loop(1)}

loop_stride17:
    ld a, [${MODE:04X}]
    ld c, a
    ld hl, ${PAGE2:04X}
    ld b, 0
    ld e, 0
.fill:
    ld a, e
    xor c
    ld [hl], a
    ld a, l
    add a, 17
    ld l, a
    inc e
    dec b
    jr nz, .fill
    ld c, 0
.read:
    ld a, [hl+]
    add a, c
    rlca
    ld c, a
    dec b
    jr nz, .read
    ld a, c
    ld [${RESULTS + 4:04X}], a
    ld a, [${PAGE2 + 0x55:04X}]
    ld [${RESULTS + 5:04X}], a
{_finish_loop(2)}

loop_branchy:
    ld a, [${MODE:04X}]
    or 1
    ld c, a
    ld de, 0
    ld hl, 0
    ld b, 255
.step:
    srl c
    jr nc, .no_tap
    ld a, c
    xor $B8
    ld c, a
    inc l
.no_tap:
    bit 7, c
    jr z, .low
    inc d
    jr .next
.low:
    bit 2, c
    jr z, .neither
    inc e
    jr .next
.neither:
    inc h
.next:
    dec b
    jr nz, .step
{store(RESULTS + 6, "dehl")}
{_finish_loop(3)}
""")


SPEC = spec(
    name="JOY_DIVERGE_PERSIST", title="JOY_DIVERGE",
    description="benchmark: JOYP-driven persistent mode picks one of four inner loops (divergence), forever",
    covers=("benchmark", "joypad", "divergence", "jp_hl", "wram", "alu8", "branch"),
    source=source,
    frames=72,
    signature=signature,
    verify=VerifySettings(frames_per_step=24, release_after_frames=8, steps=100),
)
