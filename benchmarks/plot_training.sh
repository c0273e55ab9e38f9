#!/usr/bin/env bash
# Training curves from vla-train's CSV logs: loss (left, log scale) and accuracy (right: the
# training batch's exact match as a line, evaluations as points) against the step, one colour
# per run, several runs on one figure.
#
#   bash benchmarks/plot_training.sh [--out PREFIX] [--title TEXT] RUN [RUN ...]
#
# RUN is a vla-train --out directory (its train.csv is read) or a CSV file itself, optionally
# followed by =LABEL (runs/vla=VLA); the label defaults to the directory's name. Writes
# PREFIX.png and PREFIX.svg (default PREFIX: training). Needs gnuplot (Debian: gnuplot-nox) and awk.
set -eu

usage() {
    cat <<'EOF'
usage: bash benchmarks/plot_training.sh [--out PREFIX] [--title TEXT] RUN [RUN ...]
Plots vla-train's training curves: loss (log scale) and accuracy (train batches as lines,
evaluations as points) against the step, every run on the same two panels.
  RUN            a vla-train --out directory or its train.csv, optionally RUN=LABEL
                 (label default: the directory's name)
  --out PREFIX   writes PREFIX.png and PREFIX.svg (default: training)
  --title TEXT   figure title (default: none)
  --help         this help
Needs gnuplot and awk. Exit status: 0 written, 1 bad input, 2 bad command line.
EOF
}

PREFIX=training
TITLE=
RUNS=()
while [ $# -gt 0 ]; do
    case $1 in
    --help | -h) usage; exit 0 ;;
    --out) [ $# -ge 2 ] || { echo "plot_training.sh: --out needs a value" >&2; exit 2; }; PREFIX=$2; shift 2 ;;
    --out=*) PREFIX=${1#--out=}; shift ;;
    --title) [ $# -ge 2 ] || { echo "plot_training.sh: --title needs a value" >&2; exit 2; }; TITLE=$2; shift 2 ;;
    --title=*) TITLE=${1#--title=}; shift ;;
    --*) echo "plot_training.sh: unknown flag '$1' (see --help)" >&2; exit 2 ;;
    *) RUNS+=("$1"); shift ;;
    esac
done
[ ${#RUNS[@]} -gt 0 ] || { usage >&2; exit 2; }
command -v gnuplot >/dev/null 2>&1 || { echo "plot_training.sh: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
HEADER="step,lr,loss,train_acc,grad_norm,eval_acc,steps_per_s,tokens_per_s,elapsed_s"
COLORS=("#d62728" "#1f77b4" "#2ca02c" "#000000" "#9467bd" "#ff7f0e" "#8c564b" "#e377c2" "#7f7f7f" "#17becf")

# gnuplot strings are double-quoted: escape what would end or escape them.
gp_str() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }

LOSS_PLOTS=
ACC_PLOTS=
i=0
for spec in "${RUNS[@]}"; do
    path=$spec
    label=
    case $spec in *=*) path=${spec%%=*}; label=${spec#*=} ;; esac
    csv=$path
    [ -d "$path" ] && csv=$path/train.csv
    [ -r "$csv" ] || { echo "plot_training.sh: cannot read '$csv'" >&2; exit 1; }
    if [ "$(head -n 1 "$csv")" != "$HEADER" ]; then
        echo "plot_training.sh: '$csv' is not a vla-train CSV (its header differs)" >&2
        exit 1
    fi
    if [ -z "$label" ]; then
        if [ -d "$path" ]; then label=$(basename "$(cd "$path" && pwd)"); else label=$(basename "$(cd "$(dirname "$csv")" && pwd)"); fi
    fi
    # Per run: loss, train accuracy, and the rows with an evaluation.
    awk -F, -v d="$TMP/r$i" 'NR > 1 && $1 != "" {
        if ($3 != "" && $3 + 0 > 0) print $1, $3 > (d ".loss")
        if ($4 != "" && $4 != "nan") print $1, $4 > (d ".acc")
        if ($6 != "") print $1, $6 > (d ".eval")
    }' "$csv"
    [ -s "$TMP/r$i.loss" ] || { echo "plot_training.sh: '$csv' has no logged steps" >&2; exit 1; }
    color=${COLORS[$((i % ${#COLORS[@]}))]}
    lbl=$(gp_str "$label")
    LOSS_PLOTS+="${LOSS_PLOTS:+, }'$TMP/r$i.loss' using 1:2 with lines lw 2 lc rgb '$color' title \"$lbl\""
    [ -s "$TMP/r$i.acc" ] &&
        ACC_PLOTS+="${ACC_PLOTS:+, }'$TMP/r$i.acc' using 1:2 with lines lw 2 lc rgb '$color' title \"$lbl (train)\""
    [ -s "$TMP/r$i.eval" ] &&
        ACC_PLOTS+="${ACC_PLOTS:+, }'$TMP/r$i.eval' using 1:2 with points pt 7 ps 1.2 lc rgb '$color' title \"$lbl (eval)\""
    i=$((i + 1))
done
[ -n "$ACC_PLOTS" ] || ACC_PLOTS="NaN notitle"

body() {
    local title
    title=$(gp_str "$TITLE")
    cat <<EOF
set multiplot layout 1,2 title "$title"
set grid
set xlabel "step"
set key top right
set logscale y
set ylabel "loss (cross-entropy over target positions)"
plot $LOSS_PLOTS
unset logscale y
set ylabel "exact-match accuracy"
set yrange [0:1.02]
set key top left  # accuracy climbs from 0: early steps leave the top left empty
plot $ACC_PLOTS
unset multiplot
EOF
}

{
    echo "set terminal pngcairo size 1400,560 font ',10'"
    echo "set output '$PREFIX.png'"
    body
    echo "set terminal svg size 1400,560 dynamic font 'sans,10'"
    echo "set output '$PREFIX.svg'"
    body
} > "$TMP/plot.gp"
gnuplot "$TMP/plot.gp" 2> "$TMP/gnuplot.err" || { echo "plot_training.sh: gnuplot failed: $(head -c 300 "$TMP/gnuplot.err")" >&2; exit 1; }
echo "wrote $PREFIX.png and $PREFIX.svg"
