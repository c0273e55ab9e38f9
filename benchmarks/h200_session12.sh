#!/usr/bin/env bash
# Session 12 on the H200, one device call: the A/B of benchmarks/h200_ab.sh (its logs in
# $OUT/ab/ab.tar.gz), then
#  - sweep.txt: the segmented walk's segment length forced (VLA_CP_WLEN=L) with the working tree's
#    build ("new"), gated (--gate $AB_GATE), one call each; SWEEP="shape=L+L+.. ..", L = 0 the
#    length chunkpar_walk picks;
#  - timeline.txt: each kernel's span on the GPU's global timer in the production launch sequence
#    (programmatic dependent launch, the second stream), from the build "tl" when AB_BUILDS has
#    one ("tl:-DVLA_CP_TIMELINE"), else "new" (run 1 of the session: the timeline was compiled in
#    then); not gated (the timeline waits for its stream inside the call); $TL_CONFIGS ("build" is
#    replaced by the timeline build; ":VAR=value" as in h200_ab.sh) at $TL_SHAPES; since session 17
#    also the A part's blocks ("apart blocks": entry, wait done, exit and run quantiles, the last out);
#  - bitwise.txt: BITWISE="A B [env-of-A]" runs benchmarks/h200_bitwise.sh on those builds.
# Usage on the device (carry [".debs", ".ab"]): OUT=... AB_...=... bash benchmarks/h200_session12.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT/ab"
OUT=$OUT/ab bash "$ROOT/benchmarks/h200_ab.sh" | tail -n 60
bench() { find "$ROOT/build-ab-$1" -name bench_cuda_targets -type f 2>/dev/null | head -1; }
BENCH=$(bench new)
[ -x "$BENCH" ] || { echo "no bench_cuda_targets in build-ab-new"; exit 1; }
TLB=$(bench tl); [ -x "$TLB" ] || TLB=$BENCH
source "$ROOT/benchmarks/h200_env.sh" # (the loader path for the unpacked packages)
{
  for sw in ${SWEEP:-}; do
    shape=${sw%%=*}
    for L in $(echo "${sw#*=}" | tr '+' ' '); do
      r=$(VLA_CP_WLEN=$L timeout 120 "$BENCH" --no-limits --gate "${AB_GATE:-3000}" --only vla-chunked --shape "$shape" 2>&1 |
        grep -E ' ms \(' | awk '{print $(NF-3)}')
      echo "sweep $shape wlen=$([ "$L" = 0 ] && echo auto || echo "$L"): $r ms"
    done
  done
} 2>&1 | tee "$OUT/sweep.txt"
{
  for c in ${TL_CONFIGS:-}; do
    envs=(); [ "$c" != "${c%%:*}" ] && envs=(${c#*:}); envs=(${envs[*]//,/ }) # (commas between variables)
    for s in ${TL_SHAPES:-1,4,32,2048 1,4,32,8192 1,4,32,32768 8,16,64,2048}; do
      echo "== $c $s"
      env "${envs[@]}" VLA_CP_TIMELINE=1 timeout 60 "$TLB" --no-limits --quick --only vla-chunked,delta --shape "$s" 2>&1 |
        awk '/^timeline|^apart blocks/ {b[n++ % 6] = $0} / ms \(/ {for (i = (n > 6 ? n - 6 : 0); i < n; i++) print b[i % 6]; print; n = 0}'
    done
  done
} 2>&1 | tee "$OUT/timeline.txt"
if [ -n "${BITWISE:-}" ]; then
  set -- $BITWISE
  BITWISE_ENV_A="${3:-}" bash "$ROOT/benchmarks/h200_bitwise.sh" "$1" "$2" 2>&1 | tee "$OUT/bitwise.txt" | tail -n 3
fi
