# Sourced first by the H200 device scripts (benchmarks/h200_*.sh): the shell options, ROOT (the
# repository) as the working directory, OUT (default $ROOT/h200-out) created, START, and log()
# (seconds since the script began, then the message, also appended to $S). With H200_SCRATCH set
# (a folder under /tmp, a plain shell variable) that folder is emptied and created, W names it and
# S is $W/summary.txt; otherwise S is $OUT/summary.txt. (Session 18: the lines every script had.)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
if [ -n "${H200_SCRATCH:-}" ]; then
  W=$H200_SCRATCH && rm -rf "$W" && mkdir -p "$W"
  S=$W/summary.txt
else
  S=$OUT/summary.txt
fi
START=$SECONDS
log() { echo "[$((SECONDS - START)) s] $*" | tee -a "$S"; }
