#!/usr/bin/env bash
# One GPU run that answers one question: builds xent on the GPU machine, then
# runs the stages named on the command line (default: all but compare), and
# prints a short table last. Logs go to $OUT (or out/) for later reading.
#
#   scripts/device.sh [build] [test] [sanitize] [tune] [bench] [diag] [probe] [python] [compare]
#
# Stages:
#   build     CMake + Ninja build (Release), cmocka from .deps when offline
#   test      ctest: C API, CPU and CUDA tests, the benchmark's quick mode
#   sanitize  compute-sanitizer memcheck and racecheck on the quick CUDA subset, and on one
#             full step of the launch table's clustered shapes (xent-bench)
#   tune      xent-bench --tune: candidate launch configurations per shape
#   bench     xent-bench: the default table
#   diag      the forward kernels with parts of their work removed (XENT_DIAG builds),
#             timed beside the real ones at forced launches (bench/NOTES.md v8)
#   probe     xent-stream-probe: plain in-place and copy kernels against cudaMemcpy, and
#             whether the benchmark's L2 flush evicts evict-last lines
#   python    the pytest parity suite (CUDA parts included)
#   compare   bench/compare.py: the full sweep against every peer, plots, summary
#
# Each stage's one-line result is printed as soon as the stage ends (and again
# in the summary), so a run stopped by a time limit still shows what finished.
# XENT_DEADLINE_S: skip the stages that would start after this many seconds.
# Logs that only matter on failure (dependencies, build, wheels) stay out of
# $OUT unless that step fails, so $OUT holds few files.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build test sanitize tune bench python)
has() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
declare -a SUMMARY
note() {
  SUMMARY+=("$(printf '%-10s %s' "$1" "$2")")
  printf '== %-10s %s\n' "$1" "$2"
}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0))s] $*"; }
# Is there time left for another stage? (XENT_DEADLINE_S unset: always.)
in_time() {
  if [ -n "${XENT_DEADLINE_S:-}" ] && [ $(($(date +%s) - t0)) -ge "$XENT_DEADLINE_S" ]; then
    note "$1" "skipped: past XENT_DEADLINE_S=$XENT_DEADLINE_S"
    return 1
  fi
}
LOGS=$(mktemp -d)  # logs kept out of $OUT unless their step fails
trap 'rm -rf "$LOGS"' EXIT

stamp "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem \
  --format=csv,noheader 2>&1)"

# Python packages carried as wheels (e.g. the peer library for compare).
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "${TMPDIR:-/tmp}/xent-site" .whl/*.whl >"$LOGS/wheels.log" 2>&1 &&
    export PYTHONPATH="${TMPDIR:-/tmp}/xent-site"
  # Packages carried already unpacked (a wheel too large to carry whole).
  for t in .whl/*.tar.xz; do
    [ -f "$t" ] && tar -xJf "$t" -C "${TMPDIR:-/tmp}/xent-site" >>"$LOGS/wheels.log" 2>&1
  done
fi

# Every stage: the carried packages unpacked (a call that carries .deps anew
# replaces the unpacked copy the tests' binaries were linked against).
scripts/deps.sh >"$LOGS/deps.log" 2>&1
. scripts/env.sh
if has build || [ ! -f build/CMakeCache.txt ]; then
  stamp "build"
  # XENT_TEST_SHARDS: processes that share test_cuda_staged (CTest registers them).
  if cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DXENT_CUDA_PTX=OFF \
       -DXENT_CUDA_TEST_SHARDS="${XENT_TEST_SHARDS:-4}" $XENT_CMAKE_PREFIX >"$LOGS/build.log" 2>&1 &&
     cmake --build build -j 16 >>"$LOGS/build.log" 2>&1; then
    note build ok
  else
    cp "$LOGS/build.log" "$LOGS/deps.log" "$OUT/"
    note build FAILED; tail -40 "$OUT/build.log"
    printf '%s\n' "${SUMMARY[@]}"; exit 1
  fi
fi
export XENT_LIBRARY=$PWD/build/libxent.so PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}

if has bench && in_time bench; then
  stamp "bench"
  timeout 120 build/bench/xent-bench --mode all --csv "$OUT/xent-bench.csv" >"$OUT/bench.log" 2>&1
  note bench "rc=$?"
  cat "$OUT/bench.log"
fi

if has test && in_time test; then
  stamp "ctest"
  (cd build && timeout 120 ctest --output-on-failure -E "bench_compare|test_cuda") \
    >"$OUT/ctest.log" 2>&1
  note ctest "$(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1) (all but test_cuda)"
  grep -E "FAILED|Failed" "$OUT/ctest.log" | head -10
  # The CUDA tests through CTest, as `make test` runs them: one process per test and
  # test_cuda_staged in XENT_TEST_SHARDS shards (tests/CMakeLists.txt), XENT_TEST_JOBS
  # (default 8) at a time. Their float64 reference runs on the host, so the full set takes
  # about 4 minutes this way and over 10 in one process. XENT_TEST_TIMEOUT: per test, so a
  # timeout still leaves every other test's result. XENT_TEST_QUICK=1: the quick subset;
  # XENT_TEST_REGEX: only the tests whose CTest names match (ctest -R).
  stamp "test_cuda"
  (cd build && ctest -L cuda -j "${XENT_TEST_JOBS:-8}" --timeout "${XENT_TEST_TIMEOUT:-300}" \
     --output-on-failure ${XENT_TEST_REGEX:+-R "$XENT_TEST_REGEX"}) >"$OUT/test_cuda.log" 2>&1
  note test_cuda "$(grep -E 'tests passed|tests failed' "$OUT/test_cuda.log" | tail -1), $(
    grep -c '(Skipped)' "$OUT/test_cuda.log") skipped"
  grep -E '\*\*\*(Failed|Timeout|Exception)|Not Run' "$OUT/test_cuda.log" | head -30
fi


if has tune && in_time tune; then
  stamp "tune"
  # XENT_TUNE_ARGS: extra xent-bench flags, such as "--vocab 128256 --dtype bf16";
  # XENT_TUNE_NOGRAD=1 also tunes the forward without gradient.
  timeout ${XENT_TUNE_TIMEOUT:-200} build/bench/xent-bench --tune ${XENT_TUNE_ARGS:-} \
    >"$OUT/tune.log" 2>&1
  note tune "rc=$? (see tune.log)"
  if [ "${XENT_TUNE_NOGRAD:-0}" = 1 ]; then
    timeout ${XENT_TUNE_TIMEOUT:-200} build/bench/xent-bench --tune --mode forward_nograd \
      ${XENT_TUNE_ARGS:-} >"$OUT/tune-nograd.log" 2>&1
    note tune-nograd "rc=$? (see tune-nograd.log)"
  fi
  sed -n '/^shape /,$p' "$OUT/tune.log" "$OUT"/tune-nograd.log 2>/dev/null
fi


if has diag && in_time diag; then
  # XENT_DIAG_LEVELS: which builds besides the real one (src/cuda/device_common.cuh says what
  # each removes); XENT_DIAG_LAUNCHES: xent-bench --launch values; XENT_DIAG_SHAPES: V:dtype
  # pairs; XENT_DIAG_ARGS: xent-bench's other flags. Each level builds the library and
  # xent-bench alone, in build/diag<level>.
  levels=${XENT_DIAG_LEVELS:-1 2 3 4}
  launches=${XENT_DIAG_LAUNCHES:-1,1,512,0 1,1,1024,0 6,1,512,13 1,2,512,0 1,2,1024,0}
  shapes=${XENT_DIAG_SHAPES:-128256:bf16}
  dargs=${XENT_DIAG_ARGS:---mode forward}
  stamp "diag builds: $levels"
  for lv in $levels; do
    (cmake -S . -B build/diag$lv -G Ninja -DCMAKE_BUILD_TYPE=Release -DXENT_CUDA_PTX=OFF \
       -DXENT_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS=-DXENT_DIAG=$lv ${XENT_CMAKE_PREFIX:-} &&
     cmake --build build/diag$lv -j 8 --target xent-bench) >"$OUT/diag$lv.build.log" 2>&1 &
  done
  wait
  stamp "diag runs"
  {
    printf '%-14s %-8s %-14s %10s  %s\n' shape build launch "ms" "(p20 / p80)"
    for sh in $shapes; do
      for l in $launches; do
        for lv in 0 $levels; do
          b=build; [ "$lv" = 0 ] || b=build/diag$lv
          line=$(timeout 60 $b/bench/xent-bench --launch $l --vocab ${sh%%:*} --dtype ${sh##*:} \
                 $dargs 2>&1 | grep -E '^BT=' | head -1)
          [ -n "$line" ] && line=$(echo "$line" | awk '{print $5, $6, $7, $8, $9}')
          printf '%-14s %-8s %-14s %s\n' "$sh" "diag$lv" "$l" "${line:-failed or not supported}"
        done
      done
    done
  } | tee "$OUT/diag.txt"
  note diag "see diag.txt (diag0 = the real kernels)"
fi

if has probe && in_time probe; then
  stamp "probe"
  timeout ${XENT_PROBE_TIMEOUT:-200} build/bench/xent-stream-probe ${XENT_PROBE_ARGS:-} \
    >"$OUT/probe.log" 2>&1
  note probe "rc=$? (see probe.log)"
  cat "$OUT/probe.log"
fi

if has sanitize; then
  for tool in ${XENT_SANITIZE_TOOLS:-memcheck racecheck}; do
    in_time "$tool" || continue
    stamp "compute-sanitizer $tool"
    # XENT_SANITIZE_FILTER: only the tests whose names match (a cmocka pattern, '*' and '?').
    XENT_TEST_QUICK=1 XENT_TEST_FILTER=${XENT_SANITIZE_FILTER:-${XENT_TEST_FILTER:-}} \
      timeout ${XENT_SANITIZE_TIMEOUT:-300} compute-sanitizer --tool $tool --error-exitcode 9 \
      build/tests/test_cuda >"$OUT/sanitize-$tool.log" 2>&1
    rc=$?
    note "$tool" "rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize-$tool.log" | tail -1)"
    # The table's own launches, one full step each, at row counts that give every block
    # (cluster) 8 to 16 rows: rows split over clusters of 2 and 4, whose lead blocks mail the
    # rows to their peers, and a row per block. XENT_SANITIZE_SHAPES: "BT:V:dtype ...".
    for shape in ${XENT_SANITIZE_SHAPES:-1056:128256:fp32 528:262144:fp32 1056:128256:bf16}; do
      IFS=: read -r bt v dt <<<"$shape"
      in_time "$tool-$shape" || continue
      timeout ${XENT_SANITIZE_BENCH_TIMEOUT:-60} compute-sanitizer --tool $tool --error-exitcode 9 \
        build/bench/xent-bench --mode full --iters 1 --warmup 0 --bt "$bt" --vocab "$v" \
        --dtype "$dt" >"$LOGS/sanitize-bench.log" 2>&1
      rc=$?
      [ $rc = 0 ] || cp "$LOGS/sanitize-bench.log" "$OUT/sanitize-$tool-$bt-$v-$dt.log"
      note "$tool" "rc=$rc xent-bench $bt x $v $dt: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' \
        "$LOGS/sanitize-bench.log" | tail -1) $(grep -o 'launch: staged cluster=[0-9]*' \
        "$LOGS/sanitize-bench.log" | head -1)"
    done
  done
fi

if has python && in_time pytest; then
  stamp "pytest"
  timeout ${XENT_PYTEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider tests/python -rs \
    >"$OUT/pytest.log" 2>&1
  note pytest "$(tail -1 "$OUT/pytest.log")"
  grep -E "FAILED|Error" "$OUT/pytest.log" | head -20
fi

if has compare && in_time compare; then
  stamp "compare"
  PYTHONUNBUFFERED=1 python3 bench/compare.py --sweep all --mode ${XENT_COMPARE_MODES:-full,forward} \
    --out "$OUT/compare.csv" --no-append --budget-s ${XENT_COMPARE_BUDGET:-330} ${XENT_COMPARE_ARGS:-} \
    >"$OUT/compare.log" 2>&1
  note compare "rc=$?"
  tail -30 "$OUT/compare.log"
fi

stamp "done"
echo "==================== summary ===================="
printf '%s\n' "${SUMMARY[@]}"
