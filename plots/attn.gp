# One layer and head of an attention-maps file (difftx attn). Variables from the caller:
#   mode 'matrix' (every row saved: heatmap) or 'profile' (mean of the saved question rows over
#   key positions), panels 1 or 3, files and titles (space-separated, one per panel), decor
#   (tics and needle marks), T (tokens), maps_max and diff_max (a high percentile of the maps'
#   values and of the difference's |values|, where the colour scales end), out, title_text.
set terminal pngcairo size (panels * 560), 600 font ",9"
set output out
set multiplot layout 1, panels title title_text noenhanced
if (mode eq 'matrix') {
    set xtics rotate by 90 font ",6"
    set ytics font ",6"
    load decor
    set xrange [-0.5:T - 0.5]
    set yrange [T - 0.5:-0.5]
    set xlabel 'key' 
    set ylabel 'query'
    do for [i = 1:panels] {
        set title word(titles, i) noenhanced offset 0, 1.2
        if (i < 3) {
            # a probability map: sequential, white (0) to dark blue
            set palette defined (0 '#ffffff', 0.5 '#6baed6', 1 '#08306b')
            set cbrange [0:maps_max]
        } else {
            # the difference of two maps: diverging around 0, blue below and red above
            set palette defined (-1 '#2166ac', 0 '#ffffff', 1 '#b2182b')
            set cbrange [-diff_max:diff_max]
        }
        plot word(files, i) matrix with image notitle
    }
} else {
    load decor
    set xrange [0:T]
    set xlabel 'key position'
    set ylabel 'attention of the question tokens'
    do for [i = 1:panels] {
        set title word(titles, i) noenhanced
        plot word(files, i) using 1:2 with impulses lc rgb '#b2182b' notitle
    }
}
unset multiplot
