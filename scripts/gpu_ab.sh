#!/usr/bin/env bash
# A/B of kernel versions in one GPU visit: for each gbxcule source folder given (e.g. a copy of an earlier
# commit's src/ beside the working tree's src), OVERWORLD raw full_step at 65,536 envs from power-on and the
# game set at the default sort key (scripts/gpu_rl_visit.sh games, no PyBoy, no bounds). Env ONLY (slugs),
# STEPS, WARMUP (default 3: kernel cost, quickly; 30 for spread-out envs), VARIANTS (default path), PARTS
# (OVERWORLD's --sort-parts, default 1: kernels compared on equal launches). Results: $OUT/ab_<name>.tgz and a
# table.   Usage: bash scripts/gpu_ab.sh NAME=SRC [NAME=SRC ...]
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT" /tmp/ab
for spec in "$@"; do
  name=${spec%%=*} src=${spec#*=}
  export GBXCULE_CACHE_DIR=/tmp/gbxc_$name
  PYTHONPATH=/root/gpu:$src python3 -m gbxcule bench --rom OVERWORLD --backends warp_vec_cuda --stage full_step \
    --envs 65536 --steps 3 --warmup 5 --sort-parts "${PARTS:-1}" --out "/tmp/ab/ow_$name.json" --json 2>/dev/null | python3 -c "
import json, sys; r = json.loads(sys.stdin.read())['results'][0]
print(f'$name OVERWORLD power-on 65536: {r[\"env_steps_per_s\"]:,.0f} env-steps/s')" | tee -a /tmp/ab/table.txt
  SRC=$src VARIANTS=${VARIANTS:-path} PYBOY=0 BOUNDS= STEPS=${STEPS:-3} WARMUP=${WARMUP:-3} PARTNAME=_$name OUT=/tmp/ab \
    bash scripts/gpu_rl_visit.sh games | grep -E "^[a-z0-9-]+: [a-z]|median" | sed "s/^/$name /" | tee -a /tmp/ab/table.txt
done
cp /tmp/runs/games_*.json /tmp/ab/ 2>/dev/null
tar -czf "$OUT/ab_$(date +%H%M%S).tgz" -C /tmp/ab .
cat /tmp/ab/table.txt
