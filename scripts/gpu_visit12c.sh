#!/usr/bin/env bash
# Twelfth visit, block sizes near the default's boundary: OVERWORLD from power-on at steps 30-39 at 131,072 and
# 262,144 envs with 256- and 128-thread blocks, and two games spread apart at 131,072. Results under $OUT.
set -uo pipefail
export PYTHONPATH=/root/gpu:$PWD/src PYTHONUNBUFFERED=1 GBXCULE_CACHE_DIR=/tmp/gbxc
for envs in 131072 262144; do
  for b in 256 128; do
    python3 -m gbxcule bench --rom OVERWORLD --backends warp_vec_cuda --stage full_step --envs $envs --steps 10 \
      --warmup 30 --block-dim $b --out "$OUT/ow_${envs}_b$b.json" 2>&1 | grep warp_vec_cuda
  done
done
python3 scripts/bench_spread.py --games /root/gpu/games --only airaki,tobutobugirl --envs 131072 --spread 24 \
  --steps 4 --variants path/1/256,path/1/128 --out "$OUT/spread_131072_blocks.json" 2>&1 | tail -4
