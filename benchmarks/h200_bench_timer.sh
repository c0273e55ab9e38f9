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
PREFIX=/tmp/vla-deb-prefix MA=x86_64-linux-gnu
mkdir -p "$PREFIX"
for d in .debs/*.deb; do dpkg -x "$d" "$PREFIX"; done
find "$PREFIX" -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$PREFIX/usr|" {} + 2>/dev/null
export LD_LIBRARY_PATH=$PREFIX/usr/lib/$MA:$PREFIX/usr/lib/$MA/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$PREFIX/usr/lib/$MA/pkgconfig:$PREFIX/usr/lib/$MA/openblas-pthread/pkgconfig
export CMAKE_PREFIX_PATH=$PREFIX/usr PATH=$PATH:/usr/local/cuda/bin:$PREFIX/usr/bin
mkdir -p /etc/OpenCL/vendors && echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
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
