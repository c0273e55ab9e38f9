#!/usr/bin/env bash
# Session 14 on the H200, one device call:
#  - mma.md: benchmarks/mma_chain_bench.cu (TF32 mma.sync chains as in session 10, plus the FP64
#    tensor-core step mma.m8n8k4 .f64 and cvt.f64.f32 throughput), built beside the A/B's builds;
#  - benchmarks/h200_ab.sh with the caller's AB_* settings (logs in $OUT/ab.tar.gz).
# Usage on the device (carry [".debs", ".ab"]): OUT=... AB_...=... bash benchmarks/h200_session14.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/cuda/bin
nvcc -O3 -std=c++17 -arch=sm_90 benchmarks/mma_chain_bench.cu -o /tmp/mma_bench > /tmp/mma-build.log 2>&1 &
MB=$!
OUT=$OUT bash "$ROOT/benchmarks/h200_ab.sh" > "$OUT/ab.txt" 2>&1
echo "h200_ab exit $?"
wait $MB || { tail -20 /tmp/mma-build.log; exit 1; }
timeout 60 /tmp/mma_bench > "$OUT/mma.md" 2>&1
echo "mma_bench exit $?"
cat "$OUT/mma.md"
grep -E "^\[|^==" "$OUT/ab.txt" | cut -c1-1500
