# Table 6 figures. difftx table6 writes the data and calls:
#   gnuplot -e "bars='...'; curves='...'; rows=7; out_bars='...'; out_curves='...'; title_text='...'" plots/table6.gp
# bars:   row label valid valid_std arhit arhit_std others others_std (one line per row)
# curves: one block per row (first line its quoted title), lines "tokens val_loss"

set terminal pngcairo size 1100,650 font "sans,11" noenhanced
set output out_bars
set title title_text
stats bars using 3 nooutput
lo = STATS_min; hi = STATS_max
stats bars using 4 nooutput
pad = (hi - lo) * 0.6 + STATS_max + 0.005
set yrange [lo - pad : hi + pad]
set ylabel "validation loss (nats), error bars: seed std"
set style fill solid 0.55 border -1
set boxwidth 0.6
set xtics rotate by -25 nomirror
set grid ytics
set key off
plot bars using 1:3:xtic(2) with boxes lc rgb "#4a7ab5", \
     bars using 1:3:4 with yerrorbars lc rgb "black" pt 7 ps 0.4 lw 1.5

set output out_curves
set title title_text . ": validation loss during training"
set autoscale y
set xlabel "training tokens"
set ylabel "validation loss (nats)"
set xtics norotate
set key top right
plot for [i=0:rows-1] curves index i using 1:2 with linespoints pt 7 ps 0.6 lw 1.5 title columnheader(1)
