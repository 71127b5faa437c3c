# Table 6 figures. difftx table6 writes the files `bars` and `curves` and runs this script to
# `out_bars`, `out_curves` and `out_positions`, with the numbers rows, seeds, seq_len, arhit_tokens and eval_tokens, att1 ..
# att<rows> (each row's colour, its variant's), variants with vcolour<v> and the strings vlabel<v>
# (the legend: every variant's colour and label), ours1..ours3 and
# paper1..paper3 (0 when no row has a value of ours, or of the paper's, for Valid, AR-Hit,
# Others: an empty panel gets a fixed range and a note instead of stopping gnuplot) and the
# strings title_text, curves_title and positions_title.
# bars:      row title colour, then per metric k (Valid, AR-Hit, Others) in columns 4 + 4k ..:
#            ours minus the first row's, its 95% interval (low, high), the paper's minus its
#            first row's (NaN: none)
# curves:    one block per row (first line its quoted title), lines "tokens val_loss"
# positions: one block per row (first line its quoted title), lines "position loss", a bin's
#            centre and its mean loss

set terminal pngcairo size 1500,560 font "sans,11" noenhanced
load 'strings.gp'
set datafile missing "NaN"

# Dot plots of differences from the Transformer row, ours (filled, coloured by attention type,
# bars: the 95% paired interval) and the paper's (open diamonds) on the same axis: what the paper claims
# is a difference, and its 3B models' absolute losses are not on our scale.
set output out_bars
set multiplot layout 1, 3 title str('title_text') margins 0.17, 0.98, 0.2, 0.82 spacing 0.05, 0
set yrange [rows - 0.5 : -0.5]
set grid xtics
set xlabel "loss − the Transformer row's (nats)"
set xtics font ",9"
set key off
set ytics scale 0
set arrow 1 from first 0, graph 0 to first 0, graph 1 nohead lc rgb "#999999" dt 2
titles = "Valid|AR-Hit|Others"
do for [k = 1:3] {
    if (k == 1) { set title "Valid" }
    if (k == 2) { set title sprintf("AR-Hit (%d of %d evaluated tokens)", arhit_tokens, eval_tokens) }
    if (k == 3) { set title "Others" }
    if (value(sprintf("ours%d", k)) || value(sprintf("paper%d", k))) { set xrange [*:*]; unset label 10 } \
    else { set xrange [-1:1]; set label 10 (k == 2 ? "no AR-Hit tokens" : "no tokens") at graph 0.5, graph 0.5 center front }
    if (k == 2) { set ytics format "" }
    if (k == 3) { set key at screen 0.57, 0.045 center center horizontal samplen 1 font ",9" }
    if (k == 1) {
        plot bars using 4:1:5:6:3:ytic(2) with xerrorbars pt 7 ps 1.3 lc rgb variable notitle, \
             bars using 7:1 with points pt 12 ps 1.6 lc rgb "#444444" notitle
    } else {
        plot bars using (column(4 * k)):1:(column(1 + 4 * k)):(column(2 + 4 * k)):3 with xerrorbars pt 7 ps 1.3 \
                 lc rgb variable notitle, \
             bars using (column(3 + 4 * k)):1 with points pt 12 ps 1.6 lc rgb "#444444" notitle, \
             for [v = 1:variants] NaN with points pt 7 lc rgb value(sprintf("vcolour%d", v)) \
                 title (k == 3 ? str(sprintf("vlabel%d", v)) : ""), \
             NaN with points pt 12 lc rgb "#444444" title (k == 3 ? "paper (3B)" : "")
    }
}
unset multiplot
unset label 10
unset arrow 1
set xrange [*:*]

set terminal pngcairo size 1100,650 font "sans,11" noenhanced
set output out_curves
set size 1, 1
set origin 0, 0
set key default
set title str('curves_title')
set yrange [*:*]
set autoscale y
set xlabel "training tokens"
unset x2label
unset x2tics
set xtics mirror
set ylabel "validation loss (nats)"
set ytics scale 1 format "% h"
set grid ytics
set key top right
# colour by attention type (as in every figure), point type by row
plot for [i=0:rows-1] curves index i using 1:2 with linespoints pt (5 + 2 * (i % 4)) ps 0.8 lw 1.5 \
    lc rgb value(sprintf("att%d", i + 1)) title columnheader(1)

set output out_positions
set title str('positions_title')
set xlabel "position in the context (token)"
set ylabel "validation loss (nats)"
set xrange [0:seq_len]
set key top right
# colour by attention type (as in every figure), point type by row
plot for [i=0:rows-1] positions index i using 1:2 with linespoints pt (5 + 2 * (i % 4)) ps 0.8 lw 1.5 \
    lc rgb value(sprintf("att%d", i + 1)) title columnheader(1)
