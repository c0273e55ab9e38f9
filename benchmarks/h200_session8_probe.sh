#!/usr/bin/env bash
# Session 8, first H200 call: (1) times every form of the segment inversion in isolation
# (benchmarks/gj_inverse_bench.cu) and keeps its SASS; (2) the per-kernel ledger of the VLA
# chunk-parallel forward (VLA_CUDA_KERNEL_TIMES=1: CUDA events between kernels, clock64 phases of
# one apart_kernel block) at (1,4,32) T = 2048, 8192 and (8,16,64) T = 2048.
# Usage on the device (carry [".debs"]): bash benchmarks/h200_session8_probe.sh
H200_SCRATCH=/tmp/probe
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, W, S, log()
source "$ROOT/benchmarks/h200_env.sh"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > "$W/device.txt" 2>&1
B=$ROOT/build-h200-90
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF &&
  cmake --build "$B" -j"$(nproc)" --target bench_cuda_targets; } > "$W/build.log" 2>&1 &
nvcc -O3 -std=c++17 -arch=sm_90 -I kernels/cuda benchmarks/gj_inverse_bench.cu -o "$W/gj_bench" > "$W/gj-build.log" 2>&1
log "gj_bench built: $?"
timeout 120 "$W/gj_bench" > "$W/gj.md" 2>&1; log "gj_bench exit $?"
cuobjdump -sass "$W/gj_bench" > "$W/gj.sass" 2>&1; xz -9 "$W/gj.sass"
wait
bench=$(find "$B" -name bench_cuda_targets -type f | head -1)
[ -x "$bench" ] || { log "build failed"; tail -30 "$W/build.log"; exit 1; }
log "built bench_cuda_targets (sm_90)"
for s in 1,4,32,2048 1,4,32,8192 8,16,64,2048; do
  echo "== vla-chunked shape $s" >> "$W/profile.txt"
  VLA_CUDA_KERNEL_TIMES=1 timeout 60 "$bench" --no-limits --quick --only vla-chunked --shape "$s" 2>&1 |
    grep -E "chunkpar|cycles|ms \(" | tail -6 >> "$W/profile.txt"
  timeout 60 "$bench" --no-limits --only vla-chunked --shape "$s" 2>&1 | grep -E " ms \(" >> "$W/profile.txt"
done
log "done"
cp "$S" "$OUT/summary.txt"; cp "$W/gj.md" "$W/profile.txt" "$OUT/" 2>/dev/null
tar -C "$W" --exclude gj_bench -czf "$OUT/all.tar.gz" .
cat "$W/gj.md" "$W/profile.txt"
