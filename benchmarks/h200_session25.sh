#!/usr/bin/env bash
# Session 25 on the H200: the A part's products in 3xTF32 (VLA_CP_A3, vla_chunkpar.cu) against
# 4xTF32, in one call: benchmarks/h200_session21.sh with $S21_* as given (old = .ab/old, the tree
# before the change, carried), then
#  - phase-cycles.txt: the phase-cycle lines of its VLA_CUDA_KERNEL_TIMES rounds (first two per shape);
#  - errors.txt: for each test_cuda log, the largest VLA errors (o, S, A, n) against float64 and
#    their ratio to each case's tolerance, worst first;
#  - with S25_CHECK=build: vla-check --backend cuda of that build (vla-check.txt).
# Usage on the device (carry [".debs", ".ab"]): OUT=... S21_...=... bash benchmarks/h200_session25.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
OUT=$OUT bash "$ROOT/benchmarks/h200_session21.sh"
for f in /tmp/s21/bench-r1-*KERNEL_TIMES*-gate.txt; do
  [ -f "$f" ] || continue
  echo "== $(basename "$f")"
  grep -E "^chunkpar|^apart block cycles" "$f" | awk '/^chunkpar/{k = $2 " " $3 " " $4 " " $5; show = ++n[k] <= 2} show' | cut -c1-400
done | tee "$OUT/phase-cycles.txt"
for f in /tmp/s21/test_cuda-*.log; do
  [ -f "$f" ] || continue
  echo "== $(basename "$f"): the 12 largest (error / tolerance) over VLA rows against float64"
  grep -E "^  (long )?vla" "$f" | grep -v "vs cpu" | python3 -c '
import sys, re
rows = []
for l in sys.stdin:
    m = re.search(r"\(tol ([0-9.e+-]+)\)", l)
    if not m: continue
    tol = float(m.group(1))
    errs = [float(x) for x in re.findall(r" [oSAn] ([0-9.]+e[+-][0-9]+)", l)]
    if errs: rows.append((max(errs) / tol, l.rstrip()))
rows.sort(reverse=True)
for r, l in rows[:12]: print("%.3f  %s" % (r, l.strip()[:150]))
print("rows", len(rows))'
done | tee "$OUT/errors.txt"
if [ -n "${S25_CHECK:-}" ]; then
  d="$ROOT/build-s21-$S25_CHECK"
  { cmake --build "$d" -j"$(nproc)" --target vla-check > /tmp/s21/build-check.log 2>&1 &&
    timeout 90 "$d/tools/vla-check" --backend cuda; } > "$OUT/vla-check.txt" 2>&1
  echo "vla-check $S25_CHECK exit $?: $(tail -n 1 "$OUT/vla-check.txt")"
fi
