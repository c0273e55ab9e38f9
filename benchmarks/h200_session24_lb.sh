#!/usr/bin/env bash
# Session 24, runs 2 and 3 on the H200: the look-back Grams (apart_kernel forms each segment's Gram itself
# and waits for the earlier segments' flags; no gram_kernel launch) against the tree before them
# (.ab/old, carried: `git archive` of d221605). In one call:
#  1. benchmarks/h200_session21.sh with the builds old, new and tl (-DVLA_CP_TIMELINE): timelines at
#     (1,4,32) T = 2048 with the look-back on and off (VLA_CP_LOOKBACK=0), gated rounds of old, new and
#     new:VLA_CP_LOOKBACK=0 at the six target shapes, bitwise old:new, test_cuda on new (every call
#     checks the look-back words are left zero: VLA_CUDA_LB_CHECK, which test_cuda sets);
#  2. compute-sanitizer memcheck and racecheck over test_cuda's ops cases "B2 T37 H3" and "plain walk
#     of" (both take the look-back), memcheck over its "paths" cases (the graph replay among them);
#  3. repeat.txt: the (1,4,32) T = 2048 forward in 10 processes, each output and state byte for byte
#     against the first's.
# Usage on the device (carry [".debs", ".ab"]): OUT=... bash benchmarks/h200_session24_lb.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
S21_BUILDS="new: tl:-DVLA_CP_TIMELINE" S21_TL="tl tl:VLA_CP_LOOKBACK=0" S21_TL_SHAPES="1,4,32,2048" \
  S21_AB="old new new:VLA_CP_LOOKBACK=0" S21_ROUNDS=${S24_ROUNDS:-2} S21_BITWISE="old:new" S21_TESTS="new" S21_SASS=" " \
  OUT=$OUT bash benchmarks/h200_session21.sh
export PATH=$PATH:/usr/local/cuda/bin
B=$ROOT/build-s21-new
{
  for x in "ops:B2 T37 H3:memcheck" "ops:B2 T37 H3:racecheck" "ops:plain walk of:memcheck" "ops:plain walk of:racecheck" "paths::memcheck"; do
    run=${x%%:*} r=${x#*:}; only=${r%%:*} tool=${r#*:}
    VLA_CUDA_TEST_ONLY="$only" CK_RUN_CASE=$run CK_FORK=no timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/tests/test_cuda" > /tmp/san.txt 2>&1
    echo "compute-sanitizer $tool (test_cuda $run: ${only:-all}) exit $?: $(grep -h 'SUMMARY' /tmp/san.txt | tail -n 1); $(grep -h 'Checks' /tmp/san.txt | tail -n 1)"
  done
} 2>&1 | tee "$OUT/sanitizer.txt"
{
  R=/tmp/repeat
  python3 - <<'PY'
import numpy as np
r = np.random.default_rng(24)
for n in "qkv":
    np.save(f"/tmp/rep-{n}.npy", r.standard_normal((1, 2048, 4, 32)).astype(np.float32))
PY
  run=$(find "$B" -name vla-run -type f | head -1)
  rm -rf "$R" && mkdir -p "$R"
  same=0 diff=0
  for i in $(seq 1 10); do
    (cd "$R" && "$run" --backend cuda --algo chunked --mechanism vla --q /tmp/rep-q.npy --k /tmp/rep-k.npy --v /tmp/rep-v.npy \
      --o o.npy --state-out S.npy --a-state-out A.npy > run.log 2>&1) || { echo "run $i failed: $(tail -1 "$R/run.log")"; diff=$((diff + 1)); continue; }
    for f in o S A; do
      [ "$i" = 1 ] && cp "$R/$f.npy" "$R/first-$f.npy"
      if cmp -s "$R/$f.npy" "$R/first-$f.npy"; then same=$((same + 1)); else diff=$((diff + 1)); echo "run $i $f: DIFFERENT"; fi
    done
  done
  echo "repeat (1,4,32) T = 2048 vla chunked, 10 processes x o, S, A against the first: $same same, $diff different"
} 2>&1 | tee "$OUT/repeat.txt"
