"""What success means and where it is counted: a task with no RAM goal succeeds by its goal template's own
verdict, labelled so in the env's stats, training logs, the progress bar, `gbxcule eval` and Gymnasium's
`is_success`; evaluation skips start states at which the goal already holds and counts them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gbxcule.rl import GameEnv  # noqa: E402
from gbxcule.rl.evaluate import run_episodes, summarize  # noqa: E402
from gbxcule.rl.session import progress_line  # noqa: E402
from gbxcule.rl.tasks import load_task  # noqa: E402

SOLUTION = load_task("leave_house").solution  # 13 steps from the task's start to the town


@pytest.fixture(scope="module")
def pixel_pack(tmp_path_factory):
    """leave_house with its RAM goal taken away: only the goal template says when the episode succeeded."""
    d = tmp_path_factory.mktemp("pack")
    p = d / "px.toml"
    p.write_text('[pack]\nname = "px"\nrom = "OVERWORLD"\n\n[tasks.door]\nstart = { script = "N5" }\n'
                 'step_limit = 20\nsolution = "R4 D6 R N2"\ntemplate = "solution"\nreward = { tau = 0.1 }\n')
    return f"{p}:door"


def scripted(actions):
    """A policy that plays `actions` in every env, then NOOPs."""
    t = {"step": 0}

    def act(obs, done=None):
        a = actions[t["step"]] if t["step"] < len(actions) else 0
        t["step"] += 1
        return torch.full((obs.shape[0],), a, dtype=torch.int64)

    return act


def test_template_verdict_is_success_without_a_ram_goal(pixel_pack):
    env = GameEnv(task=pixel_pack, num_envs=2, info_mode="full")
    assert env.success_source == "template" and env.describe()["success_source"] == "template"
    assert GameEnv(task="leave_house", num_envs=1).success_source == "ram"
    env.reset(seed=0)
    ended = None
    for t, a in enumerate(SOLUTION, 1):
        _, _, term, _, info = env.step(np.array([a, 0]))
        assert bool(info["success"][0]) == bool(term[0]), t
        assert not bool(info["success"][1])
        if bool(term[0]):
            ended = t
            break
    assert ended is not None and ended >= len(SOLUTION) - 2
    s = env.episode_stats()
    assert s["success_source"] == "template" and s["episodes"] == 1 and s["success_rate"] == 1.0
    assert s["template_fired"] == 1 and math.isnan(s["template_precision"])  # nothing to check it against
    assert "success (template) 100.0%" in progress_line({"running_success": 1.0, "success_source": "template"})
    assert "success 50.0%" in progress_line({"running_success": 0.5, "success_source": "ram"})
    # evaluation counts the template's verdict, labelled
    res = run_episodes(env, scripted(SOLUTION), env.max_steps)
    rep = summarize(res, env.success_source, env.terminate_on == "template")
    assert rep["success_source"] == "template" and rep["success_rate"] == 1.0 and rep["median_steps"] == ended
    assert rep["starts_skipped"] == 0 and "template_agreement" not in rep
    env.close()


def test_gymnasium_is_success_follows_the_template(pixel_pack):
    pytest.importorskip("gymnasium")
    from gbxcule.rl.adapters.gym import GbxculeEnv, GbxculeVectorEnv

    env = GbxculeEnv(task=pixel_pack)
    env.reset(seed=0)
    for a in SOLUTION:
        _, _, term, _, info = env.step(int(a))
        if term:
            break
    assert term and info["is_success"] is True and info["success_source"] == "template"
    env.close()
    vec = GbxculeVectorEnv(num_envs=2, task="leave_house")
    assert vec.success_source == "ram"
    vec.close()


def _two_starts(tmp_path):
    """A snapshot of two states of the built-in game: in the house (slot 0) and in town, at the goal (slot 1)."""
    from gbxcule.backends.warp_vec import WarpVecBackend
    from gbxcule.rl.tasks import parse_script
    from gbxcule.roms import resolve_rom

    env = GameEnv(task="leave_house", num_envs=1)
    be = WarpVecBackend(str(resolve_rom("OVERWORLD")), 2, env.codec, env.schedule)
    env.close()
    home, town = parse_script("N5", env.codec), parse_script("N5 R4 D6 R N2", env.codec)
    for t in range(len(town)):
        be.step(np.array([home[t] if t < len(home) else 0, town[t]], dtype=np.int32))
    path = tmp_path / "two.gbxs"
    be.save_state(path)
    return path


@pytest.mark.parametrize("task", ["leave_house", "pixel"])
def test_eval_skips_starts_where_the_goal_holds(tmp_path, pixel_pack, task):
    env = GameEnv(task=pixel_pack if task == "pixel" else task, num_envs=16, start_states=_two_starts(tmp_path),
                  seed=5)
    assert env.num_slots == 2
    obs, _ = env.reset()
    at_goal = (env._slots == 1).numpy()
    assert env.goal_holds().numpy().tolist() == at_goal.tolist() and 0 < at_goal.sum() < 16
    env.reset(seed=5)
    res = run_episodes(env, scripted([0] * 3), 3)  # 3 NOOPs: no episode that counts can succeed
    skipped = res["skipped"]
    assert skipped.sum() > 0 and not res["success"][skipped].any()
    rep = summarize(res, env.success_source, env.terminate_on == "template")
    assert rep["starts_skipped"] == int(skipped.sum()) and rep["episodes"] == 16 - rep["starts_skipped"]
    assert rep["success_rate"] == 0.0  # counted, the starts at the goal would have given a do-nothing policy credit
    env.close()


def test_eval_counts_failed_episodes_that_end_on_a_still_screen():
    """`stuck_rate`: the failed episodes whose observation stood still over their last STUCK_STEPS steps or more
    (a greedy policy walking into a wall for good), and `stuck_actions`, what they kept pressing. Standing still
    (NOOP) is stuck in every episode, and so is walking left into the wall; a walk that keeps the screen moving is
    not; the solution succeeds, and a success is never stuck."""
    from gbxcule.rl.evaluate import STUCK_STEPS, random_policy

    env = GameEnv(task="leave_house", num_envs=8, max_steps=STUCK_STEPS + 8, start_states=["random_actions", 8, 8])
    idle = run_episodes(env, scripted([]), env.max_steps)
    assert (idle["still"] >= STUCK_STEPS).all() and not idle["success"].any()
    rep = summarize(idle, env.success_source, False)
    assert rep["stuck_rate"] == 1.0 and rep["stuck_actions"] == {"noop": 8}  # what the stuck episodes kept pressing
    left = env.codec.actions.index(("left",))  # into the room's wall, in every start
    wall = run_episodes(env, scripted([left] * env.max_steps), env.max_steps)
    assert summarize(wall, env.success_source, False)["stuck_actions"] == {"left": 8}
    walk = run_episodes(env, random_policy(env.num_actions, 0), env.max_steps)
    assert (walk["still"] < STUCK_STEPS).all()
    rep = summarize(walk, env.success_source, False)
    assert rep["stuck_rate"] == 0.0 and rep["stuck_actions"] == {}
    env = GameEnv(task="leave_house", num_envs=2, max_steps=STUCK_STEPS + 20)  # the task's start: the solution works
    solved = run_episodes(env, scripted(SOLUTION), env.max_steps)
    assert solved["success"].all() and summarize(solved, env.success_source, False)["stuck_rate"] == 0.0
    env.close()


def test_eval_counts_failed_episodes_that_end_circling():
    """`cycle_rate`: the failed episodes, not stuck, each of whose last STUCK_STEPS newest frames was one of the
    CYCLE_STEPS before it (a greedy policy walking to and fro, or round a loop, for good). Right, left, right, ... is
    circling where it moves the screen, stuck where it does not; so is a square walk of 5 steps a side (a 20-step
    loop); standing still is stuck and not circling; the solution succeeds and is neither."""
    from gbxcule.rl.evaluate import STUCK_STEPS, random_policy

    env = GameEnv(task="leave_house", num_envs=8, max_steps=STUCK_STEPS + 8, start_states=["random_actions", 8, 8])
    right, left = env.codec.actions.index(("right",)), env.codec.actions.index(("left",))
    fro = run_episodes(env, scripted([right, left] * env.max_steps), env.max_steps)
    moving = fro["still"] < STUCK_STEPS  # (a start in a menu or a text box: right and left leave it still)
    assert (fro["loop"] >= STUCK_STEPS).all() and moving.sum() >= 6
    rep = summarize(fro, env.success_source, False)
    assert rep["cycle_rate"] == moving.mean() and rep["stuck_rate"] == 1 - moving.mean()
    walker = GameEnv(task="leave_house", num_envs=8, max_steps=STUCK_STEPS + 48, start_states=["random_actions", 8, 8])
    down, up = walker.codec.actions.index(("down",)), walker.codec.actions.index(("up",))
    square = run_episodes(walker, scripted(([right] * 5 + [down] * 5 + [left] * 5 + [up] * 5) * 4), walker.max_steps)
    assert (square["loop"] >= STUCK_STEPS).all() and (square["still"] < STUCK_STEPS).all()  # (a ring of 8 sees none)
    walker.close()
    idle = summarize(run_episodes(env, scripted([]), env.max_steps), env.success_source, False)
    assert idle["stuck_rate"] == 1.0 and idle["cycle_rate"] == 0.0  # a still screen is stuck, not circling
    walk = run_episodes(env, random_policy(env.num_actions, 0), env.max_steps)
    assert (walk["loop"] <= STUCK_STEPS + 8).all() and walk["loop"].min() < STUCK_STEPS  # some random walks move on
    env = GameEnv(task="leave_house", num_envs=2, max_steps=STUCK_STEPS + 20)
    solved = summarize(run_episodes(env, scripted(SOLUTION), env.max_steps), env.success_source, False)
    assert solved["success_rate"] == 1.0 and solved["cycle_rate"] == 0.0
    env.close()


def test_eval_gif_shows_each_episode_where_it_ended():
    """With `gif_envs` an env whose episode has ended shows the screen it ended on from then on, not its next
    episode: env 0 plays the solution and freezes on the town screen it reaches (the one an env that does not end at
    the goal shows after the same steps), env 1 stands still until the step limit."""
    env = GameEnv(task="leave_house", num_envs=2, max_steps=len(SOLUTION) + 6)
    t = {"step": 0}

    def act(obs, done=None):
        a = SOLUTION[t["step"]] if t["step"] < len(SOLUTION) else 0
        t["step"] += 1
        return torch.tensor([a, 0], dtype=torch.int64)

    res = run_episodes(env, act, env.max_steps, gif_envs=2)
    assert res["success"].tolist() == [True, False] and len(res["frames"]) == env.max_steps + 1
    n = int(res["length"][0])  # the goal holds after n steps; frames[j] is the screen before step j + 1
    ref = GameEnv(task="leave_house", num_envs=1, max_steps=10**6, reward={"terminate_on": "none"})
    ref.reset(seed=env.seed)
    for a in SOLUTION[:n]:
        ref.step(torch.tensor([a], dtype=torch.int64))
    end = ref.frames([0])[0]
    assert not (res["frames"][n - 1][0] == end).all() and not (res["frames"][0][0] == end).all()
    assert all((f[0] == end).all() for f in res["frames"][n:])  # (the start screen, before the fix)
    assert res["frame_successes"][n] == 1 and res["frame_successes"][n - 1] == 0
    with pytest.raises(IndexError, match="env 2 out of range"):
        env.keep_final_frames([2])
    with pytest.raises(ValueError, match="keep_final_frames first"):  # run_episodes let go of them
        env.final_frames()
    env.close()
    ref.close()


def test_eval_report_says_what_a_stuck_greedy_policy_kept_pressing():
    """A policy whose argmax is "left" walks into the room's wall from every start: the report's top level (what the
    train summary prints) and the greedy mode's both name it, and `stuck_on` prints it."""
    from gbxcule.rl.algos import get
    from gbxcule.rl.evaluate import STUCK_STEPS, evaluate_model, stuck_on

    env = GameEnv(task="leave_house", num_envs=8, max_steps=STUCK_STEPS + 8, start_states=["random_actions", 8, 8])
    model = get("ppo").build_model(get("ppo").config(), env.num_actions, env.stack_k, env.obs_mode == "packed")
    left = env.codec.actions.index(("left",))
    with torch.no_grad():
        model.pi.bias[left] = 100.0
    rep = evaluate_model(model, env, modes=("greedy",))
    assert rep["stuck_rate"] == 1.0 and rep["stuck_actions"] == rep["greedy"]["stuck_actions"] == {"left": 8}
    assert rep["cycle_rate"] == rep["greedy"]["cycle_rate"] == 0.0
    assert stuck_on(rep) == "left 8"
    env.close()


def test_training_logs_and_eval_label_template_success(pixel_pack, tmp_path, capsys):
    from gbxcule.cli.main import main
    from gbxcule.rl.training import make_config, train

    cfg = make_config(None, {"total_steps": 4 * 8, "env": {"num_envs": 4, "task": pixel_pack},
                             "ppo": {"rollout_steps": 8, "epochs": 1, "minibatches": 1, "model": "small"},
                             "run": {"run_dir": str(tmp_path), "device": "cpu", "progress": False, "evals": 0,
                                     "tensorboard": False, "eval_every": None, "eval_every_s": None}})
    train(cfg)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["success_source"] == "template" and rows[0]["episodes"] >= 0
    assert main(["eval", str(tmp_path), "--device", "cpu", "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "greedy   success (template)" in out and "template's verdict" in out


def test_eval_report_says_where_the_failed_episodes_ended():
    """Where a task names cell bytes (leave_house: map, x, y), the report counts the places its failed episodes took
    their last step from, most first: NOOPs fail where they started; the solution's first four steps (R4) fail
    where those steps leave the player, read from RAM in an env of its own; `failed_on` prints them."""
    from gbxcule.rl.evaluate import failed_on
    from gbxcule.rl.goals import ram_rows

    task = load_task("leave_house")

    def place(env) -> str:
        return ",".join(str(int(env.ram[r, 0])) for r in ram_rows(task.cells, env.backend.layout))

    ref = GameEnv(task="leave_house", num_envs=1)
    ref.reset(seed=ref.seed)
    start = place(ref)
    for a in SOLUTION[:4]:
        ref.step(torch.tensor([a], dtype=torch.int32))
    walked = place(ref)
    ref.close()
    assert walked != start
    env = GameEnv(task="leave_house", num_envs=4, max_steps=12)
    for actions, where in (([], start), (SOLUTION[:4], walked)):
        rep = summarize(run_episodes(env, scripted(actions), env.max_steps), env.success_source, False)
        assert rep["success_rate"] == 0.0 and rep["failed_at"] == {where: 4}, (actions, rep["failed_at"])
        assert rep["failed_at_cells"] == ["0xC100", "0xC101", "0xC102"]
        assert failed_on(rep) == f"C100,C101,C102 = {where} (4)"
    env.close()
    solved = GameEnv(task="leave_house", num_envs=2)  # episodes that succeed are not counted
    rep = summarize(run_episodes(solved, scripted(SOLUTION), solved.max_steps), solved.success_source, False)
    assert rep["success_rate"] == 1.0 and rep["failed_at"] == {} and failed_on(rep) == ""
    solved.close()
