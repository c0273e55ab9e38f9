#!/usr/bin/env bash
# Per-kernel GPU times of the chunk-parallel VLA form on the H200 (VLA_CUDA_KERNEL_TIMES=1: CUDA
# events between the kernels of each call, printed by the library), for the target shapes, to
# see which kernel to work on. Builds like h200_chunkpar.sh.
# Usage on the device (carry [".debs"]): bash benchmarks/h200_profile.sh   (logs in $OUT)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF &&
  cmake --build "$B" -j"$(nproc)" --target bench_cuda_targets; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
BENCH=$(find "$B" -name bench_cuda_targets -type f | head -1)
: > "$OUT/profile.txt"
for s in ${VLA_PROFILE_SHAPES:-1,4,32,2048 1,4,32,131072 8,16,64,2048 8,16,64,32768}; do
  echo "== shape $s" >> "$OUT/profile.txt"
  VLA_CUDA_KERNEL_TIMES=1 timeout 100 "$BENCH" --no-limits --quick --only "${VLA_PROFILE_ONLY:-vla-chunked}" --shape "$s" 2>&1 |
    grep -E "chunkpar|cycles|ms \(" | tail -4 >> "$OUT/profile.txt"
done
cat "$OUT/profile.txt"
