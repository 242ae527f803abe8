"""Assembler expressions: tokenizer, precedence parser and lazy evaluation.

An expression parses to an ``int`` when it needs no symbol, else to a callable that takes a
`Resolver` and returns an int; `evaluate` handles both. Operator precedence follows Python.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Protocol

from gbxcule.asm.errors import AsmError


class Resolver(Protocol):
    def value(self, name: str) -> int: ...

    def bank(self, name: str) -> int: ...


Expr = int | Callable[[Resolver], int]

# Names that are registers or conditions, never symbols (compared in lower case).
RESERVED = frozenset({"a", "b", "c", "d", "e", "h", "l", "af", "bc", "de", "hl", "sp", "nz", "z", "nc",
                      "hli", "hld"})

_TOKEN = re.compile(r"""\s*(?:
    (?P<hex>\$[0-9A-Fa-f]+|0[xX][0-9A-Fa-f]+)
  | (?P<bin>%[01]+|0[bB][01]+)
  | (?P<dec>[0-9]+)
  | (?P<chr>'(?:\\.|[^\\'])')
  | (?P<name>[A-Za-z_.][\w.]*|@)
  | (?P<op><<|>>|[-+*/%&|^~()])
  )""", re.VERBOSE)

ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", "'": "'", '"': '"'}


def _div(a: int, b: int) -> int:
    if b == 0:
        raise AsmError("division by zero")
    return a // b


def _mod(a: int, b: int) -> int:
    if b == 0:
        raise AsmError("division by zero")
    return a % b


def _shift(fn: Callable[[int, int], int]) -> Callable[[int, int], int]:
    def shift(a: int, b: int) -> int:
        if b < 0:
            raise AsmError("negative shift count")
        return fn(a, b)
    return shift


# operator -> (precedence, function); higher binds tighter.
_BINARY: dict[str, tuple[int, Callable[[int, int], int]]] = {
    "|": (1, operator.or_), "^": (2, operator.xor), "&": (3, operator.and_),
    "<<": (4, _shift(operator.lshift)), ">>": (4, _shift(operator.rshift)),
    "+": (5, operator.add), "-": (5, operator.sub),
    "*": (6, operator.mul), "/": (6, _div), "%": (6, _mod),
}
_UNARY: dict[str, Callable[[int], int]] = {"-": operator.neg, "+": operator.pos, "~": operator.invert}


def evaluate(expr: Expr, resolver: Resolver) -> int:
    return expr if isinstance(expr, int) else expr(resolver)


def _apply1(fn: Callable[[int], int], a: Expr) -> Expr:
    if isinstance(a, int):
        return fn(a)
    return lambda r: fn(a(r))


def _apply2(fn: Callable[[int, int], int], a: Expr, b: Expr) -> Expr:
    if isinstance(a, int) and isinstance(b, int):
        return fn(a, b)
    return lambda r: fn(evaluate(a, r), evaluate(b, r))


def qualify(name: str, scope: str | None) -> str:
    """Full name of a symbol reference: ``.local`` becomes ``scope.local``."""
    if name.startswith("."):
        if scope is None:
            raise AsmError(f"local symbol '{name}' outside the scope of a global label")
        return scope + name
    return name


def char_value(literal: str) -> int:
    """Value of a quoted character literal like ``'a'`` or ``'\\n'``."""
    body = literal[1:-1]
    if body.startswith("\\"):
        if body[1] not in ESCAPES:
            raise AsmError(f"unknown escape {body}")
        return ord(ESCAPES[body[1]])
    return ord(body)


class _Parser:
    def __init__(self, text: str, scope: str | None, pc: int | None, bank: int | None) -> None:
        self.text = text
        self.scope = scope
        self.pc = pc
        self.bank = bank
        self.tokens = self._tokenize(text)
        self.pos = 0

    @staticmethod
    def _tokenize(text: str) -> list[tuple[str, str]]:
        tokens: list[tuple[str, str]] = []
        pos, end = 0, len(text.rstrip())
        value_before = False
        while pos < end:
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                bad = text[pos:].strip()[:1]
                raise AsmError(f"unexpected character {bad!r} in expression '{text.strip()}'")
            kind = m.lastgroup
            assert kind is not None
            tok = m.group(kind)
            pos = m.end()
            if kind == "bin" and tok[0] == "%" and value_before:
                tokens += [("op", "%"), ("dec", tok[1:])]
            else:
                tokens.append((kind, tok))
            value_before = kind != "op" or tok == ")"
        return tokens

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def next(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise AsmError(f"unexpected end of expression '{self.text.strip()}'")
        self.pos += 1
        return tok

    def expect(self, op: str) -> None:
        tok = self.next()
        if tok != ("op", op):
            raise AsmError(f"expected '{op}' in expression '{self.text.strip()}', got '{tok[1]}'")

    def parse(self) -> Expr:
        if not self.tokens:
            raise AsmError("missing expression")
        expr = self.binary(1)
        tok = self.peek()
        if tok is not None:
            raise AsmError(f"unexpected '{tok[1]}' in expression '{self.text.strip()}'")
        return expr

    def binary(self, min_prec: int) -> Expr:
        left = self.unary()
        while True:
            tok = self.peek()
            if tok is None or tok[0] != "op" or tok[1] not in _BINARY:
                return left
            prec, fn = _BINARY[tok[1]]
            if prec < min_prec:
                return left
            self.pos += 1
            left = _apply2(fn, left, self.binary(prec + 1))

    def unary(self) -> Expr:
        kind, tok = self.next()
        if kind == "op":
            if tok in _UNARY:
                return _apply1(_UNARY[tok], self.unary())
            if tok == "(":
                inner = self.binary(1)
                self.expect(")")
                return inner
            raise AsmError(f"unexpected '{tok}' in expression '{self.text.strip()}'")
        if kind == "hex":
            return int(tok[1:] if tok[0] == "$" else tok[2:], 16)
        if kind == "bin":
            return int(tok[1:] if tok[0] == "%" else tok[2:], 2)
        if kind == "dec":
            return int(tok)
        if kind == "chr":
            return char_value(tok)
        return self.name(tok)

    def name(self, tok: str) -> Expr:
        nxt = self.peek()
        func = tok.upper()
        if nxt == ("op", "(") and func in ("HIGH", "LOW", "BANK"):
            self.pos += 1
            if func == "BANK":
                kind, arg = self.next()
                self.expect(")")
                if kind != "name":
                    raise AsmError("BANK() takes a label name or @")
                if arg == "@":
                    if self.bank is None:
                        raise AsmError("BANK(@) outside a section")
                    return self.bank
                full = self.symbol(arg)
                return lambda r: r.bank(full)
            arg_expr = self.binary(1)
            self.expect(")")
            if func == "HIGH":
                return _apply1(lambda v: (v >> 8) & 0xFF, arg_expr)
            return _apply1(lambda v: v & 0xFF, arg_expr)
        if tok == "@":
            if self.pc is None:
                raise AsmError("'@' outside a section")
            return self.pc
        full = self.symbol(tok)
        return lambda r: r.value(full)

    def symbol(self, tok: str) -> str:
        if tok.lower() in RESERVED:
            raise AsmError(f"register or condition '{tok}' cannot be used in an expression")
        return qualify(tok, self.scope)


def parse_expr(text: str, scope: str | None = None, pc: int | None = None, bank: int | None = None) -> Expr:
    """Parse an expression; ``scope`` qualifies ``.local`` names, ``pc`` and ``bank`` give ``@``."""
    return _Parser(text, scope, pc, bank).parse()
