"""SM83 assembler and disassembler: RGBDS-flavoured text in, ROM bytes out (syntax: docs/asm.md)."""

from gbxcule.asm.assembler import AsmResult, SectionInfo, assemble
from gbxcule.asm.disasm import Instr, decode, disassemble, format_instr
from gbxcule.asm.errors import AsmError
from gbxcule.asm.header import CartridgeHeader

__all__ = ["AsmError", "AsmResult", "CartridgeHeader", "Instr", "SectionInfo", "assemble", "decode",
           "disassemble", "format_instr"]
