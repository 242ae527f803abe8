"""`gbxcule ram [ROM] --trace "..."`: find the RAM byte of an event, as cheat finders do (docs/new_game.md).

Plays each --trace in its own env on a warp backend (the CPU device by default), records WRAM and HRAM after
every step (harness/ram.py), keeps the addresses at which every mark's relation holds (core/ramsearch.py),
and prints them with their values over time and a `goal_ram` line for a pack.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gbxcule.cli import checks
from gbxcule.core.errors import GbxculeError

EXAMPLES = """\
trace tokens: button-script tokens as in task scripts (N noop, A, B, S start, E select, U, D, L, R, each with
a repeat count), ?N (N random actions, seeded by --seed and the trace's number) and marks:
  |      a moment to compare later marks with (the trace's start is moment 0)
  |+ |-  the byte increased / decreased since the previous moment
  |= |!  the byte did not change / changed since the previous moment
  |=V    the byte equals V (decimal or 0x hex) here; |!V: differs from V
Every relation of every --trace must hold: each trace narrows the search.

examples on the built-in game (its RAM map: docs/overworld.md):
  # MAP_ID (0xC100): 0 in the house, 1 once out of the door, 2 in the lab
  gbxcule ram OVERWORLD --trace "N5 |=0 R4 D6 R N2 |=1 D R6 D7 R6 U N |=2"
  # PLAYER_X (0xC101): up walking right, down walking left, the same walking down
  gbxcule ram OVERWORLD --trace "N5 | R |+ R |+ L |- D |= L |-"
  # watch a task's goal bytes over random play from its start, and whether its goal holds at each mark
  gbxcule ram --task leave_house --addrs task --trace "?40 |"
"""


def register(sub) -> None:
    import argparse

    from gbxcule.core.action_codec import CODECS

    p = sub.add_parser("ram", help="find the RAM address of an event (search RAM over played traces)",
                       description=__doc__.splitlines()[0], epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("rom", nargs="?", help="ROM file or built-in ROM name (default: the task's)")
    p.add_argument("--trace", action="append", metavar="TRACE", required=True,
                   help="actions and marks, e.g. \"N5 | R4 |+\" (repeat for more traces)")
    p.add_argument("--task", help="start where the task's episodes start (its script and first state), with its "
                                  "codec and schedule; 'task' in --addrs names its goal and novelty bytes")
    p.add_argument("--state", metavar="FILE", help="start from this state (PyBoy .state or gbxcule snapshot)")
    p.add_argument("--addrs", metavar="LIST", help="search (or just watch) only these addresses: hex, comma-"
                                                  "separated (0xC100,C101), or 'task'")
    p.add_argument("--seed", type=int, default=0, help="seed of the ?N random segments (default 0)")
    p.add_argument("--max", type=int, default=16, help="candidates to print (default 16)")
    p.add_argument("--op", default="eq", choices=("eq", "ne", "ge", "gt", "le", "lt"),
                   help="the goal_ram line's op (default eq)")
    p.add_argument("--codec", choices=list(CODECS), help="action codec (default: the task's, else "
                                                         "pokemonred_puffer_v1)")
    p.add_argument("--frames-per-step", type=int, help="frames per step (default: the task's, else 24)")
    p.add_argument("--release-after-frames", type=int, help="frames the buttons are held (default: the task's, "
                                                            "else 8)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _pick(flag: str, given, from_task, default):
    if given is not None and from_task is not None and given != from_task:
        raise GbxculeError(f"--{flag} {given} contradicts the task's {from_task}")
    return given if given is not None else (from_task if from_task is not None else default)


def _task_rom(task, rom_arg):
    """The ROM for `task` (its built-in ROM unless given), checked against the ROM the task is for."""
    from gbxcule.core.cartridge import load_rom
    from gbxcule.roms import resolve_rom

    if rom_arg is None and task.rom is None:
        raise GbxculeError(f"task {task.id} is for a ROM you supply (SHA-1 {task.rom_sha1}): give it")
    rom = checks.rom_file(rom_arg or task.rom, "ram")
    want = task.rom_sha1 or (load_rom(resolve_rom(task.rom)).info.sha1 if task.rom else None)
    if want and rom.info.sha1 != want:
        raise GbxculeError(f"task {task.id} is for the ROM with SHA-1 {want}, not {rom.info.sha1} ({rom.path})")
    return rom


def _task_state(task) -> Path | None:
    """The first of the task's start-state files (paths relative to the working folder, else to the pack's)."""
    for p in task.start.states:
        q = Path(p)
        if not q.is_absolute() and not q.exists() and (Path(task.base_dir) / q).exists():
            q = Path(task.base_dir) / q
        if q.is_dir():
            found = sorted(f for f in q.iterdir() if f.is_file() and not f.name.startswith("."))
            if found:
                return found[0]
            raise GbxculeError(f"start-state folder {q} holds no state files")
        if not q.is_file():
            raise GbxculeError(f"task {task.id}: start state not found: {q}")
        return q
    return None


def run(args) -> int:
    from gbxcule.cli.report import emit
    from gbxcule.core import ramsearch as rs
    from gbxcule.core.action_codec import get_codec
    from gbxcule.harness.ram import record
    from gbxcule.rl.tasks import load_task, parse_script

    checks.positive(max=args.max)
    if not args.rom and not args.task:
        raise GbxculeError("give a ROM, or --task")
    task = load_task(args.task) if args.task else None
    codec = get_codec(_pick("codec", args.codec, task and task.codec, "pokemonred_puffer_v1"))
    schedule = checks.schedule(_pick("frames-per-step", args.frames_per_step, task and task.frames_per_step, 24),
                               _pick("release-after-frames", args.release_after_frames,
                                     task and task.release_after_frames, 8))
    traces = [rs.parse_trace(t, lambda s: parse_script(s, codec), codec.num_actions, args.seed + i)
              for i, t in enumerate(args.trace)]
    watch = None
    if args.addrs == "task":
        if task is None or not (task.goal_ram or task.novelty_ram):
            raise GbxculeError("--addrs task needs a --task with goal_ram or novelty_ram bytes")
        watch = list(dict.fromkeys([c.addr for c in task.goal_ram] + list(task.novelty_ram)))
    elif args.addrs:
        watch = rs.parse_addresses(args.addrs)
    if watch is None and not any(m.rel for t in traces for m in t.marks):
        raise GbxculeError("nothing to search: mark moments with relations (|+ |- |= |! |=V) or give --addrs")
    rom = _task_rom(task, args.rom) if task else checks.rom_file(args.rom, "ram")
    states, prefix, start = None, (), "power-on"
    state_file = Path(args.state) if args.state else (_task_state(task) if task else None)
    if state_file is not None:
        from gbxcule.backends.warp_vec import load_env_states

        states = load_env_states(state_file, rom)[:1]
        start = f"state {state_file}"
    if task is not None and not args.state:
        prefix = task.start.script
        start = f"task {task.id}'s start" + (f" ({state_file})" if state_file else "")
    recs = record(rom, codec, schedule, [t.actions for t in traces], prefix=prefix, states=states,
                  settle=task is not None and not args.state, device=args.device)
    start_mask = None
    if watch is not None:
        start_mask = np.zeros(len(rs.ADDRESSES), dtype=bool)
        start_mask[rs.address_index(watch)] = True
    keep, left = rs.search(recs, traces, start_mask)
    ranks = rs.rank(recs, traces, np.flatnonzero(keep))
    searched = any(m.rel for t in traces for m in t.marks)
    if not searched:  # only watching: the addresses in order
        ranks.sort(key=lambda r: r.index)
    goals = _goal_at_marks(task, recs, traces) if task is not None and task.goal_ram else None
    cands = [{"addr": int(rs.ADDRESSES[r.index]),
              "at_marks": [[int(rec[m.step, r.index]) for m in t.marks] for rec, t in zip(recs, traces, strict=True)],
              "values": recs[0][:, r.index].tolist(), "stray_changes": r.stray, "changes": r.changes,
              "why": r.why if searched else f"{r.changes} change{'s' if r.changes != 1 else ''}"}
             for r in ranks[:max(args.max, 1)]]
    if args.addrs == "task":  # the task has its goal: show it, and whether it holds at the start (it must not)
        assert task is not None
        goal = rs.goal_ram_line([(c.addr, c.value, c.op, c.mask) for c in task.goal_ram]) if task.goal_ram else None
        at_start = goals is not None and _holds_at_start(task.goal_ram, recs)
        goal_note = None if goal is None else ("the task's goal; it HOLDS at the start: an episode would end at once"
                                               if at_start else "the task's goal; it does not hold at the start")
    else:
        goal, goal_note = _suggest_goal(ranks, recs, traces, args.op)
    data = {"rom": str(rom.path), "rom_sha1": rom.info.sha1, "codec": codec.name,
            "frames_per_step": schedule.frames_per_step, "start": start, "device": args.device,
            "addresses": int(len(rs.ADDRESSES) if watch is None else len(watch)),
            "traces": [{"text": t.text, "steps": len(t.actions), "marks": [{"step": m.step, "mark": m.text}
                                                                             for m in t.marks]} for t in traces],
            "narrowing": left, "candidates_total": len(ranks), "ranked": searched, "candidates": cands,
            "goal_ram": goal, "goal_note": goal_note, "task_goal_at_marks": goals}
    emit(args, data, _text)
    return 0


def _holds_at_start(conditions, recs) -> bool:
    """Whether RAM conditions hold at the start of any recording (row 0: every trace starts there)."""
    from gbxcule.core.ramsearch import address_index

    col = {c.addr: int(address_index([c.addr])[0]) for c in conditions}
    return any(all(c.holds(lambda a, row=r[0]: int(row[col[a]])) for c in conditions) for r in recs)


def _suggest_goal(ranks, recs, traces, op: str) -> tuple[str | None, str | None]:
    """(goal_ram line, why) from the first ranked candidate whose value at trace 1's last mark (its last step
    without marks), under `op`, does not already hold at the start: a goal that holds there ends every episode
    at once. (None, why not) when no candidate qualifies."""
    from gbxcule.core import ramsearch as rs
    from gbxcule.rl.goals import RamCondition

    at = traces[0].marks[-1].step if traces[0].marks else len(traces[0].actions)
    where = "trace 1's last mark" if traces[0].marks else "trace 1's end"
    for k, r in enumerate(ranks):
        addr, value = int(rs.ADDRESSES[r.index]), int(recs[0][at, r.index])
        if not _holds_at_start([RamCondition(addr, value, op=op)], recs):
            who = "the first candidate" if k == 0 else f"candidate {k + 1}, the first"
            return rs.goal_line(addr, value, op), f"{who} whose value at {where} does not hold at the start"
    if not ranks:
        return None, None
    return None, (f"no goal_ram: every candidate's value at {where} ({op}) already holds at the start; mark the "
                  f"goal's moment last")


def _goal_at_marks(task, recs, traces) -> list[list[bool]]:
    """Per trace, whether the task's RAM goal holds at each mark."""
    from gbxcule.core.ramsearch import address_index

    col = {c.addr: int(address_index([c.addr])[0]) for c in task.goal_ram}
    return [[all(c.holds(lambda a, row=r[m.step]: int(row[col[a]])) for c in task.goal_ram) for m in t.marks]
            for r, t in zip(recs, traces, strict=True)]


def _text(d: dict) -> str:
    from gbxcule.core.ramsearch import runs

    lines = [f"{Path(d['rom']).name} on {d['device']}, codec {d['codec']}, {d['frames_per_step']} frames a step; "
             f"start: {d['start']}; {d['addresses']} addresses searched"]
    at = 0
    for i, t in enumerate(d["traces"]):
        rel = [m for m in t["marks"] if m["mark"] != "|"]
        counts = d["narrowing"][at:at + len(rel)]
        at += len(rel)
        steps = ", ".join(f"{m['mark']} at {m['step']}" for m in t["marks"]) or "none"
        lines.append(f"trace {i + 1}: {t['steps']} steps; marks {steps}"
                     + (f"; left after each relation: {' -> '.join(map(str, counts))}" if counts else ""))
        if d["task_goal_at_marks"] is not None:
            lines.append("  task goal at its marks: " + " ".join("holds" if g else "no"
                                                                  for g in d["task_goal_at_marks"][i]))
    n = d["candidates_total"]
    if not n:
        lines.append("no address satisfies every relation: check the marks, or record other traces")
        return "\n".join(lines)
    lines.append(f"{n} candidate{'s' if n != 1 else ''}" + (f" (the first {len(d['candidates'])})"
                                                           if n > len(d["candidates"]) else "") + ":")
    if d["ranked"]:
        lines.append("  ranked: bytes that change only where the marks ask (once each), constant elsewhere, first; "
                     "then by stray changes (at other steps)")
    lines.append(f"  {'address':8s} {'at marks (trace 1)':20s} {'changes':18s} values after each step of trace 1 "
                 f"(VALUExSTEPS)")
    for c in d["candidates"]:
        marks = " ".join(f"{v:02X}" for v in c["at_marks"][0]) or "-"
        hist = runs(c["values"])
        hist = hist if len(hist) <= 72 else hist[:69] + "..."
        lines.append(f"  0x{c['addr']:04X}   {marks:20s} {c['why']:18s} {hist}")
    if d["goal_ram"]:
        lines.append(f"{d['goal_ram']}   # {d['goal_note']}")
    elif d["goal_note"]:
        lines.append(d["goal_note"])
    return "\n".join(lines)
