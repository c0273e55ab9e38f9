#!/usr/bin/env bash
# vla-bench on the H200 with device-clock timing (vla_backend_timer: CUDA events on CUDA,
# OpenCL profiling events through NVIDIA's OpenCL driver), the paper's Figure 3 sweep at
# B=1 H=4 d=32. Run on the device (carry [".debs"]): bash benchmarks/h200_bench_timer.sh
# Writes 8 files to $OUT: the build log and vla-bench's md/csv/json for each backend, plus a log.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="75;90" -DVLA_BUILD_TESTS=OFF &&
  cmake --build "$B" -j"$(nproc)" --target vla-bench vla-check; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
LOG=$OUT/run.log
SWEEP="-T 512,1024,2048,4096,8192,16384,32768 -B 1 -H 4 -d 32 -r 10"
timeout 80 "$B/tools/vla-bench" --backend cuda $SWEEP --budget 70 --save "$OUT/vla-bench-cuda" > /dev/null 2>> "$LOG"
echo "vla-bench cuda exit $?" >> "$LOG"
timeout 70 "$B/tools/vla-bench" --backend opencl $SWEEP --budget 60 --save "$OUT/vla-bench-opencl" > /dev/null 2>> "$LOG"
echo "vla-bench opencl exit $?" >> "$LOG"
timeout 40 "$B/tools/vla-check" --backend cuda >> "$LOG" 2>&1
echo "vla-check cuda exit $?" >> "$LOG"
grep -h "timer:" "$OUT"/vla-bench-*.md
grep -h -A13 "^### Summary" "$OUT"/vla-bench-*.md
tail -4 "$LOG"
