#!/usr/bin/env bash
# A2C at 65,536 envs, the current config's windows (16 steps, 4 minibatches), the small CNN: training SPS vs raw
set -u
bash .gpu/install.sh > /tmp/inst.log 2>&1 || { tail -3 /tmp/inst.log; exit 1; }
export PYTHONPATH=/root/gpu:$PWD/src GBXCULE_CACHE_DIR=/tmp/gbxc PYTHONUNBUFFERED=1
nvidia-smi -L
python3 scripts/bench_train.py --config configs/leave_house_a2c.toml --num-envs 65536 --seconds 20 --skip 2 \
  --variant a2c_small "--amp bf16 --set a2c.model=\"small\"" --out $OUT/train_speed_a2c_small_65536.json 2>&1 | tail -15
