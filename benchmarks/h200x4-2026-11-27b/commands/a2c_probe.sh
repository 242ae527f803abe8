#!/usr/bin/env bash
# A2C probe: windows of 16 steps split into minibatches; which lr / split learns leave_house? (one run per GPU)
set -u
bash .gpu/install.sh > /tmp/inst.log 2>&1 || { tail -3 /tmp/inst.log; exit 1; }
export PYTHONPATH=/root/gpu:$PWD/src GBXCULE_CACHE_DIR=/tmp/gbxc PYTHONUNBUFFERED=1
run() {  # GPU ENVS MINIBATCHES LR NAME
  CUDA_VISIBLE_DEVICES=$1 timeout 260 python3 -m gbxcule train --config configs/leave_house_a2c.toml --device cuda \
    --seed 0 --num-envs $2 --set a2c.n_step=16 --set a2c.update_every=16 --set a2c.gae_lambda=0.95 \
    --set a2c.minibatches=$3 --set a2c.lr=$4 --eval-every 2097152 --time-limit ${T:-150} --no-progress \
    --run-dir $OUT/$5 > $OUT/$5.log 2>&1
}
nvidia-smi -L
run 0 16384 8 2.5e-4 m8_lr25 &
run 1 16384 8 5e-4 m8_lr50 &
run 2 16384 16 2.5e-4 m16_lr25 &
run 3 8192 4 2.5e-4 e8k_m4_lr25 &
wait
rm -rf $OUT/*/checkpoint.pt $OUT/*/policy.pt $OUT/*/best_policy.pt $OUT/*/tb
for d in $OUT/*/; do
  echo "== $d"; tail -2 ${d%/}.log
  python3 - $d/metrics.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    ev = f" EVAL {r['eval/greedy_success']:.2f}@{r['eval/env_steps']} t={r['eval/elapsed_s']:.0f}" if "eval/greedy_success" in r else ""
    if ev or r["update"] % 4 == 0:
        print(r["update"], r["env_steps"], f"ent {r['entropy']:.3f} succ {r.get('success_rate') or 0:.2f} "
              f"v {r['value_mean']:.2f} sps {r['sps'] or 0:,.0f}{ev}")
PY
done
