# The gaps along training (difftx table6 on a recipe with gap_curve = true). The program writes
# the file `gaps` and runs this script to `out_gaps`, with the numbers pairs (the comparisons)
# and pass_tokens (the training split's tokens), and the string title_text.
# gaps: one block per comparison (first line its quoted label), lines "tokens gap low high":
#       the paired gap in validation loss and its 95% t-interval over the seeds (low = high =
#       gap where there is none)

set terminal pngcairo size 1100,650 font "sans,11" noenhanced
load 'strings.gp'
set datafile missing "NaN"
set output out_gaps
set title str('title_text')
set logscale x 10
set xlabel "training tokens (log scale)"
set ylabel "validation loss gap (nats; negative: the first row lower)"
set format x "1e%T"
set grid xtics ytics mxtics
set key top right
set xzeroaxis lt 1 lc rgb "#999999" dt 2
# one pass over the training split: beyond it the runs see its tokens again, and a gap there
# mixes how the rows scale with how they overfit (marked only where the runs reach it)
stats gaps using 1 nooutput
if (pass_tokens <= STATS_max) {
    set arrow from pass_tokens, graph 0 to pass_tokens, graph 1 nohead lc rgb "#666666" dt 3 lw 1.5
    set label "one pass over the training split" at pass_tokens, graph 0.04 offset 0.6, 0 left textcolor rgb "#444444"
}
# the comparisons side by side at each point: a small shift in log(tokens) per comparison
shift(i) = 10 ** (0.012 * (i - (pairs - 1) / 2.0))
plot for [i=0:pairs-1] gaps index i using ($1 * shift(i)):2:3:4 with yerrorlines pt (5 + 2 * (i % 4)) ps 0.9 lw 1.5 \
    lc i + 1 title columnheader(1)
