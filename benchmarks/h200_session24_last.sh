#!/usr/bin/env bash
# Session 24, run 6 (the last) on the H200, on the tree it lands (inv16_warps<2> by default; carry
# [".debs", ".ab"], .ab/old = d221605):
#  1. sm_90 builds of old and new (bench_cuda_targets), beside benchmarks/h200_ptx75.sh: the sm_75
#     code as a compute_75 JIT build, test_cuda and vla-check --backend cuda (ptx75.tar.gz);
#  2. final.txt: one ungated and one gated (--gate 3000) round of old and new at the six target shapes.
# Usage on the device: OUT=... bash benchmarks/h200_session24_last.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
source benchmarks/h200_env.sh
for t in old new; do
  src=$ROOT; [ $t = old ] && src=$ROOT/.ab/old
  { cmake -S "$src" -B "$ROOT/build-s24-$t" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF &&
    cmake --build "$ROOT/build-s24-$t" -j8 --target bench_cuda_targets; } > "/tmp/build-s24-$t.log" 2>&1 &
done
OUT=$OUT bash benchmarks/h200_ptx75.sh
wait
shapes=(--shape 1,4,32,2048 --shape 1,4,32,8192 --shape 1,4,32,32768 --shape 1,4,32,131072 --shape 8,16,64,2048 --shape 8,16,64,32768)
{
  for mode in ungated gated; do
    for t in old new; do
      b=$(find "$ROOT/build-s24-$t/" -name bench_cuda_targets -type f | head -1)
      g=(); [ $mode = gated ] && g=(--gate 3000)
      echo "== $t $mode: $(timeout 120 "$b" --no-limits "${g[@]}" --only vla-chunked "${shapes[@]}" 2>&1 >/dev/null |
        grep -E ' ms \(' | awk '{printf "%s %s %s | ", $1, $2, $(NF-3)}')"
    done
  done
} 2>&1 | tee "$OUT/final.txt"
