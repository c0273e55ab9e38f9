#!/usr/bin/env bash
# Session 26: where racecheck's hazards in apart_kernel<32, 2, false, true> (the A part's u-not-given
# form at dk <= 32) come from. run 1 (h200_session26_final.sh) found 194 over vla-check --algo chunked
# and 35 over --algo auto, all in that instance. An sm_90 build with -lineinfo (source lines in the
# reports); racecheck over each VLA chunked case of vla-check alone (hazard counts), then the first
# case with hazards again with every report printed (racecheck-detail.txt).
# Usage on the device (carry [".debs"]): OUT=... bash benchmarks/h200_session26_race.sh
H200_SCRATCH=/tmp/s26race
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, W, S, log()
source "$ROOT/benchmarks/h200_env.sh"
S=$OUT/summary.txt
B=$ROOT/build-s26-li
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF -DCMAKE_CUDA_FLAGS=-lineinfo &&
  cmake --build "$B" -j"$(nproc)" --target vla-check test_cuda; } > "$W/build.log" 2>&1 || { log "build failed"; tail -30 "$W/build.log"; exit 1; }
log "built (sm_90, -lineinfo)"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
first=
for c in $("$B/tools/vla-check" --list --mechanism vla --algo chunked | awk 'NF > 3 {print $1}'); do
  timeout 60 "$CS" --tool racecheck "$B/tools/vla-check" --backend cuda --algo chunked --case "$c" > "$W/rc-$c.log" 2>&1
  n=$(grep -E 'RACECHECK SUMMARY' "$W/rc-$c.log" | tail -n 1 | tr -s ' =')
  log "racecheck $c: $n | $(tail -n 1 "$W/rc-$c.log")"
  case "$n" in *" 0 hazards"*) ;; *) [ -z "$first" ] && first=$c ;; esac
done
if [ -n "$first" ]; then
  timeout 120 "$CS" --tool racecheck --print-limit 400 --racecheck-report all "$B/tools/vla-check" --backend cuda --algo chunked \
    --case "$first" > "$OUT/racecheck-detail.txt" 2>&1
  log "detail ($first) exit $?"
  grep -oE '[a-z_]+\.cuh?:[0-9]+' "$OUT/racecheck-detail.txt" | sort | uniq -c | sort -rn | head -40 | tee -a "$S"
fi
tar -C "$W" -czf "$OUT/logs.tar.gz" .
