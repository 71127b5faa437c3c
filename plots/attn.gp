# One layer and head of an attention-maps file (difftx attn). From the caller: the numbers
# matrix (1: every row saved, a heatmap; 0: the mean of the saved question rows over key
# positions), panels (1 or 3), T (tokens), rows (question rows), labeled (1: the token texts
# label the axes, from the file `labels`, tab-separated "position text"), tic_step, maps_max
# and diff_max (a high percentile of the maps' values and of the difference's |values|, where
# the colour scales end), needles and needle_from<i>, needle_to<i> (token spans, the answer
# first); the files panel1 .. panel<panels> (tab-separated); the strings title1 .. title3 (each
# panel's: the combined map's names λ), title_text and subtitle; the output `out`.
set terminal pngcairo size (panels == 1 ? 900 : panels * 560), 660 font ",9"
set output out
load 'strings.gp'
# room above the panels for two title lines, the panel titles and the needle bars
left = panels == 1 ? 0.1 : 0.05
right = panels == 1 ? 0.86 : 0.92
set multiplot layout 1, panels title str('title_text') . (matrix ? "\n" . str('subtitle') : "") noenhanced font ",8" \
    margins left, right, 0.1, 0.82 spacing 0.11, 0
set datafile separator "\t"
set datafile commentschars ""
if (matrix) {
    if (labeled) {
        set xtics rotate by 90 font ",6" noenhanced
        set ytics font ",6" noenhanced
    } else {
        set xtics tic_step norotate font ",8"
        set ytics tic_step font ",8"
    }
    # needle spans as bars above the key axis, off the map
    if (needles >= 1) {
        set object 1 rect from needle_from1 - 0.5, graph 1.008 to needle_to1 - 0.5, graph 1.03 noclip fs solid noborder fc rgb '#00aa00'
    }
    do for [i = 2:needles] {
        set object i rect from value(sprintf("needle_from%d", i)) - 0.5, graph 1.008 to value(sprintf("needle_to%d", i)) - 0.5, graph 1.03 \
            noclip fs solid noborder fc rgb '#888888'
    }
    set xrange [-0.5:T - 0.5]
    set yrange [T - 0.5:-0.5]
    set xlabel 'key'
    set ylabel 'query'
    do for [i = 1:panels] {
        set title str(sprintf('title%d', i)) noenhanced offset 0, 1.2
        if (i < 3) {
            # a probability map: sequential, white (0) to dark blue
            set palette defined (0 '#ffffff', 0.5 '#6baed6', 1 '#08306b')
            set cbrange [0:maps_max]
        } else {
            # the difference of two maps: diverging around 0, blue below and red above
            set palette defined (-1 '#2166ac', 0 '#ffffff', 1 '#b2182b')
            set cbrange [-diff_max:diff_max]
        }
        if (labeled) {
            # invisible points (fully transparent) that carry the token texts as tic labels
            plot sprintf('panel%d', i) matrix with image notitle, 'labels' using 1:1:xtic(2):ytic(2) with points lc rgb '#ff000000' notitle
        } else {
            plot sprintf('panel%d', i) matrix with image notitle
        }
    }
} else {
    if (needles >= 1) {
        set object 1 rect from needle_from1, graph 0 to needle_to1, graph 1 back fs solid 0.35 noborder fc rgb '#00aa00'
    }
    do for [i = 2:needles] {
        set object i rect from value(sprintf("needle_from%d", i)), graph 0 to value(sprintf("needle_to%d", i)), graph 1 back \
            fs solid 0.35 noborder fc rgb '#999999'
    }
    set label 1 sprintf('answer needle (green), distractors (grey); mean over the %d question rows', rows) at graph 0.01, graph 0.95
    set xrange [0:T]
    set xlabel 'key position'
    set ylabel 'attention of the question tokens'
    do for [i = 1:panels] {
        set title str(sprintf('title%d', i)) noenhanced
        plot sprintf('panel%d', i) using 1:2 with impulses lc rgb '#b2182b' notitle
    }
}
unset multiplot
