#!/usr/bin/env bash
# Session 26, on the H200: the whole of issue 6's evidence again, on one tree, in one device call
# (carry [".debs"]):
#  1. a fat build (sm_75 + sm_90, as shipped): test_cuda, vla-check, vla-bench, bench_cuda_targets;
#  2. test_cuda (test_cuda.log) and vla-check --backend cuda (vla-check.txt);
#  3. bench_cuda_targets: every row, with the copy, SGEMM and TF32 GEMM rates measured in the same run
#     (bench_cuda.md, .json); the VLA chunked rows again behind a 3 ms host hold (--gate 3000: the GPU's
#     time alone; gated.md); PyTorch's causal SDPA at the same shapes (sdpa.md, .json); the vla-bench
#     sweep at (1,4,32) over T = 512..32768 (the paper's plot; vla-bench-cuda.*);
#  4. compute-sanitizer over vla-check --backend cuda: memcheck over every case, racecheck over every
#     case one algorithm at a time, synccheck over every case (the summary lines; the logs, compressed,
#     in logs.tar.gz);
#  5. the sm_75 code as a compute_75 JIT build (benchmarks/h200_ptx75.sh: test_cuda and vla-check),
#     built while the sanitizers run (after the timings, so that the build does not load the host);
#  6. (run 4 on, when the run is under 420 s by then) two other forms of the 16 x 16 inversion's barrier,
#     sm_90 builds made beside step 4: named (-DVLA_INV16_BLOCKBAR=0, session 24's) and w8
#     (-DVLA_INV16_WARPS=8: eight warps, one entry a thread, __syncthreads a step); racecheck over
#     vla-check's VLA chunked cases for each, and two gated rounds of the VLA rows for them and the
#     fat build (as landed).
# Every stage has a time limit; summary.txt is written as it goes, so a cut run still says how far it got.
# Usage on the device: OUT=... bash benchmarks/h200_session26_final.sh
H200_SCRATCH=/tmp/s26final
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, W, S, log()
source "$ROOT/benchmarks/h200_env.sh"
S=$OUT/summary.txt # (the summary goes straight to $OUT: a run cut at the time limit still returns it)
B=$ROOT/build-s26
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
  nvcc --version | tail -2; git log -1 --format='%h %s' 2>/dev/null
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="75;90" -DVLA_OPENCL=OFF &&
  cmake --build "$B" -j"$(nproc)" --target test_cuda vla-check vla-bench bench_cuda_targets; } > "$W/build.log" 2>&1 ||
  { log "build failed"; tail -40 "$W/build.log"; exit 1; }
log "built (sm_75 + sm_90): $(head -3 "$W/build.log" | tr '\n' ' ')"
CK_FORK=no timeout 240 "$B/tests/test_cuda" > "$OUT/test_cuda.log" 2>&1
log "test_cuda exit $?: $(tail -n 1 "$OUT/test_cuda.log")"
timeout 120 "$B/tools/vla-check" --backend cuda > "$OUT/vla-check.txt" 2>&1
log "vla-check --backend cuda exit $?: $(tail -n 1 "$OUT/vla-check.txt")"
BENCH=$(find "$B" -name bench_cuda_targets -type f | head -1)
timeout 240 "$BENCH" --json "$W/bench_cuda.json" > "$OUT/bench_cuda.md" 2> "$W/bench_cuda.err"
log "bench_cuda_targets (every row, limits) exit $?"
shapes=(--shape 1,4,32,2048 --shape 1,4,32,8192 --shape 1,4,32,32768 --shape 1,4,32,131072 --shape 8,16,64,2048 --shape 8,16,64,32768)
timeout 120 "$BENCH" --no-limits --gate 3000 --only vla-chunked "${shapes[@]}" > "$OUT/gated.md" 2> "$W/gated.err"
log "bench_cuda_targets --gate 3000 (VLA chunked) exit $?"
timeout 120 env -u LD_LIBRARY_PATH python3 "$ROOT/benchmarks/bench_sdpa.py" --json "$W/sdpa.json" > "$OUT/sdpa.md" 2> "$W/sdpa.err"
log "bench_sdpa.py exit $?"
timeout 150 "$B/tools/vla-bench" --backend cuda -T 512,1024,2048,4096,8192,16384,32768 -B 1 -H 4 -d 32 -r 10 --budget 60 \
  --save "$W/vla-bench-cuda" > /dev/null 2> "$W/vla-bench-cuda.err"
log "vla-bench --backend cuda exit $?"
tar -C "$W" -czf "$OUT/vla-bench.tar.gz" vla-bench-cuda.md vla-bench-cuda.csv vla-bench-cuda.json vla-bench-cuda.err \
  bench_cuda.json sdpa.json 2>/dev/null
# 5 (its build) beside 4
OUT=$W/ptx75 bash "$ROOT/benchmarks/h200_ptx75.sh" > "$W/ptx75.out" 2>&1 &
ptx=$!
# 6 (its builds) beside 4
declare -A XF=([named]="-DVLA_INV16_BLOCKBAR=0" [w8]="-DVLA_INV16_WARPS=8")
for t in named w8; do
  { cmake -S . -B "$ROOT/build-s26-$t" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF \
      -DCMAKE_CUDA_FLAGS="${XF[$t]}" && cmake --build "$ROOT/build-s26-$t" -j4 --target vla-check bench_cuda_targets; } \
    > "$W/build-$t.log" 2>&1 &
done
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
san() { # tool, label, time limit, vla-check arguments...
  local tool=$1 label=$2 lim=$3
  shift 3
  timeout "$lim" "$CS" --tool "$tool" --error-exitcode 9 "$B/tools/vla-check" --backend cuda "$@" > "$W/san-$label.log" 2>&1
  local rc=$?
  log "compute-sanitizer $tool ($label) exit $rc: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$W/san-$label.log" | tail -n 1 | tr -s ' =') | vla-check: $(grep -E 'passed' "$W/san-$label.log" | tail -n 1)"
}
{
  san memcheck memcheck-all 200
  for algo in chunked two-level scan sequential fused auto; do san racecheck racecheck-$algo 150 --algo $algo; done
  san synccheck synccheck-all 150
} 2>&1
wait $ptx
log "compute_75 JIT: $(grep -h 'exit' "$W/ptx75.out" | tr '\n' ' ')"
wait
if (( SECONDS - START < 420 )); then
  for t in named w8; do
    [ -x "$ROOT/build-s26-$t/tools/vla-check" ] || { log "$t: build failed"; continue; }
    timeout 60 "$CS" --tool racecheck "$ROOT/build-s26-$t/tools/vla-check" --backend cuda --mechanism vla --algo chunked \
      > "$W/san-racecheck-$t.log" 2>&1
    log "racecheck ($t, vla chunked) exit $?: $(grep -E 'RACECHECK SUMMARY' "$W/san-racecheck-$t.log" | tail -n 1 | tr -s ' =') | $(grep -E 'passed' "$W/san-racecheck-$t.log" | tail -n 1)"
  done
  for round in 1 2; do
    for t in fat named w8; do
      b=$(find "$ROOT/build-s26$([ $t = fat ] || echo "-$t")/" -name bench_cuda_targets -type f | head -1)
      [ -n "$b" ] || continue
      log "gated round $round $t: $(timeout 100 "$b" --no-limits --gate 3000 --only vla-chunked "${shapes[@]}" 2>&1 >/dev/null |
        grep -E ' ms \(' | awk '{printf "%s %s %s | ", $1, $2, $(NF-3)}')"
    done
  done
else
  log "step 6 left out: $((SECONDS - START)) s by then"
fi
xz -9 "$W"/san-*.log 2>/dev/null
tar -C "$W" -czf "$OUT/logs.tar.gz" --exclude=vla-bench-cuda.* --exclude=bench_cuda.json --exclude=sdpa.json . 2>/dev/null
grep -E "^\| \(|^\| decode" "$OUT/bench_cuda.md" | cut -d'|' -f2-8 | head -40
