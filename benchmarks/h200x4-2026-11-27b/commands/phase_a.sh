#!/usr/bin/env bash
# As run: phases A and B ran; the driver was stopped before its phase C (gradsync on 4 GPUs), which phase_c.sh
# replaced (gradsync on GPUs 0-1 beside the Rex Run and archive-cost jobs).
# background driver on the warm x4: phase A reach_lab g1 (GPU0) + g2 (GPU1-2) + A2C 8K m4 seeds 1,2 (GPU3);
# phase B g4; phase C gradsync. Results under /tmp/v3 (packed at the end of each phase).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=/root/gpu:$PWD/src GBXCULE_CACHE_DIR=/tmp/gbxc PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
V=/tmp/v3; mkdir -p $V
a2c() {  # SEED
  CUDA_VISIBLE_DEVICES=3 timeout 300 python3 -m gbxcule train --config configs/leave_house_a2c.toml --device cuda \
    --seed $1 --num-envs 8192 --set a2c.n_step=16 --set a2c.update_every=16 --set a2c.gae_lambda=0.95 \
    --set a2c.minibatches=4 --set a2c.lr=2.5e-4 --eval-every 2097152 --time-limit 200 --no-progress \
    --run-dir $V/a2c8k_s$1 > $V/a2c8k_s$1.log 2>&1
}
date +%s > $V/t0
CUDA_VISIBLE_DEVICES=0 T1=240 EVAL_S=30 OUT=$V/mg bash scripts/bench_multigpu.sh g1 > $V/g1.txt 2>&1 &
CUDA_VISIBLE_DEVICES=1,2 T2=240 EVAL_S=30 OUT=$V/mg bash scripts/bench_multigpu.sh g2 > $V/g2.txt 2>&1 &
( a2c 1; a2c 2 ) &
wait
touch $V/A_done
CUDA_VISIBLE_DEVICES=0,1,2,3 T4=240 EVAL_S=30 OUT=$V/mg bash scripts/bench_multigpu.sh g4 > $V/g4.txt 2>&1
touch $V/B_done
OUT=$V/mg bash scripts/bench_multigpu.sh gradsync > $V/gradsync.txt 2>&1
touch $V/C_done
