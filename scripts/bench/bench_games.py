"""The public game benchmark set (benchmarks/games/games.toml; ROMs fetched by scripts/bench/fetch_games.py, never
committed): gbxcule's full_step SPS on each game beside PyBoy on all host cores from the same state, the
same-action bounds and, per sort variant (a sort key, or KEY/PARTS: that key re-sorted PARTS times a frame,
or `auto`: 1, 2 or 4 as timed trials choose; either with @ENVS: at that many envs instead of --envs, e.g.
`path,path@262144`, both columns divided by the same PyBoy figure), the median. One table, one JSON artifact.

The same-action bounds: `shared_random` (one random action a step, taken by every env: the envs play one game
in lockstep, so nothing diverges, on the same kind of work) and `fixed` (every env NOOP: on most games the
title screen idles, far less work). Emulated instructions per env-step are reported beside env-steps/s,
because random play runs several times the instructions of an idle title screen: the divergence cost is
emulated instructions/s in lockstep (shared_random) over instructions/s at independent random actions.
Emulated instructions count the wait-loop rounds skipped at once (kernels/idle.py), which cost almost nothing:
where the lockstep game mostly waits and random play mostly runs (Carazu), that ratio is one of work, not
divergence, so the instructions executed one by one are reported too (`exec/step`, and `ediv`, lockstep over
random in those).

Each game starts from one PyBoy state taken after `--state-frames` frames of NOOPs from power-on (made here
with PyBoy and kept in `--states`), so every backend runs the same work. The timed steps come after `--warmup`
steps of random play (default 30), once the envs have spread apart: steps 2-11 from a state ran 2-3 times as
fast, against PyBoy, as steps 32 on (docs/divergence.md, "How to measure it"; `--window` shows the curve).

A set too long for one call (a GPU lease's 10-minute commands) runs in parts (`--only`), and `--merge` makes
the one table and artifact from them; the parts must share their settings and the emulator's sources
(`environment.emulator_sha1`: core, kernels, backends, harness), so parts measured before and after a change
to the trainers still join.

    python scripts/bench/fetch_games.py --out .games
    python scripts/bench/bench_games.py --games .games --envs 65536 --out bench_out/games.json
    python scripts/bench/bench_games.py --merge bench_out/games_a.json bench_out/games_b.json --out bench_out/games.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
from pathlib import Path

from fetch_games import MANIFEST, read_games  # (this script's folder is on sys.path)

from gbxcule.backends.warp_vec import DEFAULT_SORT_KEY, MAX_ENVS, MAX_SORT_PARTS, SORT_KEYS, parse_sort_parts
from gbxcule.core.action_codec import CODECS, get_codec
from gbxcule.core.cartridge import load_rom
from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import check_output, write_output
from gbxcule.core.schedule import ActionSchedule
from gbxcule.harness.bench import environment, measure

ROOT = Path(__file__).resolve().parents[2]


def make_state(rom_path: Path, frames: int, out: Path) -> Path:
    """A PyBoy state after `frames` frames of NOOPs from power-on (PyBoy's boot), cached in `out`."""
    from gbxcule.backends.pyboy_single import PyBoyGame

    if out.is_file():
        return out
    game = PyBoyGame(load_rom(str(rom_path)), get_codec("pokemonred_puffer_v1"), ActionSchedule(1, 1))
    try:
        for _ in range(frames):
            game.step(0)
        data = game.pyboy_state_bytes()
    finally:
        game.close()
    return write_output(out, data)


def parse_variants(text: str) -> dict[str, dict]:
    """'path,pc/4,path@262144' -> {"path": {"sort_key": "path"}, "pc/4": {"sort_key": "pc", "sort_parts": 4},
    "path@262144": {"sort_key": "path", "envs": 262144}} (no "envs": --envs)."""
    out = {}
    for v in (x.strip() for x in text.split(",")):
        spec, _, envs = v.partition("@")
        key, _, parts = spec.partition("/")
        try:
            value = parse_sort_parts(parts) if parts else None
            ok = key in SORT_KEYS and ("@" not in v or (envs.isdigit() and 1 <= int(envs) <= MAX_ENVS))
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"--variants takes KEY, KEY/PARTS or either @ENVS (KEY one of {', '.join(SORT_KEYS)}, "
                             f"PARTS auto or 1 to {MAX_SORT_PARTS}, ENVS 1 to {MAX_ENVS}), got {v!r}")
        out[v] = {"sort_key": key, **({"sort_parts": value} if parts else {}),
                  **({"envs": int(envs)} if envs else {})}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", default=str(MANIFEST))
    ap.add_argument("--games", default=str(ROOT / ".games"), help="folder of <slug>.gb (scripts/bench/fetch_games.py)")
    ap.add_argument("--states", default=None, help="folder for the start states (default GAMES/states)")
    ap.add_argument("--only", default="", help="comma-separated slugs")
    ap.add_argument("--device", default="cuda", help="warp device: cuda or cpu (default cuda)")
    ap.add_argument("--envs", type=int, default=65536, help="gbxcule envs (default 65536)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    ap.add_argument("--warmup", type=int, default=30,
                    help="untimed steps first (default 30: random play spreads the envs apart over the first 30 or "
                         "so steps from a state, and a step then runs several times slower than the first ones)")
    ap.add_argument("--window", type=int, default=0,
                    help="also time every stretch of this many steps on its own (gbxcule and PyBoy alike), since "
                         "random play spreads the envs apart and later steps run slower (default 0: whole run only)")
    ap.add_argument("--variants", default="pc,path,stack",
                    help="sort variants to measure with random actions: KEY (one of "
                         f"{', '.join(SORT_KEYS)}) or KEY/PARTS (re-sorted PARTS times a frame), either with "
                         "@ENVS to run at ENVS envs instead of --envs (default pc,path,stack)")
    ap.add_argument("--pyboy-envs", type=int, default=0,
                    help="PyBoy envs (default 16 per host core, so that the timed steps last about a second; 0: that)")
    ap.add_argument("--pyboy-repeat", type=int, default=3,
                    help="PyBoy measurements per game, each from the state; the median counts (default 3)")
    ap.add_argument("--pyboy-steps", type=int, default=None,
                    help="PyBoy timed steps (default: --steps, so that both time the same stretch of play)")
    ap.add_argument("--no-pyboy", action="store_true", help="skip the PyBoy baseline")
    ap.add_argument("--bounds", default="shared,fixed",
                    help="same-action bounds to measure: shared, fixed, both (default) or none ('')")
    ap.add_argument("--state-frames", type=int, default=1200, help="frames from power-on to the start state")
    ap.add_argument("--codec", default="pokemonred_puffer_v1", choices=list(CODECS),
                    help="codec of the random actions (default pokemonred_puffer_v1; dmg_buttons_v0 adds SELECT)")
    ap.add_argument("--merge", nargs="+", metavar="JSON", default=None,
                    help="measure nothing: one table and artifact from these artifacts of earlier runs (parts of the "
                         "set), which must share their settings and source tree")
    ap.add_argument("--out", default="bench_out/games.json")
    args = ap.parse_args()
    try:  # never over an input: the manifest, the artifacts merged, the ROMs and states folders' files
        check_output(args.out, [args.manifest, *(args.merge or [])])
    except GbxculeError as exc:
        sys.stderr.write(f"bench_games: {exc}\n")
        return 2
    if args.merge:
        try:
            rows, failed, meta = merge_parts([Path(p) for p in args.merge])
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"bench_games: --merge: {exc}\n")
            return 2
        return report(rows, failed, list(meta["variants"]), meta, Path(args.out))
    try:
        games = read_games(args.manifest, args.only)
    except ValueError as exc:
        sys.stderr.write(f"bench_games: {exc}\n")
        return 2
    folder = Path(args.games)
    states = Path(args.states) if args.states else folder / "states"
    warp_backend = "warp_vec_cuda" if args.device.startswith("cuda") else "warp_vec_cpu"
    try:
        keys = parse_variants(args.variants)
    except ValueError as exc:
        sys.stderr.write(f"bench_games: {exc}\n")
        return 2
    schedule = ActionSchedule(24, 8)
    bounds = [b for b in args.bounds.split(",") if b]
    if any(b not in ("shared", "fixed") for b in bounds):
        sys.stderr.write(f"bench_games: --bounds takes shared and/or fixed, got {args.bounds!r}\n")
        return 2
    ref = DEFAULT_SORT_KEY if DEFAULT_SORT_KEY in keys else next(iter(keys))
    pyboy_envs = args.pyboy_envs or 16 * (os.cpu_count() or 1)
    if args.pyboy_repeat < 1:
        sys.stderr.write(f"bench_games: --pyboy-repeat must be >= 1, got {args.pyboy_repeat}\n")
        return 2
    rows, failed = [], []
    for g in games:
        slug = g["slug"]
        path = folder / f"{slug}.gb"
        if not path.is_file():
            failed.append({"slug": slug, "error": f"{path} missing (run scripts/bench/fetch_games.py)"})
            continue
        try:
            rom = load_rom(str(path))
            state = str(make_state(path, args.state_frames, states / f"{slug}.state"))
            row = {"slug": slug, "title": g.get("title", slug), "kind": g.get("kind", ""),
                   "sha1": hashlib.sha1(path.read_bytes()).hexdigest()}

            def run(name, backend, n, steps, actions="seeded_random", rom=rom, state=state, row=row, repeat=1, **kw):
                runs = [measure(backend, rom, n, steps, schedule, args.codec, actions, 0, args.warmup,
                                args.window, state=state, **kw) for _ in range(repeat)]
                r = sorted(runs, key=lambda x: x.env_steps_per_s)[len(runs) // 2]  # the median run
                if repeat > 1:
                    row[f"runs_{name}"] = [x.env_steps_per_s for x in runs]
                row[f"sps_{name}"] = r.env_steps_per_s
                if r.windows:  # per window: the median run's SPS (and instructions/s where counted)
                    row[f"windows_{name}"] = [statistics.median(x.windows[i]["env_steps_per_s"] for x in runs)
                                              for i in range(len(r.windows))]
                    row["window_first_steps"] = [w["first_step"] for w in r.windows]
                    if "instructions_per_s" in r.windows[0]:
                        row[f"window_ips_{name}"] = [w["instructions_per_s"] for w in r.windows]
                if r.sort_trials is not None:
                    row[f"sort_trials_{name}"] = r.sort_trials  # sort_parts auto: ms a step by choice, per trial
                if r.instructions_per_s is not None:
                    row[f"ips_{name}"] = r.instructions_per_s  # emulated instructions/s
                    row[f"ipstep_{name}"] = r.instructions_per_s / r.env_steps_per_s  # and per env-step
                if r.executed_per_s is not None:  # of those, executed one by one (not skipped wait-loop rounds)
                    row[f"eips_{name}"] = r.executed_per_s
                    row[f"eipstep_{name}"] = r.executed_per_s / r.env_steps_per_s

            opts = {"stage": "full_step"}
            for key, kw in keys.items():
                kw = dict(kw)
                run(key, warp_backend, kw.pop("envs", args.envs), args.steps, **kw, **opts)
            for bound in bounds:  # at the default sort key
                run(bound, warp_backend, args.envs, args.steps, f"{bound}_random" if bound == "shared" else bound,
                    **opts)
            if not args.no_pyboy:
                run("pyboy", "pyboy_vec_mp", pyboy_envs, args.pyboy_steps or args.steps, repeat=args.pyboy_repeat)
                row["pyboy_sps"] = row.pop("sps_pyboy")
        except (GbxculeError, OSError, ValueError) as exc:
            failed.append({"slug": slug, "error": str(exc)})
            sys.stderr.write(f"bench_games: {slug}: {exc}\n")
            continue
        if "sps_fixed" in row:
            row["fixed_over_random"] = row["sps_fixed"] / row[f"sps_{ref}"]  # NOOP bound: less work as well
        if f"ips_{ref}" in row and "ips_shared" in row:
            row["divergence"] = row["ips_shared"] / row[f"ips_{ref}"]  # emulated instructions/s, lockstep over random
            if f"window_ips_{ref}" in row and "window_ips_shared" in row:
                row["window_divergence"] = [a / b for a, b in zip(row["window_ips_shared"], row[f"window_ips_{ref}"],
                                                                  strict=False)]
        if "pyboy_sps" in row:
            row["x_pyboy"] = {k: row[f"sps_{k}"] / row["pyboy_sps"] for k in keys}
            if "windows_pyboy" in row:  # the same stretch of play on both (--pyboy-steps = --steps)
                row["window_x_pyboy"] = {k: [a / b for a, b in zip(row[f"windows_{k}"], row["windows_pyboy"],
                                                                   strict=False)] for k in keys}
        rows.append(row)
        print(f"{slug}: " + ", ".join(f"{k} {row[f'sps_{k}']:,.0f}" for k in keys)
              + "".join(f", {b} {row[f'sps_{b}']:,.0f}" for b in bounds)
              + (f", PyBoy {row['pyboy_sps']:,.0f}" if "pyboy_sps" in row else ""),
              flush=True)
    meta = {"variants": list(keys), "envs": args.envs, "pyboy_envs": pyboy_envs, "host_cores": os.cpu_count(),
            "device": args.device, "steps": args.steps, "pyboy_steps": args.pyboy_steps or args.steps,
            "pyboy_repeat": args.pyboy_repeat, "warmup": args.warmup, "window": args.window,
            "state_frames": args.state_frames, "frames_per_step": 24, "codec": args.codec, "stage": "full_step",
            "environment": environment()}
    return report(rows, failed, list(keys), meta, Path(args.out))


def report(rows: list[dict], failed: list[dict], keys: list[str], meta: dict, out_path: Path) -> int:
    """The summary (median per variant, against PyBoy where every row has it; divergence), the JSON artifact
    (rows, failures, summary and `meta`: the run's settings) and the table; 1 when a game failed."""
    ref = DEFAULT_SORT_KEY if DEFAULT_SORT_KEY in keys else keys[0]
    window = meta["window"]
    for r in rows:  # the measure, lockstep over random in env-steps/s (random play may run more instructions)
        if "sps_shared" in r:
            r["divergence_sps"] = r["sps_shared"] / r[f"sps_{ref}"]
        if "eips_shared" in r and f"eips_{ref}" in r:  # and in instructions executed one by one a second
            r["divergence_executed"] = r["eips_shared"] / r[f"eips_{ref}"]
    summary = {}
    for k in keys:
        col = [r[f"sps_{k}"] for r in rows]
        summary[k] = {"median_sps": statistics.median(col) if col else None}
        if rows and all("pyboy_sps" in r for r in rows):
            ratios = [r["x_pyboy"][k] for r in rows]
            summary[k].update(median_x_pyboy=statistics.median(ratios), min_x_pyboy=min(ratios))
        if rows and all("window_x_pyboy" in r for r in rows):
            summary[k]["windows"] = [
                {"first_step": rows[0]["window_first_steps"][i],
                 "median_sps": statistics.median(r[f"windows_{k}"][i] for r in rows),
                 "median_x_pyboy": statistics.median(r["window_x_pyboy"][k][i] for r in rows),
                 "min_x_pyboy": min(r["window_x_pyboy"][k][i] for r in rows)}
                for i in range(min(len(r["window_x_pyboy"][k]) for r in rows))]
    divs = [r["divergence"] for r in rows if "divergence" in r]
    if divs:
        summary["divergence"] = {"median": statistics.median(divs), "max": max(divs)}
    sdivs = [r["divergence_sps"] for r in rows if "divergence_sps" in r]
    if sdivs:
        summary["divergence_sps"] = {"median": statistics.median(sdivs), "max": max(sdivs)}
    edivs = [r["divergence_executed"] for r in rows if "divergence_executed" in r]
    if edivs:
        summary["divergence_executed"] = {"median": statistics.median(edivs), "max": max(edivs)}
    data = {"games": rows, "failed": failed, "summary": summary, **meta}
    out = write_output(out_path, json.dumps(data, indent=1))
    ws = {k: max(11, len(k) + 4) for k in keys}  # column widths: "sps KEY", "x KEY"
    wx = {k: max(7, len(k) + 2) for k in keys}
    head = f"{'game':18s} {'kind':12s}" + "".join(f" {'sps ' + k:>{ws[k]}s}" for k in keys)
    head += (f" {'instr/step':>10s} {'exec/step':>10s} {'shared':>11s} {'fixed':>11s} {'div':>5s} {'sdiv':>5s}"
             f" {'ediv':>5s} {'PyBoy':>8s}")
    head += "".join(f" {'x ' + k:>{wx[k]}s}" for k in keys)
    print(head)
    for r in rows:
        line = f"{r['slug'][:18]:18s} {r['kind'][:12]:12s}" + "".join(f" {r[f'sps_{k}']:>{ws[k]},.0f}" for k in keys)
        line += (f" {r.get(f'ipstep_{ref}', 0):>10,.0f} {r.get(f'eipstep_{ref}', 0):>10,.0f}"
                 f" {r.get('sps_shared', 0):>11,.0f} {r.get('sps_fixed', 0):>11,.0f} {r.get('divergence', 0):>5.1f}"
                 f" {r.get('divergence_sps', 0):>5.1f} {r.get('divergence_executed', 0):>5.1f}")
        line += f" {r.get('pyboy_sps', 0):>8,.0f}" + "".join(f" {r.get('x_pyboy', {}).get(k, 0):>{wx[k]}.1f}"
                                                            for k in keys)
        print(line)
    if window and rows and all("window_x_pyboy" in r for r in rows):
        print(f"x PyBoy by stretch of {window} steps (first steps " +
              ", ".join(map(str, rows[0]["window_first_steps"])) + ")")
        for r in rows:
            print(f"{r['slug'][:18]:18s} " + "  ".join(
                f"{k}: " + " ".join(f"{x:.1f}" for x in r["window_x_pyboy"][k]) for k in keys)
                  + "".join("  div: " + " ".join(f"{x:.1f}" for x in d) for d in [r.get("window_divergence")] if d))
    print("div: emulated instructions/s with every env on one shared random action sequence, over those with "
          "independent random actions (default sort key); sdiv: the same in env-steps/s; ediv: the same in "
          "instructions executed one by one a second (exec/step: instr/step less the skipped wait-loop rounds)")
    if divs:
        print(f"divergence cost (lockstep / random, emulated instructions/s): median {statistics.median(divs):.2f}x, "
              f"max {max(divs):.2f}x; in env-steps/s: median {statistics.median(sdivs):.2f}x, max {max(sdivs):.2f}x"
              + (f"; executed: median {statistics.median(edivs):.2f}x, max {max(edivs):.2f}x" if edivs else ""))
    for k in keys:
        s = summary[k]
        extra = f", {s['median_x_pyboy']:.1f}x PyBoy (min {s['min_x_pyboy']:.1f}x)" if "median_x_pyboy" in s else ""
        print(f"median, sort {k}: {s['median_sps'] or 0:,.0f} env-steps/s{extra}")
        for w in s.get("windows", []):
            print(f"  steps {w['first_step']}-{w['first_step'] + window - 1}: {w['median_sps']:,.0f} env-steps/s, "
                  f"{w['median_x_pyboy']:.1f}x PyBoy (min {w['min_x_pyboy']:.1f}x)")
    for f in failed:
        print(f"failed {f['slug']}: {f['error']}")
    print(f"artifact: {out}")
    return 1 if failed else 0


# settings every merged part must share, and the emulator's sources (environment.emulator_sha1; in artifacts
# written before it, the whole package's: environment.source_sha1)
MERGE_KEYS = ("variants", "envs", "pyboy_envs", "host_cores", "device", "steps", "pyboy_steps", "pyboy_repeat",
              "warmup", "window", "state_frames", "frames_per_step", "codec", "stage")


def merge_parts(paths: list[Path]) -> tuple[list[dict], list[dict], dict]:
    """Rows, failures and settings of several artifacts of this script; ValueError where they do not agree."""
    rows, failed, meta, parts = [], [], None, []
    for path in paths:
        try:
            data = json.loads(path.read_text())
            part = {k: data[k] for k in MERGE_KEYS if k != "variants"}
            part["variants"] = data.get("variants") or [k for k in data["summary"] if not k.startswith("divergence")]
            games, env = data["games"], data["environment"]
            key = "emulator_sha1" if all("emulator_sha1" in p for p in (env, *parts)) else "source_sha1"
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path}: not an artifact of bench_games.py ({exc.__class__.__name__})") from None
        if meta is not None and part != meta:
            raise ValueError(f"{path}: other settings than {paths[0]} "
                             f"({', '.join(k for k in MERGE_KEYS if part[k] != meta[k])})")
        if any(env.get(key) != p.get(key) for p in parts):
            raise ValueError(f"{path}: another source tree than {paths[0]} (environment.{key})")
        twice = sorted({r["slug"] for r in rows} & {g["slug"] for g in games})
        if twice:
            raise ValueError(f"{path}: measured again: {', '.join(twice)}")
        meta = meta or part
        rows += games
        failed += data.get("failed", [])
        parts.append({"path": str(path), **data["environment"]})
    return rows, failed, {**meta, "environment": parts[0], "parts": parts}


if __name__ == "__main__":
    raise SystemExit(main())
