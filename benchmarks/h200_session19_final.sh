#!/usr/bin/env bash
# Session 19's last H200 call, on the commit it lands (carry [".debs", ".ab"]; .ab/old = the tree
# before the session's kernel change):
#  1. benchmarks/h200_session14_final.sh with CHECK_ONLY="plain walk of" (fat build, test_cuda,
#     vla-check, memcheck and racecheck over the ops cases that walk 45 and 50 chunks with the plain
#     walk, every target row, gated rounds against old): final.txt, bench_cuda.md, gated.md;
#  2. benchmarks/h200_bitwise.sh old new, the fat build as "new": bitwise.txt (the walk's change keeps
#     the sums, so every output and state should have the same bits);
#  3. two ungated rounds of both trees at the six target shapes: ungated.txt.
# Usage on the device: OUT=... bash benchmarks/h200_session19_final.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
CHECK_ONLY="plain walk of" OUT=$OUT bash benchmarks/h200_session14_final.sh > "$OUT/final.txt" 2>&1
echo "final: exit $?"
grep -E "exit|Checks|SUMMARY|passed" "$OUT/final.txt" | head -20
ln -sfn build-h200-fat build-ab-new
bash benchmarks/h200_bitwise.sh old new > "$OUT/bitwise.txt" 2>&1
tail -n 3 "$OUT/bitwise.txt"
source benchmarks/h200_env.sh
shapes=(--shape 1,4,32,2048 --shape 1,4,32,8192 --shape 1,4,32,32768 --shape 1,4,32,131072 --shape 8,16,64,2048 --shape 8,16,64,32768)
for round in 1 2; do
  for t in old new; do
    b=$(find "$ROOT/build-ab-$t/" -name bench_cuda_targets -type f | head -1)
    echo "== round $round $t ungated: $(timeout 120 "$b" --no-limits --only vla-chunked "${shapes[@]}" 2>&1 >/dev/null |
      grep -E ' ms \(' | awk '{printf "%s %s %s | ", $1, $2, $(NF-3)}')"
  done
done | tee "$OUT/ungated.txt"
grep -E "gated:" "$OUT/final.txt" | sed -E 's/\| \([0-9,]+\) T=[0-9]+ (softmax|delta)[^|]*//g'
