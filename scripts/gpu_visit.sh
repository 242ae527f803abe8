#!/usr/bin/env bash
# One GPU visit's work (see DEVELOPERS.md "device"): run from the repository root on the GPU machine after
# .gpu/install.sh. Usage: bash scripts/gpu_visit.sh PART   (PART: puffer | check | cuda | sweep | cpu | ncu |
#   ncu_games: Nsight Compute with line info on launches SKIPS of each game in GAMES_NCU, from GAMES/states)
set -uo pipefail
export PYTHONPATH=/root/gpu:/root/gpu/puffer/site:$PWD/src GBXCULE_CACHE_DIR=/tmp/gbxc
OUT=${OUT:-out}
mkdir -p "$OUT"
case $1 in
  puffer)  # PufferLib (pure Python here) and psutil for the baseline
    mkdir -p /root/gpu/puffer && tar -xJf .gpu/puffer.tar.xz -C /root/gpu/puffer
    python3 -m pip install -q --no-index --no-deps --target /root/gpu/puffer/site .gpu/puffer_wheels/*.whl ;;
  check)
    python3 -m gbxcule devcheck --envs 64 --steps 3 --seeds 0,1 --json > "$OUT/devcheck.json"; echo "devcheck rc=$?"
    python3 -c "import json; d=json.load(open('$OUT/devcheck.json')); print(d['ok'], sum(r['ok'] for r in d['results']), len(d['results']))"
    python3 scripts/check_wide_ram.py --envs 65536 | tee "$OUT/check_wide_ram.txt" ;;
  cuda)  # ROMS and ENVS override the sweep
    for rom in ${ROMS:-JOY_DIVERGE_PERSIST OVERWORLD}; do
      envs=${ENVS:-1024,4096,16384,65536}
      [ "$rom" = OVERWORLD ] && envs=${ENVS:-1024,4096,16384,32768,40960,65536}
      for stage in emulate_only full_step; do
        python3 -m gbxcule bench --rom $rom --backends warp_vec_cuda --stage $stage --envs $envs \
          --steps 3 --warmup 5 --out "$OUT/cuda_${stage}_${rom}.json" | tail -6
      done
    done ;;
  sweep)  # step variants, full_step: VARIANTS holds NAME=FLAG,FLAG,... words; results packed in one file
    mkdir -p sweep
    for rom in ${ROMS:-OVERWORLD}; do
      for v in $VARIANTS; do
        flags=${v#*=}
        python3 -m gbxcule bench --rom $rom --backends warp_vec_cuda --stage full_step --envs ${ENVS:-32768} \
          --steps ${STEPS:-3} --warmup ${WARMUP:-5} ${flags//,/ } --out "sweep/${rom}_${v%%=*}.json" | tail -3
      done
    done
    tar -czf "$OUT/sweep_${SWEEP:-0}.tgz" sweep ;;
  ncu)  # Nsight Compute on one lean step-kernel launch mid-step (scripts/profile_step.py); ROMS, ENVS
    for rom in ${ROMS:-OVERWORLD}; do
      python3 scripts/profile_step.py --rom $rom --envs 64 --steps 1 > /dev/null  # build the kernels first
      ncu --clock-control none -k regex:step_kernel --launch-skip 130 --launch-count 1 --set full -f \
        -o "$OUT/ncu_$rom" python3 scripts/profile_step.py --rom $rom --envs ${ENVS:-65536} --steps $((skip / 24 + 2)) | tail -3
      ncu --import "$OUT/ncu_$rom.ncu-rep" --page details > "$OUT/ncu_${rom}_details.txt"
      ncu --import "$OUT/ncu_$rom.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_${rom}_sass.csv"
    done ;;
  ncu_games)  # GAMES (default /root/gpu/games) holds <slug>.gb and states/<slug>.state; GAMES_NCU slugs (a
    # built-in ROM name such as OVERWORLD runs from power-on); SKIPS launches to profile (130: a lean launch
    # mid-step; 143: the step's drawn last frame); ENVS; ACTIONS (default seeded_random; shared_random: lockstep);
    # LOOP (auto | nested | flat: the instruction loop)
    games=${GAMES:-/root/gpu/games}
    acts=${ACTIONS:-seeded_random}
    for slug in ${GAMES_NCU:-geometrix shock-lobster}; do
      args="--rom $games/$slug.gb --state $games/states/$slug.state --codec pokemonred_puffer_v1 --lineinfo"
      args="$args --actions $acts --loop ${LOOP:-auto}"
      [[ -f $games/$slug.gb ]] || args="--rom $slug --lineinfo"
      python3 scripts/profile_step.py $args --envs 64 --steps 1 > /dev/null  # build the kernels first
      for skip in ${SKIPS:-130}; do
        name=$slug$([[ ${SKIPS:-130} == 130 ]] || echo "_$skip")$([[ $acts == seeded_random ]] || echo "_$acts")
        name=$name$([[ ${LOOP:-auto} == auto ]] || echo "_$LOOP")
        ncu --clock-control none -k regex:step_kernel --launch-skip $skip --launch-count 1 --set full \
          -f -o "$OUT/ncu_$name" python3 scripts/profile_step.py $args --envs ${ENVS:-65536} --steps $((skip / 24 + 2)) | tail -3
        ncu --import "$OUT/ncu_$name.ncu-rep" --page details > "$OUT/ncu_${name}_details.txt"
        ncu --import "$OUT/ncu_$name.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_${name}_sass.csv"
        python3 scripts/ncu_summary.py "$OUT/ncu_${name}_sass.csv" | tee "$OUT/ncu_${name}_summary.txt"
        # the profiled kernel's cubin: by its name, built with line info, with as many instructions as profiled
        # (the cache may hold the same kernel built without line info, or for another block size)
        kname=$(head -1 "$OUT/ncu_${name}_sass.csv" | cut -d'"' -f4)
        rows=$(($(wc -l < "$OUT/ncu_${name}_sass.csv") - 2))
        for cubin in $(grep -l "$kname" $(find "$GBXCULE_CACHE_DIR/warp" -name "*.cubin")); do
          nvdisasm -g -c "$cubin" > "$OUT/ncu_${name}_lines.txt"
          grep -q '//## File' "$OUT/ncu_${name}_lines.txt" && \
            [[ $(grep -cE '^\s+/\*[0-9a-f]{4,}\*/' "$OUT/ncu_${name}_lines.txt") == "$rows" ]] && break
        done
        python3 scripts/ncu_lines.py "$OUT/ncu_${name}_sass.csv" "$OUT/ncu_${name}_lines.txt" --py --top 30 \
          --src "$GBXCULE_CACHE_DIR/kernels" src/gbxcule/kernels --json "$OUT/ncu_${name}_lines.json" \
          | tee "$OUT/ncu_${name}_lines_summary.txt"
        rm -f "$OUT/ncu_$name.ncu-rep"
      done
    done
    xz -9 "$OUT"/*.csv "$OUT"/*_lines.txt; ls -la "$OUT" ;;
  cpu)
    nproc
    for rom in ${ROMS:-JOY_DIVERGE_PERSIST OVERWORLD}; do
      python3 -m gbxcule bench --rom $rom --backends pyboy_vec_mp,pyboy_puffer_vec --envs 16,64,128 --steps 4 \
        --warmup 5 --out "$OUT/cpu_${rom}.json" | tail -8
    done ;;
esac
