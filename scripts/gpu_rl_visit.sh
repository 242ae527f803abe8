#!/usr/bin/env bash
# The RL work of one GPU visit (docs/training.md), run from the repository root on the GPU machine after
# .gpu/install.sh. Usage: bash scripts/gpu_rl_visit.sh PART [ARGS]. Results go to $OUT/rl_PART.tgz (run folders
# without their full checkpoint.pt) and the table of each part is printed last.
#   bench            CUDA == CPU env check, raw full_step and bench-env at 16,384 envs
#   train TASK ENVS SECONDS SEED [SEED ...] [-- EXTRA gbxcule train FLAGS]
#   adapters         scripts/bench_adapters.py at 1,024 and 16,384 envs
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
  adapters)
    python3 scripts/bench_adapters.py --device cuda --envs 1024,16384 --pyboy-workers 16 --out "$RUNS/adapters.json" \
      2>&1 | grep -v "^Module" | tail -25
    tar -czf "$OUT/rl_adapters.tgz" -C "$RUNS" adapters.json ;;
esac
