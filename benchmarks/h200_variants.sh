#!/usr/bin/env bash
# (Session 11 removed the VLA_CP_VARIANT switch with the blocked Cholesky pass: every variant now
# runs the same code. Kept as the record of what session 5 ran.)
# Session 5 on the H200: the chunk-parallel form's development variants (VLA_CP_VARIANT bits,
# kernels/cuda/vla_kernels.cuh: 1 = the Cholesky's trailing updates on tensor cores, 2 = the Z
# solve's off-diagonal blocks on tensor cores) held against each other in one device call, on an
# sm_90 build:
#   1. test_cuda under each variant in $VLA_VARIANTS (default "3 0 1 2"): every case's error
#      against float64 (the VLA chunked lines) and the pass count;
#   2. bench_cuda_targets --only vla-chunked,delta (the target shapes) under each variant;
#   3. per-kernel times (VLA_CUDA_KERNEL_TIMES=1) at $VLA_PROFILE_SHAPES under the first variant.
# Usage on the device (carry [".debs"]): OUT=... bash benchmarks/h200_variants.sh
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, S, log()
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF &&
  cmake --build "$B" -j"$(nproc)" --target test_cuda bench_cuda_targets; } > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
log "built (sm_90)"
BENCH=$(find "$B" -name bench_cuda_targets -type f | head -1)
VARIANTS=${VLA_VARIANTS:-3 0 1 2}
for v in $VARIANTS; do
  VLA_CP_VARIANT=$v CK_FORK=no timeout 150 "$B/tests/test_cuda" > "$OUT/test_cuda-v$v.log" 2>&1
  log "variant $v: test_cuda exit $?: $(tail -n 1 "$OUT/test_cuda-v$v.log")"
  grep -E "^ *vla .*\[chunked\] +o " "$OUT/test_cuda-v$v.log" > "$OUT/vla-chunked-errors-v$v.txt"
done
for v in $VARIANTS; do
  VLA_CP_VARIANT=$v timeout 200 "$BENCH" --no-limits --only "${VLA_BENCH_ONLY:-vla-chunked,delta}" > "$OUT/bench-v$v.md" 2> "$OUT/bench-v$v.err"
  log "variant $v: bench exit $?"
  grep -E "^\| \(" "$OUT/bench-v$v.md" | cut -d'|' -f2-6 | tee -a "$S"
done
v1=${VARIANTS%% *}
: > "$OUT/profile.txt"
for s in ${VLA_PROFILE_SHAPES:-1,4,32,2048 1,4,32,8192 8,16,64,2048}; do
  echo "== shape $s" >> "$OUT/profile.txt"
  VLA_CP_VARIANT=$v1 VLA_CUDA_KERNEL_TIMES=1 timeout 100 "$BENCH" --no-limits --quick --only vla-chunked --shape "$s" 2>&1 |
    grep -E "chunkpar|cycles|ms \(" | tail -4 >> "$OUT/profile.txt"
done
log "profile done"
cat "$OUT/profile.txt"
