"""TIMER: DIV and TIMA at every TAC rate, TMA reload on overflow, TAC read-back, timer interrupt count.

Each measurement resets the divider by writing DIV, starts TIMA (TAC written while the timer was off, so
no glitch increment), spins a delay of exactly known length and reads the counter. The expected values
come from cycle counts (instruction timings from `gbxcule.core.isa`): the elapsed time E runs from the
DIV write to the read, both LDH instructions accessing the register at the same point of their last
M-cycle. TIMA counts falling edges of divider bit 9/3/5/7 (TAC 0/1/2/3), i.e. every 1024/16/64/256 cycles.
Sub-instruction timing (when in its M-cycle an access lands) is not modelled: every delay is chosen so that
E sits half a period away from the nearest edge, which makes each result robust to it.
"""

from __future__ import annotations

from gbxcule.core.isa import BASE
from gbxcule.roms.micro.common import INT_TIMER, done, program, spec
from gbxcule.roms.spec import VerifySettings

RESULTS = 0xC000
COUNT = 0xC0F0  # timer interrupt counter
PERIODS = (1024, 16, 64, 256)  # cycles per TIMA increment, by TAC rate
TIMA_TICKS = (5, 37, 11, 9)  # expected TIMA per rate
DIV_VALUES = (3, 40)
RELOAD_TICKS, TMA, TIMA_START = 14, 0xC0, 0xFC
INTERRUPTS = 5

LDH = BASE[0xE0].cycles  # LDH (a8),A and LDH A,(a8): 12, accessing in the last M-cycle
NOP = BASE[0x00].cycles
LD_B, DEC_B, JR_NZ = BASE[0x06].cycles, BASE[0x05].cycles, BASE[0x20]
LD_BC, DEC_BC, LD_A_B, OR_C = BASE[0x01].cycles, BASE[0x0B].cycles, BASE[0x78].cycles, BASE[0xB1].cycles
LOOP8 = DEC_B + JR_NZ.cycles  # per iteration of `dec b / jr nz`; the last one is 4 cycles shorter
LOOP16 = DEC_BC + LD_A_B + OR_C + JR_NZ.cycles
assert JR_NZ.cycles_not_taken is not None  # a conditional jump has both timings
JR_SAVED = JR_NZ.cycles - JR_NZ.cycles_not_taken


def delay(cycles: int, label: str) -> str:
    """Code that takes exactly `cycles` T-cycles (a multiple of 4) and clobbers A, B, C, F."""
    if cycles % 4:
        raise ValueError(f"delay of {cycles} cycles is not a whole number of M-cycles")
    code, rest = [], cycles
    fixed16 = LD_BC - JR_SAVED
    if rest >= fixed16 + 2 * LOOP16:
        n = (rest - fixed16) // LOOP16
        code += [f"ld bc, {n}", f"{label}_16:", "dec bc", "ld a, b", "or c", f"jr nz, {label}_16"]
        rest -= fixed16 + n * LOOP16
    fixed8 = LD_B - JR_SAVED
    if rest >= fixed8 + LOOP8:
        n = min((rest - fixed8) // LOOP8, 255)
        code += [f"ld b, {n}", f"{label}_8:", "dec b", f"jr nz, {label}_8"]
        rest -= fixed8 + n * LOOP8
    code += ["nop"] * (rest // NOP)
    return "\n".join("    " + c if not c.endswith(":") else c for c in code)


def _elapsed(ticks: int, period: int) -> int:
    """E half a period past the `ticks`-th edge."""
    return ticks * period + period // 2


def signature() -> dict[int, bytes]:
    results = [*DIV_VALUES, *TIMA_TICKS, (TMA + RELOAD_TICKS - (0x100 - TIMA_START)) & 0xFF,
               0xE0 | INT_TIMER, 0xF8 | 0x05, 0xF8, INTERRUPTS]
    return done() | {RESULTS: bytes(results)}


def source() -> str:
    parts = []
    for i, k in enumerate(DIV_VALUES):
        e = _elapsed(k, 256)
        parts.append(f"""    ldh [rDIV], a
{delay(e - LDH, f"div{i}")}
    ldh a, [rDIV]
    ld [${RESULTS + i:04X}], a""")
    for rate, (period, ticks) in enumerate(zip(PERIODS, TIMA_TICKS, strict=True)):
        e = _elapsed(ticks, period)
        parts.append(f"""    xor a
    ldh [rTAC], a
    ldh [rTIMA], a
    ld a, {4 | rate}
    ldh [rDIV], a
    ldh [rTAC], a
{delay(e - 2 * LDH, f"rate{rate}")}
    ldh a, [rTIMA]
    ld [${RESULTS + 2 + rate:04X}], a""")
    e = _elapsed(RELOAD_TICKS, 16)
    parts.append(f"""    xor a
    ldh [rTAC], a
    ldh [rIF], a
    ld a, ${TMA:02X}
    ldh [rTMA], a
    ld a, ${TIMA_START:02X}
    ldh [rTIMA], a
    ld a, 5
    ldh [rDIV], a
    ldh [rTAC], a
{delay(e - 2 * LDH, "reload")}
    ldh a, [rTIMA]
    ld [${RESULTS + 6:04X}], a
    ldh a, [rIF]
    ld [${RESULTS + 7:04X}], a
    ld a, 5
    ldh [rTAC], a
    ldh a, [rTAC]
    ld [${RESULTS + 8:04X}], a
    xor a
    ldh [rTAC], a
    ldh a, [rTAC]
    ld [${RESULTS + 9:04X}], a""")
    # TIMA from 0 with TMA 0 overflows every 256 * 16 cycles; the handlers (about 100 cycles each) only
    # stretch the delay, which ends half an overflow period after the INTERRUPTS-th one.
    parts.append(f"""    xor a
    ldh [rTIMA], a
    ldh [rTMA], a
    ld [${COUNT:04X}], a
    ldh [rIF], a
    ld a, {INT_TIMER}
    ldh [rIE], a
    ld a, 5
    ldh [rDIV], a
    ldh [rTAC], a
    ei
{delay(_elapsed(INTERRUPTS, 4096) - 2 * LDH - NOP - INTERRUPTS * 100, "count")}
    di
    ld a, [${COUNT:04X}]
    ld [${RESULTS + 10:04X}], a
    xor a
    ldh [rTAC], a
    ldh [rIE], a
    jp finish

timer_handler:
    push af
    ld a, [${COUNT:04X}]
    inc a
    ld [${COUNT:04X}], a
    pop af
    reti""")
    return program("\n".join(parts), vectors={0x50: "jp timer_handler"})


SPEC = spec(
    name="TIMER",
    description="DIV, TIMA at TAC rates 0-3, TMA reload, TAC read-back, timer interrupt count (cycle counts)",
    covers=("timer", "div", "tima", "tma", "tac", "timer_interrupt"),
    source=source,
    frames=72,
    signature=signature,
    verify=VerifySettings(frames_per_step=1, release_after_frames=1, steps=100),
)
