#!/usr/bin/env bash
# As run: sync and arch ran as written; the Rex Run job first ran without --rollout-steps/--total-steps (1 update,
# not cited) and was then rerun alone with the command BENCHMARKS.md "A new game: Rex Run" gives (--time-limit 285).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=/root/gpu:$PWD/src GBXCULE_CACHE_DIR=/tmp/gbxc PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
V=/tmp/v3; R=/tmp/mgpu_runs
sync() { for mode in allreduce ddp; do rm -rf $R/sync_$mode
  CUDA_VISIBLE_DEVICES=0,1 python3 -m gbxcule train --config configs/reach_lab_novelty.toml --num-envs 16384 --gpus 2 \
    --device cuda --seed 0 --run-dir $R/sync_$mode --no-progress --time-limit 50 --eval-episodes 0 \
    --set run.grad_sync=$mode --set run.tensorboard=false --json > $R/sync_$mode.summary.json 2> $R/sync_$mode.log; done; touch $V/sync_done; }
rex() { CUDA_VISIBLE_DEVICES=2 python3 -m gbxcule train --rom .games/rex-run.gb --task benchmarks/games/packs/rex_run.toml:score_300 \
    --num-envs 32768 --rollout-steps 16 --total-steps 500000000 --device cuda --seed 0 --time-limit 290 --eval-every 1000000000 --no-progress \
    --run-dir $V/rex > $V/rex.log 2>&1; touch $V/rex_done; }
arch() { CUDA_VISIBLE_DEVICES=3 python3 scripts/bench_archive.py cost --config configs/reach_lab_archive.toml --envs 16384 \
    --device cuda --steps 100 --repeat 2 --out $V/archive > $V/archive_cost.txt 2>&1; touch $V/arch_done; }
sync & rex & arch &
wait
