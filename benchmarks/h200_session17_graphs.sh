#!/usr/bin/env bash
# Session 17 on the H200, one device call: the graph cache under compute-sanitizer. Builds test_cuda
# and bench_cuda_targets (sm_90), then
#  - memcheck and racecheck over test_cuda's "paths" cases (test_graph_replay: capture, replay on
#    new data in the same buffers, eviction; the carry path; softmax with non-finite values);
#  - the decode row three times (its kernel is not graphed: T = 1 runs the sequential form).
# Usage on the device (carry [".debs"]): OUT=... bash benchmarks/h200_session17_graphs.sh
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, S, log()
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200-s17
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF &&
  cmake --build "$B" -j"$(nproc)" --target test_cuda bench_cuda_targets; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
log "built (sm_90)"
for tool in memcheck racecheck; do
  CK_RUN_CASE=paths CK_FORK=no timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 "$B/tests/test_cuda" \
    > "$OUT/sanitizer-$tool-paths.txt" 2>&1
  log "compute-sanitizer $tool (test_cuda paths) exit $?: $(grep -h 'SUMMARY' "$OUT/sanitizer-$tool-paths.txt" | tail -n 1);" \
    "$(grep -h 'Checks' "$OUT/sanitizer-$tool-paths.txt" | tail -n 1)"
done
grep -h "graph replay" "$OUT"/sanitizer-memcheck-paths.txt | tee -a "$OUT/summary.txt"
BENCH=$(find "$B" -name bench_cuda_targets -type f | head -1)
for r in 1 2 3; do
  "$BENCH" --no-limits --only decode 2>&1 | grep -E "decode" | tail -n 1 | sed "s/^/decode run $r: /" | tee -a "$OUT/summary.txt"
done
