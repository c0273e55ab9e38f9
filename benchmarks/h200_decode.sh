#!/usr/bin/env bash
# The decode step on the H200 (vla_seq_regs.cu), in one device call: sm_90 build, test_cuda's
# decode and streaming cases, bench_cuda_targets --only decode, Nsight Compute on one VLA decode
# launch, and compute-sanitizer racecheck over vla-check's sequential cases.
# Run at commit d8696b7 for benchmarks/results/2026-11-30-h200-session3/run2-decode-ab/, where the
# kernel still had a second form (A loaded straight into registers) chosen by
# VLA_CUDA_SEQREGS_DIRECT=1: the "direct" pass. That form was removed after the run (it was
# slower), so on later commits both passes time the same kernel.
# Usage on the device (carry [".debs"]): bash benchmarks/h200_decode.sh   (logs in $OUT)
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, S, log()
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF &&
  cmake --build "$B" -j"$(nproc)" --target test_cuda vla-check bench_cuda_targets; } > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
log "built (sm_90)"
for c in decode streaming; do
  CK_RUN_CASE=$c CK_FORK=no timeout 60 "$B/tests/test_cuda" > "$OUT/test_cuda-$c.log" 2>&1
  log "test_cuda $c exit $?: $(tail -n 1 "$OUT/test_cuda-$c.log")"
done
BENCH=$(find "$B" -name bench_cuda_targets -type f | head -1)
for v in staged direct; do
  env=(); [ $v = direct ] && env=(VLA_CUDA_SEQREGS_DIRECT=1)
  env "${env[@]}" timeout 60 "$BENCH" --only decode --no-limits > "$OUT/decode-$v.md" 2> "$OUT/decode-$v.err"
  log "decode ($v) exit $?"; grep -E "^- decode" "$OUT/decode-$v.md" | tee -a "$OUT/summary.txt"
  env "${env[@]}" timeout 90 ncu --kernel-name regex:seq_regs --launch-skip 30 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
    --section SchedulerStats --section SourceCounters "$BENCH" --only decode --no-limits --quick > "$OUT/ncu-$v.txt" 2>&1
  log "ncu ($v) exit $?"
done
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/tools/vla-check" --backend cuda --algo sequential \
  > "$OUT/racecheck-sequential.txt" 2>&1
log "racecheck sequential exit $?: $(grep -h 'SUMMARY' "$OUT/racecheck-sequential.txt" | tail -n 1)"
