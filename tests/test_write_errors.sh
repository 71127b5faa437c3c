#!/usr/bin/env bash
# One write failing with ENOSPC (strace's fault injection) in each kind of output: checkpoint (the
# first, and a later one while a good one exists), `log.tsv`, the registry, a safetensors export,
# prepared shards, attention maps and outlier statistics. Each stops with exit 1 and a message
# naming the file (never a crash), renames nothing damaged into place, leaves the last good
# checkpoint byte for byte, and no such run shows as finished.
set -u
cd "$(dirname "$0")/.."
source tests/harness.sh
bin=${BUILD:-build}/difftx
fixture=${BUILD:-build}/write_fixture
work=$PWD/build/test_write_errors  # absolute: strace -P matches the paths the kernel reports
rm -rf "$work" && mkdir -p "$work/corpus"
for d in $(seq -w 0 24); do
    for i in $(seq 1 30); do echo "Document $d has line $i of a small corpus."; done > "$work/corpus/doc$d.txt"
done
$bin prepare --vocab 300 "$work/data" "$work/corpus" >/dev/null || { echo "prepare failed"; exit 1; }
printf '%s\n' "attention = diff" "n_layer = 1" "d_model = 32" "n_head = 2" "seq_len = 16" "batch_size = 2" "steps = 6" \
    "warmup_steps = 1" "eval_batches = 1" "log_every = 1" "checkpoint_every = 2" "data = $work/data" "out = $work/run" > "$work/r.ini"

WRITES=write,pwrite64,writev,pwritev,pwritev2
# failing PATH WHEN PATTERN NAME CMD...: CMD with the WHEN-th write of each kind to PATH failing
# (ENOSPC) must exit 1 (not crash) and say PATTERN on stderr
failing() {
    local path=$1 when=$2 pattern=$3 name=$4
    shift 4
    local err rc
    err=$(strace -f -qq -o /dev/null -P "$path" -e trace=$WRITES -e inject=$WRITES:error=ENOSPC:when="$when" "$@" 2>&1 >/dev/null)
    rc=$?
    if [ $rc -eq 1 ] && grep -qE -- "$pattern" <<<"$err"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL $name: exit $rc (1 expected), stderr: $(tail -3 <<<"$err")"
    fi
}

# checkpoint: the first one fails, so none exists; later, one fails and the last good one stays
failing "$work/run/checkpoint.h5.tmp" 3 "checkpoint '.*checkpoint.h5.tmp'.*HDF5 error" "checkpoint: a failed write stops the run" \
    $bin train "$work/r.ini" --results "$work/reg"
expect "checkpoint: nothing renamed into place after a failed first checkpoint" test ! -e "$work/run/checkpoint.h5"
expect "checkpoint: its temporary is removed" test ! -e "$work/run/checkpoint.h5.tmp"
rm -rf "$work/run"
$bin train "$work/r.ini" --results "$work/reg" --until 2 >/dev/null
cp "$work/run/checkpoint.h5" "$work/good.h5"
failing "$work/run/checkpoint.h5.tmp" 2 "HDF5 error" "checkpoint: a failed later write stops the run" \
    $bin train "$work/r.ini" --results "$work/reg"
expect "checkpoint: the previous checkpoint is left exactly as it was" cmp -s "$work/run/checkpoint.h5" "$work/good.h5"
expect "checkpoint: the later one's temporary is removed" test ! -e "$work/run/checkpoint.h5.tmp"
expect "checkpoint: the run resumes from it and finishes" $bin train "$work/r.ini" --results "$work/reg" >/dev/null
out=$($bin runs --results "$work/reg" 2>&1)
expect "checkpoint: the failed attempts are not shown as finished (one FINISHED run)" test "$(grep -c FINISHED <<<"$out")" = 1

# log: a failed row stops the run; it is not recorded as finished
rm -rf "$work/run" "$work/reg"
failing "$work/run/log.tsv" 4 "cannot write the log '.*log.tsv' at step" "log: a failed row stops the run" \
    $bin train "$work/r.ini" --results "$work/reg"
out=$($bin runs --results "$work/reg" 2>&1)
expect "log: the run is not recorded as finished" test -z "$(grep FINISHED <<<"$out")"

# registry: a failed write of the database's journal stops the command
rm -rf "$work/run" "$work/reg"
mkdir -p "$work/reg"
failing "$work/reg/registry.sqlite-wal" 3 "registry '.*registry.sqlite'" "registry: a failed write stops the command" \
    $bin train "$work/r.ini" --results "$work/reg"

# safetensors export
$bin train "$work/r.ini" --results "$work/reg" >/dev/null 2>&1
failing "$work/w.safetensors.tmp" 1 "cannot (write|close) '.*w.safetensors.tmp'" "safetensors: a failed write stops the export" \
    $bin export "$work/run/checkpoint.h5" "$work/w.safetensors"
expect "safetensors: no file renamed into place" test ! -e "$work/w.safetensors"
expect "safetensors: its temporary is removed" test ! -e "$work/w.safetensors.tmp"

# attention maps of a text, and the page of them
echo "Document 3 has line 4 of a small corpus." > "$work/text.txt"
failing "$work/text_maps.h5.tmp" 2 "attention maps '.*text_maps.h5.tmp'.*HDF5 error" "maps of a text: a failed write stops it" \
    $bin maps "$work/run/checkpoint.h5" --text "$work/text.txt" -o "$work/text_maps.h5"
expect "maps of a text: nothing in place, no temporary" test ! -e "$work/text_maps.h5" -a ! -e "$work/text_maps.h5.tmp"
$bin maps "$work/run/checkpoint.h5" --text "$work/text.txt" -o "$work/text_maps.h5" > /dev/null
failing "$work/page.html.tmp" 1 "cannot (write|close) '.*page.html.tmp'" "view: a failed write stops it" \
    $bin view "$work/text_maps.h5" -o "$work/page.html"
expect "view: nothing in place, no temporary" test ! -e "$work/page.html" -a ! -e "$work/page.html.tmp"

# prepared shards: the folder is written whole or not at all
failing "$work/data2.tmp/train_000000.bin" 1 "cannot (write|close) '.*data2.tmp/train_000000.bin'" "shards: a failed write stops prepare" \
    $bin prepare --vocab 300 "$work/data2" "$work/corpus"
expect "shards: no data folder put in place" test ! -e "$work/data2"
expect "shards: the temporary folder is removed" test ! -e "$work/data2.tmp"

# attention maps and outlier statistics (HDF5, written through the same checked helpers)
failing "$work/maps.h5.tmp" 2 "attention maps '.*maps.h5.tmp'.*HDF5 error" "maps: a failed write stops the writer" $fixture maps "$work/maps.h5"
expect "maps: no file renamed into place" test ! -e "$work/maps.h5"
expect "maps: its temporary is removed" test ! -e "$work/maps.h5.tmp"
failing "$work/stats.h5.tmp" 2 "outlier statistics '.*stats.h5'.*HDF5 error" "outlier statistics: a failed write stops the writer" \
    $fixture outliers "$work/stats.h5"
expect "outlier statistics: no file renamed into place" test ! -e "$work/stats.h5"
expect "outlier statistics: its temporary is removed" test ! -e "$work/stats.h5.tmp"
expect "the fixtures write both files when nothing fails" sh -c "$fixture maps $work/maps.h5 && $fixture outliers $work/stats.h5"
summary
