# `difftx compare` figure. difftx writes the file `data` and runs this script to `out`, with the
# number runs.
# data: blocks 0 .. runs-1 the validation curves, blocks runs .. 2 runs-1 the training curves,
# each "tokens loss" lines after a quoted title line
set terminal pngcairo size 1300,560 font "sans,11" noenhanced
set output out
set datafile missing "NaN"
# colours told apart on white and in greyscale order: blue, orange, green, red, purple, brown, grey, black
array colours[8] = ["#1f5fa8", "#e07b00", "#2a9d3a", "#c62828", "#7b3fa0", "#8c564b", "#666666", "#000000"]
set multiplot layout 1, 2
set grid
set xlabel "training tokens"
set ylabel "validation loss (nats)"
set title "validation loss"
set key top right
plot for [i=0:runs-1] data index i using 1:2 with linespoints lc rgb colours[i % 8 + 1] pt 7 ps 0.6 lw 1.5 title columnheader(1)
set ylabel "training loss (nats)"
set title "training loss"
plot for [i=0:runs-1] data index (runs + i) using 1:2 with lines lc rgb colours[i % 8 + 1] lw 1.2 title columnheader(1)
unset multiplot
