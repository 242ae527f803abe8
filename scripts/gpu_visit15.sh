#!/usr/bin/env bash
# Fifteenth visit. Run after the setup calls (BENCHMARKS.md); results under $OUT.
#   ab NAME=DIR ...: the working tree and each earlier tree (a copy of a commit's src/ and scripts/) on the same
#        spread states (bench_spread.py, GAMES, VARIANTS, ENVS, STEPS); then whether every tree ended each game in
#        the same fields and RAM (end_sha1)
#   check, ow: as gpu_visit14.sh (devcheck and devcheck_games in LOOPS; OVERWORLD full_step at 65,536 and 262,144)
#   games: the game set beside PyBoy (gpu_rl_visit.sh games), ONLY and PARTNAME per call
set -uo pipefail
export PYTHONUNBUFFERED=1
G=${GAMES:-corrib75,tobutobugirl,airaki}
case ${1:-} in
  ab)
    shift
    for spec in new=$PWD "$@"; do
      name=${spec%%=*} dir=${spec#*=}
      PYTHONPATH=/root/gpu:$dir/src GBXCULE_CACHE_DIR=/tmp/gbxc_$name python3 scripts/bench_spread.py \
        --games /root/gpu/games --only "$G" --envs "${ENVS:-262144}" --spread 24 --steps "${STEPS:-3}" \
        --variants "${VARIANTS:-path/1,path/1@flat}" --out "$OUT/spread_$name.json" 2>&1 \
        | grep -E "^[a-z0-9-]+: |DIFFERENT" | sed "s/^/$name /"
    done
    python3 - "$OUT" <<'PY'
import json, pathlib, sys
runs = {p.stem[7:]: json.loads(p.read_text()) for p in sorted(pathlib.Path(sys.argv[1]).glob("spread_*.json"))}
games = [g["slug"] for g in runs["new"]["games"]]
for slug in games:
    rows = {n: next(g for g in r["games"] if g["slug"] == slug) for n, r in runs.items()}
    same = len({r["end_sha1"] for r in rows.values()}) == 1
    cells = []
    for v in rows["new"]["sps"]:
        base = {n: sum(r["sps"][v]) / len(r["sps"][v]) for n, r in rows.items() if v in r["sps"]}
        cells.append(v + " " + " ".join(f"{n} {base[n]:,.0f}" for n in base)
                     + "".join(f" new/{n} {base['new'] / base[n]:.3f}" for n in base if n != "new"))
    print(f"{slug}: " + " | ".join(cells) + ("" if same else "  DIFFERENT END STATES"))
PY
    ;;
  check|ow) bash scripts/gpu_visit14.sh "$1" ;;
  games)
    ONLY=$ONLY ENVS=262144 VARIANTS=path STEPS=10 WARMUP=30 BOUNDS=shared PYBOY_REPEAT=3 PARTNAME=$PARTNAME OUT=$OUT \
      bash scripts/gpu_rl_visit.sh games ;;
esac
