#!/usr/bin/env bash
# Thirteenth visit, A/B of source trees on games spread apart: the working tree (nested and flat loops) against
# earlier trees given as NAME=SRC (each a copy of a commit's src/ and scripts/, e.g. ab_head/), path/1 only.
# Env: GAMES, ENVS, STEPS. Run after the setup calls; results under $OUT.
set -uo pipefail
G=${GAMES:-tobutobugirl,corrib75,carazu}
OUT=$OUT TAG=new GAMES=$G bash scripts/gpu_visit13.sh | grep -v "^artifact"
for spec in "$@"; do
  name=${spec%%=*} dir=${spec#*=}
  PYTHONPATH=/root/gpu:$dir/src PYTHONUNBUFFERED=1 GBXCULE_CACHE_DIR=/tmp/gbxc_$name python3 $dir/scripts/bench_spread.py \
    --manifest benchmarks/games/games.toml --games /root/gpu/games --only "$G" --envs "${ENVS:-262144}" --spread 24 \
    --steps "${STEPS:-3}" --variants path/1 --out "$OUT/spread_$name.json" 2>&1 | grep -E "^[a-z0-9-]+: " | sed "s/^/$name /"
done
