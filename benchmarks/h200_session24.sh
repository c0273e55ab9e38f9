#!/usr/bin/env bash
# Session 24 on the H200: the fraction-free 16 x 16 inversion (VLA_INV16_FF, vla_inverse.cuh)
# against the old form, in isolation and in the forward, in one call.
#  1. gj_bench.txt: benchmarks/gj_inverse_bench.cu built with -DVLA_INV16_FF=0 and =1 (blocked_inverse's
#     cycles a block at N = 32 and 64, random and hard matrices, and its error against a float64
#     Gauss-Jordan on the host), beside step 2's builds;
#  2. then benchmarks/h200_session21.sh with $S21_* as given (old = .ab/old, the tree before the
#     change, carried), and the phase-cycle lines of its VLA_CUDA_KERNEL_TIMES rounds printed.
# Usage on the device (carry [".debs", ".ab"]): OUT=... S21_...=... bash benchmarks/h200_session24.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
G=/tmp/s24gj && rm -rf "$G" && mkdir -p "$G"
for ff in 0 1; do
  nvcc -O3 -std=c++17 -arch=sm_90 -I kernels/cuda -DVLA_INV16_FF=$ff benchmarks/gj_inverse_bench.cu -o "$G/gj$ff" > "$G/build$ff.log" 2>&1 &
done
wait
{
  for ff in 0 1; do
    echo "== VLA_INV16_FF=$ff"
    if [ -x "$G/gj$ff" ]; then timeout 120 "$G/gj$ff" 2>&1; else tail -20 "$G/build$ff.log"; fi
  done
} > "$OUT/gj_bench.txt" 2>&1
grep -E "^==|blocked_inverse" "$OUT/gj_bench.txt"
bash "$ROOT/benchmarks/h200_session21.sh"
for f in /tmp/s21/bench-r1-*KERNEL_TIMES*-gate.txt; do
  [ -f "$f" ] || continue
  echo "== $(basename "$f")"
  grep -E "^chunkpar|^apart block cycles" "$f" | awk '/^chunkpar/{k = $2 " " $3 " " $4 " " $5; show = ++n[k] <= 2} show' | cut -c1-400
done | tee "$OUT/phase-cycles.txt"
