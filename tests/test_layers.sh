#!/usr/bin/env bash
# The layers: every #include of the sources runs downward, difftx.c > viz/ > studies/ > run/ >
# eval/ > data/ > model/ > base/ (model/cpu/ and model/cuda/, its backends, are part of the model
# layer; base/, the helpers every layer uses, includes only itself; run/, one training run,
# never sees studies/' registry), no backend includes
# another backend's files (each is reached through its table alone), and the file-level include
# graph has no loop. Prints the include graph by folder.
set -u
cd "$(dirname "$0")/.."
source tests/harness.sh
rank() {  # layer of path $1 into $layer: 0 base, 1 model, 2 data, 3 eval, 4 run, 5 studies, 6 viz, 7 the command line
    case $1 in
        base/*) layer=0 ;; model/*) layer=1 ;; data/*) layer=2 ;; eval/*) layer=3 ;; run/*) layer=4 ;; studies/*) layer=5 ;; viz/*) layer=6 ;;
        difftx.c) layer=7 ;; *) layer=9 ;;
    esac
}
# "FILE INCLUDED" per quoted include, the included path resolved from FILE's folder (one perl
# for all files: a process per include took seconds)
edges=$(git ls-files 'difftx.c' 'base/*.[ch]' 'model/*.[ch]' 'model/*.cu' 'data/*.[ch]' 'eval/*.[ch]' 'run/*.[ch]' 'studies/*.[ch]' 'viz/*.[ch]' |
    perl -ne 'chomp; my $f = $_; open(my $h, "<", $f) or die "$f: $!"; (my $dir = $f) =~ s{[^/]*$}{};
        while (<$h>) { next unless /^#include "([^"]+)"/; my @p; for (split m{/}, "$dir$1") { if ($_ eq "..") { pop @p } elsif ($_ ne "." && $_ ne "") { push @p, $_ } } print "$f ", join("/", @p), "\n" }')
upward=$(while read -r from to; do
    [ -e "$to" ] || { echo "$from includes missing $to"; continue; }
    rank "$to"; to_layer=$layer; rank "$from"
    [ "$to_layer" -le "$layer" ] || echo "$from -> $to"
done <<<"$edges")
expect "every include runs downward${upward:+ (not: $upward)}" test -z "$upward"
backend() { case $1 in model/cpu/*) which=cpu ;; model/cuda/*) which=cuda ;; *) which= ;; esac; }
crossing=$(while read -r from to; do
    backend "$from"; b=$which; backend "$to"
    [ -n "$b" ] && [ -n "$which" ] && [ "$b" != "$which" ] && echo "$from -> $to"
done <<<"$edges")
expect "no backend includes another backend's files${crossing:+ (not: $crossing)}" test -z "$crossing"
loops=$(tsort <<<"$edges" 2>&1 >/dev/null)
expect "no include loop${loops:+ ($loops)}" test -z "$loops"
echo "include graph by folder (number of includes):"
while read -r from to; do
    fd=${from%/*}; td=${to%/*}
    [ "$from" = difftx.c ] && fd=difftx.c
    fd=${fd%%/cpu}; fd=${fd%%/cuda}; td=${td%%/cpu}; td=${td%%/cuda}
    [ "$fd" = "$td" ] || echo "  $fd -> $td"
done <<<"$edges" | grep -v 'model -> model$' | sort | uniq -c
summary
