# One layer and head of an attention-maps file (difftx attn). Variables from the caller:
#   mode 'matrix' (every row saved: heatmap, token labels) or 'profile' (mean of the saved
#   question rows over key positions), panels 1 or 3, files and titles (space-separated, one
#   per panel), decor (tics and needle marks), T (tokens), cbmax (largest |value|), out,
#   title_text.
set terminal pngcairo size (panels * 560), 560 font ",9"
set output out
set multiplot layout 1, panels title title_text noenhanced
load decor
if (mode eq 'matrix') {
    set xtics rotate by 90 font ",6"
    set ytics font ",6"
    set xrange [-0.5:T - 0.5]
    set yrange [T - 0.5:-0.5]
    set palette defined (-1 '#2166ac', 0 '#ffffff', 1 '#b2182b')
    set cbrange [-cbmax:cbmax]
    set xlabel 'key'
    set ylabel 'query'
    do for [i = 1:panels] {
        set title word(titles, i) noenhanced
        plot word(files, i) matrix with image notitle
    }
} else {
    set xrange [0:T]
    set xlabel 'key position'
    set ylabel 'attention of the question tokens'
    do for [i = 1:panels] {
        set title word(titles, i) noenhanced
        plot word(files, i) using 1:2 with impulses lc rgb '#b2182b' notitle
    }
}
unset multiplot
