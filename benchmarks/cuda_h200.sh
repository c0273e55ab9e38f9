#!/usr/bin/env bash
# The CUDA backend on an H200 machine (16 cores, CUDA toolkit, cmake, PoCL, PyTorch; no
# internet; no Check or CLBlast installed), in one command that fits the device tool's
# 10-minute limit:
#   1. unpacks the Debian packages carried in .debs/ (check, subunit, pkgconf, OpenBLAS,
#      CLBlast) into /tmp/vla-deb-prefix and points CMake, pkg-config and the loader at them;
#   2. builds (Release, CMAKE_CUDA_ARCHITECTURES="75;90"): test_cuda, bench_cuda_targets,
#      vla-check (retrying without the OpenCL backend if that part does not build);
#   3. runs tests/test_cuda (every mechanism x algorithm vs the CPU backend and float64);
#   4. benchmarks/bench_cuda_targets (the targets, with the device's measured copy and GEMM
#      rates) and benchmarks/bench_sdpa.py (PyTorch SDPA, fp32 and bf16, the same shapes);
#   5. compute-sanitizer memcheck and racecheck over the small test cases
#      (VLA_CUDA_TEST_QUICK=1), vla-check --backend cuda, synccheck;
#   6. prints a summary table last.
# Every stage has a time limit and the whole run a deadline (VLA_H200_DEADLINE seconds, default
# 560), so the summary always comes out; a stage that did not fit says so.
#
# Usage, from the repository root on the device machine (the device tool: carry [".debs"]):
#   bash benchmarks/cuda_h200.sh
# Logs go to $OUT (8 files at most: the device tool returns no more).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/cuda-h200-out}
mkdir -p "$OUT"
START=$SECONDS
DEADLINE=${VLA_H200_DEADLINE:-560}
JOBS=$(nproc 2>/dev/null || echo 8)
BUILD=$ROOT/build-h200
PREFIX=${VLA_DEB_PREFIX:-/tmp/vla-deb-prefix} # outside the tree: 120 MB unpacked
SUMMARY=$OUT/summary.md
: > "$SUMMARY"
declare -a ROWS=()

elapsed() { echo $(( SECONDS - START )); }
note() { echo "[$(elapsed)s] $*" >&2; }
# Seconds a stage may take: its own cap, or what is left before the deadline.
budget() {
    local cap=$1 left=$(( DEADLINE - (SECONDS - START) - 20 ))
    (( left < cap )) && cap=$left
    echo "$cap"
}
row() { ROWS+=("| $1 | $2 | $3 | $4 |"); }
# run_stage NAME CAP LOG CMD...: runs CMD with a time limit, appending to LOG. Sets STAGE_RC.
run_stage() {
    local name=$1 cap=$2 log=$3
    shift 3
    local b
    b=$(budget "$cap")
    STAGE_SECS=0
    if (( b < 15 )); then
        STAGE_RC=125
        note "$name: skipped, no time left"
        echo "== $name: skipped (no time left before the deadline)" >> "$log"
        return
    fi
    note "$name (limit ${b}s)"
    local t0=$SECONDS
    {
        echo "== $name: $*"
        echo "== limit ${b}s, started at $(elapsed)s"
    } >> "$log"
    # through bash, so that CMD may be one of the functions below (exported)
    timeout --signal=INT --kill-after=15 "$b" bash -c '"$@"' vla-stage "$@" >> "$log" 2>&1
    STAGE_RC=$?
    STAGE_SECS=$(( SECONDS - t0 ))
    echo "== $name: exit $STAGE_RC after ${STAGE_SECS}s" >> "$log"
    note "$name: exit $STAGE_RC after ${STAGE_SECS}s"
}
verdict() { # exit code -> words
    case $1 in
        0) echo "pass" ;;
        77) echo "skipped (77)" ;;
        124|130) echo "TIMED OUT" ;;
        125) echo "not run (no time left)" ;;
        *) echo "FAIL (exit $1)" ;;
    esac
}

# ---- 0. the machine ----
{
    echo "# libvla CUDA backend on the device: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv 2>&1 | head -5
    (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version) | tail -2
    cmake --version | head -1
    echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(git status --porcelain 2>/dev/null | wc -l) changed files"
    echo '```'
} >> "$SUMMARY" 2>&1
export PATH=$PATH:/usr/local/cuda/bin

# ---- 1. the carried Debian packages ----
# (dpkg -x overwrites: nothing to clean first)
mkdir -p "$PREFIX"
ndeb=0
for d in "$ROOT"/.debs/*.deb; do
    [ -e "$d" ] || continue
    dpkg -x "$d" "$PREFIX" && ndeb=$((ndeb + 1))
done
# Their .pc files say prefix=/usr: point them at the unpacked tree.
find "$PREFIX" -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$PREFIX/usr|" {} + 2>/dev/null
MA=x86_64-linux-gnu
LIBS=$PREFIX/usr/lib/$MA:$PREFIX/usr/lib/$MA/openblas-pthread
export LD_LIBRARY_PATH=$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$PREFIX/usr/lib/$MA/pkgconfig:$PREFIX/usr/lib/$MA/openblas-pthread/pkgconfig:$PREFIX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export CMAKE_PREFIX_PATH=$PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
PKGCONF=$(command -v pkg-config || true)
if [ -z "$PKGCONF" ] && [ -x "$PREFIX/usr/bin/pkgconf" ]; then
    PKGCONF=$PREFIX/usr/bin/pkgconf
    export PATH=$PATH:$PREFIX/usr/bin
fi
note "unpacked $ndeb .deb files into $PREFIX; pkg-config: ${PKGCONF:-none}"
row "debs" "$ndeb unpacked" "" "pkg-config: ${PKGCONF:-none}; check: $($PKGCONF --modversion check 2>&1 | head -1)"

# ---- 2. build ----
BLOG=$OUT/build.log
: > "$BLOG"
configure() {
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="75;90" -DVLA_CUDA=ON \
        ${PKGCONF:+-DPKG_CONFIG_EXECUTABLE=$PKGCONF} "$@"
}
build_core() { cmake --build "$BUILD" -j "$JOBS" --target test_cuda bench_cuda_targets; }
export ROOT BUILD PKGCONF JOBS
export -f configure build_core
run_stage configure 120 "$BLOG" configure
cfg_rc=$STAGE_RC
if [ $cfg_rc -ne 0 ]; then
    note "configure failed: retrying without the OpenCL backend"
    rm -rf "$BUILD"
    run_stage configure-no-opencl 90 "$BLOG" configure -DVLA_OPENCL=OFF
    cfg_rc=$STAGE_RC
fi
build_rc=125
if [ $cfg_rc -eq 0 ]; then
    run_stage build 300 "$BLOG" build_core
    build_rc=$STAGE_RC
    build_secs=${STAGE_SECS:-0}
    if [ $build_rc -ne 0 ] && grep -q "VLA_OPENCL:BOOL=ON" "$BUILD/CMakeCache.txt" 2>/dev/null; then
        note "build failed: retrying without the OpenCL backend"
        run_stage configure-no-opencl 90 "$BLOG" configure -DVLA_OPENCL=OFF
        run_stage build-no-opencl 240 "$BLOG" build_core
        build_rc=$STAGE_RC
    fi
    run_stage build-vla-check 120 "$BLOG" cmake --build "$BUILD" -j "$JOBS" --target vla-check
    check_built=$STAGE_RC
fi
warn=$(grep -ciE "warning" "$BLOG" || true)
if [ "$cfg_rc" -ne 0 ]; then
    row "configure" "$(verdict $cfg_rc)" "" "see build.log"
else
    row "build (sm_75 + sm_90)" "$(verdict $build_rc)" "${build_secs:-}" "$warn lines with 'warning' in build.log"
fi
if [ "$build_rc" -eq 0 ]; then
    (cuobjdump --dump-resource-usage "$BUILD"/libvla.so 2>/dev/null | grep -E "Function|REG" | head -80) >> "$BLOG"
fi

# ---- 3. tests ----
TLOG=$OUT/tests.log
: > "$TLOG"
TEST=$BUILD/tests/test_cuda
if [ "$build_rc" -eq 0 ] && [ -x "$TEST" ]; then
    CK_FORK=no CK_VERBOSITY=normal run_stage test_cuda 180 "$TLOG" "$TEST"
    t_rc=$STAGE_RC
    t_line=$(grep -E "^[0-9]+%: Checks" "$TLOG" | tail -1)
    row "test_cuda (vs cpu and float64)" "$(verdict $t_rc)" "$STAGE_SECS" "${t_line:-no Check summary}"
    worst=$(grep -E "FAIL" "$TLOG" | head -3 | tr '\n' ' ' | cut -c1-200)
    [ -n "$worst" ] && row "test_cuda failures" "" "" "$worst"
else
    row "test_cuda" "not run" "" "no build"
fi
# ---- 4. speed (before the sanitizers: the deadline cuts the last stages first) ----
if [ "$build_rc" -eq 0 ]; then
    run_stage bench_cuda_targets 180 "$OUT/bench_cuda.md" "$BUILD/bench_cuda_targets" --json "$OUT/bench_cuda.json"
    row "bench_cuda_targets" "$(verdict $STAGE_RC)" "$STAGE_SECS" "table in bench_cuda.md, samples in bench_cuda.json"
fi
run_stage bench_sdpa 60 "$OUT/sdpa.md" env -u LD_LIBRARY_PATH python3 "$ROOT/benchmarks/bench_sdpa.py" \
    --json "$OUT/sdpa.json"
row "bench_sdpa.py (PyTorch)" "$(verdict $STAGE_RC)" "$STAGE_SECS" "sdpa.md, sdpa.json"

# ---- 5. compute-sanitizer over the small cases, and vla-check ----
SLOG=$OUT/sanitizers.log
: > "$SLOG"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ "$build_rc" -eq 0 ] && [ -x "$CS" ]; then
    for tool in memcheck racecheck; do
        cap=90
        VLA_CUDA_TEST_QUICK=1 CK_FORK=no run_stage "$tool" $cap "$SLOG" "$CS" --tool $tool --error-exitcode 99 \
            --print-limit 30 "$TEST"
        rc=$STAGE_RC
        summ=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard" "$SLOG" | tail -1 | cut -c1-120)
        row "compute-sanitizer $tool (quick cases)" "$(verdict $rc)" "$STAGE_SECS" "${summ:-}"
    done
else
    row "compute-sanitizer" "not run" "" "no build or no compute-sanitizer"
fi

# ---- vla-check (independent of test_cuda: guard bytes, unchanged inputs) ----
if [ "${check_built:-1}" -eq 0 ] && [ -x "$BUILD/tools/vla-check" ]; then
    run_stage vla-check 60 "$TLOG" "$BUILD/tools/vla-check" --backend cuda
    row "vla-check --backend cuda" "$(verdict $STAGE_RC)" "$STAGE_SECS" "$(grep -iE "pass|fail" "$TLOG" | tail -1 | cut -c1-120)"
else
    row "vla-check --backend cuda" "not run" "" "vla-check did not build (or is not written yet)"
fi

# synccheck last: the least likely to find what the emulator's barriers did not
if [ "$build_rc" -eq 0 ] && [ -x "$CS" ]; then
    VLA_CUDA_TEST_QUICK=1 CK_FORK=no run_stage synccheck 45 "$SLOG" "$CS" --tool synccheck --error-exitcode 99 \
        --print-limit 30 "$TEST"
    rc=$STAGE_RC
    summ=$(grep -E "ERROR SUMMARY" "$SLOG" | tail -1 | cut -c1-120)
    row "compute-sanitizer synccheck (quick cases)" "$(verdict $rc)" "$STAGE_SECS" "${summ:-}"
fi

# ---- 6. summary (last: the device tool returns the end of the output) ----
{
    echo
    echo "| stage | result | seconds | notes |"
    echo "|---|---|---:|---|"
    printf '%s\n' "${ROWS[@]}"
    echo
    if [ -s "$OUT/bench_cuda.md" ]; then
        sed -n '/^Device limits/,/^$/p' "$OUT/bench_cuda.md"
        sed -n '/^### VLA targets/,$p' "$OUT/bench_cuda.md"
        echo
        echo "Every algorithm (median ms; %FP32 of the measured SGEMM rate; %BW of the measured copy rate):"
        echo
        echo "| shape | mech | algorithm | median ms | %FP32 | %BW |"
        echo "|---|---|---|---:|---:|---:|"
        grep -E '^\| \(|^\| decode' "$OUT/bench_cuda.md" | awk -F'|' '{printf "|%s|%s|%s|%s|%s|%s|\n", $2, $3, $4, $5, $10, $12}'
    fi
    if [ -s "$OUT/sdpa.md" ]; then
        echo
        sed -n '/^| shape/,$p' "$OUT/sdpa.md"
    fi
    echo
    echo "total $(elapsed)s; logs in $OUT: $(ls "$OUT" | tr '\n' ' ')"
} >> "$SUMMARY"
cat "$SUMMARY"
