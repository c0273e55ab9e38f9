#!/usr/bin/env bash
# Linear and DeltaNet chunked on the chunk-parallel kernels, on the H200, in one short device call:
# build (sm_90), test_cuda, vla-check --backend cuda, bench_cuda_targets for the linear and delta
# rows (--quick: 3-5 repetitions, T <= 32768; no limits), compute-sanitizer memcheck over
# vla-check's linear and delta chunked cases.
# Usage on the device (carry [".debs"]): bash benchmarks/h200_linear_delta.sh   (logs in $OUT)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF &&
  cmake --build "$B" -j"$(nproc)" --target test_cuda vla-check bench_cuda_targets; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
cd "$B/tests"
CK_FORK=no timeout 60 ./test_cuda > "$OUT/test_cuda.log" 2>&1; echo "test_cuda exit $?: $(tail -n 1 "$OUT/test_cuda.log")" | tee "$OUT/summary.txt"
timeout 30 "$B/tools/vla-check" --backend cuda > "$OUT/vla-check-cuda.txt" 2>&1; echo "vla-check cuda exit $?: $(tail -n 1 "$OUT/vla-check-cuda.txt")" | tee -a "$OUT/summary.txt"
BENCH=$(find "$B" -name bench_cuda_targets -type f | head -1)
timeout 40 "$BENCH" --quick --no-limits --only linear,delta > "$OUT/bench.md" 2> "$OUT/bench.err"; echo "bench exit $?" | tee -a "$OUT/summary.txt"
timeout 30 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tools/vla-check" --backend cuda --mechanism linear,delta --algo chunked > "$OUT/memcheck.txt" 2>&1
echo "memcheck exit $?: $(grep -h SUMMARY "$OUT/memcheck.txt" | tail -n 1)" | tee -a "$OUT/summary.txt"
grep -E "^\| \(" "$OUT/bench.md" | cut -d'|' -f2-6
