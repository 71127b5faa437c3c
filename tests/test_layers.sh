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
rank() {  # layer of a path: 0 base, 1 model, 2 data, 3 eval, 4 run, 5 studies, 6 viz, 7 the command line
    case $1 in
        base/*) echo 0 ;; model/*) echo 1 ;; data/*) echo 2 ;; eval/*) echo 3 ;; run/*) echo 4 ;; studies/*) echo 5 ;; viz/*) echo 6 ;;
        difftx.c) echo 7 ;; *) echo 9 ;;
    esac
}
edges=$(for f in $(git ls-files 'difftx.c' 'base/*.[ch]' 'model/*.[ch]' 'model/*.cu' 'data/*.[ch]' 'eval/*.[ch]' 'run/*.[ch]' 'studies/*.[ch]' 'viz/*.[ch]'); do
    grep -oE '^#include "[^"]+"' "$f" | sed -E 's/#include "(.*)"/\1/' | while read -r inc; do
        echo "$f $(realpath -m --relative-to=. "$(dirname "$f")/$inc")"
    done
done)
upward=$(while read -r from to; do
    [ -e "$to" ] || { echo "$from includes missing $to"; continue; }
    [ "$(rank "$to")" -le "$(rank "$from")" ] || echo "$from -> $to"
done <<<"$edges")
expect "every include runs downward${upward:+ (not: $upward)}" test -z "$upward"
backend() { case $1 in model/cpu/*) echo cpu ;; model/cuda/*) echo cuda ;; esac; }
crossing=$(while read -r from to; do
    b=$(backend "$from") c=$(backend "$to")
    [ -n "$b" ] && [ -n "$c" ] && [ "$b" != "$c" ] && echo "$from -> $to"
done <<<"$edges")
expect "no backend includes another backend's files${crossing:+ (not: $crossing)}" test -z "$crossing"
loops=$(tsort <<<"$edges" 2>&1 >/dev/null)
expect "no include loop${loops:+ ($loops)}" test -z "$loops"
echo "include graph by folder (number of includes):"
while read -r from to; do
    fd=$(dirname "$from"); td=$(dirname "$to")
    [ "$from" = difftx.c ] && fd=difftx.c
    fd=${fd%%/cpu}; fd=${fd%%/cuda}; td=${td%%/cpu}; td=${td%%/cuda}
    [ "$fd" = "$td" ] || echo "  $fd -> $td"
done <<<"$edges" | grep -v 'model -> model$' | sort | uniq -c
summary
