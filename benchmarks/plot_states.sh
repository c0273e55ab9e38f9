#!/usr/bin/env bash
# Plots the per-token state norms of `vla-probe states --output csv`: one line per mechanism
# (linear attention, DeltaNet and VLA ||S_t||_F; VLA's ||A_t||_F dashed), log-y axis, as the
# paper's Figure 4 does. Needs gnuplot (Debian: gnuplot-nox or gnuplot).
#
#   bash benchmarks/plot_states.sh STATES_CSV OUT_PREFIX [SUBTITLE]
#
# writes OUT_PREFIX.png and OUT_PREFIX.svg. On failure: non-zero status, one line on stderr.
set -euo pipefail

die() { echo "plot_states.sh: $*" >&2; exit 1; }

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: $0 STATES_CSV OUT_PREFIX [SUBTITLE]" >&2
    exit 2
fi
csv=$1
out=$2
sub=${3:-}
[ -r "$csv" ] || die "$csv: not readable"
[ "$(head -n 1 "$csv")" = "t,linear_S,delta_S,vla_S,vla_A" ] || die "$csv: not the csv of vla-probe states"
command -v gnuplot > /dev/null || die "gnuplot not found (apt-get install gnuplot-nox)"
case "$csv$out$sub" in *"'"*) die "quotes (') in file names or the subtitle are not supported" ;; esac
here=$(cd "$(dirname "$0")" && pwd)

for term in png svg; do
    gnuplot -e "csv='$csv'; out='$out.$term'; term='$term'; sub='$sub'" "$here/plot_states.gp" ||
        die "gnuplot failed for $out.$term"
done
echo "wrote $out.png and $out.svg"
