# Figure 5: every model's heatmap side by side on one colour scale. difftx needle --task fig5
# writes the data and calls:
#   gnuplot -e "files='a.dat b.dat'; titles='standard(...) diff(...)'; n_lengths=4; out='...'; xtics_text=\"'512' 0, ...\"; title_text='...'" plots/fig5.gp
# each file: blocks of "length_index depth_index accuracy", depth rows 0..4 then the average (5)
n = words(files)
set terminal pngcairo size (n * 560 + 120), 560 font "sans,11" noenhanced
set output out
set multiplot layout 1, n title title_text
set xlabel "context length (tokens)"
set ylabel "answer needle depth"
eval "set xtics (" . xtics_text . ")"
set ytics ("0%%" 0, "25%%" 1, "50%%" 2, "75%%" 3, "100%%" 4, "average" 5)
set xrange [-0.5:n_lengths - 0.5]
set yrange [5.5:-0.5]
set cbrange [0:1]
set cblabel "accuracy"
set palette defined (0 "#b2182b", 0.5 "#fddbc7", 1 "#1a9850")
set arrow from -0.5, 4.5 to n_lengths - 0.5, 4.5 nohead front lw 2
do for [i = 1:n] {
    set title word(titles, i)
    plot word(files, i) using 1:2:3 with image notitle, \
         word(files, i) using 1:2:(sprintf("%.2f", $3)) with labels font ",10" notitle
}
unset multiplot
