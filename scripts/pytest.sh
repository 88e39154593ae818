#!/usr/bin/env bash
# Runs the Python test suite (tests/python) against the freshly built library.
#
#   scripts/pytest.sh [pytest arguments...]
#
# Library: $BUILD/libxent.so (BUILD defaults to build), through XENT_LIBRARY;
# the package from python/ through PYTHONPATH.
# Python: python3 (or $PYTHON) when it has numpy and pytest already (machines
# without network come with them); otherwise a virtual environment .venv is
# made (seeing the system's packages, so an installed torch is used) and numpy
# and pytest are installed into it, once.
# torch is optional: its tests skip, with the reason, when it is missing, and
# the GPU tests skip without a CUDA device.
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

PY="${PYTHON:-python3}"
if ! "$PY" -c "import numpy, pytest" >/dev/null 2>&1; then
  if [ ! -x .venv/bin/python ]; then
    echo "pytest.sh: $PY lacks numpy or pytest; making .venv"
    "$PY" -m venv --system-site-packages .venv
  fi
  PY=.venv/bin/python
  if ! "$PY" -c "import numpy, pytest" >/dev/null 2>&1; then
    echo "pytest.sh: installing numpy and pytest into .venv"
    "$PY" -m pip install -q numpy pytest
  fi
fi

if "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "pytest.sh: $("$PY" -c 'import sys, torch; print(sys.executable, "torch", torch.__version__)')"
else
  echo "pytest.sh: $("$PY" -c 'import sys; print(sys.executable)') without torch: torch tests skip"
fi

exec "$PY" -m pytest -p no:cacheprovider -rs tests/python "$@"
