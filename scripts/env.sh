# Sourced by the Makefile: points CMake at dependencies unpacked into .deps/root.
XENT_CMAKE_PREFIX=""
if [ -d .deps/root/usr ]; then
  XENT_CMAKE_PREFIX="-DCMAKE_PREFIX_PATH=$PWD/.deps/root/usr"
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
