#!/usr/bin/env bash
# Session 2 on the H200, in one device call, on the fat binary (sm_75 + sm_90) as shipped:
#   1. test_cuda (every mechanism x algorithm vs float64 and the CPU backend), vla-check on
#      CUDA and on NVIDIA's OpenCL driver;
#   2. bench_cuda_targets, every row (the issue's shapes, limits measured in the same run);
#   3. vla-bench --backend cuda over T = 512..32768 at B=1 H=4 d=32 (the scaling plot);
#   4. compute-sanitizer memcheck and racecheck over vla-check's VLA cases;
#   5. PoCL 5 (this machine's CPU OpenCL) softmax under PoCL's work-group methods, to narrow
#      down the softmax failure of the OpenCL issue.
# Usage on the device (carry [".debs"]): bash benchmarks/h200_session2.sh
# Writes $OUT/summary.txt and $OUT/all.tar.gz (every log).
H200_SCRATCH=/tmp/session2
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, W, S, log()
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200-fat
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="75;90" &&
  cmake --build "$B" -j"$(nproc)" --target test_cuda vla-check vla-bench vla-run bench_cuda_targets; } > "$W/build.log" 2>&1 ||
  { tail -40 "$W/build.log"; exit 1; }
log "built (sm_75 + sm_90)"
CK_FORK=no timeout 150 "$B/tests/test_cuda" > "$W/test_cuda.log" 2>&1; log "test_cuda exit $?: $(tail -n 1 "$W/test_cuda.log")"
timeout 60 "$B/tools/vla-check" --backend cuda > "$W/vla-check-cuda.txt" 2>&1; log "vla-check cuda exit $?: $(tail -n 1 "$W/vla-check-cuda.txt")"
"$B/tools/vla-run" --list-devices > "$W/devices.txt" 2>&1
ocl=$("$B/tools/vla-run" --list-devices 2>/dev/null | awk '/^opencl/ && /NVIDIA/ {print $1; exit}')
pocl=$("$B/tools/vla-run" --list-devices 2>/dev/null | awk '/^opencl/ && /Portable/ {print $1; exit}')
log "devices: nvidia opencl ${ocl:-none}, pocl ${pocl:-none}"
[ -n "$ocl" ] && { timeout 90 "$B/tools/vla-check" --backend "$ocl" > "$W/vla-check-opencl-nvidia.txt" 2>&1; log "vla-check $ocl exit $?: $(tail -n 1 "$W/vla-check-opencl-nvidia.txt")"; }
BENCH=$(find "$B" -name bench_cuda_targets -type f | head -1)
timeout 260 "$BENCH" --json "$W/bench_cuda.json" > "$W/bench_cuda.md" 2> "$W/bench_cuda.err"; log "bench_cuda_targets exit $?"
timeout 60 "$B/tools/vla-bench" --backend cuda -T 512,1024,2048,4096,8192,16384,32768 -B 1 -H 4 -d 32 -r 10 --budget 50 \
  --save "$W/vla-bench-cuda" > /dev/null 2> "$W/vla-bench-cuda.err"; log "vla-bench cuda exit $?"
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 "$B/tools/vla-check" --backend cuda --mechanism vla \
    > "$W/sanitizer-$tool.txt" 2>&1
  log "compute-sanitizer $tool exit $?: $(grep -h 'SUMMARY' "$W/sanitizer-$tool.txt" | tail -n 1)"
done
if [ -n "$pocl" ]; then
  for m in default cbs loopvec; do
    if [ $m = default ]; then env=(); else env=(POCL_WORK_GROUP_METHOD=$m); fi
    env "${env[@]}" POCL_KERNEL_CACHE=0 timeout 60 "$B/tools/vla-check" --backend "$pocl" --mechanism softmax > "$W/pocl5-softmax-$m.txt" 2>&1
    log "pocl softmax ($m) exit $?: $(tail -n 1 "$W/pocl5-softmax-$m.txt")"
  done
  POCL_CPU_MAX_CU_COUNT=1 POCL_KERNEL_CACHE=0 timeout 60 "$B/tools/vla-check" --backend "$pocl" --mechanism softmax > "$W/pocl5-softmax-1cu.txt" 2>&1
  log "pocl softmax (one compute unit) exit $?: $(tail -n 1 "$W/pocl5-softmax-1cu.txt")"
fi
cp "$S" "$OUT/summary.txt"
tar -C "$W" -czf "$OUT/all.tar.gz" .
grep -E "^\| \(|^\| decode" "$W/bench_cuda.md" | cut -d'|' -f2-8 | head -60
