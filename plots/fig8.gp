# Figure 8. difftx needle --task fig8 writes the file `data` and runs this script to `out`, with
# the number series and the string title_text.
# data: one block per (model, scale) series, named by its first line ("standard, per tensor"),
#   of rows: bits loss accuracy retrieval_N1 retrieval_N4R2 at 16 (unquantized), 8, 6, 4 bits.
# Four panels, each metric against bits (16 on the left, as in the paper); one colour per
# model, solid per-tensor scaling (the main setting), dashed per-row scaling (the ablation).

set terminal pngcairo size 1300,900 font "sans,11" noenhanced
set output out
colors = "#1f77b4 #d62728 #2ca02c #9467bd #8c564b #e377c2"
load 'strings.gp'
set multiplot layout 2,2 title str('title_text')
set xrange [17:3]
set xtics ("16" 16, "8" 8, "6" 6, "4" 4)
set xlabel "bits of the attention logits"
set grid
set key bottom left font ",9"
do for [m = 2:5] {
    set title (m == 2 ? "validation loss" : m == 3 ? "next-token accuracy" : m == 4 ? "retrieval, N = 1" : "retrieval, N = 4, R = 2")
    set ylabel (m == 2 ? "loss (nats)" : "accuracy")
    if (m == 2) { set key top left } else { set key bottom left }
    if (m >= 4) { set yrange [0:1.05] } else { set yrange [*:*] }
    plot for [s = 0:series - 1] data index s using 1:m with linespoints lw 2 pt 7 dt 1 + s % 2 \
        lc rgb word(colors, s / 2 % 6 + 1) title columnheader(1)
}
unset multiplot
