#!/usr/bin/env bash
# The OpenCL backend on the H200 machine's two OpenCL drivers after softmax_rows (CPU devices):
# test_opencl and vla-check on PoCL 5 (this machine's CPU OpenCL; the OpenCL issue's softmax
# failure) and vla-check on NVIDIA's OpenCL (the GPU keeps softmax_fused).
# Usage on the device (carry [".debs"]): bash benchmarks/h200_pocl5.sh   (logs in $OUT)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200-ocl
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DVLA_CUDA=OFF &&
  cmake --build "$B" -j"$(nproc)" --target test_opencl vla-check vla-run; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
"$B/tools/vla-run" --list-devices | tee "$OUT/summary.txt"
pocl=$("$B/tools/vla-run" --list-devices | awk '/^opencl/ && /Portable/ {print $1; exit}')
ocl=$("$B/tools/vla-run" --list-devices | awk '/^opencl/ && /NVIDIA/ {print $1; exit}')
cd "$B/tests"
CK_FORK=no timeout 120 ./test_opencl > "$OUT/test_opencl-pocl5.log" 2>&1; echo "test_opencl (first OpenCL device, opencl:0:0) exit $?: $(tail -n 1 "$OUT/test_opencl-pocl5.log")" | tee -a "$OUT/summary.txt"
timeout 120 "$B/tools/vla-check" --backend "$pocl" > "$OUT/vla-check-opencl-pocl5.txt" 2>&1; echo "vla-check $pocl exit $?: $(tail -n 1 "$OUT/vla-check-opencl-pocl5.txt")" | tee -a "$OUT/summary.txt"
timeout 90 "$B/tools/vla-check" --backend "$ocl" > "$OUT/vla-check-opencl-nvidia.txt" 2>&1; echo "vla-check $ocl exit $?: $(tail -n 1 "$OUT/vla-check-opencl-nvidia.txt")" | tee -a "$OUT/summary.txt"
