# Attention noise per layer (Table 3's episodes). difftx needle --task table3 writes the file
# `data` and runs this script to `out`, with the string title_text and the numbers rows and
# att<i> (the colour, 0xRRGGBB, of row i's variant).
# data: one block per row, a quoted title line, then "layer sink entropy negative answer noise"
# lines, each the mean over the layer's heads (and the row's seeds)
set terminal pngcairo size 1100,760 font "sans,11" noenhanced
set output out
load 'strings.gp'
colour(i) = value(sprintf("att%d", i))
set multiplot layout 2, 2 title str('title_text')
set grid
set xlabel "layer"
set xtics 1
set key top right
set title "attention sink: weight on BOS"
plot for [i = 1:rows] data index (i - 1) using 1:2 with linespoints pt 7 lw 2 lc rgb colour(i) title columnheader(1)
set title "entropy of |w| (nats)"
plot for [i = 1:rows] data index (i - 1) using 1:3 with linespoints pt 7 lw 2 lc rgb colour(i) title columnheader(1)
set title "negative mass: weight below zero"
plot for [i = 1:rows] data index (i - 1) using 1:4 with linespoints pt 7 lw 2 lc rgb colour(i) title columnheader(1)
set title "answer share (higher is better)"
plot for [i = 1:rows] data index (i - 1) using 1:5 with linespoints pt 7 lw 2 lc rgb colour(i) title columnheader(1)
unset multiplot
