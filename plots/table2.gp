# Table 2 figure. difftx needle --task table2 writes the data and runs this script on
# the file `data` to `out`, with the strings names ('standard diff') and title_text.
# data: one line per (N, R) setting: "label" then per model: accuracy, standard error, paper value

set terminal pngcairo size 900,560 font "sans,11" noenhanced
set output out
load 'strings.gp'
names = str('names')
set title str('title_text')
n = words(names)
set style data histogram
set style histogram errorbars gap 1.5 lw 1
set style fill solid 0.6 border -1
set yrange [0:1.1]
set ylabel "accuracy of the queried numbers (error bars: standard error)"
set grid ytics
set key top right
width = 1.0 / (n + 1.5)
plot for [i = 1:n] data using (column(3 * i - 1)):(column(3 * i)):xtic(1) title word(names, i), \
     for [i = 1:n] data using ($0 - 0.5 + (i + 0.25) * width):(column(3 * i + 1)) with points pt 7 ps 1.3 lc i \
         title sprintf("paper (%s)", i == 1 ? "Transformer" : "DIFF")
