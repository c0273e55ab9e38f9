#!/usr/bin/env bash
# Session 26: the 16 x 16 inversion's barrier (kernels/cuda/vla_inverse.cuh) against racecheck and the
# clock. Three sm_90 builds of this tree: cur (inv16_warps<2> with the named barrier of its two warps,
# bar.sync 1, 64), bb (-DVLA_INV16_BLOCKBAR=1: every thread calls it, each step's barrier __syncthreads)
# and w1 (-DVLA_INV16_WARPS=1: one warp, __syncwarp, session 11's form). For each: compute-sanitizer
# racecheck over vla-check --backend cuda --mechanism vla, --algo chunked and --algo auto (run 1 found
# hazards there), and the errors vla-check prints (the same bits give the same table). Then test_cuda
# on bb, and three gated rounds (--gate 3000) of the VLA chunked target rows for each build.
# Usage on the device (carry [".debs"]): OUT=... bash benchmarks/h200_session26_bar.sh
H200_SCRATCH=/tmp/s26bar
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, W, S, log()
source "$ROOT/benchmarks/h200_env.sh"
S=$OUT/summary.txt
declare -A FL=([cur]="" [bb]="-DVLA_INV16_BLOCKBAR=1" [w1]="-DVLA_INV16_WARPS=1")
for t in cur bb w1; do
  { cmake -S . -B "$ROOT/build-s26-$t" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF \
      -DCMAKE_CUDA_FLAGS="-lineinfo ${FL[$t]}" &&
    cmake --build "$ROOT/build-s26-$t" -j6 --target vla-check bench_cuda_targets test_cuda; } > "$W/build-$t.log" 2>&1 &
done
wait
for t in cur bb w1; do [ -x "$ROOT/build-s26-$t/tools/vla-check" ] || log "$t: build failed: $(tail -5 "$W/build-$t.log")"; done
log "built cur, bb, w1 (sm_90, -lineinfo)"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in cur bb w1; do
  for algo in chunked auto; do
    timeout 90 "$CS" --tool racecheck "$ROOT/build-s26-$t/tools/vla-check" --backend cuda --mechanism vla --algo $algo \
      > "$W/rc-$t-$algo.log" 2>&1
    log "racecheck $t --algo $algo exit $?: $(grep -E 'RACECHECK SUMMARY' "$W/rc-$t-$algo.log" | tail -n 1 | tr -s ' =') | $(tail -n 1 "$W/rc-$t-$algo.log" | tr -s ' =')"
    grep -oE 'in [a-z_]+\.cuh?:[0-9]+' "$W/rc-$t-$algo.log" | sort | uniq -c | sort -rn | head -4 >> "$S"
  done
  "$ROOT/build-s26-$t/tools/vla-check" --backend cuda --mechanism vla > "$W/check-$t.txt" 2>&1
  log "vla-check $t (vla) exit $?: $(tail -n 1 "$W/check-$t.txt")"
done
for t in bb w1; do
  if diff <(grep -v "CPU time" "$W/check-cur.txt") <(grep -v "CPU time" "$W/check-$t.txt") > /dev/null; then log "vla-check tables: $t = cur"
  else log "vla-check tables: $t differs from cur: $(diff <(grep -v "CPU time" "$W/check-cur.txt") <(grep -v "CPU time" "$W/check-$t.txt") | wc -l) lines"; fi
done
CK_FORK=no timeout 200 "$ROOT/build-s26-bb/tests/test_cuda" > "$W/test_cuda-bb.log" 2>&1
log "test_cuda bb exit $?: $(tail -n 1 "$W/test_cuda-bb.log")"
shapes=(--shape 1,4,32,2048 --shape 1,4,32,8192 --shape 1,4,32,32768 --shape 1,4,32,131072 --shape 8,16,64,2048 --shape 8,16,64,32768)
gated_row() { # build: one gated run of the six rows, "shape T ms | ..."
  local b
  b=$(find "$ROOT/build-s26-$1/" -name bench_cuda_targets -type f | head -1)
  timeout 120 "$b" --no-limits --gate 3000 --only vla-chunked "${shapes[@]}" 2>&1 >/dev/null |
    grep -E ' ms \(' | awk '{printf "%s %s %s | ", $1, $2, $(NF-3)}'
}
for round in 1 2 3; do
  for t in cur bb w1; do log "gated round $round $t: $(gated_row $t)"; done
done
tar -C "$W" -czf "$OUT/logs.tar.gz" .
