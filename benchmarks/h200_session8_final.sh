#!/usr/bin/env bash
# Session 8's last H200 call, on the commit it lands: benchmarks/h200_check.sh (fat binary, test_cuda,
# vla-check --backend cuda, compute-sanitizer memcheck and racecheck over test_cuda's ops cases
# named by $CHECK_ONLY), then bench_cuda_targets over every target row (limits measured in the
# same run) from the same build.
# Usage on the device (carry [".debs"]): CHECK_ONLY=delta bash benchmarks/h200_session8_final.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
bash "$ROOT/benchmarks/h200_check.sh"
B=$ROOT/build-h200-fat
cmake --build "$B" -j"$(nproc)" --target bench_cuda_targets > /tmp/check/build-bench.log 2>&1 || { tail -20 /tmp/check/build-bench.log; exit 1; }
timeout 240 "$(find "$B" -name bench_cuda_targets -type f | head -1)" --json /tmp/check/bench_cuda.json \
  > /tmp/check/bench_cuda.md 2> /tmp/check/bench_cuda.err
echo "bench_cuda_targets exit $?" | tee -a /tmp/check/summary.txt
cp /tmp/check/summary.txt /tmp/check/bench_cuda.md "$OUT/"
tar -C /tmp/check -czf "$OUT/all.tar.gz" .
grep -E "^\| \(|^\| decode|^- decode" /tmp/check/bench_cuda.md | cut -d'|' -f2-8 | head -60
