#!/usr/bin/env bash
# Session 18 on the H200, one device call:
#  1. benchmarks/h200_session12.sh with the caller's AB_* / TL_* / BITWISE settings (the A/B of the
#     chunk-parallel form, timelines, bitwise comparison), into $OUT/ab, $OUT/timeline.txt, ...;
#  2. the decode rows (bench_cuda_targets --only decode) from the builds in $DEC_BUILDS (default
#     "old new"), in turn, $DEC_ROUNDS rounds (default 3): decode.txt;
#  3. compute-sanitizer memcheck and racecheck with build-ab-new's test_cuda over its "decode" cases
#     and over the ops cases whose names hold $SAN_ONLY (default "walk segments": the A part that
#     sums its own Gram prefix): sanitizers.tar.gz, a line each in summary.txt (SAN=0: skipped).
# Usage on the device (carry [".debs", ".ab"]): OUT=... AB_...=... bash benchmarks/h200_session18.sh
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, S, log()
OUT=$OUT bash "$ROOT/benchmarks/h200_session12.sh" | tail -n 80
log "A/B done"
source "$ROOT/benchmarks/h200_env.sh"
bench() { find "$ROOT/build-ab-$1" -name bench_cuda_targets -type f 2>/dev/null | head -1; }
for r in $(seq 1 "${DEC_ROUNDS:-3}"); do
  for b in ${DEC_BUILDS:-old new}; do
    "$(bench "$b")" --no-limits --only decode 2>&1 | grep -E "decode median" | sed "s/^/round $r $b: /" >> "$OUT/decode.txt"
  done
done
grep -E ' vla ' "$OUT/decode.txt" | tee -a "$OUT/summary.txt"
[ "${SAN:-1}" = 0 ] && { log "done (SAN=0: no sanitizers)"; exit 0; }
SD=/tmp/s18-san && rm -rf "$SD" && mkdir -p "$SD" # (not S: log() writes to $S)
T="$ROOT/build-ab-new/tests/test_cuda"
for tool in memcheck racecheck; do
  CK_RUN_CASE=decode CK_FORK=no timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 "$T" > "$SD/$tool-decode.txt" 2>&1
  log "compute-sanitizer $tool (test_cuda decode) exit $?: $(grep -h 'SUMMARY' "$SD/$tool-decode.txt" | tail -n 1); $(grep -h 'Checks' "$SD/$tool-decode.txt" | tail -n 1)"
  VLA_CUDA_TEST_ONLY="${SAN_ONLY:-walk segments}" CK_RUN_CASE=ops CK_FORK=no timeout 200 \
    compute-sanitizer --tool $tool --error-exitcode 9 "$T" > "$SD/$tool-ops.txt" 2>&1
  log "compute-sanitizer $tool (test_cuda ops: ${SAN_ONLY:-walk segments}) exit $?: $(grep -h 'SUMMARY' "$SD/$tool-ops.txt" | tail -n 1); $(grep -h 'Checks' "$SD/$tool-ops.txt" | tail -n 1)"
done
tar -C "$SD" -czf "$OUT/sanitizers.tar.gz" .
log "done"
