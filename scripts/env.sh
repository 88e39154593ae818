# Sourced by the Makefile: points CMake at dependencies unpacked into .deps/root.
XENT_CMAKE_PREFIX=""
if [ -d .deps/root/usr ]; then
  XENT_CMAKE_PREFIX="-DCMAKE_PREFIX_PATH=$PWD/.deps/root/usr"
fi
# The Python whose jax gives libxent_jax its XLA FFI headers: PYTHON when
# given, else the test environment .venv when it is there (CMake looks for
# python3 otherwise).
if [ -n "${PYTHON:-}" ]; then
  XENT_CMAKE_PREFIX="$XENT_CMAKE_PREFIX -DXENT_JAX_PYTHON=$(command -v "$PYTHON")"
elif [ -x .venv/bin/python ]; then
  XENT_CMAKE_PREFIX="$XENT_CMAKE_PREFIX -DXENT_JAX_PYTHON=$PWD/.venv/bin/python"
fi
export XENT_CMAKE_PREFIX
# The CPU fused linear loss loads a CBLAS library at run time: the unpacked
# OpenBLAS when there is one (a machine without network).
for f in "$PWD"/.deps/root/usr/lib/*/openblas-pthread/libopenblas.so.0; do
  if [ -f "$f" ] && [ -z "${XENT_BLAS:-}" ]; then
    export XENT_BLAS="$f"
    # its libgfortran, unpacked beside it
    export LD_LIBRARY_PATH="$(dirname "$(dirname "$f")"):${LD_LIBRARY_PATH:-}"
  fi
done
