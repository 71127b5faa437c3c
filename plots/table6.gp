# Table 6 figures. difftx table6 writes the files `bars` and `curves` and runs this script to
# `out_bars` and `out_curves`, with the numbers rows, ours1..ours3 and paper1..paper3 (0 when no row
# has a value of ours, or of the paper's, for Valid, AR-Hit, Others: an empty axis gets a fixed
# range and a note instead of stopping gnuplot) and the strings title_text and curves_title.
# bars:   row label attention (0 standard, 1 diff, 2 diff2) valid valid_std arhit arhit_std
#         others others_std paper_valid paper_arhit paper_others (NaN: not in the paper)
# curves: one block per row (first line its quoted title), lines "tokens val_loss"

set terminal pngcairo size 1500,560 font "sans,11" noenhanced
load 'strings.gp'
set datafile missing "NaN"
# one colour per attention type; told apart on white, no yellow
colour(a) = a == 0 ? 0x1f5fa8 : a == 1 ? 0xe07b00 : 0x2a9d3a

# Dot plots with seed-std error bars: a loss difference is read off the axis, not off bar
# heights that start at an arbitrary value. The paper's values (3B models, 10B tokens) sit on
# their own axis at the top: their scale is not ours.
set output out_bars
set multiplot layout 1, 3 title str('title_text') margins 0.17, 0.98, 0.2, 0.82 spacing 0.05, 0
set yrange [rows - 0.5 : -0.5]
set grid xtics
set xlabel "ours: loss (nats), error bars: seed std"
set x2label "paper (open diamonds)"
set x2tics font ",9"
set format x2 "%.3g"
set xtics font ",9"
set xtics nomirror
set key off
# ours: mean and seed std in columns 4-5 (Valid), 6-7 (AR-Hit), 8-9 (Others); the paper's in 10-12
set ytics scale 0
set title "Valid"
if (ours1) { set xrange [*:*]; unset label 10 } else { set xrange [0:1]; set label 10 "no tokens" at graph 0.5, graph 0.5 center front }
if (paper1) { set x2range [*:*] } else { set x2range [0:1] }
plot bars using 4:1:5:(colour($3)):ytic(2) with xerrorbars pt 7 ps 1.3 lc rgb variable notitle, \
     bars using 10:1 axes x2y1 with points pt 12 ps 1.6 lc rgb "#444444" notitle
set ytics format ""
set title "AR-Hit"
if (ours2) { set xrange [*:*]; unset label 10 } else { set xrange [0:1]; set label 10 "no AR-Hit tokens" at graph 0.5, graph 0.5 center front }
if (paper2) { set x2range [*:*] } else { set x2range [0:1] }
plot bars using 6:1:7:(colour($3)) with xerrorbars pt 7 ps 1.3 lc rgb variable notitle, \
     bars using 11:1 axes x2y1 with points pt 12 ps 1.6 lc rgb "#444444" notitle
set title "Others"
set key at screen 0.57, 0.035 center horizontal
if (ours3) { set xrange [*:*]; unset label 10 } else { set xrange [0:1]; set label 10 "no tokens" at graph 0.5, graph 0.5 center front }
if (paper3) { set x2range [*:*] } else { set x2range [0:1] }
plot bars using 8:1:9:(colour($3)) with xerrorbars pt 7 ps 1.3 lc rgb variable notitle, \
     bars using 12:1 axes x2y1 with points pt 12 ps 1.6 lc rgb "#444444" notitle, \
     NaN with points pt 7 lc rgb "#1f5fa8" title "Transformer", NaN with points pt 7 lc rgb "#e07b00" title "DIFF", \
     NaN with points pt 7 lc rgb "#2a9d3a" title "DIFF V2", NaN with points pt 12 lc rgb "#444444" title "paper"
unset multiplot
unset label 10
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
array palette[8] = ["#1f5fa8", "#e07b00", "#2a9d3a", "#c62828", "#7b3fa0", "#8c564b", "#666666", "#000000"]
plot for [i=0:rows-1] curves index i using 1:2 with linespoints pt 7 ps 0.6 lw 1.5 lc rgb palette[i % 8 + 1] title columnheader(1)
