#!/usr/bin/env bash
# A short correctness run on the H200 for a small kernel change, in one device call: build the
# fat binary (sm_75 + sm_90), run test_cuda (every check) and vla-check --backend cuda, then
# compute-sanitizer memcheck and racecheck over test_cuda's ops cases whose name contains
# $CHECK_ONLY (VLA_CUDA_TEST_ONLY; default "softmax").
# Usage on the device (carry [".debs"]): bash benchmarks/h200_check.sh
# Writes $OUT/summary.txt and $OUT/all.tar.gz (every log).
H200_SCRATCH=/tmp/check
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, W, S, log()
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200-fat
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="75;90" -DVLA_OPENCL=OFF &&
  cmake --build "$B" -j"$(nproc)" --target test_cuda vla-check; } > "$W/build.log" 2>&1 || { tail -40 "$W/build.log"; exit 1; }
log "built (sm_75 + sm_90)"
CK_FORK=no timeout 200 "$B/tests/test_cuda" > "$W/test_cuda.log" 2>&1; log "test_cuda exit $?: $(tail -n 1 "$W/test_cuda.log")"
timeout 60 "$B/tools/vla-check" --backend cuda > "$W/vla-check-cuda.txt" 2>&1; log "vla-check cuda exit $?: $(tail -n 1 "$W/vla-check-cuda.txt")"
for tool in memcheck racecheck; do
  VLA_CUDA_TEST_ONLY="${CHECK_ONLY:-softmax}" CK_RUN_CASE=ops CK_FORK=no timeout 200 compute-sanitizer --tool $tool \
    --error-exitcode 9 "$B/tests/test_cuda" > "$W/sanitizer-$tool-test_cuda.txt" 2>&1
  log "compute-sanitizer $tool (test_cuda ops: ${CHECK_ONLY:-softmax}) exit $?: $(grep -h 'SUMMARY' "$W/sanitizer-$tool-test_cuda.txt" | tail -n 1)"
done
grep -h "Checks" "$W"/sanitizer-*.txt | tee -a "$S"
cp "$S" "$OUT/summary.txt"
tar -C "$W" -czf "$OUT/all.tar.gz" .
