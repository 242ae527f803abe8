# A2C with windows of PPO's rollout length (16 steps, lambda 0.95) on leave_house: does it learn at all?
set -u
bash .gpu/install.sh > /tmp/inst.log 2>&1 || { tail -3 /tmp/inst.log; exit 1; }
export PYTHONPATH=/root/gpu:$PWD/src GBXCULE_CACHE_DIR=/tmp/gbxc PYTHONUNBUFFERED=1
run() {
  CUDA_VISIBLE_DEVICES=$1 timeout 190 python3 -m gbxcule train --config configs/leave_house_a2c.toml --device cuda \
    --seed 0 --num-envs $2 --set a2c.n_step=16 --set a2c.update_every=16 --set a2c.gae_lambda=0.95 \
    --set a2c.lr=$3 --eval-every 4194304 --time-limit 90 --no-progress --run-dir $OUT/$4 > $OUT/$4.log 2>&1
}
nvidia-smi -L
run 0 8192 7e-4 w16_8k_lr7e-4 &
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then run 1 4096 1e-3 w16_4k_lr1e-3 & fi
wait
rm -rf $OUT/*/checkpoint.pt $OUT/*/policy.pt $OUT/*/best_policy.pt $OUT/*/tb
for d in $OUT/w16_*/; do
  echo "== $d"; tail -3 ${d%/}.log
  python3 - $d/metrics.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    ev = f" EVAL {r['eval/greedy_success']:.2f}@{r['eval/env_steps']}" if "eval/greedy_success" in r else ""
    print(r["update"], r["env_steps"], f"ent {r['entropy']:.3f} succ {r.get('success_rate') or 0:.2f} "
          f"v {r['value_mean']:.2f} sps {r['sps'] or 0:,.0f}{ev}")
PY
done
