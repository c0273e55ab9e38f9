#!/usr/bin/env bash
# Session 24's last H200 call (run 4), on the tree it lands (carry [".debs", ".ab"]; .ab/old = d221605,
# session 23's last commit, whose kernels this tree keeps: the PTX of vla_chunkpar.cu is identical):
#  1. benchmarks/h200_session21.sh with the builds old, new and w6 (-DVLA_WQ_DIAG=6: the plain walk
#     takes only the first half of its steps, timing only, the results wrong: what a walk of two
#     chunks a step could save at most): gated rounds at (1,4,32) T = 2048, bitwise old:new,
#     test_cuda on new (its 119 cases; the 119th had run only in the CPU emulator);
#  2. ungated.txt: one ungated round of old and new at the six target shapes.
# Usage on the device: OUT=... bash benchmarks/h200_session24_final.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
S21_BUILDS="new: w6:-DVLA_WQ_DIAG=6" S21_AB="old new w6" S21_SHAPES="1,4,32,2048" S21_ROUNDS=3 \
  S21_BITWISE="old:new" S21_TESTS="new" S21_SASS=" " OUT=$OUT bash benchmarks/h200_session21.sh
source benchmarks/h200_env.sh
shapes=(--shape 1,4,32,2048 --shape 1,4,32,8192 --shape 1,4,32,32768 --shape 1,4,32,131072 --shape 8,16,64,2048 --shape 8,16,64,32768)
for t in old new; do
  b=$(find "$ROOT/build-s21-$t/" -name bench_cuda_targets -type f | head -1)
  echo "== round 1 $t ungated: $(timeout 120 "$b" --no-limits --only vla-chunked "${shapes[@]}" 2>&1 >/dev/null |
    grep -E ' ms \(' | awk '{printf "%s %s %s | ", $1, $2, $(NF-3)}')"
done 2>&1 | tee "$OUT/ungated.txt"
