#!/usr/bin/env bash
# GPU tests on the exact code of the end of the 2026-11-30 session (after the timer API):
# test_cuda, vla-check on CUDA and on NVIDIA's OpenCL, and the OpenCL Check suite.
# Run on the device (carry [".debs"]): bash benchmarks/h200_final_check.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="75;90" &&
  cmake --build "$B" -j"$(nproc)" --target test_cuda test_opencl vla-check vla-run; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
cd "$B/tests"
CK_FORK=no timeout 120 ./test_cuda > "$OUT/test_cuda.log" 2>&1; echo "test_cuda exit $?" | tee -a "$OUT/summary.txt"
timeout 60 "$B/tools/vla-check" --backend cuda > "$OUT/vla-check-cuda.txt" 2>&1; echo "vla-check cuda exit $?" | tee -a "$OUT/summary.txt"
"$B/tools/vla-run" --list-devices | tee -a "$OUT/summary.txt"
ocl=$("$B/tools/vla-run" --list-devices | awk '/^opencl/ && /NVIDIA/ {print $1; exit}')
timeout 90 "$B/tools/vla-check" --backend "${ocl:-opencl:1:0}" > "$OUT/vla-check-opencl-nvidia.txt" 2>&1; echo "vla-check ${ocl:-opencl:1:0} exit $?" | tee -a "$OUT/summary.txt"
timeout 60 ./test_opencl > "$OUT/test_opencl.log" 2>&1; echo "test_opencl exit $?" | tee -a "$OUT/summary.txt"
tail -n 2 "$OUT/test_cuda.log" "$OUT/vla-check-cuda.txt" "$OUT/vla-check-opencl-nvidia.txt" "$OUT/test_opencl.log"
grep -h "timer" "$OUT/test_opencl.log"
