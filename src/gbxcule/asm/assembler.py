"""A two-pass, RGBDS-flavoured SM83 assembler (syntax reference: docs/asm.md).

Pass 1 parses every line, fixes every instruction's size and so every label's address, and encodes
what needs no symbol; pass 2 encodes the rest. Sizes never depend on symbol values.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import pairwise, product

from gbxcule.asm.errors import AsmError
from gbxcule.asm.expr import ESCAPES, RESERVED, Expr, Resolver, evaluate, parse_expr, qualify
from gbxcule.asm.header import HEADER_END, HEADER_START, CartridgeHeader, write_header
from gbxcule.core.isa import ALU, BASE, CB, Opcode

BANK_SIZE = 0x4000
MAX_ROM_BANKS = 512
DEFAULT_SECTION = "<default>"  # holds whatever comes before the first SECTION line


@dataclass(frozen=True)
class _Region:
    start: int
    end: int  # exclusive
    rom: bool
    banks: range
    default_bank: int


_REGIONS = {
    "ROM0": _Region(0x0000, 0x4000, True, range(0, 1), 0),
    "ROMX": _Region(0x4000, 0x8000, True, range(1, MAX_ROM_BANKS), 1),
    "VRAM": _Region(0x8000, 0xA000, False, range(0, 1), 0),
    "SRAM": _Region(0xA000, 0xC000, False, range(0, 16), 0),
    "WRAM0": _Region(0xC000, 0xD000, False, range(0, 1), 0),
    "WRAMX": _Region(0xD000, 0xE000, False, range(1, 2), 1),
    "OAM": _Region(0xFE00, 0xFEA0, False, range(0, 1), 0),
    "HRAM": _Region(0xFF80, 0xFFFF, False, range(0, 1), 0),
}


@dataclass(frozen=True)
class SectionInfo:
    """Where a section landed: ``size`` bytes from ``start`` in ``bank`` of region ``kind``."""

    name: str
    kind: str
    bank: int
    start: int
    size: int


@dataclass(frozen=True)
class AsmResult:
    """An assembled ROM image with its symbols.

    ``symbols`` maps every label (locals as ``global.local``) and constant to its value;
    ``symbol_banks`` maps every label to its bank (0 for ROM0 and unbanked RAM).
    """

    rom: bytes
    symbols: dict[str, int]
    symbol_banks: dict[str, int]
    sections: tuple[SectionInfo, ...]

    def sym_file(self) -> str:
        """The labels as a ``.sym`` file (``BB:AAAA name`` lines), as read by emulators and debuggers."""
        rows = sorted((bank, self.symbols[name], name) for name, bank in self.symbol_banks.items())
        return "".join(f"{bank:02X}:{addr:04X} {name}\n" for bank, addr, name in rows)


# ---------------------------------------------------------------------------------------------------
# Instruction forms, derived from the ISA table.


@dataclass(frozen=True)
class _Form:
    """Every opcode one written form can encode to, keyed by bit index / RST vector (else None)."""

    opcodes: dict[int | None, Opcode]
    value_kind: str | None  # "u3" (bit index) or "vec" (RST vector)
    imm_kind: str | None  # "n8" "n16" "a8" "a16" "s8" (signed) or "rel" (JR target)
    length: int


_EXPR_KEYS = frozenset({"n8", "n16", "a16", "e8", "(a16)", "(a8)", "SP+e8", "u3", "vec"})


def _build_forms() -> dict[tuple[str, tuple[str, ...]], _Form]:
    forms: dict[tuple[str, tuple[str, ...]], _Form] = {}
    for op in BASE + CB:
        if op.illegal or op.mnemonic == "PREFIX":
            continue
        keys, value, value_kind = [], None, None
        for operand in op.operands:
            if operand.isdigit():
                keys.append("u3")
                value, value_kind = int(operand), "u3"
            elif operand.startswith("$"):
                keys.append("vec")
                value, value_kind = int(operand[1:], 16), "vec"
            else:
                keys.append(operand)
        imm = op.immediate
        if imm == "e8":
            imm = "rel" if op.mnemonic == "JR" else "s8"
        form = forms.setdefault((op.mnemonic, tuple(keys)), _Form({}, value_kind, imm, op.length))
        form.opcodes[value] = op
    for (mnemonic, keys), form in list(forms.items()):
        if mnemonic in ALU and keys[0] == "A":
            forms[(mnemonic, keys[1:])] = form  # "sub b" for "sub a, b"
    aliases = {
        ("LD", ("(C)", "A")): ("LDH", ("(C)", "A")),
        ("LD", ("A", "(C)")): ("LDH", ("A", "(C)")),
        ("JP", ("(HL)",)): ("JP", ("HL",)),
        ("LDI", ("(HL)", "A")): ("LD", ("(HL+)", "A")),
        ("LDI", ("A", "(HL)")): ("LD", ("A", "(HL+)")),
        ("LDD", ("(HL)", "A")): ("LD", ("(HL-)", "A")),
        ("LDD", ("A", "(HL)")): ("LD", ("A", "(HL-)")),
        ("LDHL", ("SP", "e8")): ("LD", ("HL", "SP+e8")),
    }
    for alias, target in aliases.items():
        forms[alias] = forms[target]
    forms[("STOP", ("n8",))] = replace(forms[("STOP", ())], imm_kind="n8")
    return forms


_FORMS = _build_forms()
_MNEMONICS = frozenset(mnemonic for mnemonic, _ in _FORMS)
_MATCH_CACHE: dict[tuple[str, tuple[tuple[str, ...], ...]], tuple[_Form, int | None] | None] = {}

_REGISTERS = {name: ((name.upper(), "cc:C") if name == "c" else (name.upper(),))
              for name in ("a", "b", "c", "d", "e", "h", "l", "af", "bc", "de", "hl", "sp")}
_REGISTERS |= {"nz": ("cc:NZ",), "z": ("cc:Z",), "nc": ("cc:NC",)}
_MEM_REGISTERS = {"hl": "(HL)", "bc": "(BC)", "de": "(DE)", "hl+": "(HL+)", "hli": "(HL+)", "hl-": "(HL-)",
                  "hld": "(HL-)", "c": "(C)", "$ff00+c": "(C)", "0xff00+c": "(C)"}
_IMMEDIATE = ("n8", "n16", "a16", "e8", "u3", "vec")
_MEMORY = ("(a16)", "(a8)")


def _match(mnemonic: str, candidates: tuple[tuple[str, ...], ...]) -> tuple[_Form, int | None] | None:
    key = (mnemonic, candidates)
    if key in _MATCH_CACHE:
        return _MATCH_CACHE[key]
    found = None
    for combo in product(*candidates):
        form = _FORMS.get((mnemonic, combo))
        if form is not None:
            found = (form, next((i for i, k in enumerate(combo) if k in _EXPR_KEYS), None))
            break
    _MATCH_CACHE[key] = found
    return found


def _check(value: int, low: int, high: int, what: str) -> int:
    if not low <= value <= high:
        raise AsmError(f"{what} out of range: {value} (${value & 0xFFFFFFFF:X}) not in {low}..{high}")
    return value


def _immediate(kind: str, value: int, pc: int) -> bytes:
    if kind == "n8":
        return bytes([_check(value, -128, 255, "8-bit value") & 0xFF])
    if kind == "s8":
        return bytes([_check(value, -128, 127, "signed 8-bit offset") & 0xFF])
    if kind == "a8":
        if not (0xFF00 <= value <= 0xFFFF or 0 <= value <= 0xFF):
            raise AsmError(f"ldh address ${value & 0xFFFFFFFF:X} is not in $FF00-$FFFF (or $00-$FF)")
        return bytes([value & 0xFF])
    if kind == "rel":
        _check(value, 0, 0xFFFF, "jump target")
        offset = ((value - pc - 2 + 0x8000) & 0xFFFF) - 0x8000
        if not -128 <= offset <= 127:
            raise AsmError(f"jr target ${value:04X} is out of range ({offset} bytes away, limit -128..127)")
        return bytes([offset & 0xFF])
    if kind == "n16":
        return (_check(value, -32768, 0xFFFF, "16-bit value") & 0xFFFF).to_bytes(2, "little")
    return _check(value, 0, 0xFFFF, "address").to_bytes(2, "little")


def _encode(form: _Form, value: int | None, pc: int) -> bytes:
    if form.value_kind is None:
        op = form.opcodes[None]
    else:
        assert value is not None
        found = form.opcodes.get(value)
        if found is None:
            if form.value_kind == "u3":
                raise AsmError(f"bit index must be 0-7, got {value}")
            raise AsmError(f"rst vector must be one of $00, $08, ... $38, got ${value & 0xFFFFFFFF:X}")
        op = found
    out = bytearray((0xCB, op.code) if op.prefixed else (op.code,))
    if form.imm_kind is not None:
        assert value is not None
        out += _immediate(form.imm_kind, value, pc)
    out += bytes(form.length - len(out))  # STOP's second byte
    return bytes(out)


# ---------------------------------------------------------------------------------------------------
# Line-level text handling.

_LABEL_RE = re.compile(r"\s*([A-Za-z_.][\w.]*)::?")
_EQU_RE = re.compile(r"(?:DEF\s+)?([A-Za-z_]\w*)\s+EQU\s+(.+)", re.IGNORECASE)
_SECTION_RE = re.compile(r'"([^"]*)"\s*,\s*(\w+)\s*(?:\[([^\]]*)\])?\s*(?:,\s*BANK\s*\[([^\]]*)\])?',
                         re.IGNORECASE)


def _strip_comment(line: str) -> str:
    if ";" not in line:
        return line
    if '"' not in line and "'" not in line:
        return line[:line.index(";")]
    quote = None
    escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif quote:
            if ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == ";":
            return line[:i]
    return line


def _split_args(text: str) -> list[str]:
    """Split at commas outside quotes and brackets."""
    if not any(ch in text for ch in "\"'([)]"):
        return [part.strip() for part in text.split(",")]
    parts, depth, quote, escaped, start = [], 0, None, False, 0
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif quote:
            if ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _memory_inner(text: str) -> str | None:
    """The inside of a memory operand: all of ``[...]``, or ``(...)`` when its parenthesis closes last."""
    if text[0] == "[" and text[-1] == "]":
        return text[1:-1]
    if text[0] != "(" or text[-1] != ")":
        return None
    depth = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return text[1:-1] if i == len(text) - 1 else None
    return None


def _string_bytes(literal: str) -> bytes:
    if len(literal) < 2 or literal[-1] != '"':
        raise AsmError(f"unterminated string {literal}")
    out = bytearray()
    body, i = literal[1:-1], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            if i + 1 >= len(body) or body[i + 1] not in ESCAPES:
                raise AsmError(f"unknown escape in string {literal}")
            ch = ESCAPES[body[i + 1]]
            i += 1
        if ord(ch) > 0xFF:
            raise AsmError(f"character {ch!r} does not fit in a byte")
        out.append(ord(ch))
        i += 1
    return bytes(out)


class _Section:
    __slots__ = ("name", "kind", "region", "bank", "start", "pc", "data", "line_no", "line_text")

    def __init__(self, name: str, kind: str, bank: int, start: int, line_no: int, line_text: str) -> None:
        self.name = name
        self.kind = kind
        self.region = _REGIONS[kind]
        self.bank = bank
        self.start = start
        self.pc = start
        self.data = bytearray() if self.region.rom else None
        self.line_no = line_no
        self.line_text = line_text

    def describe(self) -> str:
        return f"section '{self.name}' ({self.kind} ${self.start:04X}-${self.pc - 1:04X})"


_Deferred = tuple[int, str, _Section, int, Callable[[Resolver], bytes]]


class _Assembler:
    """State of one assembly; also the `Resolver` that expressions read symbols through."""

    def __init__(self, name: str, header: CartridgeHeader | None) -> None:
        self.name = name
        self.header = header
        self.max_banks = header.rom_bytes // BANK_SIZE if header else MAX_ROM_BANKS
        self.sections: dict[str, _Section] = {}
        self.last_in_space: dict[tuple[str, int], _Section] = {}
        self.section: _Section | None = None
        self.scope: str | None = None
        self.labels: dict[str, int] = {}
        self.label_banks: dict[str, int] = {}
        self.defined_on: dict[str, int] = {}
        self.constants: dict[str, tuple[Expr, int, str]] = {}
        self.values: dict[str, int] = {}
        self.evaluating: set[str] = set()
        self.deferred: list[_Deferred] = []
        self.pass1 = True
        self.line_no = 0
        self.line_text = ""

    # Resolver -------------------------------------------------------------------------------------
    def value(self, name: str) -> int:
        found = self.labels.get(name)
        if found is None:
            found = self.values.get(name)
        if found is not None:
            return found
        if name not in self.constants:
            later = " (it must be defined before this line)" if self.pass1 else ""
            raise AsmError(f"undefined symbol '{name}'{later}")
        if name in self.evaluating:
            raise AsmError(f"circular definition of '{name}'")
        expr, line_no, line_text = self.constants[name]
        self.evaluating.add(name)
        try:
            found = evaluate(expr, self)
        except AsmError as e:
            if self.pass1:  # report at the line that needed the value now
                raise
            raise self.locate(e, line_no, line_text) from None
        finally:
            self.evaluating.discard(name)
        self.values[name] = found
        return found

    def bank(self, name: str) -> int:
        if name in self.label_banks:
            return self.label_banks[name]
        if name in self.constants or name in self.values:
            raise AsmError(f"BANK() needs a label, '{name}' is a constant")
        raise AsmError(f"undefined symbol '{name}'")

    # Driver ---------------------------------------------------------------------------------------
    def locate(self, e: AsmError, line_no: int, line_text: str) -> AsmError:
        return e if e.line_no is not None else AsmError(e.message, self.name, line_no, line_text)

    def run(self, source: str) -> AsmResult:
        for self.line_no, self.line_text in enumerate(source.splitlines(), 1):
            try:
                self.line(self.line_text)
            except AsmError as e:
                raise self.locate(e, self.line_no, self.line_text) from None
        self.pass1 = False
        for line_no, line_text, section, offset, fn in self.deferred:
            try:
                data = fn(self)
            except AsmError as e:
                raise self.locate(e, line_no, line_text) from None
            assert section.data is not None
            section.data[offset:offset + len(data)] = data
        for name in self.constants:
            self.value(name)
        self.check_overlaps()
        return self.result()

    def line(self, text: str) -> None:
        text = _strip_comment(text)
        m = _LABEL_RE.match(text)
        if m:
            self.define_label(m.group(1))
            text = text[m.end():]
        stmt = text.strip()
        if not stmt:
            return
        m = _EQU_RE.fullmatch(stmt)
        if m:
            self.define_constant(m.group(1), m.group(2))
            return
        head, *rest = stmt.split(None, 1)
        args = rest[0] if rest else ""
        keyword = head.lower()
        if keyword == "section":
            self.start_section(args)
        elif keyword == "db":
            self.data(args, 1)
        elif keyword == "dw":
            self.data(args, 2)
        elif keyword == "ds":
            self.space(args)
        else:
            self.instruction(head, args)

    # Symbols --------------------------------------------------------------------------------------
    def declare(self, full: str, shown: str) -> None:
        if shown.lower() in RESERVED:
            raise AsmError(f"'{shown}' is a register or condition name, not usable as a symbol")
        if full in self.defined_on:
            raise AsmError(f"duplicate symbol '{full}' (first defined on line {self.defined_on[full]})")
        self.defined_on[full] = self.line_no

    def define_label(self, name: str) -> None:
        full = qualify(name, self.scope)
        self.declare(full, name)
        if "." not in name:
            self.scope = name
        section = self.current_section()
        self.labels[full] = section.pc
        self.label_banks[full] = section.bank

    def define_constant(self, name: str, text: str) -> None:
        self.declare(name, name)
        pc = self.section.pc if self.section else None
        expr = parse_expr(text, self.scope, pc, self.section.bank if self.section else None)
        if isinstance(expr, int):
            self.values[name] = expr
        else:
            self.constants[name] = (expr, self.line_no, self.line_text)

    def expr(self, text: str) -> Expr:
        section = self.current_section()
        return parse_expr(text, self.scope, section.pc, section.bank)

    def constant(self, text: str, what: str) -> int:
        """Evaluate now, in pass 1: only symbols defined on earlier lines are known."""
        try:
            return evaluate(parse_expr(text, self.scope, self.section.pc if self.section else None,
                                       self.section.bank if self.section else None), self)
        except AsmError as e:
            if e.line_no is not None:
                raise
            raise AsmError(f"{what}: {e.message}") from None

    # Sections -------------------------------------------------------------------------------------
    def current_section(self) -> _Section:
        if self.section is None:
            self.open_section(DEFAULT_SECTION, "ROM0", None, 0)
            assert self.section is not None
        return self.section

    def start_section(self, args: str) -> None:
        m = _SECTION_RE.fullmatch(args)
        if not m:
            raise AsmError('bad SECTION: expected SECTION "name", TYPE[$addr][, BANK[n]]')
        name, kind, addr_text, bank_text = m.groups()
        kind = kind.upper()
        if kind not in _REGIONS:
            raise AsmError(f"unknown section type '{m.group(2)}' (one of {', '.join(_REGIONS)})")
        region = _REGIONS[kind]
        bank = region.default_bank
        if bank_text is not None:
            bank = self.constant(bank_text, "bank")
            if bank not in region.banks:
                raise AsmError(f"bank {bank} is not valid for {kind} (allowed {region.banks.start}.."
                               f"{region.banks.stop - 1})")
        if kind == "ROMX" and bank >= self.max_banks:
            raise AsmError(f"ROMX bank {bank} is beyond the ROM size ({self.max_banks} banks declared by the "
                           "cartridge header)")
        address = None
        if addr_text is not None:
            address = self.constant(addr_text, "section address")
            if not region.start <= address < region.end:
                raise AsmError(f"section address ${address & 0xFFFFFFFF:04X} is outside {kind} "
                               f"(${region.start:04X}-${region.end - 1:04X})")
        if name in self.sections:
            raise AsmError(f"duplicate section name '{name}'")
        self.open_section(name, kind, address, bank)

    def open_section(self, name: str, kind: str, address: int | None, bank: int) -> None:
        space = (kind, bank)
        if address is None:
            previous = self.last_in_space.get(space)
            address = previous.pc if previous else _REGIONS[kind].start
        section = _Section(name, kind, bank, address, self.line_no, self.line_text)
        self.sections[name] = section
        self.last_in_space[space] = section
        self.section = section

    def advance(self, size: int) -> _Section:
        """Reserve ``size`` bytes at the current address; returns the section."""
        section = self.current_section()
        end = section.pc + size
        if end > section.region.end:
            raise AsmError(f"section '{section.name}' overflows {section.kind}: it would end at "
                           f"${end - 1:04X}, past ${section.region.end - 1:04X}")
        section.pc = end
        return section

    def emit(self, size: int, encode: Callable[[Resolver], bytes], now: bool) -> None:
        section = self.current_section()
        if section.data is None:
            raise AsmError(f"only ds is allowed in RAM section '{section.name}' ({section.kind})")
        offset = len(section.data)
        self.advance(size)
        if now:
            data = encode(self)
            assert len(data) == size
            section.data += data
        else:
            section.data += bytes(size)
            self.deferred.append((self.line_no, self.line_text, section, offset, encode))

    # Statements -----------------------------------------------------------------------------------
    def instruction(self, head: str, args: str) -> None:
        mnemonic = head.upper()
        if mnemonic not in _MNEMONICS:
            raise AsmError(f"unknown mnemonic '{head}'")
        texts = _split_args(args) if args else []
        candidates, exprs = [], []
        for text in texts:
            cands, expr = self.operand(text)
            candidates.append(cands)
            exprs.append(expr)
        found = _match(mnemonic, tuple(candidates))
        if found is None:
            raise AsmError(f"invalid operands for {head.lower()}: {', '.join(texts) or '(none)'}")
        form, index = found
        expr = exprs[index] if index is not None else None
        pc = self.current_section().pc

        def encode(r: Resolver) -> bytes:
            return _encode(form, None if expr is None else evaluate(expr, r), pc)

        self.emit(form.length, encode, expr is None or isinstance(expr, int))

    def operand(self, text: str) -> tuple[tuple[str, ...], Expr | None]:
        if not text:
            raise AsmError("empty operand")
        low = text.lower()
        if low in _REGISTERS:
            return _REGISTERS[low], None
        inner = _memory_inner(text)
        if inner is not None:
            key = _MEM_REGISTERS.get("".join(inner.split()).lower())
            if key is not None:
                return (key,), None
            return _MEMORY, self.expr(inner)
        if low.startswith("sp") and low[2:].lstrip()[:1] in ("+", "-"):
            return ("SP+e8",), self.expr(text[2:])
        return _IMMEDIATE, self.expr(text)

    def data(self, args: str, width: int) -> None:
        items: list[bytes | Expr] = []
        for text in _split_args(args) if args else []:
            if not text:
                raise AsmError("empty operand")
            items.append(_string_bytes(text) if width == 1 and text[0] == '"' else self.expr(text))
        if not items:
            raise AsmError(f"{'db' if width == 1 else 'dw'} needs at least one value")
        low = -128 if width == 1 else -32768
        high = 0xFF if width == 1 else 0xFFFF

        def encode(r: Resolver) -> bytes:
            out = bytearray()
            for item in items:
                if isinstance(item, bytes):
                    out += item
                else:
                    value = _check(evaluate(item, r), low, high, f"{width * 8}-bit value")
                    out += (value & high).to_bytes(width, "little")
            return bytes(out)

        size = sum(len(item) if isinstance(item, bytes) else width for item in items)
        self.emit(size, encode, all(isinstance(item, bytes | int) for item in items))

    def space(self, args: str) -> None:
        parts = _split_args(args) if args else []
        if not 1 <= len(parts) <= 2 or not all(parts):
            raise AsmError("ds takes a count and an optional fill byte")
        section = self.current_section()
        count = self.constant(parts[0], "ds count")
        if count < 0:
            raise AsmError(f"ds count is negative: {count}")
        if section.data is None:
            if len(parts) == 2:
                raise AsmError(f"ds in RAM section '{section.name}' cannot have a fill value")
            self.advance(count)
            return
        fill = self.expr(parts[1]) if len(parts) == 2 else 0

        def encode(r: Resolver) -> bytes:
            return bytes([_check(evaluate(fill, r), -128, 255, "fill byte") & 0xFF]) * count

        self.emit(count, encode, isinstance(fill, int))

    # Output ---------------------------------------------------------------------------------------
    def check_overlaps(self) -> None:
        spans: list[tuple[str, int, int, int, _Section | None]] = [
            (s.kind, s.bank, s.start, s.pc, s) for s in self.sections.values() if s.pc > s.start]
        if self.header is not None:
            spans.append(("ROM0", 0, HEADER_START, HEADER_END, None))
        spans.sort(key=lambda span: span[:3])
        for a, b in pairwise(spans):
            if a[:2] == b[:2] and b[2] < a[3]:
                clashing = sorted((s for s in (a[4], b[4]) if s is not None), key=lambda s: s.line_no)
                later = clashing[-1]
                other = clashing[0].describe() if len(clashing) == 2 else \
                    f"the cartridge header (${HEADER_START:04X}-${HEADER_END - 1:04X})"
                raise AsmError(f"{later.describe()} overlaps {other}", self.name, later.line_no,
                               later.line_text)

    def result(self) -> AsmResult:
        rom_sections = [s for s in self.sections.values() if s.data]
        if self.header is not None:
            size = self.header.rom_bytes
        else:
            banks = max((s.bank for s in rom_sections), default=1) + 1
            size = 2 * BANK_SIZE
            while size < banks * BANK_SIZE:
                size *= 2
        rom = bytearray(size)
        for s in rom_sections:
            assert s.data is not None
            offset = s.start if s.kind == "ROM0" else s.bank * BANK_SIZE + s.start - BANK_SIZE
            rom[offset:offset + len(s.data)] = s.data
        if self.header is not None:
            write_header(rom, self.header)
        symbols = {**self.values, **self.labels}
        sections = tuple(SectionInfo(s.name, s.kind, s.bank, s.start, s.pc - s.start)
                         for s in self.sections.values())
        return AsmResult(bytes(rom), symbols, dict(self.label_banks), sections)


def assemble(source: str, *, header: CartridgeHeader | None = None, name: str = "<asm>") -> AsmResult:
    """Assemble RGBDS-flavoured SM83 source into a ROM image.

    With a ``header`` the image has the size its ROM size code declares and carries the logo, header
    fields and both checksums; without one it is the smallest power of two (>= 32 KiB) holding every bank
    used. Unwritten bytes are 0x00. Errors raise `AsmError` naming ``name`` and the line.
    """
    return _Assembler(name, header).run(source)
