# Table 5 figure. difftx table5 writes the file `data` and runs this script to `out`, with the
# numbers models (rows), seeds, att1 .. att<models> (each model's colour, its variant's), src1 .. (0 table6, 1 needle:
# the point type), paper_top_<p>_<k> and paper_median_<p>_<k> and paper_colour_<p> (the paper's 3B
# Transformer p = 0 and DIFF p = 1, for attention logits k = 0 and hidden states k = 1) and the strings names
# and title_text.
# data: one block per (kind, row), kinds outer (attention logits, then hidden states), of rows
#   layer top1 top10 top100 median (means over the seeds), then their seed std; layer -1 holds
#   the values pooled over every layer, drawn with the seed std as error bars when seeds > 1.
# Left panel attention logits, right panel hidden states, log scale: each model's Top-1 (solid)
# and median (dashed) per layer, its pooled Top-1 (large filled) and median (large open) at
# "pooled", and the paper's pooled Top-1 and median (diamonds) at "paper 3B".

set terminal pngcairo size 1300,640 font "sans,11" noenhanced
set output out
load 'strings.gp'
names = str('names')
set multiplot layout 1,2 title str('title_text')
set logscale y
set grid xtics ytics mytics
set xlabel "layer"
set xtics ("paper 3B" -2, "pooled" -1)
set xtics add autofreq 0, 1
set key top right font ",9" opaque box
# the range follows the data (no extension to the next decade); headroom above for the key
set autoscale yfix
set offsets 0, 0, graph 0.45, graph 0.05
pt_of(i) = value(sprintf("src%d", i + 1)) ? 5 : 7
open_of(i) = value(sprintf("src%d", i + 1)) ? 4 : 6
colour_of(i) = value(sprintf("att%d", i + 1))
do for [k = 0:1] {
    set title (k == 0 ? "attention logits |q k^T / sqrt(d)|" : "hidden states (layer outputs)")
    set ylabel "absolute value"
    set xrange [-2.6:*]
    plot for [i = 0:models - 1] data index k * models + i using 1:($1 >= 0 ? $2 : NaN) with linespoints lw 2 pt pt_of(i) \
             lc rgb colour_of(i) title word(names, i + 1), \
         for [i = 0:models - 1] data index k * models + i using 1:($1 >= 0 ? $5 : NaN) with linespoints lw 2 dt 2 \
             pt open_of(i) lc rgb colour_of(i) notitle, \
         for [i = 0:models - 1] data index k * models + i using 1:($1 < 0 ? $2 : NaN) with points pt pt_of(i) ps 2 \
             lc rgb colour_of(i) notitle, \
         for [i = 0:models - 1] data index k * models + i using 1:($1 < 0 ? $5 : NaN) with points pt open_of(i) ps 2 \
             lc rgb colour_of(i) notitle, \
         for [i = 0:models - 1] data index k * models + i using 1:($1 < 0 && seeds > 1 ? $2 : NaN):($2 - $6 > 0 ? $2 - $6 : $2 / 10):($2 + $6) \
             with yerrorbars pt -1 lw 1.5 lc rgb colour_of(i) notitle, \
         for [i = 0:models - 1] data index k * models + i using 1:($1 < 0 && seeds > 1 ? $5 : NaN):($5 - $9 > 0 ? $5 - $9 : $5 / 10):($5 + $9) \
             with yerrorbars pt -1 lw 1.5 lc rgb colour_of(i) notitle, \
         for [p = 0:1] '+' using (-2 + 0.15 * (2 * p - 1)):(value(sprintf("paper_top_%d_%d", p, k))) every ::0::0 \
             with points pt 13 ps 2 lc rgb value(sprintf("paper_colour_%d", p)) notitle, \
         for [p = 0:1] '+' using (-2 + 0.15 * (2 * p - 1)):(value(sprintf("paper_median_%d_%d", p, k))) every ::0::0 \
             with points pt 12 ps 2 lc rgb value(sprintf("paper_colour_%d", p)) notitle, \
         NaN with lines lw 2 lc rgb "#555555" title "Top-1 per layer (solid)", \
         NaN with lines lw 2 dt 2 lc rgb "#555555" title "median per layer (dashed)", \
         NaN with points pt 7 ps 2 lc rgb "#555555" title "pooled: Top-1 (filled), median (open)", \
         NaN with points pt 13 ps 2 lc rgb "#555555" title "paper 3B: Top-1 (filled), median (open)"
}
unset multiplot
