#!/usr/bin/env bash
# gbxcule's one driver for the GPU machine (Python 3.12 and torch, no Warp, no PyBoy, no package index), run
# from the repository root there:   bash scripts/gpu/gpu.sh SUBCOMMAND [ARGS]      (bash scripts/gpu/gpu.sh help)
#
# Installing takes two calls, because what one call may bring to the machine is limited in size (64 MiB with the
# tree, about 8 MiB of it; .gpu/ is 106 MiB):
#   1. carrying .gpu/warp.part.aa and .gpu/pyboy.tar.xz:   bash scripts/gpu/gpu.sh setup
#   2. carrying .gpu/warp.part.ab, .gpu/wheels and .gpu/install.sh (and .games/ for the game set): the same
# (.gpu/ is made by ../shared/gpu/prepare.sh on the development machine; step 1 keeps both files under /root/gpu, and
# step 2 takes PyBoy from there where it did not travel again.)
# Every other subcommand assumes setup happened and sets PYTHONPATH itself. Each writes its files under a
# folder of its own in $RUNS and packs them into one $OUT/NAME.tgz (a run brings back only a few files), and
# prints its table last. BENCHMARKS.md gives the command behind each figure.
#
# Environment (defaults in brackets): GPU_ROOT [/root/gpu] where setup unpacks Warp and PyBoy (install.sh's
# folder); OUT [./gpu_out]; RUNS [/tmp/gbxcule_runs] the work folders; GAMES [$GPU_ROOT/games] the game set
# (<slug>.gb and states/<slug>.state, from scripts/bench/fetch_games.py); SRC [$PWD/src] the gbxcule sources to run;
# GBXCULE_CACHE_DIR [/tmp/gbxc] the kernel cache; PY [python3]. Each subcommand's own variables: its help line.
#
# Work longer than one call (10 minutes): `jobs_start FILE` in one call, then `jobs_wait SECONDS` in each call after
# it, each made within the machine's idle release; bench_learning.py lines in FILE take the GPUs their job got. Each
# jobs_wait brings back the runs' checkpoints: where the machine was lost, set up a fresh one, carry the last pack
# back (`jobs_stash FILE...`, in as many calls as its size takes) and `jobs_resume FILE` goes on from them.
# To add a subcommand: a function `cmd_NAME` with a `## NAME ARGS: what it does` line right above it.
set -uo pipefail
GPU_ROOT=${GPU_ROOT:-/root/gpu}
OUT=${OUT:-./gpu_out}
RUNS=${RUNS:-/tmp/gbxcule_runs}
GAMES=${GAMES:-$GPU_ROOT/games}
SRC=${SRC:-$PWD/src}
PY=${PY:-python3}
export GBXCULE_CACHE_DIR=${GBXCULE_CACHE_DIR:-/tmp/gbxc} PYTHONUNBUFFERED=1
SELF=${BASH_SOURCE[0]}

# --- helpers ---------------------------------------------------------------------------------------------------

die() { echo "error: $*" >&2; exit 1; }

# PYTHONPATH for the sources in $1 (default $SRC), after checking that setup ran
use_src() {
  [[ -e $GPU_ROOT/.ready ]] || die "Warp and PyBoy are not installed under $GPU_ROOT: run 'bash $SELF setup' first"
  export PYTHONPATH=$GPU_ROOT:${1:-$SRC}
}

# a fresh work folder $RUNS/$1 (printed; an earlier one of that name is removed)
work() { local d=$RUNS/$1; rm -rf "$d"; mkdir -p "$d" "$OUT"; echo "$d"; }

# pack the work folder $RUNS/$1 into $OUT/$1.tgz (files named in $2.. are left out)
pack() {
  local name=$1; shift
  local ex=(); for x in "$@"; do ex+=(--exclude="$x"); done
  tar -czf "$OUT/$name.tgz" "${ex[@]}" -C "$RUNS/$name" . && echo "packed $OUT/$name.tgz"
}

# seconds since $1 (a date +%s.%N stamp)
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# the slugs of every game in $GAMES, comma-separated
all_games() { ls "$GAMES"/*.gb 2>/dev/null | xargs -n1 basename | sed 's/\.gb$//' | paste -sd, -; }

quiet() { grep -v "^Module\|^Warp " || true; }  # Warp's module-load lines

# --- subcommands -----------------------------------------------------------------------------------------------

## help: this list; help SUBCOMMAND: its variables
cmd_help() {
  if [[ -n ${1:-} ]]; then  # one subcommand: its line and the variables under it
    awk -v n="$1" '!/^#/ { on = 0 } /^## / { on = ($2 == n || $2 == n ":") } on { sub(/^##? ?/, ""); print }' "$SELF"
    return
  fi
  echo "usage: bash scripts/gpu/gpu.sh SUBCOMMAND [ARGS]   (set-up and common variables: the comment atop $SELF)"
  sed -n 's/^## /  /p' "$SELF"
}

## setup: install Warp and PyBoy under $GPU_ROOT from .gpu/ in two calls (the comment atop this file), copy .games/
#    to $GAMES; step 1 keeps what travelled of .gpu/warp.part.aa and .gpu/pyboy.tar.xz under $GPU_ROOT
cmd_setup() {
  mkdir -p "$GPU_ROOT" || die "cannot make $GPU_ROOT"
  local f
  for f in warp.part.aa pyboy.tar.xz; do
    if [[ -e .gpu/$f && ! -e $GPU_ROOT/$f ]]; then
      cp ".gpu/$f" "$GPU_ROOT/" || die "cannot copy .gpu/$f to $GPU_ROOT"
      echo "step 1: $GPU_ROOT/$f"
    fi
  done
  [[ -e $GPU_ROOT/warp.part.aa ]] || die "step 1 first, in a call carrying .gpu/warp.part.aa and .gpu/pyboy.tar.xz"
  if [[ ! -e .gpu/install.sh || ! -e .gpu/warp.part.ab ]]; then
    echo "step 2: call 'bash $SELF setup' again, carrying .gpu/warp.part.ab, .gpu/wheels and .gpu/install.sh (and"
    echo "        .games for the game set)"
    return 0
  fi
  if [[ ! -e .gpu/pyboy.tar.xz ]]; then  # it travelled in step 1
    [[ -e $GPU_ROOT/pyboy.tar.xz ]] || die "no .gpu/pyboy.tar.xz: carry it in step 1 or in this call"
    cp "$GPU_ROOT/pyboy.tar.xz" .gpu/ || die "cannot copy $GPU_ROOT/pyboy.tar.xz to .gpu/"
  fi
  bash .gpu/install.sh || die ".gpu/install.sh failed"
  if [[ -d .games ]]; then
    mkdir -p "$GAMES" && cp -rn .games/. "$GAMES/" && echo "game set: $(all_games | tr ',' ' ' | wc -w) games in $GAMES"
  fi
  use_src
  "$PY" -c "import torch, warp, pyboy; print('torch', torch.__version__, '| warp', warp.__version__, '| pyboy ok |',
            torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device')" 2>&1 | quiet
  echo "ready: PYTHONPATH=$PYTHONPATH"
}

## bench: OVERWORLD full_step env-steps/s at 65,536 and 262,144 envs, steps 30-39 (the headline figure)
#    ENVS ["65536 262144"], STEPS [10] timed after WARMUP [30]
cmd_bench() {
  use_src; local d; d=$(work bench)
  for envs in ${ENVS:-65536 262144}; do
    "$PY" -m gbxcule bench --rom OVERWORLD --backends warp_vec_cuda --stage full_step --envs "$envs" \
      --steps "${STEPS:-10}" --warmup "${WARMUP:-30}" --out "$d/ow_$envs.json" 2>&1 | quiet | tail -3
  done
  pack bench
}

## games: the 17-game set beside PyBoy on the host cores (scripts/bench/bench_games.py)
#    ONLY (slugs, default all), ENVS [262144], VARIANTS [path], STEPS [10], WARMUP [30], BOUNDS [shared],
#    PYBOY_REPEAT [3], PYBOY=0 (no PyBoy), WINDOW [0], PARTNAME (one part of the set per call; join the parts
#    here with scripts/bench/bench_games.py --merge)
cmd_games() {
  use_src; local name=games${PARTNAME:-} d; d=$(work "$name")
  local nopyboy=(); [[ ${PYBOY:-1} == 0 ]] && nopyboy=(--no-pyboy)
  "$PY" scripts/bench/bench_games.py --games "$GAMES" --envs "${ENVS:-262144}" --only "${ONLY:-}" \
    --variants "${VARIANTS:-path}" --steps "${STEPS:-10}" --warmup "${WARMUP:-30}" --bounds "${BOUNDS-shared}" \
    "${nopyboy[@]}" --pyboy-repeat "${PYBOY_REPEAT:-3}" --window "${WINDOW:-0}" --out "$d/$name.json" 2>&1 | quiet
  pack "$name"
}

## ab NAME=DIR ...: source trees side by side on the same spread states, and whether they end alike
#    the working tree's scripts/bench/bench_spread.py on its own sources ("new") and on each DIR/src (DIR: a copy of
#    a commit's tree); GAMES_AB [corrib75,tobutobugirl,airaki], VARIANTS [path/1,path/1@flat], ENVS [262144],
#    SPREAD [24], STEPS [3]; OW=1 adds OVERWORLD full_step per tree (OW_ENVS [262144])
cmd_ab() {
  local d; d=$(work ab)
  for spec in new="$(dirname "$SRC")" "$@"; do
    local name=${spec%%=*} dir=${spec#*=}
    [[ -d $dir/src/gbxcule ]] || die "$name: no gbxcule sources in $dir/src"
    use_src "$dir/src"
    GBXCULE_CACHE_DIR=$GBXCULE_CACHE_DIR/ab_$name "$PY" scripts/bench/bench_spread.py --games "$GAMES" \
      --only "${GAMES_AB:-corrib75,tobutobugirl,airaki}" --envs "${ENVS:-262144}" --spread "${SPREAD:-24}" \
      --steps "${STEPS:-3}" --variants "${VARIANTS:-path/1,path/1@flat}" --out "$d/spread_$name.json" 2>&1 \
      | grep -E "^[a-z0-9-]+: |DIFFERENT|error" | sed "s/^/$name /"
    if [[ ${OW:-0} == 1 ]]; then
      GBXCULE_CACHE_DIR=$GBXCULE_CACHE_DIR/ab_$name "$PY" -m gbxcule bench --rom OVERWORLD --backends warp_vec_cuda \
        --stage full_step --envs "${OW_ENVS:-262144}" --steps 10 --warmup 30 --out "$d/ow_$name.json" 2>&1 \
        | grep warp_vec_cuda | sed "s/^/$name OVERWORLD /"
    fi
  done
  "$PY" - "$d" <<'PY'
import json, pathlib, sys
folder = pathlib.Path(sys.argv[1])
runs = {p.stem[len("spread_"):]: json.loads(p.read_text()) for p in sorted(folder.glob("spread_*.json"))}
runs = dict(sorted(runs.items(), key=lambda kv: kv[0] != "new"))  # the working tree first
for slug in [g["slug"] for g in runs["new"]["games"]]:
    rows = {n: next(g for g in r["games"] if g["slug"] == slug) for n, r in runs.items()}
    cells = []
    for v in rows["new"]["sps"]:
        mean = {n: sum(r["sps"][v]) / len(r["sps"][v]) for n, r in rows.items() if v in r["sps"]}
        cells.append(v + " " + " ".join(f"{n} {mean[n]:,.0f}" for n in mean)
                     + "".join(f" new/{n} {mean['new'] / mean[n]:.3f}" for n in mean if n != "new"))
    same = len({r["end_sha1"] for r in rows.values()}) == 1
    print(f"{slug}: " + " | ".join(cells) + ("" if same else "  DIFFERENT END STATES"))
PY
  pack ab
}

## devcheck: CUDA == CPU bit for bit: gbxcule devcheck and scripts/check/devcheck_games.py, in each instruction loop
#    LOOPS ["nested flat"], SGROUPS [auto] stream groups, ONLY [every game in $GAMES], STEPS [4]
cmd_devcheck() {
  use_src
  local d only=${ONLY:-$(all_games)} rc=0 r
  d=$(work devcheck)
  for loop in ${LOOPS:-nested flat}; do
    "$PY" -m gbxcule devcheck --loop "$loop" --stream-groups "${SGROUPS:-auto}" --envs 64 --steps 3 --seeds 0,1 \
      --json > "$d/devcheck_$loop.json"
    r=$?; rc=$((rc | r)); echo "devcheck --loop $loop: rc $r"
    if [[ -n $only ]]; then
      "$PY" scripts/check/devcheck_games.py --games "$GAMES" --only "$only" --envs 64 --steps "${STEPS:-4}" --loop "$loop" \
        --stream-groups "${SGROUPS:-auto}" > "$d/devcheck_games_$loop.txt" 2>&1
      r=$?; rc=$((rc | r)); quiet < "$d/devcheck_games_$loop.txt" | tail -20; echo "devcheck_games --loop $loop: rc $r"
    fi
  done
  pack devcheck
  return $rc
}

## cold: seconds to the first step from an empty kernel cache, then warm: gbxcule bench and gbxcule train
#    bench: OVERWORLD, 1,024 envs, one step; train: leave_house, 64 envs, one update
cmd_cold() {
  use_src; local d; d=$(work cold)
  for what in bench train; do
    for temp in cold warm; do
      local cache=$RUNS/cache_$what start rc
      [[ $temp == cold ]] && rm -rf "$cache"
      start=$(date +%s.%N)
      if [[ $what == bench ]]; then
        GBXCULE_CACHE_DIR=$cache "$PY" -m gbxcule bench --rom OVERWORLD --backends warp_vec_cuda --stage full_step \
          --envs 1024 --steps 1 --warmup 0 --out "$d/bench_$temp.json" > /dev/null 2>&1
      else
        GBXCULE_CACHE_DIR=$cache "$PY" -m gbxcule train --task leave_house --num-envs 64 --total-steps 2048 \
          --rollout-steps 32 --eval-episodes 0 --no-progress --device cuda --run-dir "$RUNS/cold_run_$temp" \
          > /dev/null 2>&1
      fi
      rc=$?
      echo "$what $temp rc=$rc $(since "$start") s" | tee -a "$d/cold.txt"
    done
  done
  mkdir -p "$GBXCULE_CACHE_DIR" && cp -rn "$RUNS/cache_bench/." "$RUNS/cache_train/." "$GBXCULE_CACHE_DIR/" 2>/dev/null
  pack cold
}

## train TASK ENVS SECONDS SEED [SEED ...] [-- FLAGS]: gbxcule train per seed on CUDA, evaluated and plotted
#    64 evaluation episodes; FLAGS are passed on (e.g. --config configs/leave_house.toml)
cmd_train() {
  [[ $# -ge 4 ]] || die "usage: bash $SELF train TASK ENVS SECONDS SEED [SEED ...] [-- FLAGS]"
  use_src
  local task=$1 envs=$2 secs=$3; shift 3
  local seeds=(); while [[ $# -gt 0 && $1 != -- ]]; do seeds+=("$1"); shift; done; [[ ${1:-} == -- ]] && shift
  local name=train_$task d; d=$(work "$name")
  for seed in "${seeds[@]}"; do
    local start; start=$(date +%s.%N)
    "$PY" -m gbxcule train --task "$task" --num-envs "$envs" --seed "$seed" --device cuda --no-progress \
      --time-limit "$secs" --checkpoint-every 1000 --eval-episodes 64 --run-dir "$d/${task}_s$seed" "$@" \
      --json > "$d/${task}_s$seed.summary.json" 2> "$d/${task}_s$seed.log"
    echo "$task seed $seed rc=$? total wall $(since "$start") s"
    "$PY" -m gbxcule plot "$d/${task}_s$seed" > /dev/null 2>&1
  done
  "$PY" - "$d" "$task" <<'PY'
import json, pathlib, sys
runs, task = pathlib.Path(sys.argv[1]), sys.argv[2]
print(f"{'run':24s} {'env-steps':>11s} {'train s':>8s} {'sps':>8s} {'greedy':>7s} {'sampled':>8s} {'med':>5s} "
      f"{'p90':>5s} {'agree':>6s}")
for p in sorted(runs.glob(f"{task}_s*.summary.json")):
    try:
        s = json.loads(p.read_text())
    except json.JSONDecodeError:
        print(p.name, "failed:", (runs / p.name.replace(".summary.json", ".log")).read_text()[-300:])
        continue
    e = s.get("eval", {})
    print(f"{p.name[:-13]:24s} {s['env_steps']:>11,} {s['wall_s']:>8.1f} {s['last'].get('sps', 0):>8,.0f} "
          f"{e.get('success_rate')!s:>7.7s} {e.get('sampled', {}).get('success_rate')!s:>8.8s} "
          f"{e.get('median_steps')!s:>5.5s} {e.get('p90_steps')!s:>5.5s} {e.get('template_agreement')!s:>6.6s}")
PY
  pack "$name" checkpoint.pt
}

## jobs FILE: a list of commands packed onto the GPUs, each on the GPUs it needs (scripts/gpu/gpu_jobs.py: lines
#    `[G] NAME: COMMAND`, `---` a barrier; each job's $JOB_OUT is packed with the logs, checkpoints left out)
cmd_jobs() {
  [[ $# -eq 1 ]] || die "usage: bash $SELF jobs FILE"
  use_src
  local d; d=$(work jobs)
  "$PY" scripts/gpu/gpu_jobs.py "$1" --out "$d"
  local rc=$?
  pack jobs checkpoint.pt
  return $rc
}

## jobs_start FILE: the same job list started in a process session of its own, which outlives this call: jobs
#    longer than one call run on while calls keep coming within the machine's idle release (run jobs_wait next)
cmd_jobs_start() {
  [[ $# -eq 1 ]] || die "usage: bash $SELF jobs_start FILE"
  jobs_ready "$1"
  local d; d=$(work jobs)
  launch_jobs "$1" "$d"
}

# before the job list $1 starts: it exists, setup ran, no other list runs
jobs_ready() {
  [[ -f $1 ]] || die "no job file $1"
  use_src
  [[ -e $RUNS/jobs/.started && ! -e $RUNS/jobs/.ended ]] && die "jobs already running in $RUNS/jobs (jobs_wait)"
  return 0
}

# start the job list $1 in the folder $2, in a process session of its own
launch_jobs() {
  local d=$2
  touch "$d/.started"
  setsid nohup bash -c "\"$PY\" scripts/gpu/gpu_jobs.py \"$1\" --out \"$d\" > \"$d/runner.log\" 2>&1; touch \"$d/.ended\"" \
    > /dev/null 2>&1 < /dev/null &
  echo "started $1 in $d (its own session); bash $SELF jobs_wait SECONDS to wait and pack"
}

## jobs_stash FILE...: keep files carried here (a jobs_wait pack from a machine that was lost: jobs.tgz or its
#    parts, as many calls as carrying them takes) under $RUNS/stash for jobs_resume
cmd_jobs_stash() {
  [[ $# -ge 1 ]] || die "usage: bash $SELF jobs_stash FILE..."
  mkdir -p "$RUNS/stash" || die "cannot make $RUNS/stash"
  local f
  for f in "$@"; do
    [[ -f $f ]] || die "no file $f"
    cp "$f" "$RUNS/stash/" || die "cannot copy $f"
  done
  ls -l "$RUNS/stash"
}

## jobs_resume FILE: jobs_start on a fresh machine from the pack jobs_stash kept (its parts joined in name order):
#    its job folders come back and each bench_learning.py run whose folder holds a checkpoint and no summary resumes
#    with the training seconds it has left, its kept policies' evals that reported not run again (jobs_wait next)
cmd_jobs_resume() {
  [[ $# -eq 1 ]] || die "usage: bash $SELF jobs_resume FILE"
  jobs_ready "$1"
  local packs; packs=$(ls "$RUNS"/stash/jobs.tgz.part-* 2>/dev/null | sort)  # (the parts, else the whole pack)
  [[ -n $packs ]] || packs=$(ls "$RUNS"/stash/jobs.tgz 2>/dev/null)
  [[ -n $packs ]] || die "nothing in $RUNS/stash: jobs_stash the pack (jobs.tgz or jobs.tgz.part-*) first"
  local d; d=$(work jobs)
  # shellcheck disable=SC2086  # (one name a line, no spaces)
  cat $packs | tar -xzf - -C "$d" || die "the stashed pack does not unpack (a part missing?): $packs"
  rm -f "$d/.started" "$d/.ended" "$d/runner.log"
  echo "unpacked $(echo "$packs" | wc -l) file(s) into $d: $(find "$d" -name checkpoint.pt | wc -l) checkpoint(s)"
  launch_jobs "$1" "$d"
}

# ask every run in $1 still training (a metrics.jsonl, no summary.json) for a checkpoint now (a `checkpoint.now`
# file, which the run removes once its checkpoint is written) and wait until each has written it, SAVE_WAIT s at most
fresh_checkpoints() {
  local m run asked=() t0; t0=$(date +%s)
  while IFS= read -r m; do
    run=$(dirname "$m")
    [[ -e $run/summary.json ]] && continue
    touch "$run/checkpoint.now" && asked+=("$run")
  done < <(find "$1" -name metrics.jsonl 2>/dev/null)
  (( ${#asked[@]} )) || return 0
  while (( $(date +%s) - t0 < ${SAVE_WAIT:-90} )); do
    local left=0
    for run in "${asked[@]}"; do [[ -e $run/checkpoint.now && ! -e $run/summary.json ]] && left=1; done
    (( left )) || { echo "checkpoints written: ${#asked[@]} run(s), $(( $(date +%s) - t0 )) s"; return 0; }
    sleep 1
  done
  echo "no new checkpoint within ${SAVE_WAIT:-90} s (a run still setting up?): packed the last ones"
}

## jobs_wait SECONDS: wait until the jobs of jobs_start end or SECONDS pass, then (jobs still running) ask each run
#    still training for a checkpoint and wait for it (SAVE_WAIT [90] s at most; rl/rundir.py SAVE_NOW_NAME), then pack
#    what is there (checkpoints, policies and archives left out) into $OUT/jobs.tgz and print the runner's log; exit
#    status 0 once all ended; KEEP [while jobs run: the policies kept at marks, policy_*s.pt, and the checkpoints,
#    checkpoint.pt, unless the pack would then be over what a call returns (8 files, 64 MiB): then the policies go first,
#    and the checkpoints only if still over; once all ended: policy.pt
#    policy_*s.pt]: of the names left out, those to pack after all, so each call brings back what a lost machine would
#    take with it (jobs_stash, jobs_resume); PART_BYTES [15 MiB]: a larger jobs.tgz is split into jobs.tgz.part-aa, -ab,
#    ... of that size (a call returns files of at most 16 MiB, 8 of them, 64 MiB together): `cat jobs.tgz.part-* >
#    jobs.tgz` joins them
cmd_jobs_wait() {
  [[ $# -eq 1 && $1 =~ ^[0-9]+$ ]] || die "usage: bash $SELF jobs_wait SECONDS"
  local d=$RUNS/jobs t0; t0=$(date +%s)
  [[ -e $d/.started ]] || die "no jobs started in $d (jobs_start FILE first)"
  while [[ ! -e $d/.ended ]] && (( $(date +%s) - t0 < $1 )); do sleep 5; done
  [[ -e $d/.ended ]] || fresh_checkpoints "$d"
  mkdir -p "$OUT"
  local drop=() x keep part=${PART_BYTES:-15728640}
  if [[ -e $d/.ended ]]; then keep=${KEEP-"policy.pt policy_*s.pt"}; else keep=${KEEP-"policy_*s.pt checkpoint.pt"}; fi
  for x in checkpoint.pt policy.pt best_policy.pt 'policy_*s.pt' archive.npz 'events.out.*'; do
    [[ " $keep " == *" $x "* ]] || drop+=("$x")
  done
  rm -f "$OUT"/jobs.tgz.part-*
  pack jobs "${drop[@]}"
  local most=$(( 64 * 1048576 / part )); (( most <= 8 )) || most=8  # (a call returns 8 files, 64 MiB together)
  if [[ " $keep " == *" checkpoint.pt "* ]] && (( $(stat -c %s "$OUT/jobs.tgz") > most * part )); then
    echo "the pack is over $most parts (what a call returns): packed again without the policies kept at marks"
    pack jobs "${drop[@]}" 'policy_*s.pt'
    if (( $(stat -c %s "$OUT/jobs.tgz") > most * part )); then
      echo "still over $most parts: packed again with those policies and without the checkpoints"
      pack jobs "${drop[@]}" checkpoint.pt
    fi
  fi
  if (( $(stat -c %s "$OUT/jobs.tgz") > part )); then
    split -b "$part" "$OUT/jobs.tgz" "$OUT/jobs.tgz.part-" && rm "$OUT/jobs.tgz"
    echo "split into $(ls "$OUT"/jobs.tgz.part-* | wc -l) parts: cat jobs.tgz.part-* > jobs.tgz"
  fi
  cat "$d/runner.log"
  [[ -e $d/.ended ]] || { echo "still running after $1 s: call jobs_wait again within the idle release"; return 3; }
}

## learning ARGS: time to a greedy success rate per training setup over seeds, jobs packed onto the GPUs
#    (scripts/bench/bench_learning.py; e.g. --seeds 0,1,2 --time-limit 300 --setup ppo "--config configs/leave_house.toml")
cmd_learning() {
  use_src
  local d; d=$(work learning)
  "$PY" scripts/bench/bench_learning.py --out "$d" "$@" 2>&1 | quiet
  pack learning checkpoint.pt
}

## archive [ARGS]: the state archive's cost (env-steps/s with it and without, ENVS [16384]) and the cells reached
#    against env-steps by random play with and without its starts (EXPLORE_ENVS [4096], STEPS [1000]), plus the
#    archive/cells curves of training runs in RUN_DIRS (scripts/bench/bench_archive.py); CONFIG
#    [configs/talk_to_hiker_archive.toml]; ARGS go to the cost run
cmd_archive() {
  use_src; local d cfg=${CONFIG:-configs/talk_to_hiker_archive.toml}; d=$(work archive)
  "$PY" scripts/bench/bench_archive.py cost --config "$cfg" --envs "${ENVS:-16384}" --device cuda --repeat 2 \
    --out "$d" "$@" 2>&1 | quiet
  # shellcheck disable=SC2086  # RUN_DIRS: several folders
  "$PY" scripts/bench/bench_archive.py explore --config "$cfg" --envs "${EXPLORE_ENVS:-4096}" --device cuda \
    --steps "${STEPS:-1000}" --out "$d" ${RUN_DIRS:+--runs $RUN_DIRS} 2>&1 | quiet
  pack archive
}

## trainspeed [ARGS]: training SPS per variant, split into env, inference and update (bench_train.py)
#    beside raw full_step of the same envs; ENVS [16384], SECONDS_EACH [45] a variant, PARTNAME; ARGS passed on
#    (--task, --config, --variant NAME FLAGS)
cmd_trainspeed() {
  use_src; local name=trainspeed${PARTNAME:-} d; d=$(work "$name")
  "$PY" scripts/bench/bench_train.py --device cuda --num-envs "${ENVS:-16384}" --seconds "${SECONDS_EACH:-45}" "$@" \
    --out "$d/train_speed.json" 2>&1 | quiet
  pack "$name"
}

## env: the RL env on CUDA: GameEnv == on the CPU, then gbxcule bench-env beside the raw backend
#    ENVS [16384]; frame stacks 1 and 4, with and without a reset every step
cmd_env() {
  use_src; local d; d=$(work env)
  "$PY" scripts/check/gpu_rl_probe.py --check-only 2>&1 | quiet | tee "$d/check.txt"
  "$PY" -m gbxcule bench-env --device cuda --envs "${ENVS:-16384}" --stack-k 1,4 --info-mode stats --steps 10 \
    --warmup 3 --max-mem-delta 0 --out "$d/bench_env_${ENVS:-16384}.json" 2>&1 | quiet | tail -12
  pack env
}

## adapters: env-steps/s through Gymnasium, PufferLib and SB3, and PyBoy through them (bench_adapters.py)
#    ENVS [1024,16384], STEPS [100]; PyBoy on every host core
cmd_adapters() {
  use_src; local d; d=$(work adapters)
  "$PY" scripts/bench/bench_adapters.py --device cuda --envs "${ENVS:-1024,16384}" --steps "${STEPS:-100}" --warmup 10 \
    --pyboy-workers "$(nproc)" --pyboy-steps 100 --out "$d/adapters.json" 2>&1 | quiet | tail -25
  pack adapters
}

## reset: masked-reset cost on CUDA per chunk size: empty, 1% and full mask, checked (bench_reset.py)
#    ENVS [16384] envs of OVERWORLD
cmd_reset() {
  use_src; local d; d=$(work reset)
  "$PY" scripts/bench/bench_reset.py "$d/reset_cuda.json" --device cuda --envs "${ENVS:-16384}" --check 2>&1 | quiet
  pack reset
}

## breakdown: where a step's device time goes, launch by launch (scripts/profile/profile_step.py --breakdown)
#    ROM [OVERWORLD], STATE (a start state), ENVS [65536], WARMUP [6] steps, then STEPS [4] timed
cmd_breakdown() {
  use_src; local d; d=$(work breakdown)
  local state=(); [[ -n ${STATE:-} ]] && state=(--state "$STATE")
  "$PY" scripts/profile/profile_step.py --rom "${ROM:-OVERWORLD}" "${state[@]}" --envs "${ENVS:-65536}" \
    --steps "${WARMUP:-6}" --breakdown "${STEPS:-4}" 2>&1 | quiet | tee "$d/breakdown.txt"
  pack breakdown
}

## ncu: Nsight Compute on one step-kernel launch, by Warp function and source line (ncu_lines.py)
#    GAMES_NCU ["OVERWORLD"] (slugs of $GAMES or built-in ROM names), SKIPS ["130"] (130: a lean launch
#    mid-step; 143: the step's drawn frame), ENVS [65536], ACTIONS [seeded_random; shared_random: the
#    lockstep twin], LOOP [auto]
cmd_ncu() {
  use_src; local d; d=$(work ncu) acts=${ACTIONS:-seeded_random} loop=${LOOP:-auto}
  command -v ncu > /dev/null || die "ncu (Nsight Compute) is not on PATH"
  for slug in ${GAMES_NCU:-OVERWORLD}; do
    local args=(--rom "$GAMES/$slug.gb" --state "$GAMES/states/$slug.state" --codec pokemonred_puffer_v1)
    [[ -f $GAMES/$slug.gb ]] || args=(--rom "$slug")
    args+=(--lineinfo --actions "$acts" --loop "$loop")
    "$PY" scripts/profile/profile_step.py "${args[@]}" --envs 64 --steps 1 > /dev/null 2>&1  # build the kernels first
    for skip in ${SKIPS:-130}; do
      local name=${slug}_$skip$([[ $acts == seeded_random ]] || echo "_$acts")$([[ $loop == auto ]] || echo "_$loop")
      ncu --clock-control none -k regex:step_kernel --launch-skip "$skip" --launch-count 1 --set full -f \
        -o "$d/ncu_$name" "$PY" scripts/profile/profile_step.py "${args[@]}" --envs "${ENVS:-65536}" \
        --steps $((skip / 24 + 2)) 2>&1 | tail -3
      ncu --import "$d/ncu_$name.ncu-rep" --page details > "$d/ncu_${name}_details.txt"
      ncu --import "$d/ncu_$name.ncu-rep" --page source --csv --print-source sass > "$d/ncu_${name}_sass.csv"
      "$PY" scripts/profile/ncu_summary.py "$d/ncu_${name}_sass.csv" | tee "$d/ncu_${name}_summary.txt"
      # the profiled kernel's cubin: by its name, built with line info, with as many instructions as profiled
      # (the cache may hold the same kernel built without line info, or for another block size)
      local kname rows
      kname=$(head -1 "$d/ncu_${name}_sass.csv" | cut -d'"' -f4)
      rows=$(($(wc -l < "$d/ncu_${name}_sass.csv") - 2))
      for cubin in $(grep -l "$kname" $(find "$GBXCULE_CACHE_DIR/warp" -name "*.cubin")); do
        nvdisasm -g -c "$cubin" > "$d/ncu_${name}_lines.txt"
        grep -q '//## File' "$d/ncu_${name}_lines.txt" && \
          [[ $(grep -cE '^\s+/\*[0-9a-f]{4,}\*/' "$d/ncu_${name}_lines.txt") == "$rows" ]] && break
      done
      "$PY" scripts/profile/ncu_lines.py "$d/ncu_${name}_sass.csv" "$d/ncu_${name}_lines.txt" --py --top 30 \
        --src "$GBXCULE_CACHE_DIR/kernels" "$SRC/gbxcule/kernels" --json "$d/ncu_${name}_lines.json" \
        | tee "$d/ncu_${name}_lines_summary.txt"
      rm -f "$d/ncu_$name.ncu-rep"
    done
  done
  xz -9 "$d"/*.csv "$d"/*_lines.txt 2>/dev/null
  pack ncu
}

## ncu_cost: Nsight Compute counters of the step kernel in bench_archive.py cost's variants, over COUNT launches
#    after WARMUP steps (past a step limit: spread clocks in their steady state): time, warp and thread
#    instructions (threads a warp instruction: 32 when no lane diverges), divergent branches, memory
#    CONFIG [configs/reach_lab_archive.toml], ENVS [16384], VARIANTS ["off spread"], WARMUP [300], COUNT [240],
#    BACKEND [""] (bench_archive.py --backend, e.g. sort_parts=1,stream_groups=1: the sort tuner off, so both
#    variants launch alike; with it on each may settle on other launches)
cmd_ncu_cost() {
  use_src; local d; d=$(work ncu_cost)
  command -v ncu > /dev/null || die "ncu (Nsight Compute) is not on PATH"
  local m=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__thread_inst_executed.sum,launch__grid_size
  m+=,launch__block_size
  m+=,smsp__sass_branch_targets.sum,smsp__sass_branch_targets_threads_divergent.sum,dram__bytes_read.sum
  m+=,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,l1tex__t_sector_hit_rate.pct
  m+=,sm__warps_active.avg.pct_of_peak_sustained_active
  for v in ${VARIANTS:-off spread}; do
    ncu --clock-control none --nvtx --nvtx-include "gbxcule_timed/" -k regex:step_kernel --launch-count "${COUNT:-240}" \
      --metrics "$m" -f -o "$d/ncu_$v" "$PY" scripts/bench/bench_archive.py cost --config "${CONFIG:-configs/reach_lab_archive.toml}" \
      --envs "${ENVS:-16384}" --device cuda --variants "$v" --repeat 1 --warmup "${WARMUP:-300}" ${BACKEND:+--backend "$BACKEND"} --out "$d/$v" 2>&1 | quiet | tail -4
    ncu --import "$d/ncu_$v.ncu-rep" --page raw --csv > "$d/ncu_$v.csv" && rm -f "$d/ncu_$v.ncu-rep"
  done
  "$PY" - "$d" ${VARIANTS:-off spread} <<'PY' | tee "$d/ncu_cost.txt"
import csv, json, pathlib, sys
d, names = pathlib.Path(sys.argv[1]), sys.argv[2:]
SCALE = {"ns": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3, "second": 1e3,  # to ms
         "byte": 1e-9, "Kbyte": 1e-6, "Mbyte": 1e-3, "Gbyte": 1.0, "Tbyte": 1e3}  # to GB
out = {}
for v in names:
    head, units, *rows = csv.reader((d / f"ncu_{v}.csv").open())
    col = {name: i for i, name in enumerate(head)}
    def vals(k):
        i = col[k]
        return [float(r[i].replace(",", "") or 0) * SCALE.get(units[i], 1.0) for r in rows]
    s = lambda k: sum(vals(k))
    mean = lambda k: s(k) / max(len(rows), 1)
    threads = sum(g * b for g, b in zip(vals("launch__grid_size"), vals("launch__block_size")))
    out[v] = {"launches": len(rows), "ms": s("gpu__time_duration.sum"), "threads": threads,
              "warp_inst": s("smsp__inst_executed.sum"), "thread_inst": s("smsp__thread_inst_executed.sum"),
              "divergent_branch_share": s("smsp__sass_branch_targets_threads_divergent.sum")
              / max(s("smsp__sass_branch_targets.sum"), 1),
              "dram_gb": s("dram__bytes_read.sum") + s("dram__bytes_write.sum"),
              "l2_hit_pct": mean("lts__t_sector_hit_rate.pct"), "l1_hit_pct": mean("l1tex__t_sector_hit_rate.pct"),
              "warps_active_pct": mean("sm__warps_active.avg.pct_of_peak_sustained_active")}
    r = out[v]
    r["threads_per_warp_inst"] = r["thread_inst"] / max(r["warp_inst"], 1)
    r["ns_per_thread"] = 1e6 * r["ms"] / max(threads, 1)  # a launch's time per env it ran (one launch: 1 frame or a part)
    r["thread_inst_per_thread"] = r["thread_inst"] / max(threads, 1)
(d / "ncu_cost.json").write_text(json.dumps(out, indent=1) + "\n")
print(f"{'variant':9s} {'launches':>8s} {'envs/launch':>11s} {'ms':>8s} {'ns/env':>7s} {'inst/env':>9s} "
      f"{'thr/inst':>8s} {'div br':>7s} {'DRAM GB':>8s} {'L2 hit':>7s} {'L1 hit':>7s} {'warps':>6s}")
for v, r in out.items():
    print(f"{v:9s} {r['launches']:8d} {r['threads'] / max(r['launches'], 1):11,.0f} {r['ms']:8.1f} "
          f"{r['ns_per_thread']:7.1f} {r['thread_inst_per_thread']:9,.0f} {r['threads_per_warp_inst']:8.2f} "
          f"{100 * r['divergent_branch_share']:6.1f}% {r['dram_gb']:8.2f} {r['l2_hit_pct']:6.1f}% "
          f"{r['l1_hit_pct']:6.1f}% {r['warps_active_pct']:5.1f}%")
print("(ncu runs launches one at a time: stream groups do not overlap here; thr/inst: threads a warp instruction, "
      "32 at most; ns/env and inst/env: per env a launch ran)")
PY
  xz -9 "$d"/*.csv 2>/dev/null
  pack ncu_cost
}

## kernel_report: registers, stack, spills and SASS size of each step-kernel variant for sm_90 (kernel_report.py)
#    stage full_step, lean and drawn, nested and flat loop; Triton's ptxas and nvdisasm
cmd_kernel_report() {
  use_src
  local d bin; d=$(work kernel_report)
  bin=$("$PY" -c "import os, triton; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin'))" \
        2>/dev/null) || bin=
  local tools=(); [[ -x $bin/ptxas ]] && tools=(--ptxas "$bin/ptxas" --nvdisasm "$bin/nvdisasm")
  for loop in nested flat; do
    for lean in "" --lean; do
      "$PY" scripts/profile/kernel_report.py --stage full_step $lean --loop "$loop" "${tools[@]}" 2>&1 | quiet \
        | tee -a "$d/kernel_report.txt"
    done
  done
  pack kernel_report
}

## resume_check: do stopped and resumed CUDA training runs match straight ones bit for bit (gpu_resume_check.py)
#    SETUPS (default all: ppo,a2c,pqn,dqn,archive)
cmd_resume_check() {
  use_src; local d; d=$(work resume_check)
  "$PY" scripts/check/gpu_resume_check.py --device cuda ${SETUPS:+--setups "$SETUPS"} --out "$d/resume_check.json" 2>&1 | quiet | tail -9
  pack resume_check
}

## fuzz: random and instruction-biased ROMs on CUDA, invariants checked (scripts/check/fuzz_gpu.py)
#    ROMS [64] x 256 envs x 20 steps; MEMCHECK=1: 8 x 64 x 4 under compute-sanitizer --tool memcheck
cmd_fuzz() {
  use_src; local d; d=$(work fuzz)
  if [[ ${MEMCHECK:-0} == 1 ]]; then
    OUT=$d compute-sanitizer --tool memcheck "$PY" scripts/check/fuzz_gpu.py --device cuda --roms 8 --envs 64 --steps 4 \
      2>&1 | quiet | tee "$d/memcheck_log.txt" | tail -8
  else
    OUT=$d "$PY" scripts/check/fuzz_gpu.py --device cuda --roms "${ROMS:-64}" 2>&1 | quiet | tail -8
  fi
  pack fuzz
}

# --- dispatch --------------------------------------------------------------------------------------------------

sub=${1:-help}; shift || true
[[ $sub == -h || $sub == --help ]] && sub=help
declare -F "cmd_$sub" > /dev/null || { cmd_help >&2; die "unknown subcommand '$sub'"; }
"cmd_$sub" "$@"
