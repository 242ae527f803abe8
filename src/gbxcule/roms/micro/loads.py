"""LOADS: every load addressing mode.

LD r,r' (all 49), LD r,n8, LD r,(HL), LD (HL),r, LD (HL),n8, LD A,(BC)/(DE) and back, LD A,(HL+)/(HL-)
and back, LD A,(a16) and back (ROM, WRAM and HRAM), LDH (a8), LDH (C), and the echo of WRAM at $E000.
Register state is dumped with PUSH AF/BC/DE/HL into a WRAM area (SP is the dump pointer; F is fixed at
the start and loads never change it); stores land in a WRAM buffer and in HRAM.
"""

from __future__ import annotations

from gbxcule.roms.micro.common import db, done, program, pushed, spec
from gbxcule.roms.spec import VerifySettings

REGS = ("b", "c", "d", "e", "h", "l", "a")
DUMP_END = 0xC800  # register dumps grow down from here (about 500 bytes)
WBUF = 0xC100  # 64-byte store buffer
HBUF = 0xFF90  # 4 bytes of HRAM
TABLE = bytes([0x3E, 0x71, 0xA8, 0x5D, 0xC2, 0x19, 0x86, 0xF4])
FLAGS = 0x50
TABLE_ADDR = 0x3F00  # where the ROM places TABLE


class _Builder:
    """Code and the expected machine state, instruction by instruction."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.r: dict[str, int] = dict.fromkeys(REGS, 0)
        self.mem: dict[int, int] = {TABLE_ADDR + i: v for i, v in enumerate(TABLE)}
        self.pushes: list[tuple[int, int]] = []

    def op(self, text: str) -> None:
        self.lines.append(text)

    @property
    def hl(self) -> int:
        return self.r["h"] << 8 | self.r["l"]

    def set16(self, pair: str, value: int) -> None:
        self.op(f"ld {pair}, ${value:04X}")
        self.r[pair[0]], self.r[pair[1]] = value >> 8, value & 0xFF

    def dump(self) -> None:
        self.op("push af\n    push bc\n    push de\n    push hl")
        r = self.r
        self.pushes += [(r["a"], FLAGS), (r["b"], r["c"]), (r["d"], r["e"]), (r["h"], r["l"])]

    def load_all(self, seed: int) -> None:
        for i, reg in enumerate(REGS):
            v = (seed * 37 + i * 0x23 + 0x11) & 0xFF
            self.op(f"ld {reg}, ${v:02X}")
            self.r[reg] = v

    def read(self, dst: str, addr: int, text: str) -> None:
        self.op(text)
        self.r[dst] = self.mem[addr]

    def write(self, addr: int, value: int, text: str) -> None:
        self.op(text)
        self.mem[addr] = value

    def step_hl(self, delta: int) -> None:
        v = (self.hl + delta) & 0xFFFF
        self.r["h"], self.r["l"] = v >> 8, v & 0xFF


def _build() -> _Builder:
    b = _Builder()
    r = b.r
    b.op(f"ld bc, ${FLAGS:04X}\n    push bc\n    pop af\n    ld sp, ${DUMP_END:04X}")
    r["b"], r["c"] = 0, FLAGS
    b.load_all(0)  # LD r,n8
    b.dump()
    for k, dst in enumerate(REGS):  # LD r,r'
        for src in REGS:
            b.load_all(k * 8 + REGS.index(src) + 1)
            b.op(f"ld {dst}, {src}")
            r[dst] = r[src]
            b.dump()
    # LD r,(HL), the last ones overwriting H and L
    b.set16("hl", TABLE_ADDR)
    for i, dst in enumerate(("b", "c", "d", "e", "a", "l")):
        if i:
            b.op("inc hl")
            b.step_hl(1)
        b.read(dst, b.hl, f"ld {dst}, [hl]")
    b.dump()
    b.set16("hl", TABLE_ADDR + 6)
    b.read("h", b.hl, "ld h, [hl]")
    b.dump()
    # LD (HL),r and LD (HL),n8
    b.load_all(99)
    b.set16("hl", WBUF)
    for src in REGS:
        b.write(b.hl, r[src], f"ld [hl], {src}")
        b.op("inc hl")
        b.step_hl(1)
    b.write(b.hl, 0x77, "ld [hl], $77")
    # LD (BC),A / (DE),A and back
    b.set16("bc", WBUF + 16)
    b.set16("de", WBUF + 17)
    b.op("ld a, $3C")
    r["a"] = 0x3C
    b.write(WBUF + 16, 0x3C, "ld [bc], a")
    b.op("ld a, $C3")
    r["a"] = 0xC3
    b.write(WBUF + 17, 0xC3, "ld [de], a")
    b.read("a", WBUF + 16, "ld a, [bc]")
    b.dump()
    b.read("a", WBUF + 17, "ld a, [de]")
    b.dump()
    b.set16("bc", TABLE_ADDR + 2)
    b.set16("de", TABLE_ADDR + 5)
    b.read("a", TABLE_ADDR + 2, "ld a, [bc]")
    b.op("ld l, a")
    r["l"] = r["a"]
    b.read("a", TABLE_ADDR + 5, "ld a, [de]")
    b.dump()
    # LD (HL+),A / (HL-),A and LD A,(HL+) / (HL-)
    b.set16("hl", WBUF + 32)
    for v, step in ((0x11, 1), (0x22, 1), (0x33, -1), (0x44, -1), (0x55, 1)):
        b.op(f"ld a, ${v:02X}")
        r["a"] = v
        b.write(b.hl, v, "ld [hl+], a" if step > 0 else "ld [hl-], a")
        b.step_hl(step)
    b.dump()
    b.set16("hl", TABLE_ADDR + 3)
    for dst, step in (("b", 1), ("c", 1), ("d", -1), ("e", -1), ("a", -1)):
        b.read("a", b.hl, "ld a, [hl+]" if step > 0 else "ld a, [hl-]")
        b.step_hl(step)
        if dst != "a":
            b.op(f"ld {dst}, a")
            r[dst] = r["a"]
    b.dump()
    # LD (a16),A and LD A,(a16): WRAM, ROM, HRAM through the 3-byte forms
    b.op("ld a, $5E")
    r["a"] = 0x5E
    b.write(WBUF + 48, 0x5E, f"ld [${WBUF + 48:04X}], a")
    b.write(HBUF + 2, 0x5E, f"ld [${HBUF + 2:04X}], a")
    b.read("a", TABLE_ADDR + 7, f"ld a, [${TABLE_ADDR + 7:04X}]")
    b.dump()
    b.read("a", WBUF + 48, f"ld a, [${WBUF + 48:04X}]")
    b.op("ld b, a")
    r["b"] = r["a"]
    b.read("a", HBUF + 2, f"ld a, [${HBUF + 2:04X}]")
    b.dump()
    # LDH (a8) and LDH (C)
    b.op("ld a, $99")
    r["a"] = 0x99
    b.write(HBUF, 0x99, f"ldh [${HBUF & 0xFF:02X}], a")
    b.op("ld c, $91\n    ld a, $AA")
    r["c"], r["a"] = 0x91, 0xAA
    b.write(HBUF + 1, 0xAA, "ldh [c], a")
    b.read("a", HBUF, f"ldh a, [${HBUF & 0xFF:02X}]")
    b.op("ld d, a")
    r["d"] = r["a"]
    b.op("ld c, $92")
    r["c"] = 0x92
    b.write(HBUF + 2, r["a"], "ldh [c], a")
    b.op("ld c, $91")
    r["c"] = 0x91
    b.read("a", HBUF + 1, "ldh a, [c]")
    b.dump()
    # Echo RAM: $E000-$FDFF mirrors $C000-$DDFF, both ways
    b.op("ld a, $E1")
    r["a"] = 0xE1
    b.write(WBUF + 56, 0xE1, f"ld [${WBUF + 56 + 0x2000:04X}], a")
    b.op("ld a, $1E")
    r["a"] = 0x1E
    b.write(WBUF + 57, 0x1E, f"ld [${WBUF + 57:04X}], a")
    b.set16("hl", WBUF + 58 + 0x2000)
    b.write(WBUF + 58, 0x4B, "ld [hl], $4B")
    b.read("e", WBUF + 57, f"ld a, [${WBUF + 57 + 0x2000:04X}]\n    ld e, a")
    b.read("d", WBUF + 56, f"ld a, [${WBUF + 56:04X}]\n    ld d, a")
    b.read("a", WBUF + 58, "ld a, [hl]")
    b.dump()
    return b


def signature() -> dict[int, bytes]:
    b = _build()
    wbuf = bytes(b.mem.get(WBUF + i, 0) for i in range(64))
    hbuf = bytes(b.mem.get(HBUF + i, 0) for i in range(4))
    return done() | {DUMP_END - 2 * len(b.pushes): pushed(b.pushes), WBUF: wbuf, HBUF: hbuf}


def source() -> str:
    b = _build()
    code = "\n".join("    " + x for x in b.lines)
    return program(f"""
    ; clear the store buffer and the HRAM bytes the test writes
    ld hl, ${WBUF:04X}
    ld bc, 64
    ld e, 0
    call memset
    xor a
    ld hl, ${HBUF:04X}
    ld [hl+], a
    ld [hl+], a
    ld [hl+], a
    ld [hl+], a
{code}
    ld sp, $FFFE
    jp finish

SECTION "table", ROM0[${TABLE_ADDR:04X}]
{db(TABLE)}
""")


SPEC = spec(
    name="LOADS",
    description="every load addressing mode: r,r / n8 / (HL) / (BC) (DE) / (HL+-) / (a16) / LDH / echo RAM",
    covers=("ld_r_r", "ld_r_n8", "ld_r_hl", "ld_hl_r", "ld_hl_n8", "ld_bc_de", "ld_hli_hld", "ld_a16",
            "ldh_a8", "ldh_c", "echo_ram"),
    source=source,
    frames=72,
    signature=signature,
    verify=VerifySettings(frames_per_step=1, release_after_frames=1, steps=100),
)
