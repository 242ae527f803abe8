"""Smoke test of the scripts: every Python script and example starts (`--help`), every `from gbxcule... import`
in them names something that exists, the scripts README.md lists exist, and scripts/gpu/gpu.sh lists its
subcommands. Nothing here compiles a kernel: a removed function or a broken import fails in seconds."""

import argparse
import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from gbxcule.core.errors import GbxculeError

ROOT = Path(__file__).resolve().parent.parent
PY_SCRIPTS = sorted(p.relative_to(ROOT).as_posix()
                    for p in [*ROOT.glob("scripts/*.py"), *ROOT.glob("scripts/*/*.py"), *ROOT.glob("examples/*.py")])


def run(args, timeout=120):
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_the_scripts_readme_lists_exist_and_are_covered():
    named = set(re.findall(r"\b((?:scripts|examples)/[\w./-]+\.(?:py|sh))", (ROOT / "README.md").read_text()))
    assert {"scripts/gpu/gpu.sh", "scripts/dev.sh", "scripts/profile/profile_step.py",
            "scripts/bench/bench_games.py"} <= named
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, f"README.md names scripts that do not exist: {missing}"
    assert {n for n in named if n.endswith(".py")} <= set(PY_SCRIPTS)


def test_scripts_readme_has_one_line_per_script():
    """scripts/README.md: one `- `NAME`: ...` line per script, under its group's heading; nothing else lies loose."""
    group, listed = None, set()
    for line in (ROOT / "scripts/README.md").read_text().splitlines():
        head = re.match(r"^(?:`(\w+)/`: |Top level:)", line)
        if head:
            group = head.group(1)
        item = re.match(r"^- `([\w.-]+)`: \S", line)
        if item:
            listed.add(f"scripts/{group}/{item.group(1)}" if group else f"scripts/{item.group(1)}")
    have = {p.relative_to(ROOT).as_posix() for p in (ROOT / "scripts").rglob("*")
            if p.is_file() and p.suffix in (".py", ".sh") and "__pycache__" not in p.parts}
    assert listed == have, f"unlisted: {sorted(have - listed)}; listed but missing: {sorted(listed - have)}"
    groups = {p.parent.name for p in (ROOT / "scripts").glob("*/*") if p.is_file()}
    assert groups == {"bench", "profile", "check", "gpu"}


@pytest.mark.parametrize("script", PY_SCRIPTS)
def test_script_starts(script):  # the examples too without their optional extras (they import them in main)
    r = run([sys.executable, script, "--help"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.lstrip().startswith("usage:"), r.stdout[:300]


def gbxcule_imports(path: Path):
    """(module, name) of every `from gbxcule... import name` in the file, at any depth (lazy imports too)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("gbxcule"):
            yield from ((node.module, a.name) for a in node.names)


@pytest.mark.parametrize("script", PY_SCRIPTS)
def test_script_imports_from_gbxcule_exist(script):
    for module, name in gbxcule_imports(ROOT / script):
        try:
            mod = importlib.import_module(module)
        except Exception as exc:  # an optional third-party library missing (PufferLib, SB3) is not ours to fix
            cause = exc if isinstance(exc, ImportError) else exc.__cause__
            if isinstance(cause, ImportError) and not (cause.name or "gbxcule").startswith("gbxcule"):
                continue
            raise
        assert hasattr(mod, name) or importlib.util.find_spec(f"{module}.{name}"), f"{script}: {module}.{name}"


def test_gpu_sh_lists_every_subcommand():
    r = run(["bash", "scripts/gpu/gpu.sh", "help"])
    assert r.returncode == 0, r.stderr
    listed = [line.split()[0].rstrip(":") for line in r.stdout.splitlines()[1:]]
    text = (ROOT / "scripts/gpu/gpu.sh").read_text()
    assert listed == re.findall(r"^cmd_(\w+)\(\) \{", text, re.M)  # one help line per subcommand, in order
    for sub in ("setup", "bench", "games", "train", "adapters", "cold", "ab", "ncu", "devcheck", "kernel_report",
                "resume_check", "breakdown"):
        assert sub in listed
    assert "/root/gpu" not in text.replace("GPU_ROOT=${GPU_ROOT:-/root/gpu}", "", 1).split("set -uo pipefail", 1)[1]
    r = run(["bash", "scripts/gpu/gpu.sh", "help", "games"])
    assert r.returncode == 0 and r.stdout.startswith("games:") and "PARTNAME" in r.stdout


def test_gpu_sh_refuses_what_it_cannot_do(tmp_path):
    r = run(["bash", "scripts/gpu/gpu.sh", "no-such-subcommand"])
    assert r.returncode == 1 and r.stderr.strip().endswith("unknown subcommand 'no-such-subcommand'")
    env = {"PATH": "/usr/bin:/bin", "GPU_ROOT": str(tmp_path / "gpu"), "OUT": str(tmp_path / "out")}
    r = subprocess.run(["bash", "scripts/gpu/gpu.sh", "bench"], cwd=ROOT, capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "setup" in r.stderr  # no install: one line
    assert not (tmp_path / "out").exists()


def test_gpu_sh_jobs_outlive_the_call_and_wait_packs_them(tmp_path):
    """jobs_start returns at once with the job list running in a session of its own; jobs_wait waits for it and
    packs every job's output, leaving checkpoints out, with the policies kept at marks while the jobs run (a machine
    lost between calls takes them with it) and once they have ended their final policies (`policy.pt`) too, unless
    KEEP names what to keep; a pack larger than PART_BYTES comes as parts that join to it."""
    import tarfile
    import time

    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / ".ready").touch()
    env = {**os.environ, "GPU_ROOT": str(tmp_path / "gpu"), "OUT": str(tmp_path / "out"),
           "RUNS": str(tmp_path / "runs"), "PY": sys.executable}
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("a: mkdir $JOB_OUT/policies; echo m > $JOB_OUT/policies/policy_60s.pt; "
                    "echo x > $JOB_OUT/checkpoint.pt; for i in $(seq 600); do [ -e $JOB_OUT/go ] && break; sleep 0.1; "
                    "done; echo done > $JOB_OUT/result.txt; "
                    "echo p > $JOB_OUT/policy.pt\n")

    def gpu(*args):
        return subprocess.run(["bash", "scripts/gpu/gpu.sh", *args], cwd=ROOT, capture_output=True, text=True, env=env,
                              timeout=120)

    assert gpu("jobs_wait", "5").returncode == 1  # nothing started: one line
    r = gpu("jobs_start", str(jobs))
    assert r.returncode == 0 and "started" in r.stdout, r.stderr
    assert not (tmp_path / "runs" / "jobs" / "a" / "result.txt").exists()  # still running when the call returned
    assert gpu("jobs_start", str(jobs)).returncode == 1  # one list at a time
    job = tmp_path / "runs" / "jobs" / "a"
    for _ in range(300):  # the job has kept a policy and waits for `go`
        if (job / "checkpoint.pt").exists():
            break
        time.sleep(0.1)
    r = gpu("jobs_wait", "1")
    assert r.returncode == 3 and "still running" in r.stdout, r.stdout + r.stderr
    with tarfile.open(tmp_path / "out" / "jobs.tgz") as t:
        names = t.getnames()
    assert "./a/policies/policy_60s.pt" in names and "./a/checkpoint.pt" in names  # (what a lost machine takes)
    def joined_names():
        (tmp_path / "joined.tgz").write_bytes(b"".join(p.read_bytes() for p in sorted(tmp_path.glob("out/jobs.tgz*"))))
        with tarfile.open(tmp_path / "joined.tgz") as t:
            return t.getnames()

    big = job / "policies" / "policy_120s.pt"
    big.write_bytes(os.urandom(20000))  # a kept policy that does not compress
    env["PART_BYTES"] = "1000"  # over 8 parts with the policies, not without: they go, the checkpoint stays
    r = gpu("jobs_wait", "1")
    assert "without the policies" in r.stdout and "without the checkpoints" not in r.stdout, r.stdout + r.stderr
    names = joined_names()
    assert "./a/checkpoint.pt" in names and not any("policies/policy_" in n for n in names)
    big.unlink()
    env["PART_BYTES"] = "30"  # over 8 parts even without the policies: packed with them, without the checkpoints
    r = gpu("jobs_wait", "1")
    assert "without the checkpoints" in r.stdout, r.stdout + r.stderr
    names = joined_names()
    assert "./a/policies/policy_60s.pt" in names and "./a/checkpoint.pt" not in names
    env["PART_BYTES"] = "150"
    assert gpu("jobs_wait", "1").returncode == 3
    parts = sorted((tmp_path / "out").glob("jobs.tgz.part-*"))
    assert len(parts) > 1
    # the machine is lost: on a fresh one (another RUNS) the parts carried back in two calls resume the job list,
    # with the job folders as the last pack had them
    lost = {**env, "RUNS": str(tmp_path / "fresh")}
    again = tmp_path / "again.txt"
    again.write_text("a: cat $JOB_OUT/checkpoint.pt > $JOB_OUT/resumed.txt\n")

    def fresh(*args):
        return subprocess.run(["bash", "scripts/gpu/gpu.sh", *args], cwd=ROOT, capture_output=True, text=True,
                              env=lost, timeout=120)

    assert fresh("jobs_resume", str(again)).returncode == 1  # nothing stashed: one line
    assert fresh("jobs_stash", *map(str, parts[:1])).returncode == 0
    assert fresh("jobs_stash", *map(str, parts[1:])).returncode == 0
    r = fresh("jobs_resume", str(again))
    assert r.returncode == 0 and "1 checkpoint(s)" in r.stdout, r.stdout + r.stderr
    r = fresh("jobs_wait", "60")
    assert r.returncode == 0 and "done  a rc 0" in r.stdout, r.stdout + r.stderr
    assert (tmp_path / "fresh" / "jobs" / "a" / "resumed.txt").read_text() == "x\n"
    del env["PART_BYTES"]
    (job / "go").touch()
    r = gpu("jobs_wait", "60")
    assert r.returncode == 0 and "done  a rc 0" in r.stdout, r.stdout + r.stderr
    with tarfile.open(tmp_path / "out" / "jobs.tgz") as t:
        names = t.getnames()
    assert "./a/result.txt" in names and not any(n.endswith("checkpoint.pt") for n in names)
    assert "./a/policy.pt" in names and "./a/policies/policy_60s.pt" in names  # ended: the final policies too
    env["KEEP"] = ""
    assert gpu("jobs_wait", "1").returncode == 0
    with tarfile.open(tmp_path / "out" / "jobs.tgz") as t:
        assert "./a/policy.pt" not in t.getnames()  # KEEP set: as it says
    env["PART_BYTES"] = "100"  # over what a call returns: parts that join to the same archive
    r = gpu("jobs_wait", "1")
    parts = sorted((tmp_path / "out").glob("jobs.tgz.part-*"))
    assert r.returncode == 0 and len(parts) > 1 and "parts: cat jobs.tgz.part-*" in r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "out" / "jobs.tgz").exists() and all(p.stat().st_size <= 100 for p in parts)
    (tmp_path / "joined.tgz").write_bytes(b"".join(p.read_bytes() for p in parts))
    with tarfile.open(tmp_path / "joined.tgz") as t:
        assert "./a/result.txt" in t.getnames()


def test_gpu_sh_jobs_wait_packs_checkpoints_the_runs_wrote_when_asked(tmp_path):
    """Jobs still running when jobs_wait packs: each run still training (metrics.jsonl, no summary.json) is asked
    for a checkpoint (`checkpoint.now`, rl/rundir.py) and the pack holds the one it wrote; a run that does not answer
    within SAVE_WAIT seconds is packed with its last one, and a run that has ended is not asked."""
    import tarfile
    import time

    from gbxcule.rl.rundir import SAVE_NOW_NAME

    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / ".ready").touch()
    env = {**os.environ, "GPU_ROOT": str(tmp_path / "gpu"), "OUT": str(tmp_path / "out"),
           "RUNS": str(tmp_path / "runs"), "PY": sys.executable}
    now = f"$JOB_OUT/r/{SAVE_NOW_NAME}"
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(
        f"[0] a: mkdir $JOB_OUT/r; touch $JOB_OUT/r/metrics.jsonl; echo old > $JOB_OUT/r/checkpoint.pt; "
        f"for i in $(seq 600); do [ -e {now} ] && echo new > $JOB_OUT/r/checkpoint.pt && rm {now}; "
        f"[ -e $JOB_OUT/go ] && break; sleep 0.1; done\n"
        f"[0] b: mkdir $JOB_OUT/r; touch $JOB_OUT/r/metrics.jsonl; echo old > $JOB_OUT/r/checkpoint.pt; "
        f"for i in $(seq 600); do [ -e $JOB_OUT/go ] && break; sleep 0.1; done\n"
        f"[0] c: mkdir $JOB_OUT/r; touch $JOB_OUT/r/metrics.jsonl $JOB_OUT/r/summary.json; "
        f"for i in $(seq 600); do [ -e $JOB_OUT/go ] && break; sleep 0.1; done\n")

    def gpu(*args):
        return subprocess.run(["bash", "scripts/gpu/gpu.sh", *args], cwd=ROOT, capture_output=True, text=True, env=env,
                              timeout=120)

    assert gpu("jobs_start", str(jobs)).returncode == 0
    runs = tmp_path / "runs" / "jobs"
    for _ in range(300):
        if all((runs / j / "r" / "metrics.jsonl").exists() for j in "abc"):
            break
        time.sleep(0.1)
    env["SAVE_WAIT"] = "3"
    r = gpu("jobs_wait", "1")
    assert r.returncode == 3 and "no new checkpoint within 3 s" in r.stdout, r.stdout + r.stderr
    with tarfile.open(tmp_path / "out" / "jobs.tgz") as t:
        assert t.extractfile("./a/r/checkpoint.pt").read() == b"new\n"  # asked, and written before the pack
        assert t.extractfile("./b/r/checkpoint.pt").read() == b"old\n"  # never answered: its last one
    assert not (runs / "c" / "r" / SAVE_NOW_NAME).exists()  # ended (a summary): not asked
    (runs / "b" / "r" / "summary.json").touch()  # b's training has ended
    r = gpu("jobs_wait", "1")
    assert r.returncode == 3 and "checkpoints written: 1 run(s)" in r.stdout, r.stdout + r.stderr
    for j in "abc":
        (runs / j / "go").touch()
    assert gpu("jobs_wait", "60").returncode == 0


def test_dev_sh_without_a_command_prints_its_usage():
    r = run(["bash", "scripts/dev.sh"])
    assert r.returncode == 2 and "dev.sh demo" in r.stderr and "dev.sh test" in r.stderr


def test_profile_step_names_every_step_kernel_variant():
    """--breakdown labels each step-kernel launch by the variant the backend launched (the modules the backend
    loads through gbxcule.kernels.step.load_kernels, cached): distinct names for lean/drawn x nested/flat."""
    sys.path.insert(0, str(ROOT / "scripts" / "profile"))
    try:
        profile_step = importlib.import_module("profile_step")
    finally:
        sys.path.remove(str(ROOT / "scripts" / "profile"))
    from gbxcule.kernels.step import load_kernels

    variants = [(False, False), (True, False), (False, True), (True, True)]
    names = profile_step.step_kernel_names("full_step", variants)
    assert len(set(names.values())) == 4
    assert names[id(load_kernels(None, "full_step", False, True).step_kernel)] == "step_kernel (lean, flat)"


def test_gpu_jobs_packs_jobs_onto_gpus_with_barriers(tmp_path):
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("# two GPUs\na: echo $CUDA_VISIBLE_DEVICES > $JOB_OUT/ids; sleep 1\n"
                    "[2] b: echo $CUDA_VISIBLE_DEVICES > $JOB_OUT/ids; exit 3\n---\nc: echo after > $JOB_OUT/ids\n")
    r = run([sys.executable, "scripts/gpu/gpu_jobs.py", str(jobs), "--out", str(tmp_path / "out"), "--gpus", "2"])
    assert r.returncode == 1, r.stderr  # job b failed; the others ran
    got = {n: (tmp_path / "out" / n / "ids").read_text().strip() for n in "abc"}
    assert got == {"a": "0", "b": "0,1", "c": "after"}  # b waited for both GPUs
    import json

    rows = {j["name"]: j for j in json.loads((tmp_path / "out" / "jobs.json").read_text())}
    assert rows["b"]["rc"] == 3 and rows["a"]["rc"] == 0 and list(rows) == ["a", "b", "c"]
    jobs.write_text("oops no colon here\n")
    r = run([sys.executable, "scripts/gpu/gpu_jobs.py", str(jobs), "--out", str(tmp_path / "o2"), "--gpus", "1"])
    assert r.returncode == 2 and "line 1" in r.stderr and r.stderr.count("\n") == 1


def test_gpu_jobs_nested_in_another_runner_use_its_gpus(tmp_path, monkeypatch):
    """A runner started on GPUs 5 and 7 (say by gpu_jobs.py, or bench_learning.py inside it) hands its jobs
    those GPUs, not the host's first ones."""
    jobs = tmp_path / "jobs.txt"
    echo = "echo $CUDA_VISIBLE_DEVICES > $JOB_OUT/ids"
    jobs.write_text(f"a: {echo}\n---\n[2] b: {echo}\n")
    r = subprocess.run([sys.executable, "scripts/gpu/gpu_jobs.py", str(jobs), "--out", str(tmp_path / "out")], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": "5,7"})
    assert r.returncode == 0, r.stderr
    assert [(tmp_path / "out" / n / "ids").read_text().strip() for n in "ab"] == ["5", "5,7"]
    from gbxcule.harness.bench import child_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert child_gpus([0]) == "3"
    with pytest.raises(GbxculeError, match="names 1"):
        child_gpus([1])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert child_gpus([1, 2]) == "1,2"


def test_bench_archive_cost_times_whole_step_limits():
    """`bench_archive.py cost` rounds its window up to whole step limits: the `off` variant's episodes all end on
    one step, and a shorter window could time it without any of its resets."""
    spec = importlib.util.spec_from_file_location("bench_archive", ROOT / "scripts/bench/bench_archive.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.whole_limits(None, 200) == 200
    assert mod.whole_limits(100, 200) == 200
    assert mod.whole_limits(201, 200) == 400
    assert mod.whole_limits(400, 200) == 400


def test_bench_archive_cost_variants_and_backend_options(capsys):
    """`bench_archive.py cost --variants` times a subset (in the fixed order) and `--backend` puts tuning options
    into every variant (gpu.sh ncu_cost: the sort tuner off so `off` and `spread` launch alike); bad values exit 2."""
    spec = importlib.util.spec_from_file_location("bench_archive", ROOT / "scripts/bench/bench_archive.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.backend_options("sort_parts=1,stream_groups=1,loop=nested") == {
        "sort_parts": 1, "stream_groups": 1, "loop": "nested"}
    with pytest.raises(argparse.ArgumentTypeError):
        mod.backend_options("sort_parts")
    opts = mod.cost_variants({"archive": {"capacity": 8}, "backend": {"sort_parts": 1}})
    assert all(v["backend_options"] == {"sort_parts": 1} for v in opts.values())
    assert "backend_options" not in mod.cost_variants({"archive": {"capacity": 8}})["spread"]
    host = mod.cost_variants({"archive": {"capacity": 8}})["host"]  # `archive` with the cells in host memory
    assert host["archive"] == {"capacity": 8, "store": "host"} and list(mod.COST_VARIANTS)[-1] == "host"
    args = argparse.Namespace(config=None, task="quest", backend={}, archive={"capacity": 99, "store": "host"})
    assert mod.env_section(args)["archive"] == {"capacity": 99, "store": "host"}  # --archive over the table
    for argv in (["cost", "--variants", "off,nope"], ["cost", "--backend", "sort_part=1"]):
        with mock.patch.object(sys, "argv", ["bench_archive.py", *argv, "--device", "cpu"]):
            assert mod.main() == 2
        assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.parametrize("example,blocked,needle", [
    ("examples/sb3_ppo.py", "stable_baselines3", "pip install -e '.[rl,sb3]'"),
    ("examples/pufferlib_train.py", "pufferlib", "bash scripts/install_pufferlib.sh"),
])
def test_an_example_without_its_extra_says_which_in_one_line(example, blocked, needle):
    """The README's venv has the rl extra only: an example that needs another says how to install it, in one
    line (it was a bare traceback)."""
    code = (f"import runpy, sys; sys.modules[{blocked!r}] = None; sys.argv = [{example!r}, '--smoke']; "
            f"runpy.run_path({example!r}, run_name='__main__')")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 1 and len(lines) == 1 and needle in lines[0], r.stderr


FAKE_PUFFERLIB = {  # PufferLib 3.0's import shape: pufferlib.spaces imports gym only to name its space classes
    "pufferlib/__init__.py": "__version__ = '3.0'\n",
    "pufferlib/spaces.py": "import gym\nimport gymnasium\nBox = (gym.spaces.Box, gymnasium.spaces.Box)\n",
    "pufferlib/vector.py": "import pufferlib.spaces\n",
}


def test_check_pufferlib_imports_it_as_gbxcule_does_and_says_so_in_one_line(tmp_path):
    """install_pufferlib.sh's last step: a bare `import pufferlib.vector` fails with "No module named 'gym'" after a
    good install (gbxcule never installs gym); the check imports it as gbxcule does, with gym's stand-in."""
    for name, text in FAKE_PUFFERLIB.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{tmp_path}"}
    if importlib.util.find_spec("gym") is None:
        bare = subprocess.run([sys.executable, "-c", "import pufferlib.vector"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        assert bare.returncode == 1 and "No module named 'gym'" in bare.stderr
    r = subprocess.run([sys.executable, "scripts/check_pufferlib.py", "--where", "v"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("pufferlib 3.0 ok in v") and not r.stderr, r.stdout + r.stderr
    (tmp_path / "pufferlib" / "vector.py").write_text("import pufferlib.missing_part\n")  # a broken install
    r = subprocess.run([sys.executable, "scripts/check_pufferlib.py"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=60)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 1 and len(lines) == 1 and "No module named 'pufferlib.missing_part'" in lines[0], r.stderr


def test_install_pufferlib_fails_in_one_line_naming_its_log(tmp_path):
    """A pip step that fails: one line (the step and the log with pip's output), exit 1, the build's .pth gone."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "python"  # its site-packages are in tmp_path; pip fails
    fake.write_text(f'#!/bin/sh\ncase "$*" in\n  *sysconfig*) echo {tmp_path / "site"} ;;\n'
                    f'  "-m pip"*) echo "pip: no network" >&2; exit 1 ;;\n  *) exec {sys.executable} "$@" ;;\nesac\n')
    fake.chmod(0o755)
    r = subprocess.run(["bash", "scripts/install_pufferlib.sh"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "GBXCULE_VENV": str(venv)})
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith("error: installing pufferlib's run-time dependencies failed (its output: ")
    log = Path(lines[0].rsplit("its output: ", 1)[1].rstrip(")"))
    assert "pip: no network" in log.read_text()
    log.unlink()
    assert not (tmp_path / "site").exists()


def _fake_run(folder: Path, seed: int, evals: list[float]) -> None:
    """A run folder as `gbxcule train` writes one: a periodic eval each update, the last at the final weights, each
    reporting 1.5 s of training after its weights were made (as an eval beside training does)."""
    import json

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"algo": "ppo", "env": {"num_envs": 8},
                                                    "run": {"seed": seed, "stop_at_success": None}}))
    (folder / "facts.json").write_text(json.dumps({"git": "0123456789abcdef", "gpu": "NVIDIA H200", "host": "box",
                                                   "started": "2026-11-29T10:00:00+0000"}))
    rows = [{"env_steps": 100 * (i + 1), "sps": 1000.0 + i, "wall_s": 2.0 * (i + 1), "eval/greedy_success": g,
             "eval/env_steps": 100 * (i + 1), "eval/wall_s": 2.0 * (i + 1) + 1.5, "eval/elapsed_s": 10.0 + 2 * (i + 1),
             "archive/start_held": [i * i % 7, 1, 0],  # envs from the task's start by milestones held: 1, 2, 5, 3, 3
             "archive/level_episodes": [4, i, 0], "archive/level_gains": [i % 2, i - 1 if i else 0, 0],
             "archive/entry_episodes": [0, 1, 0], "archive/entry_gains": [0, i % 2, 0],
             "archive/edge_weights": [8, 4 * i, 0], "archive/edge_won_weights": [2, i, 0],
             "episodes": 10 + i, "lives_lost": i, "entropy": 2.0 - 0.1 * i,
             "entropy_by_level": [1.0 + 0.1 * i, 0.5 + 0.1 * i, 0.0], "samples_by_level": [10, i, 0]}
            for i, g in enumerate(evals)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "summary.json").write_text(json.dumps({"wall_s": 2.0 * len(evals) + 3.0, "startup_s": 10.0,
                                                     "stopped": "done", "final_policy": {"source": "last"}}))
    (folder / "eval.json").write_text(json.dumps({"greedy": {"success_rate": evals[-1], "stuck_rate": 0.25,
                                                              "stuck_actions": {"up": 2},
                                                              "failed_at": {"5,1,9": 3}, "failed_at_cells":
                                                              ["0xC100", "0xC101", "0xC102"]},
                                                  "sampled": {"success_rate": 0.5, "mean_deepest": 1.25}}))


def test_summarize_writes_one_summary_json_per_figure(tmp_path):
    """scripts/bench/summarize.py on fabricated run folders and a bench JSON: the keys every summary has, each run's
    first eval at the target, its evals, final eval and median SPS, and the tree, machine and date they recorded."""
    import json

    _fake_run(tmp_path / "runs" / "a_s0", 0, [0.0, 0.95, 1.0, 0.875, 1.0])
    _fake_run(tmp_path / "runs" / "a_s1", 1, [0.0, 0.5, 0.25])
    bench = tmp_path / "ow.json"
    bench.write_text(json.dumps({"results": [{"envs": 64, "env_steps_per_s": 123.5}],
                                 "environment": {"git_sha": "fedcba9876543210", "host": "vm",
                                                 "date": "2026-11-20T01:02:03+0000"}}))
    root = tmp_path / "benchmarks"
    r = run([sys.executable, "scripts/bench/summarize.py", "--topic", "training", "--name", "fake_ppo", "--command",
             "gbxcule train --config x.toml", "--root", str(root), "--plot", str(tmp_path / "runs" / "a_s0"),
             str(tmp_path / "runs" / "a_s1")])
    assert r.returncode == 0, r.stderr
    data = json.loads((root / "training" / "fake_ppo.json").read_text())
    assert list(data) == ["figure", "command", "tree", "machine", "date", "numbers", "from"]
    assert (data["tree"], data["machine"], data["date"]) == ("0123456", "NVIDIA H200 (host box)", "2026-11-29")
    a, b = data["numbers"]["runs"]
    assert (a["seed"], a["num_envs"], a["target"], a["env_steps"], a["training_s"]) == (0, 8, 0.9, 500, 10.0)
    assert a["end_s"] == 13.0  # the run's end, after the evals it waited for once training had stopped
    # an eval beside training reports after its weights were made: both times are kept
    assert a["to_target"] == {"elapsed_s": 14.0, "training_s": 5.5, "weights_training_s": 4.0, "env_steps": 200}
    assert a["greedy_evals"] == [0.0, 0.95, 1.0, 0.875, 1.0] and a["final_greedy"] == 1.0 and a["final_sampled"] == 0.5
    # the evals after the first at the target: how a run that trained on past success held it
    assert a["after_target"] == {"evals": 3, "min_greedy": 0.875, "env_steps_past": 300}
    assert a["sps_median"] == 1003.0 and a["final_policy"] == {"source": "last"}  # the first two updates left out
    assert a["config"] == {"algo": "ppo", "env": {"num_envs": 8}}  # the setup it trained, less the harness's run keys
    assert a["final_greedy_stuck"] == 0.25  # the failed greedy episodes that ended on a still screen
    assert a["final_greedy_stuck_actions"] == {"up": 2}  # and what they kept pressing
    assert a["final_greedy_failed_at"] == {"cells": ["0xC100", "0xC101", "0xC102"], "places": {"5,1,9": 3}}
    # the sampled episodes' mean deepest milestone (the fake greedy eval reports none, so it has no entry)
    assert a["final_sampled_deepest"] == 1.25 and "final_greedy_deepest" not in a
    # envs from the start over the 8 at walls 2..10 s: 1, 2, 5, 3, 3 (a run under 100 s: the default skips all)
    assert "from_start_share" not in a
    spec = importlib.util.spec_from_file_location("summarize", ROOT / "scripts/bench/summarize.py")
    summarize = importlib.util.module_from_spec(spec)
    with mock.patch.object(sys, "path", [str(ROOT / "scripts/bench"), *sys.path]):  # it imports bench_learning
        spec.loader.exec_module(summarize)
    share = summarize.from_start_share(tmp_path / "runs" / "a_s0", {"env": {"num_envs": 8}}, after_s=3.0)
    assert share == {"median": 0.375, "min": 0.25, "max": 0.625}  # walls 4-10 s: 2, 5, 3, 3 of 8 (the mean: 0.406)
    share = summarize.from_start_share(tmp_path / "runs" / "a_s0", {"env": {"num_envs": 8}}, after_s=4.0)
    assert share == {"median": 0.375, "min": 0.375, "max": 0.625}  # after 4 s, not at it
    assert summarize.from_start_share(tmp_path / "runs" / "a_s0", {"env": {}}) is None
    # the cells' episodes by the milestones their start held over the last 5 s (walls 6, 8, 10 s: i = 2, 3, 4)
    assert summarize.level_gains(tmp_path / "runs" / "a_s0", last_s=5.0) == {
        "last_s": 5.0, "episodes": [12, 9, 0], "gained": [0.083, 0.667, None]}  # 1 of 12; 1 + 2 + 3 of 2 + 3 + 4
    assert a["level_gains"]["episodes"] == [20, 10, 0]  # the default minute: every update
    assert a["entry_gains"] == {"last_s": 60.0, "episodes": [0, 5, 0], "gained": [None, 0.4, None]}  # from entry cells
    # the edge's weight by level over the minute (8 x 5; 4 x (0 + 1 + 2 + 3 + 4)) and its share on winning cells
    assert a["edge_won"] == {"last_s": 60.0, "weight": [40, 40, 0], "share_won": [0.25, 0.25, None]}
    assert summarize.lives_lost(tmp_path / "runs" / "a_s0", last_s=5.0) == {  # walls 6, 8, 10 s: i = 2, 3, 4
        "total": 10, "episodes": 60, "last_s": 5.0, "last": 9, "last_episodes": 39}
    # each level's over its samples (walls 6, 8, 10 s: level 1's 0.7, 0.8, 0.9 over 2, 3, 4 samples), None without
    assert summarize.entropy(tmp_path / "runs" / "a_s0", last_s=5.0) == {
        "first": 2.0, "last_s": 5.0, "last": 1.7, "last_by_level": [1.3, 0.822, None]}
    assert a["entropy"] == {"first": 2.0, "last_s": 60.0, "last": 1.8,  # the default minute: every update
                            "last_by_level": [1.2, 0.8, None]}  # level 1: (0.6 + 1.4 + 2.4 + 3.6) / 10
    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "scripts/bench/bench_learning.py")
    bench_learning = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_learning)
    row = bench_learning.read_run(tmp_path / "runs" / "a_s0", 0.9)  # its table's final columns
    assert (row["final_eval_sampled"], row["final_eval_stuck"]) == (0.5, 0.25)
    assert row["final_eval_failed_at"] == {"5,1,9": 3}
    assert b["to_target"] is None and b["after_target"] is None
    assert b["best_greedy"] == 0.5 and b["final_greedy"] == 0.25
    assert (root / "training" / "fake_ppo.png").stat().st_size > 1000

    r = run([sys.executable, "scripts/bench/summarize.py", "--topic", "emulator", "--name", "overworld", "--command",
             "gbxcule bench", "--root", str(root), "--machine", "one H100", str(bench)])
    assert r.returncode == 0, r.stderr
    data = json.loads((root / "emulator" / "overworld.json").read_text())
    assert data["numbers"] == {"ow": {"results": [{"envs": 64, "env_steps_per_s": 123.5}]}}
    assert (data["tree"], data["machine"], data["date"]) == ("fedcba9", "one H100", "2026-11-20")

    for t in ("c", "d", "e", "f", "g", "h"):
        (root / t).mkdir()
    r = run([sys.executable, "scripts/bench/summarize.py", "--topic", "ninth", "--name", "x", "--command", "c",
             "--root", str(root), str(bench)])
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "8 folders" in r.stderr
    (tmp_path / "nofacts").mkdir()
    (tmp_path / "nofacts" / "metrics.jsonl").write_text('{"env_steps": 1, "sps": 1.0}\n')
    r = run([sys.executable, "scripts/bench/summarize.py", "--topic", "training", "--name", "y", "--command", "c",
             "--root", str(root), str(tmp_path / "nofacts")])
    assert r.returncode == 1 and "give --tree" in r.stderr


def test_bench_learning_evaluates_the_kept_policies_and_the_summary_keeps_their_rates(tmp_path):
    """--policy-evals: one greedy `gbxcule eval` per policy a run kept (by mark, not name order), each report read
    from its JSON file (a Warp line before it, an eval that failed: null figures), and the summary keeps them."""
    import json
    import types

    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "scripts/bench/bench_learning.py")
    bench_learning = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_learning)
    run_dir = tmp_path / "runs" / "a_s0"
    _fake_run(run_dir, 0, [0.0, 0.5])
    (run_dir / "policies").mkdir()
    for name in ("policy_900s.pt", "policy_300s.pt", "policy_1200s.pt", "policy.pt", "policy_xs.pt"):
        (run_dir / "policies" / name).write_bytes(b"")
    args = types.SimpleNamespace(episodes=32, gpus=1, sampled_evals=False)
    cmds = bench_learning.policy_eval_commands(args, run_dir)
    assert [out.name for _, out in cmds] == ["300s.json", "900s.json", "1200s.json"]
    cmd = cmds[0][0]
    assert cmd[1:4] == ["-m", "gbxcule", "eval"] and cmd[4].endswith("policy_300s.pt")
    assert cmd[5:] == ["--greedy-only", "--json", "--episodes", "32", "--device", "cuda"]
    (run_dir / "policy_evals").mkdir()
    (run_dir / "policy_evals" / "300s.json").write_text(
        "Warp 1.0 initialized\n" + json.dumps({"env_steps_trained": 1000, "greedy": {"success_rate": 0.25,
                                                                                    "mean_deepest": 3.5}}) + "\n")
    (run_dir / "policy_evals" / "900s.json").write_text(json.dumps({"env_steps_trained": 3000,
                                                                   "greedy": {"success_rate": 1.0}}) + "\n")
    (run_dir / "policy_evals" / "1200s.json").write_text("")  # it failed
    rates = [{"mark_s": 300, "env_steps": 1000, "greedy": 0.25, "mean_deepest": 3.5},
             {"mark_s": 900, "env_steps": 3000, "greedy": 1.0, "mean_deepest": None},
             {"mark_s": 1200, "env_steps": None, "greedy": None, "mean_deepest": None}]
    assert bench_learning.read_run(run_dir, 0.9)["policy_evals"] == rates
    # the first kept weights at the target, by mark (the time to it where periodic evals are off)
    assert [bench_learning.read_run(run_dir, t)["to_target_mark_s"] for t in (0.2, 0.9, 1.0)] == [300, 900, 900]
    assert bench_learning.read_run(run_dir, 0.0)["to_target_mark_s"] == 300  # a failed eval (1200 s) never counts
    for p in (run_dir / "policies").iterdir():  # brought back without its weights: the reports name the marks
        p.unlink()
    assert bench_learning.read_run(run_dir, 0.9)["policy_evals"] == rates
    root = tmp_path / "benchmarks"
    r = run([sys.executable, "scripts/bench/summarize.py", "--topic", "tasks", "--name", "q", "--command", "c",
             "--root", str(root), str(run_dir)])
    assert r.returncode == 0, r.stderr
    entry = json.loads((root / "tasks" / "q.json").read_text())["numbers"]["runs"][0]
    assert entry["policy_evals"] == rates and entry["to_target_mark_s"] == 900
    # --segments: bench_segments.py on the final policy, once it exists, beside the policy evals; its report read
    assert bench_learning.segment_command(types.SimpleNamespace(episodes=32, gpus=1, segments=False), run_dir) == []
    args = types.SimpleNamespace(episodes=16, gpus=0, segments=True, sampled_evals=False)
    [(cmd, table)] = bench_learning.segment_command(args, run_dir)
    assert cmd[1].endswith("bench_segments.py") and cmd[2:] == [str(run_dir), "--episodes", "16", "--device", "cpu",
                                                                "--out", str(run_dir / "segments.json")]
    assert table == run_dir / "segments.txt"
    assert bench_learning.read_run(run_dir, 0.9)["segments"] == {}
    (run_dir / "segments.json").write_text(json.dumps({"policies": {str(run_dir): {
        "quest:quest_m1": {"greedy": 1.0, "mean_deepest": 1.0}, "quest:quest_m2": {"greedy": 0.0,
                                                                                   "mean_deepest": 1.0}}}}))
    segs = {"quest_m1": {"greedy": 1.0, "mean_deepest": 1.0}, "quest_m2": {"greedy": 0.0, "mean_deepest": 1.0}}
    assert bench_learning.read_run(run_dir, 0.9)["segments"] == segs
    r = run([sys.executable, "scripts/bench/summarize.py", "--topic", "tasks", "--name", "q2", "--command", "c",
             "--root", str(root), str(run_dir)])
    assert r.returncode == 0, r.stderr
    assert json.loads((root / "tasks" / "q2.json").read_text())["numbers"]["runs"][0]["segments"] == segs


_FAKE_TRAIN = """
import pathlib, sys, time
run, wait = pathlib.Path(sys.argv[1]), float(sys.argv[2])
(run / "policies").mkdir(parents=True)
(run / "policies" / "policy_1s.pt").write_bytes(b"")
report, t0 = run / "policy_evals" / "1s.json", time.time()
while not (report.is_file() and report.read_text().strip()) and time.time() - t0 < wait:
    time.sleep(0.05)
(run / "seen.txt").write_text(str(report.is_file() and bool(report.read_text().strip())))
(run / "policies" / "policy_2s.pt").write_bytes(b"")
"""


@pytest.mark.parametrize("on_cpu", [True, False])
def test_bench_learning_policy_evals_cpu_start_each_eval_while_its_run_trains(tmp_path, monkeypatch, on_cpu):
    """--policy-evals-cpu: a kept policy's eval starts on the CPU, one thread, while its run trains on (the fake run
    waits for its first report before it keeps its last weights and ends), the last one's once the run ends; without
    it every eval starts once the run ends. Each report lands in its mark's file either way."""
    import json
    import types

    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "scripts/bench/bench_learning.py")
    bench_learning = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_learning)
    gpu_args = types.SimpleNamespace(episodes=8, gpus=1, sampled_evals=False, policy_evals_cpu=True)
    real = bench_learning.policy_eval_commands
    (tmp_path / "p" / "policies").mkdir(parents=True)
    (tmp_path / "p" / "policies" / "policy_60s.pt").write_bytes(b"")
    assert real(gpu_args, tmp_path / "p")[0][0][-2:] == ["--device", "cpu"]  # on the CPU though the runs have GPUs
    assert real(gpu_args, tmp_path / "p", {60}) == []  # a mark whose eval started is not started again

    assert real(gpu_args, tmp_path / "p", ended=True)[0][0][-2:] == ["--device", "cuda"]  # the run's GPUs, free now

    def fake(args, run_dir, started=frozenset(), ended=False):  # the real commands' reports, each saying where it ran
        report = ("import json, os, sys; "
                  "print(json.dumps({'device': sys.argv[1], 'threads': os.environ.get('OMP_NUM_THREADS')}))")
        return [([sys.executable, "-c", report, cmd[cmd.index("--device") + 1]], path)
                for cmd, path in real(args, run_dir, started, ended)]

    monkeypatch.setattr(bench_learning, "policy_eval_commands", fake)
    run_dir = tmp_path / "out" / "a_s0"
    run_dir.parent.mkdir()
    args = types.SimpleNamespace(gpus=0, jobs_per_gpu=1, policy_evals=True, policy_evals_cpu=on_cpu, episodes=8,
                                 sampled_evals=False, segments=False)
    job = {"name": "a", "seed": 0, "gpus": 1, "dir": run_dir,
           "cmd": [sys.executable, "-c", _FAKE_TRAIN, str(run_dir), "30" if on_cpu else "2"]}
    bench_learning.run_jobs(args, [job])
    assert (run_dir / "seen.txt").read_text() == str(on_cpu)
    threads = "1" if on_cpu else os.environ.get("OMP_NUM_THREADS")
    for mark in (1, 2):
        assert json.loads((run_dir / "policy_evals" / f"{mark}s.json").read_text()) == {"device": "cpu",
                                                                                       "threads": threads}


def test_bench_learning_resumes_a_run_brought_back_with_its_checkpoint(tmp_path, monkeypatch):
    """A run folder with a checkpoint and no summary (a lost machine's, from gpu.sh jobs_resume) resumes with the
    training seconds its checkpoint has not had (and no setup flags, which a resume may not change); a finished one
    or a fresh folder starts anew; a damaged checkpoint gets the whole limit, for the resume to refuse in its log. Its
    kept policies whose evals reported are not evaluated again."""
    import types

    import torch

    from gbxcule.rl.rundir import CHECKPOINT_FORMAT

    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "scripts/bench/bench_learning.py")
    bench_learning = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_learning)
    args = types.SimpleNamespace(eval_every=1000, episodes=8, keep_training=False, target=0.5, gpus=1,
                                 time_limit=1200.0)
    run_dir = tmp_path / "q_s0"
    fresh = bench_learning.job_command(args, "--config c.toml --set a.b=1", 3, run_dir)
    assert fresh[3:] == ["train", "--config", "c.toml", "--set", "a.b=1", "--seed", "3", "--run-dir", str(run_dir),
                         "--time-limit", "1200.0", "--eval-every", "1000", "--eval-episodes", "8", "--stop-at-success",
                         "0.5", "--no-progress", "--device", "cuda"]
    run_dir.mkdir()
    torch.save({"format": CHECKPOINT_FORMAT, "model": {}, "config": {}, "wall_s": 1031.25}, run_dir / "checkpoint.pt")
    resumed = bench_learning.job_command(args, "--config c.toml --set a.b=1", 3, run_dir)
    assert resumed[3:] == ["train", "--resume", str(run_dir), "--time-limit", "168.8", *fresh[-9:]]
    (run_dir / "checkpoint.pt").write_bytes(b"torn")
    assert bench_learning.job_command(args, "", 3, run_dir)[6:8] == ["--time-limit", "1200.0"]
    (run_dir / "summary.json").write_text("{}")
    assert "--resume" not in bench_learning.job_command(args, "", 3, run_dir)
    # the reports already in its policy_evals/ are not run again (an empty one, an eval the machine took, is)
    (run_dir / "summary.json").unlink()
    (run_dir / "policies").mkdir()
    (run_dir / "policy_evals").mkdir()
    for mark in (300, 600, 900):
        (run_dir / "policies" / f"policy_{mark}s.pt").write_bytes(b"")
    (run_dir / "policy_evals" / "300s.json").write_text('{"greedy": {"success_rate": 0.0}}\n')
    (run_dir / "policy_evals" / "900s.json").write_text("")
    started = []

    def fake(a, d, done=frozenset(), ended=False):
        started.append(sorted(done))
        return []

    monkeypatch.setattr(bench_learning, "policy_eval_commands", fake)
    job = {"name": "q", "seed": 0, "gpus": 1, "dir": run_dir, "cmd": [sys.executable, "-c", "pass"]}
    bench_learning.run_jobs(types.SimpleNamespace(gpus=0, jobs_per_gpu=1, policy_evals=True, policy_evals_cpu=False,
                                                  episodes=8, sampled_evals=False, segments=False), [job])
    assert started and started[0] == [300]


def test_bench_learning_sampled_evals_play_both_and_keep_both_rates(tmp_path):
    """--sampled-evals: the kept policies' evals drop --greedy-only and the segments add --sampled; a report's sampled
    success and deepest milestone join its mark's rates (and only where the report has them)."""
    import json
    import types

    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "scripts/bench/bench_learning.py")
    bench_learning = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_learning)
    run_dir = tmp_path / "runs" / "a_s0"
    _fake_run(run_dir, 0, [0.0])
    (run_dir / "policies").mkdir()
    for name in ("policy_300s.pt", "policy_600s.pt"):
        (run_dir / "policies" / name).write_bytes(b"")
    args = types.SimpleNamespace(episodes=8, gpus=0, segments=True, sampled_evals=True)
    cmds = bench_learning.policy_eval_commands(args, run_dir)
    assert [c[5:] for c, _ in cmds] == [["--json", "--episodes", "8", "--device", "cpu"]] * 2
    [(seg, _)] = bench_learning.segment_command(args, run_dir)
    assert seg[2:6] == [str(run_dir), "--episodes", "8", "--sampled"]
    (run_dir / "policy_evals").mkdir()
    (run_dir / "policy_evals" / "300s.json").write_text(json.dumps({
        "env_steps_trained": 10, "greedy": {"success_rate": 0.0, "mean_deepest": 3.0},
        "sampled": {"success_rate": 0.5, "mean_deepest": 5.0}}) + "\n")
    (run_dir / "policy_evals" / "600s.json").write_text(json.dumps({
        "env_steps_trained": 20, "greedy": {"success_rate": 1.0, "mean_deepest": 11.0}}) + "\n")
    assert bench_learning.read_run(run_dir, 0.9)["policy_evals"] == [
        {"mark_s": 300, "env_steps": 10, "greedy": 0.0, "mean_deepest": 3.0, "sampled": 0.5, "sampled_deepest": 5.0},
        {"mark_s": 600, "env_steps": 20, "greedy": 1.0, "mean_deepest": 11.0}]


def test_summarize_splits_the_env_phase_by_whether_an_eval_beside_training_was_in_flight(tmp_path):
    """With run.eval_background, each run's median env phase an update with an eval in flight (from the update after
    its weights' through the one that logged it) and without; an eval training waited for counts as none."""
    import json

    folder = tmp_path / "bg_s0"
    _fake_run(folder, 0, [0.0])
    cfg = json.loads((folder / "config.json").read_text())
    cfg["run"]["eval_background"] = True
    (folder / "config.json").write_text(json.dumps(cfg))
    env_s = [9.0, 9.0, 9.0, 1.0, 3.0, 3.5, 1.0, 1.2, 4.0, 1.0]  # updates 4-10: the first three left out
    walls = [9.0, 18.0, 27.0, 28.0, 29.0, 30.0, 31.0, 33.0, 35.0, 37.0]  # updates of 9 s, then 1 s four times, then 2 s
    rows = [{"env_steps": 100 * (i + 1), "sps": 1.0, "wall_s": w, "time_env_s": t}
            for i, (w, t) in enumerate(zip(walls, env_s, strict=True))]
    for i, at in ((5, 400), (8, 800), (9, 900)):  # in flight in updates 5 and 6, then 9; the last waited for
        rows[i].update({"eval/greedy_success": 0.0, "eval/env_steps": at, "eval/wall_s": rows[i]["wall_s"],
                        "eval/elapsed_s": rows[i]["wall_s"] + 10.0})
    rows[9]["time_eval_s"] = 5.0
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    root = tmp_path / "benchmarks"
    r = run([sys.executable, "scripts/bench/summarize.py", "--topic", "tasks", "--name", "bg", "--command", "c",
             "--root", str(root), str(folder)])
    assert r.returncode == 0, r.stderr
    (entry,) = json.loads((root / "tasks" / "bg.json").read_text())["numbers"]["runs"]
    assert entry["env_phase"] == {"with_eval": {"updates": 3, "env_s_median": 3.5},
                                  "without": {"updates": 4, "env_s_median": 1.0}}
    # both medians over updates 4-10: 1, 1, 1, 1, 2, 2, 2 s long (over 5-10 it would be 1.5 s)
    assert entry["phases"] == {"updates": 7, "update_s": 1.0, "env_s": 1.2}
    cfg["run"]["eval_background"] = False
    (folder / "config.json").write_text(json.dumps(cfg))
    r = run([sys.executable, "scripts/bench/summarize.py", "--topic", "tasks", "--name", "bg", "--command", "c",
             "--root", str(root), str(folder)])
    assert "env_phase" not in json.loads((root / "tasks" / "bg.json").read_text())["numbers"]["runs"][0]


def test_summarize_gives_each_milestones_first_reach_in_the_tasks_chain_order(tmp_path):
    """A run whose updates logged milestone_episodes: the summary names each milestone by the task pack's chain
    order with the seconds and env-steps of the first update whose ended episodes held it; unreached ones are left
    out."""
    import json

    folder = tmp_path / "q_s0"
    _fake_run(folder, 0, [0.0, 0.0])
    cfg = json.loads((folder / "config.json").read_text())
    cfg.setdefault("env", {})["task"] = "quest"
    (folder / "config.json").write_text(json.dumps(cfg))
    held = [[0] * 11, [3] + [0] * 10, [5, 0, 1] + [0] * 8, [9, 2, 4] + [0] * 8]
    (folder / "metrics.jsonl").write_text("".join(
        json.dumps({"env_steps": 100 * (i + 1), "wall_s": 2.0 * (i + 1), "sps": 1.0, "milestone_episodes": h}) + "\n"
        for i, h in enumerate(held)))
    root = tmp_path / "benchmarks"
    r = run([sys.executable, "scripts/bench/summarize.py", "--topic", "tasks", "--name", "q", "--command", "c",
             "--root", str(root), str(folder)])
    assert r.returncode == 0, r.stderr
    run_entry = json.loads((root / "tasks" / "q.json").read_text())["numbers"]["runs"][0]
    assert run_entry["milestone_first"] == {"MOM": [4.0, 200], "ELDER": [8.0, 400], "CLUB": [6.0, 300]}
    assert list(run_entry["milestone_first"]) == ["MOM", "ELDER", "CLUB"]


def _tiny_run(folder, task: str, env=None, ppo=None):
    """A run folder of a tiny PPO run (16 env-steps on the CPU device) on `task` (more `env` and `ppo` settings)."""
    from gbxcule.rl.training import make_config, train

    train(make_config(None, {"total_steps": 16, "env": {"num_envs": 2, "task": task, **(env or {})},
                             "ppo": {"rollout_steps": 4, "epochs": 1, "minibatches": 1, "model": "small",
                                     **(ppo or {})},
                             "run": {"run_dir": str(folder), "device": "cpu", "progress": False, "evals": 0,
                                     "eval_episodes": 0, "tensorboard": False}}))
    return folder


def test_bench_segments_evaluates_a_policy_on_each_segment_task_of_its_pack(tmp_path, capsys):
    """scripts/bench/bench_segments.py: a run's segment tasks are its pack's `<task>_m<N>` in N order (m10 after m9;
    a built-in pack or a pack file); each is evaluated greedy as `gbxcule eval` does it; a task with no segment
    tasks, or a bad source, is one line and exit status 1."""
    import json

    pytest.importorskip("torch")
    from gbxcule.rl.training import evaluate

    spec = importlib.util.spec_from_file_location("bench_segments", ROOT / "scripts/bench/bench_segments.py")
    seg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seg)
    assert seg.segment_tasks("quest") == [f"quest:quest_m{i}" for i in range(1, 12)]
    assert seg.segment_tasks("leave_house") == []
    pack = tmp_path / "walk.toml"
    pack.write_text('[pack]\nname = "w"\nrom = "OVERWORLD"\n'
                    + "".join(f'[tasks.{n}]\ngoal_ram = [{{ addr = 0xC100, value = 2 }}]\n'
                              for n in ("walk", "walk_m10", "walk_m2", "walkx_m1", "walk_m1", "walk_mx", "other")))
    assert seg.segment_tasks(f"{pack}:walk") == [f"{pack}:walk_m1", f"{pack}:walk_m2", f"{pack}:walk_m10"]

    run_dir = tmp_path / "run"
    _tiny_run(run_dir, "quest")
    out = tmp_path / "segments.json"
    assert seg.main([str(run_dir), "--tasks", "quest_m5", "quest_m1", "--episodes", "2", "--device", "cpu",
                     "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    rows = got["policies"][str(run_dir)]
    assert list(rows) == ["quest_m5", "quest_m1"] and got["episodes"] == 2 and got["environment"]["host"]
    want = evaluate(run_dir, episodes=2, device="cpu", task="quest_m5", modes=("greedy",))["greedy"]
    assert rows["quest_m5"] == {"greedy": want["success_rate"], "mean_deepest": want["mean_deepest"]}
    assert 4 <= rows["quest_m5"]["mean_deepest"] <= 5  # its start holds the four milestones before CAVE
    assert "quest_m5" in capsys.readouterr().out

    lh = tmp_path / "lh"
    _tiny_run(lh, "leave_house")
    for source, needle in ((lh, "'leave_house' has no segment tasks"), (tmp_path / "nothing", "nothing")):
        r = run([sys.executable, "scripts/bench/bench_segments.py", str(source), "--device", "cpu", "--out",
                 str(tmp_path / "x.json")])
        lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith(("Warp", "Module"))]
        assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], \
            r.stderr
    assert not (tmp_path / "x.json").exists()


def test_bench_segments_along_plays_from_points_of_each_segments_solution(tmp_path, capsys):
    """bench_segments.py --along K: from every K-th step of a task's solution (its start script and that many
    solution steps, the rest of the solution its own, the --steps limit): the rest of the solution wins from each
    such start, so each is the state that far along; each point's greedy (and with --sampled sampled) success is in
    the JSON and the table; a bad K or --steps, or a task without a solution, is one line and exit status 1."""
    import json

    torch = pytest.importorskip("torch")
    from gbxcule.rl.env import GameEnv
    from gbxcule.rl.tasks import load_task

    spec = importlib.util.spec_from_file_location("bench_segments", ROOT / "scripts/bench/bench_segments.py")
    seg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seg)
    base = load_task("quest_m2")
    points = seg.along_tasks("quest_m2", 10, 40)
    assert [j for j, _ in points] == list(range(0, len(base.solution), 10)) and len(points) >= 3
    for j, task in points:
        assert task.start.script == base.start.script + base.solution[:j] and task.step_limit == 40
        assert task.solution == base.solution[j:]
    j, task = points[2]  # the rest of the solution from 20 steps in reaches ELDER (its flag is set at 30)
    env = GameEnv(num_envs=1, task=task)
    env.reset(seed=0)
    assert not bool(env.milestones[1, 0])
    won = False
    for a in task.solution:
        _, _, term, trunc, _ = env.step(torch.tensor([a]))
        won = won or bool(env.final_success[0] if (term | trunc)[0] else False)
    assert won
    assert seg.along_tasks("quest_m2", 10, None)[0][1].step_limit == base.step_limit

    run_dir = tmp_path / "run"
    _tiny_run(run_dir, "quest")
    out = tmp_path / "along.json"
    assert seg.main([str(run_dir), "--tasks", "quest_m1", "--episodes", "2", "--device", "cpu", "--along", "8",
                     "--steps", "24", "--sampled", "--out", str(out)]) == 0
    row = json.loads(out.read_text())["policies"][str(run_dir)]["quest_m1"]
    assert list(row["along"]) == ["0", "8"] and set(row) == {"greedy", "mean_deepest", "sampled", "along"}
    for v in row["along"].values():
        assert set(v) == {"greedy", "sampled"} and all(x is None or 0 <= x <= 1 for x in v.values())
    assert "quest_m1 from steps 0, 8:" in capsys.readouterr().out
    for args, needle in ((["--along", "0"], "must be >= 1"), (["--along", "4", "--steps", "0"], "must be >= 1"),
                         (["--steps", "9"], "give --along too")):
        r = run([sys.executable, "scripts/bench/bench_segments.py", str(run_dir), "--device", "cpu", "--episodes",
                 "1", "--out", str(tmp_path / "x.json"), "--tasks", "quest_m1", *args])
        lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith(("Warp", "Module"))]
        assert r.returncode == 1 and len(lines) == 1 and needle in lines[0], r.stderr
    assert not (tmp_path / "x.json").exists()
    nosol = tmp_path / "n.toml"
    nosol.write_text('[pack]\nname = "n"\nrom = "OVERWORLD"\n[tasks.a]\ngoal_ram = [{ addr = 0xC100, value = 2 }]\n')
    from gbxcule.core.errors import GbxculeError

    with pytest.raises(GbxculeError, match="no solution to start along"):
        seg.along_tasks(f"{nosol}:a", 4, None)


def test_bench_segments_trace_plays_greedy_from_the_start_and_folds_a_stall(tmp_path, capsys):
    """bench_segments.py --trace N: greedy from the task's start, at each step the place (the pack's cells bytes, read
    live), the greedy action and the four likeliest with their probabilities (exact for a policy that acts by its
    head's bias alone); the table folds a run of one place and one action into a line with its count, and a cycle of
    places and actions repeated back to back into a line with its period and count; N < 1 is one line and exit status
    1."""
    import json

    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("bench_segments", ROOT / "scripts/bench/bench_segments.py")
    seg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seg)
    run_dir = _tiny_run(tmp_path / "run", "quest")
    ck = torch.load(run_dir / "policy.pt", weights_only=False)
    ck["model"]["pi.weight"].zero_()
    traces = {}
    for name, bias in (("b", [0.1, 0.2, 3.0, 0.3, 2.0, 1.0, 0.4, 0.5]), ("down", [0.1, 0.2, 0.3, 0.4, 1.0, 3.0, 0.5,
                                                                                  0.6])):
        ck["model"]["pi.bias"].copy_(torch.tensor(bias))
        torch.save(ck, tmp_path / f"{name}.pt")
        out = tmp_path / f"{name}.json"
        assert seg.main([str(tmp_path / f"{name}.pt"), "--tasks", "quest_m2", "--episodes", "1", "--device", "cpu",
                         "--trace", "12", "--out", str(out)]) == 0
        traces[name] = json.loads(out.read_text())["policies"][str(tmp_path / f"{name}.pt")]["quest_m2"]["trace"]
    probs = torch.tensor([0.1, 0.2, 3.0, 0.3, 2.0, 1.0, 0.4, 0.5]).softmax(0)
    b = traces["b"]
    assert len(b) == 12 and all(len(x["at"]) == 3 and x["greedy"] == "b" for x in b)
    assert list(b[0]["top"]) == ["b", "up", "down", "right"]
    assert b[0]["top"]["up"] == pytest.approx(float(probs[4]), abs=1e-3)
    assert len({tuple(x["at"]) for x in b}) == 1  # B moves nobody: one place throughout
    place = ",".join(map(str, b[0]["at"]))
    assert f"  0-11 ({place}) b x12: b " in capsys.readouterr().out
    down = traces["down"]
    assert down[0]["at"] == b[0]["at"] and len({tuple(x["at"]) for x in down}) > 1  # walking down moves the place
    step = {"at": [1, 2], "greedy": "b", "top": {"b": 0.5, "up": 0.25}}
    moved = {**step, "at": [1, 3]}
    assert seg.fold([step, step, step, moved, {**moved, "greedy": "up"}]) == [
        "0-2 (1,2) b x3: b 0.50 up 0.25", "3 (1,3) b x1: b 0.50 up 0.25", "4 (1,3) up x1: b 0.50 up 0.25"]
    back = {"at": [1, 2], "greedy": "up", "top": {"up": 0.6, "b": 0.3}}  # to and fro: a cycle of 2, then 3
    there = {**back, "at": [1, 3], "greedy": "down", "top": {"down": 0.7, "up": 0.2}}
    third = {**back, "at": [1, 4]}
    assert seg.fold([step, back, there, back, there, back, there, back, step, back, third, step, back, third,
                     step]) == [
        "0 (1,2) b x1: b 0.50 up 0.25",
        "1-6 cycle of 2 x3: (1,2) up: up 0.60 > b 0.30; (1,3) down: down 0.70 > up 0.20",
        "7 (1,2) up x1: up 0.60 b 0.30", "8-13 cycle of 3 x2: (1,2) b: b 0.50 > up 0.25; (1,2) up: up 0.60 > b 0.30; "
        "(1,4) up: up 0.60 > b 0.30", "14 (1,2) b x1: b 0.50 up 0.25"]
    assert seg.fold([step, step, back, back]) == ["0-1 (1,2) b x2: b 0.50 up 0.25", "2-3 (1,2) up x2: up 0.60 b 0.30"]
    loop = [{**back, "at": [1, x]} for x in range(12)]  # round a loop of 12 places, twice: the eval's ring sees it
    folded = seg.fold(loop * 2 + [step])
    assert len(folded) == 2 and folded[0].startswith("0-23 cycle of 12 x2: (1,0) up: ") and folded[0].count(";") == 11
    from gbxcule.rl.evaluate import CYCLE_STEPS
    assert seg.CYCLE_MAX == CYCLE_STEPS
    assert seg.trace(str(tmp_path / "b.pt"), "quest_m2", "auto", 3) == b[:3]  # "auto" resolved, the start exact
    gru = _tiny_run(tmp_path / "gru", "quest", None, {"gru": 8})  # a recurrent state made on the resolved device
    assert len(seg.trace(str(gru), "quest_m2", "auto", 3)) == 3 and seg.follow(str(gru), "quest_m2", "auto", False,
                                                                              True)["0"]["agree"]
    r = run([sys.executable, "scripts/bench/bench_segments.py", str(run_dir), "--device", "cpu", "--tasks",
             "quest_m2", "--trace", "0", "--out", str(tmp_path / "x.json")])
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith(("Warp", "Module"))]
    assert r.returncode == 1 and len(lines) == 1 and "--trace must be >= 1" in lines[0], r.stderr


def test_bench_segments_flags_and_agree_follow_the_solution_in_one_episode(tmp_path, capsys):
    """bench_segments.py --flags: at each step of a task's solution, played in one episode, the total variation
    between the policy's actions on the observation and on it with the newest shown milestone cleared: exactly 0 for
    the cropped torso (which never sees the row), above 0 for a fresh full-view policy, None where no milestone is
    held; without shown milestones, or on a task without a solution, it is one line. --agree: the greedy action and
    the probability of the solution's next one, exact for a policy that acts by its head's bias alone; a recurrent
    policy's state is carried along the solution, not fresh at each step."""
    import json

    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("bench_segments", ROOT / "scripts/bench/bench_segments.py")
    seg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seg)
    from gbxcule.rl.tasks import load_task

    shown = {"show_milestones": "auto"}
    tv = {}
    for view in ("full", "cropped"):
        run_dir = _tiny_run(tmp_path / view, "quest", shown, {"view": view})
        out = tmp_path / f"{view}.json"
        assert seg.main([str(run_dir), "--tasks", "quest_m1", "quest_m2", "--episodes", "1", "--device", "cpu",
                         "--flags", "--out", str(out)]) == 0
        rows = json.loads(out.read_text())["policies"][str(run_dir)]
        m1 = rows["quest_m1"]["follow"]
        assert list(m1) == [str(j) for j in range(9)]  # to step 8 of 16, where MOM's flag ends the episode
        assert m1["0"] == {"flags": None}  # the quest's start holds no milestone
        tv[view] = [v["flags"] for v in rows["quest_m2"]["follow"].values()]  # MOM held throughout
    assert set(tv["cropped"]) == {0} and all(0 < x <= 1 for x in tv["full"]), tv
    assert "quest_m2 newest milestone cleared, total variation at each step:" in capsys.readouterr().out

    # --agree: a policy whose action head is only its bias acts by softmax(bias) everywhere
    from gbxcule.core.action_codec import get_codec

    ck = torch.load(tmp_path / "full" / "policy.pt", weights_only=False)
    bias = torch.tensor([0.0, 3.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0])
    ck["model"]["pi.weight"].zero_()
    ck["model"]["pi.bias"].copy_(bias)
    torch.save(ck, tmp_path / "biased.pt")
    out = tmp_path / "agree.json"
    assert seg.main([str(tmp_path / "biased.pt"), "--tasks", "quest_m2", "--episodes", "1", "--device", "cpu",
                     "--agree", "--out", str(out)]) == 0
    steps = json.loads(out.read_text())["policies"][str(tmp_path / "biased.pt")]["quest_m2"]["follow"]
    names, solution, probs = get_codec(ck["codec"]).names, load_task("quest_m2").solution, bias.softmax(0)
    assert list(steps) == [str(j) for j in range(25)]  # to step 24, where ELDER's flag ends the episode
    for j, v in steps.items():
        want = solution[int(j)]
        assert v == {"agree": {"solution": names[want], "p_solution": pytest.approx(float(probs[want])),
                               "greedy": "a"}}
    assert "at each step the solution's action, its probability, the greedy action: down 0.21 a" in \
        capsys.readouterr().out

    # a recurrent policy: its state after the solution's first j steps, not a fresh one, decides step j
    gru = _tiny_run(tmp_path / "gru", "quest", None, {"gru": 8})
    carried = seg.follow(str(gru), "quest_m2", "cpu", False, True)
    fresh = {j: seg.follow(str(gru), at, "cpu", False, True)["0"] for j, at in seg.along_tasks("quest_m2", 6, None)}
    assert fresh[0] == carried["0"]  # the start: the same observation and state
    assert any(carried[str(j)]["agree"]["p_solution"] != pytest.approx(v["agree"]["p_solution"], abs=1e-6)
               for j, v in fresh.items() if j > 0), (carried, fresh)

    plain = _tiny_run(tmp_path / "plain", "quest")
    r = run([sys.executable, "scripts/bench/bench_segments.py", str(plain), "--device", "cpu", "--episodes", "1",
             "--out", str(tmp_path / "x.json"), "--tasks", "quest_m2", "--flags"])
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith(("Warp", "Module"))]
    assert r.returncode == 1 and len(lines) == 1 and "does not show milestones" in lines[0], r.stderr
    assert not (tmp_path / "x.json").exists()
    nosol = tmp_path / "n.toml"
    nosol.write_text('[pack]\nname = "n"\nrom = "OVERWORLD"\n[tasks.a]\ngoal_ram = [{ addr = 0xC100, value = 2 }]\n')
    from gbxcule.core.errors import GbxculeError

    with pytest.raises(GbxculeError, match="no solution to follow"):
        seg.follow(str(plain), f"{nosol}:a", "cpu", False, True)


def test_bench_view_probes_each_view_reading_the_milestone_row(tmp_path, capsys):
    """scripts/bench/bench_view.py: frames of random play from a task's start with the flag row redrawn as the env
    draws it; each view's held-out accuracy curve is written; a task without the row, or bad sizes, is one line and
    exit status 1, and nothing is written."""
    import json

    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("bench_view", ROOT / "scripts/bench/bench_view.py")
    view = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(view)
    from gbxcule.rl.evaluate import make_eval_env
    from gbxcule.rl.training import make_config

    cfg = make_config("configs/long_tasks.toml", {})
    env = make_eval_env(cfg.env, 1, "cpu", 0, task="quest_m4")  # its start holds MOM, ELDER and CLUB
    try:
        env.reset(seed=0)
        k = len(env.milestone_names)
        assert torch.equal(view.redraw(env.obs, torch.tensor([3]), k), env.obs)  # the env's own row, redrawn alike
        assert not torch.equal(view.redraw(env.obs, torch.tensor([2]), k), env.obs)
    finally:
        env.close()
    out = tmp_path / "view.json"
    assert view.main(["--tasks", "quest_m3", "--envs", "2", "--play", "8", "--steps", "2", "--every", "1", "--batch",
                      "2", "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["frames"] == 4 and got["milestones"] == 11 and set(got["curves"]) == {"full", "cropped"}
    assert [p["step"] for p in got["curves"]["full"]] == [0, 1, 2]
    assert all(0 <= p["accuracy"] <= 1 for c in got["curves"].values() for p in c) and got["environment"]["host"]
    assert "held-out accuracy" in capsys.readouterr().out
    for args, needle in ((["--tasks", "leave_house"], "shows no milestone row"), (["--steps", "0"], ">= 1")):
        assert view.main([*args, "--out", str(tmp_path / "x.json")]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    assert not (tmp_path / "x.json").exists()
