#!/usr/bin/env bash
# Several GPUs (docs/training.md "Several GPUs"): emulation and PPO training on 1, 2 and 4 GPUs of one host, run
# from the repository root of a 4-GPU machine after the setup calls. Results: $OUT/multigpu.json (every figure),
# $OUT/multigpu_runs.tgz (the run folders without checkpoints) and a table printed last.
#   bash scripts/bench/bench_multigpu.sh [all|emu|train|g1|g2|g4|gradsync|table]   (default all: emu, train, table; ~8-9 min)
#   emu       gbxcule bench --gpus G, G = 1, 2, 4: aggregate OVERWORLD full_step env-steps/s at 16,384 and 65,536
#             envs per GPU, and each GPU's own (EMU_STEPS, EMU_WARMUP)
#   train     PPO on reach_lab (configs/reach_lab_novelty.toml), 16,384 envs per GPU, seed 0: a greedy eval of 64
#             episodes every EVAL_S s of training, stopped at 90% greedy or after T1/T2/T4 s; 1 GPU (GPU 0) and
#             2 GPUs (GPUs 1-2) at once, then 4 GPUs (SERIAL=1: one after another). Training SPS = the median of
#             the logged SPS from the third update on (periodic evals are not in it)
#   g1|g2|g4  one of those runs alone on the GPUs CUDA_VISIBLE_DEVICES names (for a job runner that places it)
#   gradsync  SYNC_S (60) s of the same training on SYNC_GPUS (4) GPUs with run.grad_sync = allreduce, then ddp
#             (no eval): which is faster
#   table     the table again from what $OUT holds
# A smoke of the script on the CPU device (2-core box: tiny sizes, no result to keep):
#   BACKEND=warp_vec_cpu DEVICE=cpu EMU_PER=2 ENVS=2 T1=30 T2=30 T4=30 EVAL_S=5 \
#     EXTRA="--rollout-steps 4 --model small --eval-episodes 2 --max-steps 4" bash scripts/bench/bench_multigpu.sh
set -uo pipefail
export PYTHONPATH=/root/gpu:$PWD/src GBXCULE_CACHE_DIR=${GBXCULE_CACHE_DIR:-/tmp/gbxc} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # NVLink multicast stays off
OUT=${OUT:-out}
RUNS=/tmp/mgpu_runs
mkdir -p "$OUT" "$RUNS"
CONFIG=configs/reach_lab_novelty.toml
ENVS=${ENVS:-16384} EMU_PER=${EMU_PER:-16384 65536} BACKEND=${BACKEND:-warp_vec_cuda} DEVICE=${DEVICE:-cuda}
read -r -a EXTRA_FLAGS <<< "${EXTRA:-}"
T1=${T1:-180} T2=${T2:-180} T4=${T4:-150} EVAL_S=${EVAL_S:-15}

emu() {
  for g in 1 2 4; do
    local envs=()
    for per in $EMU_PER; do envs+=("$((per * g))"); done
    python3 -m gbxcule bench --rom OVERWORLD --backends "$BACKEND" --stage full_step --gpus "$g" \
      --envs "$(IFS=,; echo "${envs[*]}")" --steps "${EMU_STEPS:-10}" --warmup "${EMU_WARMUP:-5}" \
      --out "$RUNS/emu_g$g.json" 2>&1 | grep -v "^plot:"
  done
  cp "$RUNS"/emu_g*.json "$OUT"/ 2>/dev/null
}

train_one() {  # NAME GPUS VISIBLE SECONDS [gbxcule train flags]
  rm -rf "$RUNS/$1"
  local name=$1 g=$2 vis=$3 secs=$4; shift 4
  local start; start=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=$vis python3 -m gbxcule train --config "$CONFIG" --num-envs "$ENVS" --gpus "$g" \
    --device "$DEVICE" --seed 0 --run-dir "$RUNS/$name" --no-progress --time-limit "$secs" \
    --checkpoint-every 100000 --set run.checkpoint_every_s=100000 --set run.tensorboard=false "$@" "${EXTRA_FLAGS[@]}" \
    --json \
    > "$RUNS/$name.summary.json" 2> "$RUNS/$name.log"
  echo "$name: rc=$? wall $(python3 -c "import time; print(round(time.time() - $start, 1))") s (start-up, training, eval)" \
    | tee "$RUNS/$name.wall"
}

train() {
  local goal=(--eval-episodes 64 --set "run.eval_every_s=$EVAL_S" --stop-at-success 0.9)
  if [[ ${SERIAL:-0} == 1 ]]; then
    train_one ttt_g1 1 0 "$T1" "${goal[@]}"
    train_one ttt_g2 2 1,2 "$T2" "${goal[@]}"
  else
    train_one ttt_g1 1 0 "$T1" "${goal[@]}" &
    train_one ttt_g2 2 1,2 "$T2" "${goal[@]}" &
    wait
  fi
  train_one ttt_g4 4 0,1,2,3 "$T4" "${goal[@]}"
}

one() {  # g1|g2|g4 on the inherited CUDA_VISIBLE_DEVICES
  local g=${1#g} t
  case $g in 1) t=$T1 ;; 2) t=$T2 ;; *) t=$T4 ;; esac
  train_one "ttt_g$g" "$g" "${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 $((g - 1)))}" "$t" --eval-episodes 64 \
    --set "run.eval_every_s=$EVAL_S" --stop-at-success 0.9
}

gradsync() {
  local g=${SYNC_GPUS:-4}
  for mode in allreduce ddp; do
    train_one sync_$mode "$g" "$(seq -s, 0 $((g - 1)))" "${SYNC_S:-60}" --eval-episodes 0 --set "run.grad_sync=$mode"
  done
}

table() {
  python3 - "$RUNS" "$OUT" "$ENVS" <<'PY'
import json, pathlib, statistics, sys
runs, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
res = {"emulation": {}, "training": {}}
for p in sorted(runs.glob("emu_g*.json")):
    d = json.loads(p.read_text())
    g = d["gpus"]
    for r, parts in zip(d["results"], d["per_process"]):
        res["emulation"].setdefault(r["envs"] // g, {})[g] = {
            "sps": r["env_steps_per_s"], "frames_per_s": r["frames_per_s"],
            "per_gpu_sps": [q["env_steps_per_s"] for q in parts]}
for p in sorted(runs.glob("*.summary.json")):
    name = p.name[: -len(".summary.json")]
    log = runs / name / "metrics.jsonl"
    rows = [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
    try:
        s = json.loads(p.read_text())
    except json.JSONDecodeError:
        s = {"failed": (runs / f"{name}.log").read_text()[-600:]}
    sps = [r["sps"] for r in rows[2:] if r.get("sps")]
    upd = [r["time_update_s"] for r in rows[2:] if r.get("time_update_s") is not None]
    hit = next((r for r in rows if (r.get("eval/greedy_success") or 0) >= 0.9), None)
    res["training"][name] = {
        "gpus": s.get("world_size"), "updates": s.get("updates"), "env_steps": s.get("env_steps"),
        "stopped": s.get("stopped"), "train_s": s.get("wall_s"), "startup_s": s.get("startup_s"),
        "sps": statistics.median(sps) if sps else None, "time_update_s": statistics.median(upd) if upd else None,
        "greedy_evals": [(r["env_steps"], r["eval/wall_s"], r["eval/greedy_success"]) for r in rows
                         if "eval/greedy_success" in r],
        "to_90": None if hit is None else {"env_steps": hit["env_steps"], "train_s": hit["eval/wall_s"],
                                           "elapsed_s": hit["eval/elapsed_s"]},
        "final_eval": (s.get("eval") or {}).get("success_rate"), "failed": s.get("failed")}
(out / "multigpu.json").write_text(json.dumps(res, indent=2) + "\n")

def eff(x, base, g):
    return "-" if x is None or base is None else f"{x / (g * base):.1%}"

for per, by in sorted(res["emulation"].items()):
    base = by.get(1, {}).get("sps")
    print(f"emulation, OVERWORLD full_step, {per:,} envs per GPU")
    for g, r in sorted(by.items()):
        print(f"  {g} GPU(s)  {r['sps']:>12,.0f} env-steps/s  {r['frames_per_s']:>14,.0f} frames/s  efficiency "
              f"{eff(r['sps'], base, g):>6s}  per GPU " + " ".join(f"{x:,.0f}" for x in r["per_gpu_sps"]))
tr = res["training"]
base = (tr.get("ttt_g1") or {}).get("sps")
print(f"training, PPO on reach_lab, {int(sys.argv[3]):,} envs per GPU")
for name, t in tr.items():
    if t["failed"]:
        print(f"  {name}: failed: {t['failed'][-300:]}")
        continue
    g = t["gpus"] or 1
    hit = t["to_90"]
    reach = ("not within the run" if hit is None else
             f"{hit['train_s']:.0f} s of training ({hit['elapsed_s']:.0f} s from the start), {hit['env_steps']:,} env-steps")
    sps = "-" if t["sps"] is None else f"{t['sps']:,.0f}"
    upd = "-" if t["time_update_s"] is None else f"{t['time_update_s']:.3f}"
    fe = "-" if t["final_eval"] is None else f"{t['final_eval']:.0%}"
    print(f"  {name:14s} {g} GPU(s)  SPS {sps:>9s}  efficiency {eff(t['sps'], base, g) if name.startswith('ttt') else '-':>6s}  "
          f"update {upd} s  {t['updates']} updates, {t['env_steps']:,} env-steps, {t['train_s']:.0f} s ({t['stopped']}); "
          f"90% greedy: {reach}; final eval {fe}")
PY
  tar -czf "$OUT/multigpu_runs.tgz" --exclude=checkpoint.pt -C "$RUNS" . 2>/dev/null
}

python3 -c 'import torch; print("torch", torch.__version__, "GPUs", torch.cuda.device_count(), "NCCL", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'
nvidia-smi topo -m 2>/dev/null | head -8
case ${1:-all} in
  all) emu; train; table ;;
  emu) emu; table ;;
  train) train; table ;;
  g1|g2|g4) one "$1"; table ;;
  gradsync) gradsync; table ;;
  table) table ;;
  *) sed -n '2,18p' "$0" >&2; exit 2 ;;
esac
