#!/usr/bin/env bash
# Raw full_step env-steps/s of games (from their states; `overworld`: OVERWORLD from power-on) by step-kernel
# block size and sort_parts, one `gbxcule bench` run each, on the GPU machine after the install (docs: the
# GPU procedure in BENCHMARKS.md). SRC: the gbxcule sources to run (A/B against a copy), NAME: their label.
# JSON per run under $OUT/sweep, a line each in $OUT/sweep/table.txt.
# usage: NAME=new SRC=$PWD/src GAMES="geometrix big2small" CONFIGS="256/1 256/4" ENVS=262144 STEPS=3 WARMUP=8 \
#          bash scripts/gpu_config_sweep.sh
set -uo pipefail
SRC=${SRC:-$PWD/src}; NAME=${NAME:-new}
export PYTHONPATH=/root/gpu:$SRC PYTHONUNBUFFERED=1 GBXCULE_CACHE_DIR=/tmp/gbxc_$NAME
mkdir -p $OUT/sweep
for g in $GAMES; do
  for c in $CONFIGS; do
    b=${c%/*} p=${c#*/}
    if [[ $g == overworld ]]; then rom=OVERWORLD; st=; else rom=/root/gpu/games/$g.gb; st="--state /root/gpu/games/states/$g.state"; fi
    j=$OUT/sweep/${NAME}_${g}_${ENVS:-262144}_b${b}_p$p.json
    python3 -m gbxcule bench --rom $rom $st --backends warp_vec_cuda --stage full_step --envs ${ENVS:-262144} \
      --steps ${STEPS:-4} --warmup ${WARMUP:-8} --block-dim $b --sort-parts $p --out $j >/dev/null 2>&1
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results'][0]; print(f'{sys.argv[6]:5s} {sys.argv[2]:16s} env={sys.argv[3]} block={sys.argv[4]:>3} parts={sys.argv[5]} {r[\"env_steps_per_s\"]:>12,.0f}')" $j $g ${ENVS:-262144} $b $p $NAME | tee -a $OUT/sweep/table.txt
    rm -f ${j%.json}.png
  done
done
