#!/usr/bin/env bash
# Session 24, run 5 on the H200: the 16 x 16 inversion by 2 or 4 warps (VLA_INV16_WARPS, vla_inverse.cuh)
# against one (the default), in isolation and in the forward, in one call:
#  1. gj_bench.txt: benchmarks/gj_inverse_bench.cu built with -DVLA_INV16_WARPS=1, 2 and 4;
#  2. benchmarks/h200_session21.sh with the builds old (.ab/old), new (this tree, one warp), w2 and w4:
#     gated rounds at (1,4,32) T = 2048, 8192, 32768 and (8,16,64) T = 2048, bitwise old:w2 and
#     old:w4 (the same sums: the same bits), test_cuda on w2.
# Usage on the device (carry [".debs", ".ab"]): OUT=... bash benchmarks/h200_session24_inv.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
G=/tmp/s24gj && rm -rf "$G" && mkdir -p "$G"
for w in 1 2 4; do
  nvcc -O3 -std=c++17 -arch=sm_90 -I kernels/cuda -DVLA_INV16_WARPS=$w benchmarks/gj_inverse_bench.cu -o "$G/gj$w" > "$G/build$w.log" 2>&1 &
done
wait
{
  for w in 1 2 4; do
    echo "== VLA_INV16_WARPS=$w"
    if [ -x "$G/gj$w" ]; then timeout 120 "$G/gj$w" 2>&1; else tail -20 "$G/build$w.log"; fi
  done
} > "$OUT/gj_bench.txt" 2>&1
grep -E "^==|blocked_inverse" "$OUT/gj_bench.txt"
S21_BUILDS="new: w2:-DVLA_INV16_WARPS=2 w4:-DVLA_INV16_WARPS=4" S21_AB="old new w2 w4" \
  S21_SHAPES="1,4,32,2048 1,4,32,8192 1,4,32,32768 8,16,64,2048" S21_ROUNDS=2 \
  S21_BITWISE="old:w2 old:w4" S21_TESTS="w2" S21_SASS=" " OUT=$OUT bash benchmarks/h200_session21.sh
