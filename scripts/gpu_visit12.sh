#!/usr/bin/env bash
# Twelfth visit's last lease: OVERWORLD at steps 30-39 (65,536 and 262,144 envs) and two games without PyBoy, with
# the final `auto` candidates. Run after the setup calls (BENCHMARKS.md); results under $OUT.
set -uo pipefail
export PYTHONPATH=/root/gpu:$PWD/src PYTHONUNBUFFERED=1 GBXCULE_CACHE_DIR=/tmp/gbxc
for envs in 65536 262144; do
  python3 -m gbxcule bench --rom OVERWORLD --backends warp_vec_cuda --stage full_step --envs $envs --steps 10 \
    --warmup 30 --out "$OUT/ow_$envs.json" 2>&1 | tail -2
done
python3 scripts/bench_games.py --games /root/gpu/games --only tobutobugirl,geometrix --envs 262144 --variants path \
  --bounds "" --no-pyboy --out "$OUT/games_check.json" 2>&1 | tail -4
