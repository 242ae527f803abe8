"""The canonical SM83 (DMG CPU) opcode table: all 256 base and 256 CB-prefixed opcodes.

Pure Python and dependency-free; the assembler, the disassembler and the kernel generator all read it.
The table is built from the opcode bit fields (``x = op >> 6``, ``y = (op >> 3) & 7``, ``z = op & 7``)
wherever the hardware decodes that way, and spelled out where it does not.

Operand spelling (every string in ``Opcode.operands``):

* registers: ``A B C D E H L`` and pairs ``AF BC DE HL SP``;
* memory through a register: ``(HL) (HL+) (HL-) (BC) (DE)``, and ``(C)`` for ``$FF00+C``;
* immediates: ``n8`` (8-bit data), ``n16`` (16-bit data), ``a16`` (16-bit address, as a jump/call
  target), ``(a16)`` (memory at a 16-bit address), ``(a8)`` (memory at ``$FF00+a8``, LDH only),
  ``e8`` (signed 8-bit: a relative offset for JR, an SP offset for ``ADD SP,e8``) and ``SP+e8``;
* conditions: ``cc:NZ cc:Z cc:NC cc:C`` -- the ``cc:`` prefix keeps the carry condition apart from
  register ``C``;
* bit indices of BIT/RES/SET: ``0`` .. ``7``;
* RST vectors: ``$00 $08 $10 $18 $20 $28 $30 $38``.

Mnemonics follow Pan Docs / RGBDS, with two choices made for uniformity: every 8-bit ALU op names its
A operand (``SUB A,B``, ``CP A,n8``), and the ``$FF00+C`` loads are ``LDH (C),A`` / ``LDH A,(C)``.
0xCB in the base table is ``PREFIX``; STOP is two bytes (``10 00``) with no operand.
The 11 unused opcodes are ``ILLEGAL`` (length 1, a nominal 4 cycles: the real CPU locks up).

``cycles`` are T-cycles (4 per M-cycle); for a conditional JR/JP/CALL/RET ``cycles`` is the taken
count and ``cycles_not_taken`` the other, else ``cycles_not_taken`` is None. CB cycles include the
prefix fetch. ``flags`` gives the effect on Z N H C as in Pan Docs: the flag letter if it depends on
the result, ``0``/``1`` if forced, ``-`` if untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Opcode:
    """One SM83 opcode."""

    code: int
    prefixed: bool
    mnemonic: str
    operands: tuple[str, ...]
    length: int
    cycles: int
    cycles_not_taken: int | None
    flags: str

    @property
    def text(self) -> str:
        """Canonical text, e.g. ``LD A,(HL+)`` or ``JR cc:NZ,e8``."""
        return f"{self.mnemonic} {','.join(self.operands)}" if self.operands else self.mnemonic

    @property
    def illegal(self) -> bool:
        return self.mnemonic == "ILLEGAL"

    @property
    def condition(self) -> str | None:
        """``NZ``/``Z``/``NC``/``C`` for a conditional jump, call or return, else None."""
        for op in self.operands:
            if op.startswith("cc:"):
                return op[3:]
        return None

    @property
    def immediate(self) -> str | None:
        """Kind of the inline operand bytes: ``n8 n16 a8 a16 e8`` or None."""
        for op in self.operands:
            kind = _IMMEDIATE_KINDS.get(op)
            if kind:
                return kind
        return None


_IMMEDIATE_KINDS = {"n8": "n8", "n16": "n16", "a16": "a16", "(a16)": "a16", "(a8)": "a8",
                    "e8": "e8", "SP+e8": "e8"}
IMMEDIATE_SIZE = {"n8": 1, "a8": 1, "e8": 1, "n16": 2, "a16": 2}

R8 = ("B", "C", "D", "E", "H", "L", "(HL)", "A")
R16 = ("BC", "DE", "HL", "SP")
R16_STACK = ("BC", "DE", "HL", "AF")
R16_MEM = ("(BC)", "(DE)", "(HL+)", "(HL-)")
CONDITIONS = ("cc:NZ", "cc:Z", "cc:NC", "cc:C")
ALU = ("ADD", "ADC", "SUB", "SBC", "AND", "XOR", "OR", "CP")
_ALU_FLAGS = ("Z0HC", "Z0HC", "Z1HC", "Z1HC", "Z010", "Z000", "Z000", "Z1HC")
ROTATES = ("RLC", "RRC", "RL", "RR", "SLA", "SRA", "SWAP", "SRL")
_ACC_OPS = (("RLCA", "000C"), ("RRCA", "000C"), ("RLA", "000C"), ("RRA", "000C"),
            ("DAA", "Z-0C"), ("CPL", "-11-"), ("SCF", "-001"), ("CCF", "-00C"))
ILLEGAL_CODES = frozenset({0xD3, 0xDB, 0xDD, 0xE3, 0xE4, 0xEB, 0xEC, 0xED, 0xF4, 0xFC, 0xFD})

# Block 3 opcodes that do not follow a column pattern: code -> (mnemonic, operands, length, cycles, flags).
_BLOCK3_SINGLES: dict[int, tuple[str, tuple[str, ...], int, int, str]] = {
    0xC3: ("JP", ("a16",), 3, 16, "----"),
    0xC9: ("RET", (), 1, 16, "----"),
    0xCB: ("PREFIX", (), 1, 4, "----"),
    0xCD: ("CALL", ("a16",), 3, 24, "----"),
    0xD9: ("RETI", (), 1, 16, "----"),
    0xE0: ("LDH", ("(a8)", "A"), 2, 12, "----"),
    0xE2: ("LDH", ("(C)", "A"), 1, 8, "----"),
    0xE8: ("ADD", ("SP", "e8"), 2, 16, "00HC"),
    0xE9: ("JP", ("HL",), 1, 4, "----"),
    0xEA: ("LD", ("(a16)", "A"), 3, 16, "----"),
    0xF0: ("LDH", ("A", "(a8)"), 2, 12, "----"),
    0xF2: ("LDH", ("A", "(C)"), 1, 8, "----"),
    0xF3: ("DI", (), 1, 4, "----"),
    0xF8: ("LD", ("HL", "SP+e8"), 2, 12, "00HC"),
    0xF9: ("LD", ("SP", "HL"), 1, 8, "----"),
    0xFA: ("LD", ("A", "(a16)"), 3, 16, "----"),
    0xFB: ("EI", (), 1, 4, "----"),
}


def _base(op: int) -> Opcode:
    x, y, z = op >> 6, (op >> 3) & 7, op & 7
    p, q = y >> 1, y & 1

    def mk(mnemonic: str, operands: tuple[str, ...], length: int, cycles: int, flags: str = "----",
           not_taken: int | None = None) -> Opcode:
        return Opcode(op, False, mnemonic, operands, length, cycles, not_taken, flags)

    if op in ILLEGAL_CODES:
        return mk("ILLEGAL", (), 1, 4)
    if x == 0:
        if z == 0:
            if y == 0:
                return mk("NOP", (), 1, 4)
            if y == 1:
                return mk("LD", ("(a16)", "SP"), 3, 20)
            if y == 2:
                return mk("STOP", (), 2, 4)
            if y == 3:
                return mk("JR", ("e8",), 2, 12)
            return mk("JR", (CONDITIONS[y - 4], "e8"), 2, 12, not_taken=8)
        if z == 1:
            if q == 0:
                return mk("LD", (R16[p], "n16"), 3, 12)
            return mk("ADD", ("HL", R16[p]), 1, 8, "-0HC")
        if z == 2:
            return mk("LD", (R16_MEM[p], "A") if q == 0 else ("A", R16_MEM[p]), 1, 8)
        if z == 3:
            return mk("DEC" if q else "INC", (R16[p],), 1, 8)
        mem = R8[y] == "(HL)"
        if z == 4:
            return mk("INC", (R8[y],), 1, 12 if mem else 4, "Z0H-")
        if z == 5:
            return mk("DEC", (R8[y],), 1, 12 if mem else 4, "Z1H-")
        if z == 6:
            return mk("LD", (R8[y], "n8"), 2, 12 if mem else 8)
        return mk(_ACC_OPS[y][0], (), 1, 4, _ACC_OPS[y][1])
    if x == 1:
        if op == 0x76:
            return mk("HALT", (), 1, 4)
        return mk("LD", (R8[y], R8[z]), 1, 8 if "(HL)" in (R8[y], R8[z]) else 4)
    if x == 2:
        return mk(ALU[y], ("A", R8[z]), 1, 8 if z == 6 else 4, _ALU_FLAGS[y])
    if op in _BLOCK3_SINGLES:
        return mk(*_BLOCK3_SINGLES[op])
    if z == 0:
        return mk("RET", (CONDITIONS[y],), 1, 20, not_taken=8)
    if z == 1:
        return mk("POP", (R16_STACK[p],), 1, 12, "ZNHC" if p == 3 else "----")
    if z == 2:
        return mk("JP", (CONDITIONS[y], "a16"), 3, 16, not_taken=12)
    if z == 4:
        return mk("CALL", (CONDITIONS[y], "a16"), 3, 24, not_taken=12)
    if z == 5:
        return mk("PUSH", (R16_STACK[p],), 1, 16)
    if z == 6:
        return mk(ALU[y], ("A", "n8"), 2, 8, _ALU_FLAGS[y])
    if z == 7:
        return mk("RST", (f"${y * 8:02X}",), 1, 16)
    raise AssertionError(f"unhandled opcode {op:#04x}")


def _cb(op: int) -> Opcode:
    x, y, z = op >> 6, (op >> 3) & 7, op & 7
    mem = z == 6
    if x == 0:
        return Opcode(op, True, ROTATES[y], (R8[z],), 2, 16 if mem else 8, None,
                      "Z000" if ROTATES[y] == "SWAP" else "Z00C")
    if x == 1:
        return Opcode(op, True, "BIT", (str(y), R8[z]), 2, 12 if mem else 8, None, "Z01-")
    return Opcode(op, True, "RES" if x == 2 else "SET", (str(y), R8[z]), 2, 16 if mem else 8, None, "----")


BASE: tuple[Opcode, ...] = tuple(_base(op) for op in range(256))
CB: tuple[Opcode, ...] = tuple(_cb(op) for op in range(256))


def lookup(code: int, prefixed: bool = False) -> Opcode:
    """The opcode for a byte value, from the CB table when ``prefixed``."""
    return (CB if prefixed else BASE)[code]


def opcode_at(data: Sequence[int], offset: int) -> Opcode | None:
    """The opcode starting at ``data[offset]`` (following a CB prefix), or None if the prefix is cut off."""
    code = data[offset]
    if code != 0xCB:
        return BASE[code]
    return CB[data[offset + 1]] if offset + 1 < len(data) else None
