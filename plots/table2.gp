# Table 2 figure. difftx needle --task table2 writes the data and runs this script on
# the file `data` to `out`, with the numbers att1 .. att<n> (each model's colour, its
# variant's, 0xRRGGBB) and paper1 .. paper<n> (the colour of the paper's row it is compared
# with) and the strings names ('standard diff'), papers (each row's paper row: 'Transformer',
# 'DIFF' or 'none'), title_text and error_text (the y label, saying what the error bars are: the
# seed std, or with one seed the standard error).
# data: one line per (N, R) setting: "label" then per row: accuracy (mean over seeds), error bar,
# paper value (nan for a row the paper has none for: no point, no key entry)

set terminal pngcairo size 900,560 font "sans,11" noenhanced
set output out
load 'strings.gp'
names = str('names')
papers = str('papers')
set title str('title_text')
n = words(names)
set style data histogram
set style histogram errorbars gap 1.5 lw 1
set style fill solid 0.6 border -1
set yrange [0:1.15]
set ylabel str('error_text')
set grid ytics
set key top right font ",10"
width = 1.0 / (n + 1.5)
# bar i of a setting is centred at x = setting - 0.5 + (i + 0.25) width; every bar carries its
# value, so an accuracy of 0 reads as 0, not as a missing bar
x(i) = $0 - 0.5 + (i + 0.25) * width
plot for [i = 1:n] data using (column(3 * i - 1)):(column(3 * i)):xtic(1) lc rgb value(sprintf("att%d", i)) \
         title word(names, i), \
     for [i = 1:n] data using (x(i)):(column(3 * i - 1) + 0.02):(sprintf("%.2f", column(3 * i - 1))) with labels \
         font ",9" offset 0, 0.5 notitle, \
     for [i = 1:n] data using (x(i) + 0.08):(column(3 * i + 1)) with points pt 12 ps 1.6 lw 2 \
         lc rgb value(sprintf("paper%d", i)) \
         title (word(papers, i) eq "none" ? "" : sprintf("paper, 3B model at 4K context (%s)", word(papers, i)))
