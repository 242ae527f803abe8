"""Issue 42: training killed with SIGKILL at random points, in the middle of log and checkpoint writes too, and
started again each time (`--resume` once a checkpoint exists, else the same command) ends with the same bits as
a run never interrupted: the same metrics.jsonl lines (timing keys aside) and the same weights.

Each killed run is a subprocess of `gbxcule train` on the CPU device with a tiny config. A driver script wraps the run
folder's writers to kill the process at a chosen point: half a log line written, the log line written but no
checkpoint yet, half a temporary policy.pt or checkpoint.pt written, between the policy.pt and checkpoint.pt
renames, or just after a checkpoint. `GBXCULE_FAULT_SEED` picks other kill points.
"""

import contextlib
import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gbxcule.cli.main import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
UPDATES = 4
ARGS = ["--device", "cpu", "--num-envs", "4", "--rollout-steps", "4", "--epochs", "2", "--minibatches", "2",
        "--model", "small", "--total-steps", str(16 * UPDATES), "--eval-episodes", "0", "--no-progress",
        "--checkpoint-every", "1", "--set", "run.tensorboard=false"]
# where a kill can land within an update, in the order an update reaches them (a checkpoint at every update)
EVENTS = ("mid_log", "after_log", "mid_policy", "between_renames", "mid_checkpoint", "after_checkpoint")

DRIVER = r'''
import json, os, signal, sys, tempfile
from pathlib import Path

event, when = sys.argv[1], int(sys.argv[2])
argv = sys.argv[3:]

import gbxcule.rl.rundir as shell
from gbxcule.cli.main import main

def die():
    sys.stdout.flush(); sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)

saving = {"update": None}
real_log, real_save, real_write = shell.Run.log, shell.Run.save_checkpoint, shell.write_output

def log(self, update, metrics):
    if update == when and event == "mid_log":
        line = json.dumps({"update": update, **metrics}, default=str) + "\n"
        with open(self.dir / "metrics.jsonl", "a") as f:
            f.write(line[: len(line) // 2])
        die()
    real_log(self, update, metrics)
    if update == when and event == "after_log":
        die()

def save_checkpoint(self, state, policy):
    saving["update"] = state["update"]
    return real_save(self, state, policy)

def write_output(path, write, inputs=None):
    name = Path(path).name
    now = saving["update"] == when
    if now and isinstance(write, bytes) and (event, name) in (("mid_policy", "policy.pt"),
                                                             ("mid_checkpoint", "checkpoint.pt")):
        fd, tmp = tempfile.mkstemp(dir=Path(path).parent, prefix=f".{name}.", suffix=".pt")
        os.write(fd, write[: len(write) // 2])
        os.close(fd)
        die()
    out = real_write(path, write, inputs)
    if now and (event, name) in (("between_renames", "policy.pt"), ("after_checkpoint", "checkpoint.pt")):
        die()
    return out

shell.Run.log, shell.Run.save_checkpoint, shell.write_output = log, save_checkpoint, write_output
sys.exit(main(argv))
'''


def clean(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("sps", "updates_per_s", "wall_s") and not k.startswith("time_")}
            for r in rows]


def plan(seed: int) -> list[tuple[str, int]]:
    """Five kills: one in the middle of update 1's log line (before any checkpoint: the same command starts
    again, moving the old files aside), then one at each point of the write sequence, each in a random later
    update; kills in the same update come in the order the update reaches them (each is reached again, as the
    checkpoint of that update was not complete)."""
    rng = random.Random(seed)
    later = [(rng.randrange(2, UPDATES), EVENTS.index(e)) for e in ("after_log", "mid_policy", "between_renames",
                                                                     "mid_checkpoint")]
    return [("mid_log", 1)] + [(EVENTS[i], u) for u, i in sorted(later)]


def test_sigkill_anywhere_then_resume_gives_the_same_bits(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)

    def run(event: str, when: int, run_dir: Path) -> subprocess.CompletedProcess:
        where = ["--resume", str(run_dir)] if (run_dir / "checkpoint.pt").exists() else ["--run-dir", str(run_dir)]
        return subprocess.run([sys.executable, str(driver), event, str(when), "train", *ARGS, *where],
                              capture_output=True, text=True, timeout=600, env=env)

    straight = tmp_path / "straight"  # the reference, in this process: the bits must not depend on the process
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["train", *ARGS, "--run-dir", str(straight)]) == 0
    d = tmp_path / "killed"
    kills = plan(seed=int(os.environ.get("GBXCULE_FAULT_SEED", "42")))  # vary it to try other kill points
    for event, when in kills:
        r = run(event, when, d)
        assert r.returncode == -9, (event, when, r.stderr)
    r = run("none", 0, d)
    assert r.returncode == 0, r.stderr
    assert clean(d) == clean(straight), kills
    for name in ("checkpoint.pt", "policy.pt"):
        a, b = (torch.load(x / name, map_location="cpu", weights_only=False) for x in (d, straight))
        assert a["update"] == b["update"] == UPDATES
        assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"]), (name, kills)
    assert not [p.name for p in d.iterdir() if p.name.startswith(".")]  # no temporary file left behind
    json.loads((d / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(c))
