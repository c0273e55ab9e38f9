#!/usr/bin/env bash
# Session 25, the last call on the H200, on the tree it lands (3xTF32 in the A part's UK products,
# the 16-byte walk at dk = 64; carry [".debs", ".ab"], .ab/old = 69d0502, session 24's last commit):
#  1. sm_90 builds of old (bench_cuda_targets) and new (test_cuda, vla-check, bench_cuda_targets),
#     beside benchmarks/h200_ptx75.sh (the sm_75 code as a compute_75 JIT build: test_cuda and
#     vla-check --backend cuda; ptx75.tar.gz);
#  2. new: test_cuda (test_cuda.log), vla-check --backend cuda (vla-check.txt), and compute-sanitizer
#     memcheck and racecheck over test_cuda's cases that take walk_kernel<64, 32> (the "H67" cases;
#     sanitizer.txt); the logs in logs.tar.gz;
#  3. final.txt: two ungated and two gated (--gate 3000) rounds of old and new at the six target shapes.
# Usage on the device: OUT=... bash benchmarks/h200_session25_final.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
L=/tmp/s25final && rm -rf "$L" && mkdir -p "$L" "$OUT" # logs, returned as logs.tar.gz (at most 8 files come back)
source benchmarks/h200_env.sh
for t in old new; do
  src=$ROOT tg="bench_cuda_targets test_cuda vla-check"; [ $t = old ] && src=$ROOT/.ab/old tg=bench_cuda_targets
  { cmake -S "$src" -B "$ROOT/build-s25-$t" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF &&
    cmake --build "$ROOT/build-s25-$t" -j8 --target $tg; } > "$L/build-s25-$t.log" 2>&1 &
done
OUT=$OUT bash benchmarks/h200_ptx75.sh
wait
B=$ROOT/build-s25-new
CK_FORK=no timeout 200 "$B/tests/test_cuda" > "$OUT/test_cuda.log" 2>&1
echo "test_cuda (sm_90) exit $?: $(tail -n 1 "$OUT/test_cuda.log")"
timeout 120 "$B/tools/vla-check" --backend cuda > "$L/vla-check.txt" 2>&1
echo "vla-check (sm_90) exit $?: $(tail -n 1 "$L/vla-check.txt")"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  CK_FORK=no CK_RUN_CASE=ops VLA_CUDA_TEST_ONLY=H67 timeout 120 "$CS" --tool $tool "$B/tests/test_cuda" > "$L/sanitizer-$tool.log" 2>&1
  echo "compute-sanitizer $tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/sanitizer-$tool.log" | tail -n 1) | $(grep -E '^[0-9]+%' "$L/sanitizer-$tool.log" | tail -n 1)"
done | tee "$OUT/sanitizer.txt"
shapes=(--shape 1,4,32,2048 --shape 1,4,32,8192 --shape 1,4,32,32768 --shape 1,4,32,131072 --shape 8,16,64,2048 --shape 8,16,64,32768)
{
  for round in 1 2; do
    for mode in ungated gated; do
      for t in old new; do
        b=$(find "$ROOT/build-s25-$t/" -name bench_cuda_targets -type f | head -1)
        g=(); [ $mode = gated ] && g=(--gate 3000)
        echo "== round $round $t $mode: $(timeout 120 "$b" --no-limits "${g[@]}" --only vla-chunked "${shapes[@]}" 2>&1 >/dev/null |
          grep -E ' ms \(' | awk '{printf "%s %s %s | ", $1, $2, $(NF-3)}')"
      done
    done
  done
} 2>&1 | tee "$OUT/final.txt"
tar -C "$L" -czf "$OUT/logs.tar.gz" .
