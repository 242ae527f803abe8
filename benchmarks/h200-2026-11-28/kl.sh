#!/usr/bin/env bash
# two A2C runs with the KL-adaptive lr on one GPU at once (leave_house, 8,192 envs each), then a table
export PYTHONPATH=/root/gpu:$PWD/src GBXCULE_CACHE_DIR=/tmp/gbxc PYTHONUNBUFFERED=1
nvidia-smi -L
for S in ${SEEDS:-2 0}; do
  timeout -s INT ${GUARD:-600} python3 -m gbxcule train --config configs/leave_house_a2c.toml --seed $S --device cuda --time-limit ${T:-150} \
    --set a2c.target_kl=0.01 --run-dir /tmp/kl_s$S --no-progress > $OUT/kl_s$S.log 2>&1 &
done
wait
for S in ${SEEDS:-2 0}; do
  mkdir -p $OUT/kl_s$S && cp /tmp/kl_s$S/{metrics.jsonl,summary.json,config.json,eval.json} $OUT/kl_s$S/ 2>/dev/null
  python3 - /tmp/kl_s$S <<'P'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1]); rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
ev = [(r["env_steps"], round(r["wall_s"]), r["eval/greedy_success"]) for r in rows if "eval/greedy_success" in r]
print(d.name, "evals (env-steps, wall, greedy):", ev)
print(d.name, "lr/kl/entropy every 4th:", [(r["update"], f'{r["lr"]:.2e}', round(r.get("approx_kl", -1), 4), round(r["entropy"], 2)) for r in rows[::4]])
P
done
