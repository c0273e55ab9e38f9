#!/usr/bin/env bash
# Unpacks a report.tar.gz that benchmarks/gpu_report.sh made on the GPU machine (the device tool
# brings it back under its files folder) into benchmarks/results/, and draws the sweep's plot
# (benchmarks/plot_scaling.sh: vla-bench-cuda.png and .svg) where gnuplot is installed.
#
# Usage: bash benchmarks/unpack_report.sh REPORT.tar.gz [options]
#   --dest DIR     where the report's folder goes (default: benchmarks/results)
#   --force        replace a folder of the same name
#   --no-plots     do not draw the plot
#   --slim         drop the bulky logs the README summarises (build logs, ctest.log, the sanitizer
#                  logs' tarball, the baseline's vla-check outputs, the peers' stdout, *.err)
#   -h, --help     this text
#
# Prints the folder and its size: benchmarks/results/ as a whole is kept under 3 MB, so drop
# what the README does not need (large logs) before committing.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "unpack_report.sh: $*" >&2; exit "${2:-1}"; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=$ROOT/benchmarks/results FORCE=0 PLOTS=1 SLIM=0 TARBALL=""
while [ $# -gt 0 ]; do
  case $1 in
    --dest) DEST=${2:?--dest needs a folder}; shift ;;
    --force) FORCE=1 ;;
    --no-plots) PLOTS=0 ;;
    --slim) SLIM=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" 2 ;;
    *) [ -z "$TARBALL" ] || die "one tarball at a time" 2; TARBALL=$1 ;;
  esac
  shift
done
[ -n "$TARBALL" ] || { usage >&2; exit 2; }
[ -r "$TARBALL" ] || die "cannot read '$TARBALL'"

# The tarball holds one folder (DATE-DEVICE-cuda-report/...), nothing outside it.
mapfile -t tops < <(tar -tzf "$TARBALL" | sed 's|^\./||' | cut -d/ -f1 | sort -u)
[ ${#tops[@]} -eq 1 ] || die "'$TARBALL' does not hold exactly one folder (${tops[*]})"
case ${tops[0]} in .* | */* | *..*) die "unexpected folder name '${tops[0]}'" ;; esac
NAME=${tops[0]}

mkdir -p "$DEST"
if [ -e "$DEST/$NAME" ]; then
  [ "$FORCE" = 1 ] || die "$DEST/$NAME exists (--force replaces it)"
  rm -rf "${DEST:?}/$NAME"
fi
tar -xzf "$TARBALL" -C "$DEST" --no-same-owner --no-same-permissions
# The tool's copies are read-only; the report is edited and committed here.
chmod -R u+w "$DEST/$NAME"

if [ "$SLIM" = 1 ]; then
  (
    cd "$DEST/$NAME"
    rm -f build*.log.xz ctest.log sanitizer-logs.tar baseline-vla-check-*.txt peers-*.txt ./*.err
    # The README's file list names only what is left.
    awk '/^- `[^`]*`$/ { f = substr($2, 2, length($2) - 2); if (system("test -e \"" f "\"")) next } { print }' \
      README.md > README.md.tmp && mv README.md.tmp README.md
  )
fi

if [ "$PLOTS" = 1 ] && [ -s "$DEST/$NAME/vla-bench-cuda.csv" ]; then
  if command -v gnuplot > /dev/null; then
    bash "$ROOT/benchmarks/plot_scaling.sh" "$DEST/$NAME/vla-bench-cuda.csv" "$DEST/$NAME/vla-bench-cuda"
  else
    echo "unpack_report.sh: gnuplot not found (apt-get install gnuplot-nox): no plot" >&2
  fi
fi

echo "$DEST/$NAME ($(du -sh "$DEST/$NAME" | cut -f1); benchmarks/results/ in all: $(du -sh "$ROOT/benchmarks/results" 2> /dev/null | cut -f1))"
sed -n '/^| stage/,/^$/p' "$DEST/$NAME/README.md" 2> /dev/null || true
