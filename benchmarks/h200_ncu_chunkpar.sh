#!/usr/bin/env bash
# Nsight Compute on the chunk-parallel form's kernels (H200, sm_90 build), to see what bounds them:
# one launch each of walk_kernel, apart_kernel and output_kernel at (1,4,32) T = 2048, and of
# apart_kernel and output_kernel at (8,16,64) T = 2048 (warp stall reasons, scheduler and memory
# sections, the top stalled instructions). Logs in $OUT/ncu.tar.gz, a digest printed.
# NCU_STALLS=1: instead, the average stall reasons per issued instruction (every
# smsp__average_warps_issue_stalled_* metric) with the caches left warm (--cache-control none: the
# default flush before the profiled launch makes the kernel read P and Q from DRAM, not from L2
# where the previous kernel left them), for walk_kernel at (1,4,32) and apart_kernel at (8,16,64).
# Session 10: NCU_LIST="kernel-regex:shape ..." picks the launches (both modes), and in the stall
# mode the SourceCounters section's top stalled instructions are kept too (-lineinfo build).
# Usage on the device (carry [".debs"]): OUT=... bash benchmarks/h200_ncu_chunkpar.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
W=/tmp/ncu && rm -rf "$W" && mkdir -p "$W" "$OUT"
source "$ROOT/benchmarks/h200_env.sh"
B=$ROOT/build-h200
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF \
    -DCMAKE_CUDA_FLAGS=-lineinfo && cmake --build "$B" -j"$(nproc)" --target bench_cuda_targets; } > "$W/build.log" 2>&1 ||
  { tail -40 "$W/build.log"; exit 1; }
BENCH=$(find "$B" -name bench_cuda_targets -type f | head -1)
prof() { # name regex, shape
  timeout 120 ncu --kernel-name "regex:$1" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section LaunchStats --section Occupancy --section SourceCounters \
    "$BENCH" --no-limits --quick --only vla-chunked --shape "$2" > "$W/ncu-$1-$2.txt" 2>&1
  echo "== $1 $2 (exit $?)"
  grep -E "Duration|Warp Cycles Per Issued|Issued Warp Per Scheduler|No Eligible|Achieved Occupancy|Registers Per|Stall|stall" "$W/ncu-$1-$2.txt" | head -30
}
stalls() { # name regex, shape
  timeout 120 ncu --kernel-name "regex:$1" --launch-skip 1 --launch-count 1 --cache-control none \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__cycles_active.avg,smsp__inst_executed.sum" \
    "$BENCH" --no-limits --quick --only vla-chunked --shape "$2" > "$W/stalls-$1-$2.txt" 2>&1
  echo "== stalls $1 $2 (exit $?)"
  grep -E "stalled|cycles_active|inst_executed" "$W/stalls-$1-$2.txt" | awk '$NF+0 >= 0.05 || /cycles|inst/' | sort -k3 -g -r | head -14
  if [ -n "${NCU_LIST:-}" ]; then # the SASS lines with the most stall samples
    timeout 120 ncu --kernel-name "regex:$1" --launch-skip 1 --launch-count 1 --cache-control none --section SourceCounters \
      --section WarpStateStats -o "$W/rep-$1-$2" "$BENCH" --no-limits --quick --only vla-chunked --shape "$2" > "$W/source-$1-$2.txt" 2>&1
    ncu -i "$W/rep-$1-$2.ncu-rep" --page source --csv --print-source sass > "$W/sass-$1-$2.csv" 2>&1
    python3 - "$W/sass-$1-$2.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hi = next((i for i, r in enumerate(rows) if any("Warp Stall Sampling (All" in c for c in r)), None)
if hi is None:
    print("no source page:", " | ".join(rows[0][:4]) if rows else "empty"); sys.exit(0)
h = rows[hi]; ci = next(i for i, c in enumerate(h) if "Warp Stall Sampling (All" in c)
si = next((i for i, c in enumerate(h) if c.strip() == "Source"), 1)
body = [r for r in rows[hi + 1:] if len(r) > ci]
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
tot = sum(num(r[ci]) for r in body) or 1.0
print("stall samples: %d over %d SASS lines; the top 24:" % (tot, len(body)))
for r in sorted(body, key=lambda r: -num(r[ci]))[:24]:
    print("  %5.1f%%  %s" % (100 * num(r[ci]) / tot, r[si].strip()[:110]))
PY
  fi
}
if [ "${NCU_STALLS:-0}" = 1 ]; then
  for x in ${NCU_LIST:-walk_kernel:1,4,32,2048 apart_kernel:8,16,64,2048 output_kernel:8,16,64,2048}; do stalls "${x%%:*}" "${x#*:}"; done
  tar -C "$W" -czf "$OUT/ncu.tar.gz" .
  exit 0
fi
if [ -n "${NCU_LIST:-}" ]; then
  for x in $NCU_LIST; do prof "${x%%:*}" "${x#*:}"; done
  tar -C "$W" -czf "$OUT/ncu.tar.gz" .
  exit 0
fi
prof walk_kernel 1,4,32,2048
prof apart_kernel 1,4,32,2048
prof output_kernel 1,4,32,2048
prof apart_kernel 8,16,64,2048
prof output_kernel 8,16,64,2048
tar -C "$W" -czf "$OUT/ncu.tar.gz" .
