# Table 3 and Figure 1. difftx needle --task table3 writes the data and calls:
#   gnuplot -e "data='...'; fig1='...'; names='standard diff'; out='...'; out_fig1='...'; title_text='...'" plots/table3.gp
# data: one line per depth: "label" then per model: answer, noise
# fig1: one line per model: "name" answer noise question bos

set terminal pngcairo size 1000,520 font "sans,11" noenhanced
set output out
set multiplot layout 1, 2 title title_text
n = words(names)
set style data histogram
set style histogram clustered gap 1.5
set style fill solid 0.6 border -1
set grid ytics
set xlabel "answer needle depth"
set title "attention to the answer span (higher is better)"
set key top left
plot for [i = 1:n] data using (column(2 * i)):xtic(1) title word(names, i)
set title "attention noise (lower is better)"
plot for [i = 1:n] data using (column(2 * i + 1)):xtic(1) title word(names, i)
unset multiplot

set output out_fig1
set title "Figure 1: where the question's attention goes (mean over depths, rows normalised to 1)"
set style histogram rowstacked
set boxwidth 0.5
set xlabel ""
set ylabel "share of attention"
set key outside right
plot fig1 using 2:xtic(1) title "answer" lc rgb "#1a9850", \
     '' using 3 title "noise context" lc rgb "#b2182b", \
     '' using 4 title "question" lc rgb "#4a7ab5", \
     '' using 5 title "BOS" lc rgb "#999999"
