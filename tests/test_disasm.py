"""The disassembler: formatting, and disassemble -> assemble round trips."""

import random

import pytest

from gbxcule.asm import assemble, decode, disassemble, format_instr
from gbxcule.core.isa import BASE, CB
from opcode_reference import BASE_REF, CB_REF, with_samples


def reassemble(instrs, base: int) -> bytes:
    source = f'SECTION "t", ROM0[${base:04X}]\n' + "\n".join(f"    {i.text}" for i in instrs)
    result = assemble(source)
    size = sum(len(i.raw) for i in instrs)
    return result.rom[base:base + size]


def sample_bytes():
    """Bytes of every opcode (legal or not) with the reference's sample operands."""
    for prefixed, table in ((False, BASE_REF), (True, CB_REF)):
        for opcode, entry in table.items():
            if entry is None or entry[0] == "PREFIX":
                yield bytes([opcode])
                continue
            operand = with_samples(entry[0])[1]
            data = (bytes([0xCB, opcode]) if prefixed else bytes([opcode])) + operand
            yield data + bytes(entry[1] - len(data))


def test_every_opcode_round_trips():
    base = 0x0150
    for data in sample_bytes():
        instrs = disassemble(data, base_addr=base)
        assert len(instrs) == 1, data.hex()
        assert instrs[0].raw == data
        assert reassemble(instrs, base) == data, (data.hex(), instrs[0].text)


def test_every_opcode_decodes_to_its_table_entry():
    for code in range(256):
        op = decode(bytes([code, 0x00, 0x00])).opcode
        expected = None if BASE[code].illegal else CB[0x00] if code == 0xCB else BASE[code]
        assert op is expected
        assert decode(bytes([0xCB, code])).opcode is CB[code]


@pytest.mark.parametrize("seed", range(8))
def test_random_streams_round_trip(seed):
    rng = random.Random(seed)
    data = bytes(rng.randrange(256) for _ in range(4096))
    base = rng.choice([0x0000, 0x0150, 0x1000, 0x3000])
    instrs = disassemble(data, base_addr=base)
    assert b"".join(i.raw for i in instrs) == data
    assert reassemble(instrs, base) == data


def test_stream_ending_mid_instruction():
    instrs = disassemble(bytes([0x00, 0x01, 0x34]), base_addr=0x200)
    assert [i.text for i in instrs] == ["nop", "db $01, $34"]
    assert disassemble(bytes([0xCB]))[0].text == "db $CB"
    assert reassemble(instrs, 0x200) == bytes([0x00, 0x01, 0x34])


@pytest.mark.parametrize(("data", "address", "text"), [
    ("00", 0, "nop"),
    ("3e12", 0, "ld a, $12"),
    ("21cdab", 0, "ld hl, $ABCD"),
    ("fa00c0", 0, "ld a, [$C000]"),
    ("0834c1", 0, "ld [$C134], sp"),
    ("2a", 0, "ld a, [hl+]"),
    ("32", 0, "ld [hl-], a"),
    ("0a", 0, "ld a, [bc]"),
    ("e044", 0, "ldh [$FF44], a"),
    ("f080", 0, "ldh a, [$FF80]"),
    ("e2", 0, "ldh [c], a"),
    ("f2", 0, "ldh a, [c]"),
    ("1800", 0x150, "jr $0152"),
    ("20fe", 0x150, "jr nz, $0150"),
    ("3880", 0x200, "jr c, $0182"),
    ("18fc", 0x0000, "jr $FFFE"),
    ("c30001", 0, "jp $0100"),
    ("da0001", 0, "jp c, $0100"),
    ("cc3412", 0, "call z, $1234"),
    ("c0", 0, "ret nz"),
    ("e9", 0, "jp hl"),
    ("e8fd", 0, "add sp, -3"),
    ("e805", 0, "add sp, 5"),
    ("f8fd", 0, "ld hl, sp-3"),
    ("f800", 0, "ld hl, sp+0"),
    ("90", 0, "sub a, b"),
    ("fe10", 0, "cp a, $10"),
    ("ff", 0, "rst $38"),
    ("cb7e", 0, "bit 7, [hl]"),
    ("cb37", 0, "swap a"),
    ("1000", 0, "stop"),
    ("1042", 0, "stop $42"),
    ("76", 0, "halt"),
    ("d3", 0, "db $D3"),
    ("fd", 0, "db $FD"),
])
def test_formatting(data, address, text):
    instr = decode(bytes.fromhex(data), 0, address)
    assert instr.text == text and instr.address == address and instr.raw == bytes.fromhex(data)


def test_start_base_and_count():
    data = bytes.fromhex("00003e01c3 0001".replace(" ", ""))
    instrs = disassemble(data, start=2, base_addr=0x100)
    assert [(i.address, i.text) for i in instrs] == [(0x102, "ld a, $01"), (0x104, "jp $0100")]
    assert len(disassemble(data, count=2)) == 2
    assert disassemble(data, start=len(data)) == []


def test_format_instr():
    instr = decode(bytes.fromhex("c35001"), 0, 0x100)
    assert format_instr(instr) == "0100  C3 50 01  jp $0150"
    assert format_instr(instr, bank=2) == "02:0100  C3 50 01  jp $0150"
