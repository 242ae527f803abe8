#!/usr/bin/env bash
# gbxcule's one entry point for a fresh machine that has only Python (>= 3.11):
#   bash scripts/dev.sh demo    set up .venv and run the main job: train an agent on the built-in game and show it
#   bash scripts/dev.sh test    set up .venv with the dev tools and run the test suite (what CI runs)
#   bash scripts/dev.sh setup   set up .venv only
# Environment: PYTHON (interpreter, default python3), GBXCULE_VENV (default .venv), PYTEST_ARGS (extra args).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${GBXCULE_VENV:-.venv}

setup() {
  local extras=$1
  if [[ ! -x $VENV/bin/python ]]; then
    if ! "$PY" -m venv "$VENV"; then
      echo "error: '$PY -m venv' failed; on Debian/Ubuntu install it with: apt-get install python3-venv" >&2
      exit 1
    fi
  fi
  # Reinstall only when the package metadata or the wanted extras changed.
  # torch first, pinned: a bare `torch` requirement would pull the newest CUDA build (GBs). 2.13.0 is the
  # version the project is tested with; override with GBXCULE_TORCH (e.g. "torch==2.11.0").
  if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${GBXCULE_TORCH:-torch==2.13.0}"
  fi
  local stamp=$VENV/.gbxcule-installed want
  want="$(cat pyproject.toml | sha1sum | cut -c1-40) $extras"
  if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$extras]"
    echo "$want" > "$stamp"
  fi
}

case ${1:-} in
  setup) setup dev,rl ;;
  test)
    setup dev,rl
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pytest -n "${PYTEST_WORKERS:-auto}" -q ${PYTEST_ARGS:-} ;;
  demo)  # the main job: train an agent on the built-in game and show it (docs/training.md)
    setup dev,rl
    mkdir -p out
    "$VENV/bin/gbxcule" roms build --out out/roms > /dev/null
    stamp=$(date +%Y%m%d-%H%M%S)
    if "$VENV/bin/python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
      # A GPU: PPO from pixels on leave_house until it is solved (configs/leave_house.toml: about 2.5 minutes of
      # training on an H100), then the curves and a GIF of the trained agent beside a random one.
      run=out/demo_run_$stamp
      "$VENV/bin/gbxcule" train --config configs/leave_house.toml --device cuda --run-dir "$run" --eval-episodes 0
      "$VENV/bin/gbxcule" plot "$run" --out "$run"
      "$VENV/bin/gbxcule" eval "$run" --device cuda --episodes 64 --gif out/demo_agent.gif --gif-envs 16 --random
      echo "learning curves: $run/*.png; the trained agent: out/demo_agent.gif; a random one: out/demo_agent_random.gif"
    else
      # No GPU: a short training smoke on the CPU device (the same trainer, tiny), then the policy trained on
      # an H100 (pretrained/leave_house, its config and log beside it) against a random one.
      "$VENV/bin/gbxcule" train --task leave_house --device cpu --num-envs 8 --rollout-steps 8 --total-steps 256 \
        --model small --run-dir "out/smoke_run_$stamp" --eval-episodes 0 --no-progress
      "$VENV/bin/gbxcule" eval pretrained/leave_house/policy.pt --device cpu --episodes 16 --gif out/demo_agent.gif \
        --gif-envs 16 --random
      echo "the pretrained agent: out/demo_agent.gif; a random one: out/demo_agent_random.gif"
    fi ;;
  *) sed -n '2,7p' "$0" >&2; exit 2 ;;
esac
