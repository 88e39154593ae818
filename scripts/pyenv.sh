#!/usr/bin/env bash
# The Python the tests run with, ready, printed on the last line of stdout.
#
#   PYTHON=/path/to/python scripts/pyenv.sh   # use that one: it must have
#                                             # python/requirements-test.txt
#   scripts/pyenv.sh                          # python3 when it already has
#                                             # them (machines without network
#                                             # come with them); else .venv, made
#                                             # and filled once from the index
#
# A PYTHON given that lacks a package fails here, with what is missing: the
# suite never falls back to another interpreter behind the caller's back.
set -euo pipefail
cd "$(dirname "$0")/.."
req=python/requirements-test.txt
mods="numpy pytest torch transformers accelerate peft"

missing() { # the modules of $mods the interpreter $1 cannot import
  "$1" - "$mods" <<'PY' 2>/dev/null || echo "$mods"
import importlib.util, sys
print(" ".join(m for m in sys.argv[1].split() if importlib.util.find_spec(m) is None))
PY
}

if [ -n "${PYTHON:-}" ]; then
  m=$(missing "$PYTHON")
  if [ -n "$m" ]; then
    echo "pyenv: PYTHON=$PYTHON lacks: $m (pip install -r $req, or unset PYTHON)" >&2
    exit 1
  fi
  command -v "$PYTHON"
  exit 0
fi
if [ -z "$(missing python3)" ]; then
  command -v python3
  exit 0
fi
if [ ! -x .venv/bin/python ]; then
  echo "pyenv: making .venv" >&2
  python3 -m venv .venv >&2 || { echo "pyenv: python3 -m venv failed (python3-venv?)" >&2; exit 1; }
fi
stamp=.venv/.xent-requirements
if ! cmp -s "$req" "$stamp" || [ -n "$(missing .venv/bin/python)" ]; then
  echo "pyenv: installing $req into .venv (torch and transformers: a few minutes, once)" >&2
  .venv/bin/python -m pip install -q --upgrade pip >&2 || true
  .venv/bin/python -m pip install -q -r "$req" >&2
  cp "$req" "$stamp"
fi
echo "$PWD/.venv/bin/python"
