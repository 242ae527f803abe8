"""MEM_RWB (benchmark): WRAM fills and read-backs at several strides, forever.

Each pass: a stride-1 fill with (HL+) and a 16-bit sum read back; a descending fill with (HL-) read back
both ways; stride-17 writes in one page read back at stride 3; a 512-byte copy summed through (BC);
read-modify-write ops on (HL) (INC, DEC, SET, RES, SWAP) over a freshly filled page. The checksums go to
$C000-$C009 and the done marker follows; the filled regions (except the read-modify-write page) are
rewritten with the same bytes every pass, so they belong to the signature too.
"""

from __future__ import annotations

from gbxcule.roms.micro.common import MARK_DONE, done, program, spec, store
from gbxcule.roms.spec import VerifySettings

SUMS = 0xC000
R1 = 0xC100  # 512 bytes, stride 1
R2 = 0xC300  # 256 bytes, descending
R3 = 0xC400  # 256 bytes, stride 17
COPY = 0xD000  # 512 bytes, copy of R1
RMW = 0xD200  # 256 bytes, read-modify-write (transient, not in the signature)


def _rlc(v: int) -> int:
    return (v << 1 | v >> 7) & 0xFF


def _regions() -> tuple[bytes, bytes, bytes, bytes]:
    r1 = bytes((0x13 + 7 * i) & 0xFF for i in range(512))
    r2 = bytearray(256)
    v = 0xA0
    for i in range(255, -1, -1):
        r2[i] = v
        v = _rlc(v) ^ 0x1D
    r3 = bytearray(256)
    for k in range(256):
        r3[(k * 17) & 0xFF] = k
    rmw = []
    for i in range(256):
        v = ((0x80 + 1) ^ i) | 0x01
        v &= 0x7F
        rmw.append((v << 4 | v >> 4) & 0xFF)
    return r1, bytes(r2), bytes(r3), bytes(rmw)


def signature() -> dict[int, bytes]:
    r1, r2, r3, rmw = _regions()
    sum1 = sum(r1) & 0xFFFF
    x2 = 0
    for v in r2:
        x2 = _rlc(v ^ x2)
    sum2 = sum(r2) & 0xFFFF
    c3 = 0
    for k in range(256):
        c3 = _rlc((c3 + r3[(k * 3) & 0xFF]) & 0xFF)
    sums = (sum1.to_bytes(2, "little") + bytes([x2]) + sum2.to_bytes(2, "little") + bytes([c3])
            + (sum(r1) & 0xFFFF).to_bytes(2, "little") + (sum(rmw) & 0xFFFF).to_bytes(2, "little"))
    return done() | {SUMS: sums, R1: r1, R2: r2, R3: r3, COPY: r1}


def source() -> str:
    return program(f"""
pass:
    ; stride 1 with (HL+): v = $13, $1A, ...
    ld hl, ${R1:04X}
    ld bc, 512
    ld a, $13
.fill1:
    ld [hl+], a
    add a, 7
    ld e, a
    dec bc
    ld a, b
    or c
    ld a, e
    jr nz, .fill1
    ld hl, ${R1:04X}
    ld de, 0
    ld bc, 512
.sum1:
    ld a, [hl+]
    add a, e
    ld e, a
    jr nc, .sum1_nc
    inc d
.sum1_nc:
    dec bc
    ld a, b
    or c
    jr nz, .sum1
{store(SUMS, "ed")}

    ; descending with (HL-), read back ascending (HL+) and descending (HL-)
    ld hl, ${R2 + 255:04X}
    ld b, 0
    ld a, $A0
.fill2:
    ld [hl-], a
    rlca
    xor $1D
    dec b
    jr nz, .fill2
    ld hl, ${R2:04X}
    ld c, 0
.xor2:
    ld a, [hl+]
    xor c
    rlca
    ld c, a
    dec b
    jr nz, .xor2
    ld a, c
    ld [${SUMS + 2:04X}], a
    ld hl, ${R2 + 255:04X}
    ld de, 0
.sum2:
    ld a, [hl-]
    add a, e
    ld e, a
    ld a, d
    adc a, 0
    ld d, a
    dec b
    jr nz, .sum2
{store(SUMS + 3, "ed")}

    ; stride 17 within a page, read back at stride 3
    ld hl, ${R3:04X}
    xor a
.fill3:
    ld [hl], a
    inc a
    ld c, a
    ld a, l
    add a, 17
    ld l, a
    ld a, c
    dec b
    jr nz, .fill3
    ld c, 0
.read3:
    ld a, c
    add a, [hl]
    rlca
    ld c, a
    ld a, l
    add a, 3
    ld l, a
    dec b
    jr nz, .read3
    ld a, c
    ld [${SUMS + 5:04X}], a

    ; copy R1, then sum the copy through (BC) into HL
    ld hl, ${R1:04X}
    ld de, ${COPY:04X}
    ld bc, 512
    call memcpy
    ld bc, ${COPY:04X}
    ld hl, 0
    ld d, 0
.sum4:
    ld a, [bc]
    ld e, a
    add hl, de
    inc bc
    ld a, b
    cp ${(COPY + 512) >> 8:02X}
    jr nz, .sum4
{store(SUMS + 6, "lh")}

    ; read-modify-write on (HL)
    ld hl, ${RMW:04X}
    ld bc, 256
    ld e, $80
    call memset
    ld hl, ${RMW:04X}
.rmw:
    inc [hl]
    inc [hl]
    dec [hl]
    ld a, [hl]
    xor l
    ld [hl], a
    set 0, [hl]
    res 7, [hl]
    swap [hl]
    inc l
    jr nz, .rmw
    ld de, 0
.sum5:
    ld a, [hl+]
    add a, e
    ld e, a
    jr nc, .sum5_nc
    inc d
.sum5_nc:
    ld a, l
    or a
    jr nz, .sum5
{store(SUMS + 8, "ed")}

{MARK_DONE}
    jp pass
""")


SPEC = spec(
    name="MEM_RWB",
    description="benchmark: WRAM fills and read-backs (stride 1, 17, 3, (HL+), (HL-), (BC), RMW), forever",
    covers=("benchmark", "wram", "ld_hli_hld", "ld_bc_de", "rmw_hl", "memcpy", "checksum"),
    source=source,
    frames=76,
    signature=signature,
    verify=VerifySettings(frames_per_step=24, release_after_frames=8, steps=100),
)
