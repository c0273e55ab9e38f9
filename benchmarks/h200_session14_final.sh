#!/usr/bin/env bash
# Session 14's last H200 call, on the commit it lands:
#  - CHECK_ONLY=C16 (or the caller's, since session 18) benchmarks/h200_session8_final.sh: fat binary (sm_75 + sm_90), test_cuda,
#    vla-check --backend cuda, compute-sanitizer memcheck and racecheck over test_cuda's "C16" ops
#    cases, then bench_cuda_targets over every target row (limits measured in the same run);
#  - gated.md: bench_cuda_targets --gate 3000 (the GPU's time alone) for vla-chunked, softmax and
#    delta at the six target shapes, this tree ("new", the fat build) and the tree in .ab/old
#    ("old", sm_90, built meanwhile), two rounds in turn.
# Usage on the device (carry [".debs", ".ab"]): OUT=... bash benchmarks/h200_session14_final.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/cuda/bin
( source "$ROOT/benchmarks/h200_env.sh"
  cmake -S .ab/old -B "$ROOT/build-ab-old" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF &&
  cmake --build "$ROOT/build-ab-old" -j4 --target bench_cuda_targets ) > /tmp/build-old.log 2>&1 &
OLD=$!
CHECK_ONLY="${CHECK_ONLY:-C16}" OUT=$OUT bash "$ROOT/benchmarks/h200_session8_final.sh" # (session 18: CHECK_ONLY from the caller)
wait $OLD || { tail -20 /tmp/build-old.log; exit 1; }
source "$ROOT/benchmarks/h200_env.sh"
shapes=(--shape 1,4,32,2048 --shape 1,4,32,8192 --shape 1,4,32,32768 --shape 1,4,32,131072 --shape 8,16,64,2048 --shape 8,16,64,32768)
for round in 1 2; do
  for t in old new; do
    d=$ROOT/build-h200-fat; [ $t = old ] && d=$ROOT/build-ab-old
    b=$(find "$d" -name bench_cuda_targets -type f | head -1)
    echo "== round $round $t ($b)" >> "$OUT/gated.md"
    timeout 120 "$b" --no-limits --gate 3000 --only vla-chunked,softmax,delta "${shapes[@]}" >> "$OUT/gated.md" 2> "$OUT/gated-r$round-$t.err"
    echo "== round $round $t gated: $(grep -E ' ms \(' "$OUT/gated-r$round-$t.err" | awk '{printf "%s %s %s %s | ", $1, $2, $3, $(NF-3)}')"
  done
done
