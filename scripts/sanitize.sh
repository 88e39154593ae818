#!/usr/bin/env bash
# The C suite (API, CPU backend, launch-table rules) under AddressSanitizer and
# UndefinedBehaviorSanitizer, built with gcc and with clang, CPU backend only:
#
#   scripts/sanitize.sh            # both compilers (the ones found)
#   XENT_SANITIZE_CC="gcc" scripts/sanitize.sh
#
# Any report fails the run (-fno-sanitize-recover=all; leaks are errors, but
# for the OpenMP runtimes' own, scripts/lsan.supp).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
compilers=${XENT_SANITIZE_CC:-gcc clang}
ran=0
for cc in $compilers; do
  if ! command -v "$cc" >/dev/null 2>&1; then
    echo "sanitize: $cc not found, skipped"
    continue
  fi
  dir=build-sanitize-$cc
  echo "sanitize: $cc, ASan + UBSan, in $dir"
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    CC=$cc cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXENT_CUDA=OFF \
      -DXENT_BUILD_BENCH=OFF -DXENT_NATIVE=OFF -DXENT_SANITIZE=address,undefined \
      $XENT_CMAKE_PREFIX >"$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
  fi
  cmake --build "$dir" -j >>"$dir.log" 2>&1 || { tail -40 "$dir.log"; exit 1; }
  (cd "$dir" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
     LSAN_OPTIONS=suppressions=$PWD/../scripts/lsan.supp \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     ctest --output-on-failure -j "${CTEST_JOBS:-2}")
  ran=$((ran + 1))
done
[ "$ran" -gt 0 ] || { echo "sanitize: no compiler found"; exit 1; }
