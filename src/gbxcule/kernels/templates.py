"""Instruction templates: the body of each instruction family, as Warp source.

`gen.py` classifies every opcode of the ISA table (`gbxcule.core.isa`) into a family and pastes these
bodies into one dispatch tree. A family covers all opcodes that differ only in opcode bit fields, so
operands are decoded at run time from those fields, never by separate branches:

  r = op & 7 (8-bit register: B C D E H L (HL) A)   y = (op >> 3) & 7 (register, ALU op, bit or cc)
  p = (op >> 4) & 3 (register pair)

Names a template may use: g (the Gb struct), m (Mem), op (the opcode; for CB ops the byte after 0xCB),
pc (address of the instruction), nxt (address after it), imm (its immediate: byte or little-endian
word), t0 (cycle count at the instruction's start), cyc_nt (cycles when a condition fails), and the
access timing (a0, k0), (a1, k1): the cycle offset of the first/second memory access and the extra
offset the PPU sees for it. Before a template runs, g.pc = nxt and g.cycles = t0 + the taken cycle
count; templates change them only for jumps and untaken conditions.
"""

HL = "((g.h << 8) | g.l)"

TEMPLATES: dict[str, str] = {
    # --- 0x00-0x3F ---------------------------------------------------------------------------------
    "NOP": "pass",
    "STOP": "pass  # DMG STOP runs on as a 2-byte no-op, like the reference",
    "LD (a16),SP": """
write8(g, m, imm, g.sp & 0xFF, t0 + a0, k0)
write8(g, m, (imm + 1) & 0xFFFF, g.sp >> 8, t0 + a1, k1)""",
    "JR e8": "g.pc = (nxt + imm - ((imm & 0x80) << 1)) & 0xFFFF",
    "JR cc,e8": """
if condition(g, ((op >> 3) & 7) - 4):
    g.pc = (nxt + imm - ((imm & 0x80) << 1)) & 0xFFFF
else:
    g.cycles = t0 + cyc_nt""",
    "LD rr,n16": "set_rr(g, (op >> 4) & 3, imm)",
    "ADD HL,rr": f"""
hl = {HL}
v = get_rr(g, (op >> 4) & 3)
g.f = (g.f & FLAG_Z) | flag_bit((hl & 0xFFF) + (v & 0xFFF) > 0xFFF, FLAG_H) | flag_bit(hl + v > 0xFFFF, FLAG_C)
set_rr(g, 2, hl + v)""",
    "LD (rr),A": f"""
p = (op >> 4) & 3
addr = {HL}
if p < 2:
    addr = get_rr(g, p)
write8(g, m, addr, g.a, t0 + a0, k0)
if p == 2:
    set_rr(g, 2, addr + 1)
elif p == 3:
    set_rr(g, 2, addr - 1)""",
    "LD A,(rr)": f"""
p = (op >> 4) & 3
addr = {HL}
if p < 2:
    addr = get_rr(g, p)
g.a = read8(g, m, addr, t0 + a0, k0)
if p == 2:
    set_rr(g, 2, addr + 1)
elif p == 3:
    set_rr(g, 2, addr - 1)""",
    "INC rr": "set_rr(g, (op >> 4) & 3, get_rr(g, (op >> 4) & 3) + 1)",
    "DEC rr": "set_rr(g, (op >> 4) & 3, get_rr(g, (op >> 4) & 3) - 1)",
    "INC r": "set_r8(g, (op >> 3) & 7, inc8(g, get_r8(g, (op >> 3) & 7)))",
    "DEC r": "set_r8(g, (op >> 3) & 7, dec8(g, get_r8(g, (op >> 3) & 7)))",
    "INC (HL)": f"""
hl = {HL}
write8(g, m, hl, inc8(g, read8(g, m, hl, t0 + a0, k0)), t0 + a1, k1)""",
    "DEC (HL)": f"""
hl = {HL}
write8(g, m, hl, dec8(g, read8(g, m, hl, t0 + a0, k0)), t0 + a1, k1)""",
    "LD r,n8": "set_r8(g, (op >> 3) & 7, imm)",
    "LD (HL),n8": f"write8(g, m, {HL}, imm, t0 + a0, k0)",
    "ROTATE A": """
g.a = rotate(g, (op >> 3) & 7, g.a)
g.f = g.f & FLAG_C""",
    "DAA": "daa(g)",
    "CPL": """
g.a = g.a ^ 0xFF
g.f = g.f | FLAG_N | FLAG_H""",
    "SCF": "g.f = (g.f & FLAG_Z) | FLAG_C",
    "CCF": "g.f = (g.f & FLAG_Z) | ((g.f & FLAG_C) ^ FLAG_C)",
    # --- 0x40-0x7F ---------------------------------------------------------------------------------
    "LD r,r": "set_r8(g, (op >> 3) & 7, get_r8(g, op & 7))",
    "LD r,(HL)": f"set_r8(g, (op >> 3) & 7, read8(g, m, {HL}, t0 + a0, k0))",
    "LD (HL),r": f"write8(g, m, {HL}, get_r8(g, op & 7), t0 + a0, k0)",
    "HALT": """
if g.ime == 0 and g.ime_delay == 0 and pending_interrupts(g) != 0:
    g.halt_bug = 1  # no halt; the next opcode byte is fetched twice (hardware HALT bug)
else:
    g.halted = 1
    g.halted_during_ei = wp.where(g.ime_delay == 1, 1, 0)
    g.pc = pc  # PC stays on the HALT while halted
g.bail = 1""",
    # --- 0x80-0xBF and ALU immediates -------------------------------------------------------------
    "ALU A,r": "alu(g, (op >> 3) & 7, get_r8(g, op & 7))",
    "ALU A,(HL)": f"alu(g, (op >> 3) & 7, read8(g, m, {HL}, t0 + a0, k0))",
    "ALU A,n8": "alu(g, (op >> 3) & 7, imm)",
    # --- 0xC0-0xFF ---------------------------------------------------------------------------------
    "RET cc": """
if condition(g, (op >> 3) & 3):
    g.pc = pop16(g, m, t0 + a0, t0 + a1)
else:
    g.cycles = t0 + cyc_nt""",
    "POP rr": """
v = pop16(g, m, t0 + a0, t0 + a1)
if ((op >> 4) & 3) == 3:
    g.a = v >> 8
    g.f = v & 0xF0
else:
    set_rr(g, (op >> 4) & 3, v)""",
    "JP cc,a16": """
if condition(g, (op >> 3) & 3):
    g.pc = imm
else:
    g.cycles = t0 + cyc_nt""",
    "JP a16": "g.pc = imm",
    "CALL cc,a16": """
if condition(g, (op >> 3) & 3):
    push16(g, m, nxt, t0 + a0, t0 + a1)
    g.pc = imm
else:
    g.cycles = t0 + cyc_nt""",
    "PUSH rr": """
v = (g.a << 8) | (g.f & 0xF0)
if ((op >> 4) & 3) != 3:
    v = get_rr(g, (op >> 4) & 3)
push16(g, m, v, t0 + a0, t0 + a1)""",
    "RST": """
push16(g, m, nxt, t0 + a0, t0 + a1)
g.pc = op & 0x38""",
    "RET": "g.pc = pop16(g, m, t0 + a0, t0 + a1)",
    "RETI": """
g.ime = 1
g.ime_delay = 0
g.bail = wp.where(pending_interrupts(g) != 0, 1, 0)
g.pc = pop16(g, m, t0 + a0, t0 + a1)""",
    "CALL a16": """
push16(g, m, nxt, t0 + a0, t0 + a1)
g.pc = imm""",
    "LDH (a8),A": "write8(g, m, 0xFF00 | imm, g.a, t0 + a0, k0)",
    "LDH A,(a8)": "g.a = read8(g, m, 0xFF00 | imm, t0 + a0, k0)",
    "LDH (C),A": "write8(g, m, 0xFF00 | g.c, g.a, t0 + a0, k0)",
    "LDH A,(C)": "g.a = read8(g, m, 0xFF00 | g.c, t0 + a0, k0)",
    "ADD SP,e8": "g.sp = sp_offset(g, imm)",
    "LD HL,SP+e8": "set_rr(g, 2, sp_offset(g, imm))",
    "LD SP,HL": f"g.sp = {HL}",
    "JP HL": f"g.pc = {HL}",
    "LD (a16),A": "write8(g, m, imm, g.a, t0 + a0, k0)",
    "LD A,(a16)": "g.a = read8(g, m, imm, t0 + a0, k0)",
    "DI": """
g.ime = 0
g.ime_delay = 0""",
    "EI": """
if g.ime_delay == 0:
    g.ime_delay = 2""",
    "ILLEGAL": """
g.locked = 1  # the CPU hangs, as on hardware; timers and the PPU run on
g.pc = pc""",
    # --- CB-prefixed ------------------------------------------------------------------------------
    "ROT r": "set_r8(g, op & 7, rotate(g, (op >> 3) & 7, get_r8(g, op & 7)))",
    "ROT (HL)": f"""
hl = {HL}
write8(g, m, hl, rotate(g, (op >> 3) & 7, read8(g, m, hl, t0 + a0, k0)), t0 + a1, k1)""",
    "BIT b,r": """
v = get_r8(g, op & 7)
g.f = (g.f & FLAG_C) | FLAG_H | flag_bit(((v >> ((op >> 3) & 7)) & 1) == 0, FLAG_Z)""",
    "BIT b,(HL)": f"""
v = read8(g, m, {HL}, t0 + a0, k0)
g.f = (g.f & FLAG_C) | FLAG_H | flag_bit(((v >> ((op >> 3) & 7)) & 1) == 0, FLAG_Z)""",
    "RES b,r": "set_r8(g, op & 7, get_r8(g, op & 7) & ~(1 << ((op >> 3) & 7)))",
    "RES b,(HL)": f"""
hl = {HL}
write8(g, m, hl, read8(g, m, hl, t0 + a0, k0) & ~(1 << ((op >> 3) & 7)), t0 + a1, k1)""",
    "SET b,r": "set_r8(g, op & 7, get_r8(g, op & 7) | (1 << ((op >> 3) & 7)))",
    "SET b,(HL)": f"""
hl = {HL}
write8(g, m, hl, read8(g, m, hl, t0 + a0, k0) | (1 << ((op >> 3) & 7)), t0 + a1, k1)""",
}
