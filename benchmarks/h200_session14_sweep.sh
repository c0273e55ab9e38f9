#!/usr/bin/env bash
# Session 14: the README's headline figures again, on session 14's kernels (sm_90 build):
#  - vla-bench --backend cuda over T = 512..32768 at B=1 H=4 d=32 (the scaling plot; plot it with
#    benchmarks/plot_scaling.sh vla-bench-cuda.csv vla-bench-cuda, which needs gnuplot);
#  - benchmarks/bench_sdpa.py (PyTorch's causal SDPA, fp32 and bf16, at the target shapes).
# Usage on the device (carry [".debs"]): OUT=... bash benchmarks/h200_session14_sweep.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200-sweep
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF &&
  cmake --build "$B" -j"$(nproc)" --target vla-bench; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
timeout 120 env -u LD_LIBRARY_PATH python3 "$ROOT/benchmarks/bench_sdpa.py" --json "$OUT/sdpa.json" > "$OUT/sdpa.md" 2> "$OUT/sdpa.err"
echo "bench_sdpa exit $?"
timeout 150 "$B/tools/vla-bench" --backend cuda -T 512,1024,2048,4096,8192,16384,32768 -B 1 -H 4 -d 32 -r 10 --budget 50 \
  --save "$OUT/vla-bench-cuda" > /dev/null 2> "$OUT/vla-bench-cuda.err"
echo "vla-bench cuda exit $?"
cat "$OUT/sdpa.md"
grep -v "^$" "$OUT/vla-bench-cuda.md" | tail -40
