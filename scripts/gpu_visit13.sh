#!/usr/bin/env bash
# Thirteenth visit: the flat instruction loop (kernels/gen.py _FRAME_LOOPS), and the event-to-event
# timer, on games spread apart (scripts/bench_spread.py). Env: GAMES (slugs), VARIANTS, ENVS, SRC (a gbxcule
# source folder to time instead of the working tree's, e.g. an earlier commit's src), TAG (artifact name).
# Run after the setup calls (BENCHMARKS.md); results under $OUT.
set -uo pipefail
export PYTHONPATH=/root/gpu:${SRC:-$PWD/src} PYTHONUNBUFFERED=1 GBXCULE_CACHE_DIR=/tmp/gbxc_${TAG:-new}
python3 scripts/bench_spread.py --games /root/gpu/games --only "${GAMES:-tobutobugirl,corrib75,carazu,airaki}" \
  --envs "${ENVS:-262144}" --spread 24 --steps "${STEPS:-3}" \
  --variants "${VARIANTS:-path/1,path/1@flat}" \
  --out "$OUT/spread_${TAG:-new}.json" 2>&1 | grep -v "^Module\|^Warp"
