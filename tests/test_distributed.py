"""Training and benchmarks on several processes (torch.distributed with gloo on the CPU device, 2 processes, tiny
configs): the processes stay in step (parameters compared after every update), the averaged gradient of a batch
split over the processes equals the single-process gradient of the whole batch, logs count every process's
env-steps and episodes, a process that dies ends the run with one line and a good checkpoint, and the killed run
resumes on 2 processes bit for bit; `gbxcule bench --gpus 2` splits the envs over 2 processes.

What "a 2-process run matches a 1-process run with twice the envs" can mean: each process has its own seed
(seed + rank), so its env and sampling streams differ from any 1-process run's; what must be equal is the
gradient step (the mean of the processes' gradients is the gradient of the concatenated batch: checked to float
rounding) and the accounting (env-steps, updates, episode totals and histograms summed over the processes)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from gbxcule.cli.main import main  # noqa: E402
from gbxcule.rl.rundir import load_checkpoint  # noqa: E402

HERE = Path(__file__).resolve().parent
TIMING = {"sps", "time_env_s", "time_inference_s", "time_update_s", "wall_s", "updates_per_s"}
ENVS, STEPS, UPDATES, LIMIT = 2, 4, 6, 3  # per process: envs, rollout steps; updates; the episodes' step limit


def tiny(run_dir: Path, updates: int, *extra: str) -> list[str]:
    return ["train", "--device", "cpu", "--num-envs", str(ENVS), "--rollout-steps", str(STEPS), "--epochs", "2",
            "--minibatches", "2", "--model", "small", "--total-steps", str(updates * 2 * ENVS * STEPS),
            "--max-steps", str(LIMIT),
            "--no-anneal-lr", "--run-dir", str(run_dir), "--eval-episodes", "0", "--no-progress",
            "--checkpoint-every", "1", "--set", "run.tensorboard=false", "--set", "run.check_sync=true", *extra]


def rows(run_dir: Path) -> list[dict]:
    out = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in out]


@contextlib.contextmanager
def in_process_launcher():
    """`gbxcule train --gpus` runs torch's launcher in this process: keep its environment variables and signal
    handlers out of the other tests; one thread per process (as torchrun sets it), for the same bits."""
    env = dict(os.environ)
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    handlers = {s: signal.getsignal(s) for s in sigs}
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(env)
        for s, h in handlers.items():
            signal.signal(s, h)


def start_ranks(argv: list[str], size: int = 2) -> list[subprocess.Popen]:
    """`size` processes as torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), without it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(size):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
               "WORLD_SIZE": str(size), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(size), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, *argv], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A 2-process run of UPDATES updates through `gbxcule train --gpus 2` (torch's launcher), parameters
    checked equal on both processes after every update (run.check_sync)."""
    d = tmp_path_factory.mktemp("two") / "run"
    with in_process_launcher():
        rc = main(tiny(d, UPDATES, "--gpus", "2"))
    return d, rc


def test_two_processes_stay_in_step_and_log_global_figures(reference):
    d, rc = reference
    assert rc == 0
    summary = json.loads((d / "summary.json").read_text())
    per_update = 2 * ENVS * STEPS
    assert summary["world_size"] == 2 and summary["updates"] == UPDATES and summary["stopped"] == "done"
    assert summary["env_steps"] == UPDATES * per_update
    log = rows(d)
    assert [r["update"] for r in log] == list(range(1, UPDATES + 1))
    assert [r["env_steps"] for r in log] == [per_update * k for k in range(1, UPDATES + 1)]
    assert all(sum(r["actions"]) == per_update for r in log)  # both processes' actions, summed
    # every env of both processes truncates every LIMIT steps (none reaches the goal that fast): all counted
    assert sum(r["episodes"] for r in log) == 2 * ENVS * (UPDATES * STEPS // LIMIT)
    assert all(r["length_p50"] == LIMIT and r["episode_length"] == LIMIT for r in log if r["episodes"])
    assert all(r["trunc_rate"] == pytest.approx(r["episodes"] / per_update) for r in log)
    ck = load_checkpoint(d, need_training=True)
    assert ck["world_size"] == 2 and len(ck["ranks"]) == 1 and ck["update"] == UPDATES
    assert ck["env"]["seed"] == 0 and ck["ranks"][0]["env"]["seed"] == 1  # seed + rank
    assert not torch.equal(ck["rng"]["torch"], ck["ranks"][0]["rng"]["torch"])
    assert not (d / "eval.json").exists()  # --eval-episodes 0


def ppo_argv(d, *sets: str, max_steps: int = LIMIT) -> list[str]:
    """`gbxcule train` on 2 gloo processes: tiny PPO for 3 updates of 8-step rollouts, the weights compared after
    each (run.check_sync), plus `sets` (--set each)."""
    return ["train", "--algo", "ppo", "--device", "cpu", "--num-envs", str(ENVS), "--max-steps", str(max_steps),
            "--total-steps", str(3 * 2 * ENVS * 8), "--run-dir", str(d), "--eval-episodes", "0", "--no-progress",
            "--set", "ppo.rollout_steps=8", "--set", "ppo.model=\"small\"", "--set", "run.tensorboard=false",
            "--set", "run.check_sync=true", *(x for s in sets for x in ("--set", s)), "--gpus", "2"]


def test_ppo_one_epoch_on_a_share_of_the_envs_stays_in_step_on_two_processes(tmp_path):
    # PPO's one-epoch learner on a moving block of each process's envs (learn_share), an optimizer step per
    # minibatch, each with its own all-reduce: the weights must still agree on both processes after every update
    # (run.check_sync ends the run otherwise), also with target_kl's early stop, which each process takes from the
    # KL averaged over both (a tiny target: every update stops after its first of 3 epochs on both)
    d = tmp_path / "ppo"
    argv = ppo_argv(d, "ppo.epochs=3", "ppo.minibatches=2", "ppo.learn_share=0.5", "ppo.target_kl=1e-7")
    with in_process_launcher():
        assert main(argv) == 0
    summary = json.loads((d / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["updates"] == 3 and summary["stopped"] == "done"
    ck = load_checkpoint(d, need_training=True)
    steps = {st["step"].item() for st in ck["optimizer"]["state"].values()}
    assert steps == {3 * 2}  # 3 updates x 1 epoch (the KL stop) x 2 minibatches, on rank 0's Adam


def test_a_recurrent_ppo_stays_in_step_on_two_processes(tmp_path):
    # ppo.gru unrolls each minibatch's envs outside DDP; the flat all-reduce still averages every gradient, so the
    # weights agree on both processes after every update (run.check_sync) and each keeps its own carried state
    d = tmp_path / "gru"  # episodes of 10 steps: the 24th step leaves a state that is not a reset one
    argv = ppo_argv(d, "ppo.epochs=2", "ppo.minibatches=2", "ppo.gru=8", max_steps=10)
    with in_process_launcher():
        assert main(argv) == 0
    ck = load_checkpoint(d, need_training=True)
    assert ck["world_size"] == 2 and ck["update"] == 3
    mine, other = ck["extra"]["state"], ck["ranks"][0]["extra"]["state"]
    assert mine.shape == other.shape == (ENVS, 8) and not torch.equal(mine, other)


def test_level_heads_log_each_levels_samples_over_both_processes(tmp_path):
    # ppo.level_heads on quest_m2 (MOM held from its start): each update's samples_by_level counts both processes'
    # samples (integers are summed), all on level 1, and entropy_by_level's level 1 is the logged mean entropy
    # (floats are averaged: each process's mean over as many samples)
    d = tmp_path / "levels"
    argv = ppo_argv(d, "ppo.epochs=1", "ppo.minibatches=1", "ppo.level_heads=3", "env.task=\"quest_m2\"",
                    "env.show_milestones=\"auto\"")
    with in_process_launcher():
        assert main(argv) == 0
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    for r in rows:
        assert r["samples_by_level"] == [0, 2 * ENVS * 8, 0]
        assert r["entropy_by_level"][1] == pytest.approx(r["entropy"], rel=1e-5)


def test_an_overlapped_ppo_stays_in_step_on_two_processes(tmp_path):
    # ppo.overlap: each process's learner trains on its rollout before (the proximal pass, then the epochs' own
    # all-reduces) between its env-steps; the weights agree after every update (run.check_sync), the first update
    # only collects, and each process keeps its own waiting rollout
    d = tmp_path / "overlap"
    argv = ppo_argv(d, "ppo.epochs=2", "ppo.minibatches=2", "ppo.overlap=true")
    with in_process_launcher():
        assert main(argv) == 0
    ck = load_checkpoint(d, need_training=True)
    assert ck["world_size"] == 2 and ck["update"] == 3
    assert {st["step"].item() for st in ck["optimizer"]["state"].values()} == {2 * 2 * 2}
    mine, other = ck["extra"]["pending"], ck["ranks"][0]["extra"]["pending"]
    assert mine["obs"].shape == other["obs"].shape and not torch.equal(mine["act"], other["act"])


def test_launcher_flags_are_checked(tmp_path, capsys):
    assert main(["train", "--gpus", "0", "--run-dir", str(tmp_path)]) == 2
    assert "--gpus must be >= 1" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["train", "--gpus", "2", "--run-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "torch sees 0 GPU(s)" in err and "--device cpu" in err


def test_averaged_gradient_is_the_gradient_of_the_whole_batch(tmp_path):
    import dist_worker

    out = tmp_path / "grads"
    procs = start_ranks([str(HERE / "dist_worker.py"), str(out)])
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    net = dist_worker.model()
    dist_worker.backward(net, net, dist_worker.fixed_batch())
    whole = dist_worker.grads(net)
    got = [torch.load(f"{out}.{r}.pt") for r in range(2)]
    for mode in ("allreduce", "ddp"):
        for r in range(2):
            for a, b in zip(got[r][mode], whole, strict=True):
                # float32 sums over the batch in another order (two halves, other thread counts): a few 1e-5 of
                # an element apart; a gradient not averaged, or one rank's alone, is off by its whole size
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
        assert all(torch.equal(a, b) for a, b in zip(got[0][mode], got[1][mode], strict=True))  # every bit alike
    assert got[0]["same"] == [] and got[0]["differing"] == [1] == got[1]["differing"]  # the sync check
    for r in range(2):  # the group is freed when the world closes: no gloo thread is left for the exit to tear down
        assert got[r]["threads_after_close"] in ([], None), got[r]["threads_after_close"]


def test_a_dead_process_ends_the_run_and_the_run_resumes_bit_for_bit(reference, tmp_path, capsys):
    ref, rc = reference
    assert rc == 0
    d = tmp_path / "killed"
    procs = start_ranks(["-m", "gbxcule", *tiny(d, 1000)])  # the reference's config, but a long run
    log = d / "metrics.jsonl"
    t0 = time.monotonic()
    while not (log.is_file() and len(log.read_text().splitlines()) >= 2):
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        assert time.monotonic() - t0 < 240, "the run did not log two updates"
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    _, err = procs[0].communicate(timeout=120)
    procs[1].communicate()
    assert time.monotonic() - killed < 60  # ended, not hung until a timeout
    assert procs[0].returncode == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    assert len(errors) == 1 and errors[0].startswith("gbxcule train: error: training stopped at update"), err
    assert "another of the 2 processes" in errors[0]
    kept = int(re.search(r"the last good checkpoint \(update (\d+)\) is kept", errors[0]).group(1))
    ck = load_checkpoint(d, need_training=True)
    assert ck["update"] == kept and 1 <= kept < UPDATES and ck["world_size"] == 2
    assert f"training stopped at update {kept + 1}:" in errors[0]
    # on one process the 2-process checkpoint is refused, with one line
    assert main(["train", "--resume", str(d), "--device", "cpu", "--total-steps", str(UPDATES * 2 * ENVS * STEPS),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "trained on 2 process(es)" in err
    # on 2 processes it continues to the reference's end, and every logged metric and weight is the same (no
    # --device: a resume takes the run's, here the CPU, and --gpus does not look for GPUs)
    with in_process_launcher():
        assert main(["train", "--resume", str(d), "--gpus", "2", "--no-progress",
                     "--total-steps", str(UPDATES * 2 * ENVS * STEPS)]) == 0
    assert rows(d) == rows(ref)
    a, b = load_checkpoint(ref)["model"], load_checkpoint(d)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_bench_splits_the_envs_over_processes(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--gpus", "2", "--backends", "warp_vec_cpu", "--envs", "4", "--steps", "2", "--warmup", "1",
                 "--out", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpus"] == 2 and len(data["results"]) == 1 and len(data["per_process"]) == 1
    agg, parts = data["results"][0], data["per_process"][0]
    assert agg["envs"] == 4 and [p["envs"] for p in parts] == [2, 2]
    slowest = max(p["seconds"] for p in parts)
    assert agg["seconds"] == slowest and agg["env_steps_per_s"] == pytest.approx(4 * 2 / slowest)
    assert agg["frames_per_s"] == pytest.approx(agg["env_steps_per_s"] * data["schedule"]["frames_per_step"])
    assert main(["bench", "--gpus", "2", "--backends", "warp_vec_cpu", "--envs", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a multiple of --gpus 2" in err


@pytest.mark.parametrize("memory", ["zero", "cell"])
def test_a_shared_archive_holds_every_processs_cells_on_each_process(tmp_path, memory):
    # each update every process offers its new cells to the other (env.archive.share): at each checkpoint both
    # archives hold the same cells, though each process's envs went their own ways (seed + rank); a recurrent
    # policy's states kept with the cells (env.archive.memory = "cell") travel with them
    d = tmp_path / "shared"
    extra = ["--set", "ppo.gru=8", "--set", "env.archive.memory=cell"] if memory == "cell" else []
    argv = tiny(d, 3, "--task", "talk_to_hiker", "--gpus", "2", "--set", "env.archive.capacity=256",
                "--set", "env.archive.share=64", "--set", "env.archive.p_start=0.5", "--set", "env.archive.inserts=8",
                *extra)
    argv[argv.index("--max-steps") + 1] = "6"
    with in_process_launcher():
        assert main(argv) == 0
    ck = load_checkpoint(d, need_training=True)
    mine, other = ck["env"]["archive"], ck["ranks"][0]["env"]["archive"]
    keys = [a["keys"][:int(a["count"])].tolist() for a in (mine, other)]
    assert set(keys[0]) == set(keys[1]) and len(keys[0]) > 3
    if memory == "cell":  # a cell taken from the other process came with the state its path reached it with
        from gbxcule.rl.archive import unpack_tensor

        mem = [unpack_tensor(a["cell_mem"], torch.zeros(257, 8)) for a in (mine, other)]  # (packed in checkpoints)
        same = [torch.equal(mem[0][i], mem[1][keys[1].index(k)]) for i, k in enumerate(keys[0])]
        assert sum(same) > 3 and bool(mem[0][:len(keys[0])].abs().sum(1).gt(0).all())


@pytest.mark.parametrize("store", ["device", "host"])
def test_a_cell_of_another_process_starts_an_env_here_in_its_state(store):
    from gbxcule.rl.env import GameEnv

    kw = dict(task="talk_to_hiker", num_envs=2, max_steps=8,
              archive={"capacity": 64, "share": 64, "p_start": 0.0, "store": store})
    one, two = GameEnv(seed=1, **kw), GameEnv(seed=2, **kw)
    rng = torch.Generator().manual_seed(0)
    for _ in range(7):  # "rank 1" explores; "rank 0" stands still
        one.step(torch.randint(0, 8, (2,), generator=rng))
    two.step(torch.zeros(2, dtype=torch.int64))
    theirs = set(one.archive.keys[:int(one.archive.count)].tolist()) - set(two.archive.keys[:int(two.archive.count)]
                                                                             .tolist())
    assert theirs
    two.archive_inbox(one.archive_outbox())
    merged = two.archive.keys[:int(two.archive.count)].tolist()
    assert theirs <= set(merged)
    key = sorted(theirs)[0]
    row_two, row_one = merged.index(key), one.archive.keys[:int(one.archive.count)].tolist().index(key)
    for a, b in zip(two._cell_slots(), one._cell_slots(), strict=True):  # the same state, observation, screen
        assert torch.equal(a[row_two], b[row_one])
    assert int(two.archive.steps[row_two]) == int(one.archive.steps[row_one])
    # an episode of "rank 0" that starts in that cell starts in its state
    w = torch.zeros_like(two.archive.chosen)
    two.archive.weights = lambda: w.index_fill(0, torch.tensor([row_two]), 1)[:two.archive.m]
    two._done.fill_(True)
    two._restore_done(two.seed)
    assert bool(two.archive.from_archive.all()) and two.archive.start_row.tolist() == [row_two, row_two]
    assert two.cell_keys().tolist() == [key, key]
