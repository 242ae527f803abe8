"""The `pyboy_puffer_vec` baseline: PyBoy envs under PufferLib's vectorisation agree with `pyboy_single`."""

import json
import sys

import numpy as np
import pytest

from gbxcule.asm import CartridgeHeader, assemble
from gbxcule.backends import make_backend
from gbxcule.backends.pyboy_single import PyBoySingleBackend
from gbxcule.cli.main import main
from gbxcule.core.cartridge import Rom, parse_header
from gbxcule.core.errors import GbxculeError
from gbxcule.core.schedule import ActionSchedule

CODEC = "dmg_buttons_v0"  # noop, a, b, select, start, right, left, up, down
SCHEDULE = ActionSchedule(24, 8)
BOOT_STEPS = 3  # PyBoy runs its boot ROM first: the program starts after about 65 frames

# Forever: OR the pressed buttons into $C000 and the pressed d-pad into $C001 (1 = pressed), keep the last
# button nibble in $C003 and count iterations in $C002, so the window shows each env's own actions and timing.
JOY_SRC = """
 xor a
 ld [$C000], a
 ld [$C001], a
 ld [$C002], a
 ld [$C003], a
loop:
 ld a, $10
 ldh [$00], a
 ldh a, [$00]
 ldh a, [$00]
 cpl
 and $0F
 ld [$C003], a
 ld b, a
 ld a, [$C000]
 or b
 ld [$C000], a
 ld a, $20
 ldh [$00], a
 ldh a, [$00]
 ldh a, [$00]
 cpl
 and $0F
 ld b, a
 ld a, [$C001]
 or b
 ld [$C001], a
 ld hl, $C002
 inc [hl]
 jr loop
"""


def joy_rom() -> Rom:
    src = f'SECTION "e", ROM0[$0100]\n nop\n jp main\nSECTION "m", ROM0[$0150]\nmain:\n{JOY_SRC}\n'
    data = assemble(src, header=CartridgeHeader(title="PUFFJOY", cartridge_type=0, rom_size=0, ram_size=0)).rom
    return Rom(data=data, info=parse_header(data), path="<test>")


@pytest.fixture
def puffer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # importing pufferlib symlinks `resources` into the working directory
    from gbxcule.backends.pyboy_puffer_vec import import_pufferlib_vector

    try:  # as gbxcule imports it (a bare `import pufferlib.vector` fails for want of gym, which is not installed)
        import_pufferlib_vector()
    except GbxculeError as exc:
        pytest.skip(str(exc))


def window(backend, n):
    return np.stack([backend.read_memory(e, 0xC000, 0xC010) for e in range(n)])


@pytest.mark.parametrize(("vec", "mode"), [("multiprocessing", "sync"), ("multiprocessing", "async"),
                                           ("serial", "sync"), ("serial", "async")])
def test_matches_pyboy_single(puffer, vec, mode):
    n, rom = 4, joy_rom()
    plans = [np.zeros(n, int)] * BOOT_STEPS + [np.array([1, 2, 5, 8]), np.array([0, 3, 5, 7]),
                                                np.random.default_rng(7).integers(0, 9, n)]
    ref = PyBoySingleBackend(rom, n, CODEC, SCHEDULE)
    dut = make_backend("pyboy_puffer_vec", rom, num_envs=n, codec=CODEC, schedule=SCHEDULE, mode=mode, vec=vec,
                       num_workers=2 if vec == "multiprocessing" else None)
    try:
        assert dut.num_workers == (2 if vec == "multiprocessing" else 1)
        for rounds in range(2):  # a second round after reset: the same results again
            dut.reset(3)
            ref.reset(3)
            np.testing.assert_array_equal(window(dut, n), window(ref, n))
            for acts in plans:
                dut.step(acts)
                ref.step(acts)
            got, want = window(dut, n), window(ref, n)
            np.testing.assert_array_equal(got, want, err_msg=f"round {rounds}")
        # Each env got its own actions: A in env 0, B and select in env 1, right in env 2, down in env 3.
        assert got[0, 0] & 1 and got[1, 0] & 2 and got[1, 0] & 4 and got[2, 1] & 1 and got[3, 1] & 8
        assert got[0, 2] != 0 and len({tuple(r) for r in got}) == n
    finally:
        dut.close()
        ref.close()


def test_bad_actions_raise_value_error_naming_codec(puffer):
    dut = make_backend("pyboy_puffer_vec", joy_rom(), num_envs=2, codec=CODEC, schedule=SCHEDULE, mode="async")
    try:
        with pytest.raises(ValueError, match=CODEC):
            dut.step(np.array([0, 9]))
        with pytest.raises(ValueError, match=CODEC):
            dut.step(np.array([-1, 0]))
        with pytest.raises(ValueError, match=r"shape \(2,\)"):
            dut.step(np.array([0, 0, 0]))
        for _ in range(BOOT_STEPS):  # still usable after rejected steps
            dut.step(np.array([0, 0]))
        dut.step(np.array([1, 0]))
        assert dut.read_memory(0, 0xC000, 0xC001)[0] & 1 and not dut.read_memory(1, 0xC000, 0xC001)[0]
    finally:
        dut.close()


def test_options_and_introspection_errors(puffer):
    rom = joy_rom()
    with pytest.raises(ValueError, match="divide"):
        make_backend("pyboy_puffer_vec", rom, num_envs=3, codec=CODEC, num_workers=2)
    with pytest.raises(ValueError, match="mode"):
        make_backend("pyboy_puffer_vec", rom, num_envs=1, codec=CODEC, mode="eager")
    dut = make_backend("pyboy_puffer_vec", rom, num_envs=1, codec=CODEC, vec="serial", obs_window=(0xC000, 0xC004))
    try:
        with pytest.raises(NotImplementedError, match="no CPU introspection"):
            dut.get_cpu_state(0)
        with pytest.raises(NotImplementedError, match=r"\$C000, \$C004"):
            dut.read_memory(0, 0xC000, 0xC005)
        with pytest.raises(GbxculeError):  # the same error, printed by the CLI as one line
            dut.read_memory(0, 0x8000, 0x8001)
        with pytest.raises(IndexError):
            dut.read_memory(1, 0xC000, 0xC001)
        assert dut.read_memory(0, 0xC002, 0xC004).shape == (2,)
    finally:
        dut.close()


def test_bench_forwards_puffer_mode(puffer, tmp_path, capsys):
    rom = tmp_path / "joy.gb"
    rom.write_bytes(joy_rom().data)
    rc = main(["bench", "--rom", str(rom), "--backends", "pyboy_puffer_vec", "--envs", "2", "--steps", "2",
               "--frames-per-step", "2", "--release-after-frames", "1", "--puffer-mode", "async", "--json",
               "--out", str(tmp_path / "b.json")])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["puffer_mode"] == "async"
    assert [(r["backend"], r["envs"]) for r in data["results"]] == [("pyboy_puffer_vec", 2)]


def test_without_pufferlib_one_clear_error(monkeypatch, capsys, tmp_path):
    for mod in ("pufferlib", "pufferlib.vector"):
        monkeypatch.setitem(sys.modules, mod, None)  # `import pufferlib.vector` now fails as if not installed
    with pytest.raises(GbxculeError) as err:
        make_backend("pyboy_puffer_vec", joy_rom(), num_envs=1)
    msg = str(err.value)
    assert msg == "pyboy_puffer_vec needs pufferlib: see docs/baselines.md (scripts/install_pufferlib.sh)"
    rom = tmp_path / "joy.gb"
    rom.write_bytes(joy_rom().data)
    assert main(["bench", "--rom", str(rom), "--backends", "pyboy_puffer_vec", "--envs", "1", "--steps", "1",
                 "--out", str(tmp_path / "b.json")]) == 2
    assert capsys.readouterr().err == f"gbxcule bench: error: {msg}\n"


@pytest.mark.parametrize(("vec", "mode"), [("multiprocessing", "sync"), ("multiprocessing", "async"),
                                           ("serial", "sync")])
def test_an_illegal_opcode_stops_with_one_line_not_a_hung_worker(puffer, tmp_path, vec, mode):
    """An env's PyBoy that runs an illegal opcode: the worker hands the hang back as an info and the backend
    raises it (an exception in PufferLib's worker process ended it, and its parent waited forever)."""
    from gbxcule.backends.pyboy_single import PyBoyHang
    from gbxcule.core.cartridge import header_checksum

    src = 'SECTION "e", ROM0[$0100]\n nop\n jp $0150\nSECTION "m", ROM0[$0150]\n ld a, 1\n db $DB\n jr @\n'
    data = bytearray(assemble(src, header=CartridgeHeader(title="ILL", cartridge_type=0, rom_size=0, ram_size=0)).rom)
    data[0x14D] = header_checksum(bytes(data))
    rom = Rom(data=bytes(data), info=parse_header(bytes(data)), path="<illegal>")
    kw = {"num_workers": 2} if vec == "multiprocessing" else {}
    backend = make_backend("pyboy_puffer_vec", rom, num_envs=2, vec=vec, mode=mode, **kw)
    try:
        with pytest.raises(PyBoyHang, match=r"pyboy_puffer_vec: ran the illegal opcode \$DB at \$0152"):
            for _ in range(6):  # past PyBoy's boot ROM into the program; async: the hang shows a step later
                backend.step(np.zeros(2, dtype=np.int32))
    finally:
        backend.close()
