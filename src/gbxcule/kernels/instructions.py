"""Instruction templates: the body of each instruction family, as Warp source.

`gen.py` classifies every opcode of the ISA table (`gbxcule.core.isa`) into a family and pastes these
bodies into one dispatch tree per part (`op_pre`, `op_mid`, `op_post`), which the sequencer (frame.py
`run_op`) calls. A family covers all opcodes that differ only in opcode bit fields, and
shapes that differ only in where an operand comes from or goes to share a family (`MERGED`), so
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
(cycle count at the instruction start), info (the opcode's packed table entry, `gen.pack_info`: the
cycles when a condition fails are (info >> 5) & 0x1F), taken and tmp (scratch ints carried from pre to
post), end (the cycle the CPU batch ends at). Before `pre` runs, g.pc = nxt and g.cycles = t0 + the taken
cycle count; templates change them only for jumps and untaken conditions.

`DISPATCH` is not an opcode: it is the interrupt dispatch, run by the same sequencer at a batch start.
"""

HL = "((g.h << 8) | g.l)"
NOT_TAKEN = "t0 + ((info >> 5) & 0x1F)"  # g.cycles after an untaken condition (the count is in gen.pack_info)


def _rmw_hl(count: str) -> str:
    """Read (HL) in slot 0 and write it back in slot 1 (the value from `mid`); `count` accesses: 2, or fewer
    for the opcodes of the family that use less."""
    return f"n_acc = {count}\nwmask = 2\nad0 = {HL}\nad1 = ad0"


_PUSH = "n_acc = 2\nwmask = 3\nad0 = (g.sp - 1) & 0xFFFF\nad1 = (g.sp - 2) & 0xFFFF"
_POP = "n_acc = 2\nad0 = g.sp\nad1 = (g.sp + 1) & 0xFFFF"


def _push(value: str) -> str:
    return f"{_PUSH}\nwv0 = ({value}) >> 8\nwv1 = ({value}) & 0xFF"


Template = dict[str, str]

# Shapes that differ only in where an operand comes from or goes to share one template: lanes of a warp
# that run different shapes of one family then run the same code, with the operands chosen by selects
# on opcode bits (docs/kernel_style.md rule 6). Key: the shape (gen.shape), value: its template.
_FAMILIES = {
    "LD r8": ("LD r,r", "LD r,n8", "LD r,(HL)", "LD (HL),r", "LD (HL),n8"),
    "ALU": ("ALU A,r", "ALU A,(HL)", "ALU A,n8"),
    "INC/DEC r8": ("INC r", "DEC r", "INC (HL)", "DEC (HL)"),
    "R16": ("LD rr,n16", "INC rr", "DEC rr", "ADD HL,rr"),
    "LD A,mem": ("LD (rr),A", "LD A,(rr)", "LDH (a8),A", "LDH A,(a8)", "LDH (C),A", "LDH A,(C)", "LD (a16),A",
                 "LD A,(a16)"),
    "JUMP": ("JR e8", "JR cc,e8", "JP a16", "JP cc,a16", "JP HL"),
    "CALL": ("CALL a16", "CALL cc,a16", "RST"),
    "RET": ("RET", "RET cc", "RETI"),
    "CB": ("ROT r", "ROT (HL)", "BIT b,r", "BIT b,(HL)", "RES b,r", "RES b,(HL)", "SET b,r", "SET b,(HL)",
           "ROTATE A"),
}
MERGED: dict[str, str] = {shape: fam for fam, shapes in _FAMILIES.items() for shape in shapes}

TEMPLATES: dict[str, Template] = {
    # --- loads and arithmetic on registers and (HL) -------------------------------------------------
    # LD r8: LD r,r' / r,n8 / r,(HL) / (HL),r / (HL),n8. Source: imm below 0x40, else register op & 7
    # (or the byte read from (HL)); destination: register (op >> 3) & 7, or (HL) when that field is 6.
    "LD r8": {
        "pre": f"""
tmp = wp.where(op < 0x40, imm, get_r8(g, op & 7))
n_acc = wp.where((op & 0xC7) == 0x46, 1, wp.where(((op >> 3) & 7) == 6, 1, 0))
wmask = wp.where(((op >> 3) & 7) == 6, 1, 0)
ad0 = {HL}
wv0 = tmp""",
        "post": "set_r8(g, (op >> 3) & 7, wp.where((op & 0xC7) == 0x46, rv0, tmp))"},
    # ALU A,r / A,(HL) / A,n8 (0xC0 and up)
    "ALU": {"pre": f"n_acc = wp.where((op & 0xC7) == 0x86, 1, 0)\nad0 = {HL}",
            "post": "alu(g, (op >> 3) & 7,\n"
                    "    wp.where(op >= 0xC0, imm, wp.where((op & 7) == 6, rv0, get_r8(g, op & 7))))"},
    # INC/DEC r and (HL) (op bit 0: DEC). (HL) reads, writes in `mid`; `post` runs it again on the same byte
    # (same flags) and writes it to register 6, which is none.
    "INC/DEC r8": {
        "pre": _rmw_hl("wp.where(((op >> 3) & 7) == 6, 2, 0)"),
        "mid": "wv1 = incdec8(g, rv0, op & 1)",
        "post": """
set_r8(g, (op >> 3) & 7, incdec8(g, wp.where(((op >> 3) & 7) == 6, rv0, get_r8(g, (op >> 3) & 7)), op & 1))"""},
    # LD rr,n16 (low nibble 1), INC rr (3), ADD HL,rr (9), DEC rr (B)
    "R16": {"post": f"""
tmp = get_rr(g, (op >> 4) & 3)
g.f = wp.where((op & 0xF) == 9, (g.f & FLAG_Z) | flag_bit(({HL} & 0xFFF) + (tmp & 0xFFF) > 0xFFF, FLAG_H)
               | flag_bit({HL} + tmp > 0xFFFF, FLAG_C), g.f)
set_rr(g, wp.where((op & 0xF) == 9, 2, (op >> 4) & 3),
       wp.where((op & 0xF) == 1, imm,
                wp.where((op & 0xF) == 9, {HL} + tmp, wp.where((op & 8) != 0, tmp - 1, tmp + 1))))"""},
    # A to or from memory: (BC) (DE) (HL+) (HL-) below 0x40 (bit 3: load); 0xFF00+a8 (0xE0/0xF0),
    # 0xFF00+C (0xE2/0xF2), a16 (0xEA/0xFA) above (bit 4: load). tmp: the pair field of the low forms.
    "LD A,mem": {
        "pre": f"""
tmp = wp.where(op < 0x40, (op >> 4) & 3, 0)
ad0 = wp.where(op < 0x40, wp.where(tmp < 2, get_rr(g, tmp), {HL}),
               wp.where((op & 0xF) == 2, 0xFF00 | g.c, wp.where((op & 0xF) == 0xA, imm, 0xFF00 | imm)))
n_acc = 1
wmask = wp.where(op < 0x40, wp.where((op & 8) == 0, 1, 0), wp.where((op & 0x10) == 0, 1, 0))
wv0 = g.a""",
        "post": """
g.a = wp.where(wmask == 0, rv0, g.a)
set_rr(g, wp.where(tmp >= 2, 2, 4), ad0 + wp.where(tmp == 2, 1, -1))"""},
    # --- 0x00-0x3F ---------------------------------------------------------------------------------
    "NOP": {},
    "STOP": {},  # DMG STOP runs on as a 2-byte no-op, like the reference
    "LD (a16),SP": {"pre": "n_acc = 2\nwmask = 3\nad0 = imm\nwv0 = g.sp & 0xFF\nad1 = (imm + 1) & 0xFFFF\n"
                           "wv1 = g.sp >> 8"},
    "DAA": {"post": "daa(g)"},
    "CPL": {"post": "g.a = g.a ^ 0xFF\ng.f = g.f | FLAG_N | FLAG_H"},
    "SCF": {"post": "g.f = (g.f & FLAG_Z) | FLAG_C"},
    "CCF": {"post": "g.f = (g.f & FLAG_Z) | ((g.f & FLAG_C) ^ FLAG_C)"},
    "HALT": {"post": """
if g.ime == 0 and g.ime_delay == 0 and pending_interrupts(g) != 0:
    g.halt_bug = 1  # no halt; the next opcode byte is fetched twice (hardware HALT bug)
else:
    g.halted = 1
    g.halted_during_ei = wp.where(g.ime_delay == 1, 1, 0)
    g.pc = pc  # PC stays on the HALT while halted
g.bail = 1"""},
    # --- control flow: taken = unconditional (opcode bit) or the condition (op >> 3) & 3 ------------------
    # JR e8 / JR cc (bit 5 set) / JP a16 (bit 0 set) / JP cc / JP HL (0xE9)
    "JUMP": {"post": f"""
tmp = wp.where(op < 0x40, wp.where((op & 0x20) == 0, 1, 0), op & 1) | wp.where(condition(g, (op >> 3) & 3), 1, 0)
g.pc = wp.where(tmp != 0, wp.where(op < 0x40, (nxt + imm - ((imm & 0x80) << 1)) & 0xFFFF,
                                   wp.where(op == 0xE9, {HL}, imm)), g.pc)
g.cycles = wp.where(tmp != 0, g.cycles, {NOT_TAKEN})
if tmp != 0 and op < 0x40 and imm >= 0xF9 and imm <= 0xFC:
    idle_loop_skip(g, m, end, (nxt - 2) & 0xFFFF, op)  # a JR 4-7 bytes back: a wait loop? (kernels/idle.py)"""},
    # CALL a16 (bit 0 set) / CALL cc / RST (low bits 7; target op & 0x38)
    "CALL": {
        "pre": f"taken = (op & 1) | wp.where(condition(g, (op >> 3) & 3), 1, 0)\n{_push('nxt')}\nn_acc = 2 * taken",
        "post": f"""
g.sp = wp.where(taken != 0, (g.sp - 2) & 0xFFFF, g.sp)
g.pc = wp.where(taken != 0, wp.where((op & 7) == 7, op & 0x38, imm), g.pc)
g.cycles = wp.where(taken != 0, g.cycles, {NOT_TAKEN})"""},
    # RET (0xC9) / RETI (0xD9) / RET cc
    "RET": {
        "pre": f"""
if op == 0xD9:
    g.ime = 1
    g.ime_delay = 0
    g.bail = wp.where(pending_interrupts(g) != 0, 1, 0)
taken = (op & 1) | wp.where(condition(g, (op >> 3) & 3), 1, 0)
{_POP}
n_acc = 2 * taken""",
        "post": f"""
g.pc = wp.where(taken != 0, rv0 | (rv1 << 8), g.pc)
g.sp = wp.where(taken != 0, (g.sp + 2) & 0xFFFF, g.sp)
g.cycles = wp.where(taken != 0, g.cycles, {NOT_TAKEN})"""},
    "POP rr": {"pre": _POP, "post": """
g.sp = (g.sp + 2) & 0xFFFF
if ((op >> 4) & 3) == 3:
    g.a = rv1
    g.f = rv0 & 0xF0
else:
    set_rr(g, (op >> 4) & 3, rv0 | (rv1 << 8))"""},
    "PUSH rr": {
        "pre": """
tmp = (g.a << 8) | (g.f & 0xF0)
if ((op >> 4) & 3) != 3:
    tmp = get_rr(g, (op >> 4) & 3)
""" + _push("tmp"),
        "post": "g.sp = (g.sp - 2) & 0xFFFF"},
    "ADD SP,e8": {"post": "g.sp = sp_offset(g, imm)"},
    "LD HL,SP+e8": {"post": "set_rr(g, 2, sp_offset(g, imm))"},
    "LD SP,HL": {"post": f"g.sp = {HL}"},
    "DI": {"post": "g.ime = 0\ng.ime_delay = 0"},
    "EI": {"post": "if g.ime_delay == 0:\n    g.ime_delay = 2"},
    "ILLEGAL": {"post": "g.locked = 1  # the CPU hangs, as on hardware; timers and the PPU run on\ng.pc = pc"},
    # --- CB-prefixed (op: the byte after 0xCB), and RLCA RRCA RLA RRA (1-byte: rotate A, Z cleared) -------
    # (HL) forms read, then (except BIT) write in `mid`; `post` runs the register forms and BIT (HL).
    "CB": {
        "pre": _rmw_hl("wp.where((op & 7) == 6, 2 - wp.where((op >> 6) == 1, 1, 0), 0)"),
        "mid": "wv1 = cb_op(g, op, rv0)",
        "post": """
if (op & 7) != 6 or (op >> 6) == 1:
    set_r8(g, op & 7, cb_op(g, op, wp.where((op & 7) == 6, rv0, get_r8(g, op & 7))))
g.f = wp.where(((info >> 22) & 3) == 1, g.f & FLAG_C, g.f)"""},
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
