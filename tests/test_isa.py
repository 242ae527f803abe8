"""The ISA table against the hand-written reference in opcode_reference.py."""

import pytest

from gbxcule.core.isa import BASE, CB, ILLEGAL_CODES, Opcode, lookup, opcode_at
from opcode_reference import BASE_REF, CB_REF

ILLEGALS = {0xD3, 0xDB, 0xDD, 0xE3, 0xE4, 0xEB, 0xEC, 0xED, 0xF4, 0xFC, 0xFD}


def _as_reference_text(op: Opcode) -> str:
    """isa spelling -> the reference's RGBDS spelling."""
    text = op.text.replace("(", "[").replace(")", "]").replace("cc:", "")
    if op.mnemonic in ("SUB", "AND", "XOR", "OR", "CP"):
        text = text.replace(" A,", " ")
    return text


def test_tables_are_complete_and_indexed_by_code():
    assert len(BASE) == 256 and len(CB) == 256
    assert len(BASE_REF) == 256 and len(CB_REF) == 256
    for code in range(256):
        assert BASE[code].code == code and not BASE[code].prefixed
        assert CB[code].code == code and CB[code].prefixed


@pytest.mark.parametrize(("table", "reference"), [(BASE, BASE_REF), (CB, CB_REF)], ids=["base", "cb"])
def test_every_opcode_matches_reference(table, reference):
    mismatches = []
    for code, ref in reference.items():
        op = table[code]
        if ref is None:
            if (op.mnemonic, op.operands, op.length) != ("ILLEGAL", (), 1):
                mismatches.append((code, op, "expected ILLEGAL"))
            continue
        text, length, cycles, flags = ref
        taken, not_taken = cycles if isinstance(cycles, tuple) else (cycles, None)
        got = (_as_reference_text(op), op.mnemonic, op.length, op.cycles, op.cycles_not_taken, op.flags)
        want = (text, text.split()[0], length, taken, not_taken, flags)
        if got != want:
            mismatches.append((f"{code:02X}", got, want))
    assert mismatches == []


def test_illegal_opcodes():
    assert ILLEGAL_CODES == ILLEGALS
    assert {op.code for op in BASE if op.illegal} == ILLEGALS
    assert not any(op.illegal for op in CB)


def test_special_entries():
    assert BASE[0x10].mnemonic == "STOP" and BASE[0x10].length == 2 and BASE[0x10].operands == ()
    assert BASE[0xCB].mnemonic == "PREFIX"
    assert BASE[0x76].mnemonic == "HALT"
    assert BASE[0xE2].operands == ("(C)", "A") and BASE[0xF2].operands == ("A", "(C)")
    assert BASE[0xF8].operands == ("HL", "SP+e8")
    assert [BASE[c].operands[0] for c in range(0xC7, 0x100, 8)] == [f"${v:02X}" for v in range(0, 0x40, 8)]
    assert CB[0x7E].operands == ("7", "(HL)")


def test_condition_and_carry_register_are_distinct():
    assert BASE[0x38].operands == ("cc:C", "e8") and BASE[0x38].condition == "C"
    assert BASE[0x79].operands == ("A", "C") and BASE[0x79].condition is None
    conditional = {op.code for op in BASE if op.condition}
    assert conditional == {op.code for op in BASE if op.cycles_not_taken is not None}
    assert len(conditional) == 16


def test_immediate_kinds_agree_with_lengths():
    sizes = {None: 0, "n8": 1, "a8": 1, "e8": 1, "n16": 2, "a16": 2}
    for op in BASE:
        if op.code in (0x10, 0xCB):
            continue
        assert op.length == 1 + sizes[op.immediate], op
    assert BASE[0xE0].immediate == "a8" and BASE[0xEA].immediate == "a16" and BASE[0xC3].immediate == "a16"
    assert BASE[0xE8].immediate == "e8" and BASE[0xF8].immediate == "e8" and BASE[0x18].immediate == "e8"
    assert all(op.immediate is None and op.length == 2 for op in CB)


def test_flags_strings_are_well_formed():
    for op in BASE + CB:
        assert len(op.flags) == 4
        for letter, allowed in zip(op.flags, ("Z01-", "N01-", "H01-", "C01-"), strict=True):
            assert letter in allowed, op


def test_text_and_lookups():
    assert BASE[0x2A].text == "LD A,(HL+)"
    assert BASE[0x20].text == "JR cc:NZ,e8"
    assert BASE[0x00].text == "NOP"
    assert lookup(0x37) is BASE[0x37] and lookup(0x37, prefixed=True) is CB[0x37]
    assert opcode_at(bytes([0x00, 0xCB, 0x11]), 1) is CB[0x11]
    assert opcode_at(bytes([0x3E, 0x01]), 0) is BASE[0x3E]
    assert opcode_at(bytes([0xCB]), 0) is None
