"""Instruction templates: the body of each instruction family, as Warp source.

`gen.py` classifies every opcode of the ISA table (`gbxcule.core.isa`) into a family and pastes these
bodies into the step kernel. A family covers all opcodes that differ only in opcode bit fields, so
operands are decoded at run time from those fields, never by separate branches:

  r = op & 7 (8-bit register: B C D E H L (HL) A)   y = (op >> 3) & 7 (register, ALU op, bit or cc)
  p = (op >> 4) & 3 (register pair)

Templates never touch memory themselves. A family has up to three parts:

- `pre`: runs after the fetch; describes the instruction's memory accesses in slots 0 and 1:
  `n_acc` (how many), `wmask` (bit i set: slot i writes), `ad0`/`ad1` (addresses), `wv0`/`wv1` (bytes
  to write). The sequencer then performs them in order through the one bus path, at the cycle offsets of
  the opcode's access timing.
- `mid`: runs between slot 0 and slot 1 (read-modify-write instructions, interrupt dispatch); may use
  `rv0` and set `wv1`, `ad1` or `n_acc`.
- `post`: runs after the accesses; may use `rv0`, `rv1` (bytes read).

Other names a template may use: g (the Gb struct), op (opcode; for CB ops the byte after 0xCB), pc
(address of the instruction), nxt (address after it), imm (immediate byte or little-endian word), t0
(cycle count at the instruction start), cyc_nt (cycles when a condition fails), taken and tmp (scratch
ints carried from pre to post). Before `pre` runs, g.pc = nxt and g.cycles = t0 + the taken cycle count;
templates change them only for jumps and untaken conditions.

`DISPATCH` is not an opcode: it is the interrupt dispatch, run by the same sequencer at a batch start.
"""

HL = "((g.h << 8) | g.l)"
SP = "g.sp"


def _write1(addr: str, value: str) -> str:
    return f"n_acc = 1\nwmask = 1\nad0 = {addr}\nwv0 = {value}"


def _read1(addr: str) -> str:
    return f"n_acc = 1\nad0 = {addr}"


_RMW_HL = f"n_acc = 2\nwmask = 2\nad0 = {HL}\nad1 = ad0"
_PUSH = "n_acc = 2\nwmask = 3\nad0 = (g.sp - 1) & 0xFFFF\nad1 = (g.sp - 2) & 0xFFFF"
_POP = "n_acc = 2\nad0 = g.sp\nad1 = (g.sp + 1) & 0xFFFF"


def _push(value: str) -> str:
    return f"{_PUSH}\nwv0 = ({value}) >> 8\nwv1 = ({value}) & 0xFF"


Template = dict[str, str]

TEMPLATES: dict[str, Template] = {
    # --- 0x00-0x3F ---------------------------------------------------------------------------------
    "NOP": {},
    "STOP": {},  # DMG STOP runs on as a 2-byte no-op, like the reference
    "LD (a16),SP": {"pre": "n_acc = 2\nwmask = 3\nad0 = imm\nwv0 = g.sp & 0xFF\nad1 = (imm + 1) & 0xFFFF\n"
                           "wv1 = g.sp >> 8"},
    "JR e8": {"post": "g.pc = (nxt + imm - ((imm & 0x80) << 1)) & 0xFFFF"},
    "JR cc,e8": {"post": """
if condition(g, ((op >> 3) & 7) - 4):
    g.pc = (nxt + imm - ((imm & 0x80) << 1)) & 0xFFFF
else:
    g.cycles = t0 + cyc_nt"""},
    "LD rr,n16": {"post": "set_rr(g, (op >> 4) & 3, imm)"},
    "ADD HL,rr": {"post": f"""
hl = {HL}
v = get_rr(g, (op >> 4) & 3)
g.f = (g.f & FLAG_Z) | flag_bit((hl & 0xFFF) + (v & 0xFFF) > 0xFFF, FLAG_H) | flag_bit(hl + v > 0xFFFF, FLAG_C)
set_rr(g, 2, hl + v)"""},
    "LD (rr),A": {
        "pre": f"""
p = (op >> 4) & 3
ad0 = {HL}
if p < 2:
    ad0 = get_rr(g, p)
n_acc = 1
wmask = 1
wv0 = g.a""",
        "post": """
if ((op >> 4) & 3) == 2:
    set_rr(g, 2, ad0 + 1)
elif ((op >> 4) & 3) == 3:
    set_rr(g, 2, ad0 - 1)"""},
    "LD A,(rr)": {
        "pre": f"""
p = (op >> 4) & 3
ad0 = {HL}
if p < 2:
    ad0 = get_rr(g, p)
n_acc = 1""",
        "post": """
g.a = rv0
if ((op >> 4) & 3) == 2:
    set_rr(g, 2, ad0 + 1)
elif ((op >> 4) & 3) == 3:
    set_rr(g, 2, ad0 - 1)"""},
    "INC rr": {"post": "set_rr(g, (op >> 4) & 3, get_rr(g, (op >> 4) & 3) + 1)"},
    "DEC rr": {"post": "set_rr(g, (op >> 4) & 3, get_rr(g, (op >> 4) & 3) - 1)"},
    "INC r": {"post": "set_r8(g, (op >> 3) & 7, inc8(g, get_r8(g, (op >> 3) & 7)))"},
    "DEC r": {"post": "set_r8(g, (op >> 3) & 7, dec8(g, get_r8(g, (op >> 3) & 7)))"},
    "INC (HL)": {"pre": _RMW_HL, "mid": "wv1 = inc8(g, rv0)"},
    "DEC (HL)": {"pre": _RMW_HL, "mid": "wv1 = dec8(g, rv0)"},
    "LD r,n8": {"post": "set_r8(g, (op >> 3) & 7, imm)"},
    "LD (HL),n8": {"pre": _write1(HL, "imm")},
    "ROTATE A": {"post": "g.a = rotate(g, (op >> 3) & 7, g.a)\ng.f = g.f & FLAG_C"},
    "DAA": {"post": "daa(g)"},
    "CPL": {"post": "g.a = g.a ^ 0xFF\ng.f = g.f | FLAG_N | FLAG_H"},
    "SCF": {"post": "g.f = (g.f & FLAG_Z) | FLAG_C"},
    "CCF": {"post": "g.f = (g.f & FLAG_Z) | ((g.f & FLAG_C) ^ FLAG_C)"},
    # --- 0x40-0x7F ---------------------------------------------------------------------------------
    "LD r,r": {"post": "set_r8(g, (op >> 3) & 7, get_r8(g, op & 7))"},
    "LD r,(HL)": {"pre": _read1(HL), "post": "set_r8(g, (op >> 3) & 7, rv0)"},
    "LD (HL),r": {"pre": _write1(HL, "get_r8(g, op & 7)")},
    "HALT": {"post": """
if g.ime == 0 and g.ime_delay == 0 and pending_interrupts(g) != 0:
    g.halt_bug = 1  # no halt; the next opcode byte is fetched twice (hardware HALT bug)
else:
    g.halted = 1
    g.halted_during_ei = wp.where(g.ime_delay == 1, 1, 0)
    g.pc = pc  # PC stays on the HALT while halted
g.bail = 1"""},
    # --- 0x80-0xBF and ALU immediates -------------------------------------------------------------
    "ALU A,r": {"post": "alu(g, (op >> 3) & 7, get_r8(g, op & 7))"},
    "ALU A,(HL)": {"pre": _read1(HL), "post": "alu(g, (op >> 3) & 7, rv0)"},
    "ALU A,n8": {"post": "alu(g, (op >> 3) & 7, imm)"},
    # --- 0xC0-0xFF ---------------------------------------------------------------------------------
    "RET cc": {
        "pre": f"""
if condition(g, (op >> 3) & 3):
    taken = 1
    {_POP.replace(chr(10), chr(10) + '    ')}""",
        "post": """
if taken != 0:
    g.pc = rv0 | (rv1 << 8)
    g.sp = (g.sp + 2) & 0xFFFF
else:
    g.cycles = t0 + cyc_nt"""},
    "POP rr": {"pre": _POP, "post": """
g.sp = (g.sp + 2) & 0xFFFF
if ((op >> 4) & 3) == 3:
    g.a = rv1
    g.f = rv0 & 0xF0
else:
    set_rr(g, (op >> 4) & 3, rv0 | (rv1 << 8))"""},
    "JP cc,a16": {"post": """
if condition(g, (op >> 3) & 3):
    g.pc = imm
else:
    g.cycles = t0 + cyc_nt"""},
    "JP a16": {"post": "g.pc = imm"},
    "CALL cc,a16": {
        "pre": f"""
if condition(g, (op >> 3) & 3):
    taken = 1
    {_push('nxt').replace(chr(10), chr(10) + '    ')}""",
        "post": """
if taken != 0:
    g.sp = (g.sp - 2) & 0xFFFF
    g.pc = imm
else:
    g.cycles = t0 + cyc_nt"""},
    "PUSH rr": {
        "pre": """
tmp = (g.a << 8) | (g.f & 0xF0)
if ((op >> 4) & 3) != 3:
    tmp = get_rr(g, (op >> 4) & 3)
""" + _push("tmp"),
        "post": "g.sp = (g.sp - 2) & 0xFFFF"},
    "RST": {"pre": _push("nxt"), "post": "g.sp = (g.sp - 2) & 0xFFFF\ng.pc = op & 0x38"},
    "RET": {"pre": _POP, "post": "g.pc = rv0 | (rv1 << 8)\ng.sp = (g.sp + 2) & 0xFFFF"},
    "RETI": {"pre": """
g.ime = 1
g.ime_delay = 0
g.bail = wp.where(pending_interrupts(g) != 0, 1, 0)
""" + _POP, "post": "g.pc = rv0 | (rv1 << 8)\ng.sp = (g.sp + 2) & 0xFFFF"},
    "CALL a16": {"pre": _push("nxt"), "post": "g.sp = (g.sp - 2) & 0xFFFF\ng.pc = imm"},
    "LDH (a8),A": {"pre": _write1("0xFF00 | imm", "g.a")},
    "LDH A,(a8)": {"pre": _read1("0xFF00 | imm"), "post": "g.a = rv0"},
    "LDH (C),A": {"pre": _write1("0xFF00 | g.c", "g.a")},
    "LDH A,(C)": {"pre": _read1("0xFF00 | g.c"), "post": "g.a = rv0"},
    "ADD SP,e8": {"post": "g.sp = sp_offset(g, imm)"},
    "LD HL,SP+e8": {"post": "set_rr(g, 2, sp_offset(g, imm))"},
    "LD SP,HL": {"post": f"g.sp = {HL}"},
    "JP HL": {"post": f"g.pc = {HL}"},
    "LD (a16),A": {"pre": _write1("imm", "g.a")},
    "LD A,(a16)": {"pre": _read1("imm"), "post": "g.a = rv0"},
    "DI": {"post": "g.ime = 0\ng.ime_delay = 0"},
    "EI": {"post": "if g.ime_delay == 0:\n    g.ime_delay = 2"},
    "ILLEGAL": {"post": "g.locked = 1  # the CPU hangs, as on hardware; timers and the PPU run on\ng.pc = pc"},
    # --- CB-prefixed ------------------------------------------------------------------------------
    "ROT r": {"post": "set_r8(g, op & 7, rotate(g, (op >> 3) & 7, get_r8(g, op & 7)))"},
    "ROT (HL)": {"pre": _RMW_HL, "mid": "wv1 = rotate(g, (op >> 3) & 7, rv0)"},
    "BIT b,r": {"post": """
v = get_r8(g, op & 7)
g.f = (g.f & FLAG_C) | FLAG_H | flag_bit(((v >> ((op >> 3) & 7)) & 1) == 0, FLAG_Z)"""},
    "BIT b,(HL)": {"pre": _read1(HL), "post": """
g.f = (g.f & FLAG_C) | FLAG_H | flag_bit(((rv0 >> ((op >> 3) & 7)) & 1) == 0, FLAG_Z)"""},
    "RES b,r": {"post": "set_r8(g, op & 7, get_r8(g, op & 7) & ~(1 << ((op >> 3) & 7)))"},
    "RES b,(HL)": {"pre": _RMW_HL, "mid": "wv1 = rv0 & ~(1 << ((op >> 3) & 7))"},
    "SET b,r": {"post": "set_r8(g, op & 7, get_r8(g, op & 7) | (1 << ((op >> 3) & 7)))"},
    "SET b,(HL)": {"pre": _RMW_HL, "mid": "wv1 = rv0 | (1 << ((op >> 3) & 7))"},
    # --- interrupt dispatch (5 M-cycles) ---------------------------------------------------------
    # The high byte of PC is pushed first; if that write (to IE) leaves nothing pending, the dispatch is
    # cancelled and execution continues at 0x0000.
    "DISPATCH": {
        "pre": "n_acc = 2\nwmask = 3\nad0 = (g.sp - 1) & 0xFFFF\nwv0 = g.pc >> 8\nad1 = (g.sp - 2) & 0xFFFF",
        "mid": """
tmp = interrupt_vector(pending_interrupts(g))
if pending_interrupts(g) == 0:
    g.pc = 0
    g.ime = 0
    n_acc = 1
else:
    taken = 1
    g.if_ = g.if_ ^ (tmp & 0x1F)
    wv1 = g.pc & 0xFF""",
        "post": """
if taken != 0:
    g.sp = (g.sp - 2) & 0xFFFF
    g.pc = tmp >> 8
    g.cycles = g.cycles + 20
    g.ime = 0"""},
}
