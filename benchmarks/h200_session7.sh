#!/usr/bin/env bash
# Session 7 on the H200, in one device call: the tensor-core softmax (vla_softmax.cu) and the
# linear-attention path of the chunk-parallel form (linmap_kernel, sumwalk_kernel), against the
# tree in .ab/old (the previous commit: `git archive <commit> | tar -x -C .ab/old`, carried).
#   1. build the working tree as shipped (fat binary, sm_75 + sm_90) and .ab/old (sm_90), at once;
#   2. test_cuda and vla-check --backend cuda on the fat binary;
#   3. A/B: bench_cuda_targets --only softmax,linear,delta,vla-chunked at $AB_SHAPES, old then new,
#      two rounds (drift shows as a difference between the rounds);
#   4. bench_cuda_targets, every row and shape, limits measured in the same run (the fat binary);
#   5. benchmarks/bench_sdpa.py (PyTorch SDPA fp32 and bf16 at the same shapes, same call);
#   6. vla-bench --backend cuda over T = 512..32768 at B=1 H=4 d=32 (the scaling plot);
#   7. compute-sanitizer memcheck over every vla-check case, racecheck over its fused and chunked
#      ones;
#   8. per-kernel times (VLA_CUDA_KERNEL_TIMES=1) of linear chunked, old and new.
# Usage on the device (carry [".debs", ".ab"]): bash benchmarks/h200_session7.sh
# Run 2 used AB_OLD=.ab/mid (another tree to compare against), AB_ONLY (the rows of step 3),
# AB_SHAPES, and SKIP_PROFILE=1 (no step 8); run 3 TEST_SEEDS="..." (test_cuda on each seed's
# random inputs, new and old, after step 2).
# Writes $OUT/summary.txt, $OUT/bench_cuda.md, $OUT/sdpa.md and $OUT/all.tar.gz (every log).
H200_SCRATCH=/tmp/session7
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, W, S, log()
source "$ROOT/benchmarks/h200_env.sh"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > "$W/device.txt" 2>&1
build() { # src dir, build dir, archs, targets...
  local src=$1 dir=$2 arch=$3; shift 3
  { cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" -DVLA_OPENCL=OFF &&
    cmake --build "$dir" -j"$(nproc)" --target "$@"; } > "$W/build-$(basename "$dir").log" 2>&1 ||
    { tail -30 "$W/build-$(basename "$dir").log"; exit 1; }
}
B=$ROOT/build-h200-fat OLD=$ROOT/build-ab-old
old_targets=(bench_cuda_targets); [ -n "${TEST_SEEDS:-}" ] && old_targets+=(test_cuda)
build . "$B" "75;90" test_cuda vla-check vla-bench bench_cuda_targets & build "${AB_OLD:-.ab/old}" "$OLD" 90 "${old_targets[@]}" &
wait
[ -x "$B/tests/test_cuda" ] && [ -n "$(find "$OLD" -name bench_cuda_targets -type f)" ] || { log "build failed"; exit 1; }
log "built (new: sm_75 + sm_90; old: sm_90)"
CK_FORK=no timeout 200 "$B/tests/test_cuda" > "$W/test_cuda.log" 2>&1; log "test_cuda exit $?: $(tail -n 1 "$W/test_cuda.log")"
timeout 60 "$B/tools/vla-check" --backend cuda > "$W/vla-check-cuda.txt" 2>&1; log "vla-check cuda exit $?: $(tail -n 1 "$W/vla-check-cuda.txt")"
for seed in ${TEST_SEEDS:-}; do # test_cuda on other random inputs, new and old
  for c in new old; do
    d=$B; [ $c = old ] && d=$OLD
    VLA_TEST_SEED=$seed CK_FORK=no timeout 200 "$d/tests/test_cuda" > "$W/test_cuda-seed$seed-$c.log" 2>&1
    log "test_cuda seed $seed $c exit $?: $(tail -n 1 "$W/test_cuda-seed$seed-$c.log" | cut -c1-200)"
    grep -h "FAIL" "$W/test_cuda-seed$seed-$c.log" | head -5 | tee -a "$S"
  done
done
bench() { find "$1" -name bench_cuda_targets -type f | head -1; }
shapes=(); for s in ${AB_SHAPES:-1,4,32,2048 1,4,32,8192 1,4,32,32768 8,16,64,2048}; do shapes+=(--shape "$s"); done
for round in 1 2; do
  for c in old new; do
    d=$OLD; [ $c = new ] && d=$B
    f="$W/ab-r$round-$c.txt"
    timeout 150 "$(bench "$d")" --no-limits --only "${AB_ONLY:-softmax,linear,delta,vla-chunked}" "${shapes[@]}" > "$f.md" 2> "$f"
    echo "== round $round $c: $(grep -E ' ms \(' "$f" | awk '{printf "%s %s %s %s | ", $1, $2, $3, $(NF-3)}')" | tee -a "$S"
  done
done
timeout 240 "$(bench "$B")" --json "$W/bench_cuda.json" > "$W/bench_cuda.md" 2> "$W/bench_cuda.err"; log "bench_cuda_targets exit $?"
timeout 120 env -u LD_LIBRARY_PATH python3 "$ROOT/benchmarks/bench_sdpa.py" --json "$W/sdpa.json" > "$W/sdpa.md" 2> "$W/sdpa.err"
log "bench_sdpa exit $?"
timeout 90 "$B/tools/vla-bench" --backend cuda -T 512,1024,2048,4096,8192,16384,32768 -B 1 -H 4 -d 32 -r 10 --budget 50 \
  --save "$W/vla-bench-cuda" > /dev/null 2> "$W/vla-bench-cuda.err"; log "vla-bench cuda exit $?"
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tools/vla-check" --backend cuda > "$W/sanitizer-memcheck.txt" 2>&1
log "compute-sanitizer memcheck (every case) exit $?: $(grep -h 'SUMMARY' "$W/sanitizer-memcheck.txt" | tail -n 1)"
for algo in fused chunked; do
  timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/tools/vla-check" --backend cuda --algo $algo \
    > "$W/sanitizer-racecheck-$algo.txt" 2>&1
  log "compute-sanitizer racecheck ($algo) exit $?: $(grep -h 'SUMMARY' "$W/sanitizer-racecheck-$algo.txt" | tail -n 1)"
done
for c in $([ -z "${SKIP_PROFILE:-}" ] && echo old new); do
  d=$OLD; [ $c = new ] && d=$B
  for s in 8,16,64,2048 1,4,32,2048 1,4,32,131072; do
    echo "== $c linear shape $s" >> "$W/profile.txt"
    VLA_CUDA_KERNEL_TIMES=1 timeout 60 "$(bench "$d")" --no-limits --quick --only linear --shape "$s" 2>&1 |
      grep -E "chunkpar|ms \(" | tail -2 >> "$W/profile.txt"
  done
done
log "done"
for f in "$W"/sanitizer-*.txt; do xz -9 "$f"; done
cp "$S" "$OUT/summary.txt"; cp "$W/bench_cuda.md" "$W/sdpa.md" "$OUT/" 2>/dev/null
tar -C "$W" -czf "$OUT/all.tar.gz" .
grep -E "^\| \(|^\| decode|^- decode" "$W/bench_cuda.md" | cut -d'|' -f2-8 | head -60
cat "$W/sdpa.md"; cat "$W/profile.txt" 2>/dev/null
