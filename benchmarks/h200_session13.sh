#!/usr/bin/env bash
# Session 13 on the H200, one device call:
#  - gj.md: the segment inverse's forms in isolation (benchmarks/gj_inverse_bench.cu, built beside
#    the A/B's builds, run after its timings): gj_inverse, blocked_inverse, and the new
#    refined_inverse32 (a float32 Gauss-Jordan inverse refined by Newton steps in double) with the
#    Newton steps it took, on random and on ill-conditioned matrices;
#  - benchmarks/h200_session12.sh with the caller's AB_* / TL_* / SWEEP / BITWISE settings (the A/B
#    of benchmarks/h200_ab.sh in $OUT/ab, then timeline.txt, sweep.txt, bitwise.txt).
# Usage on the device (carry [".debs", ".ab"]): OUT=... AB_...=... bash benchmarks/h200_session13.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/cuda/bin
nvcc -O3 -std=c++17 -arch=sm_90 -I kernels/cuda benchmarks/gj_inverse_bench.cu -o /tmp/gj_bench > /tmp/gj-build.log 2>&1 &
GJ=$!
OUT=$OUT bash "$ROOT/benchmarks/h200_session12.sh"
wait $GJ || { tail -20 /tmp/gj-build.log; exit 1; }
timeout 120 /tmp/gj_bench > "$OUT/gj.md" 2>&1
echo "gj_bench exit $?"
cat "$OUT/gj.md"
