#!/usr/bin/env bash
# Runs the Python test suite (tests/python) against the freshly built library.
#
#   scripts/pytest.sh [pytest arguments...]
#
# Library: $BUILD/libxent.so (BUILD defaults to build), through XENT_LIBRARY;
# the package from python/ through PYTHONPATH. Python: scripts/pyenv.sh (the
# given PYTHON, a python3 that has everything, or .venv filled once). The GPU
# tests skip without a CUDA device, the TRL test without trl.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD="${BUILD:-build}"
LIB="$BUILD/libxent.so"
if [ ! -e "$LIB" ]; then
  echo "pytest.sh: $LIB not found; build the library first (make build)" >&2
  exit 1
fi
case "$LIB" in
  /*) XENT_LIBRARY="$LIB" ;;
  *) XENT_LIBRARY="$PWD/$LIB" ;;
esac
export XENT_LIBRARY
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ folders in the source tree

PY=$(scripts/pyenv.sh | tail -1)
echo "pytest.sh: $("$PY" -c 'import sys, torch; print(sys.executable, "torch", torch.__version__)')"
exec "$PY" -m pytest -p no:cacheprovider -rs tests/python "$@"
