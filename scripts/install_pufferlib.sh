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
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${GBXCULE_VENV:-.venv}
if [[ ! -x $VENV/bin/python ]]; then
  echo "error: no venv at $VENV; run 'bash scripts/dev.sh setup' first" >&2
  exit 1
fi
PY=$(cd "$VENV" && pwd)/bin/python

SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
PTH=$SITE/_gbxcule_pufferlib_build.pth
STUB=$(mktemp -d)
cleanup() { rm -f "$PTH"; rm -rf "$STUB"; }
trap cleanup EXIT

mkdir -p "$STUB/torch/utils"
touch "$STUB/torch/__init__.py" "$STUB/torch/utils/__init__.py"
cat > "$STUB/torch/utils/cpp_extension.py" <<'EOF'
"""Build-time stand-in for torch.utils.cpp_extension: pufferlib's setup.py imports it even with NO_TRAIN=1."""
from setuptools.command.build_ext import build_ext as BuildExtension
CppExtension = CUDAExtension = None
CUDA_HOME = None
EOF

# wheel: setuptools < 70.1 needs it to build a wheel without build isolation. gymnasium stays 1.x: the
# gbxcule adapters need it, and pufferlib.vector runs with it.
"$PY" -m pip install --disable-pip-version-check wheel "gymnasium>=1.0" psutil rich
if "$PY" -m pip show -q gym 2>/dev/null; then
  echo "removing gym from $VENV: SB3 would import it and print its banner; pufferlib does not need it"
  "$PY" -m pip uninstall --disable-pip-version-check -y gym gym_notices
fi
echo 'import builtins; builtins.c_extension_paths = []' > "$PTH"
NO_OCEAN=1 NO_TRAIN=1 PYTHONPATH="$STUB" \
  "$PY" -m pip install --disable-pip-version-check --no-build-isolation --no-deps "pufferlib==3.0.0"

# Import from a scratch directory: importing pufferlib symlinks `resources` into the working directory.
(cd "$STUB" && "$PY" -c 'import pufferlib.vector; print("pufferlib", pufferlib.__version__, "ok")')
