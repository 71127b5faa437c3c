# Table 5 figure. difftx table5 writes the file `data` and runs this script to `out`, with the
# number models and the strings names and title_text.
# data: one block per (kind, model), kinds outer (attention logits, then hidden states), of rows
#   layer top1 top10 top100 median; layer -1 holds the values pooled over every layer.
# Left panel attention logits, right panel hidden states, log scale: each model's Top-1 (solid)
# and median (dashed) per layer, and its pooled Top-1 and median as large points at "pooled".

set terminal pngcairo size 1300,600 font "sans,11" noenhanced
set output out
load 'strings.gp'
names = str('names')
colors = "#1f77b4 #d62728 #2ca02c #9467bd #8c564b #e377c2 #7f7f7f #17becf"
set multiplot layout 1,2 title str('title_text')
set logscale y
set grid xtics ytics mytics
set xlabel "layer"
set xtics ("pooled" -1)
set xtics add autofreq 0, 1
set key top right font ",9" opaque box
# headroom above the highest point, so the key never hides data
set offsets 0, 0, graph 0.3, 0
do for [k = 0:1] {
    set title (k == 0 ? "attention logits |q k^T / sqrt(d)|" : "hidden states (layer outputs)") . \
        "\nsolid: Top-1, dashed: median; large points: pooled over layers"
    set ylabel "absolute value"
    set xrange [-1.5:*]
    plot for [i = 0:models - 1] data index k * models + i using 1:($1 >= 0 ? $2 : NaN) with linespoints lw 2 pt 7 \
             lc rgb word(colors, i % 8 + 1) title word(names, i + 1), \
         for [i = 0:models - 1] data index k * models + i using 1:($1 >= 0 ? $5 : NaN) with linespoints lw 2 dt 2 pt 6 \
             lc rgb word(colors, i % 8 + 1) notitle, \
         for [i = 0:models - 1] data index k * models + i using 1:($1 < 0 ? $2 : NaN) with points pt 7 ps 2 \
             lc rgb word(colors, i % 8 + 1) notitle, \
         for [i = 0:models - 1] data index k * models + i using 1:($1 < 0 ? $5 : NaN) with points pt 6 ps 2 \
             lc rgb word(colors, i % 8 + 1) notitle
}
unset multiplot
