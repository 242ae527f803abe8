#!/usr/bin/env bash
# Install PufferLib 3.0.0 (vectorisation only) into gbxcule's venv, for the pyboy_puffer_vec baseline.
#   bash scripts/install_pufferlib.sh        Environment: GBXCULE_VENV (default .venv)
# PufferLib 3.0.0 is published as an sdist only and its setup.py cannot build as published without a GPU
# training stack and internet access to raylib/box2d. We build it with NO_OCEAN=1 NO_TRAIN=1 (pure Python:
# no C environments, no torch extension), working around two setup.py problems for the build only:
#   - with NO_OCEAN=1 it still reads `c_extension_paths`, defined only in the ocean branch: a temporary
#     .pth file in site-packages defines it as an empty list (builtins) while pip builds;
#   - it imports torch.utils.cpp_extension at the top even with NO_TRAIN=1: a stub module on PYTHONPATH
#     stands in (nothing of torch is used when NO_TRAIN=1), so torch is not needed.
# Both are removed when the script exits. PufferLib's own dependency list pins numpy<2 and pulls in torch,
# wandb and more, so it is installed with --no-deps and the few run-time dependencies of pufferlib.vector
# are installed explicitly (see docs/baselines.md). No gym: pufferlib/spaces.py imports it only to name its
# space classes beside Gymnasium's, and gbxcule gives that import a stand-in when gym is missing
# (backends/pyboy_puffer_vec.py). A real gym (0.23.1 and its gym_notices) would be imported by every later
# `import stable_baselines3` and print gym's "unmaintained" banner; a gym an older version of this script
# installed is removed from the venv.
# The install is checked the way gbxcule imports pufferlib (pyboy_puffer_vec.import_pufferlib_vector: from a
# scratch folder, with gym's stand-in; a bare `import pufferlib.vector` fails for want of gym). The script ends
# with one line: "pufferlib 3.0.0 ok ..." and exit 0, or "error: ..." and exit 1 (a failed pip step's output is
# kept in the log file that line names).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${GBXCULE_VENV:-.venv}
if [[ ! -x $VENV/bin/python ]]; then
  echo "error: no venv at $VENV; run 'bash scripts/dev.sh setup' first" >&2
  exit 1
fi
PY=$(cd "$VENV" && pwd)/bin/python

SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
PTH=$SITE/_gbxcule_pufferlib_build.pth
STUB=$(mktemp -d)
LOG=$(mktemp "${TMPDIR:-/tmp}/install_pufferlib.XXXXXX")
cleanup() { rm -f "$PTH"; rm -rf "$STUB"; }
trap cleanup EXIT

# step WHAT COMMAND...: the command's output goes to $LOG; a failure is one line naming WHAT and the log
step() {
  local what=$1
  shift
  if ! "$@" >>"$LOG" 2>&1; then
    echo "error: $what failed (its output: $LOG)" >&2
    exit 1
  fi
}

mkdir -p "$STUB/torch/utils"
touch "$STUB/torch/__init__.py" "$STUB/torch/utils/__init__.py"
cat > "$STUB/torch/utils/cpp_extension.py" <<'PYEOF'
"""Build-time stand-in for torch.utils.cpp_extension: pufferlib's setup.py imports it even with NO_TRAIN=1."""
from setuptools.command.build_ext import build_ext as BuildExtension
CppExtension = CUDAExtension = None
CUDA_HOME = None
PYEOF

echo "installing pufferlib 3.0.0 (vectorisation only) into $VENV ..."
# wheel: setuptools < 70.1 needs it to build a wheel without build isolation. gymnasium stays 1.x: the
# gbxcule adapters need it, and pufferlib.vector runs with it.
step "installing pufferlib's run-time dependencies" \
  "$PY" -m pip install --disable-pip-version-check wheel "gymnasium>=1.0" psutil rich
if "$PY" -m pip show -q gym 2>/dev/null; then
  echo "removing gym from $VENV: SB3 would import it and print its banner; pufferlib does not need it"
  step "removing gym" "$PY" -m pip uninstall --disable-pip-version-check -y gym gym_notices
fi
echo 'import builtins; builtins.c_extension_paths = []' > "$PTH"
step "building pufferlib 3.0.0" env NO_OCEAN=1 NO_TRAIN=1 PYTHONPATH="$STUB" \
  "$PY" -m pip install --disable-pip-version-check --no-build-isolation --no-deps "pufferlib==3.0.0"
rm -f "$PTH"

# The check, with this checkout's gbxcule first on the path.
PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$ROOT/scripts/check_pufferlib.py" --where "$VENV"
rm -f "$LOG"
