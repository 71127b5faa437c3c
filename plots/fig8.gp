# Figure 8. difftx needle --task fig8 writes the file `data` and runs this script to `out`, with
# the numbers series (2 per model: per tensor, per row), seeds, att1 .. att<models> (each model's colour),
# lo2, hi2, lo3, hi3 (the loss and accuracy panels' ranges, with headroom) and the string
# title_text.
# data: one block per (model, scale) series, named by its first line ("standard, per tensor"),
#   of rows: bits, then loss accuracy retrieval_N1 retrieval_N4R2 (means over the seeds), then
#   their seed std (error bars with seeds > 1), at 16 (unquantized), 8, 6, 4 bits.
# Four panels, each metric against bits (16, the unquantized model, on the left, as in the
# paper); one colour per attention type, solid per-tensor scaling (the main setting), dashed
# per-row scaling (the ablation).

set terminal pngcairo size 1300,900 font "sans,11" noenhanced
set output out
load 'strings.gp'
set multiplot layout 2,2 title str('title_text') margins 0.07, 0.98, 0.08, 0.87 spacing 0.08, 0.14
set xrange [17:3]
set xtics ("16\n(unquantized)" 16, "8" 8, "6" 6, "4" 4)
set xlabel "bits of the attention logits"
set grid
# one key for the four panels, above the first, where it hides no line
set key at screen 0.5, 0.935 center center horizontal maxrows 1 font ",9" samplen 2
do for [m = 2:5] {
    set title (m == 2 ? "validation loss" : m == 3 ? "next-token accuracy" : m == 4 ? "retrieval, N = 1" : "retrieval, N = 4, R = 2")
    set ylabel (m == 2 ? "loss (nats)" : "accuracy")
    if (m <= 3) { set yrange [value(sprintf("lo%d", m)) : value(sprintf("hi%d", m))] } else { set yrange [-0.05:1.1] }
    if (m > 2) { unset key }
    plot for [s = 0:series - 1] data index s using 1:m with linespoints lw 2 pt 7 dt 1 + s % 2 \
        lc rgb value(sprintf("att%d", s / 2 + 1)) title columnheader(1), \
         for [s = 0:series - 1] data index s using 1:m:(seeds > 1 ? column(m + 4) : NaN) with yerrorbars pt -1 lw 1.5 \
        lc rgb value(sprintf("att%d", s / 2 + 1)) notitle
}
unset multiplot
