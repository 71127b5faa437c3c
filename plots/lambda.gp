# `difftx lambda` figure. difftx writes the file `data` and runs this script to `out`, with the
# numbers blocks and layers.
# data: one block per (run, layer), a quoted title line, then "tokens lambda layer run" lines
# (layer and run counted from 0): a line per layer against training tokens, coloured by layer
# from shallow (light) to deep (dark), each run with its own point shape
set terminal pngcairo size 1100,650 font "sans,11" noenhanced
set output out
set datafile missing "NaN"
set grid
set xlabel "training tokens"
set ylabel "lambda"
set title "lambda per layer during training (each layer's lambda at each evaluation; per-token lambda: mean over heads and tokens)"
set key outside right top
# layer l of `layers`: from light blue (shallow) to dark blue (deep)
shade(l) = layers > 1 ? l / (layers - 1.0) : 1
rgb(l) = int(140 - 120 * shade(l)) * 65536 + int(185 - 135 * shade(l)) * 256 + int(240 - 100 * shade(l))
plot for [i=0:blocks-1] data index i using 1:2:(rgb(column(3))) with linespoints lc rgb variable \
    pt (5 + 2 * (int(i / layers) % 4)) ps 0.8 lw 1.5 title columnheader(1)
