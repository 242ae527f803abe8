#!/usr/bin/env bash
# Fourteenth visit. Run after the setup calls (BENCHMARKS.md); results under $OUT.
#   check: devcheck (built-in ROMs) and devcheck_games.py (the game set) with the flat kernel from the first step
#   ncu:   Nsight Compute on a lean launch of GAMES_NCU in both instruction loops (gpu_visit.sh ncu_games)
set -uo pipefail
export PYTHONPATH=/root/gpu:$PWD/src PYTHONUNBUFFERED=1 GBXCULE_CACHE_DIR=${GBXCULE_CACHE_DIR:-/tmp/gbxc}
games=/root/gpu/games
all=$(ls $games/*.gb | xargs -n1 basename | sed 's/\.gb$//' | paste -sd,)
case ${1:-} in
  check)
    for loop in ${LOOPS:-flat}; do
      python3 -m gbxcule devcheck --loop $loop --envs 64 --steps 3 --seeds 0,1 --json > "$OUT/devcheck_$loop.json"
      echo "devcheck --loop $loop: rc $?"; tail -c 400 "$OUT/devcheck_$loop.json"; echo
      python3 scripts/devcheck_games.py --games $games --only "${ONLY:-$all}" --envs 64 --steps "${STEPS:-4}" \
        --loop $loop 2>&1 | grep -v "^Module\|^Warp" | tee "$OUT/devcheck_games_$loop.txt" | tail -20
      echo "devcheck_games --loop $loop: rc ${PIPESTATUS[0]}"
    done ;;
  ncu)
    for loop in ${LOOPS:-nested flat}; do
      LOOP=$loop GAMES=$games GAMES_NCU=${GAMES_NCU:-corrib75} bash scripts/gpu_visit.sh ncu_games 2>&1 | tail -45
    done ;;
esac
