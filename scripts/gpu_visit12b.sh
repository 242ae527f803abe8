#!/usr/bin/env bash
# Twelfth visit, block sizes at 65,536 envs (256-thread blocks make 1.94 waves on 132 SMs): OVERWORLD from
# power-on at steps 30-39, and three games spread apart. Run after the setup calls; results under $OUT.
set -uo pipefail
export PYTHONPATH=/root/gpu:$PWD/src PYTHONUNBUFFERED=1 GBXCULE_CACHE_DIR=/tmp/gbxc
for b in 256 128 64; do
  python3 -m gbxcule bench --rom OVERWORLD --backends warp_vec_cuda --stage full_step --envs 65536 --steps 10 \
    --warmup 30 --block-dim $b --out "$OUT/ow_65536_b$b.json" 2>&1 | grep warp_vec_cuda
done
python3 scripts/bench_spread.py --games /root/gpu/games --only tobutobugirl,renegade-rush,airaki,geometrix \
  --envs 65536 --spread 24 --steps 4 --variants path/1,path/1/128,path/1/64,path_light/1,path_light/1/128 \
  --out "$OUT/spread_65536_blocks.json" 2>&1 | tail -7
