#!/usr/bin/env bash
# ranks_check.sh DIFFTX DEVICE DIR: one small model trained on 1 rank and on 2 (mpirun) with the
# same global batch on DEVICE; the gradients of the 2 ranks are summed by the device's
# sum_across_ranks (NCCL on cuda, MPI on cpu), so the losses must agree within 1e-5 relative
# (only the order of the sums differs). The GPU check runs it on cuda with two GPUs;
# tests/test_cuda_build.sh runs it on cpu, so the script itself is tested everywhere.
# DIFFTX_LIBS, when set, is the library path of difftx (and only of difftx and mpirun). DIR is
# replaced only when it is absent, empty or one this script made (it holds .ranks_check).
set -u
if [ $# -ne 3 ]; then
    echo "usage: ranks_check.sh DIFFTX DEVICE DIR" >&2
    exit 2
fi
bin=$1 device=$2 dir=$3
if [ -e "$dir" ] || [ -L "$dir" ]; then
    if [ -L "$dir" ] || [ ! -d "$dir" ] || { [ ! -e "$dir/.ranks_check" ] && [ -n "$(ls -A "$dir")" ]; }; then
        echo "error: '$dir' exists and is not a folder this script made (no .ranks_check in it): choose another DIR" >&2
        exit 1
    fi
fi
run() { LD_LIBRARY_PATH="${DIFFTX_LIBS:-${LD_LIBRARY_PATH:-}}" "$@"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
recipe=$(dirname "$bin")/../experiments/default.ini
[ -f "$recipe" ] || recipe=experiments/default.ini
rm -rf "$dir" && mkdir -p "$dir/corpus" && touch "$dir/.ranks_check" || exit 1
for d in $(seq 1 40); do
    for i in $(seq 1 120); do echo "Record $d, entry $i: the $((i * 7 % 13)) ships sailed past harbour $((d % 5)) at dawn."; done >"$dir/corpus/doc$d.txt"
done
run "$bin" prepare --vocab 400 "$dir/data" "$dir/corpus" >/dev/null || { echo "prepare failed"; exit 1; }
args="data=$dir/data device=$device attention=diff n_layer=2 d_model=64 n_head=2 head_dim=16 seq_len=64 batch_size=8
      eval_batches=2 warmup_steps=2 log_every=5 steps=20 eval_every=20 checkpoint_every=20"
run "$bin" train --results "$dir/reg" "$recipe" $args out="$dir/one" || { echo "1 rank failed"; exit 1; }
run mpirun -np 2 --oversubscribe -x LD_LIBRARY_PATH -x OMP_NUM_THREADS "$bin" train --results "$dir/reg" "$recipe" $args \
    out="$dir/two" || { echo "2 ranks failed"; exit 1; }
# the last training loss of each
one=$(awk -F'\t' '$1 == "train" { l = $4 } END { print l }' "$dir/one/log.tsv")
two=$(awk -F'\t' '$1 == "train" { l = $4 } END { print l }' "$dir/two/log.tsv")
echo "last training loss: 1 rank $one, 2 ranks $two"
awk -v a="$one" -v b="$two" 'BEGIN { d = (a - b) / a; if (d < 0) d = -d; printf "relative difference %.3g (tolerance 1e-5)\n", d;
    exit !(a != "" && b != "" && d <= 1e-5) }' && echo "1 and 2 ranks agree"
