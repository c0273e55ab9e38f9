#!/usr/bin/env bash
# The whole H200 session of 2026-11-30 in one device call (the device tool returns at most 8
# files, so everything is packed into one tarball beside the CUDA summary):
#   1. benchmarks/cuda_h200.sh: build (sm_75 + sm_90), CUDA tests, vla-check --backend cuda,
#      compute-sanitizer, the speed targets and PyTorch SDPA;
#   2. vla-bench on CUDA and on the NVIDIA OpenCL driver (libnvidia-opencl.so.1 registered in
#      /etc/OpenCL/vendors/), the paper's Figure 3 sweep at B=1 H=4 d=32, CSV + JSON;
#   3. vla-check --backend opencl on the GPU.
# Usage on the device (carry [".debs"]): bash benchmarks/h200_session.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
FINAL=${OUT:-$ROOT/h200-out}
WORK=/tmp/h200-session
rm -rf "$WORK" && mkdir -p "$WORK" "$FINAL"
export VLA_H200_DEADLINE=${VLA_H200_DEADLINE:-350}
OUT=$WORK bash benchmarks/cuda_h200.sh
cp "$WORK/summary.md" "$FINAL/cuda-summary.md" 2>/dev/null

mkdir -p /etc/OpenCL/vendors && echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
B=$ROOT/build-h200
export LD_LIBRARY_PATH=/tmp/vla-deb-prefix/usr/lib/x86_64-linux-gnu:/tmp/vla-deb-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cmake -S "$ROOT" -B "$B" -DVLA_OPENCL=ON >/dev/null 2>&1
timeout 60 cmake --build "$B" -j16 --target vla-bench vla-check > "$WORK/build-tools.log" 2>&1
SWEEP="-T 512,1024,2048,4096,8192,16384,32768 -B 1 -H 4 -d 32 -r 10"
timeout 60 "$B/tools/vla-bench" --backend cuda $SWEEP --budget 50 --save "$WORK/vla-bench-cuda" > "$WORK/vla-bench.log" 2>&1
echo "vla-bench cuda exit $?" >> "$WORK/vla-bench.log"
timeout 50 "$B/tools/vla-bench" --backend opencl $SWEEP --budget 40 --save "$WORK/vla-bench-opencl" >> "$WORK/vla-bench.log" 2>&1
echo "vla-bench opencl exit $?" >> "$WORK/vla-bench.log"
timeout 30 "$B/tools/vla-check" --backend opencl > "$WORK/vla-check-opencl-gpu.txt" 2>&1
echo "vla-check opencl exit $?" >> "$WORK/vla-bench.log"
tar czf "$FINAL/h200-session.tar.gz" -C /tmp h200-session
cat "$WORK/vla-bench.log" | tail -40
grep -h -A12 "^### Summary" "$WORK"/vla-bench-*.md 2>/dev/null | head -60
tail -3 "$WORK/vla-check-opencl-gpu.txt"
cat "$WORK/summary.md" | tail -60
