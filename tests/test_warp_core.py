"""The Warp emulator core on the CPU device: start states, locking, serial capture, determinism."""

import math

import numpy as np
import pytest

from gbxcule.asm import CartridgeHeader, assemble
from gbxcule.backends.warp_vec import WarpVecBackend
from gbxcule.core.cartridge import Rom, parse_header
from gbxcule.core.isa import BASE, CB
from gbxcule.core.schedule import ActionSchedule
from gbxcule.kernels.gen import access_timing, family, family_ids, op_table, ops_source
from gbxcule.kernels.instructions import TEMPLATES
from gbxcule.roms import suite


def build(body: str, **header) -> Rom:
    src = f'SECTION "e", ROM0[$0100]\n nop\n jp main\nSECTION "m", ROM0[$0150]\nmain:\n{body}\n'
    h = dict(title="CORE", cartridge_type=0, rom_size=0, ram_size=0) | header
    data = assemble(src, header=CartridgeHeader(**h)).rom
    return Rom(data=data, info=parse_header(data), path="<test>")


def backend(rom, n=1, frames=1, boot="skip"):
    return WarpVecBackend(rom, n, "dmg_buttons_v0", ActionSchedule(frames, 0), boot=boot)


def test_every_opcode_has_a_template_and_timing_table():
    """Every opcode's table entry decodes (as the kernel's shifts do) to its family, cycles, access timing
    and length."""
    table, ids = op_table(), family_ids()
    assert table.shape == (512,) and table.dtype == np.int32
    for op in (*BASE, *CB):
        fam = family(op)
        assert fam is None or fam in TEMPLATES, op.text
        w = int(table[op.code + (256 if op.prefixed else 0)])
        nt = op.cycles if op.cycles_not_taken is None else op.cycles_not_taken
        acc = (list(access_timing(op)) + [(0, 0)] * 2)[:2]
        assert (w & 0x1F, (w >> 5) & 0x1F, (w >> 22) & 3, w >> 24) == (op.cycles, nt, op.length, ids.get(fam, -1))
        assert [(((w >> 10) & 15) * 4, ((w >> 14) & 3) * 4), (((w >> 16) & 15) * 4, ((w >> 20) & 3) * 4)] == acc
    src = ops_source()  # each family with a template part has its branch in the generated dispatch
    for fam, i in ids.items():
        parts = [p for p in ("pre", "mid", "post") if TEMPLATES[fam].get(p, "").strip()]
        assert (f"s.fam == {i}:  # {fam}\n" in src) == bool(parts), fam


def test_skip_boot_starts_at_0100_with_boot_rom_unmapped():
    b = backend(build(" jr @"))
    f = b.env_fields(0)
    assert f["pc"] == 0x0100 and f["bootrom"] == 0 and f["sp"] == 0xFFFE
    assert f["lcdc"] & 0x80  # the boot ROM left the LCD on


def test_dmg_boot_values():
    f = backend(build(" jr @"), boot="dmg").env_fields(0)
    assert (f["a"], f["f"], f["b"], f["c"], f["d"], f["e"], f["h"], f["l"]) == (1, 0xB0, 0, 0x13, 0, 0xD8, 1, 0x4D)
    assert f["pc"] == 0x100 and f["sp"] == 0xFFFE and f["div_counter"] == 0xABCC


def test_boot_through_pyboy_rom_unmaps_it():
    b = backend(build(" ld a, $42\n ld [$C000], a\n jr @"), frames=120, boot="pyboy")
    assert b.env_fields(0)["bootrom"] == 1 and b.env_fields(0)["pc"] == 0
    b.step(np.zeros(1, np.int32))
    assert b.env_fields(0)["bootrom"] == 0
    assert b.read_memory(0, 0xC000, 0xC001)[0] == 0x42


def test_illegal_opcode_locks_only_that_env_and_time_goes_on():
    rom = build(" ld a, [$C100]\n or a\n jr z, .ok\n db $D3\n.ok:\n ld hl, $C000\n inc [hl]\n jr .ok")
    b = backend(rom, n=2, frames=2)
    ram = b.ram.numpy().T  # [byte, env] (stored env-major)
    ram[b.layout.bases["wram"] + 0x100, 1] = 1  # env 1 takes the illegal opcode (CPU device: a live view)
    b.step(np.zeros(2, np.int32))
    f0, f1 = b.env_fields(0), b.env_fields(1)
    assert f0["locked"] == 0 and f1["locked"] == 1
    assert b.read_memory(0, 0xC000, 0xC001)[0] > 0 and b.read_memory(1, 0xC000, 0xC001)[0] == 0
    assert f1["frames"] == f0["frames"] == 2  # the locked env's PPU still finishes frames


def test_serial_bytes_are_captured():
    body = "\n".join(f" ld a, {ord(c)}\n ldh [$01], a\n ld a, $81\n ldh [$02], a\n.w{i}:\n ldh a, [$02]\n"
                     f" bit 7, a\n jr nz, .w{i}" for i, c in enumerate("hi!")) + "\n jr @"
    b = backend(build(body), frames=5)
    b.step(np.zeros(1, np.int32))
    assert b.serial_bytes(0) == b"hi!"


def test_runs_are_deterministic():
    rom = build(" ld hl, $C000\n.l:\n ldh a, [$04]\n xor [hl]\n ld [hl+], a\n res 5, h\n jr .l")
    out = []
    for _ in range(2):
        b = backend(rom, n=3, frames=3)
        for k in range(3):
            b.step(np.array([k, 1, 2], np.int32))
        out.append((b.fields.numpy().copy(), b.ram.numpy().copy()))
    assert np.array_equal(out[0][0], out[1][0]) and np.array_equal(out[0][1], out[1][1])


def test_out_of_range_action_is_rejected_before_launch():
    b = backend(build(" jr @"))
    with pytest.raises(ValueError, match="dmg_buttons_v0"):
        b.step(np.array([99]))


def test_device_actions_are_used_in_place_and_checked():
    import warp as wp

    rom = build(" ld hl, $C000\n.l:\n ld a, $20\n ldh [$00], a\n ldh a, [$00]\n ld [hl], a\n jr .l")
    a, b = backend(rom, n=3, frames=2), backend(rom, n=3, frames=2)
    acts = np.array([1, 5, 0], np.int32)
    a.step(acts)
    b.step(wp.array(acts, dtype=wp.int32, device=b.device))
    assert np.array_equal(a.fields.numpy(), b.fields.numpy()) and np.array_equal(a.ram.numpy(), b.ram.numpy())
    with pytest.raises(ValueError, match="shape"):
        b.step(wp.zeros(2, dtype=wp.int32, device=b.device))


@pytest.mark.parametrize("packed", [False, True])
def test_stages_share_the_step_and_write_their_outputs(packed):
    """full_step = emulate_only + the reward epilogue and the observation pass, computed on the device."""
    from gbxcule.roms import resolve_rom

    rom = str(resolve_rom("PPU_SPRITES"))
    sched = ActionSchedule(4, 2)
    runs = {}
    for stage in ("emulate_only", "reward_only", "obs_only", "full_step"):
        b = WarpVecBackend(rom, 3, "dmg_buttons_v0", sched, boot="skip", stage=stage, obs_packed=packed,
                           reward_window=(0xC000, 0xC010))
        for k in range(6):
            b.step(np.array([k % 9, 3, 0], np.int32))
        runs[stage] = b
    base = runs["emulate_only"]
    for stage, b in runs.items():  # the epilogues never change the emulation
        assert np.array_equal(b.fields.numpy(), base.fields.numpy()), stage
        assert np.array_equal(b.ram.numpy(), base.ram.numpy()), stage
    full = runs["full_step"]
    assert np.array_equal(full.obs.numpy(), full.observation("stride", packed).numpy())
    assert np.array_equal(full.obs.numpy(), runs["obs_only"].obs.numpy())
    assert full.obs.numpy().any()
    for e in range(3):
        wram = full.read_memory(e, 0xC000, 0xC010).astype(int)
        expect = ((full.env_fields(e)["a"] + wram.sum()) & 0xFF) / 255.0
        assert full.rewards.numpy()[e] == pytest.approx(expect)
    assert np.array_equal(full.rewards.numpy(), runs["reward_only"].rewards.numpy())


@pytest.mark.parametrize("boot", ["pyboy", "skip"])
def test_reset_restores_the_start_state_and_reads_gather_single_envs(boot):
    """reset() copies the one start state into every env on the device; per-env reads gather only that env
    and agree with a full download."""
    b = WarpVecBackend(build(" ld hl, $C000\nloop:\n inc [hl]\n jr loop"), 3, "dmg_buttons_v0",
                       ActionSchedule(2, 0), boot=boot)
    start = b.env_states()
    assert all(np.array_equal(s.ram, start[0].ram) and np.array_equal(s.fields, start[0].fields) for s in start)
    b.step(np.array([0, 1, 2], dtype=np.int32))
    full = b.fields.numpy().reshape(3, -1).T, b.ram.numpy().T
    picked = b.env_states([2, 0])
    assert np.array_equal(picked[0].fields, full[0][:, 2]) and np.array_equal(picked[1].ram, full[1][:, 0])
    wram = b.layout.bases["wram"]
    assert np.array_equal(b.env_region(1, "wram"), full[1][wram:wram + 0x2000, 1])
    assert not np.array_equal(picked[1].fields, start[0].fields)
    b.reset()
    for s, s0 in zip(b.env_states(), start, strict=True):
        assert np.array_equal(s.fields, s0.fields) and np.array_equal(s.ram, s0.ram)


def test_sorting_envs_by_pc_changes_no_result():
    """sort_envs permutes which thread runs which env (by either sort key), once per step or (sort_every) once
    per frame with a launch per frame, and the lean kernel runs the frames that draw nothing: every env's state,
    reward and observation must come out the same as with one plain launch per step."""
    from gbxcule.roms import resolve_rom

    rom = str(resolve_rom("JOY_DIVERGE_PERSIST"))
    plain, sorted_, every, path, light, stack = (
        WarpVecBackend(rom, 6, schedule=ActionSchedule(3, 1), boot="skip", stage="full_step", sort_envs=s,
                       sort_every=k, lean=k == 1, sort_key=key, sort_parts=1)
        for s, k, key in ((False, 1, "pc"), (True, 3, "pc"), (True, 1, "pc"), (True, 1, "path"),
                          (True, 1, "path_light"), (True, 2, "stack")))
    rng = np.random.default_rng(1)
    for _ in range(5):
        acts = rng.integers(0, plain.codec.num_actions, 6).astype(np.int32)
        for b in (plain, sorted_, every, path, light, stack):
            b.step(acts)
        assert len(set(sorted_.fields.numpy().reshape(6, -1)[:, 9])) > 1  # the envs did end at different PCs
        for b in (sorted_, every, path, light, stack):
            assert np.array_equal(plain.fields.numpy(), b.fields.numpy())
            assert np.array_equal(plain.ram.numpy(), b.ram.numpy())
            assert np.array_equal(plain.rewards.numpy(), b.rewards.numpy())
            assert np.array_equal(plain.obs.numpy(), b.obs.numpy())
    assert plain.obs.numpy().any()
    assert len(set(path._sort_keys.numpy()[:6] >> 20)) > 1  # the path key did part envs by their work
    heavy = 2047 - (path._sort_keys.numpy()[:6] >> 20)  # "path": the most work first; "path_light": the least
    assert np.all(np.diff(heavy) <= 0) and np.array_equal(heavy[::-1], light._sort_keys.numpy()[:6] >> 20)


def test_step_block_dim_spreads_warps_over_the_sms():
    """The default block size: 256 once 256-thread blocks make four waves over the SMs, 128 from one wave to
    four; below that, no SM gets more warps than it must, the largest block that achieves it; the H100 choices
    measured (docs/kernel_style.md, "What each mechanism bought")."""
    from gbxcule.backends.warp_vec import BLOCK_DIMS, step_block_dim
    from gbxcule.roms import resolve_rom

    def busiest(n, sms, b):
        blocks = math.ceil(n / b)
        return math.ceil(blocks / sms) * (b // 32)

    assert [step_block_dim(n, 132) for n in (4096, 16384, 32768, 40960, 65536, 262144)] == [32, 128, 256, 128,
                                                                                              128, 256]
    for sms in (1, 2, 46, 108, 132, 144):
        for n in (1, 31, 33, 500, 1024, 5000, 16384, 40000):
            b = step_block_dim(n, sms)
            assert b in BLOCK_DIMS
            if n >= 4 * 256 * sms:
                assert b == 256
            elif n >= 256 * sms:
                assert b == 128
            else:
                assert busiest(n, sms, b) == min(busiest(n, sms, c) for c in BLOCK_DIMS)
    with pytest.raises(ValueError, match="block_dim"):
        WarpVecBackend(str(resolve_rom("ALU_LOOP")), 2, block_dim=48)


def test_field_values_and_wram_bytes_read_every_env():
    """What the bench harness reads (PCs, instruction counters, a WRAM byte) matches the per-env views."""
    rom = build(" ld a, [$FF00]\n and $0F\n ld [$C123], a\n jr @")
    b = backend(rom, n=4, frames=2)
    b.step(np.array([0, 1, 2, 3], np.int32))
    pcs, wram = b.field_values("pc"), b.wram_bytes(0xC123)
    assert pcs.shape == wram.shape == (4,)
    for e in range(4):
        assert pcs[e] == b.get_cpu_state(e).pc
        assert wram[e] == b.read_memory(e, 0xC123, 0xC124)[0]
        assert b.field_values("instructions")[e] == b.env_fields(e)["instructions"]
    with pytest.raises(ValueError):
        b.wram_bytes(0xE000)


def test_stack_sort_key_reads_the_word_at_sp_within_the_region():
    """The "stack" key's high bits are the 16-bit word at SP where SP lies in WRAM or HRAM (0xDFFF's high
    byte from 0xC000, as the echo), else 0; a wild SP never reads outside its region's rows."""
    import warp as wp

    from gbxcule.core.schema import FIELD_INDEX
    from gbxcule.kernels.sortkeys import stack_key_kernel
    from gbxcule.roms import resolve_rom

    n = 6
    b = WarpVecBackend(str(resolve_rom("JOY_DIVERGE_PERSIST")), n, schedule=ActionSchedule(3, 1), boot="skip",
                       sort_key="stack", sort_envs=True)
    b.step(np.arange(n, dtype=np.int32) % b.codec.num_actions)
    fields = b.fields.numpy().reshape(n, -1)  # env-major (core/schema.py)
    fields[:, FIELD_INDEX["sp"]] = [0xC123, 0xDFFF, 0xFF90, 0xFFFE, 0x1234, 0xFFFF]
    b.fields.assign(fields.reshape(-1))
    ram = b.ram.numpy().T.copy()  # [byte, env] (stored env-major)
    rng = np.random.default_rng(0)
    word = lambda lo, hi, e: int(ram[lo, e]) | int(ram[hi, e]) << 8  # noqa: E731
    ram[:] = rng.integers(0, 256, ram.shape, dtype=np.uint8)
    b.ram.assign(np.ascontiguousarray(ram.T))
    keys, envs = (wp.zeros(2 * n, dtype=wp.int32, device="cpu") for _ in range(2))
    wp.launch(stack_key_kernel, dim=n, device="cpu",
              inputs=[b.fields, b.actions, b.ram, keys, envs, FIELD_INDEX["pc"], FIELD_INDEX["sp"],
                      b.layout.bases["wram"], b.layout.bases["hram"]])
    w, h = b.layout.bases["wram"], b.layout.bases["hram"]
    want = [word(w + 0x123, w + 0x124, 0), word(w + 0x1FFF, w, 1), word(h + 0x10, h + 0x11, 2), 0, 0, 0]
    assert [int(k) >> 15 for k in keys.numpy()[:n]] == want
    assert all(k >= 0 for k in keys.numpy()[:n])


def step_both_alike(a, b, steps: int, seed: int) -> None:
    """Step two 8-env backends with the same actions (five idle steps, which reach OVERWORLD's bedroom, then
    random ones; every fourth step draws every frame) and check after each that fields, RAM, drawn frames, rewards
    and observations are the same."""
    rng = np.random.default_rng(seed)
    for i in range(steps):
        acts = rng.integers(0, a.codec.num_actions, 8).astype(np.int32) * (i >= 5)
        for x in (a, b):
            x.step(acts, render="all" if i % 4 == 3 else "last")
        assert np.array_equal(a.fields.numpy(), b.fields.numpy())
        assert np.array_equal(a.ram.numpy(), b.ram.numpy())
        assert np.array_equal(a.frame_buffer().numpy(), b.frame_buffer().numpy())
        assert np.array_equal(a.rewards.numpy(), b.rewards.numpy())
        assert np.array_equal(a.obs.numpy(), b.obs.numpy())


@pytest.mark.parametrize("parts,key,lean,game", [(3, "path", True, "OVERWORLD"), (7, "pc", False, "OVERWORLD"),
                                                (4, "path", True, "IDLE_LOOPS")])
def test_sorting_within_frames_changes_no_result(parts, key, lean, game):
    """sort_parts splits every frame into launches that stop at PPU dot counts and re-sort in between; states,
    rewards and observations (the last frame drawn, or every frame) equal one plain launch per step. IDLE_LOOPS
    waits in polling loops whose rounds are skipped (kernels/idle.py): a launch's end runs one round one by one,
    and still every field, the instruction count included, is the same."""
    from gbxcule.roms import resolve_rom

    rom = str(resolve_rom(game))
    plain, split = (WarpVecBackend(rom, 8, schedule=ActionSchedule(24, 8), stage="full_step", sort_envs=s,
                                   sort_parts=p, sort_key=key, lean=lean) for s, p in ((False, 1), (True, parts)))
    step_both_alike(plain, split, 13, parts)
    if game == "IDLE_LOOPS":  # rounds were skipped (the same in every env: the ROM ignores the buttons)
        assert (split._waited.numpy() > 0).all()
    else:
        assert len(set(plain.field_values("instructions"))) > 1 and plain.obs.numpy().any()  # the envs parted


@pytest.mark.parametrize("groups,key,parts,game", [(2, "path", 1, "OVERWORLD"), (3, "stack", 1, "OVERWORLD"),
                                                   (3, "pc", 2, "IDLE_LOOPS"), (8, "path_light", 1, "OVERWORLD")])
def test_stream_groups_change_no_result(groups, key, parts, game):
    """stream_groups: the envs in groups, each sorted on its own (and on CUDA launched on its own stream); states,
    rewards, observations and drawn frames equal one sort over all envs, groups of uneven size included (8 envs
    in 3), and the launches covered every env once: no env ran twice or not at all."""
    from gbxcule.roms import resolve_rom

    rom = str(resolve_rom(game))
    plain, grouped = (WarpVecBackend(rom, 8, schedule=ActionSchedule(24, 8), stage="full_step", sort_envs=True,
                                     sort_parts=parts, sort_key=key, stream_groups=g) for g in (1, groups))
    step_both_alike(plain, grouped, 9, groups)
    perms = np.concatenate([grp["perm"].numpy()[:grp["count"]] for grp in grouped._groups])
    assert sorted(perms.tolist()) == list(range(8))


def test_stream_groups_are_checked():
    from gbxcule.roms import resolve_rom

    rom = str(resolve_rom("OVERWORLD"))
    for bad in (0, 9, True, 1.5, "2"):
        with pytest.raises(ValueError, match="stream_groups"):
            WarpVecBackend(rom, 8, sort_envs=True, stream_groups=bad)
    with pytest.raises(ValueError, match="sort_envs"):
        WarpVecBackend(rom, 8, sort_envs=False, stream_groups=2)
    from gbxcule.backends.warp_vec import parse_stream_groups  # command lines and variant names

    assert [parse_stream_groups(t) for t in ("auto", "1", "8")] == ["auto", 1, 8]
    for bad in ("0", "x", "-1", "", "Auto"):
        with pytest.raises(ValueError, match="stream_groups"):
            parse_stream_groups(bad)


def test_a_frame_part_stops_mid_frame_and_resumes_where_it_stopped():
    """The kernel's stop_dot ends a launch inside the frame (frame not counted, PPU short of the frame's end);
    resume=1 finishes that frame without starting it again (the joypad press is not repeated)."""
    from gbxcule.core.schema import BIG, FIELD_INDEX, FRAME_CYCLES
    from gbxcule.roms import resolve_rom

    rom = str(resolve_rom("OVERWORLD"))
    whole, cut = (WarpVecBackend(rom, 2, schedule=ActionSchedule(1, 1)) for _ in range(2))
    acts = np.array([1, 2], np.int32)
    for b in (whole, cut):
        for _ in range(130):  # into the game, LCD on
            b.step(np.zeros(2, np.int32))
    whole.step(acts)
    k, n = cut._kernels, 2
    frames0 = cut.field_values("frames").copy()
    cut._device_actions(acts)

    def launch(resume, stop):
        cut._wp.launch(k.step_kernel, dim=n, device="cpu",
                       inputs=[cut.fields, cut.mem, cut.actions, cut.masks, cut.codec.num_actions, 0, 1, 1, 1, 0, 0,
                               cut.rewards, 0xC100, 0xC110, cut._no_perm, resume, stop, cut._waited])

    launch(0, FRAME_CYCLES // 2)
    f = cut.fields.numpy().reshape(n, -1).T
    assert np.array_equal(cut.field_values("frames"), frames0)
    assert (f[FIELD_INDEX["frame_done"]] == 0).all()
    clock = f[FIELD_INDEX["lcd_clock"]]
    assert (clock >= FRAME_CYCLES // 2).all() and (clock < FRAME_CYCLES).all() and (f[FIELD_INDEX["lcdc"]] & 0x80).all()
    launch(1, BIG)
    assert np.array_equal(whole.fields.numpy(), cut.fields.numpy())
    assert np.array_equal(whole.ram.numpy(), cut.ram.numpy())
    launch(1, BIG)  # the frame already ended: a further resume changes nothing
    assert np.array_equal(whole.fields.numpy(), cut.fields.numpy())


def test_sort_parts_is_checked():
    from gbxcule.backends.warp_vec import parse_sort_parts
    from gbxcule.roms import resolve_rom

    rom = str(resolve_rom("ALU_LOOP"))
    for bad in (0, 65, 2.5, True, "Auto", "4"):
        with pytest.raises(ValueError, match="sort_parts"):
            WarpVecBackend(rom, 1, sort_parts=bad)
    with pytest.raises(ValueError, match="sort_every"):
        WarpVecBackend(rom, 1, sort_parts=2, sort_every=2)
    assert WarpVecBackend(rom, 1, sort_parts="auto", sort_every=2).tuner is None  # no sort every frame: 1
    assert WarpVecBackend(rom, 1).tuner is None  # the CPU device does not sort by default
    from gbxcule.backends.warp_vec import default_sort_envs  # a GPU sorts once the envs fill more than one warp
    assert [default_sort_envs(d, n) for d, n in (("cuda", 33), ("cuda:1", 4096), ("cuda", 32), ("cuda", 1),
                                                 ("cpu", 4096))] == [True, True, False, False, False]
    assert WarpVecBackend(rom, 1, sort_envs=True).tuner is not None  # sorting every frame: "auto" by default
    assert [parse_sort_parts(t) for t in ("auto", "1", "64")] == ["auto", 1, 64]
    for bad in ("0", "65", "x", "-1", ""):
        with pytest.raises(ValueError, match="sort_parts"):
            parse_sort_parts(bad)
    for bad in ("Flat", "", None, 1):
        with pytest.raises(ValueError, match="loop"):
            WarpVecBackend(rom, 1, loop=bad)
    fixed = WarpVecBackend(rom, 1, sort_envs=True, loop="flat")  # a fixed loop: the tuner tries orders and parts
    assert {c[2] for c in fixed.tuner.candidates} == {True}
    # the step modules a GPU backend builds side by side before its first launch: (draws, flat)
    assert WarpVecBackend(rom, 1, sort_envs=True, lean=True).step_variants() == [
        (False, False), (False, True), (True, False), (True, True)]
    assert fixed.step_variants() == [(True, True)]
    assert WarpVecBackend(rom, 1, sort_envs=True, lean=True, loop="nested").step_variants() == [
        (False, False), (True, False)]
    assert WarpVecBackend(rom, 1, lean=True).step_variants() == [(False, False), (True, False)]  # no tuner


def test_sort_parts_auto_times_its_choices_and_changes_no_result():
    """sort_parts="auto" runs timed trials of 1, 2 and 4 parts, heaviest envs first, and whole frames lightest first,
    each of the last two also in the flat instruction loop, and whole frames heaviest first in 2 stream groups in
    each loop (timed on the host on the CPU device), and keeps the fastest; every step's states and observations
    equal an unsorted backend's in the nested loop."""
    from gbxcule.roms import resolve_rom

    rom = str(resolve_rom("OVERWORLD"))
    plain, auto = (WarpVecBackend(rom, 8, schedule=ActionSchedule(12, 4), stage="full_step", sort_envs=s,
                                  sort_parts=p) for s, p in ((False, 1), (True, "auto")))
    assert auto.tuner is not None  # with the path key: 1, 2 and 4 parts heaviest first, and 1 lightest first
    assert auto.tuner.candidates == ((1, True, False, 1), (1, False, False, 1), (1, True, True, 1),
                                     (1, False, True, 1), (2, True, False, 1), (4, True, False, 1),
                                     (1, True, False, 2), (1, True, True, 2))
    rng = np.random.default_rng(3)
    for i in range(77):  # trials at steps 12-27 and 60-75 (read at 28 and 76)
        acts = rng.integers(0, plain.codec.num_actions, 8).astype(np.int32) * (i >= 5)
        for b in (plain, auto):
            b.step(acts)
        assert np.array_equal(plain.fields.numpy(), auto.fields.numpy())
        assert np.array_equal(plain.ram.numpy(), auto.ram.numpy())
        assert np.array_equal(plain.obs.numpy(), auto.obs.numpy())
    hist = auto.tuner.history  # each trial: ms per step by (parts, heaviest first, flat loop, stream groups)
    assert len(hist) == 2 and all(set(h) == set(auto.tuner.candidates) and min(h.values()) > 0 for h in hist)
    assert auto.tuner.best == min(hist[-1], key=hist[-1].get)
    assert set(auto.sort_trials()[-1]) == {"1", "1/light", "1/flat", "1/light/flat", "2", "4", "1+2", "1/flat+2"}
    # a fixed stream_groups: every choice in that many groups; 1 envs: no groups to try
    assert {c[3] for c in WarpVecBackend(rom, 8, sort_envs=True, stream_groups=3).tuner.candidates} == {3}
    assert {c[3] for c in WarpVecBackend(rom, 1, sort_envs=True).tuner.candidates} == {1}


@pytest.mark.parametrize("name", list(suite()))
def test_the_flat_loop_gives_the_nested_loops_bits(name):
    """devcheck's comparison, the flat kernel (loop="flat", from the first step) against the default backend on
    the CPU device: every field, RAM byte, frame, observation and reward after every step (`gbxcule devcheck
    --loop flat` runs the same against CUDA), on every built-in ROM for as long as it runs. The two loops end
    their batches in different places (the nested loop's batches that go on over the reference's batch ends stop
    at each line, frame.py batch_next; the flat loop's do not), and the lockstep tests run the nested one."""
    from gbxcule.harness.devcheck import compare_devices

    steps = suite()[name].frames // 24 + 2
    check = compare_devices(name, 4, steps, 0, ActionSchedule(24, 8), codec="pokemonred_puffer_v1", device="cpu",
                            loop="flat")
    assert check.ok and check.steps_compared == steps, check.first_difference


def test_instructions_that_straddle_a_rom_window_end(tmp_path):
    """The step kernel fetches an instruction in one ROM load when its bytes lie in one 16 KiB window, and
    byte by byte otherwise. Instructions at 0x3FFE/0x3FFF take bytes from the switchable bank (2, then 3)
    and one at 0x7FFE reads to the window's end; the bytes must land where hardware puts them. (No lockstep
    here: PyBoy 2.8.1 runs the two instructions that cross 0x4000 wrongly, docs/hardware.md.)"""
    from test_pyboy_state import make_rom

    prog = bytes([0x3E, 0x02, 0xEA, 0x00, 0x20, 0xC3, 0xFE, 0x3F])  # bank 2 ; jp $3FFE (ld bc,$xx3E)
    rom = bytearray(make_rom(0x01, 0x00, prog, rom_code=1))  # MBC1, 4 banks
    rom[0x3FFE:0x4000] = b"\x01\x3e"
    rom[0x160:0x168] = bytes([0x3E, 0x03, 0xEA, 0x00, 0x20, 0xC3, 0xFF, 0x3F])  # bank 3 ; jp $3FFF (ld a,$xx)
    rom[0x180:0x18A] = bytes([0x78, 0xEA, 0x00, 0xC0, 0x79, 0xEA, 0x01, 0xC0, 0x18, 0xFE])  # b, c to WRAM ; loop
    for bank in (1, 2, 3):
        o = bank * 0x4000
        rom[o] = 0x40 + bank
        rom[o + 1:o + 4] = bytes([0xC3, 0x60, 0x01]) if bank == 2 else bytes([0xEA, 0x02, 0xC0])  # (bank 3: a)
    rom[3 * 0x4000 + 4:3 * 0x4000 + 7] = bytes([0xC3, 0xFE, 0x7F])  # jp $7FFE
    rom[3 * 0x4000 + 0x3FFE:3 * 0x4000 + 0x4000] = bytes([0x18, 0xF0])  # jr $7FF0
    rom[3 * 0x4000 + 0x3FF0:3 * 0x4000 + 0x3FF3] = bytes([0xC3, 0x80, 0x01])  # jp $0180
    path = tmp_path / "straddle.gb"
    path.write_bytes(bytes(rom))
    b = WarpVecBackend(str(path), 1, "dmg_buttons_v0", ActionSchedule(2, 0), device="cpu", boot="skip")
    for _ in range(4):
        b.step([0])
    assert [int(b.wram_bytes(a)[0]) for a in (0xC000, 0xC001, 0xC002)] == [0x42, 0x3E, 0x43]


@pytest.mark.parametrize("source", [0xC1, 0x00, 0x90])  # WRAM and ROM (the late copy), VRAM (caught up at once)
def test_wild_oam_dma_index_from_a_state_stays_inside_oam(source):
    """A state may carry any int32 in dma_index (the guest only counts 0-160): both OAM DMA copies clamp it, so
    they neither write outside OAM nor loop for billions of iterations, and each env ends the DMA normally."""
    from gbxcule.core.schema import FIELD_INDEX, NUM_FIELDS

    rom = build("loop:\n ld a, [$C000]\n inc a\n ld [$C000], a\n jr loop")
    b = backend(rom, n=4)
    b.reset(0)
    fields = b.fields.numpy().copy().reshape(NUM_FIELDS, 4)
    fields[FIELD_INDEX["dma_active"]] = 1
    fields[FIELD_INDEX["dma_source"]] = source
    fields[FIELD_INDEX["dma_start"]] = fields[FIELD_INDEX["cycles"]]
    fields[FIELD_INDEX["dma_index"]] = [-5, 0x7FFFFFF0, -(2**31), 300]
    b.fields.assign(fields.reshape(-1))
    b.step(np.zeros(4, dtype=np.int32))
    after = b.fields.numpy().reshape(4, NUM_FIELDS).T
    assert (after[FIELD_INDEX["dma_index"]] >= 0).all() and (after[FIELD_INDEX["dma_index"]] <= 0xA0).all()
    assert (after[FIELD_INDEX["frames"]] == fields[FIELD_INDEX["frames"]] + 1).all()
