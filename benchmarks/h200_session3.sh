#!/usr/bin/env bash
# Session 3 on the H200, in one device call, on the fat binary (sm_75 + sm_90) as shipped:
#   1. test_cuda (every mechanism x algorithm vs float64 and the CPU backend), vla-check --backend cuda;
#   2. bench_cuda_targets, the rows in $VLA_BENCH_ONLY (default: every row; limits measured in the
#      same run), with the decode step's host share;
#   3. vla-bench --backend cuda over T = 512..32768 at B=1 H=4 d=32 (the scaling plot);
#   4. compute-sanitizer memcheck over vla-check's CUDA cases, racecheck over its sequential and
#      chunked ones (every mechanism; VLA_RACECHECK_ALGOS="chunked" for the chunked ones only);
#   5. with VLA_PROFILE_SHAPES set, benchmarks/h200_profile.sh (per-kernel times) for those shapes.
# Usage on the device (carry [".debs"]): bash benchmarks/h200_session3.sh
# (VLA_SKIP_SANITIZERS=1 leaves step 4 out.)
# Writes $OUT/summary.txt, $OUT/bench_cuda.md and $OUT/all.tar.gz (every log).
H200_SCRATCH=/tmp/session3
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, W, S, log()
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200-fat
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="75;90" -DVLA_OPENCL=OFF &&
  cmake --build "$B" -j"$(nproc)" --target test_cuda vla-check vla-bench bench_cuda_targets; } > "$W/build.log" 2>&1 ||
  { tail -40 "$W/build.log"; exit 1; }
log "built (sm_75 + sm_90)"
CK_FORK=no timeout 150 "$B/tests/test_cuda" > "$W/test_cuda.log" 2>&1; log "test_cuda exit $?: $(tail -n 1 "$W/test_cuda.log")"
timeout 60 "$B/tools/vla-check" --backend cuda > "$W/vla-check-cuda.txt" 2>&1; log "vla-check cuda exit $?: $(tail -n 1 "$W/vla-check-cuda.txt")"
BENCH=$(find "$B" -name bench_cuda_targets -type f | head -1)
only=(); [ -n "${VLA_BENCH_ONLY:-}" ] && only=(--only "$VLA_BENCH_ONLY")
timeout 240 "$BENCH" "${only[@]}" --json "$W/bench_cuda.json" > "$W/bench_cuda.md" 2> "$W/bench_cuda.err"; log "bench_cuda_targets exit $?"
timeout 60 "$B/tools/vla-bench" --backend cuda -T 512,1024,2048,4096,8192,16384,32768 -B 1 -H 4 -d 32 -r 10 --budget 50 \
  --save "$W/vla-bench-cuda" > /dev/null 2> "$W/vla-bench-cuda.err"; log "vla-bench cuda exit $?"
if [ -z "${VLA_SKIP_SANITIZERS:-}" ]; then
  timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tools/vla-check" --backend cuda \
    > "$W/sanitizer-memcheck.txt" 2>&1
  log "compute-sanitizer memcheck (every case) exit $?: $(grep -h 'SUMMARY' "$W/sanitizer-memcheck.txt" | tail -n 1)"
else
  VLA_RACECHECK_ALGOS=" " # (session 6: a short confirmation run)
fi
for algo in ${VLA_RACECHECK_ALGOS:-sequential chunked}; do # racecheck over every case takes more than 100 s
  timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/tools/vla-check" --backend cuda --algo $algo \
    > "$W/sanitizer-racecheck-$algo.txt" 2>&1
  log "compute-sanitizer racecheck ($algo) exit $?: $(grep -h 'SUMMARY' "$W/sanitizer-racecheck-$algo.txt" | tail -n 1)"
done
if [ -n "${VLA_PROFILE_SHAPES:-}" ]; then # per-kernel times (VLA_CUDA_KERNEL_TIMES=1), sm_90 build
  OUT=$W/profile bash "$ROOT/benchmarks/h200_profile.sh" > /dev/null 2>&1; log "profile exit $?"
fi
cp "$S" "$OUT/summary.txt"; cp "$W/bench_cuda.md" "$OUT/" 2>/dev/null
tar -C "$W" -czf "$OUT/all.tar.gz" .
grep -E "^\| \(|^\| decode|^- decode" "$W/bench_cuda.md" | cut -d'|' -f2-8 | head -60
