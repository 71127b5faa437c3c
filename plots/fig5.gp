# Figure 5: every model's heatmap side by side on one colour scale. difftx needle --task fig5
# writes the files model1 .. model<n> and runs this script to `out`, with the numbers n and
# n_lengths (contexts), length1 .. length<n_lengths> and seeds, and the strings titles (one word
# per model) and title_text.
# each file: blocks of "length_index depth_index accuracy seed_std", depth rows 0..4 then the
# average (5); accuracy is the mean over the seeds, and each cell shows its std under it when
# there are several
set terminal pngcairo size (n * 560 + 120), 560 font "sans,11" noenhanced
set output out
load 'strings.gp'
titles = str('titles')
set multiplot layout 1, n title str('title_text')
set xlabel "context length (tokens)"
set ylabel "answer needle depth"
set xtics () 
do for [l = 1:n_lengths] { set xtics add (sprintf("%d", value(sprintf("length%d", l))) l - 1) }
set ytics ("0%%" 0, "25%%" 1, "50%%" 2, "75%%" 3, "100%%" 4, "average" 5)
set xrange [-0.5:n_lengths - 0.5]
set yrange [5.5:-0.5]
set cbrange [0:1]
set cblabel "accuracy"
set palette defined (0 "#b2182b", 0.5 "#fddbc7", 1 "#1a9850")
set arrow from -0.5, 4.5 to n_lengths - 0.5, 4.5 nohead front lw 2
do for [i = 1:n] {
    set title word(titles, i)
    plot sprintf('model%d', i) using 1:2:3 with image notitle, \
         sprintf('model%d', i) using 1:2:(seeds > 1 ? sprintf("%.2f\n±%.2f", $3, $4) : sprintf("%.2f", $3)) \
             with labels font ",10" notitle
}
unset multiplot
