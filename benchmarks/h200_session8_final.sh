#!/usr/bin/env bash
# Session 8's last H200 call, on the commit it lands: benchmarks/h200_check.sh (fat binary, test_cuda,
# vla-check --backend cuda, compute-sanitizer memcheck and racecheck over test_cuda's ops cases
# named by $CHECK_ONLY), then bench_cuda_targets over every target row (limits measured in the
# same run) from the same build. NCU_WALK=1 adds Nsight Compute's instruction count and stall
# reasons for one walk_rows_kernel launch at (1,4,32) T = 2048 (caches left warm), as session 5's
# run9 measured walk_kernel (ncu-walk.txt).
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
if [ "${NCU_WALK:-0}" = 1 ]; then
  timeout 120 ncu --clock-control none --kernel-name regex:walk_rows --launch-skip 1 --launch-count 1 --cache-control none \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__cycles_active.max,smsp__inst_executed.sum,smsp__warps_launched.sum" \
    "$(find "$B" -name bench_cuda_targets -type f | head -1)" --no-limits --quick --only vla-chunked --shape 1,4,32,2048 \
    > /tmp/check/ncu-walk.txt 2>&1
  echo "ncu walk_rows_kernel exit $?" | tee -a /tmp/check/summary.txt
  grep -E "stalled|cycles_active|inst_executed|warps_launched" /tmp/check/ncu-walk.txt | awk '$NF+0 >= 0.05 || /cycles|inst|warps_l/' |
    sort -k3 -g -r | head -14 | tee -a /tmp/check/summary.txt
fi
cp /tmp/check/summary.txt /tmp/check/bench_cuda.md "$OUT/"
tar -C /tmp/check -czf "$OUT/all.tar.gz" .
grep -E "^\| \(|^\| decode|^- decode" /tmp/check/bench_cuda.md | cut -d'|' -f2-8 | head -60
