"""What a feed-forward policy sees in QUEST's dark maze (docs/quest.md; BENCHMARKS.md "The quest").

    python scripts/bench/bench_maze_views.py --tasks quest_m6 quest_m7 --out maze_views.json

In the DARK CAVE only the 3x3 tiles around the player are drawn and the camera follows the player, so the screen
shows the walls next to the player and its facing, not its place. For each task (one whose solution walks through
the dark map): every maze state a policy can be in, a walkable tile with the facing of a move into it, is reached on
the CPU device (one env per state, the shortest walk from the task's start, then that move) and its observation
(the policy's input: 72x80 shades and the milestone row) hashed. Each state's way out is the set of moves that
shorten the walk to the tile where the task's solution leaves the dark map (or ends). Reports:
- `states` and the distinct `screens` among them;
- `aliased`: screens shared by states whose ways out have no move in common (no feed-forward policy can take the
  shortest way from all of them), and `aliased_states`, the states on those screens;
- `route`, `route_aliased`: the solution's steps in the maze, and those whose screen an aliased group holds;
- `route_conflicts`: screens seen twice along the solution with two different actions (a feed-forward policy
  cannot follow the solution itself where this is above 0).
Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import defaultdict, deque
from pathlib import Path


class MazeError(ValueError):
    """A task this measure cannot take (its solution does not start in a dark map)."""


MOVES = {"U": (0, -1), "D": (0, 1), "L": (-1, 0), "R": (1, 0)}
MAP, X, Y = 0xC100, 0xC101, 0xC102  # the quest pack's cell bytes: map, x, y


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="+", default=["quest_m6", "quest_m7"], help="QUEST tasks through the dark maze")
    ap.add_argument("--out", default="maze_views.json", help="the JSON artifact")
    return ap.parse_args(argv)


def place(env, i: int = 0) -> tuple[int, int, int]:
    from gbxcule.rl.goals import ram_rows

    m, x, y = ram_rows((MAP, X, Y), env.backend.layout)
    return int(env.ram[m, i]), int(env.ram[x, i]), int(env.ram[y, i])


def obs_hash(env, i: int) -> str:
    return hashlib.sha1(env.obs[i].cpu().numpy().tobytes()).hexdigest()


def measure(task_name: str) -> dict:
    import torch

    from gbxcule.rl.env import GameEnv
    from gbxcule.rl.tasks import load_task, parse_script
    from gbxcule.roms.quest.world import LEGEND, WORLD

    task = load_task(task_name)
    env = GameEnv(task=task, num_envs=1, device="cpu", info_mode="none", show_milestones="auto", max_steps=10**6)
    try:
        env.reset(seed=0)
        dark = {WORLD.map_ids[m.key]: m for m in WORLD.maps if m.dark}
        start = place(env)
        route, last = [], None  # the solution's (screen, action) in the dark map, and its last tile there
        for a in task.solution:
            p = place(env)
            if p[0] in dark:
                route.append((obs_hash(env, 0), int(a)))
                last = p
            _, _, term, _, _ = env.step(torch.tensor([a], dtype=torch.int32))
            if bool(term[0]):
                break
        codec = env.codec
    finally:
        env.close()
    if last is None or start[0] != last[0]:
        raise MazeError(f"{task_name} does not start in a dark map (QUEST's DARK CAVE)")
    mp = dark[start[0]]
    warps = {(w.x, w.y) for w in mp.warps}

    def walkable(x, y):
        return 0 <= y < len(mp.rows) and 0 <= x < len(mp.rows[y]) and (x, y) not in warps \
            and LEGEND[mp.rows[y][x]] not in WORLD.solid

    def bfs(src):
        prev = {src: None}
        q = deque([src])
        while q:
            p = q.popleft()
            for m, (dx, dy) in MOVES.items():
                n = (p[0] + dx, p[1] + dy)
                if walkable(*n) and n not in prev:
                    prev[n] = (p, m)
                    q.append(n)
        return prev

    def walk(prev, dst):
        out = []
        while prev[dst]:
            dst, m = prev[dst]
            out.append(m)
        return out[::-1]

    home, goal = start[1:], last[1:]
    from_home, to_goal = bfs(home), bfs(goal)
    dist = {p: len(walk(to_goal, p)) for p in to_goal}
    states = []  # (tile, facing, walk from the start)
    for (x, y) in sorted(from_home):
        if (x, y) == goal or (x, y) not in dist:
            continue
        for m, (dx, dy) in MOVES.items():
            back = (x - dx, y - dy)
            if back in from_home:
                states.append(((x, y), m, walk(from_home, back) + [m]))
    way = [frozenset(m for m, (dx, dy) in MOVES.items() if dist.get((t[0] + dx, t[1] + dy), 1 << 30) == dist[t] - 1)
           for t, _, _ in states]
    letter = {m: parse_script(m, codec)[0] for m in "UDLRN"}
    n, steps = len(states), max(len(w) for _, _, w in states)
    env = GameEnv(task=task, num_envs=n, device="cpu", info_mode="none", show_milestones="auto", max_steps=10**6)
    try:
        env.reset(seed=0)
        for k in range(steps):  # each env its walk, then NOOPs (which keep the facing)
            acts = [letter[w[k]] if k < len(w) else letter["N"] for _, _, w in states]
            env.step(torch.tensor(acts, dtype=torch.int32))
        bad = [i for i, (t, _, _) in enumerate(states) if place(env, i)[1:] != t]
        if bad:
            raise MazeError(f"{task_name}: {len(bad)} walks did not end on their tile (walls unlike the ROM's)")
        screens = defaultdict(list)
        for i in range(n):
            screens[obs_hash(env, i)].append(i)
    finally:
        env.close()
    aliased = {h: v for h, v in screens.items() if not frozenset.intersection(*(way[i] for i in v))}
    seen = defaultdict(set)
    for h, a in route:
        seen[h].add(a)
    return {"task": task_name, "map": mp.title, "start": list(home), "exit": list(goal), "states": n,
            "screens": len(screens), "aliased": len(aliased), "aliased_states": sum(len(v) for v in aliased.values()),
            "route": len(route), "route_aliased": sum(h in aliased for h, _ in route),
            "route_conflicts": sum(len(a) > 1 for a in seen.values())}


def main(argv=None) -> int:
    args = parse_args(argv)
    from gbxcule.core.errors import GbxculeError
    from gbxcule.harness.bench import environment

    try:
        rows = [measure(t) for t in args.tasks]
    except (MazeError, GbxculeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    Path(args.out).write_text(json.dumps({"tasks": rows, "environment": environment()}, indent=1) + "\n")
    head = ("task", "states", "screens", "aliased", "aliased states", "route", "route aliased", "route conflicts")
    keys = ("task", "states", "screens", "aliased", "aliased_states", "route", "route_aliased", "route_conflicts")
    print(f"wrote {args.out}")
    print(" | ".join(head))
    for r in rows:
        print(" | ".join(str(r[k]) for k in keys))
    print("states: (tile, facing after a move into it) in the dark map; aliased: screens shared by states whose "
          "shortest ways out have no move in common")
    return 0


if __name__ == "__main__":
    sys.exit(main())
