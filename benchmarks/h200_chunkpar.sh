#!/usr/bin/env bash
# The chunk-parallel VLA kernels (kernels/cuda/vla_chunkpar.cu) on the H200, in one device call:
# build (sm_90 only, to fit the call), test_cuda (every mechanism x algorithm vs float64 and the
# CPU backend), vla-check --backend cuda, the target shapes for VLA chunked and two-level,
# softmax and the decode step (bench_cuda_targets, with the copy and GEMM limits), then
# compute-sanitizer memcheck and racecheck over vla-check's VLA chunked cases while time is left.
# Usage on the device (carry [".debs"]): bash benchmarks/h200_chunkpar.sh   (logs in $OUT)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
ARCH=${VLA_CUDA_ARCH:-90}
mkdir -p "$OUT"
START=$SECONDS
left() { echo $(( ${VLA_DEADLINE:-570} - (SECONDS - START) )); }
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DVLA_OPENCL=OFF &&
  cmake --build "$B" -j"$(nproc)" --target test_cuda vla-check bench_cuda_targets; } > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
echo "build done at $((SECONDS - START)) s" | tee "$OUT/summary.txt"
cd "$B/tests"
CK_FORK=no timeout 150 ./test_cuda > "$OUT/test_cuda.log" 2>&1; echo "test_cuda exit $? at $((SECONDS - START)) s" | tee -a "$OUT/summary.txt"
timeout 60 "$B/tools/vla-check" --backend cuda > "$OUT/vla-check-cuda.txt" 2>&1; echo "vla-check cuda exit $? at $((SECONDS - START)) s" | tee -a "$OUT/summary.txt"
BENCH=$(find "$B" -name bench_cuda_targets -type f | head -1)
timeout $(( $(left) - 120 )) "$BENCH" --only "${VLA_BENCH_ONLY:-vla-chunked,vla-two-level,softmax,decode}" --json "$OUT/bench.json" \
  > "$OUT/bench.md" 2> "$OUT/bench.err"; echo "bench exit $? at $((SECONDS - START)) s" | tee -a "$OUT/summary.txt"
for tool in memcheck racecheck; do
  (( $(left) > 40 )) || { echo "$tool: no time left" | tee -a "$OUT/summary.txt"; continue; }
  timeout $(( $(left) / 2 )) compute-sanitizer --tool $tool --error-exitcode 9 "$B/tools/vla-check" --backend cuda \
    --mechanism vla --algo chunked > "$OUT/sanitizer-$tool.txt" 2>&1
  echo "compute-sanitizer $tool exit $? at $((SECONDS - START)) s" | tee -a "$OUT/summary.txt"
done
tail -n 3 "$OUT/test_cuda.log" "$OUT/vla-check-cuda.txt"; grep -E "^\|" "$OUT/bench.md" | head -60; tail -n 3 "$OUT"/sanitizer-*.txt
