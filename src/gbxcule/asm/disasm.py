"""SM83 disassembler whose output re-assembles to the same bytes.

Text is lower-case RGBDS style with ``[...]`` memory operands; numbers are ``$XX``/``$XXXX`` except the
signed offsets of ``add sp, e8`` and ``ld hl, sp+e8`` (decimal). JR shows its absolute target.
Illegal opcodes and instructions cut off by the end of the data become ``db`` lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gbxcule.core.isa import IMMEDIATE_SIZE, Opcode, opcode_at


@dataclass(frozen=True, slots=True)
class Instr:
    """One decoded instruction (``opcode`` is None for a ``db`` line)."""

    address: int
    raw: bytes
    text: str
    opcode: Opcode | None


def _db(address: int, raw: bytes) -> Instr:
    return Instr(address, raw, "db " + ", ".join(f"${b:02X}" for b in raw), None)


def _operand(op: Opcode, operand: str, value: int, address: int) -> str:
    if operand.startswith("cc:"):
        return operand[3:].lower()
    if operand in ("n8", "(a8)"):
        return f"${value:02X}" if operand == "n8" else f"[${0xFF00 | value:04X}]"
    if operand == "n16" or operand == "a16":
        return f"${value:04X}"
    if operand == "(a16)":
        return f"[${value:04X}]"
    signed = value - 256 if value >= 0x80 else value
    if operand == "e8":
        return f"${(address + 2 + signed) & 0xFFFF:04X}" if op.mnemonic == "JR" else str(signed)
    if operand == "SP+e8":
        return f"sp{signed:+d}"
    if operand.startswith("("):
        return f"[{operand[1:-1].lower()}]"
    return operand.lower()


def decode(data: Sequence[int], offset: int = 0, address: int = 0) -> Instr:
    """Decode the instruction at ``data[offset]``, which lives at CPU ``address``."""
    op = opcode_at(data, offset)
    if op is None or op.illegal or offset + op.length > len(data):
        size = 1 if op is None or op.illegal else min(op.length, len(data) - offset)
        return _db(address, bytes(data[offset:offset + size]))
    raw = bytes(data[offset:offset + op.length])
    imm = op.immediate
    value = 0
    if imm is not None:
        value = int.from_bytes(raw[-IMMEDIATE_SIZE[imm]:], "little")
    text = op.mnemonic.lower()
    if op.mnemonic == "STOP" and raw[1]:
        text += f" ${raw[1]:02X}"
    elif op.operands:
        text += " " + ", ".join(_operand(op, operand, value, address) for operand in op.operands)
    return Instr(address, raw, text, op)


def disassemble(data: bytes, start: int = 0, base_addr: int = 0, count: int | None = None) -> list[Instr]:
    """Decode from ``data[start]`` to the end of ``data`` (or ``count`` instructions).

    ``base_addr`` is the CPU address of ``data[0]``, so ``data[i]`` lives at ``base_addr + i``.
    """
    out: list[Instr] = []
    offset = start
    while offset < len(data) and (count is None or len(out) < count):
        instr = decode(data, offset, (base_addr + offset) & 0xFFFF)
        out.append(instr)
        offset += len(instr.raw)
    return out


def format_instr(instr: Instr, bank: int | None = None) -> str:
    """A listing line: ``[BB:]AAAA  bytes  text``."""
    where = f"{bank:02X}:{instr.address:04X}" if bank is not None else f"{instr.address:04X}"
    return f"{where}  {instr.raw.hex(' ').upper():<8}  {instr.text}"
