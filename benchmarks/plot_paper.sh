#!/usr/bin/env bash
# plot_paper.sh: the plots of benchmarks/reproduce_paper.sh's results folder, from the data that
# benchmarks/paper_tables.py writes into RESULTS/plots/:
#   capacity.{png,svg}       Table 11: eval accuracy against the number of pairs n, ours at each
#                            step count (solid, dashed) and the paper's (dotted, open points)
#   accuracy_vs_T.{png,svg}  Figure 6: eval accuracy against T at n = 8 (log2 axis), ours and the
#                            paper's values as read from its figure (dotted)
#   loss-NAME.{png,svg}      loss and accuracy curves of the runs listed in loss-NAME.runs
#                            (benchmarks/plot_training.sh)
#
# Usage: bash benchmarks/plot_paper.sh RESULTS
#   -h, --help   this text
# Needs gnuplot (Debian: gnuplot-nox) and awk. Exit status: 0 written, 1 a plot failed, 2 bad
# command line.
set -uo pipefail

usage() { sed -n '2,/^set -uo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "plot_paper.sh: $*" >&2; exit "${2:-2}"; }
case ${1:-} in -h | --help) usage; exit 0 ;; esac
[ $# -eq 1 ] || die "usage: bash benchmarks/plot_paper.sh RESULTS"
[[ $1 != -* ]] || die "unknown option '$1' (see --help)"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
P=$1/plots
[ -d "$P" ] || die "'$P' does not exist (run benchmarks/paper_tables.py $1 first)" 1
command -v gnuplot > /dev/null || die "gnuplot not found (apt-get install gnuplot-nox)" 1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
declare -A COLOR=([softmax]="#d62728" [linear]="#1f77b4" [deltanet]="#2ca02c" [delta]="#9467bd" [vla]="#000000")
declare -A LBL=([softmax]=softmax [linear]=linear [deltanet]="DeltaNet (paper's)" [delta]="std. DeltaNet" [vla]=VLA)
rc=0

# plot DAT OUT XLABEL TITLE LOGX: one line per column of DAT (header "# x mech@what ...").
plot() {
  local dat=$1 out=$2 xl=$3 title=$4 logx=$5 cols i=0 c m what dt pt lines=""
  read -r -a cols <<< "$(head -n 1 "$dat" | sed 's/^# *//')"
  for c in "${cols[@]}"; do
    i=$((i + 1))
    ((i == 1)) && continue
    m=${c%@*} what=${c#*@}
    case $what in
      paper) dt=3 pt=6 ;;
      3000 | ours) dt=1 pt=7 ;;
      *) dt=1 pt=7 ;;
    esac
    # two step counts: the larger dashed
    [[ $what =~ ^[0-9]+$ ]] && [ "$(head -n 1 "$dat" | grep -o "\<$m@[0-9]\+\>" | sort -t@ -k2,2n | tail -n 1)" = "$c" ] &&
      [ "$(head -n 1 "$dat" | grep -o "\<$m@[0-9]\+\>" | wc -l)" -gt 1 ] && dt=2
    local t="${LBL[$m]:-$m}"
    case $what in paper) t="$t, paper" ;; ours) ;; *) t="$t, $what steps" ;; esac
    lines+="${lines:+, }'$dat' using 1:$i with linespoints dt $dt pt $pt ps 1.1 lw 2 lc rgb '${COLOR[$m]:-#777777}' title \"$t\""
  done
  [ -n "$lines" ] || return 0
  {
    for term in png svg; do
      if [ $term = png ]; then
        echo "set terminal pngcairo size 900,560 font ',10'"
      else
        echo "set terminal svg size 900,560 dynamic font 'sans,10'"
      fi
      echo "set output '$out.$term'"
      echo "set datafile missing 'NaN'"
      echo "set grid"
      echo "set title \"$title\""
      echo "set xlabel \"$xl\""
      echo "set ylabel 'eval accuracy (exact match, 20 batches of 32)'"
      echo "set yrange [0:1.05]"
      echo "set key outside right"
      echo "set offsets graph 0.04, graph 0.04, 0, 0" # room for the end tics (a log axis can drop its last one)
      if [ "$logx" = 1 ]; then echo "set logscale x 2"; fi
      echo "set xtics ($(awk 'NR > 1 { printf "%s%s", s, $1; s = ", " }' "$dat"))"
      echo "plot $lines"
    done
  } > "$TMP/p.gp"
  if gnuplot "$TMP/p.gp" 2> "$TMP/err"; then
    echo "wrote $out.png and $out.svg"
  else
    echo "plot_paper.sh: gnuplot failed on $dat: $(head -c 300 "$TMP/err")" >&2
    rc=1
  fi
}

[ -s "$P/capacity.dat" ] && plot "$P/capacity.dat" "$P/capacity" "pairs n (T = 3n + 1)" "Capacity (Table 11): MQAR, seed 42" 0
[ -s "$P/accuracy_vs_T.dat" ] && plot "$P/accuracy_vs_T.dat" "$P/accuracy_vs_T" "sequence length T" "Long context (Figure 6): MQAR n = 8, seed 42" 1
for f in "$P"/loss-*.runs; do
  [ -e "$f" ] || continue
  title=$(sed -n '1s/^# *//p' "$f")
  specs=()
  while IFS= read -r line; do
    [[ -z $line || $line == \#* ]] && continue
    specs+=("$1/$line")
  done < "$f"
  ((${#specs[@]})) || continue
  bash "$ROOT/benchmarks/plot_training.sh" --out "${f%.runs}" --title "$title" "${specs[@]}" || rc=1
done
exit $rc
