"""OPS16_SP: 16-bit arithmetic and stack-pointer ops, with flags.

ADD HL,rr, INC/DEC rr, ADD SP,e8, LD HL,SP+e8, LD SP,HL, LD SP,n16, LD (a16),SP and PUSH/POP (AF's low
nibble reads back as 0). Results are pushed into one WRAM area (SP is reloaded with the known results
pointer after every case that moves it) and SP values are stored with LD (a16),SP into a second area.
"""

from __future__ import annotations

from gbxcule.roms.micro import model
from gbxcule.roms.micro.common import STACK_TOP, done, program, pushed, spec
from gbxcule.roms.spec import VerifySettings

PUSH_END = 0xC400  # the pushed results end here (they grow downwards)
SP_RESULTS = 0xC400  # LD (a16),SP results, upwards

ADD_HL_INPUTS = ((0x0FFF, 0x0001), (0xFFFF, 0x0001), (0x8000, 0x8000), (0x00FF, 0x0001), (0x1234, 0x4321),
                 (0x0800, 0x0800), (0xF000, 0x1000), (0x7FFF, 0x7FFF))
WORDS = (0xFFFF, 0x0000, 0x00FF, 0x7FFF, 0x8000, 0x0F0F)
SP_VALUES = (0xFFF8, 0x0000, 0x000F, 0x00F0, 0xC0FF, 0x1234, 0xFFFF, 0x8080)
OFFSETS = (1, -1, 127, -128, 8, -16)
FLAGS_IN = (0x00, 0xF0)


class _Builder:
    """Generates the code case by case while the model tracks the expected results."""

    def __init__(self) -> None:
        self.lines: list[str] = [f"ld [${SP_RESULTS:04X}], sp", f"ld sp, ${PUSH_END:04X}"]
        self.sp_results = [STACK_TOP]
        self.pushes: list[tuple[int, int]] = []

    def emit(self, *lines: str) -> None:
        self.lines += lines

    @property
    def sp(self) -> int:
        return PUSH_END - 2 * len(self.pushes)

    def set_flags(self, f: int, pair: str = "bc") -> None:
        self.emit(f"ld {pair}, ${f:04X}", f"push {pair}", "pop af")

    def push(self, pair: str, value: int) -> None:
        self.emit(f"push {pair}")
        self.pushes.append((value >> 8, value & 0xFF))

    def store_sp(self, value: int) -> None:
        self.emit(f"ld [${SP_RESULTS + 2 * len(self.sp_results):04X}], sp")
        self.sp_results.append(value)

    def restore_sp(self) -> None:
        self.emit(f"ld sp, ${self.sp:04X}")


def _build() -> _Builder:
    b = _Builder()
    for i, (hl, rr) in enumerate(ADD_HL_INPUTS):
        fin = FLAGS_IN[i % 2]
        for pair in ("bc", "de", "hl", "sp"):
            other = "de" if pair == "bc" else "bc"
            b.set_flags(fin, other)
            b.emit(f"ld hl, ${hl:04X}")
            if pair == "sp":
                b.emit(f"ld sp, ${rr:04X}", "add hl, sp")
                b.restore_sp()
            else:
                if pair != "hl":
                    b.emit(f"ld {pair}, ${rr:04X}")
                b.emit(f"add hl, {pair}")
            r, f = model.add16(hl, hl if pair == "hl" else rr, fin)
            b.push("af", f)
            b.push("hl", r)
    for i, w in enumerate(WORDS):
        fin = FLAGS_IN[i % 2]
        for op, delta in (("inc", 1), ("dec", -1)):
            for pair in ("bc", "de", "hl"):
                b.set_flags(fin, "de" if pair == "bc" else "bc")
                b.emit(f"ld {pair}, ${w:04X}", f"{op} {pair}")
                b.push("af", fin)
                b.push(pair, (w + delta) & 0xFFFF)
            b.emit(f"ld sp, ${w:04X}", f"{op} sp")
            b.store_sp((w + delta) & 0xFFFF)
            b.restore_sp()
    for i, sp in enumerate(SP_VALUES):
        for j, e in enumerate(OFFSETS):
            fin = FLAGS_IN[(i + j) % 2]
            r, f = model.sp_plus(sp, e)
            b.set_flags(fin)
            b.emit(f"ld sp, ${sp:04X}", f"add sp, {e}")
            b.store_sp(r)
            b.restore_sp()
            b.push("af", f)
            b.set_flags(fin ^ 0xF0)
            b.emit(f"ld sp, ${sp:04X}", f"ld hl, sp+({e})")
            b.restore_sp()
            b.push("af", f)
            b.push("hl", r)
    for w in WORDS:
        b.emit(f"ld hl, ${w:04X}", "ld sp, hl")
        b.store_sp(w)
        b.restore_sp()
    # POP AF keeps only the high nibble of F; PUSH/POP move words between every pair.
    for w in (0x12FF, 0x340F, 0x56A5, 0x0000):
        b.emit(f"ld bc, ${w:04X}", "push bc", "pop af")
        b.push("af", w & 0xFFF0)
    b.emit("ld bc, $1122", "ld de, $3344", "ld hl, $5566", "push bc", "push de", "push hl",
           "pop bc", "pop de", "pop hl")
    b.push("bc", 0x5566)
    b.push("de", 0x3344)
    b.push("hl", 0x1122)
    b.emit("ld bc, $789A", "push bc", "pop af", "push af", "pop de")
    b.push("de", 0x7890)
    b.store_sp(b.sp)
    return b


def signature() -> dict[int, bytes]:
    b = _build()
    sp_bytes = b"".join(v.to_bytes(2, "little") for v in b.sp_results)
    return done() | {b.sp: pushed(b.pushes), SP_RESULTS: sp_bytes}


def source() -> str:
    b = _build()
    code = "\n".join("    " + x for x in b.lines)
    return program(f"""
{code}
    ld sp, $FFFE
    jp finish
""")


SPEC = spec(
    name="OPS16_SP",
    description="ADD HL,rr, INC/DEC rr, ADD SP,e8, LD HL,SP+e8, LD SP,HL, LD (a16),SP and PUSH/POP incl. AF",
    covers=("alu16", "add_hl", "inc16", "dec16", "add_sp", "ld_hl_sp", "ld_sp_hl", "ld_a16_sp", "push",
            "pop", "flags"),
    source=source,
    frames=72,
    signature=signature,
    verify=VerifySettings(frames_per_step=1, release_after_frames=1, steps=100),
)
