"""The text assembler: every opcode, syntax, directives, sections, header and errors."""


import pytest

from gbxcule.asm import AsmError, CartridgeHeader, assemble
from gbxcule.core.cartridge import NINTENDO_LOGO, parse_header
from gbxcule.core.isa import BASE, CB
from opcode_reference import BASE_REF, CB_REF, with_samples


def code(source: str, start: int = 0x0150, size: int | None = None) -> bytes:
    """Assemble ``source`` at ``start`` in ROM0 and return the bytes it produced."""
    result = assemble(f'SECTION "t", ROM0[{start}]\n{source}')
    used = size if size is not None else next(s.size for s in result.sections if s.name == "t")
    return result.rom[start:start + used]


def reference_cases():
    for prefixed, table in ((False, BASE_REF), (True, CB_REF)):
        for opcode, entry in table.items():
            if entry is None or entry[0] == "PREFIX":
                continue
            text, length, _, _ = entry
            source, operand = with_samples(text)
            expected = (bytes([0xCB, opcode]) if prefixed else bytes([opcode])) + operand
            yield source, expected + bytes(length - len(expected))


CASES = list(reference_cases())


def test_reference_covers_every_legal_opcode():
    assert len(CASES) == 256 + 256 - 11 - 1


@pytest.mark.parametrize("spelling", ["as-written", "lower-case", "parentheses"])
def test_every_opcode_assembles_to_its_encoding(spelling):
    wrong = []
    for source, expected in CASES:
        if spelling == "lower-case":
            source = source.lower()
        elif spelling == "parentheses":
            source = source.replace("[", "(").replace("]", ")")
        got = code(source)
        if got != expected:
            wrong.append((source, got.hex(), expected.hex()))
    assert wrong == []


def test_isa_canonical_text_assembles():
    """isa's own spelling, with the ``cc:`` marker dropped, is accepted too."""
    wrong = []
    for op in BASE + CB:
        if op.illegal or op.mnemonic == "PREFIX":
            continue
        source, operand = with_samples(op.text.replace("cc:", ""))
        expected = (bytes([0xCB, op.code]) if op.prefixed else bytes([op.code])) + operand
        expected += bytes(op.length - len(expected))
        if code(source) != expected:
            wrong.append(source)
    assert wrong == []


def test_whole_reference_as_one_program():
    source = "\n".join(f"    {text}" for text, _ in CASES)
    assert code(source) == b"".join(expected for _, expected in CASES)


@pytest.mark.parametrize(("source", "expected"), [
    ("ldi a, [hl]", "2a"), ("ldi [hl], a", "22"), ("ldd a, [hl]", "3a"), ("ldd [hl], a", "32"),
    ("ld a, [hli]", "2a"), ("ld [hld], a", "32"), ("ld a, [hl +]", "2a"), ("ld (hl-), a", "32"),
    ("ldh a, [c]", "f2"), ("ld a, [c]", "f2"), ("ld a, [$ff00+c]", "f2"), ("ld [$FF00 + C], a", "e2"),
    ("ldh [c], a", "e2"), ("ld (c), a", "e2"), ("ldh a, ($ff00+c)", "f2"),
    ("ldh [$ff80], a", "e080"), ("ldh [$80], a", "e080"), ("ldh a, [$FF44]", "f044"),
    ("ldh a, [$ff00+$44]", "f044"),
    ("ld a, [$ff44]", "fa44ff"),
    ("jp hl", "e9"), ("jp [hl]", "e9"), ("jp (hl)", "e9"),
    ("sub a, b", "90"), ("sub b", "90"), ("add b", "80"), ("cp a, $10", "fe10"), ("cp $10", "fe10"),
    ("ld hl, sp+0", "f800"), ("ld hl, sp + 127", "f87f"), ("ld hl, sp-128", "f880"), ("ldhl sp, -2", "f8fe"),
    ("add sp, -128", "e880"), ("add sp, 127", "e87f"),
    ("stop", "1000"), ("stop $01", "1001"), ("halt", "76"), ("ei", "fb"), ("di", "f3"),
    ("rst $38", "ff"), ("rst 8", "cf"), ("rst $00", "c7"),
    ("bit 7, h", "cb7c"), ("res 0, [hl]", "cb86"), ("set 3 + 4, a", "cbff"),
    ("ld a, -1", "3eff"), ("ld bc, -1", "01ffff"), ("ld a, 255", "3eff"),
    ("LD A, B", "78"), ("Ld a, B", "78"), ("jp c, $1234", "da3412"), ("ret c", "d8"), ("ld a, c", "79"),
    ("call nz, $4000", "c40040"), ("ld [$C000], sp", "0800c0"), ("ld sp, hl", "f9"),
])
def test_syntax_variants(source, expected):
    assert code(source).hex() == expected


def test_jr_targets_and_range():
    assert code("jr @", start=0x200).hex() == "18fe"
    assert code("jr @+2", start=0x200).hex() == "1800"
    assert code("jr @+129", start=0x200).hex() == "187f"
    assert code("jr @-126", start=0x200).hex() == "1880"
    assert code("jr nz, $0100", start=0x100).hex() == "20fe"
    with pytest.raises(AsmError, match="out of range"):
        code("jr @+130", start=0x200)
    with pytest.raises(AsmError, match="out of range"):
        code("jr @-127", start=0x200)


@pytest.mark.parametrize(("expr", "value"), [
    ("$FF", 0xFF), ("$ff", 0xFF), ("0xFF", 0xFF), ("0XfF", 0xFF), ("%1010", 10), ("0b1010", 10), ("42", 42),
    ("'A'", 65), ("'\\n'", 10), ("' '", 32),
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("10 - 2 - 3", 5), ("100 / 7", 14), ("100 % 7", 2),
    ("7 %11", 7), ("1 << 4 | 1", 17), ("$F0 >> 4", 15), ("$FF & ~$0F", 0xF0), ("$0F ^ $FF", 0xF0),
    ("1 | 2 ^ 3 & 4", 1 | 2 ^ 3 & 4), ("1 + 2 << 1", 6), ("-3 + 5", 2), ("--3", 3), ("+3", 3),
    ("HIGH($1234)", 0x12), ("LOW($1234)", 0x34), ("high($ABCD) + low(1)", 0xAC), ("(((7)))", 7),
    ("-1 & $FF", 0xFF),
])
def test_expressions(expr, value):
    assert code(f"dw {expr}") == (value & 0xFFFF).to_bytes(2, "little")


def test_parentheses_memory_rule():
    assert code("ld a, (3)").hex() == "fa0300"        # whole operand in parentheses: memory
    assert code("ld a, (1 + 2) * 3").hex() == "3e09"  # parentheses that do not wrap it all: grouping
    assert code("ld a, (1) + (2)").hex() == "3e03"
    assert code("ld a, [(1 + 2) * 3]").hex() == "fa0900"
    assert code("db (1 + 2) * 3, (4)").hex() == "0904"


def test_labels_locals_and_forward_references():
    result = assemble("""
SECTION "code", ROM0[$0200]
first:
    jp second        ; forward reference
.loop:
    jr .loop
second:
.loop:
    jr .loop
    jp first.loop
    dw second.loop, .loop, @
end::
""")
    s = result.symbols
    assert s["first"] == 0x200 and s["first.loop"] == 0x203 and s["second"] == 0x205
    assert s["second.loop"] == 0x205 and s["end"] == 0x205 + 2 + 3 + 6
    rom = result.rom
    assert rom[0x200:0x203] == bytes([0xC3, 0x05, 0x02])
    assert rom[0x203:0x205] == bytes([0x18, 0xFE])
    assert rom[0x207:0x20A] == bytes([0xC3, 0x03, 0x02])
    assert rom[0x20A:0x210] == bytes([0x05, 0x02, 0x05, 0x02, 0x0A, 0x02])


def test_label_and_instruction_on_one_line():
    result = assemble('SECTION "a", ROM0[$10]\nstart: ld a, 1\n.x: ret\n')
    assert result.symbols == {"start": 0x10, "start.x": 0x12}
    assert result.rom[0x10:0x13].hex() == "3e01c9"


def test_constants():
    result = assemble("""
COUNT EQU 3
DEF BASE equ $C000 + COUNT
LATE EQU end - begin       ; labels defined later
SECTION "c", ROM0[$0100]
begin:
    ld hl, BASE
    ld a, LATE
    ds COUNT * 2, $AA
    db HERE
HERE EQU @ - begin
end:
""")
    s = result.symbols
    assert s["COUNT"] == 3 and s["BASE"] == 0xC003 and s["LATE"] == 3 + 2 + 6 + 1 and s["HERE"] == 12
    assert result.rom[0x100:0x10C].hex() == "2103c03e0c" + "aa" * 6 + "0c"


def test_char_and_string_data():
    assert code('db "Hi!", 0, \'x\'').hex() == "48692100" + "78"
    assert code('db "a;b\\n\\"\\\\", 1 ; comment').hex() == "613b620a225c" + "01"
    assert code("db 'a', ';' ; comment").hex() == "613b"
    assert code("dw $1234, -1, 'A'").hex() == "3412ffff4100"


def test_ds():
    assert code("ds 3\nds 2, $E7\nds 0\nnop").hex() == "000000e7e700"
    result = assemble('SECTION "a", ROM0[$10]\nds $20 - @, $FF\nhere:')
    assert result.symbols["here"] == 0x20 and result.rom[0x10:0x20] == b"\xff" * 16


def test_ram_sections_allocate_labels():
    result = assemble("""
SECTION "vars", WRAM0[$C100]
wCounter: ds 1
wBuffer:  ds 16
wEnd:
SECTION "more", WRAM0
wMore: ds 2
SECTION "hram", HRAM[$FF80]
hFlag: ds 1
SECTION "banked", WRAMX[$D000]
wFar: ds 4
SECTION "save", SRAM[$A000], BANK[2]
sData: ds 8
SECTION "tiles", VRAM[$8000]
vTiles: ds 16
""")
    s = result.symbols
    assert (s["wCounter"], s["wBuffer"], s["wEnd"], s["wMore"]) == (0xC100, 0xC101, 0xC111, 0xC111)
    assert s["hFlag"] == 0xFF80 and s["wFar"] == 0xD000 and s["sData"] == 0xA000 and s["vTiles"] == 0x8000
    assert result.symbol_banks["sData"] == 2 and result.symbol_banks["wFar"] == 1
    assert result.rom == bytes(0x8000)


def test_romx_banks_and_bank_function():
    result = assemble("""
SECTION "home", ROM0[$0000]
    ld a, BANK(far)
    ld b, BANK(near)
    ld c, BANK(@)
near:
    call far
SECTION "far", ROMX[$4000], BANK[3]
far:
    ld a, BANK(@)
    ret
SECTION "next", ROMX, BANK[3]
after:
    ret
SECTION "one", ROMX
one: nop
""")
    rom = result.rom
    assert len(rom) == 4 * 0x4000
    assert rom[0:9].hex() == "3e03" + "0600" + "0e00" + "cd0040"
    assert rom[3 * 0x4000:3 * 0x4000 + 4].hex() == "3e03c9c9"
    assert rom[0x4000] == 0x00
    assert result.symbols["after"] == 0x4003 and result.symbols["one"] == 0x4000
    assert result.symbol_banks == {"near": 0, "far": 3, "after": 3, "one": 1}
    info = {s.name: (s.kind, s.bank, s.start, s.size) for s in result.sections}
    assert info["far"] == ("ROMX", 3, 0x4000, 3) and info["next"] == ("ROMX", 3, 0x4003, 1)
    assert result.sym_file() == "00:0006 near\n01:4000 one\n03:4000 far\n03:4003 after\n"


def test_implicit_section_and_sizes():
    result = assemble("nop\nld a, 1")
    assert result.rom[:3].hex() == "003e01" and len(result.rom) == 0x8000
    assert result.sections[0].name == "<default>" and result.sections[0].start == 0
    assert assemble("ds $10 - @, 1\nx:").symbols["x"] == 0x10
    big = assemble('SECTION "x", ROMX[$4000], BANK[5]\nnop')
    assert len(big.rom) == 0x20000


def hand_header_checksum(rom: bytes) -> int:
    x = 0
    for address in range(0x134, 0x14D):
        x = x - rom[address] - 1
    return x & 0xFF


def test_header_and_checksums():
    header = CartridgeHeader(title="GBXCULE TEST", cartridge_type=0x01, rom_size=0x02, ram_size=0x00,
                             destination=0x01, old_licensee=0x33, new_licensee="01", version=3)
    result = assemble('SECTION "entry", ROM0[$100]\n nop\n jp $150\nSECTION "main", ROM0[$150]\n jr @\n',
                      header=header)
    rom = result.rom
    assert len(rom) == 128 * 1024
    assert rom[0x100:0x104].hex() == "00c35001"
    assert rom[0x104:0x134] == NINTENDO_LOGO
    assert rom[0x104:0x10C].hex() == "ceed6666cc0d000b"
    assert rom[0x134:0x144] == b"GBXCULE TEST\0\0\0\0"
    assert rom[0x144:0x146] == b"01"
    assert list(rom[0x146:0x14D]) == [0x00, 0x01, 0x02, 0x00, 0x01, 0x33, 0x03]
    assert rom[0x14D] == hand_header_checksum(rom)
    total = sum(rom[:0x14E]) + sum(rom[0x150:])
    assert rom[0x14E] == (total >> 8) & 0xFF and rom[0x14F] == total & 0xFF
    info = parse_header(rom)
    assert info.header_checksum_valid and info.global_checksum_valid and info.logo_valid
    assert info.title == "GBXCULE TEST" and info.rom_size == len(rom)


def test_header_checksum_known_value():
    # Hand-computed: title "A" (0x41), every other byte of 0x134..0x14C zero:
    # x = -(0x41 + 1) - 24 * 1 = -90 -> 0xA6 (mod 256).
    header = CartridgeHeader(title="A", new_licensee="", destination=0, old_licensee=0)
    rom = assemble("", header=header).rom
    assert rom[0x14D] == 0xA6 == hand_header_checksum(rom)
    expected_global = (sum(NINTENDO_LOGO) + 0x41 + 0xA6) & 0xFFFF
    assert rom[0x14E:0x150] == expected_global.to_bytes(2, "big")


def test_header_fields_layout():
    rom = assemble("", header=CartridgeHeader(title="ABCDEFGHIJK", manufacturer="WXYZ", cgb_flag=0x80,
                                              sgb_flag=0x03)).rom
    assert rom[0x134:0x144] == b"ABCDEFGHIJKWXYZ\x80" and rom[0x146] == 0x03
    rom = assemble("", header=CartridgeHeader(title="SIXTEEN CHARS!!!")).rom
    assert rom[0x134:0x144] == b"SIXTEEN CHARS!!!"
    with pytest.raises(AsmError, match="title"):
        assemble("", header=CartridgeHeader(title="SIXTEEN CHARS!!!", cgb_flag=0x80))
    with pytest.raises(AsmError, match="title"):
        assemble("", header=CartridgeHeader(title="TWELVE CHARS", manufacturer="ABCD"))
    with pytest.raises(AsmError, match="ROM size code"):
        assemble("", header=CartridgeHeader(rom_size=9))


def test_error_has_location_and_text():
    with pytest.raises(AsmError) as info:
        assemble("nop\n\n    frobnicate a\n", name="prog.asm")
    message = str(info.value)
    assert "prog.asm:3:" in message and "frobnicate a" in message and "unknown mnemonic" in message
    assert info.value.line_no == 3


@pytest.mark.parametrize(("source", "line", "words"), [
    ("nop\nfoo a", 2, "unknown mnemonic"),
    ("nop\nld [bc], b", 2, "invalid operands"),
    ("ld a, b, c", 1, "invalid operands"),
    ("nop\nnop\nld a, 256", 3, "out of range"),
    ("ld a, -129", 1, "out of range"),
    ("ld bc, $10000", 1, "out of range"),
    ("add sp, 128", 1, "out of range"),
    ("ldh a, [$1234]", 1, "ldh address"),
    ("bit 8, a", 1, "bit index"),
    ("rst 7", 1, "rst vector"),
    ("ld [hl], [hl]", 1, "invalid operands"),
    ("ld a, [hl+1]", 1, "register"),
    ("nop\njr far\nds 200\nfar:", 2, "out of range"),
    ("nop\n\njp nowhere", 3, "undefined symbol 'nowhere'"),
    ("jr .x", 1, "outside the scope"),
    ("x:\nnop\nx:", 3, "duplicate symbol 'x'"),
    ("X EQU 1\nX EQU 2", 2, "duplicate symbol"),
    ("g:\n.l:\n.l:", 3, "duplicate symbol 'g.l'"),
    ("A EQU 1", 1, "register"),
    ("hl:", 1, "register"),
    ("A1 EQU B1\nB1 EQU A1\ndb A1", 2, "circular definition of 'A1'"),
    ("X EQU nowhere\nnop\ndb X", 1, "undefined symbol 'nowhere'"),
    ("ds later\nlater:", 1, "defined before"),
    ("N EQU later - 1\nds N\nlater:", 2, "ds count: undefined symbol 'later'"),
    ("db 1 +", 1, "expression"),
    ("db 1 / 0", 1, "division by zero"),
    ("db )", 1, "unexpected"),
    ("db \"abc", 1, "unterminated"),
    ("db", 1, "at least one"),
    ("ld a,", 1, "empty operand"),
    ('SECTION "a", ROM0[$100]\nds 8\nSECTION "b", ROM0[$104]\nnop', 3, "overlaps section 'a'"),
    ('SECTION "a", ROMX[$4000], BANK[2]\nnop\nSECTION "b", ROMX[$4000], BANK[2]\nnop', 3, "overlaps"),
    ('SECTION "w", WRAM0[$C000]\nds 4\nSECTION "v", WRAM0[$C002]\nds 1', 3, "overlaps"),
    ('SECTION "a", ROM0[$3FFE]\nnop\nnop\nnop', 4, "overflows ROM0"),
    ('SECTION "a", ROMX[$7FFF]\nld a, 1', 2, "overflows ROMX"),
    ('SECTION "h", HRAM[$FFFE]\nds 2', 2, "overflows HRAM"),
    ('SECTION "a", ROM0[$4000]', 1, "outside ROM0"),
    ('SECTION "a", ROMX[$3000], BANK[1]', 1, "outside ROMX"),
    ('SECTION "a", ROMX[$4000], BANK[0]', 1, "not valid"),
    ('SECTION "a", FOO[$4000]', 1, "unknown section type"),
    ('SECTION "a", ROM0[$0]\nSECTION "a", ROM0[$10]', 2, "duplicate section"),
    ('SECTION a, ROM0', 1, "bad SECTION"),
    ('SECTION "w", WRAM0[$C000]\nnop', 2, "only ds"),
    ('SECTION "w", WRAM0[$C000]\ndb 1', 2, "only ds"),
    ('SECTION "w", WRAM0[$C000]\nds 1, 0', 2, "fill"),
    ("ds -1", 1, "negative"),
    ("x EQU BANK(y)\ny EQU 1\ndb x", 1, "needs a label"),
])
def test_errors_name_the_line(source, line, words):
    with pytest.raises(AsmError) as info:
        assemble(source)
    assert f"<asm>:{line}:" in str(info.value)
    assert words in str(info.value)


def test_header_related_errors():
    header = CartridgeHeader(rom_size=0)
    with pytest.raises(AsmError, match=r"<asm>:2:.*overlaps the cartridge header"):
        assemble('nop\nSECTION "entry", ROM0[$100]\nnop\njp $150\nnop', header=header)
    with pytest.raises(AsmError, match=r"<asm>:1:.*beyond the ROM size"):
        assemble('SECTION "x", ROMX[$4000], BANK[2]\nnop', header=header)
    assert len(assemble('SECTION "x", ROMX[$4000], BANK[3]\nnop', header=CartridgeHeader(rom_size=1)).rom) \
        == 0x10000
    # the same code without a header is fine
    assemble('nop\nSECTION "entry", ROM0[$100]\nnop\njp $150\nnop')


def test_32k_program_is_assembled_in_one_pass_over_the_source(monkeypatch):
    """The work is counted, not timed: every line is parsed once and every expression parsed once."""
    from gbxcule.asm import assembler

    calls = {"line": 0, "expr": 0}
    for name in calls:
        original = getattr(assembler._Assembler, name)

        def counted(self, *a, _name=name, _original=original):
            calls[_name] += 1
            return _original(self, *a)

        monkeypatch.setattr(assembler._Assembler, name, counted)
    body = "\n".join([
        "loop{0}:", "    ld a, [hl+]", "    add a, {0} & $FF", "    ldh [$80], a", "    ld bc, loop{0}",
        "    jr nz, loop{0}", "    bit 3, [hl]", "    call loop{0}", "    db 1, 2, 3",
    ])
    lines = ['SECTION "a", ROM0[$0000]']
    lines += [body.format(i) for i in range(16384 // 20)]
    lines += ['SECTION "b", ROMX[$4000]']
    lines += [body.format(i + 1000) for i in range(16384 // 20)]
    source = "\n".join(lines)
    result = assemble(source)
    assert sum(s.size for s in result.sections) > 0x7000
    n = len(source.splitlines())
    assert calls["line"] == n
    assert 0 < calls["expr"] <= 2 * n
