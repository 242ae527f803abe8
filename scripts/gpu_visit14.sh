#!/usr/bin/env bash
# Fourteenth visit. Run after the setup calls (BENCHMARKS.md); results under $OUT.
#   check: devcheck (built-in ROMs) and devcheck_games.py (the game set) in each of LOOPS (default flat: the flat
#          kernel from the first step), the launches in SGROUPS stream groups (default auto)
#   ncu:   Nsight Compute on a lean launch (SKIPS) of GAMES_NCU in LOOPS, under ACTS (gpu_visit.sh ncu_games)
#   ow:    OVERWORLD full_step at steps 30-39, 65,536 and 262,144 envs (auto)
#   cold:  time to the first step from an empty kernel cache, then warm (gpu_rl_visit.sh cold), and each of the
#          first 24 steps of a fresh `auto` backend on a game (the tuner builds the flat kernels at its first trial);
#          then a cold `gbxcule train` again with Warp's module log (which module took how long to build)
set -uo pipefail
export PYTHONPATH=/root/gpu:$PWD/src PYTHONUNBUFFERED=1 GBXCULE_CACHE_DIR=${GBXCULE_CACHE_DIR:-/tmp/gbxc}
games=/root/gpu/games
all=$(ls $games/*.gb | xargs -n1 basename | sed 's/\.gb$//' | paste -sd,)
case ${1:-} in
  check)
    for loop in ${LOOPS:-flat}; do
      python3 -m gbxcule devcheck --loop $loop --stream-groups "${SGROUPS:-auto}" --envs 64 --steps 3 --seeds 0,1 \
        --json > "$OUT/devcheck_$loop.json"
      echo "devcheck --loop $loop: rc $?"; tail -c 400 "$OUT/devcheck_$loop.json"; echo
      python3 scripts/devcheck_games.py --games $games --only "${ONLY:-$all}" --envs 64 --steps "${STEPS:-4}" \
        --loop $loop --stream-groups "${SGROUPS:-auto}" 2>&1 | grep -v "^Module\|^Warp" | tee "$OUT/devcheck_games_$loop.txt" | tail -20
      echo "devcheck_games --loop $loop: rc ${PIPESTATUS[0]}"
    done ;;
  ncu)
    for loop in ${LOOPS:-nested flat}; do
      for acts in ${ACTS:-seeded_random}; do
        LOOP=$loop ACTIONS=$acts GAMES=$games GAMES_NCU=${GAMES_NCU:-corrib75} bash scripts/gpu_visit.sh ncu_games \
          2>&1 | grep -A12 "^function"
      done
    done
    (cd "$OUT" && tar -cf ncu.tar ncu_* && rm -f ncu_*) ;;  # one file: a run brings back only a few
  ow)
    for envs in 65536 262144; do
      python3 -m gbxcule bench --rom OVERWORLD --backends warp_vec_cuda --stage full_step --envs $envs --steps 10 \
        --warmup 30 --out "$OUT/ow_$envs.json" 2>&1 | tail -2
    done ;;
  cold)
    OUT=$OUT bash scripts/gpu_rl_visit.sh cold 2>&1 | tail -4
    rm -rf /tmp/cache_steps
    GBXCULE_CACHE_DIR=/tmp/cache_steps python3 - "$games" "$OUT/cold_steps.json" <<'PY' 2>&1 | grep -v "^Module\|^Warp"
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import warp as wp
from gbxcule.backends import load_start_state
from gbxcule.backends.warp_vec import WarpVecBackend
from gbxcule.harness.actions import make_action_gen
games, out = sys.argv[1], sys.argv[2]
b = WarpVecBackend(f"{games}/tobutobugirl.gb", num_envs=65536, device="cuda", stage="full_step")
b.reset(seed=0)
load_start_state(b, f"{games}/states/tobutobugirl.state")
gen = make_action_gen("seeded_random", b.codec, 65536, seed=0)
wp.synchronize()
rows = [{"step": "setup", "s": round(time.perf_counter() - t0, 2)}]
for k in range(24):
    t = time.perf_counter()
    b.step(gen(k))
    wp.synchronize()
    rows.append({"step": k, "s": round(time.perf_counter() - t, 3)})
print(" ".join(f"{r['step']}:{r['s']}" for r in rows))
print("trials", b.sort_trials())
json.dump({"game": "tobutobugirl", "envs": 65536, "steps": rows, "trials": b.sort_trials()}, open(out, "w"), indent=1)
PY
    rm -rf /tmp/cache_log
    start=$(date +%s.%N)
    GBXCULE_CACHE_DIR=/tmp/cache_log python3 -c "
import sys, warp as wp, gbxcule.kernels
wp.config.log_level = wp.LOG_INFO
from gbxcule.cli.main import main
sys.exit(main(sys.argv[1:]))" train --task leave_house --num-envs 64 --total-steps 2048 --rollout-steps 32 \
      --eval-episodes 0 --no-progress --device cuda --run-dir /tmp/cold_log_run > "$OUT/train_cold_log.txt" 2>&1
    echo "train cold (module log) rc=$? $(python3 -c "import time; print(round(time.time()-$start,1))") s"
    grep -a "took" "$OUT/train_cold_log.txt" | sed 's/^/  /'
    ;;
esac
