#!/usr/bin/env bash
# Session 23's last H200 call, on the tree it lands (carry [".debs", ".ab"]; .ab/old = session 22's
# last commit, 29d1270, plus this session's bench_cuda_targets.c for --u-given):
#  1. benchmarks/h200_session14_final.sh with CHECK_ONLY="plain walk of": fat build (sm_75 + sm_90),
#     test_cuda, vla-check --backend cuda, compute-sanitizer memcheck and racecheck over test_cuda's
#     "plain walk of" ops cases, every target row, gated rounds against old: final.txt, bench_cuda.md,
#     gated.md (in all.tar.gz);
#  2. memcheck and racecheck again over the "s_u" and "lambda0 3e4" cases (the A part's UK form at
#     dk = 64 and 32, the clamp): sanitizer-uk.txt;
#  3. benchmarks/h200_bitwise.sh old new over "vla-u delta vla-seq" (u given, DeltaNet and the
#     sequential form: the same kernels, so the same bits) and over "vla" (the UK form: other bits,
#     printed): bitwise.txt;
#  4. repeat.txt: the (1,4,32) T = 2048 and (8,16,64) T = 2048 VLA forwards (chunked) 10 times each,
#     each process's output and final states compared byte for byte with the first's;
#  5. ungated.txt: one ungated round of both trees at the six target shapes, then both with u given
#     (--u-given), gated, two rounds.
# Usage on the device: OUT=... bash benchmarks/h200_session23_final.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
CHECK_ONLY="plain walk of" OUT=$OUT bash benchmarks/h200_session14_final.sh > "$OUT/final.txt" 2>&1
echo "final: exit $?"
grep -E "exit|Checks|SUMMARY|passed" "$OUT/final.txt" | head -20
B=$ROOT/build-h200-fat
export PATH=$PATH:/usr/local/cuda/bin
for only in "s_u" "lambda0 3e4"; do
  for tool in memcheck racecheck; do
    VLA_CUDA_TEST_ONLY="$only" CK_RUN_CASE=ops CK_FORK=no timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/tests/test_cuda" > /tmp/san.txt 2>&1
    echo "compute-sanitizer $tool (test_cuda ops: $only) exit $?: $(grep -h 'SUMMARY' /tmp/san.txt | tail -n 1); $(grep -h 'Checks' /tmp/san.txt | tail -n 1)"
    grep -E "^  vla" /tmp/san.txt | head -4
  done
done 2>&1 | tee "$OUT/sanitizer-uk.txt"
ln -sfn build-h200-fat build-ab-new
{
  BITWISE_MODES="vla-u delta vla-seq" bash benchmarks/h200_bitwise.sh old new | tail -n 3
  BITWISE_MODES="vla" bash benchmarks/h200_bitwise.sh old new | tail -n 6
} > "$OUT/bitwise.txt" 2>&1
cat "$OUT/bitwise.txt"
{
  W=/tmp/bitwise R=/tmp/repeat
  run() { find "$ROOT/build-ab-$1/" -name vla-run -type f | head -1; }
  python3 - <<'PY'
import numpy as np
r = np.random.default_rng(23)
for B, H, d, T in [(1, 4, 32, 2048), (8, 16, 64, 2048)]:
    for n in "qkv":
        np.save(f"/tmp/rep-{n}-{B}-{H}-{d}-{T}.npy", r.standard_normal((B, T, H, d)).astype(np.float32))
PY
  for s in 1-4-32-2048 8-16-64-2048; do
    rm -rf "$R" && mkdir -p "$R"
    args=(--backend cuda --algo chunked --mechanism vla --q /tmp/rep-q-$s.npy --k /tmp/rep-k-$s.npy --v /tmp/rep-v-$s.npy --o o.npy --state-out S.npy --a-state-out A.npy)
    same=0 diff=0
    for i in $(seq 1 10); do
      (cd "$R" && "$(run new)" "${args[@]}" > run.log 2>&1) || { echo "run $i failed: $(tail -1 "$R/run.log")"; diff=$((diff + 1)); continue; }
      for f in o S A; do
        if [ "$i" = 1 ]; then cp "$R/$f.npy" "$R/first-$f.npy"; fi
        if cmp -s "$R/$f.npy" "$R/first-$f.npy"; then same=$((same + 1)); else diff=$((diff + 1)); echo "run $i $f: DIFFERENT"; fi
      done
    done
    echo "repeat $s vla chunked, 10 processes x o, S, A against the first: $same same, $diff different"
  done
} 2>&1 | tee "$OUT/repeat.txt"
source benchmarks/h200_env.sh
shapes=(--shape 1,4,32,2048 --shape 1,4,32,8192 --shape 1,4,32,32768 --shape 1,4,32,131072 --shape 8,16,64,2048 --shape 8,16,64,32768)
{
  for t in old new; do
    b=$(find "$ROOT/build-ab-$t/" -name bench_cuda_targets -type f | head -1)
    echo "== round 1 $t ungated: $(timeout 120 "$b" --no-limits --only vla-chunked "${shapes[@]}" 2>&1 >/dev/null |
      grep -E ' ms \(' | awk '{printf "%s %s %s | ", $1, $2, $(NF-3)}')"
  done
  for round in 1 2; do
    for t in old new; do
      b=$(find "$ROOT/build-ab-$t/" -name bench_cuda_targets -type f | head -1)
      echo "== round $round $t u given, gated: $(timeout 120 "$b" --no-limits --u-given --gate 3000 --only vla-chunked "${shapes[@]}" 2>&1 >/dev/null |
        grep -E ' ms \(' | awk '{printf "%s %s %s | ", $1, $2, $(NF-3)}')"
    done
  done
} 2>&1 | tee "$OUT/ungated.txt"
