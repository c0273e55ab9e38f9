#!/usr/bin/env bash
# The paper's Figure 3 from a vla-bench CSV: forward latency (left) and throughput (right)
# against sequence length on log-log axes, one line per mechanism and algorithm, and for each
# linear-time mechanism's fastest algorithm its crossover with softmax marked (a vertical line
# labelled with T; interpolated on log-log axes as vla-bench's summary does).
#
#   bash benchmarks/plot_scaling.sh results.csv out_prefix
#
# Writes out_prefix.png and out_prefix.svg. A CSV with several shapes (B, H, d) gets one figure
# per shape: the first as out_prefix.*, the others as out_prefix-B<B>-H<H>-d<d>.*. Skipped
# rows (empty numbers, a note) are left out. Needs gnuplot (Debian: gnuplot-nox) and awk.
set -eu
if [ $# -ne 2 ]; then
    echo "usage: bash benchmarks/plot_scaling.sh results.csv out_prefix" >&2
    exit 2
fi
CSV=$1
PREFIX=$2
[ -r "$CSV" ] || { echo "plot_scaling.sh: cannot read '$CSV'" >&2; exit 1; }
command -v gnuplot >/dev/null 2>&1 || { echo "plot_scaling.sh: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# One awk pass: data files per series, and a gnuplot body per shape (plots, crossover marks).
awk -F, -v dir="$TMP" -v prefix="$PREFIX" '
function color(m) { return m == "softmax" ? "#000000" : m == "linear" ? "#1f77b4" : m == "delta" ? "#2ca02c" : m == "vla" ? "#d62728" : "#7f7f7f" }
function dash(a)  { return a == "chunked" ? 2 : a == "scan" ? 3 : a == "two-level" ? 4 : 1 }
function ptype(a) { return a == "sequential" ? 7 : a == "chunked" ? 5 : a == "scan" ? 9 : a == "two-level" ? 13 : 11 }
function fmt_t(x,   s, r) { # 43210 -> 43,210
    s = sprintf("%.0f", x); r = ""
    while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) }
    return s r
}
NR == 1 {
    for (i = 1; i <= NF; i++) col[$i] = i
    need = "backend device mechanism algo B H T dk median_ms tokens_per_s"
    n = split(need, req, " ")
    for (i = 1; i <= n; i++) if (!(req[i] in col)) { print "plot_scaling.sh: the CSV has no column " req[i] > "/dev/stderr"; bad = 1; exit 1 }
    next
}
{
    med = $(col["median_ms"])
    if (med == "" || med + 0 <= 0) next
    sh = $(col["B"]) SUBSEP $(col["H"]) SUBSEP $(col["dk"])
    if (!(sh in shape_id)) { shape_id[sh] = ++nshape; shape_B[nshape] = $(col["B"]); shape_H[nshape] = $(col["H"]); shape_d[nshape] = $(col["dk"]) }
    s = shape_id[sh]
    key = s SUBSEP $(col["mechanism"]) SUBSEP $(col["algo"])
    if (!(key in ser_id)) { ser_id[key] = ++nser; ser_shape[nser] = s; ser_m[nser] = $(col["mechanism"]); ser_a[nser] = $(col["algo"]); ser_n[nser] = 0 }
    k = ser_id[key]
    j = ++ser_n[k]
    pT[k, j] = $(col["T"]) + 0; pms[k, j] = med + 0; ptok[k, j] = $(col["tokens_per_s"]) + 0
    backend = $(col["backend"]); device = $(col["device"])
}
END {
    if (bad) exit 1
    if (nshape == 0) { print "plot_scaling.sh: no measured rows in the CSV" > "/dev/stderr"; exit 1 }
    for (k = 1; k <= nser; k++) { # sort each series by T (insertion sort; a few points)
        for (i = 2; i <= ser_n[k]; i++)
            for (j = i; j > 1 && pT[k, j - 1] > pT[k, j]; j--) {
                t = pT[k, j]; pT[k, j] = pT[k, j - 1]; pT[k, j - 1] = t
                t = pms[k, j]; pms[k, j] = pms[k, j - 1]; pms[k, j - 1] = t
                t = ptok[k, j]; ptok[k, j] = ptok[k, j - 1]; ptok[k, j - 1] = t
            }
        f = dir "/s" k ".dat"
        for (j = 1; j <= ser_n[k]; j++) printf "%d %.9g %.9g\n", pT[k, j], pms[k, j], ptok[k, j] > f
        close(f)
    }
    for (s = 1; s <= nshape; s++) {
        out = s == 1 ? prefix : prefix "-B" shape_B[s] "-H" shape_H[s] "-d" shape_d[s]
        print out > (dir "/shape" s ".out"); close(dir "/shape" s ".out")
        g = dir "/shape" s ".gp"
        soft = 0
        for (k = 1; k <= nser; k++) if (ser_shape[k] == s && ser_m[k] == "softmax") soft = k
        # Crossovers: each linear-time mechanism, its fastest algorithm at its largest T.
        nmark = 0; notes = ""
        split("linear delta vla", mechs, " ")
        for (mi = 1; mi <= 3; mi++) {
            m = mechs[mi]; best = 0; bestT = 0; bestms = 0
            for (k = 1; k <= nser; k++) {
                if (ser_shape[k] != s || ser_m[k] != m || ser_n[k] == 0) continue
                tl = pT[k, ser_n[k]]; ml = pms[k, ser_n[k]]
                if (tl > bestT || (tl == bestT && ml < bestms)) { best = k; bestT = tl; bestms = ml }
            }
            if (!best || !soft) continue
            # Common T of best and softmax; the last point where the linear one is not faster.
            nc = 0
            for (i = 1; i <= ser_n[best]; i++)
                for (j = 1; j <= ser_n[soft]; j++)
                    if (pT[best, i] == pT[soft, j]) { nc++; cT[nc] = pT[best, i]; cl[nc] = pms[best, i]; cs[nc] = pms[soft, j] }
            if (nc == 0) continue
            last = 0
            for (i = 1; i <= nc; i++) if (cl[i] >= cs[i]) last = i
            name = m "/" ser_a[best]
            ref = m == "vla" ? " (paper: VLA ≈ 43,000 on a T4)" : ""
            if (last == 0) { notes = notes "\\n" name ": faster than softmax at every T (crossover < " fmt_t(cT[1]) ")" ref; continue }
            if (last == nc) { notes = notes "\\n" name ": not below softmax within the sweep (T <= " fmt_t(cT[nc]) ")" ref; continue }
            d0 = log(cl[last] / cs[last]); d1 = log(cl[last + 1] / cs[last + 1])
            x0 = log(cT[last]); x1 = log(cT[last + 1])
            x = x0 + d0 / (d0 - d1) * (x1 - x0)
            tc = exp(x)
            # latency at the crossing: softmax interpolated on log-log axes
            lc = exp(log(cs[last]) + (x - x0) / (x1 - x0) * (log(cs[last + 1]) - log(cs[last])))
            nmark++
            mark_T[nmark] = tc; mark_ms[nmark] = lc; mark_c[nmark] = color(m); mark_name[nmark] = name
            notes = notes "\\n" name ": below softmax from T ≈ " fmt_t(tc) ref
        }
        title = sprintf("libvla forward latency and throughput vs T: %s (%s), B=%s H=%s dk=dv=%s", backend, device, shape_B[s], shape_H[s], shape_d[s])
        gsub(/"/, "", title); gsub(/_/, "\\\\\\\\_", title) # enhanced text: "_" would subscript
        print "set encoding utf8" > g
        if (!soft) notes = "\\n(no softmax series: no crossover)"
        print "set multiplot layout 1,2 title \"" title "\\ncrossover with softmax, each linear-time mechanism'"'"'s fastest algorithm (dotted vertical lines):" notes "\" font \",12\" margins 0.06,0.985,0.2,0.8 spacing 0.07,0" > g
        print "set logscale xy 2" > g
        print "set logscale y 10" > g
        print "set format y \"10^{%T}\"" > g
        print "set grid xtics ytics mxtics mytics lc rgb \"#dddddd\"" > g
        print "set xlabel \"sequence length T (tokens)\"" > g
        print "set key at screen 0.5, 0.055 center center horizontal maxcols 5 width 2 box opaque font \",11\"" > g
        print "set style textbox opaque noborder" > g
        print "set xtics font \",10\"" > g
        print "set format x \"%.0f\"" > g
        # left: latency
        print "set ylabel \"forward latency (ms, median)\"" > g
        print "set title \"latency (log-log; slope 1 = linear, 2 = quadratic)\"" > g
        for (i = 1; i <= nmark; i++) {
            printf "set arrow %d from %.6g, graph 0 to %.6g, graph 1 nohead dt 3 lw 2 lc rgb \"%s\"\n", i, mark_T[i], mark_T[i], mark_c[i] > g
            printf "set label %d \"%s: T ≈ %s\" at %.6g, graph 0.5 rotate by 90 left offset -0.7,0 boxed font \",11\" tc rgb \"%s\"\n", i, mark_name[i], fmt_t(mark_T[i]), mark_T[i], mark_c[i] > g
            printf "set label %d \"\" at %.6g, %.6g point pt 6 ps 2.5 lw 2 lc rgb \"%s\"\n", 100 + i, mark_T[i], mark_ms[i], mark_c[i] > g
        }
        plot = ""
        for (k = 1; k <= nser; k++) {
            if (ser_shape[k] != s) continue
            plot = plot (plot ? ", \\\n  " : "plot ") sprintf("\"%s/s%d.dat\" using 1:2 with linespoints lw 2 lc rgb \"%s\" dt %d pt %d ps 1.1 title \"%s %s\"", dir, k, color(ser_m[k]), dash(ser_a[k]), ptype(ser_a[k]), ser_m[k], ser_a[k])
        }
        print plot > g
        # right: throughput
        for (i = 1; i <= nmark; i++) { # the labels low down, below the throughput lines
            printf "unset label %d\n", 100 + i > g
            printf "set label %d \"%s: T ≈ %s\" at %.6g, graph 0.02 rotate by 90 left offset -0.7,0 boxed font \",11\" tc rgb \"%s\"\n", i, mark_name[i], fmt_t(mark_T[i]), mark_T[i], mark_c[i] > g
        }
        print "set ylabel \"throughput (tokens/s = B T / median)\"" > g
        print "set title \"throughput (log-log)\"" > g
        print "unset key" > g
        plot = ""
        for (k = 1; k <= nser; k++) {
            if (ser_shape[k] != s) continue
            plot = plot (plot ? ", \\\n  " : "plot ") sprintf("\"%s/s%d.dat\" using 1:3 with linespoints lw 2 lc rgb \"%s\" dt %d pt %d ps 1.1 title \"%s %s\"", dir, k, color(ser_m[k]), dash(ser_a[k]), ptype(ser_a[k]), ser_m[k], ser_a[k])
        }
        print plot > g
        print "unset multiplot" > g
        close(g)
    }
    print nshape > (dir "/nshapes")
}' "$CSV"

n=$(cat "$TMP/nshapes")
for s in $(seq 1 "$n"); do
    out=$(cat "$TMP/shape$s.out")
    gnuplot -e "set terminal pngcairo size 1600,820 enhanced font 'DejaVu Sans,11'; set output '$out.png'" "$TMP/shape$s.gp"
    gnuplot -e "set terminal svg size 1600,820 enhanced font 'DejaVu Sans,11' background rgb 'white'; set output '$out.svg'" "$TMP/shape$s.gp"
    echo "wrote $out.png and $out.svg" >&2
done
