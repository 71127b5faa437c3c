#!/usr/bin/env bash
# The layers: every #include of the sources runs downward, difftx.c > experiments/ > eval/ >
# data/ > model/ (model/cpu/ and model/cuda/, its backends, are part of the model layer), and the file-level include graph has
# no loop. Prints the include graph by folder.
set -u
cd "$(dirname "$0")/.."
source tests/harness.sh
rank() {  # layer of a path: 0 model, 1 data, 2 eval, 3 experiments, 4 the command line
    case $1 in
        model/*) echo 0 ;; data/*) echo 1 ;; eval/*) echo 2 ;; experiments/*) echo 3 ;; difftx.c) echo 4 ;; *) echo 9 ;;
    esac
}
edges=$(for f in $(git ls-files 'difftx.c' 'model/*.[ch]' 'model/*.cu' 'data/*.[ch]' 'eval/*.[ch]' 'experiments/*.[ch]'); do
    grep -oE '^#include "[^"]+"' "$f" | sed -E 's/#include "(.*)"/\1/' | while read -r inc; do
        echo "$f $(realpath -m --relative-to=. "$(dirname "$f")/$inc")"
    done
done)
upward=$(while read -r from to; do
    [ -e "$to" ] || { echo "$from includes missing $to"; continue; }
    [ "$(rank "$to")" -le "$(rank "$from")" ] || echo "$from -> $to"
done <<<"$edges")
expect "every include runs downward${upward:+ (not: $upward)}" test -z "$upward"
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
