"""Issue 42, training a user can trust, on the CPU device with tiny configs: Ctrl-C and SIGTERM stop with a
checkpoint, checkpoints by the clock, run folders that cannot be damaged, `--resume` rules, typed configs,
progress and reports that agree with the results, and the smaller items (templates, illegal opcodes under
PyBoy, clang warnings, labelled GIFs, the single Gymnasium env, pufferlib without gym)."""

import contextlib
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gbxcule.cli.main import main  # noqa: E402
from gbxcule.core.errors import GbxculeError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--device", "cpu", "--num-envs", "6", "--rollout-steps", "8", "--epochs", "2", "--minibatches", "2",
        "--model", "small", "--total-steps", "192", "--eval-episodes", "0", "--no-progress",
        "--set", "run.tensorboard=false"]  # 4 updates of 48 env-steps
TIMING = ("sps", "updates_per_s", "wall_s")


def strict_json(text: str):
    """JSON as strict parsers read it: a NaN or Infinity token fails."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def rows(run_dir: Path) -> list[dict]:
    """metrics.jsonl without the timing keys; strict JSON (a NaN token fails)."""
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = strict_json(line)
        out.append({k: v for k, v in r.items() if k not in TIMING and not k.startswith("time_")})
    return out


def weights(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def train_cli(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["train", *map(str, args)])
    return rc, out.getvalue(), err.getvalue()


def files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    d = tmp_path_factory.mktemp("straight") / "run"
    rc, out, err = train_cli(*TINY, "--run-dir", d, "--checkpoint-every", "1")
    assert rc == 0, err
    return d, out, err


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# --- Ctrl-C and SIGTERM ---------------------------------------------------------------------------------------
def signal_after(monkeypatch, update: int, *signums):
    """Deliver `signums` to this process at the end of update `update` (as a user's Ctrl-C would arrive)."""
    from gbxcule.rl.session import Session

    real = Session.end_update

    def end_update(self, *a, **k):
        real(self, *a, **k)
        if self.update == update:
            for s in signums:
                os.kill(os.getpid(), s)

    monkeypatch.setattr(Session, "end_update", end_update)


def test_ctrl_c_stops_at_the_update_end_with_a_checkpoint_and_resume_goes_on(straight, tmp_path, monkeypatch):
    d = tmp_path / "run"
    before = signal.getsignal(signal.SIGINT)  # Python's default_int_handler, or SIG_IGN when started in background
    signal_after(monkeypatch, 2, signal.SIGINT)
    rc, out, err = train_cli(*TINY, "--run-dir", d)  # checkpoints every 50 updates by count: none is due
    monkeypatch.undo()
    assert rc == 130, err  # as shells expect: `train && eval` stops here
    assert "SIGINT: stopping at the end of this update with a checkpoint" in err
    assert f"stopped by SIGINT after update 3: checkpoint saved; continue with gbxcule train --resume {d}" in err
    assert "(interrupted)" in out
    assert torch.load(d / "checkpoint.pt", weights_only=False)["update"] == 3
    assert json.loads((d / "summary.json").read_text())["stopped"] == "interrupted"
    assert signal.getsignal(signal.SIGINT) is before  # handlers given back
    rc, out, err = train_cli("--resume", d, "--no-progress")
    assert rc == 0, err
    assert rows(d) == rows(straight[0])
    assert same_weights(weights(d / "checkpoint.pt"), weights(straight[0] / "checkpoint.pt"))


def test_sigterm_then_a_second_ctrl_c_quits_at_once(tmp_path, monkeypatch):
    d = tmp_path / "run"
    before = signal.getsignal(signal.SIGTERM)
    signal_after(monkeypatch, 1, signal.SIGTERM, signal.SIGINT)
    rc, _, err = train_cli(*TINY, "--run-dir", d)
    monkeypatch.undo()
    assert rc == 130
    assert "SIGTERM: stopping at the end of this update" in err and err.strip().endswith("gbxcule: interrupted")
    assert not (d / "checkpoint.pt").exists()  # quit at once: no checkpoint was due
    assert signal.getsignal(signal.SIGTERM) is before


def test_checkpoints_also_by_the_clock(tmp_path):
    from gbxcule.rl.config import RunConfig
    from gbxcule.rl.training import make_config, train

    assert 60 <= RunConfig().checkpoint_every_s <= 600  # a kill loses minutes, never an hour
    cfg = make_config(None, {"total_steps": 192, "env": {"num_envs": 6},
                             "ppo": {"rollout_steps": 8, "epochs": 1, "minibatches": 1, "model": "small"},
                             "run": {"run_dir": str(tmp_path), "device": "cpu", "progress": False, "evals": 0,
                                     "tensorboard": False, "eval_episodes": 0, "checkpoint_every": 1000,
                                     "checkpoint_every_s": 1e-6, "stop_after_updates": 2}})
    assert train(cfg)["stopped"] == "stop_after_updates"
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["update"] == 2


def test_a_checkpoint_when_asked_by_a_file_in_the_run_folder(tmp_path):
    """`checkpoint.now` in a running run's folder (gpu.sh jobs_wait puts one there before it packs): a checkpoint
    at that update's end, none due otherwise, and the file removed once it is written."""
    from gbxcule.rl.rundir import SAVE_NOW_NAME
    from gbxcule.rl.training import make_config, train

    def cfg(updates):
        return make_config(None, {"total_steps": 480, "env": {"num_envs": 6},
                                  "ppo": {"rollout_steps": 8, "epochs": 1, "minibatches": 1, "model": "small"},
                                  "run": {"run_dir": str(tmp_path), "device": "cpu", "progress": False, "evals": 0,
                                          "tensorboard": False, "eval_episodes": 0, "checkpoint_every": 1000,
                                          "checkpoint_every_s": 1e9, "stop_after_updates": updates}})

    assert train(cfg(2))["stopped"] == "stop_after_updates"
    assert not (tmp_path / "checkpoint.pt").exists()  # none was due
    (tmp_path / SAVE_NOW_NAME).touch()
    assert train(cfg(2))["stopped"] == "stop_after_updates"
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["update"] == 1  # at the first update's end
    assert not (tmp_path / SAVE_NOW_NAME).exists()


# --- run folders that cannot be damaged ----------------------------------------------------------------------
def test_a_fresh_run_never_appends_to_an_old_log(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    old = "".join(json.dumps({"update": u, "env_steps": 48 * u}) + "\n" for u in (1, 2, 3))
    (d / "metrics.jsonl").write_text(old)
    (d / "config.json").write_text("{}\n")
    (d / ".checkpoint.pt.k1l2.pt").write_bytes(b"half a checkpoint")  # a kill during a checkpoint write
    rc, _, err = train_cli(*TINY, "--run-dir", d, "--set", "run.stop_after_updates=1")
    assert rc == 0, err
    assert f"{d} held files of a run with no checkpoint: moved them to {d / 'previous-1'}" in err
    assert [r["update"] for r in rows(d)] == [1]
    assert (d / "previous-1" / "metrics.jsonl").read_text() == old
    assert not list(d.glob(".checkpoint.pt.*"))


def test_resume_of_a_finished_run_says_so_and_changes_nothing(straight, tmp_path):
    d = copy_run(straight[0], tmp_path / "run")
    before = files(d)
    rc, out, err = train_cli("--resume", d)
    assert rc == 0 and out == ""
    assert "already finished: 4 updates, 192 env-steps" in err and "--total-steps" in err
    assert files(d) == before


@pytest.mark.parametrize("extra, needle", [
    (["--num-envs", "8"], "env.num_envs is 6 in the run, not 8"),
    (["--task", "reach_lab"], "the run's task is 'leave_house', not 'reach_lab'"),
    (["--stack-k", "2"], "env.stack_k"),
    (["--model", "nature"], "ppo.model"),
    (["--set", "algo=a2c"], "algo is 'ppo' in the run, not 'a2c'"),
])
def test_resume_refuses_what_may_not_change(straight, tmp_path, extra, needle):
    d = copy_run(straight[0], tmp_path / "run")
    before = files(d)
    rc, _, err = train_cli("--resume", d, "--total-steps", "288", *extra)
    assert rc == 2 and err.count("\n") == 1 and needle in err, err
    assert files(d) == before


def test_resume_arguments_that_name_the_wrong_thing(straight, tmp_path):
    d = copy_run(straight[0], tmp_path / "run")
    before = files(d)
    rc, _, err = train_cli("--resume", d, "--run-dir", tmp_path / "other", "--total-steps", "288")
    assert rc == 2 and "name two folders" in err and not (tmp_path / "other").exists()
    rc, _, err = train_cli("--resume", d / "checkpoint.pt")
    assert rc == 2 and f"is a file (its folder is {d})" in err
    (d / "checkpoint.pt").write_bytes((d / "policy.pt").read_bytes())  # a policy file where the checkpoint was
    rc, _, err = train_cli("--resume", d, "--total-steps", "288")
    assert rc == 2 and err.count("\n") == 1 and "is a policy file (weights only)" in err
    assert files(d)["policy.pt"] == before["policy.pt"]


def test_resume_honours_what_may_change(straight, tmp_path):
    d = copy_run(straight[0], tmp_path / "run")
    rc, out, err = train_cli("--resume", d, "--total-steps", "288", "--no-progress", "--time-limit", "3600",
                             "--json")
    assert rc == 0, err
    summary = strict_json(out)
    assert summary["updates"] == 6 and summary["env_steps"] == 288 and summary["stopped"] == "done"
    assert [r["update"] for r in rows(d)] == [1, 2, 3, 4, 5, 6]
    assert rows(d)[:4] == rows(straight[0])


def test_resume_cuts_a_torn_log_line_removes_stale_temps_and_rewrites_the_policy(straight, tmp_path):
    d = tmp_path / "run"
    rc, _, err = train_cli(*TINY, "--run-dir", d, "--checkpoint-every", "1", "--set", "run.stop_after_updates=2")
    assert rc == 0, err
    with (d / "metrics.jsonl").open("a") as f:
        f.write('{"update": 3, "env_steps": 144, "pg_lo')  # a kill in the middle of a log write
    (d / ".policy.pt.x1y2.pt").write_bytes(b"half")
    shutil.copy(straight[0] / "policy.pt", d / "policy.pt")  # a kill between the two renames: policy ahead
    # resume for one update with no checkpoint due: policy.pt must be the checkpoint's again
    rc, _, err = train_cli("--resume", d, "--checkpoint-every", "1000", "--set", "run.checkpoint_every_s=1e9",
                           "--set", "run.stop_after_updates=1")
    assert rc == 0, err
    assert f"{d / 'metrics.jsonl'}: dropped a torn last line" in err
    assert not list(d.glob(".*.pt"))
    ck, pol = (torch.load(d / n, weights_only=False) for n in ("checkpoint.pt", "policy.pt"))
    assert pol["update"] == ck["update"] == 2
    assert all(torch.equal(pol["model"][k], ck["model"][k].half()) for k in ck["model"])
    assert [r["update"] for r in rows(d)] == [1, 2, 3]
    rc, _, err = train_cli("--resume", d)
    assert rc == 0, err
    assert rows(d) == rows(straight[0])
    assert same_weights(weights(d / "policy.pt"), weights(straight[0] / "policy.pt"))


def test_a_resume_that_fails_changes_no_file_of_the_run(straight, tmp_path, monkeypatch):
    import gbxcule.rl.session as session

    d = copy_run(straight[0], tmp_path / "run")
    before = files(d)

    real = session.Session._resume

    def oom(self, *a, **k):  # the resumed run dies once it has loaded its checkpoint (an OOM kill, a lost GPU)
        real(self, *a, **k)
        raise MemoryError

    monkeypatch.setattr(session.Session, "_resume", oom)
    rc, _, err = train_cli("--resume", d, "--total-steps", "288", "--no-progress")
    assert rc == 2 and one_error_line(err), err
    assert files(d) == before  # policy.pt included: it was the checkpoint's already


# --- typed configs ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("toml, needle", [
    ('[ppo]\nent_coef = "0.01"', "ppo.ent_coef must be a number, got '0.01' (str)"),
    ('[ppo]\nvf_coef = "half"', "ppo.vf_coef must be a number"),
    ('[ppo]\ntarget_kl = "0.02"', "ppo.target_kl must be a number"),
    ('[run]\ntime_limit_s = "60"', "run.time_limit_s must be a number"),
    ('[run]\nseed = "1"', "run.seed must be an integer"),
    ('[run]\neval_episodes = "many"', "run.eval_episodes must be an integer, got 'many'"),
    ('[ppo]\nanneal_lr = "false"', "ppo.anneal_lr must be true or false, got 'false' (str) (write False"),
    ('[ppo]\ncompile = "no"', "ppo.compile must be true or false, got 'no'"),
    ('[env]\nreward = { tau = "x" }', "env.reward: reward.tau must be a number, got 'x'"),
    ("[ppo]\nlr = nan", "ppo.lr must be a finite number"),
    ("[ppo]\ngamma = 1.5", "ppo.gamma must be <= 1"),
    ("[run]\nprogress = 1", "run.progress must be true or false, got 1"),
])
def test_config_values_of_the_wrong_type_are_one_line_before_anything_runs(tmp_path, toml, needle):
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml + "\n")
    # tiny, so that a value that slipped through would end (or crash) soon rather than train for hours
    rc, _, err = train_cli("--config", cfg, "--device", "cpu", "--run-dir", tmp_path / "run", "--num-envs", "2",
                           "--rollout-steps", "2", "--total-steps", "4", "--model", "small")
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err and needle in err, err
    assert not (tmp_path / "run").exists()


# --- progress and reports -----------------------------------------------------------------------------------------
def test_progress_and_reports_agree_with_the_results(straight):
    from gbxcule.core.fmt import num, pct
    from gbxcule.rl.session import progress_line

    d, out, err = straight
    line = progress_line({"sps": 1234.5, "episode_return": float("nan"), "running_success": 0.625,
                          "running_episodes": 40, "eval/greedy_success": 0.0})
    assert line == "sps 1,234  return -  success 62.5% of last 40 ep  greedy 0.0%"
    assert progress_line({}) == "sps -  return -  success - of last 0 ep"
    assert [pct(x) for x in (None, float("nan"), 0.0, 1 / 3, 1.0)] == ["-", "-", "0.0%", "33.3%", "100.0%"]
    assert [num(x) for x in (None, float("inf"), 0.5)] == ["-", "-", "0.500"]
    # the CPU start-up line with the plan, and an estimate after the first update
    assert "4 updates of 48 env-steps planned on the CPU device" in err
    assert "update 1 took" in err and "min for the 3 left" in err
    for bad in ("nan", "None", "n/a"):
        assert bad not in out, out
    summary = strict_json((d / "summary.json").read_text())
    last = summary["last"]
    assert last["running_episodes"] >= 0 and "running_success" in last
    rows(d)  # every log line strict JSON


def test_nonfinite_loss_message_says_when_no_checkpoint_exists(tmp_path, monkeypatch):
    import gbxcule.rl.algos.ppo as loss

    real = loss.ppo_loss

    def nan_loss(*a, **k):
        value, m = real(*a, **k)
        return value * math.nan, m

    monkeypatch.setattr(loss, "ppo_loss", nan_loss)
    rc, _, err = train_cli(*TINY, "--run-dir", tmp_path / "run")
    (line,) = [x for x in err.splitlines() if "error:" in x]
    assert rc == 2 and err.splitlines()[-1] == line
    assert "no checkpoint was written yet" in line and "last good checkpoint" not in line
    snap = strict_json((tmp_path / "run" / "nonfinite.json").read_text())
    assert snap["update"] == 0


def test_eval_of_a_folder_that_holds_only_policy_pt(capsys):
    assert not (ROOT / "pretrained/leave_house/checkpoint.pt").exists()
    assert main(["eval", str(ROOT / "pretrained/leave_house"), "--device", "cpu", "--episodes", "2", "--json"]) == 0
    rep = strict_json(capsys.readouterr().out)
    assert rep["episodes"] == 2 and rep["algo"] == "ppo" and rep["success_rate"] is not None


# --- the smaller items --------------------------------------------------------------------------------------------
def template_bytes(meta_json: str) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, frames=np.zeros((1, 72, 80), np.uint8), mask=np.ones((72, 80), bool),
                        meta=np.frombuffer(meta_json.encode(), dtype=np.uint8))
    return buf.getvalue()


def test_a_template_with_null_metadata_is_one_line_and_its_cached_copy_heals(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "null.npz"
    bad.write_bytes(template_bytes("null"))
    assert main(["goal", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "metadata is null, not a JSON object" in err
    typo = tmp_path / "typo.npz"
    typo.write_bytes(template_bytes('{"format": 1, "rom_sha1": "x", "codec": "c", "codec_version": "1", '
                                    '"frames_per_step": 24, "release_after_frames": 8, "stack_k": 1, "obs": "pixels"}'))
    assert main(["goal", "show", str(typo)]) == 2
    assert "metadata.codec_version must be an integer" in capsys.readouterr().err
    # a cached built-in template damaged this way is captured again
    import hashlib

    from gbxcule.core.action_codec import get_codec
    from gbxcule.rl.env import task_template
    from gbxcule.rl.goals import GoalTemplate, TemplateMeta
    from gbxcule.rl.tasks import load_task
    from gbxcule.roms import build_rom, get_spec

    monkeypatch.setenv("GBXCULE_CACHE_DIR", str(tmp_path / "cache"))  # templates only: Warp's cache stays put
    task = load_task("leave_house")
    codec = get_codec(task.codec)
    meta = TemplateMeta(hashlib.sha1(build_rom(get_spec(task.rom).name)).hexdigest(), codec.name, codec.version,
                        task.frames_per_step, task.release_after_frames, 1, "pixels", task.name)
    good = task_template(task, meta)
    (cached,) = (tmp_path / "cache" / "templates").glob("*.npz")
    cached.write_bytes(template_bytes("null"))
    again = task_template(task, meta)
    assert np.array_equal(again.frames, good.frames)
    assert GoalTemplate.load(cached).meta == good.meta  # healed on disk


def illegal_rom(tmp_path, opcode: int) -> Path:
    from gbxcule.asm import CartridgeHeader, assemble
    from gbxcule.core.cartridge import header_checksum

    src = (f'SECTION "e", ROM0[$0100]\n nop\n jp $0150\nSECTION "m", ROM0[$0150]\n ld a, 1\n ld b, 2\n'
           f' db ${opcode:02X}\n jr @\n')
    data = bytearray(assemble(src, header=CartridgeHeader(title="ILLEGAL", cartridge_type=0, rom_size=0,
                                                          ram_size=0)).rom)
    data[0x14D] = header_checksum(data)
    path = tmp_path / f"illegal_{opcode:02x}.gb"
    path.write_bytes(bytes(data))
    return path


def test_pyboy_single_play_stops_on_an_illegal_opcode_with_one_line(tmp_path):
    """A subprocess (PyBoy's CPU thread spins until the process ends), with a timeout guarding the hang."""
    rom = illegal_rom(tmp_path, 0xD3)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "gbxcule", "play", str(rom), "--backend", "pyboy_single", "--envs", "2",
                        "--steps", "3"], capture_output=True, text=True, timeout=240, env=env)
    err = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(err) == 1, r.stderr
    assert "env 0 ran the illegal opcode $D3 at $0154" in err[0] and "never returns" in err[0]


@pytest.mark.parametrize("cmd", [
    ("verify", "--rom", "{rom}", "--steps", "20", "--frames-per-step", "24"),
    ("screenshot", "{rom}", "--backend", "pyboy_single", "--frames", "600", "--out", "{tmp}/s.png"),
    ("testrom", "{rom}", "--backend", "pyboy_single", "--frames", "600"),
    ("play", "{rom}", "--backend", "pyboy_vec_mp", "--envs", "2", "--steps", "3"),
    ("bench", "--rom", "{rom}", "--backends", "pyboy_single", "--envs", "1", "--steps", "6", "--warmup", "0",
     "--out", "{tmp}/b.json"),
], ids=lambda c: c[0] + (f" {c[3]}" if c[0] == "play" else ""))
def test_every_pyboy_path_stops_on_an_illegal_opcode_with_one_line(tmp_path, cmd):
    """verify's reference, screenshot and testrom on PyBoy hung for good (killed at 300 s); every path that ticks
    PyBoy now goes through the one watch (`pyboy_single.step_games`)."""
    rom = illegal_rom(tmp_path, 0xD3)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    args = [a.format(rom=rom, tmp=tmp_path) for a in cmd]
    r = subprocess.run([sys.executable, "-m", "gbxcule", *args], capture_output=True, text=True, timeout=150, env=env)
    err = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "ran the illegal opcode $D3 at $0154" in err[0] and "never returns" in err[0], err[0]
    assert not (tmp_path / "s.png").exists()


def test_the_puffer_baselines_env_reports_an_illegal_opcode_instead_of_ending_its_worker(tmp_path):
    """PufferLib's worker process dies on an exception and its parent then waits forever: the env hands the
    hang back as an info, and the backend raises it (`raise_hang`)."""
    from gbxcule.backends.pyboy_puffer_vec import HANG_INFO, PyBoyGymEnv, raise_hang
    from gbxcule.backends.pyboy_single import PyBoyHang
    from gbxcule.core.action_codec import get_codec
    from gbxcule.core.cartridge import load_rom
    from gbxcule.core.schedule import ActionSchedule

    env = PyBoyGymEnv(load_rom(illegal_rom(tmp_path, 0xDB)), get_codec("dmg_buttons_v0"), ActionSchedule(24, 8),
                      (0xC000, 0xC010))
    env.reset()
    infos = []
    for _ in range(4):  # past PyBoy's boot ROM into the program
        infos.append(env.step(0)[4])
        if infos[-1]:
            break
    assert HANG_INFO in infos[-1] and "ran the illegal opcode $DB at $0154" in infos[-1][HANG_INFO]
    assert env.step(0)[4][HANG_INFO].endswith("stuck on an illegal opcode; it cannot step")  # and again, not a crash
    with pytest.raises(PyBoyHang, match=r"illegal opcode \$DB"):
        raise_hang([[{}], [infos[-1]]])
    raise_hang([{}, []])  # no hang: nothing raised


def test_pyboy_vec_mp_stops_on_an_illegal_opcode(tmp_path):
    from gbxcule.backends import make_backend

    def hung(signum, frame):
        raise TimeoutError("pyboy_vec_mp hung on the illegal opcode")

    rom = illegal_rom(tmp_path, 0xDB)  # PyBoy's own breakpoint opcode: it spins there too
    backend = make_backend("pyboy_vec_mp", str(rom), num_envs=3, num_workers=2)
    old = signal.signal(signal.SIGALRM, hung)  # the guard: the parent waits on its workers' pipes
    signal.alarm(120)
    try:
        with pytest.raises(GbxculeError, match=r"pyboy_vec_mp: env 0 ran the illegal opcode \$DB at \$0154"):
            for _ in range(3):  # past PyBoy's boot ROM into the program
                backend.step(np.zeros(3, dtype=np.int32))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        backend.close()


KERNEL_SCRIPT = """
import warp as wp
from gbxcule.kernels import init_warp, ppu

init_warp()

@wp.kernel
def uses_ppu_constants(out: wp.array(dtype=wp.int32)):
    i = wp.tid()
    s = ppu.put_x(ppu.EMPTY_X_SET, 1, i)
    out[i] = wp.where(ppu.seen_x(s, ppu.EMPTY_X_SET, ppu.EMPTY_X_SET, i), 1, 0)

out = wp.zeros(4, dtype=wp.int32, device="cpu")
wp.launch(uses_ppu_constants, dim=4, inputs=[out], device="cpu")
print(out.numpy().tolist())
"""


def test_kernel_compiles_print_no_constant_conversion_warnings(tmp_path):
    """The PPU's uint32 constants compiled from scratch (an empty kernel cache, in a process of its own): clang
    says nothing. They once printed -Wconstant-conversion warnings on every first compile of the step and snapshot
    kernels."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "GBXCULE_CACHE_DIR": str(tmp_path / "cache")}
    script = tmp_path / "compile_ppu.py"  # Warp reads a kernel's source from its file
    script.write_text(KERNEL_SCRIPT)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[1, 1, 1, 1]"
    assert list((tmp_path / "cache" / "warp").rglob("*.o")), "nothing was compiled"
    assert "warning" not in r.stderr and "Wconstant-conversion" not in r.stderr, r.stderr


def test_eval_gifs_carry_who_acts_the_step_and_the_successes(tmp_path):
    from PIL import Image

    from gbxcule.core.screen import caption, text_bitmap
    from gbxcule.rl.evaluate import gif_label, write_gif_mosaic

    assert gif_label("agent (greedy)", 12, 3, 16) == "agent (greedy)  step 12  at goal 3/16"
    bits = text_bitmap("AT GOAL 3/16")
    assert bits.shape == (5, 4 * 12 - 1) and bits.any()
    frame = np.zeros((144, 160), np.uint8)
    capped = caption(frame, "step 1")
    assert capped.shape == (151, 160) and (capped[:7] == 3).sum() == text_bitmap("step 1").sum()
    frames = [np.full((4, 144, 160), k % 4, np.uint8) for k in range(3)]
    path = tmp_path / "agent.gif"
    write_gif_mosaic(frames, path, who="random", successes=[0, 1, 4])
    img = Image.open(path)
    pics = []
    for i in range(img.n_frames):
        img.seek(i)
        pics.append(np.array(img.convert("L")))
    assert len(pics) == 3 and pics[0].shape == (290 + 14, 322)  # a caption band of 2 x (5 + 2) rows
    for i, n in enumerate((0, 1, 4)):
        want = caption(np.zeros((290, 322), np.uint8), gif_label("random", i, n, 4), scale=2)[:14] == 3
        assert np.array_equal(pics[i][:14] == 0, want)  # black text where the label's bits are


def test_single_gymnasium_env_has_game_and_episode_stats():
    gymnasium = pytest.importorskip("gymnasium")
    import gbxcule.rl  # noqa: F401
    from gbxcule.rl.env import GameEnv

    env = gymnasium.make("gbxcule/Overworld-LeaveHouse-v0", max_steps=3)
    try:
        inner = env.unwrapped
        assert isinstance(inner.game, GameEnv) and inner.game.num_envs == 1
        inner.reset(seed=0)
        for _ in range(3):
            *_, term, trunc, _ = inner.step(0)
        assert trunc
        stats = inner.episode_stats()
        assert stats["episodes"] == 1 and stats["episode_length"] == 3.0
    finally:
        env.close()


def test_pufferlib_imports_without_gym_and_leaves_no_gym_behind(tmp_path, monkeypatch):
    """pufferlib 3.0 imports gym only in pufferlib/spaces.py to name its space classes: with no gym installed,
    gbxcule's import gives it a stand-in and removes it after (so SB3 imported later sees no gym)."""
    pytest.importorskip("gymnasium")
    import importlib.util

    if importlib.util.find_spec("gym") is not None or importlib.util.find_spec("pufferlib") is not None:
        pytest.skip("a real gym or pufferlib is installed")
    fake = tmp_path / "site" / "pufferlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "spaces.py").write_text("import gym\nimport gymnasium\nBox = (gym.spaces.Box, gymnasium.spaces.Box)\n")
    (fake / "vector.py").write_text("import pufferlib.spaces\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    from gbxcule.backends.pyboy_puffer_vec import import_pufferlib_vector

    try:
        vec = import_pufferlib_vector()
        import gymnasium

        assert vec.pufferlib.spaces.Box[0] is gymnasium.spaces.Box
        assert "gym" not in sys.modules
    finally:
        for name in [m for m in sys.modules if m == "pufferlib" or m.startswith("pufferlib.")]:
            del sys.modules[name]
    script = (ROOT / "scripts/install_pufferlib.sh").read_text()
    installs = [ln for ln in script.splitlines() if "pip install" in ln]
    assert installs and not any("gym==" in ln or " gym " in ln for ln in installs)


# --- settings that say what they do, limits checked against each other, exits that tell the shell ---------------
def one_error_line(err: str) -> bool:
    """The run's notes, then one error line, last; no traceback."""
    lines = err.strip().splitlines()
    return [x for x in lines if "error:" in x] == lines[-1:] and "Traceback" not in err


def test_the_set_option_wins_over_the_algorithms_own_flags(tmp_path):
    from gbxcule.rl.config import parse_sets
    from gbxcule.rl.training import prepare

    flags = {"run": {"run_dir": str(tmp_path / "r")}}
    cfg, _ = prepare(None, flags, None, {"lr": 0.001}, parse_sets(["ppo.lr=0.0005"]))
    assert cfg.ppo.lr == 0.0005  # documented order: defaults, --config, flags, then --set
    cfg, _ = prepare(None, {**flags, "algo": "a2c"}, None, {"model": "small"}, parse_sets(["a2c.model=nature"]))
    assert cfg.a2c.model == "nature"
    cfg, _ = prepare(None, flags, None, {"lr": 0.001}, parse_sets(["algo=a2c"]))  # --set picks the section too
    assert cfg.algo == "a2c" and cfg.a2c.lr == 0.001


@pytest.mark.parametrize("args, needle", [
    (["--algo", "a2c", "--set", "a2c.steps_per_update=100000000000"], "more than total_steps"),
    (["--algo", "dqn", "--set", "dqn.log_every=1000000000"], "more than total_steps"),
    (["--algo", "dqn", "--set", "dqn.batch_size=100000", "--set", "dqn.buffer_size=600",
      "--set", "dqn.learning_starts=8"], "dqn.batch_size"),
    (["--algo", "dqn", "--set", "dqn.learning_starts=1000"], "before its first gradient step"),
    (["--algo", "a2c", "--set", "a2c.gru=100000"], "a2c.gru must be <= 4096"),
    (["--set", "env.archive.cells=\"pixels\"", "--set", "env.archive.pixel_cell=3"], "pixel_cell must be one of"),
    (["--set", "env.archive.pixel_cell=100"], "pixel_cell must be one of"),
    (["--set", "run.dist_timeout_s=1e15"], "run.dist_timeout_s must be <= 86400"),
    (["--seed", str(2**64)], "run.seed must be <="),
])
def test_limits_checked_against_each_other_are_one_line_before_anything_runs(tmp_path, args, needle):
    d = tmp_path / "run"
    base = [a for a in TINY if a not in ("--epochs", "2", "--minibatches", "--rollout-steps", "8")]
    if "--algo" in args:  # the PPO-only flags of TINY do not apply
        base = ["--device", "cpu", "--num-envs", "6", "--total-steps", "192", "--eval-episodes", "0",
                "--no-progress", "--set", "run.tensorboard=false", "--model", "small"]
    rc, out, err = train_cli(*base, "--run-dir", d, *args)
    assert rc == 2 and err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert not d.exists()


def test_a_run_that_never_takes_a_gradient_step_says_so_and_writes_no_policy(tmp_path):
    d = tmp_path / "run"  # one gradient step per 100 steps of all envs, and the run makes 16: none is taken
    rc, out, err = train_cli("--algo", "dqn", "--device", "cpu", "--num-envs", "4", "--total-steps", "64",
                             "--max-steps", "10", "--model", "small", "--eval-episodes", "2", "--no-progress",
                             "--run-dir", d, "--set", "run.tensorboard=false", "--set", "dqn.replay_ratio=0.01",
                             "--set", "dqn.buffer_size=80", "--set", "dqn.learning_starts=8",
                             "--set", "dqn.log_every=4", "--set", "dqn.batch_size=8")
    assert rc == 2 and one_error_line(err) and "took no gradient step in 64 env-steps" in err, err
    assert not (d / "policy.pt").exists() and not (d / "eval.json").exists() and (d / "checkpoint.pt").is_file()
    assert json.loads((d / "summary.json").read_text())["stopped"] == "no_learning"


def test_a_signal_during_the_set_up_stops_the_run_after_its_first_update(tmp_path, monkeypatch):
    import gbxcule.rl.session as session

    real = session.make_env

    def make_env(*a, **k):  # the user's Ctrl-C arrives while the envs are being built
        os.kill(os.getpid(), signal.SIGINT)
        return real(*a, **k)

    monkeypatch.setattr(session, "make_env", make_env)
    d = tmp_path / "run"
    rc, out, err = train_cli(*TINY, "--run-dir", d)
    monkeypatch.undo()
    assert rc == 130 and "stopped by SIGINT after update 1: checkpoint saved" in err, err
    assert torch.load(d / "checkpoint.pt", weights_only=False)["update"] == 1


def test_a_second_sigterm_quits_at_once(tmp_path, monkeypatch):
    d = tmp_path / "run"
    signal_after(monkeypatch, 1, signal.SIGTERM, signal.SIGTERM)
    rc, _, err = train_cli(*TINY, "--run-dir", d)
    monkeypatch.undo()
    assert rc == 130 and err.strip().endswith("gbxcule: interrupted")


def test_sigterm_stops_with_a_checkpoint_and_exit_143(tmp_path, monkeypatch):
    d = tmp_path / "run"
    signal_after(monkeypatch, 1, signal.SIGTERM)
    rc, _, err = train_cli(*TINY, "--run-dir", d)
    monkeypatch.undo()
    assert rc == 143 and "stopped by SIGTERM after update 2" in err, err


def test_sigterm_as_the_run_ends_skips_the_final_eval_and_exits_143(tmp_path, monkeypatch):
    """A stop asked for after the last update's stop check (during its eval, say) finds the run complete: its
    policy and checkpoint are kept, the final eval (eval.json, minutes on a long task) is not played."""
    from gbxcule.rl.session import Session

    real = Session.evaluate

    def evaluate(self):  # SIGTERM while the last update's eval plays
        if self.update >= self.num_updates:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self)

    d = tmp_path / "run"
    monkeypatch.setattr(Session, "evaluate", evaluate)
    rc, out, err = train_cli(*TINY, "--eval-episodes", "2", "--max-steps", "12", "--run-dir", d)
    monkeypatch.undo()
    assert rc == 143, err
    assert f"SIGTERM as the run ended: no final eval (eval.json); gbxcule eval {d} plays its policy" in err
    summary = json.loads((d / "summary.json").read_text())
    assert summary["stopped"] == "done" and summary["signal"] == "SIGTERM" and summary["updates"] == 4
    assert (d / "policy.pt").is_file() and not (d / "eval.json").exists()
    rc, _, err = train_cli(*TINY, "--eval-episodes", "2", "--max-steps", "12", "--run-dir", tmp_path / "plain")
    assert rc == 0 and (tmp_path / "plain" / "eval.json").is_file(), err  # without the signal: the eval


def test_a_resumed_folder_must_hold_its_own_runs_checkpoint(straight, tmp_path):
    d = copy_run(straight[0], tmp_path / "run")
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "algo": "dqn"}))  # a DQN run's folder, a PPO checkpoint
    before = files(d)
    rc, _, err = train_cli("--resume", d, "--total-steps", "288")
    assert rc == 2 and err.count("\n") == 1 and "is a ppo run's, but" in err and "not this folder's" in err, err
    assert files(d) == before


def test_the_checkpoints_host_copies_are_counted_before_anything_runs(tmp_path, monkeypatch):
    import gbxcule.backends as backends
    from gbxcule.core import memory

    real = backends.memory_available

    def tight(device):  # room for the envs, not for a checkpoint's two copies of the replay buffer
        host, dev = real(device)
        return memory.Available(35 << 20, "a test's cgroup"), dev

    d = tmp_path / "run"
    monkeypatch.setattr(backends, "memory_available", tight)
    rc, _, err = train_cli("--algo", "dqn", "--device", "cpu", "--num-envs", "4", "--total-steps", "640",
                           "--max-steps", "10", "--model", "small", "--eval-episodes", "0", "--no-progress",
                           "--run-dir", d, "--set", "dqn.buffer_size=4000", "--set", "dqn.learning_starts=8",
                           "--set", "dqn.batch_size=32",  # a learner's working memory that fits too
                           "--set", "dqn.checkpoint_buffer=true", "--set", "run.checkpoint_env_state=\"never\"")
    monkeypatch.undo()
    assert rc == 2 and err.count("\n") == 1 and "a checkpoint of this run takes" in err, err
    assert not d.exists()


def test_a_full_disk_while_logging_with_tensorboard_is_one_line(tmp_path, monkeypatch):
    import builtins

    import gbxcule.rl.rundir as rundir

    real = builtins.open

    def full(path, *a, **k):
        if "tfevents" in str(path):
            raise OSError(28, "No space left on device")
        return real(path, *a, **k)

    monkeypatch.setattr(rundir, "open", full, raising=False)
    d = tmp_path / "run"
    args = [a for a in TINY if a != "run.tensorboard=false"]
    args = args[:-1] if args[-1] == "--set" else args
    rc, _, err = train_cli(*args, "--run-dir", d)
    monkeypatch.undo()
    assert rc == 2 and one_error_line(err) and "cannot write TensorBoard events" in err, err
    assert "Traceback" not in err and "Exception in thread" not in err


def test_the_closing_line_reads_one_window_and_a_new_games_run_folder_works_anywhere(tmp_path, monkeypatch):
    import shutil as sh

    from gbxcule.rl.tasks import builtin_packs
    from gbxcule.roms import write_rom

    game = tmp_path / "game"
    game.mkdir()
    write_rom("OVERWORLD", game)
    (game / "OVERWORLD.gb").rename(game / "mygame.gb")
    pack = next(iter(builtin_packs()["overworld"].values()))
    assert pack.rom_sha1 is None
    (game / "pack.toml").write_text(
        '[pack]\nname = "mine"\n'
        'codec = "pokemonred_puffer_v1"\n[tasks.out]\nstart = { script = "N5" }\nstep_limit = 20\n'
        'goal_ram = [{ addr = 0xC100, value = 1 }]\n')
    monkeypatch.chdir(game)
    d = tmp_path / "run"
    rc, out, err = train_cli(*TINY, "--rom", "mygame.gb", "--task", "pack.toml:out", "--run-dir", d)
    assert rc == 0, err
    line = [x for x in out.splitlines() if x.startswith("last update")][0]
    assert "over the last" in line and "episodes (sampled policy): success" in line
    config = json.loads((d / "config.json").read_text())
    assert config["env"]["rom"] == str(game / "mygame.gb") and config["env"]["task"] == f"{game / 'pack.toml'}:out"
    assert len(config["env"]["rom_sha1"]) == 40
    monkeypatch.chdir(tmp_path)  # another folder: eval and resume find the ROM and the pack
    assert main(["eval", str(d), "--device", "cpu", "--episodes", "2", "--json"]) == 0
    rc, _, err = train_cli("--resume", d, "--total-steps", "288", "--no-progress")
    assert rc == 0, err
    moved = tmp_path / "moved"
    sh.move(str(game), str(moved))  # the files moved: eval and resume are told where they are now
    assert main(["eval", str(d), "--device", "cpu", "--episodes", "2", "--rom", str(moved / "mygame.gb"),
                 "--task", f"{moved / 'pack.toml'}:out", "--json"]) == 0
    other = bytearray((moved / "mygame.gb").read_bytes())
    other[-1] ^= 0xFF  # another ROM: one byte differs
    (moved / "other.gb").write_bytes(bytes(other))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["eval", str(d), "--device", "cpu", "--episodes", "2", "--rom", str(moved / "other.gb"),
                   "--task", f"{moved / 'pack.toml'}:out"])
    assert rc == 2 and "the run was trained on the ROM with SHA-1" in err.getvalue()


def test_a_run_folder_aimed_at_an_input_or_inside_a_run_is_refused(straight, tmp_path):
    from gbxcule.roms import write_rom

    rom = write_rom("OVERWORLD", tmp_path / "roms")
    data = rom.read_bytes()
    rc, _, err = train_cli(*TINY, "--rom", rom, "--run-dir", rom)
    assert rc == 2 and one_error_line(err) and f"cannot write into {rom}" in err and rom.read_bytes() == data
    before = files(straight[0])
    rc, _, err = train_cli(*TINY, "--run-dir", straight[0] / "tb")
    assert rc == 2 and one_error_line(err) and files(straight[0]) == before
