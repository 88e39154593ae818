#!/usr/bin/env bash
# One GPU run that answers one question: builds xent on the GPU machine, runs
# the stages named on the command line, and prints a short table last. Logs
# go to $OUT (or out/).
#
#   scripts/device.sh [build] [before] [test] [quick] [linear-test] [python] [bench]
#                     [linear] [linear-ab] [linear-sched] [compare] [host] [sanitize] [power]
#   (no stage: build test python bench linear)
#
#   build        CMake + Ninja (Release, sm_90a only), cmocka and OpenBLAS from .deps
#                (XENT_PREBUILT=DIR instead: a carried build made here without a GPU)
#   proxy        the A100's code and plan on this GPU: a build of compute_80 PTX alone
#                (build-sm80, made beside the main build), whose calls the driver JIT-compiles
#                and whose plan is sm_80's; the CUDA C tests (XENT_TEST_QUICK subset unless
#                XENT_PROXY_FULL=1) and the CUDA Python suites (XENT_PROXY_PYTEST) on it
#   plan100      Blackwell's plan (XENT_PLAN_ARCH=100) over the main build's sm_90a code:
#                the same tests
#   before       xent-bench of an earlier commit (build-before/), for bench's side-by-side
#                table: its sources carried as .before/src.tar (git archive COMMIT)
#   gemmtest     test_gemm alone under a 300 s limit (xent's Hopper GEMM), before `test`
#   gemmsan      compute-sanitizer memcheck, racecheck and synccheck over xent's GEMM's tests
#                (XENT_GEMMSAN_ONLY: a cmocka pattern of them)
#   test         every C test through CTest: API, CPU, linear (CPU and CUDA), CUDA, GEMM
#   quick        the quick CUDA subset, test_linear and test_vp (a short run)
#   linear-test  test_linear only
#   retest       the tests named in XENT_RETEST ("program:cmocka-pattern ..."), quick mode
#   python       the pytest suite (CUDA parts included); XENT_PYTEST_ARGS narrows it
#   bench        xent-bench --mode all (and the `before` build's, one after the other)
#   linear       bench/compare.py --kernel linear: shapes (XENT_LINEAR_ARGS to change),
#                chunk curve and weight-gradient error
#   compare      bench/compare.py: the cross-entropy sweep against every peer
#   host         bench/host_time.py at BT 1024 (with --parts) and 8192
#   linear-ab    bench/linear.py (the GEMMs alone and xent) with this tree's library and the
#                `before` build's in turn, at each of XENT_LINEAR_AB_SHAPES ("BT,H,V ...")
#   profile      dev/linear_profile.py: the step kernel by kernel (torch.profiler) for each
#                of XENT_PROFILE_STEPS ("STEP[:XENT_PRODUCTS] ...") at XENT_PROFILE_SHAPE
#   memory       bench/linear.py --chunk-curve with the peers at XENT_MEMORY_SHAPES, and
#                bench/plot_memory.py's picture of time against memory (PNG in $OUT)
#   linear-sched bench/linear.py: the GEMMs alone, xent's rows and vocab schedules and auto,
#                at each of XENT_LINEAR_SCHED_SHAPES ("BT,H,V ...")
#   vp           bench/vp.py: the vocabulary-parallel shard calls against the single-GPU loss
#                (with a `before` build: its passes, then this tree's again, in vp-ab.log)
#   jax          bench/jax_step.py: xent.jax against optax, jax.nn and XLA's matmul + loss
#   dwk          dev/cuda/lt_dwk.cu: dW's product by k, cuBLASLt's heuristic against the forced tile
#   gemm         bench/gemm.py: the three products through xent's own Hopper GEMM (src/cuda/gemm/)
#                against cuBLASLt and torch.mm, at the default chunk and the whole batch (with a
#                `before` build: its engines XENT_GEMM_BEFORE_ENGINES in gemm-before.log)
#   gemmncu      Nsight Compute over the chunk's dW and logits products (XENT_NCU_PRODUCTS),
#                xent's GEMM (XENT_NCU_ENGINES) against cuBLASLt as the loss configures it
#   cutlass      dev/cuda/gemm_cutlass_spike.cu: the three products through CUTLASS's Hopper
#                GEMMs against cuBLASLt (the nvidia-cutlass wheel carried in .whl)
#   hf           bench/hf_step.py: a 1B-shaped Hugging Face model's training step with
#                each loss (memory and time)
#   sanitize     compute-sanitizer memcheck of test_linear's CUDA tests
#   power        is the card at its power cap through the fused linear loss's work?
#                dev-lt_overlap power (the chunk products alone and back to back, the whole
#                products, the step, the card read through NVML meanwhile), then
#                bench/linear.py's floor, xent and torch.compile at the first shape, one
#                process each, with nvidia-smi sampling the card every 20 ms
#   variant      a copy of the tree changed by XENT_VARIANT_SED ("file|sed-script"), its
#                xent-bench run in the bench stage after this tree's and before it again
#
# Each stage's one-line result is printed when it ends and again in the
# summary, so a run stopped by a time limit still shows what finished.
# XENT_DEADLINE_S: skip stages that would start after this many seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build test python bench linear)
has() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
declare -a SUMMARY
note() {
  SUMMARY+=("$(printf '%-12s %s' "$1" "$2")")
  printf '== %-12s %s\n' "$1" "$2"
}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0))s] $*"; }
in_time() {
  if [ -n "${XENT_DEADLINE_S:-}" ] && [ $(($(date +%s) - t0)) -ge "$XENT_DEADLINE_S" ]; then
    note "$1" "skipped: past XENT_DEADLINE_S=$XENT_DEADLINE_S"
    return 1
  fi
}
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT

stamp "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem \
  --format=csv,noheader 2>&1)"

# Python packages carried as wheels (the peers, for compare and linear). A wheel too large
# for one call's carry travels in pieces (scripts/peer_wheels.sh: DIR/parts/NAME.whl.part-*
# and NAME.whl.count). A carried path that a later call does not carry again is gone from the
# tree there, so every call copies what it carries of DIR (pieces, counts, whole wheels) into
# /tmp/xent-parts/DIR, which lasts while the machine stays warm; a wheel whose pieces are all
# there is put together and unpacked with the rest. So each call carries only what is new.
# Two sites: .whl/ (the peer's CuTe kernel, with nvidia-cutlass-dsl 4.8.1) and .whl/quack/
# (QuACK with the DSL it was released with, 4.7.1), each unpacked into its own folder.
unpack_site() { # wheel-dir site-dir: prints the site's PYTHONPATH, or nothing
  local dir=$1 site=$2 keep count name have mark
  local -a ws=()
  keep=/tmp/xent-parts/$dir
  mkdir -p "$keep/parts"
  cp "$dir"/*.whl "$keep"/ 2>/dev/null
  cp "$dir"/parts/*.part-* "$dir"/parts/*.count "$keep"/parts/ 2>/dev/null
  shopt -s nullglob
  ws=("$keep"/*.whl)
  for count in "$keep"/parts/*.count; do
    name=$(basename "$count" .count)
    have=$(ls "$keep"/parts/"$name".part-* 2>/dev/null | wc -l)
    if [ "$have" = "$(cat "$count")" ]; then
      [ -f "$keep/$name.joined" ] || { cat "$keep"/parts/"$name".part-* >"$keep/$name.tmp" &&
        mv "$keep/$name.tmp" "$keep/$name.joined"; }
      ws+=("$keep/$name.joined")
    else
      stamp "wheel $name: $have of $(cat "$count") pieces here so far" >&2
    fi
  done
  shopt -u nullglob
  [ ${#ws[@]} -gt 0 ] || return 0
  # unpacked, not pip-installed: pip --target moves each wheel's top folder in whole, so
  # two wheels sharing one (nvidia_cutlass_dsl/, from libs-base and libs-cu13) lose files
  for w in "${ws[@]}"; do # once per wheel and site while the machine lasts
    mark="$w.unpacked-$(printf %s "$site" | tr -c 'A-Za-z0-9' _)"
    [ -f "$mark" ] && continue
    python3 -m zipfile -e "$w" "$site" >>"$LOGS/wheels.log" 2>&1 && touch "$mark"
  done
  # nvidia-cutlass-dsl's modules (a .pth names them, which is not read from here)
  if [ -d "$site/nvidia_cutlass_dsl/dsl_packages" ]; then
    echo "$site:$site/nvidia_cutlass_dsl/dsl_packages"
  else
    echo "$site"
  fi
}
# Each site's folder is named site-packages: QuACK fingerprints the functions its epilogues
# call, and takes those under a site-packages folder as installed code, by name (the DSL's
# own reach a logger, which it cannot fingerprint: "no fail-closed semantic key").
site=$(unpack_site .whl "${TMPDIR:-/tmp}/xent-site/site-packages")
[ -n "$site" ] && export PYTHONPATH="$site"
QUACK_SITE=$(unpack_site .whl/quack "${TMPDIR:-/tmp}/xent-site-quack/site-packages")
scripts/deps.sh >"$LOGS/deps.log" 2>&1
. scripts/env.sh

build_tree() { # dir [cmake args...]
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXENT_CUDA_ARCHITECTURES=90a -DXENT_CUDA_PTX=OFF \
    -DXENT_JAX_PYTHON="$(command -v python3)" $XENT_CMAKE_PREFIX "$@" >>"$LOGS/build.log" 2>&1 &&
    cmake --build "$dir" -j 16 >>"$LOGS/build.log" 2>&1
}

if has proxy; then
  # compute_80 PTX alone: on a Hopper GPU the driver JIT-compiles it, and the plan is the
  # A100's (plan_arch = the code's). Tests and the benchmark only, no dev/.
  (cmake -S . -B build-sm80 -G Ninja -DCMAKE_BUILD_TYPE=Release -DXENT_CUDA_ARCHITECTURES= \
     -DXENT_CUDA_PTX=ON -DXENT_CUDA_PTX_ARCHS=80 $XENT_CMAKE_PREFIX >"$LOGS/proxy.log" 2>&1 &&
   cmake --build build-sm80 -j 8 >>"$LOGS/proxy.log" 2>&1) &
  proxy_pid=$!
fi
if has before; then
  # The commit the bench stage compares with, built from a clean checkout of it.
  before=".before/src.tar"
  (rm -rf "$LOGS/before-src" && mkdir -p "$LOGS/before-src" &&
   tar -xf .before/src.tar -C "$LOGS/before-src" >"$LOGS/before.log" 2>&1 &&
   cd "$LOGS/before-src" &&
   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DXENT_CUDA_ARCHITECTURES=90a -DXENT_CUDA_PTX=OFF \
     -DXENT_BUILD_TESTS=OFF >>"$LOGS/before.log" 2>&1 &&
   cmake --build build -j 8 --target xent-bench >>"$LOGS/before.log" 2>&1 &&
   rm -rf "$OLDPWD/build-before" && cp -r build "$OLDPWD/build-before") &
  before_pid=$!
fi
if has variant; then
  # A variant of the working tree for an A/B in one run: XENT_VARIANT_SED="file|sed-script"
  # applied to a copy, whose xent-bench the bench stage runs after the others.
  (rm -rf "$LOGS/variant-src" && mkdir -p "$LOGS/variant-src" &&
   tar --exclude='./build*' --exclude='./.deps' --exclude='./.whl' --exclude='./.before' \
     --exclude='./out' -cf - . | tar -xf - -C "$LOGS/variant-src" &&
   cd "$LOGS/variant-src" && sed -i "${XENT_VARIANT_SED#*|}" "${XENT_VARIANT_SED%%|*}" &&
   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DXENT_CUDA_ARCHITECTURES=90a -DXENT_CUDA_PTX=OFF \
     $XENT_CMAKE_PREFIX >"$LOGS/variant.log" 2>&1 &&
   cmake --build build -j 8 --target xent-bench test_linear >>"$LOGS/variant.log" 2>&1 &&
   rm -rf "$OLDPWD/build-variant" && cp -r build "$OLDPWD/build-variant") &
  variant_pid=$!
fi
# XENT_PREBUILT=DIR: a build made on the machine without a GPU, carried instead of built here
# (a fresh machine's build takes about 190 s of the session's device time, carrying one about
# 30 s). Its library, cmocka and test programs go under build/ and the build stage is skipped;
# the stages that run the test programs, bench/ and the Python suites work from it, CTest's and
# the JAX handlers' (unless built with JAX's headers) do not. Made and carried so:
#   cmake -S . -B build/h100 -DCMAKE_BUILD_TYPE=Release -DXENT_CUDA_ARCHITECTURES=90a \
#     -DXENT_CUDA_PTX=OFF && cmake --build build/h100 -j 4 --target xent test_vp test_linear
#   cp /lib/x86_64-linux-gnu/libcmocka.so.0 build/h100/
#   carry build/h100/libxent.so.0.1.0, build/h100/libcmocka.so.0, build/h100/tests/test_vp, ...
if [ -n "${XENT_PREBUILT:-}" ]; then
  mkdir -p build/tests
  cp -f "$XENT_PREBUILT/libxent.so.0.1.0" build/ && ln -sf libxent.so.0.1.0 build/libxent.so.0 &&
    ln -sf libxent.so.0 build/libxent.so && note prebuilt "$XENT_PREBUILT" ||
    note prebuilt "FAILED: no $XENT_PREBUILT/libxent.so.0.1.0"
  cp -f "$XENT_PREBUILT/libcmocka.so.0" build/ 2>/dev/null
  cp -f "$XENT_PREBUILT"/tests/test_* build/tests/ 2>/dev/null
  export LD_LIBRARY_PATH=$PWD/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
elif has build || [ ! -f build/CMakeCache.txt ]; then
  stamp "build"
  if build_tree build; then
    note build "ok, $(grep -o 'JAX handlers [A-Z]*' "$LOGS/build.log" | tail -1)"
    grep -q 'JAX handlers ON' "$LOGS/build.log" ||
      python3 -c 'import jax.ffi; print(jax.ffi.include_dir())' 2>&1 | tail -3
  else
    cp "$LOGS/build.log" "$LOGS/deps.log" "$OUT/"
    note build FAILED
    tail -40 "$OUT/build.log"
    printf '%s\n' "${SUMMARY[@]}"
    exit 1
  fi
fi
if has before; then
  wait $before_pid && note before "built $before" || {
    note before "FAILED"; cp "$LOGS/before.log" "$OUT/"; tail -20 "$OUT/before.log"; }
fi
if has proxy; then
  wait $proxy_pid && note proxy-build "built build-sm80 (compute_80 PTX)" || {
    note proxy-build "FAILED"; cp "$LOGS/proxy.log" "$OUT/"; tail -20 "$OUT/proxy.log"; }
fi
if has variant; then
  wait $variant_pid && note variant "built: ${XENT_VARIANT_SED:-}" || {
    note variant "FAILED"; cp "$LOGS/variant.log" "$OUT/" 2>/dev/null; }
fi
export XENT_LIBRARY=$PWD/build/libxent.so PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}

ctest_stage() { # name ctest-args...
  local name=$1
  shift
  stamp "$name"
  (cd build && ctest --output-on-failure --timeout "${XENT_TEST_TIMEOUT:-400}" "$@") \
    >"$OUT/$name.log" 2>&1
  note "$name" "$(grep -E 'tests passed|tests failed' "$OUT/$name.log" | tail -1), $(
    grep -c '(Skipped)' "$OUT/$name.log") skipped"
  grep -E '\*\*\*(Failed|Timeout|Exception)|Not Run|FAILED' "$OUT/$name.log" | head -20
}

if has gemmtest && in_time gemmtest; then
  # xent's GEMM alone first, under a short limit: a kernel that hangs would
  # otherwise hold the test stage to its timeout
  stamp "gemmtest"
  timeout 300 build/tests/test_gemm >"$OUT/gemmtest.log" 2>&1
  rc=$?
  note gemmtest "rc=$rc $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gemmtest.log" | tr '\n' ' ')"
  grep -E 'checked|FAILED|error|bound' "$OUT/gemmtest.log" | head -12
  [ $rc = 124 ] && XENT_CTEST_EXCLUDE="-E test_gemm"
fi
if has gemmsan && in_time gemmsan; then
  # compute-sanitizer over xent's GEMM's tests: memcheck, racecheck, synccheck
  stamp "gemmsan"
  for tool in memcheck racecheck synccheck; do
    XENT_TEST_ONLY="${XENT_GEMMSAN_ONLY:-test_cuda_gemm_xent*}" timeout 150 compute-sanitizer --tool $tool \
      --error-exitcode 9 build/tests/test_gemm >"$OUT/gemmsan-$tool.log" 2>&1
    note gemmsan "$tool rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/gemmsan-$tool.log" | tail -1)"
  done
fi
if has test && in_time test; then
  ctest_stage test -j "${XENT_TEST_JOBS:-8}" ${XENT_CTEST_EXCLUDE:-}
fi
if has quick && in_time quick; then
  stamp "quick"
  (XENT_TEST_QUICK=1 timeout 300 build/tests/test_cuda; r1=$?
   timeout 300 build/tests/test_linear; r2=$?
   timeout 200 build/tests/test_vp; r3=$?; exit $((r1 | r2 | r3))) >"$OUT/quick.log" 2>&1
  note quick "rc=$? $(grep -E 'PASSED|FAILED' "$OUT/quick.log" | tr '\n' ' ' | cut -c1-120)"
  grep -E '^\[  FAILED|^  \[' "$OUT/quick.log" | head -30
fi
if has retest && in_time retest; then
  stamp "retest"
  rc=0
  for t in ${XENT_RETEST:-}; do
    XENT_TEST_QUICK=1 XENT_TEST_ONLY="${t#*:}" XENT_TEST_LINEAR_DIAG=1 timeout 200 \
      "build/tests/${t%%:*}" >>"$OUT/retest.log" 2>&1 || rc=1
  done
  note retest "rc=$rc $(grep -cE '^\[       OK' "$OUT/retest.log") ok, $(
    grep -cE '^\[  FAILED  \] test' "$OUT/retest.log") failed"
  grep -E '^\[  FAILED  \] test|^diag|^  \[' "$OUT/retest.log" | head -40
fi
if has linear-test && in_time linear-test; then
  stamp "linear-test"
  timeout 400 build/tests/test_linear >"$OUT/linear-test.log" 2>&1
  note linear-test "rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/linear-test.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED|^  \[|linear peak|default workspace' "$OUT/linear-test.log" | head -40
fi
if has sanitize && in_time sanitize; then
  stamp "sanitize"
  XENT_TEST_ONLY="test_cuda_linear_*" timeout 400 compute-sanitizer --tool memcheck \
    --error-exitcode 9 build/tests/test_linear >"$OUT/sanitize.log" 2>&1
  note sanitize "rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitize.log" | tail -1)"
fi
if has python && in_time python; then
  stamp "pytest"
  timeout "${XENT_PYTEST_TIMEOUT:-420}" python3 -m pytest -q -p no:cacheprovider -rs \
    ${XENT_PYTEST_ARGS:-tests/python} >"$OUT/pytest.log" 2>&1
  note pytest "$(tail -1 "$OUT/pytest.log")"
  grep -E "^FAILED|^ERROR" "$OUT/pytest.log" | head -20
fi
# The CUDA C tests and the CUDA Python suites under another plan: `dir` the build, then
# the environment (XENT_PLAN_ARCH=...) they run with.
plan_stage() { # name dir [VAR=value ...]
  local name=$1 dir=$2
  shift 2
  stamp "$name"
  local quick=1
  [ "${XENT_PROXY_FULL:-0}" = 1 ] && quick=0
  (cd "$dir" && env "$@" XENT_TEST_QUICK=$quick ctest --output-on-failure -j 8 \
     --timeout "${XENT_TEST_TIMEOUT:-400}" -R 'test_cuda|test_linear|test_vp') \
    >"$OUT/$name-ctest.log" 2>&1
  note "$name" "C: $(grep -E 'tests passed|tests failed' "$OUT/$name-ctest.log" | tail -1), $(
    grep -c '(Skipped)' "$OUT/$name-ctest.log") skipped"
  grep -E '\*\*\*(Failed|Timeout|Exception)|FAILED|plan sm_|compute_' "$OUT/$name-ctest.log" |
    head -12
  env "$@" XENT_LIBRARY="$PWD/$dir/libxent.so" timeout "${XENT_PYTEST_TIMEOUT:-420}" \
    python3 -m pytest -q -p no:cacheprovider -rs \
    ${XENT_PROXY_PYTEST:-tests/python/test_torch_cuda.py tests/python/test_torch_linear.py} \
    >"$OUT/$name-pytest.log" 2>&1
  note "$name" "python: $(tail -1 "$OUT/$name-pytest.log")"
  grep -E "^FAILED|^ERROR" "$OUT/$name-pytest.log" | head -10
}
if has proxy && in_time proxy && [ -f build-sm80/libxent.so ]; then
  plan_stage proxy build-sm80 XENT_PROXY=sm80
  # the A100's plan and JIT-compiled code timed beside Hopper's, one after the other
  if [ -x build-sm80/bench/xent-bench ] && in_time proxy-bench; then
    stamp "proxy-bench"
    for b in build build-sm80; do
      timeout 100 $b/bench/xent-bench --mode forward --csv "$OUT/xent-bench-$b.csv" \
        >"$OUT/proxy-bench-$b.log" 2>&1
    done
    note proxy-bench "rc=$? (xent-bench of build and build-sm80: proxy-bench-*.log)"
  fi
fi
if has plan100 && in_time plan100; then
  plan_stage plan100 build XENT_PLAN_ARCH=100
fi
if has linear && in_time linear; then
  stamp "linear"
  PYTHONUNBUFFERED=1 timeout "${XENT_LINEAR_TIMEOUT:-420}" python3 bench/compare.py \
    --kernel linear --out "$OUT/linear.csv" --no-append ${XENT_LINEAR_ARGS:---chunk-curve \
    --weight-error} >"$OUT/linear.log" 2>&1
  note linear "rc=$?"
fi
if has linear-ab && in_time linear-ab; then
  # This tree's fused linear loss against the `before` build's, one process each, in turn
  # (this, before, this, before) at each shape of XENT_LINEAR_AB_SHAPES.
  stamp "linear-ab"
  for shape in ${XENT_LINEAR_AB_SHAPES:-8192,4096,128256}; do
    for lib in build build-before build build-before; do
      [ -f "$lib/libxent.so" ] || continue
      echo "-- $lib" >>"$OUT/linear-ab.txt"
      XENT_LIBRARY=$PWD/$lib/libxent.so PYTHONUNBUFFERED=1 timeout 200 python3 bench/linear.py \
        --shape "$shape" --providers gemm_floor,xent --out "$OUT/linear-ab.csv" \
        >>"$OUT/linear-ab.txt" 2>&1
    done
  done
  note linear-ab "$(grep -E '^  xent ' "$OUT/linear-ab.txt" | awk '{print $2}' | tr '\n' ' ')"
fi
if has linear-sched && in_time linear-sched; then
  # xent's two schedules and auto side by side, with the GEMMs alone, one process a shape,
  # at each of XENT_LINEAR_SCHED_SHAPES ("BT,H,V ..."; XENT_LINEAR_SCHED_PROVIDERS to change).
  stamp "linear-sched"
  for shape in ${XENT_LINEAR_SCHED_SHAPES:-2048,4096,128256 4096,4096,128256 8192,4096,128256}; do
    PYTHONUNBUFFERED=1 timeout 240 python3 bench/linear.py --shape "$shape" --providers \
      "${XENT_LINEAR_SCHED_PROVIDERS:-gemm_floor,xent_rows,xent_vocab,xent}" \
      --out "$OUT/linear-sched.csv" >>"$OUT/linear-sched.txt" 2>&1
  done
  note linear-sched "$(grep -cE '^  xent' "$OUT/linear-sched.txt") xent rows"
  grep -E '^  (gemm|xent)|^linear.py|BT=' "$OUT/linear-sched.txt" | head -60
fi
if has profile && in_time profile; then
  # dev/linear_profile.py: the step kernel by kernel, one process per "STEP[:PRODUCTS]" of
  # XENT_PROFILE_STEPS (STEP: xent, xent_all, xent_all_unchecked, xent_1g, torch_compile,
  # liger_sm90 with its wheels carried) at XENT_PROFILE_SHAPE.
  stamp "profile"
  for sp in ${XENT_PROFILE_STEPS:-xent_all torch_compile xent_1g xent xent:xent}; do
    step=${sp%%:*}
    prod=""
    [ "$step" != "$sp" ] && prod=${sp#*:}
    XENT_PRODUCTS="$prod" PYTHONUNBUFFERED=1 timeout 150 python3 dev/linear_profile.py \
      "${XENT_PROFILE_SHAPE:-8192,4096,128256}" "$step" >>"$OUT/profile.log" 2>&1
  done
  note profile "$(grep -oE "step [0-9.]+ ms" "$OUT/profile.log" | tr -d "stepm " | tr "\n" " ")"
fi
if has memory && in_time memory; then
  # Issue 54's picture: every provider a point, xent a curve over memory_budget (time as a
  # ratio to the GEMMs against extra memory), one process a shape (XENT_MEMORY_SHAPES).
  stamp "memory"
  providers=${XENT_MEMORY_PROVIDERS:-gemm_floor,xent,xent_all,torch_compile,liger_sm90,quack,quack_512}
  if [ -n "$QUACK_SITE" ]; then # QuACK in processes of its own, on its own DSL
    quack=$(echo ",$providers," | grep -oE ',quack[a-z0-9_]*' | tr -d '\n' | sed 's/^,//')
    providers=$(echo ",$providers," | sed -E 's/,quack[a-z0-9_]*//g; s/^,//; s/,$//')
  fi
  for shape in ${XENT_MEMORY_SHAPES:-8192,4096,128256}; do
    PYTHONUNBUFFERED=1 timeout 400 python3 bench/linear.py --shape "$shape" --chunk-curve \
      --providers "$providers" --out "$OUT/memory.csv" >>"$OUT/memory.txt" 2>&1
    if [ -n "$QUACK_SITE" ] && [ -n "${quack:-}" ]; then
      PYTHONPATH="$QUACK_SITE" PYTHONUNBUFFERED=1 timeout 300 python3 bench/linear.py \
        --shape "$shape" --providers "gemm_floor,$quack" --out "$OUT/memory.csv" \
        >>"$OUT/memory.txt" 2>&1
    fi
  done
  python3 bench/plot_memory.py "$OUT/memory.csv" --out-dir "$OUT" >>"$OUT/memory.txt" 2>&1
  note memory "$(grep -c 'MiB\| ms' "$OUT/memory.txt") lines, $(ls "$OUT"/linear_memory_*.png 2>/dev/null | wc -l) plots"
  grep -E '^  [a-z]|^[A-Z].*BT=|skipped|not importable' "$OUT/memory.txt" | head -60
fi
if has bench && in_time bench; then
  stamp "bench"
  timeout 150 build/bench/xent-bench --mode all --csv "$OUT/xent-bench.csv" >"$OUT/bench.log" 2>&1
  note bench "rc=$?"
  if [ -x build-before/bench/xent-bench ]; then
    timeout 150 build-before/bench/xent-bench --mode all --csv "$OUT/xent-bench-before.csv" \
      >"$OUT/bench-before.log" 2>&1
    note bench-before "rc=$? (the commit of .before/src.tar)"
  fi
  if [ -x build-variant/bench/xent-bench ]; then
    timeout 150 build-variant/bench/xent-bench --mode all --csv "$OUT/xent-bench-variant.csv" \
      >"$OUT/bench-variant.log" 2>&1
    note bench-variant "rc=$? (${XENT_VARIANT_SED:-})"
    timeout 150 build/bench/xent-bench --mode all --csv "$OUT/xent-bench-again.csv" \
      >"$OUT/bench-again.log" 2>&1
    note bench-again "rc=$? (this tree again, after the variant)"
  fi
fi
if has compare && in_time compare; then
  stamp "compare"
  PYTHONUNBUFFERED=1 python3 bench/compare.py --sweep all --mode ${XENT_COMPARE_MODES:-full,forward} \
    --out "$OUT/compare.csv" --no-append --budget-s ${XENT_COMPARE_BUDGET:-330} \
    ${XENT_COMPARE_ARGS:-} >"$OUT/compare.log" 2>&1
  note compare "rc=$?"
fi
if has jax && in_time jax; then
  # xent.jax against optax / jax.nn and XLA's own matmul + loss (bench/jax_step.py)
  stamp "jax"
  PYTHONUNBUFFERED=1 timeout 400 python3 bench/jax_step.py --csv "$OUT/jax-step.csv" \
    >"$OUT/jax.log" 2>&1
  note jax "rc=$?"
fi
if has vp && in_time vp; then
  stamp "vp"
  timeout 240 python3 bench/vp.py >"$OUT/vp.log" 2>&1
  rc=$?
  timeout 200 python3 bench/vp.py --bt 4096 >>"$OUT/vp.log" 2>&1
  note vp "rc=$rc, $? (BT 8192, 4096)"
  grep -E "^ *[0-9]+ +[a-z]" "$OUT/vp.log" | awk '{printf "%s %s %s stats %s fwd %s nograd %s\n", $1, $2, $3, $4, $5, $(NF-1)}' | head -60
  if [ -f build-before/libxent.so ]; then
    # the `before` build's shard passes, then this tree's again: side by side in one call
    for lib in build-before build; do
      echo "-- $lib" >>"$OUT/vp-ab.log"
      XENT_LIBRARY=$PWD/$lib/libxent.so timeout 200 python3 bench/vp.py >>"$OUT/vp-ab.log" 2>&1
    done
    note vp-ab "rc=$? (before, then this tree)"
  fi
fi
if has hf && in_time hf; then
  stamp "hf"
  PYTHONUNBUFFERED=1 timeout 300 python3 bench/hf_step.py --out "$OUT/hf-step.csv" \
    >"$OUT/hf.log" 2>&1
  note hf "rc=$?"
fi
if has host && in_time host; then
  stamp "host"
  # Two rounds, this binding then an earlier one (its python/ tree, carried as
  # .hostbefore) on the same library: the host's pace drifts within a call.
  for round in 1 2; do
    echo "round $round, this binding:" >>"$OUT/host.log"
    timeout 120 python3 bench/host_time.py --bt 1024 --providers xent,xent_unchecked,torch \
      >>"$OUT/host.log" 2>&1
    if [ -d .hostbefore/python ]; then
      echo "round $round, earlier binding (.hostbefore):" >>"$OUT/host.log"
      PYTHONPATH=$PWD/.hostbefore/python${PYTHONPATH#$PWD/python} timeout 120 python3 \
        bench/host_time.py --bt 1024 --providers xent,xent_unchecked,torch >>"$OUT/host.log" 2>&1
    fi
  done
  timeout 150 python3 bench/host_time.py --bt 1024 --parts >>"$OUT/host.log" 2>&1
  timeout 120 python3 bench/host_time.py --bt 8192 >>"$OUT/host.log" 2>&1
  note host "rc=$?"
fi

if has dwk && in_time dwk; then
  # dW's product by k: the heuristic's configuration against the forced one (dev/cuda/lt_dwk.cu)
  stamp "dwk"
  if cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DXENT_CUDA_ARCHITECTURES=90a \
       -DXENT_CUDA_PTX=OFF -DXENT_BUILD_DEV=ON -DXENT_BUILD_TESTS=OFF -DXENT_BUILD_BENCH=OFF \
       >"$LOGS/dwk.log" 2>&1 && cmake --build build-dev -j 16 --target dev-lt_dwk >>"$LOGS/dwk.log" 2>&1; then
    timeout 240 build-dev/dev/dev-lt_dwk >"$OUT/dwk.log" 2>&1
    note dwk "rc=$?"
  else
    cp "$LOGS/dwk.log" "$OUT/dwk-build.log"
    note dwk "build FAILED"
  fi
fi
if has cutlass && in_time cutlass; then
  # Issue 56's spike, the CUTLASS route: the three products through CUTLASS's Hopper GEMMs
  # against cuBLASLt (dev/cuda/gemm_cutlass_spike.cu). CUTLASS's headers come from the
  # nvidia-cutlass wheel carried in .whl (installed above).
  stamp "cutlass"
  inc=$(python3 -c 'import os, cutlass_library as c
print(os.path.join(os.path.dirname(c.__file__), "source", "include"))' 2>/dev/null)
  if [ -n "$inc" ] && [ -d "$inc" ] &&
     cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DXENT_CUDA_ARCHITECTURES=90a \
       -DXENT_CUDA_PTX=OFF -DXENT_BUILD_DEV=ON -DXENT_BUILD_TESTS=OFF -DXENT_BUILD_BENCH=OFF \
       -DXENT_CUTLASS_DIR="$inc" >"$LOGS/cutlass.log" 2>&1 &&
     cmake --build build-dev -j 16 --target dev-gemm_cutlass_spike >>"$LOGS/cutlass.log" 2>&1; then
    timeout 240 build-dev/dev/dev-gemm_cutlass_spike >"$OUT/cutlass.log" 2>&1
    note cutlass "rc=$?"
  else
    cp "$LOGS/cutlass.log" "$OUT/cutlass-build.log" 2>/dev/null
    note cutlass "no build (CUTLASS's headers: carry the nvidia-cutlass wheel in .whl)"
  fi
fi
if has gemm && in_time gemm; then
  # Issue 56: the three products alone, xent's Hopper GEMM against cuBLASLt and torch.mm
  stamp "gemm"
  PYTHONUNBUFFERED=1 timeout 300 python3 bench/gemm.py --csv "$OUT/gemm.csv" ${XENT_GEMM_ARGS:---describe} \
    >"$OUT/gemm.log" 2>&1
  note gemm "rc=$?"
  tail -12 "$OUT/gemm.log"
  if [ -f build-before/libxent.so ]; then
    # the `before` build's GEMM (XENT_GEMM_BEFORE_ENGINES) beside cuBLASLt in its own process
    XENT_LIBRARY=$PWD/build-before/libxent.so PYTHONUNBUFFERED=1 timeout 300 python3 bench/gemm.py \
      --engines "${XENT_GEMM_BEFORE_ENGINES:-xent_tma,xent_c2,cublaslt}" --describe \
      --csv "$OUT/gemm-before.csv" >"$OUT/gemm-before.log" 2>&1
    note gemm-before "rc=$?"
  fi
fi
if has gemmncu && in_time gemmncu; then
  # Nsight Compute over the chunk's dW and logits products: xent's GEMM against cuBLASLt as
  # the loss runs it (where the tensor cores wait, and on what)
  stamp "gemmncu"
  timeout 400 ncu --target-processes all --kernel-name regex:"sm90_gemm|nvjet" \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy python3 bench/gemm.py --iters 1 --warmup 0 \
    --only "${XENT_NCU_PRODUCTS:-dW@chunk,logits@chunk}" \
    --engines "${XENT_NCU_ENGINES:-xent_tma,xent_lc,cublaslt_loss}" \
    >"$OUT/gemmncu.log" 2>&1
  note gemmncu "rc=$? $(grep -c 'Duration' "$OUT/gemmncu.log") kernels"
  grep -E '^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Issued Ipc|Warp Cycles Per Issued|No Eligible' \
    "$OUT/gemmncu.log" | head -60
fi
if has power && in_time power; then
  stamp "power"
  if cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DXENT_CUDA_ARCHITECTURES=90a -DXENT_CUDA_PTX=OFF \
       -DXENT_BUILD_DEV=ON -DXENT_BUILD_TESTS=OFF -DXENT_BUILD_BENCH=OFF >"$LOGS/power.log" 2>&1 &&
     cmake --build build-dev -j 16 --target dev-lt_overlap >>"$LOGS/power.log" 2>&1; then
    timeout 300 build-dev/dev/dev-lt_overlap power >"$OUT/power.log" 2>&1
  else
    cp "$LOGS/power.log" "$OUT/power-build.log"
  fi
  # The benchmark's own runs: the card's state over the samples drawing over 400 W (the
  # timed steps and their warm-up, not the process's start).
  for prov in gemm_floor xent torch_compile; do
    nvidia-smi --query-gpu=clocks.sm,power.draw,clocks_event_reasons.sw_power_cap \
      --format=csv,noheader,nounits -lms 20 >"$LOGS/smi-$prov.csv" 2>&1 &
    smi=$!
    PYTHONUNBUFFERED=1 timeout 200 python3 bench/linear.py --shape 8192,4096,128256 \
      --providers "$prov" --iters 30 --out "$OUT/power-linear.csv" >>"$OUT/power-linear.log" 2>&1
    kill $smi 2>/dev/null
    wait $smi 2>/dev/null
    awk -F', *' -v p="$prov" '$2 + 0 > 400 { n++; c += $1; w += $2; cap += ($3 ~ /^Active/) }
      END { if (n) printf "%-14s %5d samples over 400 W: SM %4.0f MHz, %3.0f W, power cap %3.0f %%\n",
            p, n, c / n, w / n, 100 * cap / n; else print p, "no samples over 400 W" }' \
      "$LOGS/smi-$prov.csv" >>"$OUT/power.log"
  done
  grep -E '^  (gemm|xent|torch)' "$OUT/power-linear.log" >>"$OUT/power.log"
  note power "$(grep -c 'TF/s' "$OUT/power.log") probe lines"
fi

stamp "done"
echo "==================== summary ===================="
printf '%s\n' "${SUMMARY[@]}"
# The short tables: xent-bench (and the before build's), the fused linear run.
for f in bench bench-before bench-variant bench-again; do
  [ -f "$OUT/$f.log" ] && { echo "-- $f"; grep -E '^(BT|  *BT|shape|V=)' "$OUT/$f.log" | head -24; }
done
[ -f "$OUT/linear.log" ] && { echo "-- linear"; grep -vE '^\s*$' "$OUT/linear.log" | tail -60; }
[ -f "$OUT/vp.log" ] && { echo "-- vp"; tail -6 "$OUT/vp.log"; }
[ -f "$OUT/profile.log" ] && { echo "-- profile"; cat "$OUT/profile.log"; }
[ -f "$OUT/jax.log" ] && { echo "-- jax"; cat "$OUT/jax.log"; }
[ -f "$OUT/hf.log" ] && { echo "-- hf"; tail -8 "$OUT/hf.log"; }
[ -f "$OUT/host.log" ] && { echo "-- host"; grep -vE '^\s*$' "$OUT/host.log" | tail -60; }
[ -f "$OUT/power.log" ] && { echo "-- power"; cat "$OUT/power.log"; }
[ -f "$OUT/dwk.log" ] && { echo "-- dwk"; cat "$OUT/dwk.log"; }
[ -f "$OUT/cutlass.log" ] && { echo "-- cutlass"; cat "$OUT/cutlass.log"; }
exit 0
