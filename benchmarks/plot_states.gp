# gnuplot script of plot_states.sh; it sets csv, out, term (png|svg) and sub (a subtitle).
if (term eq 'png') {
    set terminal pngcairo size 1100,650 font 'DejaVu Sans,11' linewidth 1.5
} else {
    set terminal svg size 1100,650 dynamic font 'DejaVu Sans,11' linewidth 1.5
}
set output out
set datafile separator ','
set logscale y
set format y '10^{%L}'
set xlabel 'token t'
set ylabel 'Frobenius norm (log scale)'
set title 'vla-probe states: ‖S_t‖_F per token and VLA''s ‖A_t‖_F (mean over seeds)'
# The subtitle is the caller's text: a label without enhanced-text markup (~ ^ _ stay literal).
if (strlen(sub) > 0) {
    set tmargin 5
    set title offset 0, 1
    set label 1 sub at graph 0.5, graph 1.03 center noenhanced
}
set key top left box opaque
set grid xtics ytics mytics
set mytics 10
plot csv skip 1 using 1:2 with lines lw 2 lc rgb '#d62728' title 'linear attention ‖S_t‖_F', \
     csv skip 1 using 1:3 with lines lw 2 lc rgb '#2ca02c' title 'DeltaNet (β = 1) ‖S_t‖_F', \
     csv skip 1 using 1:4 with lines lw 2 lc rgb '#1f77b4' title 'VLA ‖S_t‖_F', \
     csv skip 1 using 1:5 with lines lw 2 dt 2 lc rgb '#9467bd' title 'VLA ‖A_t‖_F'
