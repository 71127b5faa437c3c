#!/usr/bin/env bash
# Bad input through the command line, each case exiting non-zero with a message naming the file,
# line or key and leaving nothing half-written: Every bad-input case the docs name, with the message
# it must print; no output over its own input (`prepare C C`, `prepare P P/texts`, an output inside
# the corpus, through `./`, `..` and a symbolic link; `needle-data D D`; `export CK CK`; `attn` onto
# its maps file) and no output replacing a FIFO or a folder this program did not make; paths with a
# newline, a tab, a trailing space or bytes that are not UTF-8 refused; a repeated recipe section
# refused; a validation split shorter than one window, `bench --vocab 0`, `needle-data --seq-len 0`,
# a training shard shorter than one block and one of document separators only, each refused by name;
# `difftx runs` on a read-only results folder; a Table 6 row that does not state `head_norm` refused
# before anything trains; `init_from` keeping the source parameters; the recipe format (repeated
# keys, indented lines, a 300-character comment, 300- and 500-character paths in a recipe and a
# checkpoint, NUL bytes, a folder as recipe, `h = 4abc`); size keys too large and runs that need
# more memory than the machine, refused before they allocate; a second `train` on a run folder
# refused naming the first, the lock gone with a `kill -9`; fsync before and after the checkpoint's
# rename (strace); a 140,000-byte token sampled whole; an interrupted `prepare` (strace fault
# injection) leaving the old folder whole; shards of another tokenizer refused.
#
# Also here, in test_train, test_table6.sh and test_checkpoint: `--help` for every subcommand,
# docs/recipes.md's key table equal to `difftx keys`, the nearest key or subcommand for a typo, the
# valid presets, warnings for a warmup as long as the run and a small validation split, progress and
# closing lines; `log.tsv`'s header and an older log carried over on resume; extending a run by
# `steps` equal to a non-stop run; sampling from another directory; plain runs and benchmarks
# recorded, `difftx runs` and `difftx compare` (differing switches, final losses, the figure's
# data); `difftx eval` equal to the table's values; every documented registry query against two
# presets; registry migrations (schema 0 and 2 to 3, a newer one refused); the safetensors export
# read back by the format's rules; tables and figures named by preset; a recipe's relative paths
# read from its folder from another working folder, the data folder and its identity recorded in the
# registry and the checkpoint, the same data by a link or another spelling resuming the run, one
# token changed stopping the resume with both identities, `needle-data` from another working folder;
# the OpenBLAS kernel named in a run's first line and registry row, and a resume under another
# kernel warned; `OMP_DYNAMIC=true` on one allowed CPU training instead of hanging.
set -u
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/difftx
work=$PWD/build/test_cli
rm -rf "$work" && mkdir -p "$work/corpus"
source tests/harness.sh

for d in $(seq -w 0 24); do
    for i in $(seq 1 30); do echo "Document $d has line $i of a small corpus."; done > "$work/corpus/doc$d.txt"
done
$bin prepare --vocab 300 "$work/data" "$work/corpus" >/dev/null || { echo "prepare failed"; exit 1; }

recipe() {  # recipe FILE [extra lines...]: a valid tiny recipe plus extra lines
    local file=$1
    shift
    {
        printf '%s\n' "attention = diff" "n_layer = 1" "d_model = 32" "n_head = 2" "seq_len = 16" "batch_size = 2" \
            "steps = 4" "warmup_steps = 1" "eval_batches = 1" "log_every = 1" "checkpoint_every = 1" \
            "data = $work/data" "out = $work/run"
        printf '%s\n' "$@"
    } > "$file"
}

recipe "$work/unknown.ini" "colour = blue"
expect_fail "unknown key" "unknown.ini:14: unknown key 'colour'" $bin train --results "$work/reg" "$work/unknown.ini"
recipe "$work/type.ini" "grad_accum = two"
expect_fail "wrong type" "type.ini:14: key 'grad_accum': 'two' is not a decimal integer" $bin train --results "$work/reg" "$work/type.ini"
recipe "$work/choice.ini"
sed -i 's/^attention = diff$/attention = triple/' "$work/choice.ini"
expect_fail "bad choice" "choice.ini:1: key 'attention': 'triple' is not one of standard, diff, diff2" $bin train --results "$work/reg" "$work/choice.ini"

# the recipe format: lines of any length, no continuation lines, no repeated keys, nothing but text
recipe "$work/repeat.ini" "steps = 7"
expect_fail "repeated key" "repeat.ini:14: key 'steps' repeats line 7" $bin train --results "$work/reg" "$work/repeat.ini"
recipe "$work/indented.ini" "    steps = 2"
expect_fail "an indented line is a line, not a continuation" "indented.ini:14: key 'steps' repeats line 7" $bin train --results "$work/reg" "$work/indented.ini"
long_comment="# $(printf 'x%.0s' $(seq 1 300)) steps = 7"
recipe "$work/long_comment.ini" "$long_comment"
$bin train --results "$work/reg" "$work/long_comment.ini" out=$work/long_comment_run > /dev/null 2>&1
expect "a 300-character comment line stays a comment (4 steps, not 7)" grep -qP "^train\t4\t" "$work/long_comment_run/log.tsv"
expect "and nothing past step 4" bash -c "! grep -qP '^train\t5\t' '$work/long_comment_run/log.tsv'"
long_data="$work/$(printf 'd%.0s' $(seq 1 150))/$(printf 'd%.0s' $(seq 1 150))"  # a 300-character data line
mkdir -p "$(dirname "$long_data")"
ln -sfn "$work/data" "$long_data"
long_out="$work/$(printf 'e%.0s' $(seq 1 250))/$(printf 'f%.0s' $(seq 1 250))"
recipe "$work/long_path.ini"
sed -i "s#^data = .*#data = $long_data#" "$work/long_path.ini"
$bin train --results "$work/reg" "$work/long_path.ini" out=$long_out > /dev/null 2>&1
expect "a 300-character data line and a 500-character out folder train" test -f "$long_out/checkpoint.h5"
expect "and the checkpoint, whose config holds both, samples" $bin sample "$long_out/checkpoint.h5" --tokens 3
printf 'attention = diff\nn_layer = 1\0\n' > "$work/nul.ini"
expect_fail "a NUL byte" "nul.ini:2: a NUL byte" $bin train --results "$work/reg" "$work/nul.ini"
mkdir -p "$work/folder.ini"
expect_fail "a folder as recipe" "recipe '$work/folder.ini' is not a regular file" $bin train --results "$work/reg" "$work/folder.ini"
recipe "$work/garbage.ini" "just words"
expect_fail "a line of no known shape" "garbage.ini:14: expected 'key = value'" $bin train --results "$work/reg" "$work/garbage.ini"
sed 's/^h = 4$/h = 4abc/' experiments/table6.ini > "$work/preset_int.ini"
expect_fail "a preset integer with trailing text" "\[smoke\] needs 'h' as a positive integer, not '4abc'" \
    $bin table6 "$work/preset_int.ini" --preset smoke --results "$work/refused" --plots "$work/refused"
# a repeated section is refused like a repeated key (a second [preset smoke] once added keys unseen)
{ cat experiments/table6.ini; printf '%s\n' "[preset smoke]" "steps = 3"; } > "$work/repeated_section.ini"
first_smoke=$(grep -n '^\[preset smoke\]$' experiments/table6.ini | cut -d: -f1)
expect_fail "a repeated section" "repeated_section.ini:$(( $(wc -l < experiments/table6.ini) + 1 )): section '\[preset smoke\]' repeats line $first_smoke" \
    $bin table6 "$work/repeated_section.ini" --preset smoke --results "$work/refused" --plots "$work/refused"
recipe "$work/section.ini" "[model]" "n_layer = 2"
expect_fail "a section in a run recipe is refused at its own line" "section.ini:14: sections are not used" $bin train --results "$work/reg" "$work/section.ini"
recipe "$work/ok.ini"
# paths that could not be read back: control characters, a leading or trailing space, bytes that are not UTF-8
expect_fail "a newline in a path" "key 'out': .* holds a control character" $bin train --results "$work/reg" "$work/ok.ini" "out=$work/new
line"
expect_fail "a tab in a path" "key 'data': .* holds a control character" $bin train --results "$work/reg" "$work/ok.ini" "data=$work/da	ta"
expect_fail "a path ending in a space" "key 'data': .* begins or ends with a space" $bin train --results "$work/reg" "$work/ok.ini" "data=$work/data "
expect_fail "a path that is not UTF-8" "key 'out': .* is not UTF-8 text" $bin train --results "$work/reg" "$work/ok.ini" "out=$work/$(printf 'caf\xe9')"
expect "refused paths write nothing" test -z "$(ls -d "$work"/new* "$work"/caf* 2>/dev/null)"
expect_fail "override type" "override 'lr=fast': key 'lr': 'fast' is not a decimal number in float's normal range" $bin train --results "$work/reg" "$work/ok.ini" lr=fast
# numbers are plain decimals: no sign '+', no spaces, no hexadecimal (strtol/strtof would read
# 0x10 as 16), nothing a float holds only as a subnormal
for bad in "steps=+2" "steps= 1" "steps=0x10" "lr=0x1p-3" "lr=1e-40" "lr=inf" "lr=+0.1"; do
    expect_fail "override '$bad' is refused as a number" "key '${bad%%=*}': .* is not a decimal" \
        $bin train --results "$work/reg" "$work/ok.ini" "$bad"
done
expect_fail "option --tokens +5 is refused" "option --tokens: '\+5' is not a non-negative integer" $bin sample "$work/none.h5" --tokens +5
# a file-size limit (400 KiB: the registry fits, a checkpoint of 1.1 MB does not) makes the write
# fail with EFBIG on the checked path: no SIGXFSZ death (exit 153), no temporary file left, and
# the run, never FINISHED, is reaped by the next command as any failed run is
out=$(bash -c "ulimit -f 400 && OMP_NUM_THREADS=1 '$bin' train --results '$work/fsize_reg' '$work/ok.ini' out='$work/fsize' d_model=64 2>&1"; echo "exit $?")
expect "ulimit -f: the checkpoint's write fails with an error naming it, exit 1" \
    bash -c "grep -q 'exit 1$' <<<\"\$1\" && grep -q \"^error: checkpoint '$work/fsize/checkpoint.h5.tmp'\" <<<\"\$1\"" _ "$out"
expect "ulimit -f: no temporary file is left" test -z "$(find "$work/fsize" -name '*.tmp' 2>/dev/null)"
$bin runs --results "$work/fsize_reg" > /dev/null 2>&1
expect "ulimit -f: the run is not FINISHED, and the next command marks it KILLED" \
    test "$(sqlite3 "$work/fsize_reg/registry.sqlite" "SELECT status FROM runs")" = KILLED
expect_fail "override unknown" "override 'dropout=0.1': unknown key 'dropout'" $bin train --results "$work/reg" "$work/ok.ini" dropout=0.1
expect_fail "override syntax" "override 'lr': expected key=value" $bin train --results "$work/reg" "$work/ok.ini" lr
expect_fail "d_model divisibility" "key 'd_model': 30 must equal 2 x n_head x head_dim" $bin train --results "$work/reg" "$work/ok.ini" d_model=30
expect_fail "odd head_dim" "key 'head_dim': 5 must be even" $bin train --results "$work/reg" "$work/ok.ini" attention=standard d_model=10 n_head=2 head_dim=5
expect_fail "lambda_init" "key 'lambda_init': 'high' is neither 'schedule' nor a number" $bin train --results "$work/reg" "$work/ok.ini" lambda_init=high
# a variant's switch: stated in its range where the variant's row needs it, refused elsewhere
expect_fail "a switch the variant does not use" "key 'noise_group' = 2: attention = diff does not use it" \
    $bin train --results "$work/reg" "$work/ok.ini" noise_group=2
expect_fail "GDA without its switch" "key 'noise_group': attention = gda needs it stated, G >= 1 with G \+ 1 dividing n_head = 4 .*, got 0" \
    $bin train --results "$work/reg" "$work/ok.ini" attention=gda n_head=4
expect_fail "GDA's groups of G + 1 query heads" "key 'noise_group': attention = gda needs it stated, G >= 1 with G \+ 1 dividing n_head = 4 .*, got 2" \
    $bin train --results "$work/reg" "$work/ok.ini" attention=gda n_head=4 noise_group=2
expect_fail "shared noise maps: G divides n_head" "key 'noise_group': attention = diff_shared_noise needs it stated, a divisor of n_head = 2, got 3" \
    $bin train --results "$work/reg" "$work/ok.ini" attention=diff_shared_noise noise_group=3
expect_fail "Shared DIFF's rank" "key 'update_rank': attention = diff_shared needs it stated, 1 .. n_head x head_dim = 16, got 17" \
    $bin train --results "$work/reg" "$work/ok.ini" attention=diff_shared update_rank=17
expect_fail "the old name of shared noise maps" "key 'attention': 'diff_grouped' is not one of .*diff_shared_noise.*gda" \
    $bin train --results "$work/reg" "$work/ok.ini" attention=diff_grouped noise_group=2
# sizes: every size key has a bound that keeps the model's arithmetic in range, and a run that
# needs more memory than the machine has is refused, naming the keys, before it allocates
expect_fail "huge d_model" "key 'd_model': 2000000000 is too large \(at most 65536\)" $bin train --results "$work/reg" "$work/ok.ini" d_model=2000000000 out=$work/big
expect_fail "huge batch_size" "key 'batch_size': 100000000 is too large \(at most 4194304\)" $bin train --results "$work/reg" "$work/ok.ini" batch_size=100000000 out=$work/big
expect_fail "tokens per micro-batch" "keys 'batch_size' and 'seq_len': 4000000 x 256 tokens per micro-batch are too many" \
    $bin train --results "$work/reg" "$work/ok.ini" batch_size=4000000 seq_len=256 out=$work/big
expect_fail "activations beyond memory" "training needs [0-9.]+ GiB, more than the [0-9.]+ GiB of device cpu \(OpenBLAS [A-Za-z0-9]+\): .* of one micro-batch's activations \(keys 'batch_size' = 400000, 'seq_len' = 256\)" \
    $bin train --results "$work/reg" "$work/ok.ini" batch_size=400000 seq_len=256 out=$work/big
expect_fail "parameters beyond memory" "training needs [0-9.]+ GiB, .* of parameters with their gradients and AdamW moments \(keys 'n_layer' = 4096, 'd_model' = 65536" \
    $bin bench "$work/ok.ini" n_layer=4096 d_model=65536 n_head=256
expect "refused sizes write nothing" test ! -e "$work/big"
expect_fail "missing recipe" "cannot open recipe '$work/nope.ini'" $bin train --results "$work/reg" "$work/nope.ini"
expect_fail "missing corpus" "key 'data': '$work/nodata' is not a folder; run .make data." $bin train --results "$work/reg" "$work/ok.ini" data=$work/nodata
expect_fail "a relative data folder on the command line names the working folder" \
    "key 'data': '${work#$PWD/}/nodata' is not a folder \(looked for it in $PWD\); run .make data." $bin train --results "$work/reg" "$work/ok.ini" data=${work#$PWD/}/nodata
expect_fail "missing prepare input" "corpus input '$work/absent'" $bin prepare "$work/data2" "$work/absent"
expect_fail "missing checkpoint" "cannot read checkpoint '$work/none.h5'" $bin sample "$work/none.h5"
echo "not hdf5" > "$work/text.h5"
expect_fail "non-HDF5 checkpoint" "cannot read checkpoint '$work/text.h5'" $bin sample "$work/text.h5"
expect_fail "unknown subcommand" "unknown subcommand 'fly'" $bin fly
# a table row states every switch that defines it: Table 6's DIFF row without head_norm is refused
awk -v data="$work/data" '/^\[row /{row=$0} /^data = /{$0="data = " data} !(row=="[row diff]" && /^head_norm/)' \
    experiments/table6.ini > "$work/no_head_norm.ini"
expect_fail "row without head_norm" "no_head_norm.ini: \[row diff\] must state 'head_norm'" \
    $bin table6 "$work/no_head_norm.ini" --preset smoke --results "$work/refused" --plots "$work/refused"
expect "a refused table trains nothing" test ! -e "$work/refused/table6"
# ... and no section sets what each row derives from the preset's h and d: it would be overwritten
awk '{print} /^\[preset smoke\]/{print "d_model = 128"}' experiments/needle.ini > "$work/needle_width.ini"
expect_fail "a preset setting d_model" "needle_width.ini: \[preset smoke\] sets 'd_model', which each row derives from the preset's h and d" \
    $bin needle "$work/needle_width.ini" --preset smoke --task table2 --results "$work/refused" --plots "$work/refused"
expect "a refused needle task trains nothing" test ! -e "$work/refused/needle"
# a row's or preset's name is a folder of the results: one that climbs out of --results is
# refused at its own line, before anything is written (outside or inside)
mkdir -p "$work/escape/results"
line=$(grep -n '^\[row diff\]$' experiments/table6.ini | cut -d: -f1)
sed "s|^\[row diff\]$|[row ../../../outside_row]|; s|^data = .*|data = $work/data|" experiments/table6.ini > "$work/escape/rows.ini"
expect_fail "a row name that climbs out of the results is refused at its line" \
    "rows.ini:$line: section \[row ../../../outside_row\]: a row name is a folder of the results: letters, digits, '_', '-' and '.' only, and not '.' or '..'" \
    $bin table6 "$work/escape/rows.ini" --preset smoke --results "$work/escape/results" --plots "$work/escape/plots"
line=$(grep -n '^\[preset smoke\]$' experiments/needle.ini | cut -d: -f1)
sed "s|^\[preset smoke\]$|[preset ../../outside_preset]|" experiments/needle.ini > "$work/escape/presets.ini"
expect_fail "a preset name that climbs out of the results is refused at its line" \
    "presets.ini:$line: section \[preset ../../outside_preset\]: a preset name is a folder" \
    $bin needle "$work/escape/presets.ini" --preset ../../outside_preset --task table2 --results "$work/escape/results" --plots "$work/escape/plots"
printf '[row .]\nattention = diff\n' > "$work/escape/dot.ini"
expect_fail "a row named '.' is refused" "dot.ini:1: section \[row .\]: a row name is a folder" \
    $bin table6 "$work/escape/dot.ini" --preset smoke --results "$work/escape/results"
expect "nothing was written for the refused names, inside or outside the results" \
    test -z "$(find "$work" -name 'outside_*')" -a -z "$(ls -A "$work/escape/results")"

# a good run, then a corrupted copy of its checkpoint: Fletcher32 catches flipped data bytes
$bin train --results "$work/reg" "$work/ok.ini" >/dev/null 2>&1
expect "good run finishes" test -f "$work/run/checkpoint.h5"
expect "no temporary file left" test ! -e "$work/run/checkpoint.h5.tmp"
corrupt() {  # corrupt DATASET OUT: a copy of the run's checkpoint with 8 bytes of DATASET's chunk overwritten
    local address
    address=$(h5ls -va "$work/run/checkpoint.h5/$1" | awk '$1 == "0x00000000" {print $3}')
    cp "$work/run/checkpoint.h5" "$2"
    printf '\xff\xff\xff\xff\xff\xff\xff\xff' | dd of="$2" bs=1 seek=$((address + 100)) conv=notrunc status=none
}
corrupt params/tok_embedding "$work/corrupt_params.h5"
expect_fail "corrupt parameters" "checkpoint '$work/corrupt_params.h5': cannot read dataset 'params/tok_embedding' \(corrupt" \
    $bin sample "$work/corrupt_params.h5"
mkdir -p "$work/resume"
corrupt adam_v/lm_head "$work/resume/checkpoint.h5"
expect_fail "corrupt moments on resume" "checkpoint '$work/resume/checkpoint.h5': cannot read dataset 'adam_v/lm_head' \(corrupt" \
    $bin train --results "$work/reg" "$work/ok.ini" out=$work/resume steps=8
size=$(stat -c %s "$work/run/checkpoint.h5")
head -c $((size / 3)) "$work/run/checkpoint.h5" > "$work/truncated.h5"
expect_fail "truncated checkpoint" "checkpoint '$work/truncated.h5'" $bin sample "$work/truncated.h5"
expect_fail "config mismatch on resume" "belongs to a run with a different config.*'lr = " $bin train --results "$work/reg" "$work/ok.ini" lr=0.5 steps=4

# one writer per run folder: a second `train` on it stops at once, naming the first; the lock
# goes with the process, so after a kill -9 the folder is free again
$bin train --results "$work/reg" "$work/ok.ini" out=$work/locked steps=1000000 > /dev/null 2>&1 &
first=$!
for _ in $(seq 1 200); do [ -s "$work/locked/.lock" ] && break; sleep 0.05; done
expect_fail "second writer of a run folder" "run folder '$work/locked' is in use by another difftx process \(pid $first\)" \
    $bin train --results "$work/reg" "$work/ok.ini" out=$work/locked steps=1000000
kill -9 $first
wait $first 2>/dev/null
expect "the lock is released with its process" $bin train --results "$work/reg" "$work/ok.ini" out=$work/locked steps=1000000 --until 1

# durability: the checkpoint is synced before its rename and its folder after
strace -f -y -e trace=fsync,rename -o "$work/trace" $bin train --results "$work/reg" "$work/ok.ini" out=$work/synced steps=1 > /dev/null 2>&1
synced=$(awk '/fsync\([0-9]+<[^>]*\/synced\/checkpoint\.h5\.tmp>\)/ {s = NR} /rename\(".*\/synced\/checkpoint\.h5\.tmp", ".*\/synced\/checkpoint\.h5"\)/ && s {r = NR}
              /fsync\([0-9]+<[^>]*\/synced>\)/ && r && !d {d = NR} END {print (s && r && d && s < r && r < d) ? "ordered" : "missing"}' "$work/trace")
expect "checkpoint fsynced, renamed, folder fsynced (strace: $synced)" test "$synced" = ordered

# a token longer than any fixed buffer: three documents of 140,000 'a's make a 140,000-byte
# token; a sampled model (temperature 100: nearly uniform over its ids; seed 4 draws that token
# before <|endoftext|>) prints it whole
mkdir -p "$work/long_corpus"
cp "$work"/corpus/*.txt "$work/long_corpus/"  # doc19, the 20th document, is validation
for d in 1 2 3; do head -c 140000 /dev/zero | tr '\0' a > "$work/long_corpus/run$d.txt"; done
$bin prepare --vocab 1000 "$work/long_data" "$work/long_corpus" > /dev/null
$bin train --results "$work/reg" "$work/ok.ini" data=$work/long_data out=$work/long_run steps=1 > /dev/null 2>&1
$bin sample "$work/long_run/checkpoint.h5" --tokens 3000 --temperature 100 --seed 4 > "$work/long_sample.txt" 2> "$work/long_sample.err"
longest=$(tr -c a "\n" < "$work/long_sample.txt" | awk 'length > m {m = length} END {print m + 0}')
expect "sample prints a 140,000-byte token whole (longest run of a: $longest)" test "$longest" -ge 140000

# a prepared folder is replaced whole: an interrupted `prepare` (its second rename fails, after
# the new tokenizer was written) leaves the old folder as it was; a finished one leaves no
# stale file; a folder whose tokenizer is not the one its shards were made with is refused
$bin prepare --vocab 300 "$work/swap" "$work/corpus" > /dev/null
touch "$work/swap/stale.txt"
strace -f -o /dev/null -e trace=rename -e inject=rename:error=EIO:when=2 $bin prepare --vocab 300 "$work/swap" "$work/long_corpus" > /dev/null 2>&1
expect "an interrupted prepare leaves the old folder whole" cmp -s "$work/swap/tokenizer.bin" "$work/data/tokenizer.bin"
expect "and it trains" $bin train --results "$work/reg" "$work/ok.ini" data=$work/swap out=$work/swap_run steps=1
$bin prepare --vocab 300 "$work/swap" "$work/long_corpus" > /dev/null
expect "a finished prepare replaces the folder whole" test ! -e "$work/swap/stale.txt" -a ! -e "$work/swap.tmp" -a -s "$work/swap/val.bin"
# W4: a folder or file of the user's named OUT.tmp is neither used, written over nor deleted: the
# temporary is the program's own (the next free name); one an interrupted writer of this program
# left (marked as being written) is taken again and cleared
mkdir -p "$work/mine_data.tmp" && echo "mine" > "$work/mine_data.tmp/notes.txt"
$bin prepare --vocab 300 "$work/mine_data" "$work/corpus" > "$work/mine_prepare.log" 2>&1
expect "prepare beside a user's OUT.tmp folder: done, that folder whole, no temporary left" \
    test -s "$work/mine_data/val.bin" -a "$(cat "$work/mine_data.tmp/notes.txt")" = mine -a "$(ls -d "$work"/mine_data.tmp* | wc -l)" = 1
$bin needle-data --seq-len 64 "$work/mine_data" "$work/data" > /dev/null 2>&1
expect "needle-data beside it too" test -s "$work/mine_data/train.bin" -a "$(cat "$work/mine_data.tmp/notes.txt")" = mine
mkdir -p "$work/mine_data.tmp.1" && touch "$work/mine_data.tmp.1/.difftx-writing" "$work/mine_data.tmp.1/half.bin"
$bin prepare --vocab 300 "$work/mine_data" "$work/corpus" > /dev/null 2>&1
expect "what an interrupted prepare left (marked) is taken again and gone" test ! -e "$work/mine_data.tmp.1" -a ! -e "$work/mine_data/half.bin"
cp -r "$work/data" "$work/mixed"
cp "$work/swap/tokenizer.bin" "$work/mixed/tokenizer.bin"
expect_fail "shards of another tokenizer" "key 'data': '$work/mixed/train.bin' was made with another tokenizer than '$work/mixed/tokenizer.bin'" \
    $bin train --results "$work/reg" "$work/ok.ini" data=$work/mixed out=$work/mixed_run

# divergence: an absurd learning rate blows the loss up; the run stops naming the step and
# the last good checkpoint stays readable
expect_fail "non-finite loss" "training diverged at step [0-9]+: loss" $bin train --results "$work/reg" "$work/ok.ini" out=$work/diverge lr=1e30 steps=20
step=$(h5dump -a step "$work/diverge/checkpoint.h5" 2>/dev/null | grep -oE '\(0\): [0-9]+' | grep -oE '[0-9]+$')
expect "last good checkpoint kept (step ${step:-none})" test -n "$step"
expect "last good checkpoint not finished" bash -c "h5dump -a finished '$work/diverge/checkpoint.h5' | grep -q '(0): 0'"

# warm start (init_from): only a finished run of the same architecture and tokenizer; the new
# run starts from its parameters (with lr 1e-20 they stay those after one step)
expect_fail "init_from an unfinished run" "key 'init_from': '$work/diverge/checkpoint.h5' is not a finished run's checkpoint" \
    $bin train --results "$work/reg" "$work/ok.ini" out=$work/warm init_from=$work/diverge/checkpoint.h5
expect_fail "init_from another width" "key 'init_from': '$work/run/checkpoint.h5' has tensor tok_embedding \(300, 32\) where this config has tok_embedding \(300, 64\)" \
    $bin train --results "$work/reg" "$work/ok.ini" out=$work/warm init_from=$work/run/checkpoint.h5 d_model=64
$bin prepare --vocab 290 "$work/data290" "$work/corpus" >/dev/null
expect_fail "init_from another tokenizer" "key 'init_from': '$work/run/checkpoint.h5' was trained with another tokenizer" \
    $bin train --results "$work/reg" "$work/ok.ini" out=$work/warm init_from=$work/run/checkpoint.h5 data=$work/data290
expect "nothing written by refused warm starts" test ! -e "$work/warm/checkpoint.h5"
$bin train --results "$work/reg" "$work/ok.ini" out=$work/warm init_from=$work/run/checkpoint.h5 steps=1 lr=1e-20 >/dev/null 2>&1
expect "warm start keeps the source parameters" h5diff -d 1e-12 "$work/run/checkpoint.h5" "$work/warm/checkpoint.h5" /params /params
$bin train --results "$work/reg" "$work/ok.ini" out=$work/cold steps=1 lr=1e-20 >/dev/null 2>&1
expect "without init_from the same run starts elsewhere" bash -c "! h5diff -q -d 1e-3 '$work/run/checkpoint.h5' '$work/cold/checkpoint.h5' /params /params"

# command-line habits: help for every subcommand, the key table docs/recipes.md shows, the nearest
# name for a typo, the valid presets, warnings for settings that quietly waste a run
subcommands=$($bin help | sed -n 's/^  difftx \([a-z0-9-]*\) .*/\1/p; s/^  difftx \([a-z0-9-]*\)$/\1/p')
expect "help lists the subcommands" test "$(wc -w <<<"$subcommands")" -ge 11
for c in $subcommands; do
    expect "difftx $c --help exits 0 with its usage" bash -c "'$bin' $c --help | grep -q '^usage: difftx $c'"
done
expect "difftx help train" bash -c "'$bin' help train | grep -q '^usage: difftx train RECIPE'"
expect "docs/recipes.md's key table is difftx keys" bash -c "diff <('$bin' keys) <(sed -n '/^<!-- generated by .difftx keys/,/^<!-- end of keys/p' docs/recipes.md | sed '1d;\$d')"
expect_fail "a mistyped key gets the nearest" "unknown key 'step'; did you mean 'steps'\?" $bin train --results "$work/reg" "$work/ok.ini" step=3
expect_fail "a mistyped subcommand gets the nearest" "unknown subcommand 'trian'; did you mean 'train'\?" $bin trian "$work/ok.ini"
expect_fail "a bad preset lists the valid ones" "no \[preset smal\]; its presets are smoke, small, gpu124m, paper" $bin table6 experiments/table6.ini --preset smal
$bin train --results "$work/reg" "$work/ok.ini" warmup_steps=4 eval_batches=500 out=$work/warn > "$work/warn.log" 2>&1
expect "warmup as long as the run is warned of" grep -q "warning: warmup_steps = 4 >= steps = 4" "$work/warn.log"
expect "a validation split smaller than asked is warned of" grep -qE "warning: the validation shard holds [0-9]+ windows of seq_len \+ 1 = 17 tokens, but eval_batches x batch_size = 1000" "$work/warn.log"
expect "progress shows tokens seen, tokens/s and elapsed time" grep -qE "^step +4/4 \| .* \| 128 tokens \| +[0-9]+ tok/s \| 0m0[0-9]s elapsed, eta" "$work/warn.log"
expect "a run ends naming its checkpoint and log" grep -q "^finished at step 4: checkpoint $work/warn/checkpoint.h5, log $work/warn/log.tsv" "$work/warn.log"

# a finished run extended by raising steps keeps its optimizer: with a schedule that does not
# depend on steps, 4 + 4 steps log exactly the training losses of 8 at once
flat="warmup_steps=0 lr_final=1e-3 eval_every=0"
$bin train --results "$work/reg" "$work/ok.ini" $flat out=$work/extended > /dev/null 2>&1
$bin train --results "$work/reg" "$work/ok.ini" $flat steps=8 out=$work/extended > "$work/extend.log" 2>&1
$bin train --results "$work/reg" "$work/ok.ini" $flat steps=8 out=$work/eight > /dev/null 2>&1
expect "extending says what carries on" grep -q "^extending $work/extended/checkpoint.h5 from 4 to 8 steps: parameters, AdamW moments and data position carry on" "$work/extend.log"
expect "an extended run's training losses equal a run of 8 steps" cmp -s <(grep -P '^train\t' "$work/extended/log.tsv") <(grep -P '^train\t' "$work/eight/log.tsv")
expect "and its final validation too" cmp -s <(grep -P '^val\t8\t' "$work/extended/log.tsv") <(grep -P '^val\t8\t' "$work/eight/log.tsv")
expect_fail "a run does not shrink" "key 'steps': 6 is below the 8 steps" $bin train --results "$work/reg" "$work/ok.ini" $flat steps=6 out=$work/extended
# the run folder holds its tokenizer: sampling works from any folder
expect "the run folder holds the tokenizer" cmp -s "$work/data/tokenizer.bin" "$work/eight/tokenizer.bin"
expect "sample from another folder" bash -c "cd /tmp && '$PWD/$bin' sample '$work/eight/checkpoint.h5' --tokens 3 --prompt Document > /dev/null"

# plain training runs are recorded: an attempt stopped by --until is KILLED, its resume FINISHED
$bin train "$work/ok.ini" out=$work/tracked --results "$work/tracked_reg" --until 2 > /dev/null 2>&1
$bin train "$work/ok.ini" out=$work/tracked --results "$work/tracked_reg" > /dev/null 2>&1
$bin train "$work/ok.ini" out=$work/tracked --results "$work/tracked_reg" > "$work/tracked_again.log" 2>&1
$bin runs --results "$work/tracked_reg" > "$work/runs.log" 2>&1
expect "a stopped attempt is recorded KILLED" grep -qE "^ +1  train +ok +$work/tracked +1337 KILLED +2/4" "$work/runs.log"
expect "its resume FINISHED, with losses and tokens/s" grep -qE "^ +2  train +ok +$work/tracked +1337 FINISHED +4/4 +[0-9.]+ +[0-9.]+ +[0-9]+ " "$work/runs.log"
expect "a finished run is not recorded again" grep -q "^run 2 of $work/tracked_reg/registry.sqlite already finished this config" "$work/tracked_again.log"
expect "train records its metrics" test "$(sqlite3 "$work/tracked_reg/registry.sqlite" "SELECT COUNT(DISTINCT step) FROM metrics WHERE key = 'train_loss'")" = 4
# a FINISHED run counts only while its checkpoint is the file it recorded: deleted, the config
# trains again as a new attempt; overwritten by another config's run, the retraining refuses
# that folder instead of pointing at the other run's checkpoint
lost="$work/lost" lost_reg="$work/lost_reg/registry.sqlite"
$bin train "$work/ok.ini" out=$lost --results "$work/lost_reg" > /dev/null 2>&1
rm -rf "$lost"
$bin train "$work/ok.ini" out=$lost --results "$work/lost_reg" > "$work/lost.log" 2>&1
expect "a finished run whose checkpoint is gone says so" grep -q "^warning: run 1 ($lost, seed 1337) of $lost_reg finished, but its checkpoint is gone: '$lost/checkpoint.h5'; it does not count as finished" "$work/lost.log"
expect "and is trained again as attempt 2, FINISHED, with its checkpoint" \
    bash -c "test \"\$(sqlite3 '$lost_reg' 'SELECT attempt, status FROM runs ORDER BY id DESC LIMIT 1')\" = '2|FINISHED' && test -s '$lost/checkpoint.h5' && ! grep -q 'already finished' '$work/lost.log'"
rm -rf "$lost"
$bin train "$work/ok.ini" out=$lost lr=2e-3 > /dev/null 2>&1
$bin train "$work/ok.ini" out=$lost --results "$work/lost_reg" > "$work/lost.log" 2>&1
expect "a finished run whose folder another config reused is not taken for finished" \
    bash -c "grep -q \"finished, but its checkpoint is no longer the file it wrote (the sha256 differs): '$lost/checkpoint.h5'\" '$work/lost.log' && grep -q \"'$lost/checkpoint.h5' belongs to a run with a different config\" '$work/lost.log' && ! grep -q 'already finished' '$work/lost.log'"

# a recipe's relative paths are read from its folder, whatever the working folder; the data is
# recorded by what identifies it, so another spelling of the same folder is the same run
mkdir -p "$work/recipes/nested"
sed -e "s#^data = .*#data = ../../data#" -e "s#^out = .*#out = ../../relative_run#" "$work/ok.ini" > "$work/recipes/nested/rel.ini"
expect "a recipe's relative data and out, from another working folder" \
    bash -c "cd /tmp && '$PWD/$bin' train '$work/recipes/nested/rel.ini' steps=2 --results '$work/rel_reg' > /dev/null"
expect "the run folder lies beside the data, as the recipe says" test -s "$work/relative_run/checkpoint.h5"
expect "the registry records the data folder from the root" \
    test "$(sqlite3 "$work/rel_reg/registry.sqlite" "SELECT data_dir FROM runs")" = "$work/data"
expect "and its identity: tokenizer, shards, tokens, content hash" \
    grep -qE "^tokenizer [0-9a-f]{16}; train 1 shard, [0-9]+ tokens; val [0-9]+ tokens; content [0-9a-f]{16}$" \
    <(sqlite3 "$work/rel_reg/registry.sqlite" "SELECT data_id FROM runs")
expect "the checkpoint records both" bash -c "h5dump -a data_id '$work/relative_run/checkpoint.h5' | grep -q 'content ' &&
    h5dump -a data '$work/relative_run/checkpoint.h5' | grep -q '\"$work/data\"'"
expect "the same data by another path resumes the run (a symbolic link, a relative spelling)" \
    bash -c "ln -sfn '$work/data' '$work/data_link' && '$bin' train '$work/recipes/nested/rel.ini' steps=3 data='$work/data_link' --results '$work/rel_reg' | grep -q '^extending' &&
    cd '$work/recipes' && '$PWD/$bin' train nested/rel.ini steps=4 data=../data --results '$work/rel_reg' | grep -q '^extending'"
expect "eval from another folder finds the data the checkpoint records" \
    bash -c "cd /tmp && '$PWD/$bin' eval '$work/relative_run/checkpoint.h5' --windows 2 | grep -q \"of '$work/data'\""
rm -rf "$work/data_edited" && cp -r "$work/data" "$work/data_edited"
printf '\001\000' | dd of="$work/data_edited/train.bin" bs=1 seek=1100 conv=notrunc status=none  # one token, same tokenizer
expect_fail "a resume on data with one token changed stops with both identities" \
    "relative_run/checkpoint.h5' was trained on other data than '$work/data_edited' holds \(checkpoint: tokenizer [0-9a-f]+; .*'$work/data_edited' now: tokenizer" \
    $bin train "$work/recipes/nested/rel.ini" steps=5 data="$work/data_edited" --results "$work/rel_reg"
$bin bench "$work/ok.ini" --steps 2 --vocab 300 --results "$work/tracked_reg" > /dev/null 2>&1
expect "a benchmark is recorded with its throughput" bash -c "'$bin' runs --results '$work/tracked_reg' --experiment bench | grep -qE '^ +3  bench +ok +train +1337 FINISHED .* [0-9]+  20'"
# W11: --status matches a status whatever its case, and refuses one no run can have
expect "runs --status finished lists the FINISHED runs" bash -c "'$bin' runs --results '$work/tracked_reg' --status finished | grep -qE '^ +3  bench +ok +train +1337 FINISHED '"
expect_fail "runs --status refuses a status no run has" "option --status: no status 'done' \(a run is one of RUNNING, FINISHED, FAILED, KILLED\)" \
    $bin runs --results "$work/tracked_reg" --status done
# the weights' products timed apart from the rest of the step. Their FLOPs by hand, for the bench
# recipe (L 6, C 256, QKV 768, H x Dv 256, F 704, V 4096) at one row of 256 tokens: 2 x
# (6 x (256 x 768 + 256 x 256 + 256 x 1408 + 704 x 256) + 256 x 4096) = 11,730,944 a token
# forward, three times that with the backward: 9.0 GFLOP a step
out=$($bin bench experiments/bench_diff.ini --steps 3 batch_size=1 --results "$work/products_reg" 2>&1)
products='^  the weights. products \(projections, MLP, LM head\): ([0-9]+) ms of the ([0-9]+) ms step \([0-9]+%\), 9\.0 GFLOP at [0-9.]+ GFLOP/s = [0-9]+% of the matmul rate; the rest \(attention, norms, element-wise passes, AdamW\): ([0-9]+) ms$'
expect "bench times the weights' products, their FLOPs counted as by hand" grep -qE "$products" <<<"$out"
read -r products_ms step_ms rest_ms < <(sed -nE "s#$products#\\1 \\2 \\3#p" <<<"$out")
expect "bench's products and the rest add up to the step, to a millisecond of rounding" \
    test -n "$step_ms" -a $((products_ms + rest_ms - step_ms)) -ge -1 -a $((products_ms + rest_ms - step_ms)) -le 1
expect "bench records the products' share of the step and their rate" \
    test "$(sqlite3 "$work/products_reg/registry.sqlite" "SELECT COUNT(*) FROM evaluations WHERE (key = 'matmul_share' AND value > 0 AND value < 100) OR (key = 'matmul_gflops' AND value > 0)")" = 2
# one more step profiled by operation and layer: the printed table, and a CSV whose rows cover
# every layer's four weight products (two layers here) and sum to the step
out=$($bin bench experiments/bench_diff.ini --steps 2 batch_size=1 n_layer=2 --results "$work/profile_reg" --profile "$work/profile.csv" 2>&1)
expect "bench --profile prints the step's time by operation, with its least traffic, GB/s and (products only) GFLOP/s" \
    bash -c "grep -qE '^  matmul_forward +9( +[0-9.]+){5}$' <<<\"\$1\" && grep -qE '^  attention_backward +2( +[0-9.]+){5}$' <<<\"\$1\" &&
             grep -qE '^  adamw_update +[0-9]+( +[0-9.]+){4} +-$' <<<\"\$1\"" _ "$out"
expect "bench --profile writes each operation's calls per layer, its parts summing to the step" \
    bash -c "head -1 '$work/profile.csv' | grep -qx 'operation,layer,calls_per_step,ms_per_step,percent_of_step,least_bytes_per_step,flop_per_step' &&
             test \"\$(grep -cE '^matmul_forward,[01],4,' '$work/profile.csv')\" = 2 && grep -qE '^matmul_forward,-,1,' '$work/profile.csv' &&
             awk -F, 'NR > 1 { p += \$5 } END { exit !(p > 99.9 && p < 100.1) }' '$work/profile.csv'"
expect_fail "bench --profile refuses an empty path" "option --profile: an empty value" $bin bench experiments/bench_diff.ini --profile "" --results "$work/profile_reg"
# an empty path option is refused by every command before anything is written (as root,
# --results "" once wrote /registry.sqlite, /table6/ and /table6_smoke.md), and a results or plots
# folder a study would record in its rows' recipes must be text a recipe holds
for args in "table6 experiments/table6.ini --preset smoke --results" "needle experiments/needle.ini --task table2 --preset smoke --results" \
            "table5 experiments/table6.ini --needle experiments/needle.ini --preset smoke --results" "runs --results" \
            "train $work/ok.ini --results" "table6 experiments/table6.ini --preset smoke --plots"; do
    expect_fail "${args%% *} ${args##* } \"\" is refused, nothing written" "option ${args##* }: an empty value" bash -c "cd '$work' && '$PWD/$bin' $args ''"
done
expect "an empty --results wrote nothing at the root" test ! -e /registry.sqlite -a ! -e /table6_smoke.md -a ! -e "$work/registry.sqlite"
bad=$(printf 'r\xff')
# (the message holds the byte itself, which grep's UTF-8 patterns do not step over)
expect_fail "table6 --results that is not UTF-8 is refused before any row trains" "option --results: '$work/r" \
    $bin table6 experiments/table6.ini --preset smoke --results "$work/$bad"
expect_fail "needle --plots that is not UTF-8 is refused up front" "option --plots: '$work/r" \
    $bin needle experiments/needle.ini --task table2 --preset smoke --plots "$work/$bad"
expect "a refused --results wrote nothing" test ! -e "$work/$bad"
# two recipes benched in turn, step by step, under the same overrides, and compared pair by pair
recipe "$work/ok_standard.ini"
sed -i 's/^attention = diff$/attention = standard/' "$work/ok_standard.ini"
out=$($bin bench "$work/ok_standard.ini" seq_len=8 --vs "$work/ok.ini" --steps 3 --vocab 300 --results "$work/alternated_reg" 2>&1)
expect "bench --vs benches both recipes under the overrides given" \
    bash -c "test \$(grep -cE '^bench train: attention=(standard|diff) L=1 C=32 .* T=8 B=2 V=300 ' <<<\"\$1\") = 2 &&
             test \"\$(grep -oE '^bench train: attention=[a-z]+' <<<\"\$1\" | tr '\\n' ' ')\" = 'bench train: attention=standard bench train: attention=diff '" _ "$out"
expect "bench --vs compares the second with the first, pair of steps by pair, with an interval" \
    grep -qE "^$work/ok.ini against $work/ok_standard.ini, step pair by step pair: tokens/s [+-][0-9]+\.[0-9]% \[[+-][0-9]+\.[0-9]%, [+-][0-9]+\.[0-9]%\] \(geometric mean over 2 alternated pairs of timed steps; 95% t-interval over the pairs' log ratios; [0-2] of 2 pairs (faster|slower)\)$" <<<"$out"
expect "bench --vs states the peak memory of both models together, not of either" \
    bash -c "grep -qE '^both models in one process, their steps alternated: peak RSS [0-9]+ MiB together$' <<<\"\$1\" && ! grep -q ', peak RSS' <<<\"\$1\"" _ "$out"
expect "bench --vs records both runs as alternated, with no peak memory of their own" \
    test "$(sqlite3 "$work/alternated_reg/registry.sqlite" "SELECT group_concat(r.row || ':' || (SELECT COUNT(*) FROM evaluations e WHERE e.run_id = r.id AND e.key = 'tokens_per_second') || ':' || (SELECT COUNT(*) FROM evaluations e WHERE e.run_id = r.id AND e.key LIKE 'peak%'), ' ') FROM runs r")" = "train-alternated:1:0 train-alternated:1:0"
expect_fail "bench --vs names a recipe it cannot read" "$work/missing.ini" $bin bench "$work/ok.ini" --vs "$work/missing.ini" --steps 2 --results "$work/alternated_reg"
# the two models share one process, so each must fit beside the other: rows enough for 60% of
# the machine's memory (from the refusal of a batch far too large) fit once, not twice
probe=$($bin bench "$work/ok.ini" batch_size=400000 seq_len=256 --results "$work/alternated_reg" 2>&1)
rows=$(sed -nE 's/.*more than the ([0-9.]+) GiB of device .* and ([0-9.]+) GiB of one micro-batch.*/\1 \2/p' <<<"$probe" |
       awk '{ printf "%d", 0.6 * $1 * 400000 / $2 }')
expect_fail "bench --vs refuses two models that fit in memory only one at a time" \
    "training needs [0-9.]+ GiB, more than the [0-9.]+ GiB of device cpu \(OpenBLAS [A-Za-z0-9]+\) left beside the [0-9.]+ GiB of the recipe it alternates with: .*'batch_size' = $rows, 'seq_len' = 256\)" \
    $bin bench "$work/ok.ini" --vs "$work/ok_standard.ini" batch_size=$rows seq_len=256 --results "$work/alternated_reg"
expect "metrics carry the wall-clock time they were measured at" test "$(sqlite3 "$work/tracked_reg/registry.sqlite" "SELECT COUNT(*) FROM metrics WHERE time > strftime('%s', 'now') - 3600 AND time <= strftime('%s', 'now') + 1")" = "$(sqlite3 "$work/tracked_reg/registry.sqlite" "SELECT COUNT(*) FROM metrics")"

# no output over its own input (paths resolved: ./, .. and symbolic links count), and an output
# replaces only a file or a folder of the kind the command makes
snapshot() { find "$1" -type f -print0 | sort -z | xargs -0 sha256sum; }
corpus_before=$(snapshot "$work/corpus")
expect_fail "prepare C C" "output folder '$work/corpus' is the input '$work/corpus'" $bin prepare --vocab 300 "$work/corpus" "$work/corpus"
expect_fail "prepare P P/texts" "output folder '$work' contains the input '$work/corpus'" $bin prepare --vocab 300 "$work" "$work/corpus"
expect_fail "prepare into a folder inside the corpus" "lies inside the input" $bin prepare --vocab 300 "$work/corpus/out" "$work/corpus"
expect_fail "prepare through ./ and .." "is the input" $bin prepare --vocab 300 "$work/./corpus/../corpus" "$work/corpus"
ln -sfn corpus "$work/corpus_link"
expect_fail "prepare through a symbolic link" "is the input" $bin prepare --vocab 300 "$work/corpus_link" "$work/corpus"
expect "the corpus is untouched" test "$(snapshot "$work/corpus")" = "$corpus_before"
mkdir -p "$work/foreign" && echo keep > "$work/foreign/notes.txt"
expect_fail "prepare over a folder it did not make" "'$work/foreign' is a folder with files but no tokenizer.bin" $bin prepare --vocab 300 "$work/foreign" "$work/corpus"
expect "that folder is untouched" grep -q keep "$work/foreign/notes.txt"
data_before=$(snapshot "$work/data")
expect_fail "needle-data D D" "output folder '$work/data' is the input '$work/data'" $bin needle-data --seq-len 64 "$work/data" "$work/data"
expect "the data folder is untouched" test "$(snapshot "$work/data")" = "$data_before"
cp "$work/eight/checkpoint.h5" "$work/ck.h5"
expect_fail "export CK CK" "output '$work/ck.h5' is the input '$work/ck.h5'" $bin export "$work/ck.h5" "$work/ck.h5"
expect_fail "export CK ./CK" "is the input" $bin export "$work/ck.h5" "$work/../$(basename "$work")/ck.h5"
expect "the checkpoint is untouched" cmp -s "$work/ck.h5" "$work/eight/checkpoint.h5"
mkfifo "$work/fifo"
expect_fail "export over something not a regular file" "output '$work/fifo' exists and is not a regular file" $bin export "$work/ck.h5" "$work/fifo"
expect "the fifo is still a fifo" test -p "$work/fifo"
expect_fail "attn over its own maps file" "output '$work/ck.h5' is the input" $bin attn "$work/ck.h5" --sample 0 --layer 0 --head 0 --out "$work/ck.h5"

# small and odd inputs are refused by name, never divided by zero or read past their end
cp -r "$work/data" "$work/shortval"
perl -e 'my $f = shift; open(my $h, "+<", $f) or die; binmode $h; seek($h, 8, 0); print $h pack("l<", 5); close $h; truncate($f, 1024 + 10) or die' "$work/shortval/val.bin"
expect_fail "eval on a validation split shorter than one window" "'$work/shortval' has 5 validation tokens, fewer than one window of seq_len \+ 1 = 17" \
    $bin eval "$work/eight/checkpoint.h5" data=$work/shortval
expect_fail "train on a validation split shorter than one window" "key 'data': the validation shard of '$work/shortval' holds 5 tokens" \
    $bin train --results "$work/reg" "$work/ok.ini" data=$work/shortval out=$work/shortrun
expect "that refusal writes nothing" test ! -e "$work/shortrun"
expect_fail "bench --vocab 0" "option --vocab: must lie in 2..65536, got 0" $bin bench "$work/ok.ini" --vocab 0
expect "needle-data from another working folder finds data/cities.txt beside the program" \
    bash -c "cd /tmp && '$PWD/$bin' needle-data --seq-len 512 --max-needles 1 '$work/nd_elsewhere' '$work/data' > /dev/null && test -s '$work/nd_elsewhere/train.bin'"
expect_fail "needle-data --seq-len 0" "option --seq-len: must lie in 64..1048576, got 0" $bin needle-data --seq-len 0 "$work/nd" "$work/data"
mkdir -p "$work/tiny_corpus" && for d in 0 1 2; do echo "A short text number $d." > "$work/tiny_corpus/doc$d.txt"; done
$bin prepare --vocab 260 "$work/tiny" "$work/tiny_corpus" >/dev/null 2>&1
expect_fail "needle-data on a training shard shorter than a block" "option --seq-len: '$work/tiny' holds [0-9]+ training tokens, fewer than one block of 64" \
    $bin needle-data --seq-len 64 "$work/nd" "$work/tiny"
cp -r "$work/data" "$work/eot"
perl -e 'my $f = shift; open(my $h, "+<", $f) or die; binmode $h; seek($h, 8, 0); read($h, my $n, 4); my $count = unpack("l<", $n);
         seek($h, 1024, 0); print $h pack("S<", 256) x $count; close $h' "$work/eot/train.bin"
expect_fail "needle-data on a shard of document separators only" "haystack from a shard of [0-9]+ tokens holding 0 besides document separators" \
    timeout 60 $bin needle-data --seq-len 64 "$work/nd" "$work/eot"
expect "refused needle mixes write nothing" test ! -e "$work/nd"

# readers open the registry read-only: `difftx runs` on a results folder nobody may write (as
# root, whom permissions do not stop, the check runs as the user nobody)
mkdir -p "$work/ro_results" && cp "$work/tracked_reg/registry.sqlite" "$work/ro_results/"
chmod -R a-w "$work/ro_results" && chmod a+rx "$work/ro_results"
if [ "$(id -u)" = 0 ]; then reader() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }; else reader() { "$@"; }; fi
out=$(reader $bin runs --results "$work/ro_results" 2>&1)
expect "runs reads a registry in a read-only folder ($(tail -1 <<<"$out"))" grep -qE "^3 runs in $work/ro_results/registry.sqlite" <<<"$out"
expect "and writes nothing there" test -z "$(ls "$work/ro_results" | grep -v '^registry.sqlite$')"
chmod -R u+w "$work/ro_results"

# every subcommand applies a key=value word or refuses it by name
expect_fail "sample refuses a stray word" "sample: 'extra': sample takes one CHECKPOINT" $bin sample "$work/ck.h5" extra
expect_fail "export names an extra argument" "export: 'extra': export takes CHECKPOINT and OUT.safetensors only" $bin export "$work/ck.h5" "$work/x.safetensors" extra
expect_fail "attn refuses a stray word" "attn: 'extra': attn takes one FILE" $bin attn "$work/ck.h5" --sample 0 --layer 0 --head 0 extra
expect_fail "needle refuses a stray word" "'extra': expected key=value after the recipe" $bin needle experiments/needle.ini --task table2 --preset smoke --results "$work/refused" extra
expect_fail "table5 refuses a stray word" "'extra': expected key=value after the recipe" $bin table5 experiments/table6.ini --needle experiments/needle.ini --preset smoke --needle-preset smoke --results "$work/refused" extra

# a refused train writes nothing: no registry, no run row, no results folder where it ran
out_before=$(sqlite3 "$work/tracked_reg/registry.sqlite" "SELECT COUNT(*) FROM runs")
expect_fail "a run does not shrink (recorded registry)" "key 'steps': 2 is below the 4 steps" $bin train "$work/ok.ini" out=$work/tracked steps=2 --results "$work/tracked_reg"
expect_fail "a mismatched config" "belongs to a run with a different config" $bin train "$work/ok.ini" out=$work/tracked lr=0.5 --results "$work/tracked_reg"
expect "refusals record no run" test "$(sqlite3 "$work/tracked_reg/registry.sqlite" "SELECT COUNT(*) FROM runs")" = "$out_before"
mkdir -p "$work/elsewhere"
expect_fail "a missing data folder, from another folder" "is not a folder" bash -c "cd '$work/elsewhere' && '$PWD/$bin' train '$work/ok.ini' data=/nonexistent/data"
expect "that refusal creates no results folder there" test ! -e "$work/elsewhere/results"
expect_fail "a fresh results folder after a refusal" "is below the 4 steps" $bin train "$work/ok.ini" out=$work/tracked steps=2 --results "$work/fresh_reg"
expect "holds no registry" test ! -e "$work/fresh_reg/registry.sqlite"
bench_id=$(sqlite3 "$work/tracked_reg/registry.sqlite" "SELECT r.id FROM runs r JOIN experiments x ON x.id = r.experiment_id WHERE x.name = 'bench' LIMIT 1")
out=$($bin compare "$bench_id" --results "$work/tracked_reg" --out "$work/bench_compare.png" 2>&1)
expect "compare on runs without losses says so" grep -q 'no figure: these runs recorded no training or validation losses' <<<"$out"
expect "without gnuplot's errors" test -z "$(grep -i gnuplot <<<"$out")"

# command-line mistakes: the subcommand's own usage, no source location, the nearest name
err=$($bin sample 2>&1)
expect "a usage error prints the subcommand's usage only" bash -c "grep -q '^usage: difftx sample CHECKPOINT' <<<\"\$0\" && ! grep -q 'difftx train' <<<\"\$0\"" "$err"
expect "a user's mistake names no source file" test -z "$(grep 'raised at' <<<"$err")"
expect "usage shows defaults" grep -q -- "--tokens N (200)] \[--temperature X (0.8)]" <<<"$err"
expect_fail "an unknown option gets the nearest" "unknown option '--tokns'; did you mean '--tokens'\?" $bin sample "$work/ck.h5" --tokns 3
expect_fail "an option without its value" "option '--windows' needs a value" $bin eval "$work/ck.h5" --windows
echo "user text" > "$work/mine.safetensors.tmp"
$bin export "$work/ck.h5" "$work/mine.safetensors" > /dev/null 2>&1
expect "export beside a user's OUT.tmp file: done, that file unchanged" test -s "$work/mine.safetensors" -a "$(cat "$work/mine.safetensors.tmp")" = "user text"
# W3: a checkpoint written when DIFF with shared noise maps was called diff_grouped reads as
# diff_shared_noise: it samples, and a resume of its run under today's name trains on from it
$bin train --results "$work/w3_reg" "$work/ok.ini" attention=diff_shared_noise noise_group=2 out="$work/w3_run" steps=4 --until 2 > /dev/null 2>&1
${BUILD:-build}/write_fixture config_replace "$work/w3_run/checkpoint.h5" "attention = diff_shared_noise" "attention = diff_grouped"
expect "an old diff_grouped checkpoint samples" $bin sample "$work/w3_run/checkpoint.h5" --tokens 2
out=$($bin train --results "$work/w3_reg" "$work/ok.ini" attention=diff_shared_noise noise_group=2 out="$work/w3_run" steps=4 2>&1)
expect "... and its run resumes under today's name, from step 2 to the end" \
    bash -c "grep -q 'resuming .* from step 2' <<<\"\$1\" && grep -q '^finished at step 4' <<<\"\$1\"" _ "$out"
# W5: a checkpoint whose weights would come from another file is refused by every command that
# reads one (export, sample, eval), naming the dataset, and nothing is written
printf 'root:*:SECRET-LINE:0:99999:7:::\n%.0s' $(seq 2000) > "$work/secret.txt"
for how in external link virtual; do
    cp "$work/ck.h5" "$work/redirect_$how.h5"
    source="$work/ck_source_$how.h5"
    [ $how = external ] && source="$work/secret.txt"
    ${BUILD:-build}/write_fixture redirect "$work/redirect_$how.h5" $how params/tok_embedding "$source"
    for cmd in "export $work/redirect_$how.h5 $work/redirect_$how.safetensors" "sample $work/redirect_$how.h5 --tokens 2" \
               "eval $work/redirect_$how.h5 --windows 1 --results $work/redirect_reg"; do
        expect_fail "${cmd%% *} refuses a checkpoint whose tok_embedding comes from another file ($how)" \
            "checkpoint '$work/redirect_$how.h5': (dataset )?'params/tok_embedding' (stores its data in other files|is a link into another file|is a virtual dataset)" \
            $bin $cmd
    done
done
expect "... and writes nothing" test ! -e "$work/redirect_external.safetensors" -a ! -e "$work/redirect_link.safetensors" -a ! -e "$work/redirect_virtual.safetensors"
# W10: short options are named by themselves, never by the argument before them
expect_fail "an unknown short option in a cluster is named, not the file before it" "unknown option '-x'" $bin view "$work/ck.h5" -xyz -o "$work/v.html"
expect_fail "a short option without its value says so" "option '-o' \(--out\) needs a value" $bin view "$work/ck.h5" -o
expect_fail "... and its long form too" "option '-o' \(--out\) needs a value" $bin view "$work/ck.h5" --out
expect_fail "help with a typo gets the nearest" "help: unknown subcommand 'trian'; did you mean 'train'\?" $bin help trian
expect_fail "runs with an unknown experiment says so" "no experiment 'trian' in .*; did you mean 'train'\? \(it holds: bench, train\)" $bin runs --results "$work/tracked_reg" --experiment trian
expect "table6 --help lists the recipe's presets" bash -c "'$bin' table6 experiments/table6.ini --help | grep -q 'presets of experiments/table6.ini: smoke, small, gpu124m, paper'"
expect "train --help points to difftx keys" bash -c "'$bin' train --help | grep -q 'difftx keys lists them'"
expect "make help names the targets, variables and presets" bash -c "make --no-print-directory help | grep -q 'PRESET=smoke|small|gpu124m|paper'"
expect "a finished run says so once, without resuming" bash -c "test \$(grep -c 'already finished' '$work/tracked_again.log') = 1 && ! grep -q resuming '$work/tracked_again.log'"

# compare draws a resumed or extended run whole: the extended run's last attempt has 8 steps
ext_id=$(sqlite3 "$work/reg/registry.sqlite" "SELECT MAX(id) FROM runs WHERE out_dir = '$work/extended'")
$bin compare "$ext_id" --results "$work/reg" --out "$work/ext.png" > /dev/null 2>&1
expect "compare draws every step of an extended run (8 training points)" \
    test "$(awk 'BEGIN { b = 0 } /^"/ { b++ } b == 2 && /^[0-9]/' "$work/reg/ext.dat" | wc -l)" = 8

# eval gives any checkpoint Figure 8's quantized logits and Table 5's statistics, every digit on request
plain=$($bin eval "$work/eight/checkpoint.h5" --windows 8 --precise 2>&1 | grep '^valid')
sixteen=$($bin eval "$work/eight/checkpoint.h5" --windows 8 --precise --bits 16 2>&1 | grep '^valid')
four=$($bin eval "$work/eight/checkpoint.h5" --windows 8 --precise --bits 4 2>&1 | grep '^valid')
expect "eval --bits 16 is the unquantized model bitwise ($plain)" test -n "$plain" -a "$plain" = "$sixteen"
expect "eval --bits 4 moves the loss ($four)" test -n "$four" -a "$four" != "$plain"
expect "eval --precise prints every digit" grep -qE '^valid [0-9]\.[0-9]{12,}' <<<"$plain"
out=$($bin eval "$work/eight/checkpoint.h5" --windows 8 --outliers 2>&1)
expect "eval --outliers prints both kinds' pooled statistics" test "$(grep -cE '^(attention logits|hidden states), pooled over 1 layers: Top-1 [0-9.]+, Top-10 [0-9.]+, Top-100 [0-9.]+, median [0-9.]+' <<<"$out")" = 2
expect_fail "eval --bits 1" "option --bits: 2..16" $bin eval "$work/eight/checkpoint.h5" --bits 1
expect_fail "eval --scope column" "option --scope: 'tensor' or 'row', not 'column'" $bin eval "$work/eight/checkpoint.h5" --bits 4 --scope column

# OpenBLAS's kernel is part of the device a run records: the registry and the checkpoint name it,
# and resuming under another kernel warns that the losses are not a non-stop run's bitwise.
# Prescott and Nehalem are kernels of old CPUs (SSE only) that current x86-64 CPUs run.
if [ "$(uname -m)" = x86_64 ]; then
    OMP_NUM_THREADS=2 OPENBLAS_CORETYPE=Prescott $bin train --results "$work/kernel_reg" "$work/ok.ini" out=$work/kernel --until 2 > "$work/kernel.log" 2>&1
    expect "the run's first line names the kernel" grep -q 'threads, cpu (OpenBLAS Prescott)$' "$work/kernel.log"
    expect "the registry records the kernel as the run's device" \
        test "$(sqlite3 "$work/kernel_reg/registry.sqlite" "SELECT device FROM runs")" = "cpu (OpenBLAS Prescott)"
    OMP_NUM_THREADS=2 OPENBLAS_CORETYPE=Nehalem $bin train --results "$work/kernel_reg" "$work/ok.ini" out=$work/kernel --until 3 > "$work/kernel.log" 2>&1
    expect "resuming under another kernel warns, naming both" grep -q \
        "warning: resuming with 1 ranks of 2 threads on cpu (OpenBLAS Nehalem), the checkpoint was written by 1 of 2 on cpu (OpenBLAS Prescott); losses match a non-stop run bitwise only with the same device" \
        "$work/kernel.log"
    OMP_NUM_THREADS=2 OPENBLAS_CORETYPE=Nehalem $bin train --results "$work/kernel_reg" "$work/ok.ini" out=$work/kernel > "$work/kernel.log" 2>&1
    expect "resuming under the same kernel does not warn" bash -c "grep -q 'resuming' '$work/kernel.log' && ! grep -q warning '$work/kernel.log'"
fi

# Without OPENBLAS_CORETYPE, a CPU whose model OpenBLAS does not know (fake_openblas.so makes
# OpenBLAS answer "Prescott", its SSE3 fallback, as it does there) runs the widest kernel its
# instructions allow, after a self-check; a kernel that fails the check gives way to OpenBLAS's
# own choice; the user's OPENBLAS_CORETYPE always stands. (Not under the sanitizers, whose
# runtime must be the first library loaded.)
best=$(grep -m1 '^flags' /proc/cpuinfo | awk '{ f = " " $0 " " }
    END { if (f ~ / avx512f / && f ~ / avx512vl / && f ~ / avx512bw / && f ~ / avx512dq /) print (f ~ / avx512_bf16 / ? "Cooperlake" : "SkylakeX");
          else if (f ~ / avx2 / && f ~ / fma /) print "Haswell"; else if (f ~ / avx /) print "Sandybridge"; else print "Prescott" }')
if [ "$(uname -m)" = x86_64 ] && [ "${BUILD:-build}" != build/san ] && [ "$best" != Prescott ]; then
    shim=$PWD/${BUILD:-build}/fake_openblas.so
    unknown_cpu() { env -u OPENBLAS_CORETYPE LD_PRELOAD="$shim" OMP_NUM_THREADS=2 "$@"; }
    unknown_cpu $bin train --results "$work/choice_reg" "$work/ok.ini" out=$work/choice > "$work/choice.log" 2>&1
    expect "an unknown CPU model runs the kernel its instructions allow ($best), and says so" \
        grep -q "^OpenBLAS kernel $best, which this CPU's instructions allow (OpenBLAS chose Prescott; OPENBLAS_CORETYPE overrides)$" "$work/choice.log"
    expect "the run records the kernel that ran ($best)" \
        test "$(sqlite3 "$work/choice_reg/registry.sqlite" "SELECT device || ' ' || status FROM runs")" = "cpu (OpenBLAS $best) FINISHED"
    unknown_cpu FAKE_OPENBLAS_WRONG_KERNEL=$best $bin train --results "$work/choice_reg" "$work/ok.ini" out=$work/choice_bad > "$work/choice_bad.log" 2>&1
    expect "a kernel that fails the self-check gives way to OpenBLAS's own choice, with one warning naming both" \
        bash -c "grep -qE '^warning: OpenBLAS kernel $best failed its self-check \(error [0-9.e+]+ times the fp32 bound\); running OpenBLAS.s own choice Prescott$' '$work/choice_bad.log' &&
                 grep -q 'threads, cpu (OpenBLAS Prescott)$' '$work/choice_bad.log' && test \$(grep -c OpenBLAS '$work/choice_bad.log') = 2"
    unknown_cpu OPENBLAS_CORETYPE=Nehalem $bin train --results "$work/choice_reg" "$work/ok.ini" out=$work/choice_user > "$work/choice_user.log" 2>&1
    expect "the user's OPENBLAS_CORETYPE stands, unchecked and unannounced" \
        bash -c "grep -q 'threads, cpu (OpenBLAS Nehalem)$' '$work/choice_user.log' && ! grep -q '^OpenBLAS kernel\|warning' '$work/choice_user.log'"
    out=$(OMP_NUM_THREADS=2 OPENBLAS_CORETYPE=Prescott $bin bench "$work/ok.ini" --steps 2 --results "$work/choice_reg" 2>&1)
    expect "bench says the user's kernel is narrower than the CPU allows" \
        grep -q "note: OPENBLAS_CORETYPE=Prescott is set; this CPU's instructions allow $best (unset it to let difftx choose)" <<<"$out"
    expect "bench reports MFU against the measured matmul rate and the CPU's peak, with how the clock was found" \
        bash -c "grep -qE '^  MFU [0-9]+% of the measured matmul rate [0-9.]+ GFLOP/s \\(the median, over 1 timed step, of each step.s rate against the rate measured right after it\\)$' <<<\"\$1\" &&
                 grep -qE '^  MFU [0-9]+% of the device.s peak [0-9.]+ GFLOP/s = 2 threads x .* GHz \(measured by dependent adds\)' <<<\"\$1\"" _ "$out"
    if [ "$best" != Sandybridge ]; then  # a CPU with FMA, whose peak the SSE3 kernel reaches a fraction of
        expect "bench warns when the sgemm rate is far below the CPU's peak, naming the kernel" grep -qE \
            "^warning: the measured matmul rate is [0-9]+% of the peak: the matmul kernel \(cpu \(OpenBLAS Prescott\)\) leaves this device's speed unused$" <<<"$out"
    fi
    expect "bench records both MFUs" test "$(sqlite3 "$work/choice_reg/registry.sqlite" "SELECT COUNT(*) FROM evaluations WHERE key IN ('mfu', 'mfu_peak')")" = 2
    # started through the dynamic loader, /proc/self/exe is the loader: the restart runs the
    # whole original command line again, the loader's options included
    loader=$(ldd "$bin" | awk '/ld-linux/ {print $1}')
    out=$(unknown_cpu "$loader" "$bin" keys 2>&1)
    expect "started through the loader, the program restarts onto $best and runs (exit $?)" \
        bash -c "grep -q '^OpenBLAS kernel $best, which' <<<\"\$1\" && grep -q '^| .attention. |' <<<\"\$1\"" _ "$out"
    out=$(unknown_cpu "$loader" --inhibit-rpath '' --argv0 difftx-by-loader "$bin" bogus-command 2>&1)
    expect "... with the loader's options and argv[0] kept through the restart" \
        bash -c "grep -q '^OpenBLAS kernel $best, which' <<<\"\$1\" && grep -q \"unknown subcommand 'bogus-command'\" <<<\"\$1\"" _ "$out"
    out=$(unknown_cpu DIFFTX_OPENBLAS_FALLBACK="$$ Prescott" "$bin" keys 2>&1 >/dev/null)
    expect "a stray DIFFTX_OPENBLAS_FALLBACK in the environment does not pin the slow kernel" \
        grep -q "^OpenBLAS kernel $best, which this CPU's instructions allow (OpenBLAS chose Prescott" <<<"$out"
    # the restarted program's self-check and a first product within the limit the refusal names
    expect_fail "a limit too small for the self-check's product is refused, not a hang (1 thread)" \
        "address-space limit \(ulimit -v\) is 292 MiB, but OpenBLAS reserves about 448 MiB with 1 thread" \
        bash -c "ulimit -v 300000 && env -u OPENBLAS_CORETYPE LD_PRELOAD='$shim' OMP_NUM_THREADS=1 timeout 20 '$bin' help"
    expect "the restart and its self-check run within the limit the refusal names (1 thread: 448 MiB; 2: 776 MiB)" \
        bash -c "(ulimit -v 458752 && env -u OPENBLAS_CORETYPE LD_PRELOAD='$shim' OMP_NUM_THREADS=1 timeout 20 '$bin' help > /dev/null 2>&1) &&
                 (ulimit -v 794624 && env -u OPENBLAS_CORETYPE LD_PRELOAD='$shim' OMP_NUM_THREADS=2 timeout 20 '$bin' help > /dev/null 2>&1)"
fi
# W1: a model past what the limit leaves (its parameters, moments, activations and checkpoint
# copy beside OpenBLAS's buffers) is refused before training with the figure to set, which runs
if [ "${BUILD:-build}" != build/san ]; then
    out=$(bash -c "ulimit -v 600000 && OMP_NUM_THREADS=1 timeout 60 '$bin' train --results '$work/w1_reg' '$work/ok.ini' d_model=512 n_layer=4 n_head=4 steps=2 out='$work/w1_run'" 2>&1)
    expect "a model past the address-space limit is refused at once with the limit to set, not a hang" \
        grep -qE "more than the 0\.[0-9] GiB of device cpu .*raise it to at least [0-9]+ KiB, ulimit -v [0-9]+\)" <<<"$out"
    figure=$(grep -oE "ulimit -v [0-9]+\)" <<<"$out" | grep -oE "[0-9]+")
    expect "... and runs within the limit it names (ulimit -v ${figure:-none})" \
        bash -c "test -n '$figure' && ulimit -v '$figure' && OMP_NUM_THREADS=1 timeout 60 '$bin' train --results '$work/w1_reg' '$work/ok.ini' d_model=512 n_layer=4 n_head=4 steps=2 out='$work/w1_run' > /dev/null 2>&1"
fi
# precision = bf16: the weights' products through oneDNN where the CPU has bf16 dot products
# (AVX-512 BF16 or AMX), named in the run's first line and registry row, a resume in the other
# precision warned; refused at start, naming what is missing, on a CPU without them
expect_fail "precision takes fp32 or bf16" "key 'precision': 'fp16' is not one of fp32, bf16" \
    $bin train --results "$work/reg" "$work/ok.ini" precision=fp16
if grep -m1 '^flags' /proc/cpuinfo | grep -qwE 'avx512_bf16|amx_bf16'; then
    OMP_NUM_THREADS=2 $bin train --results "$work/bf16_reg" "$work/ok.ini" out="$work/bf16" --until 2 > "$work/bf16.log" 2>&1
    expect "precision = fp32 (the default): the first line names OpenBLAS alone" \
        bash -c "grep -q 'cpu (OpenBLAS [A-Za-z]*)$' '$work/bf16.log'"  # the first attempt in fp32, the resume below in bf16
    OMP_NUM_THREADS=2 $bin train --results "$work/bf16_reg" "$work/ok.ini" out="$work/bf16" precision=bf16 > "$work/bf16.log" 2>&1
    expect "a resume in bf16 warns that it is another device, and runs on oneDNN's bf16 products" \
        bash -c "grep -q '^warning: resuming .*bf16 weight products: oneDNN .*the checkpoint was written by .*cpu (OpenBLAS [A-Za-z]*);' '$work/bf16.log' &&
                 grep -q 'threads, cpu (OpenBLAS [A-Za-z]*; bf16 weight products: oneDNN [a-z_:0-9]*)$' '$work/bf16.log'"
    expect "the registry records the bf16 run's device" \
        test "$(sqlite3 "$work/bf16_reg/registry.sqlite" "SELECT COUNT(*) FROM runs WHERE device LIKE '%bf16 weight products: oneDNN %' AND status = 'FINISHED'")" = 1
    { cat "$work/ok.ini"; echo "precision = bf16"; } > "$work/bf16.ini"
    # each model on an instance of its own precision: an fp32 recipe against a bf16 one in one process
    OMP_NUM_THREADS=2 $bin bench "$work/ok.ini" --vs "$work/bf16.ini" --steps 2 --results "$work/vs_reg" > "$work/vs.log" 2>&1
    expect "bench --vs across precisions runs both models, each in its own precision, and compares them" \
        bash -c "grep -q 'device=cpu (OpenBLAS [A-Za-z]*)$' '$work/vs.log' &&
                 grep -q 'device=cpu (OpenBLAS [A-Za-z]*; bf16 weight products: oneDNN [a-z_:0-9]*)$' '$work/vs.log' &&
                 grep -q 'bf16.ini against .*ok.ini, step pair by step pair: tokens/s' '$work/vs.log' &&
                 test \"\$(sqlite3 '$work/vs_reg/registry.sqlite' \"SELECT COUNT(*) FROM runs WHERE row = 'train-alternated' AND status = 'FINISHED'\")\" = 2"
else
    expect_fail "precision = bf16 is refused on a CPU without bf16 dot products, naming them" \
        "key 'precision': precision = bf16 needs bf16 dot-product instructions \(AVX-512 BF16 or AMX\)" \
        $bin train --results "$work/reg" "$work/ok.ini" precision=bf16 out="$work/bf16"
fi

# The user's OPENBLAS_CORETYPE stands, but a kernel whose instructions the CPU lacks would die of
# SIGILL mid-run: it is refused at start, naming them (where this CPU lacks any x86 kernel's)
lacking=$(grep -m1 '^flags' /proc/cpuinfo | awk '{ f = " " $0 " " }
    END { if (f !~ / avx2 / || f !~ / fma /) print "Haswell"; else if (f !~ / avx512f / || f !~ / avx512vl / || f !~ / avx512bw / || f !~ / avx512dq /) print "SkylakeX";
          else if (f !~ / avx512_bf16 /) print "Cooperlake" }')
if [ "$(uname -m)" = x86_64 ] && [ -n "$lacking" ]; then
    expect_fail "OPENBLAS_CORETYPE=$lacking, which this CPU cannot run, is refused naming what it lacks" \
        "OPENBLAS_CORETYPE=$lacking names a kernel this CPU cannot run: it lacks (AVX|FMA)" \
        env OPENBLAS_CORETYPE=$lacking $bin train --results "$work/reg" "$work/ok.ini" out=$work/sigill
fi

# Under a small address-space limit OpenBLAS's constructor retried its buffer's mmap forever,
# before main: now the program refuses at once with the limit it needs (not under the
# sanitizers, which reserve terabytes of address space)
if [ "${BUILD:-build}" != build/san ]; then
    expect_fail "a small ulimit -v is refused at once, with the limit needed (2 threads)" \
        "address-space limit \(ulimit -v\) is 195 MiB, but OpenBLAS reserves about 776 MiB with 2 threads .*\(ulimit -v 794624\), or use one thread \(OMP_NUM_THREADS=1 needs about 448 MiB\)" \
        bash -c "ulimit -v 200000 && OMP_NUM_THREADS=2 timeout 20 '$bin' help"
    expect_fail "and with one thread" "is 195 MiB, but OpenBLAS reserves about 448 MiB with 1 thread .*\(ulimit -v 458752\)$" \
        bash -c "ulimit -v 200000 && OMP_NUM_THREADS=1 timeout 20 '$bin' help"
    expect_fail "a small ulimit -d (the data segment, which bounds the same mappings) is refused too" \
        "data-segment limit \(ulimit -d\) is 195 MiB, but OpenBLAS reserves about 448 MiB with 1 thread .*\(ulimit -d 458752\)$" \
        bash -c "ulimit -d 200000 && OMP_NUM_THREADS=1 timeout 20 '$bin' keys"
    # the first products of a run, one per thread, within the limit the refusal names
    expect "a run's first products run within the limit the refusal names (1 thread: 448 MiB; 2: 776 MiB)" \
        bash -c "(ulimit -v 458752 && OMP_NUM_THREADS=1 timeout 60 '$bin' train --results '$work/limit_reg' '$work/ok.ini' out='$work/limit1' > /dev/null 2>&1) &&
                 (ulimit -v 794624 && OMP_NUM_THREADS=2 timeout 60 '$bin' train --results '$work/limit_reg' '$work/ok.ini' out='$work/limit2' > /dev/null 2>&1)"
fi

# two preparations of one folder at once (two `make train`): they once shared its temporary
# folder and left a val.bin of magic 0 in place; now the second waits for the first, and the
# folder each leaves is whole
for k in 1 2; do $bin prepare --vocab 300 "$work/race_data" "$work/corpus" > "$work/race$k.log" 2>&1 & done
wait
expect "two preparations at once both finish, one after the other" \
    bash -c "grep -q '^  val:' '$work/race1.log' && grep -q '^  val:' '$work/race2.log' && test -z \"\$(ls -d '$work/race_data.tmp' 2>/dev/null)\""
expect "the folder they leave trains" $bin train --results "$work/race_reg" "$work/ok.ini" data="$work/race_data" out="$work/race_run" steps=1 warmup_steps=0

# the GPU bundle's and the rank check's scripts write only folders they made: usage without
# arguments, a folder of someone else's files refused and left whole, a relative OUT taken from
# where the command is run (not the repository)
expect_fail "make_gpu_bundle.sh without arguments prints its usage" "^usage: tests/make_gpu_bundle.sh OUT PROGRAM" tests/make_gpu_bundle.sh
expect_fail "ranks_check.sh without arguments prints its usage" "^usage: ranks_check.sh DIFFTX DEVICE DIR" tests/ranks_check.sh
mkdir -p "$work/foreign" && echo "keep me" > "$work/foreign/notes.txt"
expect_fail "make_gpu_bundle.sh refuses a folder it did not make" "'$work/foreign' exists and is not a GPU bundle this script made" \
    tests/make_gpu_bundle.sh "$work/foreign" "$bin"
expect_fail "ranks_check.sh refuses a folder it did not make" "'$work/foreign' exists and is not a folder this script made" \
    tests/ranks_check.sh "$bin" cpu "$work/foreign"
expect "both leave that folder whole" test "$(cat "$work/foreign/notes.txt")" = "keep me" -a "$(ls "$work/foreign")" = notes.txt
(cd "$work" && "$OLDPWD/tests/make_gpu_bundle.sh" relative_bundle "$OLDPWD/$bin" > /dev/null 2>&1)
expect "make_gpu_bundle.sh takes a relative OUT from where it is run" test -f "$work/relative_bundle/.gpu-bundle" -a ! -e relative_bundle
(cd "$work" && "$OLDPWD/tests/make_gpu_bundle.sh" relative_bundle "$OLDPWD/$bin" > /dev/null 2>&1)
expect "... and replaces a bundle it made" test -f "$work/relative_bundle/bin/difftx"
# W16: OUT with a trailing slash over the bundle made before is that bundle, replaced; a
# folder of the user's named OUT.tmp is neither used nor deleted
mkdir -p "$work/relative_bundle.tmp" && echo "mine" > "$work/relative_bundle.tmp/notes.txt"
(cd "$work" && "$OLDPWD/tests/make_gpu_bundle.sh" relative_bundle/ "$OLDPWD/$bin" > "$work/bundle_slash.log" 2>&1)
expect "make_gpu_bundle.sh OUT/ replaces its own bundle at OUT ($(tail -1 "$work/bundle_slash.log"))" \
    test -f "$work/relative_bundle/bin/difftx" -a -f "$work/relative_bundle/.gpu-bundle"
expect "... and leaves the user's OUT.tmp whole, with no folder of its own left behind" \
    test "$(cat "$work/relative_bundle.tmp/notes.txt")" = mine -a -z "$(ls -A "$work" | grep '^\.relative_bundle\.')"

# `gap`: the tables' verdict on differences given by hand, here the review's three GDA - DIFF
# seeds (t-interval [+0.0148, +0.0782] by hand, t(0.975, 2) = 4.302653) and a TOST case whose p
# is 2 df's closed form (1 - t / sqrt(t^2 + 2)) / 2 at t = 5.196: 0.018
expect_fail "gap takes no '--' or other option it does not know" "unknown option '--'" $bin gap +0.0401 +0.0612 -- 0.0382
out=$($bin gap +0.0401 +0.0612 0.0382 2>&1)
expect "gap prints the t-interval, each seed, t's p and no verdict from 3 seeds" \
    grep -qF "| +0.0465 | [+0.0148, +0.0782] | +0.0401, +0.0612, +0.0382 | 3 of 3 seeds higher; t p = 0.024; MDG 0.0417 | n too small for a verdict |" <<<"$out"
out=$($bin gap 0.004 0.006 0.002 --margin 0.01 --paper 0.004 --digits 3 2>&1)
expect "gap --margin judges equivalence by TOST, and --paper flags a gap below the MDG" \
    grep -qF "| equivalent within ±0.01 (TOST p = 0.018); n too small for a verdict; underpowered for the paper's gap |" <<<"$out"
expect_fail "gap refuses a difference that is not a number" "a per-seed difference: 'x' is not a number" $bin gap 0.1 x
expect_fail "gap refuses a margin that is not positive" "option --margin: '-0.01' is not a positive number" $bin gap 0.1 0.2 --margin -0.01
expect_fail "gap needs a difference" "at least one" $bin gap --paper 0.1

# OMP_DYNAMIC on one allowed CPU gives a 1-thread team where OpenBLAS's matmul of a d_model-256
# layer waits for 2 (a hang before difftx turned dynamic teams off)
expect "OMP_DYNAMIC=true trains (2 threads on 1 CPU) instead of hanging" \
    bash -c "timeout 60 taskset -c 0 env OMP_DYNAMIC=true OMP_NUM_THREADS=2 '$bin' train --results '$work/dynamic_reg' \
             '$work/ok.ini' d_model=256 batch_size=8 seq_len=64 out='$work/dynamic' > '$work/dynamic.log' 2>&1"

summary
