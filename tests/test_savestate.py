"""Save states: PyBoy `.state` import and export, native snapshots, device slots and masked restore.

Lockstep from a state: PyBoy loads the state (`PyBoyGame.load_state`) and warp_vec_cpu loads it too; both
must then agree after every step (`run_verify` with `state`), starting with the loaded state itself.
States come from `tick(n)` (frame ends: boot ROM, LCD off, halted, cartridge RAM) and from PyBoy hooks on a
stress ROM (inside a frame and a CPU batch: mode 3 over sprites, OAM DMA and serial transfers running,
STAT line high, an MBC3 clock running), so PyBoy's loader quirks are all exercised. `gbxcule verify
--state FILE --steps 1000` runs the long version of the same checks.
"""

import hashlib
import io
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gbxcule.asm import assemble
from gbxcule.backends.pyboy_single import new_pyboy, power_on_state
from gbxcule.backends.warp_vec import WarpVecBackend, load_env_states
from gbxcule.core.cartridge import Rom, load_rom
from gbxcule.core.errors import GbxculeError
from gbxcule.core.pyboy_state import parse_pyboy_state, write_pyboy_state
from gbxcule.core.savestate import env_to_pyboy
from gbxcule.core.schema import FIELDS, NUM_FIELDS, SERIAL_CAPTURE
from gbxcule.core.snapshot import (
    FORMAT_VERSION,
    MAGIC,
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
    write_snapshot,
)
from gbxcule.harness.verify import VerifyConfig, run_verify
from gbxcule.roms import resolve_rom
from gbxcule.roms.micro.common import header, program

# A busy loop over everything PyBoy's loader treats specially: sprites on the lines polled (mode-3
# length), OAM DMA restarted every 32 lines, a serial transfer at LY=100, a HALT at LY=120, the STAT line
# (LY=LYC and mode-0 sources), a fast timer (overflow every 256 cycles), an MBC3 clock latched and read
# into $C100 every pass, cartridge RAM banks written, DI/EI.
STRESS = """
    call lcd_off
    ld hl, $8000
    ld bc, $0040
    ld e, $5A
    call memset
    ld hl, $C000          ; sprite table at $C000 (the DMA source): Y 16 + 3c mod 64, X 13c
    ld b, 40
    ld c, 0
.oam:
    ld a, c
    add a, a
    add a, c
    and $3F
    add a, 16
    ld [hl+], a
    ld a, c
    swap a
    sub a, c
    sub a, c
    sub a, c
    ld [hl+], a
    ld a, c
    and 3
    ld [hl+], a
    ld a, c
    and $F0
    ld [hl+], a
    inc c
    dec b
    jr nz, .oam
    ld hl, $C000
    ld de, $FE00
    ld bc, 160
    call memcpy
    ld a, $0A
    ld [$0000], a
    ld a, $F0
    ldh [rTMA], a
    ld a, $05
    ldh [rTAC], a
    ld a, $93
    ldh [rLCDC], a
    ld a, 50
    ldh [rLYC], a
    ld a, $48
    ldh [rSTAT], a
    ld a, $0F
    ldh [rIE], a
    ei
loop:
    ldh a, [rLY]
    ld b, a
    and $1F
    jr nz, .no_dma
    ld a, $C0
    ldh [rDMA], a
.no_dma:
    ld a, b
    cp 100
    jr nz, .no_serial
    ld a, $42
    ldh [rSB], a
    ld a, $81
    ldh [rSC], a
.no_serial:
    ld a, b
    cp 120
    jr nz, .no_halt
.halt:
    halt
.no_halt:
    xor a
    ld [$6000], a
    inc a
    ld [$6000], a
    ld a, $08
    ld [$4000], a
    ld a, [$A000]
    ld [$C100], a
    ld a, b
    and 3
    ld [$4000], a
    ld a, b
    ld [$A010], a
    ldh [rSCX], a
    di
    ei
.shadow:
    nop
    jr loop
"""
HOOKS = ("loop", "loop.no_dma", "loop.no_serial", "loop.halt", "loop.no_halt", "loop.shadow")


def pyboy_state(pyboy) -> bytes:
    buf = io.BytesIO()
    pyboy.save_state(buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def stress(tmp_path_factory):
    """The stress ROM (MBC3+RTC+RAM) and PyBoy states saved from hooks inside its frames."""
    asm = assemble(program(STRESS), header=header("STATESTRESS", cartridge_type=0x10, ram_size=0x03), name="stress")
    path = tmp_path_factory.mktemp("stress") / "stress.gb"
    path.write_bytes(asm.rom)
    rom = load_rom(path)
    pyboy = new_pyboy(rom)
    pyboy.tick(70, False)
    states, hits, started = [], [0], {"loop.no_dma": 0, "loop.no_serial": 0}

    def save(where):
        # every 41st hook pass, and the first three passes right after an OAM DMA or a serial transfer started
        r = pyboy.register_file
        hits[0] += 1
        just = (where == "loop.no_dma" and r.A == 0xC0 and r.B & 0x1F == 0) or (
            where == "loop.no_serial" and r.A == 0x81 and r.B == 100)
        if just and started[where] < 3:
            started[where] += 1
            states.append(pyboy_state(pyboy))
        elif hits[0] % 41 == 0 and len(states) < 24:
            states.append(pyboy_state(pyboy))

    for name in HOOKS:
        pyboy.hook_register(0, asm.symbols[name], save, name)
    pyboy.tick(4, False)
    pyboy.stop(save=False)
    return rom, states


def frame_state(name: str, frames: int, tmp_path) -> tuple[Rom, Path]:
    rom = load_rom(resolve_rom(name))
    pyboy = new_pyboy(rom)
    pyboy.tick(frames, False)
    path = tmp_path / f"{name}-{frames}.state"
    path.write_bytes(pyboy_state(pyboy))
    pyboy.stop(save=False)
    return rom, path


def verify(rom: Rom, state: Path, tmp_path, steps: int, **kw):
    cfg = VerifyConfig(rom=rom.path, steps=steps, seed=5, state=str(state), bundle_dir=str(tmp_path / "bundles"), **kw)
    result = run_verify(cfg, rom)
    assert result.ok, f"step {result.mismatch_step}: " + "\n".join(result.differences[:12])


# --- PyBoy states: lockstep ----------------------------------------------------------------------------

FRAME_STATES = [
    ("OVERWORLD", 3),  # boot ROM mapped, LCD off
    ("OVERWORLD", 300),  # the game running: MBC3 with 4 RAM banks, timer on
    ("INTERRUPTS", 67),  # halted
    ("SERIAL", 66),  # LCD off, halted
    ("MBC1_RAM", 66),  # MBC1 registers, 4 RAM banks
    ("MBC5_RAM", 66),  # 16 RAM banks
]


@pytest.mark.parametrize("name, frames", FRAME_STATES)
def test_frame_end_states_lockstep(name, frames, tmp_path):
    rom, path = frame_state(name, frames, tmp_path)
    verify(rom, path, tmp_path, steps=40)


def test_frame_end_states_cover_halt_lcd_off_and_boot(tmp_path):
    seen = {"halted": 0, "lcd_off": 0, "boot": 0}
    for name, frames in FRAME_STATES:
        s = parse_pyboy_state(frame_state(name, frames, tmp_path)[1].read_bytes())
        seen["halted"] += s.cpu.halted
        seen["lcd_off"] += not s.lcd.lcdc & 0x80
        seen["boot"] += s.bootrom_enabled
    assert min(seen.values()) >= 1, seen


def test_hooked_states_lockstep(stress, tmp_path):
    """States saved inside frames and CPU batches continue in lockstep, and cover what the loader derives."""
    rom, states = stress
    seen = {"mode3_sprites": 0, "dma": 0, "serial": 0, "stat_line": 0}
    for i, data in enumerate(states):
        env = load_env_states(data, rom)[0]
        seen["mode3_sprites"] += env.field("stat_mode") == 3 and env.field("mode3_adj") > 0
        seen["dma"] += env.field("dma_active")
        seen["serial"] += env.field("serial_on")
        seen["stat_line"] += env.field("stat_irq_line")
        path = tmp_path / f"hook{i}.state"
        path.write_bytes(data)
        verify(rom, path, tmp_path, steps=2)
    assert all(seen.values()), seen


def test_rtc_advances_on_load(stress):
    """PyBoy's first RTC tick after a load counts every cycle since 0: the import advances a running clock by
    cpu.cycles (less the peripherals' lag, kept in rtc_last). The hooked lockstep shows PyBoy agrees: the
    stress ROM reads the clock into WRAM on every pass."""
    rom, states = stress
    s = parse_pyboy_state(states[0])
    env = load_env_states(states[0], rom)[0]
    total = s.cartridge.rtc.seconds + (s.cartridge.rtc.rtc_cycles + s.cpu.cycles + env.field("rtc_last")) // 4194304
    assert s.cpu.cycles > 4194304 and env.field("rtc_s") == total % 60 and env.field("rtc_s") != s.cartridge.rtc.seconds


def test_import_export_import_is_exact(stress, tmp_path):
    rom, states = stress
    cases = [(rom, data) for data in states[:8]]
    for name, frames in FRAME_STATES[:3]:
        r, path = frame_state(name, frames, tmp_path)
        cases.append((r, path.read_bytes()))
    for r, data in cases:
        first = load_env_states(data, r)[0]
        again = load_env_states(write_pyboy_state(env_to_pyboy(first, r, power_on_state(r))), r)[0]
        diff = [FIELDS[i][0] for i in np.flatnonzero(first.fields != again.fields)]
        assert not diff and np.array_equal(first.ram, again.ram), diff


def test_pyboy_continues_from_states_we_write(stress, tmp_path):
    """warp_vec_cpu runs on from a state; PyBoy loads its export and both continue in lockstep."""
    rom, states = stress
    b = WarpVecBackend(rom, 2)
    b.load_state(states[3])
    rng = np.random.default_rng(1)
    for _ in range(12):
        b.step(rng.integers(0, b.codec.num_actions, 2))
    snap = tmp_path / "run.gbxsnap"
    b.save_state(snap)
    verify(rom, snap, tmp_path, steps=25, envs=2)
    game = load_rom(resolve_rom("OVERWORLD"))
    b = WarpVecBackend(game, 1)
    for k in range(120):
        b.step(np.array([k % b.codec.num_actions]))
    b.save_state(snap)
    verify(game, snap, tmp_path, steps=25)


# --- native snapshots ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def running(stress):
    """A 4-env backend whose envs hold different states and have run a few steps."""
    rom, states = stress
    b = WarpVecBackend(rom, 4)
    b.put_states([load_env_states(d, rom)[0] for d in states[:4]])
    b.step(np.array([0, 1, 2, 3]))
    return b


def test_snapshot_round_trip_is_bit_exact(running, tmp_path):
    path = tmp_path / "s.gbxsnap"
    data = running.save_state(path)
    assert path.read_bytes() == data and not list(tmp_path.glob(".*tmp"))
    other = WarpVecBackend(running.rom, 4)
    other.load_state(str(path))
    for a, b in zip(running.env_states(), other.env_states(), strict=True):
        assert np.array_equal(a.fields, b.fields) and np.array_equal(a.ram, b.ram)
        assert np.array_equal(a.serial, b.serial)
    snap = decode_snapshot(data)
    assert (snap.rom_sha1, len(snap.envs), snap.codec) == (running.rom.info.sha1, 4, running.codec.name)
    assert snap.envs[1].field("pc") == running.env_fields(1)["pc"]
    # one env of the file into chosen envs: env i listed takes state i mod M
    other.load_state(running.save_state(envs=[2]), envs=[0, 3])
    assert np.array_equal(other.env_states([0])[0].fields, running.env_states([2])[0].fields)


def _reencode(data: bytes, edit) -> bytes:
    snap = decode_snapshot(data)
    edit(snap)
    return encode_snapshot(snap)


def _resign(data: bytes, edit_body) -> bytes:
    """A snapshot whose body was edited, behind a valid preamble (length and checksum)."""
    body = edit_body(data[52:])
    return struct.pack("<8sIQ32s", MAGIC, FORMAT_VERSION, len(body), hashlib.sha256(body).digest()) + body


def test_bad_snapshots_are_refused_and_nothing_changes(running):
    data = running.save_state()
    before = running.env_states()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x40
    version = bytearray(data)
    version[8] = FORMAT_VERSION + 1
    cases = {
        "checksum": bytes(flipped),
        "truncated": data[:-1000],
        "truncated gbxcule snapshot": data[:30],
        "another state schema": _resign(data, lambda b: b.replace(b'"fields": ["a"', b'"fields": ["z"', 1)),
        "format version": bytes(version),
        "another ROM": _reencode(data, lambda s: setattr(s, "rom_sha1", "0" * 40)),
        "after its end": data + b"\0",
    }
    for needle, bad in cases.items():
        with pytest.raises(GbxculeError, match=needle) as exc:
            running.load_state(bad)
        assert "\n" not in str(exc.value)
    for a, b in zip(before, running.env_states(), strict=True):
        assert np.array_equal(a.fields, b.fields) and np.array_equal(a.ram, b.ram)


def test_snapshot_of_another_rom_is_refused(running):
    other = WarpVecBackend(load_rom(resolve_rom("MBC3_RAM")), 1)
    with pytest.raises(SnapshotError, match="another ROM"):
        other.load_state(running.save_state())


def test_atomic_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "taken"
    target.mkdir()  # the rename onto a directory fails after the data was written
    with pytest.raises(GbxculeError, match="cannot write"):
        write_snapshot(target, b"x" * 100)
    assert target.is_dir() and not list(tmp_path.glob(".*tmp"))


# --- PyBoy states that do not fit ----------------------------------------------------------------------

def test_pyboy_states_of_other_cartridges_are_refused(stress, tmp_path):
    rom, states = stress
    _, mbc1 = frame_state("MBC1_RAM", 66, tmp_path)
    b = WarpVecBackend(rom, 1)
    with pytest.raises(GbxculeError, match="another cartridge: it holds MBC1 registers and 4 RAM bank"):
        b.load_state(mbc1)
    s = parse_pyboy_state(states[0])
    s.cartridge.rom_bank = 9
    with pytest.raises(GbxculeError, match="selects ROM bank 9, 'STATESTRESS' has 2 banks"):
        b.load_state(write_pyboy_state(s))
    cgb = bytearray(states[0])
    cgb[5] = 1  # the header's CGB flag
    with pytest.raises(GbxculeError, match="CGB states are not supported"):
        b.load_state(bytes(cgb))
    with pytest.raises(GbxculeError, match="truncated PyBoy state"):
        b.load_state(states[0][:-40])
    with pytest.raises(GbxculeError, match="cannot read state file"):
        b.load_state(str(tmp_path / "missing.state"))


def test_cli_state_option(stress, tmp_path):
    rom, states = stress
    state = tmp_path / "s.state"
    state.write_bytes(states[5])
    run = lambda *a: subprocess.run([sys.executable, "-m", "gbxcule", *a], capture_output=True, text=True,  # noqa: E731
                                    timeout=300)
    r = run("play", rom.path, "--backend", "warp_vec_cpu", "--steps", "2", "--state", str(state), "--json")
    assert r.returncode == 0, r.stderr
    ours = json.loads(r.stdout)["final"][0]
    r = run("play", rom.path, "--backend", "pyboy_single", "--steps", "2", "--state", str(state), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["final"][0] == ours
    state.write_bytes(states[5][:-10])
    r = run("verify", "--rom", rom.path, "--steps", "1", "--state", str(state))
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode != 0 and len(lines) == 1 and "truncated PyBoy state" in lines[0], r.stderr


# --- device slots and masked restore -------------------------------------------------------------------

def _host(b: WarpVecBackend):
    n = b.num_envs
    return b.fields.numpy().reshape(n, NUM_FIELDS).T.copy(), b.ram.numpy().T.copy()


def _cuda() -> bool:
    import warp as wp

    from gbxcule.kernels import init_warp

    init_warp()
    return wp.is_cuda_available()


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif("not _cuda()", reason="no CUDA device"))]


@pytest.fixture(scope="module", params=DEVICES)
def slotted(stress, request):
    """48 envs in 4 different states, 5 slots saved from envs 0, 7, 13, 22, 31, then the envs stepped on."""
    rom, states = stress
    b = WarpVecBackend(rom, 48, device=request.param)
    b.put_states([load_env_states(d, rom)[0] for d in states[:4]])
    b.step(np.arange(48) % b.codec.num_actions)
    b.alloc_slots(5)
    for k, e in enumerate((0, 7, 13, 22, 31)):
        b.save_slot(e, k)
    b.step((np.arange(48) + 3) % b.codec.num_actions)
    return b


def _check_restored(b, before, after, mask, slot_of):
    f0, r0 = before
    f1, r1 = after
    for e in range(b.num_envs):
        if mask[e]:
            fields, ram = b.slot_state(int(slot_of[e]))
            assert np.array_equal(f1[:, e], fields) and np.array_equal(r1[:, e], ram), e
        else:
            assert np.array_equal(f1[:, e], f0[:, e]) and np.array_equal(r1[:, e], r0[:, e]), e


@pytest.mark.parametrize("chunk, dtype", [(None, np.int32), (1, np.uint8), (7, np.bool_), (5000, np.int32)])
def test_masked_restore_with_explicit_slots(slotted, chunk, dtype):
    import warp as wp

    b = slotted
    rng = np.random.default_rng(chunk or 0)
    mask = rng.random(b.num_envs) < 0.3
    slot_of = rng.integers(-12, 12, b.num_envs).astype(np.int32)  # reduced into range: slot_of mod K
    b.step(rng.integers(0, b.codec.num_actions, b.num_envs))
    before = _host(b)
    serial = b.serial.numpy().copy()
    b.restore(wp.array(mask.astype(dtype), device=b.device), wp.array(slot_of, dtype=wp.int32, device=b.device),
              chunk=chunk)
    _check_restored(b, before, _host(b), mask, slot_of % 5)
    assert np.array_equal(serial, b.serial.numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_seeded_restore_rule(stress, device):
    """The reset cache: K start states from a file, each reset env takes hash(seed, env, epoch) mod K."""
    import warp as wp

    rom, states = stress
    src = WarpVecBackend(rom, 3)
    src.put_states([load_env_states(d, rom)[0] for d in states[6:9]])
    b = WarpVecBackend(rom, 64, device=device)
    b.load_slots(src.save_state(), seed=11)
    assert b.num_slots == 3

    def rule(env, epoch):
        m = 0xFFFFFFFF
        h = ((11 * 0x9E3779B1) ^ (env * 0x85EBCA77) ^ (epoch * 0xC2B2AE3D)) & m
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & m
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & m
        return (h ^ (h >> 16)) % 3

    picked = []
    for epoch in range(2):
        mask = (np.arange(64) % (epoch + 2)) == 0
        before = _host(b)
        b.restore(wp.array(mask.astype(np.int32), device=device))
        slot_of = np.array([rule(e, epoch) for e in range(64)])
        _check_restored(b, before, _host(b), mask, slot_of)
        picked += list(slot_of[mask])
    assert set(picked) == {0, 1, 2}


def test_restore_rejects_bad_masks(slotted):
    import warp as wp

    with pytest.raises(ValueError, match="shape"):
        slotted.restore(wp.zeros(3, dtype=wp.int32, device=slotted.device))
    with pytest.raises(ValueError, match="int32/uint8/bool"):
        slotted.restore(wp.zeros(48, dtype=wp.float32, device=slotted.device))
    with pytest.raises(IndexError):
        slotted.save_slot(0, 5)
    with pytest.raises(GbxculeError, match="no slot store"):
        WarpVecBackend(slotted.rom, 1).restore(wp.zeros(1, dtype=wp.int32, device="cpu"))



# --- whole env states on the device: batch saves with frames, clones -------------------------------------

def _env_state(b: WarpVecBackend, e: int) -> list[np.ndarray]:
    """Fields, RAM, SB ring, screen and observation of env e on the host."""
    n = b.num_envs
    return [b.fields.numpy().reshape(n, NUM_FIELDS)[e].copy(), b.ram.numpy()[e].copy(),
            b.serial.numpy().reshape(SERIAL_CAPTURE, n)[:, e].copy(), b.frame_buffer().numpy()[e].copy(),
            b.obs.numpy()[e].copy()]


def _same(x: list[np.ndarray], y: list[np.ndarray]) -> bool:
    return all(np.array_equal(a, c) for a, c in zip(x, y, strict=True))


@pytest.fixture(scope="module")
def spread(stress):
    """8 envs with an observation stage, in 8 different states of the stress ROM, stepped on a little."""
    rom, states = stress
    b = WarpVecBackend(rom, 8, stage="obs_only")
    envs = [load_env_states(d, rom)[0] for d in states[:8]]
    for i, env in enumerate(envs):  # SB rings that differ
        env.serial = np.full(SERIAL_CAPTURE, i, dtype=np.uint8)
    b.put_states(envs)
    rng = np.random.default_rng(5)
    for _ in range(3):
        b.step(rng.integers(0, b.codec.num_actions, 8))
    return b


def test_clone_continues_bit_identically(spread):
    """Env 3 cloned from env 0 and env 6 from env 2 (masked, one launch each for state and frames) hold their
    sources' whole state, and under the same actions go on exactly as their sources do."""
    import warp as wp

    b, rng = spread, np.random.default_rng(6)
    before = [_env_state(b, e) for e in range(8)]
    assert not _same(before[3], before[0]) and not _same(before[6], before[2])
    assert not np.array_equal(before[0][2], before[1][2])  # the SB rings differ: their copy is seen
    src, mask = np.arange(8, dtype=np.int32), np.zeros(8, dtype=bool)
    src[3], src[6], mask[[3, 6]] = 0, 2, True
    b.clone(wp.array(src, device=b.device), wp.array(mask, device=b.device))
    for e in range(8):
        assert _same(_env_state(b, e), before[src[e]]), e
    for _ in range(6):
        a = rng.integers(0, b.codec.num_actions, 8)
        a[3], a[6] = a[0], a[2]
        b.step(a)
        assert _same(_env_state(b, 3), _env_state(b, 0)) and _same(_env_state(b, 6), _env_state(b, 2))
    assert not _same(_env_state(b, 3), before[0])  # the envs moved on
    # a frame stack given as `obs` is cloned position by position
    stack = rng.integers(0, 4, (8, 3, 72, 80)).astype(np.uint8)
    ring = wp.array(stack, device=b.device)
    b.clone(src, mask, obs=ring)
    got = ring.numpy()
    assert np.array_equal(got[3], stack[0]) and np.array_equal(got[6], stack[2])
    assert np.array_equal(np.delete(got, [3, 6], 0), np.delete(stack, [3, 6], 0))


def test_batch_save_and_restore_carry_frames(spread):
    """save_slots copies masked envs (with their observation and screen) into their slots; restore brings
    them back, the observation into every position of a frame stack and the screen into the frame buffer."""
    import warp as wp

    b = spread
    b.alloc_slots(4)
    mask, slots = np.zeros(8, dtype=np.int32), np.zeros(8, dtype=np.int32)
    mask[[1, 5]], slots[[1, 5]] = 1, (2, -1)  # -1: slot 3
    saved = {2: _env_state(b, 1), 3: _env_state(b, 5)}
    b.save_slots(wp.array(mask, device=b.device), wp.array(slots, device=b.device))
    obs, screens = (a.numpy() for a in b.slot_frames())
    for k in range(4):
        fields, ram = b.slot_state(k)
        want = saved.get(k, [np.zeros_like(x) for x in saved[2]])
        assert np.array_equal(fields, want[0]) and np.array_equal(ram, want[1]), k
        assert np.array_equal(screens[k], want[3]) and np.array_equal(obs[k], want[4]), k
    b.step(np.zeros(8, dtype=np.int32))
    before = [_env_state(b, e) for e in range(8)]
    stack = wp.zeros((8, 2, 72, 80), dtype=wp.uint8, device=b.device)
    mask[:], slots[:] = 0, 0
    mask[[0, 7]], slots[[0, 7]] = 1, (2, 3)
    b.restore(mask, slots, obs=stack)
    ring = stack.numpy()
    for e in range(8):
        now = _env_state(b, e)
        if e in (0, 7):
            want = saved[slots[e]]
            assert _same(now[:2], want[:2]) and np.array_equal(now[3], want[3]), e
            assert np.array_equal(now[2], before[e][2]) and np.array_equal(now[4], before[e][4])  # SB ring, obs
            assert np.array_equal(ring[e, 0], want[4]) and np.array_equal(ring[e, 1], want[4]), e
        else:
            assert _same(now, before[e]) and not ring[e].any(), e
    with pytest.raises(ValueError, match="src must be"):
        b.clone(np.zeros(8, dtype=np.float32), mask)
    with pytest.raises(ValueError, match="frame stack"):
        b.restore(mask, slots, obs=wp.zeros((8, 2, 72, 20), dtype=wp.uint8, device=b.device))
