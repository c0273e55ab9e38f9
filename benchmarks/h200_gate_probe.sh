#!/usr/bin/env bash
# Session 15 on the H200: where the difference between ungated and gated times comes from. At
# (1,4,32) it grows with T (about 2 us at T = 2048, 50 us at 131072, 3.5%), so it is not only the
# host's part of a call. bench_cuda_targets --only vla-chunked,delta at (1,4,32) T = 8192 and
# 131072: ungated, gated 50, 500 and 3000 us, ungated again; the SM clocks printed before and
# after (nvidia-smi). Usage on the device (carry [".debs"]): OUT=... bash benchmarks/h200_gate_probe.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-gate
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF &&
  cmake --build "$B" -j"$(nproc)" --target bench_cuda_targets; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
BENCH=$(find "$B" -name bench_cuda_targets -type f | head -1)
clocks() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.applications.graphics,power.draw,temperature.gpu --format=csv,noheader; }
echo "clocks (sm, max sm, application, power, temperature): $(clocks)"
for g in "" 50 500 3000 ""; do
  f="$OUT/bench${g:+-gate$g}.txt"
  "$BENCH" --no-limits ${g:+--gate $g} --only vla-chunked,delta --shape 1,4,32,8192 --shape 1,4,32,131072 > "$f.md" 2>> "$f"
  echo "${g:-ungated}: $(grep -E ' ms \(' "$f" | tail -4 | awk '{printf "%s %s %s | ", $2, $3, $(NF-3)}') clocks $(clocks)"
done
