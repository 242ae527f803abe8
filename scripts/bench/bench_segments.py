"""Which segments of a long task a policy has learned: its greedy success from each milestone task's start
(BENCHMARKS.md "The quest").

    python scripts/bench/bench_segments.py RUN_OR_POLICY [RUN_OR_POLICY ...] --episodes 16 --device cpu \
        --out segments.json [--along 6 --steps 128 --sampled] [--flags] [--agree] [--trace 40]

A policy trained on a whole quest is judged from the quest's start, where it fails at its first unlearned segment
and says nothing of the ones after. Here each policy plays, greedy, from the start of every segment task of its
run's pack: the tasks named after its task with `_m<N>` (`quest_m1` .. `quest_m11` for `quest`: milestone N from
the state after milestone N-1), in N order, or `--tasks`. Each is `gbxcule eval --greedy-only` on that task
(`--episodes` episodes from as many start states, the final eval's seed). Prints a table (the greedy success of
each policy on each task, and the mean deepest milestone its episodes held), writes JSON. A policy or task that
cannot be evaluated is one line and exit status 1.

`--along K` also says where within each segment the policy fails: it plays from every K-th step of the task's
solution (the task's start script and that many solution steps; `--steps` limits those episodes, as the state
archive's `max_steps` limits an episode from a cell), so a policy that learned a segment's end and not its head
passes from the later points only. Each episode starts, as every eval's, 0-8 random steps after its point, so
neighbouring points overlap. A point at or past the goal reports None. `--sampled` adds sampled play.

`--flags` and `--agree` follow each task's solution in one episode from its start to its goal (no random steps): its
actions are played while the policy looks on, its recurrent state carried along them, so at each step it is in the
state an episode that followed the solution would hold. `--flags` (a task whose milestones are shown:
env.show_milestones) asks whether the policy reads the shown milestones: at each step the total variation between
its action distribution and the one from the same state with the newest held milestone cleared from the last row;
near 0 where it acts alike either way. `--agree` asks where the policy leaves the solution: at each step its greedy
action beside the solution's and the probability it gives the solution's. The solution is one way through, so a
different action is not always a wrong one (another route, or a button that does nothing there).

`--trace N` asks where a greedy policy stalls: it plays greedy from each task's start (no random steps) for up to N
steps, and at each step records the place (the task's `cells` bytes, else its `novelty_ram`), the greedy action and
the four likeliest actions with their probabilities. The table folds steps that repeat the place and the action: a
greedy policy pressing one button on a still screen shows as one line with its count. It folds a cycle too (2 to
`CYCLE_MAX` steps of places and actions repeated back to back at least twice): a policy walking to and fro shows as
one line with each of its steps' place, action and the two likeliest probabilities.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def segment_tasks(spec: str) -> list[str]:
    """The segment tasks of the task `spec` names (a built-in "quest", "quest:quest", or "pack.toml:quest"): the
    tasks of its pack named `<its name>_m<N>`, as specs of the same form, in N order; none where it has none."""
    from gbxcule.rl.tasks import builtin_packs, load_pack, load_task

    task = load_task(spec)
    if ".toml" in spec:
        path = spec.rpartition(":")[0] if spec.rfind(":") > spec.rfind(".toml") else spec
        names, prefix = load_pack(path), f"{path}:"
    else:
        names, prefix = builtin_packs()[task.pack], f"{task.pack}:"
    pattern = re.compile(re.escape(task.name) + r"_m(\d+)")
    found = sorted((int(m.group(1)), name) for name in names if (m := pattern.fullmatch(name)))
    return [prefix + name for _, name in found]


def run_task(source: str) -> str:
    """The task a run folder or policy file was trained on (its config's env.task)."""
    from gbxcule.core.errors import GbxculeError
    from gbxcule.rl.rundir import final_policy, load_checkpoint

    task = load_checkpoint(final_policy(source)).get("config", {}).get("env", {}).get("task")
    if not isinstance(task, str):
        raise GbxculeError(f"{source}: its config names no task; name the tasks with --tasks")
    return task


def along_tasks(spec: str, every: int, steps: int | None) -> list[tuple[int, object]]:
    """(j, the task `spec` started j steps into its solution) for j = 0, every, 2 * every, ... below the solution's
    length (`every` >= 1): its start script with the solution's first j steps appended, the rest of the solution its
    own, and the step limit `steps` (default the task's)."""
    import dataclasses

    from gbxcule.core.errors import GbxculeError
    from gbxcule.rl.tasks import load_task

    task = load_task(spec)
    if not task.solution:
        raise GbxculeError(f"task {task.id} has no solution to start along (--along)")
    if task.start.states or task.start.generator:
        raise GbxculeError(f"task {task.id} starts from states or a generator, not a script: --along needs a script")
    out = []
    for j in range(0, len(task.solution), every):
        start = dataclasses.replace(task.start, script=task.start.script + task.solution[:j])
        out.append((j, dataclasses.replace(task, name=f"{task.name}@{j}", start=start, solution=task.solution[j:],
                                           step_limit=steps or task.step_limit)))
    return out


def policy_env(source: str, task, device: str):
    """One eval env of `task` at its start (no random steps) on `device` and the policy of `source` built for it."""
    from gbxcule.rl.config import resolve_device
    from gbxcule.rl.rundir import final_policy, load_checkpoint
    from gbxcule.rl.training import config_from_dict, eval_env, load_model

    device = resolve_device(device)
    ck = load_checkpoint(final_policy(source))
    env = eval_env(config_from_dict(ck["config"], evaluate_only=True), 1, device, 0, task)
    try:
        return env, load_model(ck, env, device)
    except BaseException:
        env.close()
        raise


def trace(source: str, spec: str, device: str, steps: int) -> list[dict]:
    """The policy played greedy from task `spec`'s start for up to `steps` steps (until the episode ends): at each
    step {"at": the place's RAM bytes, "greedy": the action, "top": {action: probability} of the four likeliest}."""
    import torch

    from gbxcule.rl.goals import ram_rows
    from gbxcule.rl.tasks import load_task

    task = load_task(spec)
    env, model = policy_env(source, task, device)
    try:
        rows = ram_rows(task.cells or task.novelty_ram, env.backend.layout)
        names, state, out = env.codec.names, model.initial_state(1, env.obs.device), []
        for _ in range(steps):
            with torch.no_grad():
                logits, state = model.policy_step(env.obs, state)
            probs = logits.float().softmax(-1)[0]
            top = torch.topk(probs, min(4, probs.numel()))
            action = int(probs.argmax())
            out.append({"at": env.ram[rows, 0].tolist(), "greedy": names[action],
                        "top": {names[int(i)]: round(float(v), 3) for v, i in zip(top.values, top.indices,
                                                                                   strict=True)}})
            _, _, term, trunc, _ = env.step(torch.tensor([action], device=env.obs.device))
            if bool((term | trunc)[0]):
                break
        return out
    finally:
        env.close()


CYCLE_MAX = 32  # the longest cycle `fold` looks for: the eval's cycle ring (rl/evaluate.py CYCLE_STEPS)


def cycle_at(keys: list, j: int) -> tuple[int, int]:
    """(P, R): the shortest block of 2 to CYCLE_MAX (place, action) keys from j, not one key repeated, that repeats
    back to back R >= 2 times; (0, 0) if none."""
    for p in range(2, CYCLE_MAX + 1):
        block = keys[j:j + p]
        if len(block) < p or all(x == block[0] for x in block):
            continue
        r = 1
        while keys[j + r * p:j + (r + 1) * p] == block:
            r += 1
        if r >= 2:
            return p, r
    return 0, 0


def fold(steps: list[dict]) -> list[str]:
    """A `trace` as lines: one per cycle (`cycle_at`), "j-k cycle of P xR: (place) action p > runner-up p; ..." with
    its first repeat's two likeliest actions; else one per run of steps with the same place and greedy action,
    "j-k (place) action xN: top" with the run's first step's probabilities."""
    keys = [(x["at"], x["greedy"]) for x in steps]
    lines, j = [], 0
    while j < len(steps):
        p, r = cycle_at(keys, j)
        if p:
            parts = []
            for x in steps[j:j + p]:
                (a, pa), (b, pb) = list(x["top"].items())[:2]
                parts.append(f"({','.join(map(str, x['at']))}) {x['greedy']}: {a} {pa:.2f} > {b} {pb:.2f}")
            lines.append(f"{j}-{j + r * p - 1} cycle of {p} x{r}: " + "; ".join(parts))
            j += r * p
            continue
        k = j
        while k + 1 < len(steps) and keys[k + 1] == keys[j]:
            k += 1
        top = " ".join(f"{a} {p:.2f}" for a, p in steps[j]["top"].items())
        span = f"{j}" if k == j else f"{j}-{k}"
        place = ",".join(map(str, steps[j]["at"]))
        lines.append(f"{span} ({place}) {steps[j]['greedy']} x{k - j + 1}: {top}")
        j = k + 1
    return lines


def follow(source: str, spec: str, device: str, flags: bool, agree: bool) -> dict:
    """The policy along task `spec`'s solution in one episode from its start (no random steps; the solution's actions
    are played and the policy's recurrent state is carried along them): at each step j, {"agree": its greedy action,
    the solution's action and the probability it gives that one} with `agree`; with `flags`, "flags": the total
    variation between its action distribution and the one from the same state on the same observation with the newest
    milestone the last row shows cleared (None where it shows none)."""
    import torch

    from gbxcule.core.errors import GbxculeError
    from gbxcule.rl.goals import SHOWN_PX
    from gbxcule.rl.tasks import load_task

    task = load_task(spec)
    if not task.solution:
        raise GbxculeError(f"task {task.id} has no solution to follow (--flags, --agree)")
    env, model = policy_env(source, task, device)
    try:
        if flags and not env.show_milestones:
            raise GbxculeError(f"{source}: its env does not show milestones (env.show_milestones): --flags has none "
                               "to clear")
        per = SHOWN_PX if env.obs_mode == "pixels" else 1
        names, state, out = env.codec.names, model.initial_state(1, env.obs.device), {}
        for j, want in enumerate(task.solution):
            obs = [env.obs.clone()]
            if flags:
                held = (obs[0][0, -1, 71, :per * len(env.milestone_names)].view(-1, per) > 0).any(1).nonzero()
                if len(held):
                    newest = int(held[-1])
                    obs.append(obs[0].clone())
                    obs[1][:, :, 71, newest * per:(newest + 1) * per] = 0
            with torch.no_grad():
                logits, after = model.policy_step(obs[0], state)
                probs = [logits.float().softmax(-1)[0]]
                probs += [model.policy_step(o, state)[0].float().softmax(-1)[0] for o in obs[1:]]
            row = out[str(j)] = {}
            if agree:
                row["agree"] = {"solution": names[want], "p_solution": float(probs[0][want]),
                                "greedy": names[int(probs[0].argmax())]}
            if flags:
                row["flags"] = 0.5 * float((probs[0] - probs[1]).abs().sum()) if len(probs) == 2 else None
            _, _, term, trunc, _ = env.step(torch.tensor([want], device=env.obs.device))
            state = after
            if bool((term | trunc)[0]):  # the episode ended (the goal, or the task's step limit)
                break
        return out
    finally:
        env.close()


def measure(sources: list[str], tasks: list[str] | None, episodes: int, device: str, along: int | None = None,
            steps: int | None = None, sampled: bool = False, flags: bool = False, agree: bool = False,
            greedy_trace: int | None = None) -> dict:
    """{"policies": {source: {task: {"greedy", "mean_deepest"[, "sampled"][, "along"][, "follow"][, "trace"]}}}},
    evaluated in that order; "along": {j: {"greedy"[, "sampled"]}} from j steps into the task's solution
    (`along_tasks`); "follow": {j: {["agree"][, "flags"]}} at each step of the solution played in one episode
    (`follow`); "trace": the greedy play from the task's start (`trace`)."""
    from gbxcule.core.errors import GbxculeError
    from gbxcule.rl.training import evaluate

    modes = ("greedy", "sampled") if sampled else ("greedy",)
    if along is not None and along < 1 or steps is not None and steps < 1:  # before any play
        raise GbxculeError(f"--along and --steps must be >= 1, got {along} and {steps}")
    if steps is not None and along is None:
        raise GbxculeError("--steps limits the --along episodes: give --along too")
    if greedy_trace is not None and greedy_trace < 1:
        raise GbxculeError(f"--trace must be >= 1, got {greedy_trace}")

    out: dict = {"policies": {}}
    for source in sources:
        names = tasks
        if not names:
            task = run_task(source)
            names = segment_tasks(task)
            if not names:
                raise GbxculeError(f"{source}: its task {task!r} has no segment tasks (<task>_m<N> in its pack); "
                                   "name some with --tasks")
        points = {task: along_tasks(task, along, steps) for task in names} if along is not None else {}
        rows = {}
        for task in names:
            rep = evaluate(source, episodes=episodes, device=device, task=task, modes=modes)
            rows[task] = {"greedy": rep["greedy"]["success_rate"], "mean_deepest": rep["greedy"].get("mean_deepest")}
            if sampled:
                rows[task]["sampled"] = rep["sampled"]["success_rate"]
            if along is not None:
                rows[task]["along"] = {}
                for j, at in points[task]:
                    rep = evaluate(source, episodes=episodes, device=device, task=at, modes=modes)
                    rows[task]["along"][str(j)] = {m: rep[m]["success_rate"] for m in modes}
            if flags or agree:
                rows[task]["follow"] = follow(source, task, device, flags, agree)
            if greedy_trace is not None:
                rows[task]["trace"] = trace(source, task, device, greedy_trace)
        out["policies"][source] = rows
    return out


def table(result: dict) -> str:
    """One row a task, one column a policy: its greedy success (and the mean deepest milestone, where reported)."""
    names = list(result["policies"])
    tasks = [t for rows in result["policies"].values() for t in rows]
    tasks = list(dict.fromkeys(tasks))
    labels = [Path(n).name if Path(n).is_dir() else "/".join(Path(n).parts[-2:]) for n in names]
    lines = [f"{'task':24s}" + "".join(f" {x[-26:]:>26s}" for x in labels)]
    for t in tasks:
        cells = []
        for n in names:
            r = result["policies"][n].get(t)
            deep = "" if r is None or r.get("mean_deepest") is None else f" (deepest {r['mean_deepest']:.2f})"
            cells.append("-" if r is None else f"{r['greedy']:.0%}{deep}")
        lines.append(f"{t.rpartition(':')[2][:24]:24s}" + "".join(f" {c:>26s}" for c in cells))
    for n, label in zip(names, labels, strict=True):  # --along: the greedy success from each point, in percent
        for t, r in result["policies"][n].items():
            if r.get("along"):
                pct = " ".join("-" if v["greedy"] is None else f"{100 * v['greedy']:.0f}" for v in r["along"].values())
                lines.append(f"{label[-26:]} {t.rpartition(':')[2]} from steps {', '.join(r['along'])}: {pct}")
            if r.get("follow"):  # --flags, --agree: at each step of the solution
                steps = r["follow"].values()
                if any("flags" in v for v in steps):
                    tv = " ".join("-" if v["flags"] is None else f"{v['flags']:.2f}" for v in steps)
                    lines.append(f"{label[-26:]} {t.rpartition(':')[2]} newest milestone cleared, total variation at "
                                 f"each step: {tv}")
                if any("agree" in v for v in steps):
                    ag = " ".join(f"{v['agree']['solution']} {v['agree']['p_solution']:.2f} {v['agree']['greedy']}"
                                  for v in steps)
                    lines.append(f"{label[-26:]} {t.rpartition(':')[2]} at each step the solution's action, its "
                                 f"probability, the greedy action: {ag}")
            if r.get("trace"):  # --trace: greedy from the task's start, runs of one place and action folded
                lines.append(f"{label[-26:]} {t.rpartition(':')[2]} greedy from its start: steps (place) action xN: "
                             "the likeliest actions")
                lines += [f"  {x}" for x in fold(r["trace"])]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sources", nargs="+", metavar="RUN_OR_POLICY")
    ap.add_argument("--tasks", nargs="+", help="these tasks instead of the run's segment tasks")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", type=Path, default=Path("segments.json"))
    ap.add_argument("--along", type=int, metavar="K", help="also play from every K-th step of each task's solution")
    ap.add_argument("--steps", type=int, help="the step limit of the --along episodes (default: the task's)")
    ap.add_argument("--sampled", action="store_true", help="also play sampled")
    ap.add_argument("--flags", action="store_true", help="along each task's solution: how much the policy's actions "
                    "depend on the newest shown milestone")
    ap.add_argument("--agree", action="store_true", help="along each task's solution: the policy's greedy action and "
                    "the probability it gives the solution's")
    ap.add_argument("--trace", type=int, metavar="N", help="from each task's start: the place, the greedy action and "
                    "the likeliest actions at each of up to N greedy steps")
    args = ap.parse_args(argv)
    from gbxcule.core.errors import GbxculeError
    from gbxcule.harness.bench import environment

    try:
        result = measure(args.sources, args.tasks, args.episodes, args.device, args.along, args.steps, args.sampled,
                         args.flags, args.agree, args.trace)
    except GbxculeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    result.update(episodes=args.episodes, device=args.device, along=args.along, steps=args.steps, flags=args.flags,
                  agree=args.agree, trace=args.trace, environment=environment())
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
