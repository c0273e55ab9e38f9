#!/usr/bin/env bash
# Session 20's last H200 call, on the commit it lands (carry [".debs", ".ab"]; .ab/old = session 19's
# last commit, c842e3a):
#  1. benchmarks/h200_session14_final.sh with CHECK_ONLY="plain walk of" (fat build, test_cuda,
#     vla-check, memcheck and racecheck over the ops cases that walk 45 and 50 chunks with the plain
#     walk, the VLA one with the chunk flags, every target row, gated rounds against old): final.txt,
#     bench_cuda.md, gated.md;
#  2. benchmarks/h200_bitwise.sh old new, the fat build as "new": bitwise.txt (the flags change when
#     the work runs, not the sums: every output and state should have the same bits);
#  3. repeat.txt: the (1,4,32) T = 2048 VLA forward (chunked, the flagged launches) 20 times, each
#     process's output and final states compared with the first's and with old's, byte for byte;
#  4. one ungated round of both trees at the six target shapes: ungated.txt;
#  5. the chunk flags on and off in the new build at (1,4,32) T = 2048, gated, two rounds (ungated.txt).
# Usage on the device: OUT=... bash benchmarks/h200_session20_final.sh
# (Run on 4676e7e and 7ba0036, whose kernels had the chunk flags; they were reverted after run 8,
# so on later trees VLA_CP_FLAGS does nothing and step 5 times the same code twice.)
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
{
  W=/tmp/bitwise s=1-4-32-2048 R=/tmp/repeat && rm -rf "$R" && mkdir -p "$R"
  run() { find "$ROOT/build-ab-$1/" -name vla-run -type f | head -1; }
  args=(--backend cuda --algo chunked --mechanism vla --q "$W/q-$s.npy" --k "$W/k-$s.npy" --v "$W/v-$s.npy" --o o.npy --state-out S.npy --a-state-out A.npy)
  same=0 diff=0
  for i in $(seq 1 20); do
    (cd "$R" && "$(run new)" "${args[@]}" > run.log 2>&1) || { echo "run $i failed: $(tail -1 "$R/run.log")"; diff=$((diff + 1)); continue; }
    for f in o S A; do
      if [ "$i" = 1 ]; then cp "$R/$f.npy" "$R/first-$f.npy"; fi
      if cmp -s "$R/$f.npy" "$R/first-$f.npy" && cmp -s "$R/$f.npy" "$W/a/$s-vla-$f.npy"; then same=$((same + 1)); else diff=$((diff + 1)); echo "run $i $f: DIFFERENT"; fi
    done
  done
  echo "repeat (1,4,32) T = 2048 vla chunked, 20 processes x o, S, A against the first and against old: $same same, $diff different"
} 2>&1 | tee "$OUT/repeat.txt"
source benchmarks/h200_env.sh
shapes=(--shape 1,4,32,2048 --shape 1,4,32,8192 --shape 1,4,32,32768 --shape 1,4,32,131072 --shape 8,16,64,2048 --shape 8,16,64,32768)
for round in 1; do
  for t in old new; do
    b=$(find "$ROOT/build-ab-$t/" -name bench_cuda_targets -type f | head -1)
    echo "== round $round $t ungated: $(timeout 120 "$b" --no-limits --only vla-chunked "${shapes[@]}" 2>&1 >/dev/null |
      grep -E ' ms \(' | awk '{printf "%s %s %s | ", $1, $2, $(NF-3)}')"
  done
done | tee "$OUT/ungated.txt"
grep -E "gated:" "$OUT/final.txt" | sed -E 's/\| \([0-9,]+\) T=[0-9]+ (softmax|delta)[^|]*//g'
# 5. the chunk flags on and off (VLA_CP_FLAGS=0) in the new build, gated, two rounds (appended to ungated.txt)
for round in 1 2; do
  for f in on off; do
    b=$(find "$ROOT/build-ab-new/" -name bench_cuda_targets -type f | head -1)
    envs=(); [ $f = off ] && envs=(VLA_CP_FLAGS=0)
    echo "== round $round flags $f gated: $(env "${envs[@]}" timeout 120 "$b" --no-limits --gate 3000 --only vla-chunked --shape 1,4,32,2048 2>&1 >/dev/null |
      grep -E ' ms \(' | awk '{printf "%s %s %s | ", $1, $2, $(NF-3)}')"
  done
done | tee -a "$OUT/ungated.txt"
# (the device returns eight files: the gated rounds' stderr go into one archive; summary.txt is in all.tar.gz)
tar -C "$OUT" -czf "$OUT/gated-err.tar.gz" $(cd "$OUT" && ls gated-r*.err) && rm -f "$OUT"/gated-r*.err "$OUT/summary.txt"
ls "$OUT"
