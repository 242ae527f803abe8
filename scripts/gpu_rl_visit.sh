#!/usr/bin/env bash
# The RL work of one GPU visit (docs/training.md), run from the repository root on the GPU machine after
# .gpu/install.sh. Usage: bash scripts/gpu_rl_visit.sh PART [ARGS]. Results go to $OUT/rl_PART.tgz (run folders
# without their full checkpoint.pt) and the table of each part is printed last.
#   bench            CUDA == CPU env check, raw full_step and bench-env at 16,384 envs
#   train TASK ENVS SECONDS SEED [SEED ...] [-- EXTRA gbxcule train FLAGS]
#   adapters         scripts/bench_adapters.py at 1,024 and 16,384 envs
#   cold             time to the first step from an empty kernel cache and from a warm one (bench, train)
#   games            scripts/bench_games.py: the public game set beside PyBoy (ROMs from scripts/fetch_games.py);
#                    env ONLY (slugs), VARIANTS (sort variants), PYBOY=0 (no baseline), PYBOY_REPEAT, STEPS, WARMUP, WINDOW, PARTNAME,
#                    BOUNDS (same-action bounds, '' none), SRC (the gbxcule sources to run: A/B against a copy)
#   speed            raw full_step at 16,384 envs: after power-on and once spread out, by sort key; and
#                    scripts/gpu_resume_check.py (what a resumed CUDA run reproduces)
#   parts            raw full_step at 16,384 envs once spread out, by sort key and sort_parts (no resume check)
#   trainspeed [ARGS] scripts/bench_train.py: training SPS at 16,384 envs per variant beside raw full_step
set -uo pipefail
export PYTHONPATH=/root/gpu:$PWD/src GBXCULE_CACHE_DIR=/tmp/gbxc PYTHONUNBUFFERED=1
OUT=${OUT:-out}
RUNS=/tmp/runs
mkdir -p "$OUT" "$RUNS"
part=$1; shift
case $part in
  bench)
    python3 scripts/gpu_rl_probe.py --check-only 2>&1 | grep -v "^Module" | tee "$RUNS/check.txt"
    python3 -m gbxcule bench --rom OVERWORLD --backends warp_vec_cuda --stage full_step --envs 16384 --steps 5 \
      --warmup 3 --out "$RUNS/raw_full_step_16384.json" 2>&1 | tail -4
    python3 -m gbxcule bench-env --device cuda --envs 16384 --stack-k 1,4 --info-mode stats --steps 10 --warmup 3 \
      --max-mem-delta 0 --out "$RUNS/bench_env_16384.json" 2>&1 | tail -12
    tar -czf "$OUT/rl_bench.tgz" -C "$RUNS" . ;;
  train)
    task=$1 envs=$2 secs=$3; shift 3
    seeds=(); while [[ $# -gt 0 && $1 != -- ]]; do seeds+=("$1"); shift; done; [[ ${1:-} == -- ]] && shift
    for seed in "${seeds[@]}"; do
      start=$(date +%s.%N)
      python3 -m gbxcule train --task "$task" --num-envs "$envs" --seed "$seed" --device cuda --no-progress \
        --time-limit "$secs" --checkpoint-every 1000 --eval-episodes 64 --run-dir "$RUNS/${task}_s$seed" "$@" \
        --json > "$RUNS/${task}_s$seed.summary.json" 2> "$RUNS/${task}_s$seed.log"
      echo "$task seed $seed rc=$? total wall $(python3 -c "import time; print(round(time.time()-$start,1))") s"
      python3 -m gbxcule plot "$RUNS/${task}_s$seed" > /dev/null
    done
    python3 - "$RUNS" "$task" <<'PY'
import json, pathlib, sys
runs, task = pathlib.Path(sys.argv[1]), sys.argv[2]
print(f"{'run':24s} {'env-steps':>11s} {'train s':>8s} {'sps':>8s} {'greedy':>7s} {'sampled':>8s} {'med':>5s} {'p90':>5s} {'agree':>6s}")
for p in sorted(runs.glob(f"{task}_s*.summary.json")):
    try:
        s = json.loads(p.read_text())
    except json.JSONDecodeError:
        print(p.name, "failed:", (runs / p.name.replace(".summary.json", ".log")).read_text()[-300:]); continue
    e = s.get("eval", {})
    print(f"{p.name[:-13]:24s} {s['env_steps']:>11,} {s['wall_s']:>8.1f} {s['last'].get('sps', 0):>8,.0f} "
          f"{e.get('success_rate')!s:>7.7s} {e.get('sampled', {}).get('success_rate')!s:>8.8s} "
          f"{e.get('median_steps')!s:>5.5s} {e.get('p90_steps')!s:>5.5s} {e.get('template_agreement')!s:>6.6s}")
PY
    tar -czf "$OUT/rl_train_$task.tgz" --exclude=checkpoint.pt -C "$RUNS" . ;;
  cold)  # time to the first step from an empty kernel cache, then warm: the emulator (bench) and the trainer
    for what in bench train; do
      for temp in cold warm; do
        [[ $temp == cold ]] && rm -rf "/tmp/cache_$what"
        start=$(date +%s.%N)
        if [[ $what == bench ]]; then
          GBXCULE_CACHE_DIR=/tmp/cache_$what python3 -m gbxcule bench --rom OVERWORLD --backends warp_vec_cuda \
            --stage full_step --envs 1024 --steps 1 --warmup 0 --out "$RUNS/cold_$temp.json" > /dev/null 2>&1
        else
          GBXCULE_CACHE_DIR=/tmp/cache_$what python3 -m gbxcule train --task leave_house --num-envs 64 \
            --total-steps 2048 --rollout-steps 32 --eval-episodes 0 --no-progress --device cuda \
            --run-dir "/tmp/cold_run_$temp" > /dev/null 2>&1
        fi
        rc=$?
        echo "$what $temp rc=$rc $(python3 -c "import time; print(round(time.time()-$start,1))") s" | tee -a "$RUNS/cold.txt"
      done
    done
    mkdir -p /tmp/gbxc && cp -rn /tmp/cache_bench/. /tmp/gbxc/ && cp -rn /tmp/cache_train/. /tmp/gbxc/  # warm for the rest
    tar -czf "$OUT/rl_cold.tgz" -C "$RUNS" cold.txt ;;
  games)  # the public game set (benchmarks/games/games.toml), ROMs in GAMES (default /root/gpu/games)
    PYTHONPATH=/root/gpu:${SRC:-$PWD/src} python3 scripts/bench_games.py --games "${GAMES:-/root/gpu/games}" \
      --envs "${ENVS:-65536}" --only "${ONLY:-}" --variants "${VARIANTS:-pc,path,stack}" --steps "${STEPS:-10}" \
      --bounds "${BOUNDS-shared,fixed}" $([[ ${PYBOY:-1} == 0 ]] && echo --no-pyboy) --pyboy-repeat "${PYBOY_REPEAT:-3}" --warmup "${WARMUP:-30}" \
      --window "${WINDOW:-0}" --out "$RUNS/games${PARTNAME:-}.json" 2>&1 | grep -v "^Module"
    tar -czf "$OUT/rl_games${PARTNAME:-}.tgz" -C "$RUNS" "games${PARTNAME:-}.json" ;;
  speed)  # raw full_step right after power-on and after 100 random steps (envs spread out), by sort key
    for spec in "poweron pc 3 5 seeded_random" "spread pc 100 20 seeded_random" "spread path 100 20 seeded_random" \
                "spread stack 100 20 seeded_random" \
                "poweron path 3 5 seeded_random" "fixed pc 100 20 fixed"; do
      read -r name key warm steps acts <<< "$spec"
      python3 -m gbxcule bench --rom OVERWORLD --backends warp_vec_cuda --stage full_step --envs 16384 \
        --steps "$steps" --warmup "$warm" --actions "$acts" --sort-key "$key" \
        --out "$RUNS/raw_${name}_$key.json" --json 2>/dev/null | python3 -c "
import json, sys; d = json.loads(sys.stdin.read()); r = d['results'][0]
print(f'$name $key warmup=$warm steps=$steps $acts: {r[\"env_steps_per_s\"]:,.0f} env-steps/s')" | tee -a "$RUNS/speed.txt"
    done
    python3 scripts/gpu_resume_check.py --device cuda --out "$RUNS/resume_check.json" 2>&1 | grep -v "^Module" | tail -24
    tar -czf "$OUT/rl_speed.tgz" -C "$RUNS" . ;;
  parts)  # sort_parts: re-sorting within frames, OVERWORLD once spread out (100 random steps first)
    for spec in "path 1" "path 2" "path 4" "path 8" "pc 4" "stack 1" "stack 4"; do
      read -r key parts <<< "$spec"
      python3 -m gbxcule bench --rom OVERWORLD --backends warp_vec_cuda --stage full_step --envs 16384 \
        --steps 20 --warmup 100 --sort-key "$key" --sort-parts "$parts" \
        --out "$RUNS/raw_spread_${key}_p$parts.json" --json 2>/dev/null | python3 -c "
import json, sys; d = json.loads(sys.stdin.read()); r = d['results'][0]
print(f'spread $key parts=$parts: {r[\"env_steps_per_s\"]:,.0f} env-steps/s')" | tee -a "$RUNS/parts.txt"
    done
    tar -czf "$OUT/rl_parts.tgz" -C "$RUNS" . ;;
  trainspeed)  # training SPS per variant at 16,384 envs, beside raw full_step (scripts/bench_train.py)
    python3 scripts/bench_train.py --device cuda --num-envs "${ENVS:-16384}" --seconds "${SECONDS_EACH:-45}" "$@" \
      --out "$RUNS/train_speed${PARTNAME:-}.json" 2>&1 | grep -v "^Module"
    tar -czf "$OUT/rl_trainspeed${PARTNAME:-}.tgz" -C "$RUNS" "train_speed${PARTNAME:-}.json" ;;
  adapters)
    python3 scripts/bench_adapters.py --device cuda --envs 1024,16384 --pyboy-workers 16 --out "$RUNS/adapters.json" \
      2>&1 | grep -v "^Module" | tail -25
    tar -czf "$OUT/rl_adapters.tgz" -C "$RUNS" adapters.json ;;
esac
