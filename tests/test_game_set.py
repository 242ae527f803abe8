"""The public game set's scripts (benchmarks/games/games.toml): fetching checks every ROM's SHA-1 and size
and fails with one line a game; the benchmark runner measures each game against PyBoy from one state. Built
with the built-in ROMs (the third-party games are never committed; GBXCULE_TEST_ROMS below)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gbxcule.roms import resolve_rom

ROOT = Path(__file__).resolve().parent.parent


def _manifest(tmp_path: Path, roms: dict[str, bytes]) -> Path:
    rows = []
    for slug, data in roms.items():
        rows.append(f'[[game]]\nslug = "{slug}"\ntitle = "{slug}"\nkind = "test"\nlicence = "MIT"\n'
                    f'url = "http://127.0.0.1:9/{slug}.gb"\nsha1 = "{hashlib.sha1(data).hexdigest()}"\n'
                    f"size = {len(data)}\n")
    path = tmp_path / "games.toml"
    path.write_text("\n".join(rows))
    return path


def _run(*args):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=600)


def test_the_manifest_is_complete():
    games = tomllib.loads((ROOT / "benchmarks/games/games.toml").read_text())["game"]
    assert len(games) >= 8 and len({g["slug"] for g in games}) == len(games)
    for g in games:
        for key in ("slug", "title", "kind", "repo", "path", "commit", "url", "licence", "licence_source", "sha1",
                    "size"):
            assert g.get(key), (g["slug"], key)
        assert len(g["sha1"]) == 40 and len(g["commit"]) == 40 and g["commit"] in g["url"]


def test_fetch_checks_every_rom_and_fails_one_line_each(tmp_path):
    good = resolve_rom("OVERWORLD").read_bytes()
    other = resolve_rom("JOY_DIVERGE_PERSIST").read_bytes()
    manifest = _manifest(tmp_path, {"ow": good, "joy": other})
    src = tmp_path / "src"
    src.mkdir()
    (src / "renamed.gb").write_bytes(good)  # found by its SHA-1
    (src / "joy.gb").write_bytes(other[:-1] + bytes([other[-1] ^ 1]))  # corrupt
    out = tmp_path / "out"
    r = _run(ROOT / "scripts/bench/fetch_games.py", "--manifest", manifest, "--from", src, "--out", out)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("fetch_games:")]
    assert len(errors) == 1 and "joy" in errors[0]
    assert (out / "ow.gb").read_bytes() == good and not (out / "joy.gb").exists()
    (src / "joy.gb").write_bytes(other)
    r = _run(ROOT / "scripts/bench/fetch_games.py", "--manifest", manifest, "--from", src, "--out", out)
    assert r.returncode == 0 and (out / "joy.gb").read_bytes() == other


def _one_game_and_a_missing_one(tmp_path: Path) -> tuple[Path, Path]:
    """A manifest of OVERWORLD ("ow", in the games folder) and "missing" (not there), and the games folder."""
    pytest.importorskip("pyboy")  # the start states are made with PyBoy
    rom = resolve_rom("OVERWORLD").read_bytes()
    manifest = _manifest(tmp_path, {"ow": rom, "missing": b"x" * 32768})
    games = tmp_path / "games"
    games.mkdir()
    (games / "ow.gb").write_bytes(rom)
    return manifest, games


def test_bench_games_writes_a_row_per_game_and_the_median(tmp_path):
    manifest, games = _one_game_and_a_missing_one(tmp_path)
    out = tmp_path / "games.json"
    r = _run(ROOT / "scripts/bench/bench_games.py", "--manifest", manifest, "--games", games, "--device", "cpu",
             "--envs", 2, "--steps", 2, "--warmup", 1, "--window", 1, "--pyboy-envs", 1, "--pyboy-repeat", 2,
             "--state-frames", 30, "--variants", "pc,path,stack,path/3,path@3", "--out", out)
    assert r.returncode == 1, r.stderr  # the missing game is reported, the other measured
    data = json.loads(out.read_text())
    assert [g["slug"] for g in data["games"]] == ["ow"] and [f["slug"] for f in data["failed"]] == ["missing"]
    row = data["games"][0]
    for key in ("sps_pc", "sps_path", "sps_stack", "sps_path/3", "sps_path@3", "sps_shared", "sps_fixed",
                "pyboy_sps", "ips_path", "ips_shared", "ipstep_path"):
        assert row[key] > 0
    assert row["x_pyboy"]["path@3"] == pytest.approx(row["sps_path@3"] / row["pyboy_sps"])
    assert len(row["runs_pyboy"]) == 2 and row["pyboy_sps"] in row["runs_pyboy"]  # the median of the runs
    assert row["divergence"] == pytest.approx(row["ips_shared"] / row["ips_path"])
    assert 0 < row["eips_path"] <= row["ips_path"] and 0 < row["eips_shared"] <= row["ips_shared"]
    assert row["divergence_executed"] == pytest.approx(row["eips_shared"] / row["eips_path"])
    assert data["summary"]["divergence_executed"]["median"] == row["divergence_executed"]
    assert data["summary"]["divergence"]["median"] == row["divergence"]
    assert data["summary"]["path"]["median_sps"] == row["sps_path"]
    assert (games / "states" / "ow.state").stat().st_size > 0
    # --window 1: each step timed on its own too (steps 1 and 2, after the one warmup step), PyBoy alike
    assert row["window_first_steps"] == [1, 2] and len(row["windows_pyboy"]) == 2
    assert row["sps_path"] == pytest.approx(2 / sum(1 / w for w in row["windows_path"]))  # the same seconds
    assert row["window_x_pyboy"]["path"][1] == pytest.approx(row["windows_path"][1] / row["windows_pyboy"][1])
    assert len(row["window_divergence"]) == 2 and [w["first_step"] for w in data["summary"]["pc"]["windows"]] == [1, 2]
    assert "steps 2-2:" in r.stdout
    assert "median, sort path" in r.stdout and "median, sort path/3" in r.stdout and "sort path@3" in r.stdout
    for bad in ("path/0", "nope", "pc/x", "path@0", "path@x", "pc/2@", "path/Auto", "nope/auto"):
        r = _run(ROOT / "scripts/bench/bench_games.py", "--manifest", manifest, "--games", games, "--variants", bad)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--variants" in r.stderr


def _part(slugs_x: dict[str, float], tree: str = "t1", envs: int = 4, emulator: str | None = None) -> dict:
    """A bench_games.py artifact with one row per game at x times PyBoy's 100 env-steps/s."""
    games = [{"slug": slug, "kind": "test", "sps_path": 100 * x, "pyboy_sps": 100.0, "x_pyboy": {"path": x},
              "sps_shared": 300 * x, "ips_path": 1e6, "ips_shared": 2e6, "ipstep_path": 10.0, "divergence": 2.0}
             for slug, x in slugs_x.items()]
    settings = {"envs": envs, "pyboy_envs": 1, "host_cores": 2, "device": "cpu", "steps": 2, "pyboy_steps": 2,
                "pyboy_repeat": 1, "warmup": 1, "window": 0, "state_frames": 30, "frames_per_step": 24,
                "codec": "pokemonred_puffer_v1", "stage": "full_step"}
    return {"games": games, "failed": [], "summary": {"path": {}, "divergence": {}}, **settings,
            "environment": {"source_sha1": tree, **({"emulator_sha1": emulator} if emulator else {})}}


def test_bench_games_merges_parts_of_the_set_into_one_table(tmp_path):
    """--merge: the parts' rows in one artifact with the median over all of them; parts with other settings, another
    source tree, a game twice, or a file that is no artifact are one error line and exit 2."""
    paths = {}
    for name, part in {"a": _part({"g1": 10.0, "g2": 40.0}), "b": _part({"g3": 30.0}),
                       "envs": _part({"g4": 1.0}, envs=8), "tree": _part({"g4": 1.0}, tree="t2"),
                       "again": _part({"g1": 5.0})}.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(part))
    out = tmp_path / "games.json"
    r = _run(ROOT / "scripts/bench/bench_games.py", "--merge", paths["a"], paths["b"], "--out", out)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert [g["slug"] for g in data["games"]] == ["g1", "g2", "g3"] and data["envs"] == 4
    assert data["summary"]["path"]["median_x_pyboy"] == 30.0 and data["summary"]["path"]["min_x_pyboy"] == 10.0
    assert data["summary"]["divergence_sps"]["median"] == pytest.approx(3.0)
    assert [p["path"] for p in data["parts"]] == [str(paths["a"]), str(paths["b"])]
    assert "30.0x PyBoy (min 10.0x)" in r.stdout
    (tmp_path / "junk.json").write_text("[1, 2]")
    for other, word in (("envs", "envs"), ("tree", "source tree"), ("again", "g1"), ("junk", "not an artifact")):
        path = paths.get(other, tmp_path / "junk.json")
        r = _run(ROOT / "scripts/bench/bench_games.py", "--merge", paths["a"], path, "--out", tmp_path / "x.json")
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and word in r.stderr, r.stderr
    assert not (tmp_path / "x.json").exists()
    # parts that name their emulator's sources join across trees that differ elsewhere, and not across emulators;
    # a part without that name compares the whole tree with every part before it
    named = {"e1": _part({"g5": 2.0}, tree="t2", emulator="e1"), "e2": _part({"g6": 2.0}, tree="t2", emulator="e2"),
             "a_e1": _part({"g1": 10.0}, emulator="e1"), "old": _part({"g7": 2.0}, tree="t2")}
    for name, part in named.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(part))
    r = _run(ROOT / "scripts/bench/bench_games.py", "--merge", paths["a_e1"], paths["e1"], "--out", out)
    assert r.returncode == 0, r.stderr
    for bad, word in ((["a_e1", "e2"], "emulator_sha1"), (["e1", "a_e1", "old"], "source_sha1")):
        args = [paths[b] for b in bad]
        r = _run(ROOT / "scripts/bench/bench_games.py", "--merge", *args, "--out", tmp_path / "y.json")
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and word in r.stderr, r.stderr


def test_environment_names_the_emulators_sources(tmp_path):
    """The emulator's digest covers core, kernels, backends and harness only: a change to the trainers leaves it."""
    from gbxcule.harness.bench import EMULATOR_PARTS, environment, source_digest

    for part in ("core", "rl"):
        (tmp_path / part).mkdir()
        (tmp_path / part / "a.py").write_text("x = 1\n")
    whole, emu = source_digest(tmp_path), source_digest(tmp_path, EMULATOR_PARTS)
    (tmp_path / "rl" / "a.py").write_text("x = 2\n")
    assert source_digest(tmp_path) != whole and source_digest(tmp_path, EMULATOR_PARTS) == emu
    (tmp_path / "core" / "a.py").write_text("x = 2\n")
    assert source_digest(tmp_path, EMULATOR_PARTS) != emu
    assert environment()["emulator_sha1"] == source_digest(parts=EMULATOR_PARTS)


def test_bench_spread_times_variants_from_one_spread_state(tmp_path):
    """scripts/bench/bench_spread.py: each variant from the same copied state, the same fields at the end; a missing
    game is one error line and exit 1, a bad variant one line and exit 2."""
    manifest, games = _one_game_and_a_missing_one(tmp_path)
    out = tmp_path / "spread.json"
    r = _run(ROOT / "scripts/bench/bench_spread.py", "--manifest", manifest, "--games", games, "--device", "cpu",
             "--envs", 4, "--spread", 2, "--steps", 1, "--state-frames", 30, "--variants", "path/1,path/3,pc/1",
             "--out", out)
    assert r.returncode == 1 and r.stderr.count("bench_spread: missing:") == 1, r.stderr
    data = json.loads(out.read_text())
    row = data["games"][0]
    assert data["failed"] == ["missing"] and row["slug"] == "ow" and row["same_results"]
    assert len(row["sps"]["path/1"]) == 2 and row["relative"]["path/1"] == 1.0 and row["sps"]["path/3"][0] > 0
    assert len(set(row["instructions"].values())) == 1 and (games / "states" / "ow.state").is_file()
    for bad in ("path/x", "nope/1", "path/1/48", "path/auto", "path/1+0", "path/1+auto"):
        r = _run(ROOT / "scripts/bench/bench_spread.py", "--manifest", manifest, "--games", games, "--variants", bad)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "bad variant" in r.stderr, (bad, r.stderr)


def test_warp_share_counts_each_warp_at_its_busiest_lane():
    """warp_tail.warp_share: the work over 32 x each warp's busiest lane, a short last warp by its own lanes."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "scripts" / "profile"))
    try:
        from warp_tail import distinct_per_warp, warp_share
    finally:
        sys.path.remove(str(ROOT / "scripts" / "profile"))
    even = np.full(64, 7)
    assert warp_share(even, np.arange(64)) == 1.0
    mixed = np.array([1] * 32 + [3] * 32)  # apart: each warp even; interleaved: both warps wait for 3
    assert warp_share(mixed, np.arange(64)) == 1.0
    interleaved = np.stack([np.arange(32), np.arange(32, 64)], axis=1).reshape(-1)  # 0, 32, 1, 33, ...
    assert warp_share(mixed, interleaved) == pytest.approx(128 / (2 * 32 * 3))
    assert warp_share(np.array([4, 0, 0]), np.arange(3)) == pytest.approx(4 / 12)  # one short warp of 3 lanes
    assert distinct_per_warp(np.array([5] * 32 + [1, 2] * 16)) == 1.5


def test_launch_share_models_blocks_going_to_the_first_free_sm():
    """warp_tail.launch_share: a heavy block started last leaves the other SM idle; started first, it does not."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "scripts" / "profile"))
    try:
        from warp_tail import key_order, launch_share
    finally:
        sys.path.remove(str(ROOT / "scripts" / "profile"))
    work = np.array([1, 1, 1, 1, 4])
    assert launch_share(work, np.arange(5), sms=2, block=1) == pytest.approx(8 / 12)  # 4 starts at 2: ends at 6
    assert launch_share(work, np.arange(5)[::-1], sms=2, block=1) == 1.0
    assert launch_share(np.full(8, 3), np.arange(8), sms=2, block=2) == 1.0
    # 128-lane blocks: two slots an SM; the heavy block alone at the end leaves 3 of 4 slots idle
    assert launch_share(np.array([1] * 512 + [4] * 128), np.arange(640), 2, 128, per_sm=2) == pytest.approx(8 / 20)
    pcs = np.array([9, 8, 7, 6, 5])
    assert list(key_order(work * 8, pcs, True)) == [4, 3, 2, 1, 0]  # heaviest first, then by PC
    assert list(key_order(work * 8, pcs, False)) == [3, 2, 1, 0, 4]


def test_warp_tail_reports_work_shares_per_frame(tmp_path):
    """scripts/profile/warp_tail.py on the CPU device: a share per frame in (0, 1], the oracle order never below the
    launch's or env order; a missing game is one error line and exit 1."""
    manifest, games = _one_game_and_a_missing_one(tmp_path)
    out = tmp_path / "tail.json"
    r = _run(ROOT / "scripts/profile/warp_tail.py", "--manifest", manifest, "--games", games, "--device", "cpu",
             "--envs", 40, "--spread", 2, "--frames", 4, "--state-frames", 30, "--out", out)
    assert r.returncode == 1 and r.stderr.count("warp_tail: missing:") == 1, r.stderr
    data = json.loads(out.read_text())
    row = data["games"][0]
    assert data["failed"] == ["missing"] and row["slug"] == "ow" and len(row["frames"]) == 4
    for f in row["frames"]:
        assert f["instructions"] > 0 and 0 < f["unsorted"] <= 1 and 0 < f["sorted"] <= 1
        assert f["oracle"] >= max(f["sorted"], f["unsorted"]) - 1e-12
    assert "by_prev" not in row["frames"][0] and "by_prev" in row["frames"][1]
    for f in row["frames"]:
        assert 0 < f["launch_sorted"] <= 1 and 0 < f["launch_oracle"] <= 1
    assert "launch_heavy2" in row["frames"][2] and "launch_heavy2" not in row["frames"][1]
    assert "launch_heavy_smooth3" in row["frames"][3] and "launch_heavy_smooth3" not in row["frames"][2]
    assert "ow" in r.stdout and "artifact:" in r.stdout
    r = _run(ROOT / "scripts/profile/warp_tail.py", "--manifest", manifest, "--games", games, "--only", "ow,nope")
    assert r.returncode == 2 and r.stderr == "warp_tail: unknown slug(s): nope\n", r.stderr


@pytest.mark.skipif(not os.environ.get("GBXCULE_TEST_ROMS"), reason="GBXCULE_TEST_ROMS is not set")
def test_every_game_of_the_set_runs_when_present():
    """Each game of the set found under GBXCULE_TEST_ROMS (as <slug>.gb) runs a few steps on the CPU device."""
    import numpy as np

    from gbxcule.backends.warp_vec import WarpVecBackend

    folder = Path(os.environ["GBXCULE_TEST_ROMS"])
    games = tomllib.loads((ROOT / "benchmarks/games/games.toml").read_text())["game"]
    found = [g for g in games if (folder / f"{g['slug']}.gb").is_file()]
    if not found:
        pytest.skip("none of the game set's ROMs is under GBXCULE_TEST_ROMS")
    for g in found:
        b = WarpVecBackend(str(folder / f"{g['slug']}.gb"), 2, stage="full_step")
        for k in range(3):
            b.step(np.array([k % 8, (k + 3) % 8], dtype=np.int32))
        assert b.obs.numpy().shape == (2, 72, 80)
