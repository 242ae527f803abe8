#!/usr/bin/env bash
# gbxcule's one entry point for a fresh machine that has only Python (>= 3.11):
#   bash scripts/dev.sh demo    set up .venv and run the main job on the built-in default ROM
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
  demo)
    setup dev,rl
    mkdir -p out
    "$VENV/bin/gbxcule" roms build
    "$VENV/bin/gbxcule" play demo --backend warp_vec_cpu --envs 64 --steps 60 --record out/demo.gif \
      --mosaic out/demo_mosaic.png
    echo "a random agent's walk: out/demo.gif; all 64 envs' last screens: out/demo_mosaic.png" ;;
  *) sed -n '2,7p' "$0" >&2; exit 2 ;;
esac
