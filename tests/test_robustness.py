"""Issue 16: outputs never clobber inputs, bad input is one line before any work, the kernel cache heals."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gbxcule.asm import CartridgeHeader, assemble
from gbxcule.cli import checks
from gbxcule.cli.main import main
from gbxcule.core import outputs, paths
from gbxcule.core.cartridge import header_checksum
from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import write_output

SRC = 'SECTION "e", ROM0[$0100]\n nop\n jp $0150\nSECTION "m", ROM0[$0150]\n jr @\n'


def make_rom(tmp_path, name="t.gb", cgb=0x00):
    data = bytearray(assemble(SRC, header=CartridgeHeader(title="TEST", cartridge_type=0, rom_size=0,
                                                         ram_size=0)).rom)
    data[0x143] = cgb
    data[0x14D] = header_checksum(data)
    p = tmp_path / name
    p.write_bytes(bytes(data))
    return p, bytes(data)


def cli(capsys, *args):
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, [x for x in err.splitlines() if x.strip()]


def one_line(capsys, *args, needle=""):
    rc, _, err = cli(capsys, *args)
    assert rc == 2, err
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert needle in err[0], err[0]
    return err[0]


# -- outputs -------------------------------------------------------------------------------------------

def test_write_output_refuses_inputs_by_path_link_and_inode(tmp_path):
    rom, data = make_rom(tmp_path)
    (tmp_path / "sym.gb").symlink_to(rom)
    os.link(rom, tmp_path / "hard.gb")
    for out in (rom, tmp_path / "sym.gb", tmp_path / "hard.gb", tmp_path / "x" / ".." / "t.gb"):
        with pytest.raises(GbxculeError, match="input of this command"):
            write_output(out, b"junk", [rom])
    assert rom.read_bytes() == data


def test_write_output_is_atomic_and_leaves_no_temp_file(tmp_path):
    out = tmp_path / "a.json"
    out.write_text("old")

    def broken(p):
        p.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(GbxculeError, match="No space left on device"):
        write_output(out, broken)
    assert out.read_text() == "old"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.json"]
    write_output(out, "new")
    assert out.read_text() == "new"


def test_write_output_takes_concurrent_writers_of_one_path(tmp_path):
    """Processes that build the same kernel module (pytest -n, several trainers on one cache) write the same
    file at once: each writer has a temporary file of its own, so none fails and the file is whole."""
    import threading

    out, text, errors = tmp_path / "k" / "module.py", "x = 1\n" * 20000, []

    def writer():
        try:
            for _ in range(20):
                write_output(out, text)
        except Exception as exc:  # noqa: BLE001 (collected for the assertion)
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert out.read_text() == text
    assert sorted(x.name for x in out.parent.iterdir()) == ["module.py"]


def test_write_output_permission_error_is_one_line(tmp_path, monkeypatch):
    def deny(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(outputs.tempfile, "mkstemp", deny)
    with pytest.raises(GbxculeError, match=r"cannot write .*: Permission denied"):
        write_output(tmp_path / "a.png", b"x")


@pytest.mark.parametrize("args", [
    ("screenshot", "{rom}", "--out", "{rom}"),
    ("play", "{rom}", "--backend", "warp_vec_cpu", "--mosaic", "{rom}"),
    ("play", "{rom}", "--backend", "warp_vec_cpu", "--record", "{link}"),
    ("bench", "--rom", "{png}", "--out", "{json}", "--envs", "1", "--steps", "1"),
])
def test_no_command_writes_over_its_rom(tmp_path, capsys, args):
    rom, data = make_rom(tmp_path)
    png = tmp_path / "rom.png"  # bench writes its plot next to --out with .png
    png.write_bytes(data)
    os.link(rom, tmp_path / "link.gb")
    fmt = {"rom": rom, "link": tmp_path / "link.gb", "png": png, "json": tmp_path / "rom.json"}
    one_line(capsys, *(a.format(**fmt) for a in args), needle="input of this command")
    assert rom.read_bytes() == data and png.read_bytes() == data


def test_bench_into_unwritable_folder_is_one_line(tmp_path, capsys, monkeypatch):
    rom, data = make_rom(tmp_path)

    def deny(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(outputs.tempfile, "mkstemp", deny)
    one_line(capsys, "bench", "--rom", rom, "--backends", "pyboy_single", "--envs", "1", "--steps", "1",
             "--warmup", "0", "--out", tmp_path / "ro" / "b.json", needle="Permission denied")
    assert rom.read_bytes() == data


# -- checks before work --------------------------------------------------------------------------------

def test_unreadable_rom_is_one_line(tmp_path, capsys, monkeypatch):
    rom, _ = make_rom(tmp_path)
    if os.geteuid() != 0:
        rom.chmod(0)
        one_line(capsys, "info", rom, needle="Permission denied")
        rom.chmod(0o644)

    def deny(path, mode="r", *a, **k):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(checks, "open", deny, raising=False)
    for cmd in (("info", rom), ("play", rom), ("screenshot", rom, "--out", tmp_path / "s.png")):
        one_line(capsys, *cmd, needle=f"cannot read ROM {rom}: Permission denied")


def test_directory_given_as_rom(tmp_path, capsys):
    one_line(capsys, "play", tmp_path, needle="is a directory, not a ROM file")


def test_os_error_anywhere_is_still_one_line(tmp_path, capsys, monkeypatch):
    rom, _ = make_rom(tmp_path)
    from gbxcule.cli import info

    def boom(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(info, "read_rom_bytes", boom)
    one_line(capsys, "info", rom, needle="Permission denied")


@pytest.mark.parametrize("args,needle", [
    (("play", "{rom}", "--steps", "0"), "--steps must be >= 1"),
    (("play", "{rom}", "--envs", "0"), "--envs must be >= 1"),
    (("play", "{rom}", "--release-after-frames", "99"), "--release-after-frames must be in 0..24"),
    (("verify", "--rom", "{rom}", "--steps", "0"), "--steps must be >= 1"),
    (("verify", "--rom", "{rom}", "--release-after-frames", "99"), "--release-after-frames must be in 0..1"),
    (("verify", "--rom", "{rom}", "--frames-per-step", "0"), "--frames-per-step must be >= 1"),
    (("bench", "--rom", "{rom}", "--steps", "0"), "--steps must be >= 1"),
    (("bench", "--rom", "{rom}", "--release-after-frames", "30"), "--release-after-frames must be in 0..24"),
    (("screenshot", "{rom}", "--frames", "0"), "--frames must be >= 1"),
    (("testrom", "{rom}", "--frames", "0"), "--frames must be >= 1"),
])
def test_counts_and_schedule_refused_the_same_everywhere(tmp_path, capsys, args, needle):
    rom, _ = make_rom(tmp_path)
    one_line(capsys, *(a.format(rom=rom) for a in args), needle=needle)


def test_env_memory_is_checked_before_allocating(tmp_path, capsys, monkeypatch):
    rom, data = make_rom(tmp_path)
    from gbxcule.backends import emulator_need
    from gbxcule.core import memory

    monkeypatch.setattr(memory, "host_available", lambda: memory.Available(6 << 30, "test"))
    line = one_line(capsys, "play", rom, "--backend", "warp_vec_cpu", "--envs", "300000",
                    needle="envs need")
    most = int(line.split("at most ")[1].split()[0].replace(",", ""))
    need = (emulator_need("warp_vec_cpu", checks.rom_file(str(rom)), render=False) + memory.Need.host("", 64)).on("cpu")
    assert most == ((6 << 30) - need.host_fixed) // need.host_per_env
    assert rom.read_bytes() == data


def test_verify_checks_env_memory_before_building_references(tmp_path, capsys, monkeypatch):
    rom, _ = make_rom(tmp_path)
    from gbxcule.cli import verify

    def never(*a, **k):
        raise AssertionError("references were built")

    monkeypatch.setattr(verify, "run_verify", never)
    from gbxcule.core import memory

    monkeypatch.setattr(memory, "host_available", lambda: memory.Available(4 << 30, "test"))
    one_line(capsys, "verify", "--rom", rom, "--envs", "10000000", needle="at most")


def test_device_memory_check(tmp_path, monkeypatch):
    import gbxcule.backends as backends
    from gbxcule.core import memory

    rom = checks.rom_file(str(make_rom(tmp_path)[0]))
    monkeypatch.setattr(backends, "memory_available", lambda device: (
        memory.Available(1 << 40, "test"), memory.Available(1 << 30, "test") if device.startswith("cuda") else None))
    with pytest.raises(GbxculeError, match="of device memory"):
        checks.env_memory("warp_vec_cuda", 10**6, rom)
    checks.env_memory("warp_vec_cuda", 1000, rom)


def test_cgb_only_rom_warns_and_testrom_says_why(tmp_path, capsys):
    rom, _ = make_rom(tmp_path, cgb=0xC0)
    rc, out, err = cli(capsys, "info", rom)
    assert rc == 0 and "CGB-only" in out
    assert len(err) == 1 and "warning" in err[0] and "Game Boy Color" in err[0]
    rc, out, err = cli(capsys, "testrom", rom, "--backend", "pyboy_single", "--frames", "2")
    assert rc == 1
    assert "NO VERDICT" in out and "no verdict: this ROM is CGB-only" in out
    assert any("warning" in e and "CGB-only" in e for e in err)


# -- kernel cache --------------------------------------------------------------------------------------

def _elf(n_sections=3):
    import struct

    shoff, shentsize = 64 + 32, 64
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", head, 0x28, shoff)
    struct.pack_into("<HH", head, 0x3A, shentsize, n_sections)
    body = bytes(range(32))
    sections = b"".join(struct.pack("<IIQQQQ", 0, 1, 0, 0, 64, 32) + bytes(24) for _ in range(n_sections))
    return bytes(head) + body + sections


def _entry(root, name, meta=b'{"k_smem_bytes": 0}', obj=None):
    d = root / name
    d.mkdir(parents=True)
    (d / f"{name}.meta").write_bytes(meta)
    (d / f"{name}.o").write_bytes(_elf() if obj is None else obj)
    return d


def test_kernel_cache_heals_corrupt_entries(tmp_path, capsys):
    from gbxcule.kernels import heal_kernel_cache

    good = _entry(tmp_path, "wp_good_1234567")
    _entry(tmp_path, "wp_trunc_1234567", obj=_elf()[:120])
    _entry(tmp_path, "wp_meta_1234567", meta=b"garbage")
    changed = _entry(tmp_path, "wp_changed_1234567")
    assert heal_kernel_cache(tmp_path) == ["wp_meta_1234567", "wp_trunc_1234567"]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("deleted, it will be rebuilt" in e for e in err)
    assert good.is_dir() and (good / "gbxcule-hashes.json").is_file()
    obj = changed / "wp_changed_1234567.o"  # same size, other bytes: caught by the recorded hash
    obj.write_bytes(bytes(reversed(obj.read_bytes())))
    assert heal_kernel_cache(tmp_path) == ["wp_changed_1234567"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wp_good_1234567"]


def test_unwritable_cache_falls_back_to_a_temp_folder(tmp_path, monkeypatch, capsys):
    ro = tmp_path / "ro"
    monkeypatch.setattr(paths, "_writable", lambda root: root != ro)
    monkeypatch.setattr(paths, "fallback_cache_dir", lambda: tmp_path / "fallback")
    monkeypatch.setenv("GBXCULE_CACHE_DIR", str(ro))
    paths._resolve.cache_clear()
    try:
        assert paths.cache_dir() == tmp_path / "fallback"
        assert "not writable; using" in capsys.readouterr().err
    finally:
        paths._resolve.cache_clear()


def test_kernel_cache_key_does_not_depend_on_the_checkout_or_cache_path(tmp_path):
    """The generated source holds no path, and Warp's module identifier is the same in another cache."""
    from gbxcule.kernels.gen import ops_source

    root = str(Path(__file__).resolve().parents[1])
    assert root not in ops_source() and str(paths.cache_dir()) not in ops_source()
    code = ("from gbxcule.kernels import init_warp; init_warp(); from gbxcule.kernels.step import load_kernels; "
            "print(load_kernels().step_kernel.module.get_module_identifier())")
    ids = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=os.environ | {"GBXCULE_CACHE_DIR": str(tmp_path / d)}).stdout.strip()
           for d in ("a", "b/c")]
    assert ids[0] == ids[1] and ids[0].startswith("wp_gbxcule_step_")


def test_truncated_cached_kernel_heals_in_a_real_run(tmp_path):
    """Truncate every compiled kernel of a warm cache: the next run notes it, rebuilds and succeeds."""
    src = paths.cache_dir() / "warp"
    subprocess.run([sys.executable, "-m", "gbxcule", "screenshot", "ALU_LOOP", "--frames", "1", "--out",
                    str(tmp_path / "warm.png")], check=True, capture_output=True)
    shutil.copytree(src, tmp_path / "warp")
    hit = 0
    for obj in (tmp_path / "warp").rglob("wp_gbxcule_step_*.o"):
        obj.write_bytes(obj.read_bytes()[:1000])
        hit += 1
    for rec in (tmp_path / "warp").rglob("gbxcule-hashes.json"):
        rec.unlink()
    assert hit
    r = subprocess.run([sys.executable, "-m", "gbxcule", "screenshot", "ALU_LOOP", "--frames", "1", "--out",
                        str(tmp_path / "s.png"), "--json"], capture_output=True, text=True, timeout=600,
                       env=os.environ | {"GBXCULE_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "was corrupt" in r.stderr
    assert json.loads(r.stdout)["frames"] == 1
