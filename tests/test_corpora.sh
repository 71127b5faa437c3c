#!/usr/bin/env bash
# Corpora at scale through the command line: malformed JSON lines named and counted, binary
# files refused, memory bounded while preparing a corpus larger than the test's limit, training
# on several shards and on llm.c's GPT-2 shards, sampling them with and without llm.c's token
# table, and the needle tasks refusing data they cannot encode.
set -u
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/difftx
work=$PWD/build/test_corpora_sh
rm -rf "$work" && mkdir -p "$work/json" "$work/bin"
source tests/harness.sh

# 1. JSON lines: two malformed lines skipped, named by file and line, and counted
words="ship harbour dawn sailed past the a of record entry whale captain sea island storm"
perl -e 'my @w = split / /, $ARGV[0]; srand(3); for my $d (0..99) { print "{\"text\": \"", join(" ", map { $w[int(rand(@w))] } 1..40), " $d.\"}\n" }' "$words" > "$work/json/a.jsonl"
sed -i '5s/.*/{"text": "cut short/; 9s/.*/{"title": "no text"}/' "$work/json/a.jsonl"
$bin prepare --vocab 300 "$work/json_data" "$work/json" > "$work/json.log" 2>&1
expect "JSON lines with malformed ones prepare" test $? -eq 0
expect "a malformed line is named by file and line" grep -q "warning: $work/json/a.jsonl:5: skipped: not JSON" "$work/json.log"
expect "a line without text is named" grep -q "warning: $work/json/a.jsonl:9: skipped: no string field \"text\"" "$work/json.log"
expect "the skipped lines are counted" grep -q "skipped 2 malformed JSON lines in all" "$work/json.log"
expect "98 documents kept: 93 training, 5 validation" bash -c "grep -q '  train: 93 documents' '$work/json.log' && grep -q '  val: 5 documents' '$work/json.log'"
expect "progress names bytes, documents and speed" grep -qE "^prepare: encoding [0-9.]+ of [0-9.]+ MB \(100%\), 100 documents, [0-9.]+ MB/s, took" "$work/json.log"

# 2. binary input is refused, naming the file
cp "$work/json/a.jsonl" "$work/bin/a.txt" && gzip -c "$work/json/a.jsonl" > "$work/bin/b.txt.gz"
expect_fail "a compressed file is refused" "corpus input '$work/bin/b.txt.gz' looks binary" $bin prepare --vocab 300 "$work/bin_data" "$work/bin"
expect "nothing is left half-written" test ! -e "$work/bin_data"

# 2b. inputs that cannot give a usable folder are refused, naming what is missing; duplicate
#     documents are kept and named, the twins across the train/validation split counted
mkdir -p "$work/empty" "$work/tiny" "$work/twins"
: > "$work/empty/a.txt" && : > "$work/empty/b.txt"
expect_fail "empty files are refused" "the corpus holds no text: its 2 files are empty" $bin prepare --vocab 300 "$work/empty_data" "$work/empty"
printf 'hi\n' > "$work/tiny/a.txt" && : > "$work/tiny/b.txt"
$bin prepare --vocab 300 "$work/tiny_data" "$work/tiny" > "$work/tiny.log" 2>&1
expect "a tokenizer short of the ids asked is said so" grep -q "^warning: the tokenizer learned 257 of the 300 ids asked (--vocab): no pair of tokens repeats in its sample (3 bytes of training text)" "$work/tiny.log"
expect "and a split of one token is refused" grep -q "^error: the corpus left the validation split with 1 token, and a model needs at least an input and its target" "$work/tiny.log"
expect "the refusals write nothing" test ! -e "$work/empty_data" -a ! -e "$work/tiny_data" -a ! -e "$work/empty_data.tmp" -a ! -e "$work/tiny_data.tmp"
for d in 0 1 2 3 4 5; do
    for i in $(seq 1 30); do echo "Document $d has line $i of a small corpus."; done > "$work/twins/doc$d.txt"
done
cp "$work/twins/doc1.txt" "$work/twins/doc7.txt" && cp "$work/twins/doc5.txt" "$work/twins/doc9.txt"  # doc9 is the validation document
$bin prepare --vocab 300 "$work/twins_data" "$work/twins" > "$work/twins.log" 2>&1
expect "duplicates prepare" test $? -eq 0 -a -s "$work/twins_data/val.bin"
expect "a duplicate document is named" grep -qx "warning: $work/twins/doc7.txt: the same text as an earlier document" "$work/twins.log"
expect "a twin across the split says so" grep -qx "warning: $work/twins/doc9.txt: the same text as an earlier document of the training split, while this one is in validation" "$work/twins.log"
expect "and they are counted" grep -q "^warning: 2 documents repeat an earlier one's text (1 across the training and validation splits)" "$work/twins.log"
expect "no duplicate is warned about in a corpus without" bash -c "! grep -q 'the same text' '$work/json.log'"

# 3. memory stays bounded: a 150 MB corpus prepared in less than 100 MB (peak resident, measured by the kernel)
mkdir -p "$work/big"
perl -e 'my @w = split / /, $ARGV[0]; srand(5); for my $d (0..419999) { print "{\"text\": \"", join(" ", map { $w[int(rand(@w))] } 1..60), " $d.\"}\n" }' "$words" > "$work/big/web.jsonl"
bytes=$(stat -c %s "$work/big/web.jsonl")
/usr/bin/time -f "%M" -o "$work/big.rss" $bin prepare --vocab 1000 --sample-mb 4 --shard-tokens 20000000 "$work/big_data" "$work/big" > "$work/big.log" 2>&1
expect "the large corpus prepares" test $? -eq 0
peak_kb=$(tail -1 "$work/big.rss")
echo "   prepared $((bytes / 1000000)) MB of JSON lines with a peak of $((peak_kb / 1024)) MiB resident; $(grep -o '[0-9.]* MB/s, took .*' "$work/big.log" | tail -1)"
expect "the corpus is larger than the memory limit" test "$bytes" -gt $((100 * 1024 * 1024))
# a sanitizer build's shadow memory makes the bound meaningless (as for test_memory.sh)
[ "${BUILD:-build}" = build/san ] || expect "peak memory under 100 MiB (got $((peak_kb / 1024)) MiB)" test "$peak_kb" -lt $((100 * 1024))
expect "training split in several shards" test -f "$work/big_data/train_000001.bin" -a ! -e "$work/big_data/train.bin"

# 4. training reads every shard of a split
tiny="n_layer=1 d_model=32 n_head=2 head_dim=8 seq_len=32 batch_size=4 steps=6 eval_every=3 eval_batches=2 warmup_steps=1 log_every=3"
$bin train --results "$work/reg" experiments/default.ini $tiny data=$work/big_data out=$work/run_big > "$work/run_big.log" 2>&1
expect "trains on several shards" grep -qP "^val\t6\t" "$work/run_big/log.tsv"

# 5. llm.c's shards train as they are; sampling decodes with gpt2_tokenizer.bin when present
mkdir -p "$work/llmc"
shard() {  # shard PATH N: an llm.c shard of N GPT-2 ids
    perl -e 'my ($p, $n) = @ARGV; open(my $f, ">", $p) or die; binmode $f; my @h = (20240520, 1, $n, (0) x 253);
        print $f pack("l<256", @h); srand(7); print $f pack("S<*", map { $_ % 64 == 0 ? 50256 : int(rand(50257)) } 0..$n-1)' "$1" "$2"
}
shard "$work/llmc/mini_train_000001.bin" 20000
shard "$work/llmc/mini_train_000002.bin" 9000
shard "$work/llmc/mini_val_000000.bin" 3000
$bin train --results "$work/reg" experiments/default.ini $tiny data=$work/llmc out=$work/run_llmc > "$work/run_llmc.log" 2>&1
expect "trains on llm.c shards" grep -qP "^val\t6\t" "$work/run_llmc/log.tsv"
# embedding and LM head alone hold 2 x 50257 x 32 = 3,216,448 parameters at GPT-2's vocabulary
params=$(sed -nE 's/^model: .*, ([0-9]+) parameters;.*/\1/p' "$work/run_llmc.log")
expect "with GPT-2's vocabulary ($params parameters)" test "${params:-0}" -gt 3216448
mkdir -p "$work/empty"
expect_fail "a folder with neither tokenizer.bin nor shards is named" "'$work/empty' has neither tokenizer.bin nor llm.c's train shards" \
    $bin train --results "$work/reg" experiments/default.ini $tiny data=$work/empty out=$work/run_empty
expect_fail "sampling GPT-2 ids without llm.c's token table says what is missing" "needs llm.c's gpt2_tokenizer.bin" \
    $bin sample "$work/run_llmc/checkpoint.h5" --tokens 5
perl -e 'open(my $f, ">", $ARGV[0]) or die; binmode $f; print $f pack("L<256", 20240328, 2, 50257, 50256, (0) x 252);
    for my $i (0..50256) { my $t = $i == 50256 ? "<|endoftext|>" : "<$i>"; print $f pack("C", length $t), $t }' "$work/llmc/gpt2_tokenizer.bin"
out=$($bin sample "$work/run_llmc/checkpoint.h5" --tokens 5 --temperature 0 2>&1)
expect "sampling decodes GPT-2 ids with gpt2_tokenizer.bin" grep -qE "^(<[0-9]+>)+$" <<<"$out"
expect_fail "a prompt needs this project's tokenizer" "encoding text needs this project's tokenizer" \
    $bin sample "$work/run_llmc/checkpoint.h5" --tokens 5 --prompt "The ship"
sed -e "s#^corpus = .*#corpus = $work/llmc#" -e "s#^data = .*#data = $work/needle_data#" experiments/needle.ini > "$work/needle.ini"
expect_fail "the needle tasks say they need this project's tokenizer" "need this project's tokenizer, but '$work/llmc' holds llm.c's GPT-2 shards" \
    $bin needle "$work/needle.ini" --preset smoke --task table2 --results "$work/needle_results" --plots "$work/needle_plots"

# 6. broken llm.c shards are named
perl -e 'open(my $f, ">", $ARGV[0]) or die; binmode $f; print $f pack("l<256", 20240520, 1, 100, (0) x 253), pack("S<*", (50257) x 100)' "$work/llmc/mini_train_000003.bin"
expect_fail "an id outside GPT-2's vocabulary is named" "mini_train_000003.bin': token 0 has id 50257 outside the vocabulary" \
    $bin train --results "$work/reg" experiments/default.ini $tiny data=$work/llmc out=$work/run_bad
head -c 1500 "$work/llmc/mini_train_000001.bin" > "$work/llmc/mini_train_000003.bin"
expect_fail "a shard cut short is named" "mini_train_000003.bin' has 1500 bytes, but its header's 20000 tokens make 41024" \
    $bin train --results "$work/reg" experiments/default.ini $tiny data=$work/llmc out=$work/run_bad
summary
