"""Issue 62: no output of any command overwrites one of its inputs or a training run's files (the one guard,
core/outputs.py `check_outputs`).

The fuzz test aims every output flag of every command (and of the scripts the README lists) at each of that
command's inputs and at each entry of a run folder, and requires one error line, a non-zero exit and every
byte of the inputs and the run folder unchanged. The guard runs before any work, so a refusal costs
milliseconds; the run folder is a real tiny training run (CPU device), with the entries it does not write
fabricated.
"""

import contextlib
import hashlib
import importlib.util
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gbxcule.asm import CartridgeHeader, assemble  # noqa: E402
from gbxcule.cli.main import main  # noqa: E402
from gbxcule.core import outputs  # noqa: E402
from gbxcule.core.cartridge import header_checksum  # noqa: E402
from gbxcule.core.errors import GbxculeError  # noqa: E402
from gbxcule.core.outputs import RUN_FILES, check_output, check_output_dir, check_outputs, write_output  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# -- the guard itself ------------------------------------------------------------------------------------------

def fake_run(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES:
        if name == "tb":
            (folder / "tb").mkdir(exist_ok=True)
            (folder / "tb" / "events.out.tfevents.1").write_bytes(b"tb")
        elif not (folder / name).exists():
            (folder / name).write_bytes(name.encode())
    return folder


def test_the_run_files_are_the_trainers():
    from gbxcule.rl import rundir

    assert rundir.RUN_FILES is RUN_FILES  # one list: what the run folder writes is what every command protects
    assert {rundir.CHECKPOINT_NAME, rundir.POLICY_NAME, rundir.BEST_NAME, rundir.ARCHIVE_NAME} <= set(RUN_FILES)
    assert set(outputs.RUN_MARKERS) <= set(RUN_FILES)


def test_a_run_folders_entries_are_refused_by_path_symlink_and_inside_tb(tmp_path):
    run = fake_run(tmp_path / "run")
    (tmp_path / "link.pt").symlink_to(run / "checkpoint.pt")
    for out in [*(run / n for n in RUN_FILES if n != "tb"), run / "tb" / "x.png", tmp_path / "link.pt",
                tmp_path / "run" / "." / "policy.pt"]:
        with pytest.raises(GbxculeError, match="of the training run in"):
            check_output(out)
    with pytest.raises(GbxculeError, match="it is a directory"):
        check_output(run / "tb")
    check_output(run / "agent.gif")  # new files beside a run's are fine
    other = tmp_path / "notarun"
    other.mkdir()
    (other / "config.json").write_text("{}")  # a config.json alone is not a run
    check_output(other / "config.json")
    check_output(tmp_path / "fresh" / "checkpoint.pt")


def test_outputs_given_twice_and_folders(tmp_path):
    with pytest.raises(GbxculeError, match="given for two outputs"):
        check_outputs([tmp_path / "a.gif", None, tmp_path / "x" / ".." / "a.gif"])
    run = fake_run(tmp_path / "run")
    check_output_dir(run)  # a run's folder may take new files (plot writes its PNGs there)
    for bad, needle in ((run / "tb", "of the training run"), (run / "policy.pt", "is a file, not a folder")):
        with pytest.raises(GbxculeError, match=needle):
            check_output_dir(bad)
    with pytest.raises(GbxculeError, match="input of this command"):
        check_output_dir(tmp_path, [tmp_path])


def test_write_output_guards_when_given_inputs_and_not_for_a_programs_own_files(tmp_path):
    run = fake_run(tmp_path / "run")
    with pytest.raises(GbxculeError, match="of the training run"):
        write_output(run / "eval.json", "x", ())
    assert (run / "eval.json").read_bytes() == b"eval.json"
    write_output(run / "eval.json", "the trainer's own\n")  # inputs=None: the run writing its own files
    assert (run / "eval.json").read_text() == "the trainer's own\n"


# -- the fuzz test over every command ---------------------------------------------------------------------------

SRC = 'SECTION "e", ROM0[$0100]\n nop\n jp $0150\nSECTION "m", ROM0[$0150]\n jr @\n'
PACK = """[pack]
name = "fuzz"
rom = "OVERWORLD"
[tasks.t]
start = {{ states = ["{state}"] }}
goal_ram = [{{ addr = 0xC100, value = 1 }}]
template = "{template}"
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A run folder (tiny PPO run on the CPU device, its other entries fabricated) and one file of each input
    kind the commands take."""
    from gbxcule.rl.goals import GoalTemplate, TemplateMeta
    from gbxcule.rl.training import make_config, train

    d = tmp_path_factory.mktemp("guard")
    run = d / "run"
    train(make_config(None, {"total_steps": 4 * 6 * 8, "env": {"num_envs": 6},
                             "ppo": {"rollout_steps": 8, "epochs": 1, "minibatches": 1, "model": "small"},
                             "run": {"run_dir": str(run), "device": "cpu", "progress": False, "tensorboard": False,
                                     "eval_episodes": 0}}))
    fake_run(run)
    data = bytearray(assemble(SRC, header=CartridgeHeader(title="T", cartridge_type=0, rom_size=0, ram_size=0)).rom)
    data[0x14D] = header_checksum(bytes(data))
    f = {"run": run, "rom": d / "t.gb", "state": d / "start.gbxs", "template": d / "goal.npz",
         "trace": d / "trace.txt", "pack": d / "pack.toml", "config": d / "train.toml", "merge": d / "part.json",
         "manifest": d / "games.toml", "jobs": d / "jobs.txt", "csv": d / "s.csv", "lines": d / "l.txt",
         "src": d / "src"}
    f["rom"].write_bytes(bytes(data))
    f["state"].write_bytes(b"state bytes")
    meta = TemplateMeta("0" * 40, "pokemonred_puffer_v1", 1, 24, 8, 1, "pixels", "t")
    f["template"].write_bytes(GoalTemplate(np.zeros((1, 72, 80), np.uint8), np.ones((72, 80), bool), meta).to_bytes())
    f["trace"].write_text("N2\n")
    f["pack"].write_text(PACK.format(state=f["state"].name, template=f["template"].name))
    f["config"].write_text("total_steps = 64\n")
    f["merge"].write_text("{}\n")
    f["manifest"].write_text("")
    f["jobs"].write_text("a: true\n")
    f["csv"].write_text("x\n")
    f["lines"].write_text("x\n")
    f["src"].mkdir()
    (f["src"] / "x.gb").write_bytes(bytes(data))
    ck = torch.load(run / "policy.pt", weights_only=False)  # a policy whose config reads the pack and the state
    ck["config"]["env"] |= {"task": f"{f['pack']}:t", "start_states": [str(f["state"])]}
    f["other"] = d / "other.pt"
    torch.save(ck, f["other"])
    (d / "agent_random.gif").write_bytes((run / "policy.pt").read_bytes())  # a checkpoint named like a GIF
    return d, f


def run_targets(run: Path) -> list[Path]:
    """Every entry of a run folder (tb's event file too); `tb` itself where the flag names a folder."""
    return [run / n for n in RUN_FILES if n != "tb"] + [run / "tb" / "events.out.tfevents.1"]


def cases(f: dict) -> list[tuple[str, list[str], list[Path]]]:
    """(what, argv with {} for the output, the targets aimed at)."""
    run, runs = f["run"], run_targets(f["run"])
    pack_task = f"{f['pack']}:t"
    task_files = [f["pack"], f["state"], f["template"]]
    c = [("screenshot", ["screenshot", f["rom"], "--out", "{}"], [f["rom"], *runs])]
    for flag in ("--record", "--mosaic", "--save-state"):
        c.append((f"play {flag}", ["play", f["rom"], "--backend", "warp_vec_cpu", "--state", f["state"], flag, "{}"],
                  [f["rom"], f["state"], *runs]))
    c += [
        ("bench", ["bench", "--rom", f["rom"], "--state", f["state"], "--out", "{}"], [f["rom"], f["state"], *runs]),
        ("bench-env", ["bench-env", "--task", pack_task, "--rom", f["rom"], "--out", "{}"],
         [f["rom"], *task_files, *runs]),
        ("eval run", ["eval", run, "--gif", "{}"], runs),
        ("eval checkpoint", ["eval", f["other"], "--gif", "{}", "--random"], [f["other"], *task_files, *runs]),
    ]
    capture = ["goal", "capture", "--task", pack_task, "--rom", f["rom"], "--start-state", f["state"],
               "--trace", f["trace"]]
    c += [
        ("goal capture --out", [*capture, "--out", "{}"], [f["rom"], f["trace"], *task_files, *runs]),
        ("goal capture --png", [*capture, "--out", f["rom"].parent / "new.npz", "--png", "{}"],
         [f["rom"], f["trace"], *task_files, *runs]),
        ("goal show", ["goal", "show", f["template"], "--task", pack_task, "--png", "{}"], [*task_files, *runs]),
        ("goal calibrate --plot", ["goal", "calibrate", f["template"], "--task", pack_task, "--plot", "{}"],
         [*task_files, *runs]),
        ("goal calibrate --nearest-png", ["goal", "calibrate", f["template"], "--task", pack_task, "--start-states",
                                          f["state"], "--nearest-png", "{}"], [*task_files, *runs]),
        ("verify", ["verify", "--rom", f["rom"], "--state", f["state"], "--bundle-dir", "{}"],
         [f["rom"], f["state"], run / "tb", run / "checkpoint.pt"]),
        ("roms build", ["roms", "build", "--out", "{}"], [run / "tb", run / "policy.pt"]),
        ("plot", ["plot", run, "--out", "{}"], [run / "tb", run / "metrics.jsonl"]),
    ]
    return c


def script_cases(f: dict) -> list[tuple[str, list[str], list[Path]]]:
    run, runs = f["run"], run_targets(f["run"])
    return [
        ("bench_train", ["--config", f["config"], "--out", "{}"], [f["config"], *runs]),
        ("bench_games", ["--manifest", f["manifest"], "--merge", f["merge"], "--out", "{}"],
         [f["manifest"], f["merge"], *runs]),
        ("bench_learner", ["--out", "{}"], runs),
        ("bench_learning", ["--setup", "a", "--algo ppo", "--out", "{}"], [run / "tb", run / "checkpoint.pt"]),
        ("gpu_jobs", [f["jobs"], "--out", "{}"], [f["jobs"], run / "tb", run / "metrics.jsonl"]),
        ("fetch_games", ["--manifest", f["manifest"], "--from", f["src"], "--out", "{}"],
         [f["manifest"], f["src"], run / "tb"]),
        ("ncu_lines", [f["csv"], f["lines"], "--json", "{}"], [f["csv"], f["lines"], *runs]),
    ]


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def run_script(name: str, argv: list[str]) -> tuple[int, str]:
    (path,) = (ROOT / "scripts").glob(f"*/{name}.py")  # scripts/bench, scripts/gpu, scripts/profile, ...
    spec = importlib.util.spec_from_file_location(f"_guard_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    old, err = sys.argv, io.StringIO()
    sys.argv = [name, *argv]
    sys.path.insert(0, str(path.parent))  # as when run: a script's folder is on the path
    try:
        spec.loader.exec_module(module)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = module.main()
    finally:
        sys.argv = old
        sys.path.remove(str(path.parent))
    return rc, err.getvalue()


def test_every_output_flag_aimed_at_an_input_or_a_runs_file_is_refused(world, capsys):
    d, f = world
    before = snapshot(d)
    refused = []
    for what, argv, targets in cases(f):
        for t in targets:
            args = [str(a).replace("{}", str(t)) for a in argv]
            rc = main(args)
            err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
            assert rc != 0 and len(err) == 1 and "Traceback" not in err[0], (what, t, err)
            assert "refusing to write" in err[0] or "not a folder" in err[0], (what, t, err)
            refused.append((what, t))
    for name, argv, targets in script_cases(f):
        for t in targets:
            rc, err = run_script(name, [str(a).replace("{}", str(t)) for a in argv])
            lines = [x for x in err.splitlines() if x.strip()]
            assert rc != 0 and len(lines) == 1 and ("refusing to write" in lines[0] or "not a folder" in lines[0]), \
                (name, t, err)
            refused.append((name, t))
    assert snapshot(d) == before
    assert len(refused) > 150
    assert json.loads((f["run"] / "config.json").read_text())["algo"] == "ppo"  # the run is whole


def test_evals_random_gif_never_replaces_its_input(world, capsys):
    """`eval agent_random.gif --gif agent.gif --random`: the random policy's GIF (agent_random.gif, a name derived
    from --gif) is the checkpoint evaluated."""
    d, _ = world
    source = d / "agent_random.gif"
    data = source.read_bytes()
    assert main(["eval", str(source), "--gif", str(d / "agent.gif"), "--random"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"refusing to write {source}: it is an input of this command" in err
    assert source.read_bytes() == data and not (d / "agent.gif").exists()
