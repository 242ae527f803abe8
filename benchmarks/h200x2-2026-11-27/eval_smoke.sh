# the eval beside training on CUDA: a short PPO run with it on and one with it off; /tmp/visit/bg_ok when it works
set -u
for mode in true false; do  # (the 2026-11-27 run, tree cc6ee6a, named them on and off)
  python3 -m gbxcule train --config configs/leave_house.toml --time-limit 40 --eval-every 262144 --no-progress \
    --run-dir $JOB_OUT/smoke_$mode --set run.eval_background=$mode > $JOB_OUT/smoke_$mode.log 2>&1
  echo "eval_background=$mode rc $?"
  python3 - $JOB_OUT/smoke_$mode/metrics.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    ev = f" eval@{r['eval/env_steps']} {r['eval/greedy_success']:.2f} in {r['eval/seconds']:.1f}s" if "eval/seconds" in r else ""
    print(f"  upd {r['update']} steps {r['env_steps']} sps {r['sps'] or 0:,.0f} wall {r['wall_s']:.1f}{ev}"
          + (f" waited {r['time_eval_s']:.1f}s" if "time_eval_s" in r else ""))
PY
done
grep -q "eval@" <(python3 - $JOB_OUT/smoke_true/metrics.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("eval@" if any("eval/seconds" in r and "time_eval_s" not in r for r in rows) else "none")
PY
) && touch /tmp/visit/bg_ok
ls /tmp/visit/bg_ok
