# Table 3 and Figure 1. difftx needle --task table3 writes the files `data` and `fig1` and runs
# this script to `out` and `out_fig1`, with the strings names ('standard diff'), papers
# ('Transformer DIFF', 'none' for a row the paper has none for: its paper columns are nan and it
# gets no paper key entry), title_text and fig1_title, and the numbers att<i> and paper<i> (the
# colours, 0xRRGGBB, of each row's variant and of the paper's row it meets) and seeds.
# data: one line per depth: "label" then per row: answer, noise (means over the seeds), the
# paper's answer and noise, the seed std of answer and noise (drawn as error bars with seeds > 1)
# fig1: one line per model: "name" answer noise question bos

set terminal pngcairo size 1100,540 font "sans,11" noenhanced
set output out
load 'strings.gp'
names = str('names')
papers = str('papers')
set multiplot layout 1, 2 title str('title_text')
n = words(names)
ours_colour(i) = value(sprintf("att%d", i))
paper_colour(i) = value(sprintf("paper%d", i))
set grid ytics
set xlabel "answer needle depth"
set ylabel "share of the question's attention (rows sum to 1)"
set xrange [-0.3:4.3]
set yrange [0:*]
set key outside bottom center horizontal maxrows 2
# ours: filled points; the paper (3B models, 4K context): open points, dashed, same colour
set title "to the answer span (higher is better)"
plot for [i = 1:n] data using 0:(column(6 * i - 4)):xtic(1) with linespoints pt 7 lw 2 lc rgb ours_colour(i) title word(names, i), \
     for [i = 1:n] data using 0:(column(6 * i - 4)):(seeds > 1 ? column(6 * i) : NaN) with yerrorbars pt -1 lw 1.5 lc rgb ours_colour(i) \
         title (seeds > 1 && i == n ? "seed std" : ""), \
     for [i = 1:n] data using 0:(column(6 * i - 2)) with linespoints pt 6 dt 2 lc rgb paper_colour(i) title (word(papers, i) eq "none" ? "" : "paper ".word(papers, i))
set title "to the noise context (lower is better)"
plot for [i = 1:n] data using 0:(column(6 * i - 3)):xtic(1) with linespoints pt 7 lw 2 lc rgb ours_colour(i) title word(names, i), \
     for [i = 1:n] data using 0:(column(6 * i - 3)):(seeds > 1 ? column(6 * i + 1) : NaN) with yerrorbars pt -1 lw 1.5 lc rgb ours_colour(i) \
         title (seeds > 1 && i == n ? "seed std" : ""), \
     for [i = 1:n] data using 0:(column(6 * i - 1)) with linespoints pt 6 dt 2 lc rgb paper_colour(i) title (word(papers, i) eq "none" ? "" : "paper ".word(papers, i))
unset multiplot

set yrange [*:*]
set xrange [*:*]
set style data histogram
set style fill solid 0.6 border -1
set output out_fig1
set title str('fig1_title')
set style histogram rowstacked
set boxwidth 0.5
set xlabel ""
set ylabel "share of attention"
set key outside right
plot fig1 using 2:xtic(1) title "answer" lc rgb "#1a9850", \
     '' using 3 title "noise context" lc rgb "#b2182b", \
     '' using 4 title "question" lc rgb "#4a7ab5", \
     '' using 5 title "BOS" lc rgb "#999999"
