"""The PPO trainer on the CPU device with tiny configs: runs, logs, checkpoints, resumes bit for bit,
evaluates; bad input gives one line and never clobbers a good checkpoint."""

import json
import math
import os
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gbxcule.cli.main import main  # noqa: E402
from gbxcule.rl.config import ConfigError  # noqa: E402
from gbxcule.rl.rundir import CheckpointError, load_checkpoint  # noqa: E402
from gbxcule.rl.training import make_config, to_dict, train  # noqa: E402

TIMING = {"sps", "time_env_s", "time_inference_s", "time_update_s", "wall_s", "updates_per_s"}


def tiny(run_dir, **run):
    return make_config(None, {"total_steps": 4 * 6 * 8, "env": {"num_envs": 6},
                              "ppo": {"rollout_steps": 8, "epochs": 2, "minibatches": 2, "model": "small"},
                              "run": {"run_dir": str(run_dir), "device": "cpu", "progress": False, "evals": 0,
                                      "tensorboard": False, "checkpoint_every": 1, **run}})


def metrics(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    d = tmp_path_factory.mktemp("straight")
    summary = train(tiny(d))
    return d, summary


def test_tiny_run_completes_and_writes_everything(straight):
    d, s = straight
    assert s["updates"] == 4 and s["env_steps"] == 4 * 48 and s["stopped"] == "done"
    rows = metrics(d)
    assert [r["update"] for r in rows] == [1, 2, 3, 4]
    for key in ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "explained_variance", "actions",
                "success_rate", "episode_return", "done_rate", "trunc_rate", "lr"):
        assert key in rows[-1]
    assert sum(rows[-1]["actions"]) == 48
    assert rows[0]["entropy"] > 2.0  # near uniform over 8 actions at the start
    for name in ("config.json", "facts.json", "checkpoint.pt", "policy.pt", "summary.json"):
        assert (d / name).is_file(), name
    ck = load_checkpoint(d)
    assert ck["update"] == 4 and ck["global_step"] == 192 and "emu" in ck["env"]


def test_killed_run_resumes_bit_for_bit(straight, tmp_path):
    d, _ = straight
    part = train(tiny(tmp_path, stop_after_updates=2))
    assert part["updates"] == 2 and part["stopped"] == "stop_after_updates"
    with (tmp_path / "metrics.jsonl").open("a") as f:  # a killed run may have logged past its checkpoint
        f.write(json.dumps({"update": 3, "junk": 1}) + "\n")
    resumed = train(tiny(tmp_path), resume=True)
    assert resumed["updates"] == 4
    assert metrics(tmp_path) == metrics(d)
    a, b = load_checkpoint(d)["model"], load_checkpoint(tmp_path)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_from_before_the_full_view_evaluates_and_resumes_on_its_cropped_torso(tmp_path, capsys):
    """A checkpoint written before the models saw the whole frame (no `view` in its model or its config) loads with
    the cropped torso it was trained on: it evaluates, and resumes to the bits of a run that never stopped."""
    def cropped(d, **run):
        return make_config(None, {**to_dict(tiny(d, **run)), "ppo": {**to_dict(tiny(d))["ppo"], "view": "cropped"}})

    straight = tmp_path / "straight"
    train(cropped(straight))
    old = tmp_path / "old"
    assert train(cropped(old, stop_after_updates=2))["stopped"] == "stop_after_updates"
    for f in old.glob("*.pt"):
        ck = torch.load(f, weights_only=False)
        del ck["model_desc"]["view"], ck["config"]["ppo"]["view"]
        torch.save(ck, f)
    assert main(["eval", str(old), "--device", "cpu", "--episodes", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["greedy"]["episodes"] == 2
    assert main(["train", "--resume", str(old), "--no-progress", "--json"]) == 0
    assert metrics(old) == metrics(straight)
    a, b = load_checkpoint(straight), load_checkpoint(old)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert b["model_desc"]["view"] == b["config"]["ppo"]["view"] == "cropped"


def test_eval_and_plot_from_the_cli(straight, tmp_path, capsys):
    d, _ = straight
    gif = tmp_path / "agent.gif"
    assert main(["eval", str(d), "--device", "cpu", "--episodes", "3", "--gif", str(gif), "--gif-envs", "2",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    for key in ("success_rate", "median_steps", "p90_steps", "mean_return", "episodes", "template_agreement"):
        assert key in rep
    assert rep["episodes"] == 3 and 0.0 <= rep["success_rate"] <= 1.0 and gif.stat().st_size > 0
    assert main(["plot", str(d), "--out", str(tmp_path), "--json"]) == 0
    written = json.loads(capsys.readouterr().out)["written"]
    names = {p.split("/")[-1] for p in written}
    # no episode ends in 4 x 8 steps of a 100-step task: no return or success panel, the rest drawn
    assert names == {"entropy.png", "sps.png", "losses.png", "values.png", "actions.png", "rates.png",
                     "goal_distance.png", "updates_per_s.png", "policy_change.png"}
    assert all((tmp_path / p.split("/")[-1]).stat().st_size > 1000 for p in written)


def test_bad_input_is_one_line_and_keeps_the_checkpoint(straight, tmp_path, capsys):
    d, _ = straight
    good = (d / "checkpoint.pt").read_bytes()
    # a run folder that holds a checkpoint is not overwritten by a new run
    assert main(["train", "--device", "cpu", "--run-dir", str(d), "--num-envs", "2", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "already holds a checkpoint" in err
    assert (d / "checkpoint.pt").read_bytes() == good
    # resume of a folder that does not exist / has no checkpoint
    assert main(["train", "--resume", str(tmp_path / "nope"), "--json"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path), "--json"]) == 2
    assert "no checkpoint.pt" in capsys.readouterr().err
    # a truncated checkpoint
    bad = tmp_path / "bad.pt"
    bad.write_bytes(good[: len(good) // 2])
    assert main(["eval", str(bad), "--device", "cpu", "--episodes", "1"]) == 2
    assert "not a readable checkpoint" in capsys.readouterr().err
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "missing.pt")
    # bad configs
    with pytest.raises(ConfigError, match="unknown setting"):
        make_config(None, {"ppo": {"lr_typo": 1}})
    with pytest.raises(ConfigError, match="num_envs"):
        make_config(None, {"env": {"num_envs": 0}})
    cfg = tmp_path / "c.toml"
    cfg.write_text("[ppo\nlr = 1")
    assert main(["train", "--config", str(cfg), "--device", "cpu"]) == 2
    assert "not valid TOML" in capsys.readouterr().err


def test_checkpoint_for_other_observations_is_refused(straight, tmp_path, capsys):
    d, _ = straight
    ck = torch.load(d / "policy.pt", weights_only=False)
    ck["config"]["env"]["stack_k"] = 2  # a model built for 2 frames does not take these weights
    torch.save(ck, tmp_path / "other.pt")
    assert main(["eval", str(tmp_path / "other.pt"), "--device", "cpu", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("does not fit" in err or "observations" in err)


def test_nonfinite_loss_stops_with_a_snapshot(tmp_path, monkeypatch):
    import gbxcule.rl.algos.ppo as ppo_mod
    from gbxcule.core.errors import GbxculeError

    train(tiny(tmp_path, stop_after_updates=1))
    good = (tmp_path / "checkpoint.pt").read_bytes()
    real = ppo_mod.ppo_loss

    def nan_loss(*a, **k):
        loss, m = real(*a, **k)
        return loss * math.nan, m

    monkeypatch.setattr(ppo_mod, "ppo_loss", nan_loss)
    with pytest.raises(GbxculeError, match="NaN"):
        train(tiny(tmp_path), resume=True)
    assert (tmp_path / "checkpoint.pt").read_bytes() == good
    snap = json.loads((tmp_path / "nonfinite.json").read_text())
    assert snap["update"] == 1 and "batch_stats" in snap


def test_out_of_device_memory_in_training_is_one_line_and_keeps_the_checkpoint(tmp_path, capsys, monkeypatch):
    """torch's out-of-memory error in an update (the start-up check passed, then the GPU, shared, filled up): one
    line saying what was asked, why, and which settings lower it; exit 2, no traceback, the checkpoint as it was."""
    import gbxcule.rl.algos.ppo as ppo_mod

    train(tiny(tmp_path, stop_after_updates=1))
    good = (tmp_path / "checkpoint.pt").read_bytes()

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.81 GiB. GPU 0 has a total capacity of "
                                     "139.81 GiB of which 1.05 GiB is free. Process 7 has 33.87 GiB memory in use.")

    monkeypatch.setattr(ppo_mod, "ppo_loss", oom)
    assert main(["train", "--resume", str(tmp_path), "--json"]) == 2  # --json: no start-up lines
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    line = err[0]
    assert line.startswith("gbxcule train: error: training stopped at update 2: cpu ran out of memory")
    for said in ("tried to allocate 2.81 GiB; 1.05 GiB free of 139.81 GiB", "shared with other processes or too small",
                 "learner working memory planned at", "lower env.num_envs or raise ppo.minibatches",
                 "the last good checkpoint (update 1) is kept"):
        assert said in line, (said, line)
    assert (tmp_path / "checkpoint.pt").read_bytes() == good


def test_set_overrides_merge_tables_and_reject_bad_items(tmp_path, capsys):
    from gbxcule.rl.config import merge_overrides, parse_sets

    sets = parse_sets(["env.reward.tau=0.2", "env.backend.sort_key=path", "ppo.lr=1e-3", "run.device=cpu",
                       'env.start_states=["random_actions", 4, 2]'])
    assert sets == {"env": {"reward": {"tau": 0.2}, "backend": {"sort_key": "path"},
                            "start_states": ["random_actions", 4, 2]},
                    "ppo": {"lr": 1e-3}, "run": {"device": "cpu"}}
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('[env]\nreward = { novelty_pixels = 0.01 }\n')
    cfg = make_config(cfg_file, merge_overrides({"env": {"num_envs": 5}}, sets))
    assert cfg.env.reward == {"novelty_pixels": 0.01, "tau": 0.2}  # tables merge key by key
    assert cfg.env.backend == {"sort_key": "path"} and cfg.env.num_envs == 5 and cfg.ppo.lr == 1e-3
    for bad in (["env.reward"], ["=3"], ["env..tau=1"]):
        with pytest.raises(ConfigError):
            parse_sets(bad)
    with pytest.raises(ConfigError, match="unknown option"):
        make_config(None, {"env": {"backend": {"sortkey": "path"}}})
    rc = main(["train", "--device", "cpu", "--run-dir", str(tmp_path / "r"), "--set", "env.backend.sort_key=nope"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and "sort_key" in err[0]
    assert not (tmp_path / "r" / "checkpoint.pt").exists()
    assert make_config(None, {"run": {"deterministic": True}}).run.deterministic
    # `none` unsets a setting that may be unset (TOML has no null); a string setting keeps the word
    root = Path(__file__).resolve().parent.parent
    td0 = make_config(root / "configs/leave_house_a2c.toml",
                      parse_sets(["a2c.n_step=1", "a2c.update_every=4", "a2c.target_entropy=none",
                                  "env.reward.terminate_on=none"]))
    assert td0.a2c.target_entropy is None and td0.env.reward["terminate_on"] == "none"
    with pytest.raises(ConfigError, match="a2c.lr"):
        make_config(None, parse_sets(["algo=a2c", "a2c.lr=none"]))
    with pytest.raises(ConfigError, match="exclude each other"):
        make_config(None, {"run": {"deterministic": True, "cudnn_benchmark": True}})


def test_a_config_reads_its_base_first_and_sets_its_own_over_it(tmp_path, capsys):
    from gbxcule.rl.config import read_toml

    (tmp_path / "sub").mkdir()
    (tmp_path / "a.toml").write_text('[env]\nnum_envs = 8\nreward = { step_cost = -0.01, tau = 0.3 }\n'
                                     '[ppo]\nlr = 0.001\n')
    (tmp_path / "sub" / "b.toml").write_text('base = "../a.toml"\n[env.reward]\ntau = 0.2\n[ppo]\nepochs = 2\n')
    (tmp_path / "c.toml").write_text('base = "sub/b.toml"\n[env]\nnum_envs = 4\n')
    # tables merge key by key down the chain; each base is found from its own file's folder
    assert read_toml(tmp_path / "c.toml") == {"env": {"num_envs": 4, "reward": {"step_cost": -0.01, "tau": 0.2}},
                                             "ppo": {"lr": 0.001, "epochs": 2}}
    cfg = make_config(tmp_path / "c.toml", {"ppo": {"lr": 0.002}})
    assert (cfg.env.num_envs, cfg.env.reward["tau"], cfg.ppo.epochs, cfg.ppo.lr) == (4, 0.2, 2, 0.002)
    (tmp_path / "loop.toml").write_text('base = "loop2.toml"\n')
    (tmp_path / "loop2.toml").write_text('base = "loop.toml"\n')
    for text, words in (('base = "loop.toml"', "bad.toml -> loop.toml -> loop2.toml -> loop.toml"),
                        ('base = "none.toml"', "cannot read config"), ("base = 3", "must name a config file")):
        (tmp_path / "bad.toml").write_text(text + "\n")
        rc = main(["train", "--config", str(tmp_path / "bad.toml"), "--device", "cpu",
                   "--run-dir", str(tmp_path / "r")])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and words in err[0], err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("summary", "without"), [
    ("quest_back_s1", []),
    ("quest_back_s2", []),
    ("quest_back_s0_cut", []),
    ("quest_config_m6", []),
    ("quest_route_s0", ["env.archive.route_by=level"]),
    ("quest_route_s1", ["env.archive.route_by=level"]),
    ("quest_config_s0", ["env.archive.route=0.0", "env.archive.route_by=weights"]),
    ("quest_65k_lh_still32", ["env.archive.route=0.0", "env.archive.route_by=weights"]),
])
def test_the_quest_config_is_the_setup_its_cited_runs_trained(summary, without):
    """configs/quest.toml, with a cited run's own run settings (and `without`: the knobs as that run trained them,
    before the config took today's), gives the setup that run trained (its config.json, kept in the summary: the same
    env, ROM and learner) and the one its command gives (by --set flags over configs/long_tasks.toml, or over
    configs/quest.toml itself): every row of BENCHMARKS' quest table that names the config trained it, and its
    command repeats it."""
    import shlex

    from gbxcule.core.cartridge import load_rom
    from gbxcule.rl.archive import ArchiveConfig
    from gbxcule.rl.config import parse_sets
    from gbxcule.roms import resolve_rom

    root = Path(__file__).resolve().parent.parent
    cited_run = json.loads((root / f"benchmarks/tasks/{summary}.json").read_text())
    command, trained = cited_run["command"], cited_run["numbers"]["runs"][0]["config"]
    inner = shlex.split(shlex.split(command)[-1])
    assert inner[0] == "--config" and inner[1] in ("configs/long_tasks.toml", "configs/quest.toml")
    task = [f"env.task={inner[3]}"] if inner[2:3] == ["--task"] else []  # --task alone: another task, same config
    first = 4 if task else 2
    sets = [inner[i + 1] for i in range(first, len(inner), 2)]
    assert [inner[i] for i in range(first, len(inner), 2)] == ["--set"] * len(sets)
    then = without if inner[1] == "configs/quest.toml" else []  # the file as it was when that run named it
    cited = to_dict(make_config(root / inner[1], parse_sets(task + sets + then)))
    bench_run = [s for s in sets if s.startswith("run.")]  # where evals and kept weights go: not the setup
    assert {s.partition("=")[0] for s in bench_run} <= {"run.eval_every_s", "run.eval_episodes",
                                                        "run.policy_every_s"}
    ours = to_dict(make_config(root / "configs/quest.toml", parse_sets(task + bench_run + without)))
    for c in (ours, cited, trained):  # env.archive holds the keys a config sets: the rest are the archive's defaults
        c["env"]["archive"] = {**ArchiveConfig().to_dict(), **c["env"]["archive"]}
    assert ours == cited
    assert trained["env"].pop("rom_sha1") == load_rom(resolve_rom("QUEST")).info.sha1  # today's quest ROM
    assert ours["env"].pop("rom_sha1") is None  # recorded when a run starts
    assert trained == {k: v for k, v in ours.items() if k != "run"}
    assert ours["env"]["reward"]["still_steps"] == 32 and ours["ppo"]["level_heads"] == 12
    assert ours["env"]["archive"]["route"] == (0.0 if "env.archive.route=0.0" in without else 0.3)
    assert ours["env"]["archive"]["route_by"] == next((s.partition("=")[2] for s in without if "route_by" in s), "back")


@pytest.mark.parametrize(("task", "shown"), [("leave_house", "on"), ("quest_m4", "auto")])
def test_the_quest_config_only_its_task_changed_trains_tasks_with_and_without_milestones(tmp_path, monkeypatch, task,
                                                                                         shown):
    """configs/quest.toml with `--task` alone changed (and a tiny size) trains an OVERWORLD task that names no
    milestones, its level heads and milestone row reading a blank row (recorded as show_milestones "on", so its eval
    draws the same), and a quest segment with its route's backward window; each run's policy evaluates, and the
    quest segment's on the other task too, with the row its model reads drawn blank there."""
    import gbxcule.rl.evaluate as evaluate_module
    from gbxcule.rl.config import make_env
    from gbxcule.rl.training import evaluate

    root = Path(__file__).resolve().parent.parent
    run = tmp_path / task
    tiny = ["env.num_envs=32", "env.archive.capacity=64", "total_steps=1024", "run.eval_every_s=none",
            "run.eval_episodes=2", "run.policy_every_s=none"]
    rc = main(["train", "--config", str(root / "configs/quest.toml"), "--task", task, "--device", "cpu",
               "--run-dir", str(run), "--no-progress", *[x for kv in tiny for x in ("--set", kv)]])
    assert rc == 0
    config = json.loads((run / "config.json").read_text())
    assert config["env"]["show_milestones"] == shown and config["ppo"]["level_heads"] == 12
    assert json.loads((run / "summary.json").read_text())["updates"] == 2
    assert json.loads((run / "eval.json").read_text())["greedy"]["episodes"] == 2
    env = make_env(make_config(None, config).env, "cpu", seed=0, num_envs=2)  # as its evals and resumes build it
    assert env.show_milestones and (task == "leave_house") == (not env.milestone_names)
    env.close()
    if task == "leave_house":
        return
    built, make_eval_env = [], evaluate_module.make_eval_env
    monkeypatch.setattr(evaluate_module, "make_eval_env",
                        lambda *a, **k: built.append(make_eval_env(*a, **k)) or built[-1])
    bare = tmp_path / "bare.toml"  # the quest's ROM, a task of a pack that names no milestones
    bare.write_text('[pack]\nname = "bare"\nrom = "QUEST"\ncodec = "pokemonred_puffer_v1"\nframes_per_step = 24\n'
                    'release_after_frames = 8\n[tasks.walk]\nstart = { script = "N5" }\nstep_limit = 20\n'
                    'goal_ram = [{ addr = 0xC1C0, mask = 0x01, value = 0x01 }]\n')
    rep = evaluate(run, episodes=2, device="cpu", task=f"{bare}:walk", modes=("greedy",))
    assert rep["greedy"]["episodes"] == 2
    assert built[0].show_milestones and not built[0].milestone_names and not built[0].obs[..., -1, :].any()


def test_run_deterministic_sets_torchs_deterministic_algorithms(monkeypatch):
    """run.deterministic on CUDA: cuDNN's deterministic convolutions and torch's deterministic algorithms (ops without
    one warn), cuBLAS's fixed workspace; off leaves torch's choice. Torch's global flags are restored after."""
    from gbxcule.rl.session import cuda_algorithms

    cudnn = torch.backends.cudnn
    saved = (cudnn.benchmark, cudnn.deterministic, torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled())
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        cuda_algorithms(benchmark=True, deterministic=False)
        assert cudnn.benchmark and not cudnn.deterministic and not torch.are_deterministic_algorithms_enabled()
        assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
        cuda_algorithms(benchmark=False, deterministic=True)
        assert not cudnn.benchmark and cudnn.deterministic
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:
        cudnn.benchmark, cudnn.deterministic = saved[0], saved[1]
        torch.use_deterministic_algorithms(saved[2], warn_only=saved[3])


def test_plot_draws_percentile_bands_eval_against_time_and_runs_overlaid(tmp_path):
    from gbxcule.rl.plot import plot_runs

    runs = []
    for name, lag in (("a", 0), ("b", 1)):
        d = tmp_path / name
        d.mkdir()
        rows = [{"update": u, "env_steps": 100 * u, "episode_return": 0.1 * u, "return_p10": 0.0, "return_p50": 0.1,
                 "return_p90": 0.2 * u, "actions": [u, 3, 0], "eval/greedy_success": min(1.0, 0.3 * (u - lag)),
                 "eval/elapsed_s": 10.0 * u} for u in (1, 2, 3, 4)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"update": 5, "env')
        runs.append(d)
    written = plot_runs(runs, tmp_path / "out")  # a torn last line (a killed run) is left out, not an error
    names = [p.name for p in written]
    assert names == ["episode_return.png", "success_rate.png", "greedy_success_vs_time.png", "actions_a.png",
                     "actions_b.png"]
    assert all(p.stat().st_size > 1000 for p in written)


def test_plot_draws_success_by_start_slot_when_the_log_has_it(tmp_path):
    from gbxcule.rl.plot import plot_runs, slot_success_grid

    rows = [{"update": u, "env_steps": 100 * u, "episode_return": 0.1 * u, "success_rate": 0.5, "entropy": 2.0,
             "sps": 1000.0, "slot_episodes": [2, 0, 4], "slot_successes": [1, 0, u]} for u in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    edges, rates = slot_success_grid(rows)
    assert edges == [0, 100, 200, 300] and rates[0][0] == 0.5 and math.isnan(rates[0][1]) and rates[2][2] == 0.75
    assert slot_success_grid([{"env_steps": 1}]) is None
    written = plot_runs([tmp_path])
    assert [p.name for p in written] == ["episode_return.png", "success_rate.png", "entropy.png", "sps.png",
                                         "success_by_start_slot.png"]
    assert written[-1].stat().st_size > 1000


def test_plots_heat_maps_have_axes_a_colour_bar_and_a_readable_size(tmp_path):
    """The exploration heat maps of `gbxcule plot` were TensorBoard's picture (8 pixels a cell: 80x64 for a
    10x8 area) with no axes or legend: now a figure per map with x/y axes per area and a colour bar; TensorBoard
    keeps its small picture."""
    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image

    from gbxcule.rl import explore
    from gbxcule.rl.plot import HEAT_MAPS, heat_map, plot_runs

    cells = [(0, x, y) for x in range(10) for y in range(8) if (x + y) % 3] + [(1, 2, 5), (1, 3, 5)]
    snap = {"screens": np.zeros((2, 144, 160), np.uint8), "ram_cells": np.array(1),
            "keys": np.array([a | x << 8 | y << 16 for a, x, y in cells]), "visits": np.arange(1, len(cells) + 1) * 7,
            "steps": np.arange(len(cells)), "chosen": np.zeros(len(cells)), "frontier": np.zeros((0, 144, 160))}
    (tmp_path / "archive.npz").write_bytes(explore.to_bytes(snap))
    row = {"update": 1, "env_steps": 8, "archive/cells": len(cells)}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    tb = explore.images(snap)["explore/visits"]
    assert tb.shape == (64, 10 * 8 + 4 + 4 * 8, 3)  # TensorBoard's: 8 pixels a cell, the areas side by side
    written = {p.name: p for p in plot_runs([tmp_path])}
    for name in ("explore_visits.png", "explore_depth.png"):
        w, h = Image.open(written[name]).size
        assert w >= 600 and h >= 300, (name, w, h)
    _, title, label, log = HEAT_MAPS["explore/visits"]
    fig = heat_map(explore.area_grids(snap, "visits"), title, label, log)
    panels = [ax for ax in fig.axes if ax.get_title().startswith("area")]
    assert [ax.get_title() for ax in panels] == ["area 0", "area 1"]
    assert all(ax.get_xlabel() == "x" and ax.get_ylabel() == "y" for ax in panels)
    bars = [ax for ax in fig.axes if ax not in panels]
    assert len(bars) == 1 and bars[0].get_ylabel() == "visits (log scale)"
    plt.close(fig)


@pytest.mark.parametrize("seed", [0, 3])
def test_periodic_evals_never_play_the_final_evals_start_states(tmp_path, seed):
    """The periodic evals choose the final policy; the final eval (and `gbxcule eval`) plays other start states, the
    same for every run, so its figure is not the one the choice was made on (run seed 0 included)."""
    from gbxcule.rl.evaluate import EVAL_SEED, make_eval_env, periodic_eval_seed

    cfg = tiny(tmp_path, seed=seed)
    assert periodic_eval_seed(seed) != EVAL_SEED
    digests = []
    for s in (periodic_eval_seed(seed), EVAL_SEED):
        env = make_eval_env(cfg.env, 4, "cpu", s)
        try:
            digests.append(env.state_dict(emulator=False)["slots_sha1"])
        finally:
            env.close()
    assert digests[0] != digests[1]


def eval_env_and_model(tmp_path):
    """An eval env of 4 episodes with a 12-step limit and a fresh PPO model (seeded) for the eval beside training."""
    from gbxcule.rl.algos import get
    from gbxcule.rl.evaluate import make_eval_env

    cfg = tiny(tmp_path, seed=3)
    cfg.env.max_steps = 12
    env = make_eval_env(cfg.env, 4, "cpu", 5)
    torch.manual_seed(0)
    return env, get("ppo").build_model(cfg.ppo, env.num_actions, env.stack_k, env.obs_mode == "packed")


@pytest.mark.parametrize("per_tick,ticks", [(1, 12), (5, 3)])
def test_the_eval_beside_training_plays_the_waiting_evals_episodes_on_its_snapshot(tmp_path, per_tick, ticks):
    from gbxcule.rl.evaluate import BackgroundEval, evaluate_model

    env, model = eval_env_and_model(tmp_path)
    want = evaluate_model(model, env, modes=("greedy",))["greedy"]
    before = [p.clone() for p in model.parameters()]
    bg = BackgroundEval(model, env, steps_per_tick=per_tick)
    bg.start(model, 123)
    with torch.no_grad():  # the live model goes on learning: the eval plays the weights it started with
        for p in model.parameters():
            p.mul_(-3.0)
    assert bg.busy and bg.started_step == 123
    played = 0
    while (rep := bg.poll()) is None:
        bg.tick()
        played += 1
    assert played == ticks and not bg.busy  # the step limit's 12 steps, steps_per_tick after each training step
    for key in ("episodes", "starts_skipped", "success_rate", "median_steps", "mean_return", "mean_length"):
        assert rep[key] == want[key], key
    assert all(torch.equal(p, q) for p, q in zip(bg.model.parameters(), before, strict=True))
    bg.start(model, 456)
    assert all(torch.equal(p, q) for p, q in zip(bg.model.parameters(), model.parameters(), strict=True))
    assert bg.finish()["episodes"] == 4 and bg.poll() is None and not bg.busy


def test_a_tick_queues_no_eval_steps_while_the_last_ticks_still_run(tmp_path):
    """On a GPU a tick asks the stream's event whether the steps it queued last have run; until they have, it queues
    none (counted in the report's held_ticks), so steps never pile up in the stream's queue. The event is stood in
    for here (the CPU device has none); `finish` plays the rest whatever the event says."""
    from gbxcule.rl.evaluate import BackgroundEval

    class Event:
        ran = False

        def query(self):
            return self.ran

        def record(self, stream):
            pass

    env, model = eval_env_and_model(tmp_path)
    bg = BackgroundEval(model, env, steps_per_tick=3)
    bg.start(model, 0)
    bg._ticked, bg._pending = Event(), True  # a tick's steps queued on a stream, not run yet
    for _ in range(4):
        bg.tick()
    assert bg.left == 12 and (bg.ticks, bg.held) == (4, 4) and bg.poll() is None
    bg._ticked.ran = True
    bg.tick()
    assert bg.left == 9 and (bg.ticks, bg.held) == (5, 4)
    bg._ticked.ran = False
    rep = bg.finish()
    assert bg.left == 0 and rep["episodes"] == 4 and rep["held_ticks"] == 4 / 5 and not bg.busy


def test_the_eval_beside_training_ends_once_every_episode_has(tmp_path):
    """Episodes that all ended before the step limit end the eval at the next tick, with the report the whole limit
    gives (nothing counts after an episode's end); the foreground eval agrees."""
    from gbxcule.rl.evaluate import BackgroundEval, evaluate_model

    env, model = eval_env_and_model(tmp_path)
    want = evaluate_model(model, env, modes=("greedy",))["greedy"]
    bg = BackgroundEval(model, env, steps_per_tick=2)
    bg.start(model, 0)
    bg.tick()
    bg.tick()
    assert bg.left == 8
    ended = bg.run.finished.clone()
    bg.run.finished.fill_(True)  # every episode over after the next tick's steps (as a goal or a dead end would)
    bg.tick()
    assert bg.left == 6 and bg.poll() is None
    bg.tick()  # reads that they had all ended: no more steps
    assert bg.left == 0 and bg.run.steps == 6 and bg.ticks == 4
    rep = bg.poll()
    assert rep is not None and not bg.busy and rep["episodes"] == want["episodes"]
    assert not bool(ended.all())  # (they had not ended on their own yet)
    bg.start(model, 0)  # the next eval starts afresh: it plays until its episodes end
    while bg.poll() is None:
        bg.tick()
    assert bg.run is None and bg.ticks == 6


def test_the_eval_device_is_the_trainings_unless_a_gpu_no_process_trains_on_is_named():
    from gbxcule.rl.config import eval_device_name

    assert eval_device_name(None, "cuda") == "cuda" and eval_device_name(None, "cpu", gpus=0) == "cpu"
    assert eval_device_name("cpu", "cpu", gpus=0) == "cpu" and eval_device_name("cpu", "cuda:1", gpus=2) == "cpu"
    assert eval_device_name("cuda:1", "cuda", gpus=2) == "cuda:1"  # another GPU of a one-process run
    assert eval_device_name("cuda:0", "cuda", gpus=2) == "cuda"
    assert eval_device_name("cuda", "cuda:1", gpus=2) == "cuda:0"  # "cuda" names cuda:0
    assert eval_device_name("cuda:1", "cuda:1", local_processes=2, gpus=2) == "cuda:1"  # its own: the default
    assert eval_device_name("cuda:3", "cuda:0", local_processes=3, gpus=4) == "cuda:3"
    for value, train_device, procs, gpus, says in [
            ("tpu", "cpu", 1, 0, "must be cpu, cuda or cuda:N"), ("cuda:x", "cuda", 1, 2, "must be cpu, cuda"),
            ("cuda:1", "cpu", 1, 0, "none was found"), ("cuda:2", "cuda", 1, 2, "shows 2 GPU(s), cuda:0 to cuda:1"),
            ("cuda:1", "cuda:0", 2, 2, "process 1 of this host trains there")]:
        with pytest.raises(ConfigError, match=re.escape(says)) as err:
            eval_device_name(value, train_device, local_processes=procs, gpus=gpus)
        assert "\n" not in str(err.value)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_evals_on_another_gpu_report_what_evals_on_the_trainings_do(tmp_path, monkeypatch):
    """`run.eval_device`: the periodic evals beside training and the final one, on a second GPU, give the same
    figures as on the training's (and the training's own numbers stay as they were). Warp's calls on a GPU leave
    its context current: the training's device must stay the current one throughout (each timed phase checks)."""
    import gbxcule.rl.session as session

    start, seen = session.Timer.start, set()

    def timed(self, name):
        seen.add(torch.cuda.current_device())
        return start(self, name)

    monkeypatch.setattr(session.Timer, "start", timed)
    ev = ("eval/greedy_success", "eval/greedy_return", "eval/median_steps")
    for background in (False, True):
        rows = []
        for name, where in (("same", None), ("other", "cuda:1")):
            cfg = tiny(tmp_path / f"{name}{int(background)}", eval_every=48, eval_episodes=2,
                       eval_background=background, checkpoint_every=50, device="cuda:0", eval_device=where)
            cfg.env.max_steps = 12
            train(cfg)
            rows.append(metrics(tmp_path / f"{name}{int(background)}"))
        keys = ("env_steps", "loss", "entropy")
        assert [[r.get(k) for k in keys] for r in rows[0]] == [[r.get(k) for k in keys] for r in rows[1]]
        # on CUDA how many evals beside training end before the last update (which waits for one in flight and
        # evaluates the final weights) depends on the two streams' pace: compare each eval's figures by the
        # env-steps of the weights it played; waited evals come at every 48 env-steps
        evals = [{r["eval/env_steps"]: [r.get(k) for k in ev] for r in rs if "eval/greedy_success" in r}
                 for rs in rows]
        both = evals[0].keys() & evals[1].keys()
        assert all(evals[0][s] == evals[1][s] for s in both)
        assert both == {48, 96, 144, 192} if not background else 192 in both
    assert seen == {0}


def test_periodic_eval_beside_training_logs_each_result_at_its_weights_env_steps(tmp_path):
    cfg = tiny(tmp_path, eval_every=48, eval_episodes=2, eval_background=True, checkpoint_every=50)
    cfg.env.max_steps = 12
    s = train(cfg)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["update"], r["env_steps"], r["eval/env_steps"]) for r in rows if "eval/greedy_success" in r]
    # 12 eval steps, one after each training step (8 an update): the eval of the weights at 48 env-steps (update
    # 1) ends in update 3, which starts the next one (the one due at 96 waited for it); the last update waits
    # for that and then evaluates the final weights, which the row keeps
    assert s["stopped"] == "done" and evals == [(3, 144, 48), (4, 192, 192)]
    # with all 12 eval steps after one training step each eval is read at the end of the update after its start
    cfg2 = tiny(tmp_path / "fast", eval_every=48, eval_episodes=2, eval_background=True, checkpoint_every=50)
    cfg2.env.max_steps, cfg2.run.eval_background_steps = 12, 12
    train(cfg2)
    rows2 = [json.loads(x) for x in (tmp_path / "fast" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["update"], r["eval/env_steps"]) for r in rows2 if "eval/greedy_success" in r] == [(2, 48), (3, 96),
                                                                                                 (4, 192)]
    # the eval plays a copy of the weights on an env of its own: its pace leaves training's numbers as they were
    keys = ("env_steps", "loss", "entropy", "approx_kl", "episode_return", "actions")
    assert [[r.get(k) for k in keys] for r in rows] == [[r.get(k) for k in keys] for r in rows2]
    assert all(r.get("loss") is not None for r in rows)
    assert "time_eval_s" in rows[-1] and "time_eval_s" not in rows[2]
    # best_policy.pt: the weights of the first eval with the best greedy success (ties keep the earlier)
    from gbxcule.rl.training import evaluate

    best = load_checkpoint(tmp_path / "best_policy.pt")
    assert rows[-1]["eval/best_greedy"] == rows[2]["eval/greedy_success"] == 0.0
    assert best["global_step"] == 48 and best["metrics"]["eval/env_steps"] == 48
    assert evaluate(tmp_path / "best_policy.pt", episodes=2, device="cpu")["episodes"] == 2


def test_best_policy_keeps_the_weights_of_the_best_periodic_eval(tmp_path, monkeypatch):
    import gbxcule.rl.session as loop

    rates = iter([0.5, 0.25, 0.75, 0.75])
    seen = []

    def fake_eval(model, env, modes, seed, amp):  # the eval's verdicts, and the weights it was shown
        seen.append([p.detach().clone() for p in model.parameters()])
        return {"success_rate": next(rates), "mean_return": 0.0, "median_steps": None, "starts_skipped": 0}

    monkeypatch.setattr(loop, "evaluate_model", fake_eval)
    train(tiny(tmp_path, eval_every=48, eval_episodes=2, checkpoint_every=50))
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["eval/best_greedy"] for r in rows] == [0.5, 0.5, 0.75, 0.75]
    best = load_checkpoint(tmp_path / "best_policy.pt")
    assert best["global_step"] == 144 and best["metrics"]["eval/greedy_success"] == 0.75  # the third, not the tie
    for p, q in zip(best["model"].values(), seen[2], strict=True):
        assert torch.equal(p, q.half())


def test_the_final_policy_is_the_best_evals_where_the_last_eval_did_worse(tmp_path, monkeypatch, capsys):
    import gbxcule.rl.session as session

    rates = iter([0.5, 0.75, 0.25, 0.0])
    monkeypatch.setattr(session, "evaluate_model", lambda model, env, modes, seed, amp: {
        "success_rate": next(rates), "mean_return": 0.0, "median_steps": None, "starts_skipped": 0})
    lines = []
    s = train(tiny(tmp_path, eval_every=48, eval_episodes=2, checkpoint_every=50), echo=lines.append)
    assert s["final_policy"] == {"source": "best_eval", "greedy": 0.75, "env_steps": 96, "last_greedy": 0.0}
    assert (tmp_path / "policy.pt").read_bytes() == (tmp_path / "best_policy.pt").read_bytes()
    assert load_checkpoint(tmp_path / "checkpoint.pt")["global_step"] == 192  # resume goes on from the last
    assert any("final policy: the weights of the best periodic eval (75.0% greedy at 96 env-steps)" in x
               for x in lines), lines
    assert json.loads((tmp_path / "summary.json").read_text())["final_policy"]["source"] == "best_eval"


def test_periodic_evals_are_on_by_default_and_the_last_weights_are_always_judged(tmp_path, monkeypatch):
    import gbxcule.rl.session as session

    seen = []
    monkeypatch.setattr(session, "evaluate_model", lambda model, env, modes, seed, amp: seen.append(1) or {
        "success_rate": 0.5, "mean_return": 0.0, "median_steps": None, "starts_skipped": 0})
    cfg = tiny(tmp_path, eval_episodes=2)
    cfg.run.evals = 2  # two evals spread over the run's 4 updates (the default is 10)
    s = train(cfg)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows if "eval/greedy_success" in r] == [2, 4] and len(seen) == 2
    assert s["final_policy"] == {"source": "last", "greedy": 0.5, "env_steps": 192}
    assert make_config(None, {}).run.evals == 10 and make_config(None, {}).run.eval_episodes == 64


def test_a_run_that_ends_at_its_total_before_the_time_limit_says_so(tmp_path, capsys):
    base = ["train", "--device", "cpu", "--num-envs", "2", "--rollout-steps", "4", "--epochs", "1", "--minibatches",
            "1", "--model", "small", "--total-steps", "8", "--eval-episodes", "0", "--no-progress",
            "--set", "run.tensorboard=false"]
    assert main([*base, "--time-limit", "3600", "--run-dir", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "(done)" in out and "before the time limit of 3600 s; --total-steps trains longer" in out
    assert main([*base, "--run-dir", str(tmp_path / "b")]) == 0  # no time limit: nothing to say
    assert "--total-steps trains longer" not in capsys.readouterr().out


def test_policy_every_s_keeps_the_weights_at_each_mark_of_training_time(tmp_path, monkeypatch):
    """run.policy_every_s = S: at the first update's end at or past each multiple of S training seconds the weights
    go to policies/policy_<mark>s.pt (the latest mark where an update passed several), which `gbxcule eval` reads;
    a resumed run keeps the marks it had (a kept file is never rewritten with later weights)."""
    import gbxcule.rl.session as session
    from gbxcule.rl.training import evaluate

    # a fake clock: updates 1-4 end at 10, 20, 25 and 65 seconds of training
    monkeypatch.setattr(session.Session, "train_wall", lambda self: (0.0, 10.0, 20.0, 25.0, 65.0)[self.update])
    for name, parts in (("straight", [{}]), ("part", [{"stop_after_updates": 2}, {}])):
        for i, extra in enumerate(parts):
            train(tiny(tmp_path / name, policy_every_s=15.0, **extra), resume=i > 0)
        kept = {p.name: load_checkpoint(p)["global_step"] for p in (tmp_path / name / "policies").iterdir()}
        # update 2 passes mark 15, update 3 none (the resumed run too), update 4 marks 30, 45 and 60: one file
        assert kept == {"policy_15s.pt": 2 * 48, "policy_60s.pt": 4 * 48}, (name, kept)
    rep = evaluate(tmp_path / "part" / "policies" / "policy_15s.pt", episodes=2, device="cpu", modes=("greedy",))
    assert rep["env_steps_trained"] == 2 * 48 and rep["greedy"]["episodes"] == 2
