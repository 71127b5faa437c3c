#!/usr/bin/env bash
# `table2`, `fig5` and `table3` on the smoke preset end to end: tables beside the paper's numbers,
# the N = 6 cells equal to the database's per-query outcomes, allocations summing to 1 for every
# episode, the per-head noise metrics (7 per head in the registry, their mean over heads the
# episodes' mean share, no negative mass for softmax, over sum |w| a softmax head's shares and
# every head within [-1, 1]) with their table and figure, the maps file's
# layout and map = A1 − λ·A2 on a stored entry, `difftx attn` rendering PNGs from the file alone,
# errors for a missing sample, a bad head, a non-maps file, a bad task or preset, a context too
# short for the needles, a training mix cut for another seq_len, a missing copy stage; later tasks
# train nothing; each row's copy stage recorded and its checkpoint starting the needle stage; a
# `kill -9` during a copy stage leaves it unfinished and the rerun resumes it (KILLED, then
# FINISHED) with a log and table equal to a non-stop run's; `difftx attn` from another working
# directory, and a failed render leaving no temporary folder. `fig8`: 16 bits once and 8/6/4 bits
# per tensor and per row for both models, its unquantized answers equal to Table 2's on the same
# episodes, its metrics in the registry and the table, and its verdicts (what quantization costs
# DIFF minus what it costs the Transformer, 2 scales × 3 widths × 2 settings; "n/a (neither
# retrieves)" where no model answers right, as in Table 2 and Figure 5), the 4-bit N = 1 gap equal
# to the difference of differences of the registry's answers. `fig5`: one paired verdict per context
# length. Table 2, Figure 5 and Table 3 read each row not in the paper against `diff` (its `against`
# key; Table 3's dint-minus-diff answer gap equal to the seeds' mean paired difference of the
# registry's episodes), and an `against` naming no row is refused. `table5`: trains only Table 6's
# `transformer` and `diff` rows (smoke), writes both kinds for four models beside the paper's rows,
# Top-1 equal to the registry's, one HDF5 file per model with the documented shapes and the exact
# count of causal logits, a PNG, and a rerun that trains nothing. With `--seeds 2` (a results folder
# of its own): both stages of every row trained for seeds 2024 and 2025 in their own run folders;
# Table 2 stating its two seeds and listing each seed's accuracies (with one seed, the evaluation's
# interval and no verdict); Table 3 per depth and over depths with the t-interval, both seeds'
# differences and no verdict from two, its dint-minus-diff answer gap, interval and per-seed values
# recomputed from the registry's episodes; Figure 1's DIFF answer share equal to the mean ± sample
# std of the registry's per-seed episode means; `table5 --seeds 2` writing fourteen statistics files
# and a Top-1 equal to the mean ± std of the registry's two values, and its Top-1 gap of `diff` over
# `transformer` the mean of the two seeds' paired differences with their Student-t interval (one
# seed: no interval, no verdict). A tiny corpus holding the needles' words is made here.
set -u
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/difftx
work=$PWD/build/test_needle_sh
rm -rf "$work" && mkdir -p "$work/corpus"
source tests/harness.sh
# a one-seed gap's cells (gap, interval, per seed, seeds, verdict; studies/verdict.h): the
# evaluation's interval and no verdict, or no test at all where neither row retrieves
one_seed='[+-][0-9.]+ \| (\[[-+0-9.]+, [-+0-9.]+\] \(evaluation noise only\) \| [-+0-9.]+ \| 1 seed \| no verdict \(one seed\)|- \| - \| - \| n/a \(neither retrieves\)) \|'
sql() { sqlite3 "$work/results/registry.sqlite" "$1"; }
is_png() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = "211PNG" ]; }

for d in $(seq -w 0 39); do
    for i in $(seq 1 40); do echo "Record $d, entry $i: the special magic number $((i * 7919 % 10000)) is what the city of harbour $((10#$d % 5)) kept. What is the number? It is $i."; done > "$work/corpus/doc$d.txt"
done
$bin prepare --vocab 512 "$work/data" "$work/corpus" >/dev/null || { echo "prepare failed"; exit 1; }
sed "s#^data = \.\./data/needle_smoke#data = $work/mix#; s#^corpus = \.\./data/default#corpus = $work/data#" experiments/needle.ini > "$work/needle.ini"
task() { $bin needle "$work/needle.ini" --preset smoke --task "$1" --results "$work/results" --plots "$work/plots"; }

task table2 > "$work/table2.log" 2>&1
expect "table2 exits 0" test $? -eq 0
expect "training mix made from the corpus" test -s "$work/mix/train.bin"
expect "copy stage data made from the corpus" test -s "$work/mix/copy/train.bin" -a -s "$work/mix/copy/val.bin"
expect "every row trained and FINISHED, each after its copy stage" test "$(sql "SELECT group_concat(row, ' ') FROM (SELECT row FROM runs WHERE status = 'FINISHED' ORDER BY id)")" = "standard_copy standard diff_copy diff gda_copy gda diff_shared_copy diff_shared dint_copy dint"
expect "copy stage: 64-token windows of copy practice at a constant lr" bash -c "sqlite3 '$work/results/registry.sqlite' \"SELECT recipe_text FROM runs WHERE row = 'diff_copy'\" | grep -c '^seq_len = 64\$\|^lr_final = 0.002\$\|^steps = 4\$' | grep -qx 3 &&
    test \"\$(sqlite3 '$work/results/registry.sqlite' \"SELECT data_dir FROM runs WHERE row = 'diff_copy'\")\" = '$work/mix/copy'"
expect "needle run starts from the copy stage's checkpoint" bash -c "sqlite3 '$work/results/registry.sqlite' \"SELECT recipe_text FROM runs WHERE row = 'diff'\" | grep -qx 'init_from = $work/results/needle/smoke/diff_copy/seed2024/checkpoint.h5'"
hash() { sha256sum "$1" | cut -c1-64; }
expect "each stage's training data recorded by its sha256" test "$(sql "SELECT group_concat(ok, ' ') FROM (SELECT r.row || ':' || (a.sha256 = CASE WHEN r.row LIKE '%_copy' THEN '$(hash "$work/mix/copy/train.bin")' ELSE '$(hash "$work/mix/train.bin")' END) AS ok FROM artifacts a JOIN runs r ON r.id = a.run_id WHERE a.kind = 'training_data' ORDER BY a.rowid)")" = "standard_copy:1 standard:1 diff_copy:1 diff:1 gda_copy:1 gda:1 diff_shared_copy:1 diff_shared:1 dint_copy:1 dint:1"
expect "copying check stored with its first-copy baseline" test "$(sql "SELECT COUNT(*) FROM evaluations WHERE key IN ('copy_score', 'copy_score_first') AND value BETWEEN 0 AND 1")" = 10
expect "table2 written" grep -q "| N=1, R=1 | N=2, R=2 | N=4, R=2 | N=6, R=2 |" "$work/results/table2_smoke.md"
expect "paper row beside" grep -q "| paper DIFF | 1.00 | 0.92 | 0.84 | 0.85 |" "$work/results/table2_smoke.md"
# queries per row: 2 samples x 5 depths x (1 + 2 + 2 + 2)
expect "every query stored" test "$(sql "SELECT COUNT(*) FROM episodes WHERE task = 'table2' GROUP BY run_id" | sort -u)" = 70
expect "outcomes are 0/1 with the decoded text" test "$(sql "SELECT COUNT(*) FROM episodes WHERE task = 'table2' AND correct IN (0, 1) AND output IS NOT NULL")" = 350
expect "answers are evaluation numbers of 7 digits" test "$(sql "SELECT COUNT(*) FROM episodes WHERE number < 1000000 OR number > 9999999")" = 0
for row in standard diff; do
    acc=$(sql "SELECT printf('%.2f', AVG(e.correct)) FROM episodes e JOIN runs r ON r.id = e.run_id WHERE r.row = '$row' AND e.task = 'table2' AND e.n_needles = 6")
    expect "$row: N=6 cell equals the database" bash -c "grep -E '^\\| $row \\|' '$work/results/table2_smoke.md' | head -1 | grep -qE '\\| $acc ± [0-9.]+ \\[[0-9.]+\\] \\|\$'"
done
expect "table2 figure is PNG" is_png "$work/plots/table2_smoke.png"
expect "table2 reads each row not in the paper against diff (its against key), in each setting" \
    test "$(grep -cE "^\| (gda|diff_shared|dint) \| diff \| N=[1246], R=[12] \| $one_seed\$" "$work/results/table2_smoke.md")" = 12

task fig5 > "$work/fig5.log" 2>&1
expect "fig5 exits 0" test $? -eq 0
expect "fig5 trains nothing again" bash -c "! grep -q '^== training' '$work/fig5.log'"
expect "fig5: both models side by side in one figure" bash -c "$(declare -f is_png); is_png '$work/plots/fig5_smoke.png'"
expect "fig5 sweeps 3 lengths x 5 depths" test "$(sql "SELECT COUNT(DISTINCT length || '/' || depth) FROM episodes WHERE task = 'fig5'")" = 15
expect "fig5 has 8 needles" test "$(sql "SELECT DISTINCT n_needles FROM episodes WHERE task = 'fig5'")" = 8
expect "fig5 table: 5 depth rows and the average row" test "$(grep -cE '^\| ([0-9]+%|average) \|( [0-9.]+ \|){3}$' "$work/results/fig5_smoke.md")" = 30
expect "fig5 judges DIFF against the Transformer at each of the 3 lengths, paired on episodes" \
    test "$(grep -cE "^\| (256|384|512) \| $one_seed\$" "$work/results/fig5_smoke.md")" = 3
expect "fig5 reads each row not in the paper against diff at each length" \
    test "$(grep -cE "^\| (gda|diff_shared|dint) \| diff \| (256|384|512) \| $one_seed\$" "$work/results/fig5_smoke.md")" = 9

task table3 > "$work/table3.log" 2>&1
expect "table3 exits 0" test $? -eq 0
expect "table3 written" grep -q "| paper DIFF | 0.27 | 0.30 | 0.31 | 0.32 | 0.40 | 0.01 |" "$work/results/table3_smoke.md"
expect "table3 and fig1 figures" bash -c "$(declare -f is_png); is_png '$work/plots/table3_smoke.png' && is_png '$work/plots/fig1_smoke.png'"
# per episode, answer + noise + question + BOS = 1 (rows are normalised)
expect "allocations sum to 1" test "$(sql "SELECT COUNT(*) FROM episodes WHERE task = 'table3' AND abs(answer + noise + question + bos - 1) > 1e-4")" = 0
expect "allocation of every episode stored" test "$(sql "SELECT COUNT(*) FROM episodes WHERE task = 'table3'")" = 200
# the noise metrics per head: each head's mean over the episodes, so their mean over the heads is
# the episodes' mean share (every episode weighs alike)
head_vs_episode() {  # ROW METRIC COLUMN: |mean over heads - mean over episodes|
    sql "SELECT abs((SELECT avg(v.value) FROM evaluations v JOIN runs r ON r.id = v.run_id WHERE r.row = '$1' AND v.key LIKE 'table3\_$2\_l%' ESCAPE '\\')
        - (SELECT avg(e.$3) FROM episodes e JOIN runs r ON r.id = e.run_id WHERE r.row = '$1' AND e.task = 'table3')) < 1e-9"
}
expect "noise metrics: 7 per head of each model in the registry (8 heads standard, 4 DIFF, Shared DIFF and DINT, GDA's 6 signal heads)" \
    test "$(sql "SELECT group_concat(n) FROM (SELECT r.row, COUNT(*) AS n FROM evaluations v JOIN runs r ON r.id = v.run_id WHERE v.key LIKE 'table3\_%\_l__\_h__' ESCAPE '\\' GROUP BY r.row ORDER BY r.row)")" = "28,28,28,42,56"
for row in standard diff; do
    expect "noise metrics ($row): the heads' answer, noise and sink shares average to the episodes'" \
        test "$(head_vs_episode $row answer answer)$(head_vs_episode $row noise noise)$(head_vs_episode $row sink bos)" = 111
done
expect "noise metrics: no softmax head has negative mass, a DIFF head has" test "$(sql "SELECT (SELECT max(v.value) FROM evaluations v JOIN runs r ON r.id = v.run_id WHERE r.row = 'standard' AND v.key LIKE 'table3_negative_%') || ',' || (SELECT max(v.value) > 0 FROM evaluations v JOIN runs r ON r.id = v.run_id WHERE r.row = 'diff' AND v.key LIKE 'table3_negative_%')")" = "0.0,1"
# over sum |w|: a softmax head's shares as they are (|w| sums to 1 within float rounding), every
# head's within [-1, 1]
abs_vs_sum() {  # ROW SHARE: the largest |share over sum |w| - share| of the row's heads
    sql "SELECT max(abs(a.value - s.value)) < 1e-6 FROM evaluations a JOIN evaluations s ON s.run_id = a.run_id
        AND s.key = replace(a.key, '_abs_', '_') JOIN runs r ON r.id = a.run_id WHERE r.row = '$1' AND a.key LIKE 'table3\_$2\_abs\_%' ESCAPE '\\'"
}
expect "noise metrics: over sum |w| a softmax head's answer and noise shares as they are" test "$(abs_vs_sum standard answer)$(abs_vs_sum standard noise)" = 11
expect "noise metrics: over sum |w| every head's answer and noise within [-1, 1], DIFF's apart from its shares" \
    test "$(sql "SELECT (SELECT COUNT(*) FROM evaluations WHERE key LIKE 'table3\_%\_abs\_%' ESCAPE '\\' AND abs(value) > 1) || ',' || (SELECT max(abs(a.value - s.value)) > 1e-6 FROM evaluations a JOIN evaluations s ON s.run_id = a.run_id AND s.key = replace(a.key, '_abs_', '_') JOIN runs r ON r.id = a.run_id WHERE r.row = 'diff' AND a.key LIKE 'table3\_answer\_abs\_%' ESCAPE '\\')")" = "0,1"
expect "noise metrics: the table per layer and its figure" bash -c "$(declare -f is_png); grep -qxF '| Model | layer | sink | entropy | negative | answer | noise | answer / sum \|w\| | noise / sum \|w\| |' '$work/results/table3_smoke.md' && is_png '$work/plots/table3_noise_smoke.png'"
maps="$work/results/needle/smoke/maps_diff.h5"
expect "maps artifact recorded" test "$(sql "SELECT COUNT(*) FROM artifacts WHERE kind = 'attention_maps' AND length(sha256) = 64")" = 5
expect "maps: 5 samples" test "$(h5ls "$maps" | grep -c sample_)" = 5
expect "maps: DIFF keeps A1, A2, lambda and the map" bash -c "h5ls -r '$maps/sample_000/layer_00/head_03' | grep -c 'A1\|A2\|lambda\|map' | grep -qx 4"
expect "maps: standard keeps the map only" bash -c "h5ls -r '$work/results/needle/smoke/maps_standard.h5/sample_000/layer_00/head_07' | grep -qx '/map .*'"
expect "maps: tokens, text, needles, rows" bash -c "h5ls '$maps/sample_002' | grep -c 'tokens\|text\|needles\|rows' | grep -qx 4"
# map = A1 - lambda A2 in the file, checked on one entry of row 200
entry() { h5dump -d "/sample_000/layer_00/head_01/$1" -s "$2" -c "$3" -y -w 0 "$maps" | sed -n '/DATA {/,/}/p' | grep -oE '^[[:space:]]*[-0-9.e]+' | tr -d ' '; }
a1=$(entry A1 200,3 1,1) a2=$(entry A2 200,3 1,1) map=$(entry map 200,3 1,1) lam=$(entry lambda 200 1)
expect "stored map is A1 - lambda A2 ($map = $a1 - $lam x $a2)" awk -v a="$a1" -v b="$a2" -v m="$map" -v l="$lam" \
    'BEGIN { d = a - l * b - m; exit !(a != "" && (d < 1e-6 && d > -1e-6)) }'

# Figure 8: every bit width and scale on the same episodes; 16 bits is the model itself
task fig8 > "$work/fig8.log" 2>&1
expect "fig8 exits 0" test $? -eq 0
expect "fig8 trains nothing again" bash -c "! grep -q '^== training' '$work/fig8.log'"
expect "fig8 table: 16 bits once, 8/6/4 per tensor and per row, per model" \
    test "$(grep -cE '^\| (standard|diff) \| (none \| 16|per tensor \| [864]|per row \| [864]) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$' "$work/results/fig8_smoke.md")" = 14
expect "fig8 stores the queries of every width and scale" test "$(sql "SELECT COUNT(DISTINCT task) FROM episodes WHERE task LIKE 'fig8_%'")" = 7
# fig8's first sample per cell is table2's first sample (same seeds): unquantized, same answers
expect "fig8 at 16 bits answers as table2 did" test "$(sql "SELECT SUM(a.output = b.output) || '/' || COUNT(*) FROM episodes a JOIN episodes b ON a.run_id = b.run_id AND a.seed = b.seed AND a.query = b.query WHERE a.task = 'fig8_tensor_16bit' AND b.task = 'table2'")" = "75/75"
expect "fig8 metrics in the registry" test "$(sql "SELECT COUNT(*) FROM evaluations WHERE key LIKE 'fig8_%' AND value BETWEEN 0 AND 20")" = 140
loss16=$(sql "SELECT printf('%.4f', value) FROM evaluations e JOIN runs r ON r.id = e.run_id WHERE r.row = 'diff' AND key = 'fig8_tensor_16bit_loss'")
expect "fig8 table's 16-bit loss is the registry's" grep -qE "^\| diff \| none \| 16 \| $loss16 \|" "$work/results/fig8_smoke.md"
expect "fig8 figure" is_png "$work/plots/fig8_smoke.png"
expect "fig8 judges what quantization costs DIFF against the Transformer: 2 scales x 3 widths x 2 settings" \
    test "$(grep -cE "^\| per (tensor|row) \| [864] \| [14], [12] \| $one_seed\$" "$work/results/fig8_smoke.md")" = 12
expect "fig8 reads each row not in the paper against diff at every scale, width and setting" \
    test "$(grep -cE "^\| (gda|diff_shared|dint) \| diff \| per (tensor|row) \| [864] \| [14], [12] \| $one_seed\$" "$work/results/fig8_smoke.md")" = 36
# the gap from the registry's answers: (DIFF 4-bit - DIFF 16-bit) - (Transformer 4-bit - Transformer 16-bit), N = 1
acc() { echo "(SELECT AVG(e.correct) FROM episodes e JOIN runs r ON r.id = e.run_id WHERE r.row = '$1' AND e.task = 'fig8_tensor_$2bit' AND e.n_needles = 1)"; }
gap4=$(sql "SELECT printf('%+.3f', ($(acc diff 4) - $(acc diff 16)) - ($(acc standard 4) - $(acc standard 16)))")
expect "fig8's 4-bit N = 1 gap is the registry's difference of differences ($gap4)" grep -qE "^\| per tensor \| 4 \| 1, 1 \| \\$gap4 \|" "$work/results/fig8_smoke.md"

# Table 5: the two Table 6 rows of a preset (trained here) and the needle models
sed "s#^data = \.\./data/default#data = $work/data#" experiments/table6.ini > "$work/table6.ini"
t5() { $bin table5 "$work/table6.ini" --preset smoke --needle "$work/needle.ini" --needle-preset smoke --results "$work/results" --plots "$work/plots" "$@"; }
sed '/^\[claim table5_hidden\]/,/^$/d' "$work/table6.ini" > "$work/no_t5_claim.ini"
expect_fail "table5: a Table 6 recipe without the paper's hidden-state numbers is refused, naming the claim, before training" \
    "no_t5_claim.ini: no \[claim table5_hidden\]" $bin table5 "$work/no_t5_claim.ini" --preset smoke --needle "$work/needle.ini" \
    --needle-preset smoke --results "$work/no_t5_results" --plots "$work/plots"
expect "a refused Table 5 writes nothing" test ! -e "$work/no_t5_results"
t5 > "$work/table5.log" 2>&1
expect "table5 exits 0" test $? -eq 0
expect "table5 trained Table 6's transformer and diff rows only" test "$(sql "SELECT group_concat(row, ' ') FROM (SELECT r.row FROM runs r JOIN experiments x ON x.id = r.experiment_id WHERE x.name = 'table6' AND r.status = 'FINISHED' ORDER BY r.id)")" = "transformer diff"
expect "table5: both kinds for 4 models and the paper's rows" test "$(grep -cE '^\| (table6/smoke/(transformer|diff)|needle/smoke/(standard|diff)|paper (Transformer|DIFF) \(3B\)) \| (Attention Logits|Hidden States) \|( [0-9.]+ \|){6}$' "$work/results/table5_smoke_smoke.md")" = 12
expect "table5 paper row" grep -q "| paper DIFF (3B) | Attention Logits | 38.8 | 38.8 | 37.3 | 32.0 | 27.4 | 3.3 |" "$work/results/table5_smoke_smoke.md"
top1=$(sql "SELECT printf('%.2f', value) FROM evaluations e JOIN runs r ON r.id = e.run_id JOIN experiments x ON x.id = r.experiment_id WHERE x.name = 'needle' AND r.row = 'diff' AND key = 'table5_attention_logits_top1'")
expect "table5 Top-1 is the registry's ($top1)" grep -qE "^\| needle/smoke/diff \| Attention Logits \| $top1 \|" "$work/results/table5_smoke_smoke.md"
h5=$work/results/table5/needle_smoke_diff_seed2024.h5
expect "table5 HDF5 per model, recorded as artifacts" test "$(ls "$work"/results/table5/*.h5 | wc -l)/$(sql "SELECT COUNT(*) FROM artifacts WHERE kind = 'outlier_stats'")" = "7/7"
expect "table5 HDF5 layout: per layer (1 layer x 100) and pooled" bash -c "h5ls -r '$h5' | grep -c 'attention_logits/top .*{1, 100}\|hidden_states/histogram .*{1, 65536}\|attention_logits/pooled_top .*{100}' | grep -qx 3"
# the needle smoke model: 1 layer, 4 heads x 2 maps, 3 windows of 768: 3 x 8 x 768 x 769 / 2 logits
expect "table5 counts every causal logit of both maps" bash -c "h5dump -d attention_logits/pooled_count '$h5' | grep -q '(0): 7087104'"
expect "table5 figure" is_png "$work/plots/table5_smoke_smoke.png"
t5 > "$work/table5_again.log" 2>&1
again_rc=$?
expect "table5 again trains nothing: exit 0, its models found finished" \
    bash -c "test $again_rc = 0 && ! grep -q '^== ' '$work/table5_again.log' && grep -q ', seed [0-9]*: already finished (run [0-9]*)$' '$work/table5_again.log'"
# --needle-rows: those needle rows alone, trained ones reused, the outputs named by them
t5 --needle-rows diff,standard > "$work/table5_rows.log" 2>&1
expect "table5 --needle-rows exits 0 and trains nothing" bash -c "test $? -eq 0 && ! grep -q '^== ' '$work/table5_rows.log'"
expect "table5 --needle-rows: the rows named, in the recipe's order, name the table" \
    test "$(grep -cE '^\| (table6/smoke/(transformer|diff)|needle/smoke/(standard|diff)) \| Attention Logits \|( [0-9.]+ \|){6}$' "$work/results/table5_smoke_smoke+standard+diff.md")/$(grep -cE 'needle/smoke/(gda|diff_shared|dint)' "$work/results/table5_smoke_smoke+standard+diff.md")" = "4/0"
expect "table5 --needle-rows figure" is_png "$work/plots/table5_smoke_smoke+standard+diff.png"
t5 --needle-rows gda > "$work/table5_gda.log" 2>&1
expect "table5 --needle-rows refuses a row without the row it is read against" \
    bash -c "test $? -ne 0 && grep -q \"row 'gda' is read against 'diff'\" '$work/table5_gda.log'"


# seeds: --seeds 2 trains seed 2025 of every row beside 2024; the tables give mean ± sample std
# over the seeds, each seed's numbers, and verdicts from the spread (none from one seed)
expect "one seed: Table 2's intervals cover the episodes only, and there is no verdict" bash -c "grep -q 'One seed per row' '$work/results/table2_smoke.md' &&
    grep -q 'covers the evaluation.s noise only' '$work/results/table2_smoke.md' &&
    test \"\$(grep -cE '^\| N=[1246], R=[12] \| [-+0-9.]+ \| $one_seed\$' '$work/results/table2_smoke.md')\" = 4"
seeds() { $bin needle "$work/needle.ini" --preset smoke --seeds 2 --task "$1" --results "$work/seeds" --plots "$work/seeds_plots"; }
seeds table2 > "$work/seeds_table2.log" 2>&1 && seeds table3 > "$work/seeds_table3.log" 2>&1
expect "--seeds 2: table2 and table3 exit 0" test $? -eq 0
sqls() { sqlite3 "$work/seeds/registry.sqlite" "$1"; }
expect "--seeds 2 trains both stages of every row for seeds 2024 and 2025" \
    test "$(sqls "SELECT group_concat(row || ' ' || seed, ', ') FROM (SELECT row, seed FROM runs WHERE status = 'FINISHED' ORDER BY row, seed)")" = \
    "diff 2024, diff 2025, diff_copy 2024, diff_copy 2025, diff_shared 2024, diff_shared 2025, diff_shared_copy 2024, diff_shared_copy 2025, dint 2024, dint 2025, dint_copy 2024, dint_copy 2025, gda 2024, gda 2025, gda_copy 2024, gda_copy 2025, standard 2024, standard 2025, standard_copy 2024, standard_copy 2025"
expect "each seed in its own run folder" test -s "$work/seeds/needle/smoke/diff/seed2025/checkpoint.h5" -a -s "$work/seeds/needle/smoke/diff_copy/seed2025/checkpoint.h5"
expect "table2 states its seeds and lists each seed's accuracy" bash -c "grep -q 'mean ± sample standard deviation over 2 seeds' '$work/seeds/table2_smoke.md' &&
    test \"\$(grep -cE '^\| (standard|diff) \| 202[45] \|' '$work/seeds/table2_smoke.md')\" = 4"
# the smoke models answer nothing, so Table 2 has no verdict to make; Table 3's come from the spread
expect "table2 makes no verdict where neither row retrieves" bash -c "
    test \"\$(grep -c '^| standard |.* 0.00 ± 0.00 \[0.00\] | 0.00 ± 0.00 \[0.00\] | 0.00 ± 0.00 \[0.00\] | 0.00 ± 0.00 \[0.00\] |$' '$work/seeds/table2_smoke.md')\" = 1 &&
    test \"\$(grep -cE '\| n/a \(neither retrieves\) \|$' '$work/seeds/table2_smoke.md')\" = 16"
expect "table3 gives DIFF minus standard per depth and over depths, with the t-interval, both seeds, and no verdict from 2" \
    test "$(grep -cE '^\| (answer|noise)( / sum \\\|w\\\|)? \| ([0-9]+%|mean) \| [-+0-9.]+ \| [-+0-9.]+ \| \[[-+0-9.]+, [-+0-9.]+\] \| [-+0-9.]+, [-+0-9.]+ \| [012] of 2 seeds (higher|lower|at 0); t p [=<] [^;]+; MDG [0-9.]+ \| n too small for a verdict(; underpowered for the paper.s gap)? \|$' "$work/seeds/table3_smoke.md")" = 24
# a row not in the paper against diff: the paired gap is the mean over the seeds of the rows'
# differences in the registry's episodes (both rows answer the same episodes)
# (one sqlite3 at a time: two opening the registry at once can meet a lock and print nothing)
share() { echo "(SELECT r.seed, avg(e.answer) AS m FROM episodes e JOIN runs r ON r.id = e.run_id WHERE e.task = 'table3' AND r.row = '$1' GROUP BY r.seed)"; }
# and its interval Student's t on the two differences: mean ± t(0.975, 1) |d1 - d2| / 2
paired_t() {  # DIGITS, the per-seed differences on stdin: "gap | [lo, hi] | d1, d2"
    awk -v k="$1" '{v[NR] = $1; m += $1} END {m /= NR; h = 12.7062047 * sqrt((v[1] - m)^2 + (v[2] - m)^2) / sqrt(2);
        f = "%+." k "f"; printf f " | [" f ", " f "] | " f ", " f, m, m - h, m + h, v[1], v[2]}'
}
gap=$(sqls "SELECT a.m - b.m FROM $(share dint) a JOIN $(share diff) b ON a.seed = b.seed ORDER BY a.seed" | paired_t 3)
expect "table3: dint minus diff in the answer share over depths is the seeds' mean paired difference, its t-interval and each seed's ($gap)" \
    grep -qF "| dint | diff | answer | mean | $gap |" "$work/seeds/table3_smoke.md"
expect "table3 reads the three rows not in the paper against diff in both shares, both readings" \
    test "$(grep -cE '^\| (gda|diff_shared|dint) \| diff \| (answer|noise)( / sum \\\|w\\\|)? \| ([0-9]+%|mean) \| ' "$work/seeds/table3_smoke.md")" = 72
# Figure 1's answer share of the diff row, from the registry's episodes: per seed the mean over
# Table 3's episodes, then mean and sample std over the two seeds
want=$(sqls "SELECT avg(e.answer) FROM episodes e JOIN runs r ON r.id = e.run_id WHERE e.task = 'table3' AND r.row = 'diff' GROUP BY r.seed" |
    awk '{v[NR] = $1; m += $1} END {m /= NR; for (i = 1; i <= NR; i++) s += (v[i] - m)^2; printf "%.3f ± %.3f", m, sqrt(s / (NR - 1))}')
expect "Figure 1's diff answer share is the seeds' mean ± std of the registry's episodes ($want)" \
    grep -qE "^\| diff \| $want \|" "$work/seeds/table3_smoke.md"
expect "the seed figures are drawn" bash -c "head -c 4 '$work/seeds_plots/table2_smoke.png' | grep -q PNG && head -c 4 '$work/seeds_plots/table3_smoke.png' | grep -q PNG"
$bin table5 "$work/table6.ini" --preset smoke --needle "$work/needle.ini" --needle-preset smoke --seeds 2 --results "$work/seeds" \
    --plots "$work/seeds_plots" > "$work/seeds_table5.log" 2>&1
expect "table5 --seeds 2: 14 models, each with its statistics file" test "$(ls "$work"/seeds/table5/*_seed*.h5 | wc -l)" = 14
top=$(sqls "SELECT e.value FROM evaluations e JOIN runs r ON r.id = e.run_id JOIN experiments x ON x.id = r.experiment_id WHERE x.name = 'table6' AND r.row = 'diff' AND e.key = 'table5_attention_logits_top1'" |
    awk '{v[NR] = $1; m += $1} END {m /= NR; for (i = 1; i <= NR; i++) s += (v[i] - m)^2; printf "%.2f ± %.2f", m, sqrt(s / (NR - 1))}')
expect "table5's Top-1 of table6/smoke/diff is its two seeds' mean ± std ($top)" \
    grep -qE "^\| table6/smoke/diff \| Attention Logits \| $top \|" "$work/seeds/table5_smoke_smoke.md"
# the verdict's gap is the mean of the seeds' paired differences, with their t-interval
top1_gap() {  # EXPERIMENT ROW BASE: the mean of the seeds' paired Top-1 differences | [lo, hi] | d1, d2
    sqls "SELECT d.value - t.value FROM evaluations d JOIN runs rd ON rd.id = d.run_id JOIN experiments xd ON xd.id = rd.experiment_id
          JOIN runs rt ON rt.seed = rd.seed AND rt.experiment_id = rd.experiment_id JOIN evaluations t ON t.run_id = rt.id AND t.key = d.key
          WHERE xd.name = '$1' AND rd.row = '$2' AND rt.row = '$3' AND d.key = 'table5_attention_logits_top1' ORDER BY rd.seed" | paired_t 2
}
gap=$(top1_gap table6 diff transformer)
expect "table5's Top-1 gap of diff over transformer is the seeds' paired differences with their t-interval ($gap)" \
    grep -qF "| table6/smoke/diff − table6/smoke/transformer | Attention Logits | Top-1 | -279.20 | $gap |" "$work/seeds/table5_smoke_smoke.md"
gap=$(top1_gap needle dint diff)
expect "table5 reads dint against diff (its against key): the seeds' paired differences with their t-interval ($gap)" \
    grep -qF "| needle/smoke/dint − needle/smoke/diff | Attention Logits | Top-1 | - | $gap |" "$work/seeds/table5_smoke_smoke.md"
expect "table5 reads the three needle rows not in the paper against diff, both activation types" \
    test "$(grep -cE '^\| needle/smoke/(gda|diff_shared|dint) − needle/smoke/diff \| (Attention Logits|Hidden States) \| Top-1 \| - \| [+-][0-9.]+ \| n/a \| [+-][0-9.]+ \| 1 seed \| no verdict \(one seed\) \|$' "$work/results/table5_smoke_smoke.md")" = 6
expect "table5 with one seed gives no interval and no verdict" \
    grep -qE "^\| table6/smoke/diff − table6/smoke/transformer \| Attention Logits \| Top-1 \| -279.20 \| [+-][0-9.]+ \| n/a \| [+-][0-9.]+ \| 1 seed \| no verdict \(one seed\) \|$" "$work/results/table5_smoke_smoke.md"

# --rows: some of the recipe's rows, as on a recipe of those rows alone; the models are the
# whole recipe's (nothing trained again), the outputs named for the rows in the recipe's order
# beside the whole recipe's, which stay as they were
whole=$(sha256sum < "$work/seeds/table2_smoke.md")
$bin needle "$work/needle.ini" --preset smoke --seeds 2 --rows gda,diff --task table2 --results "$work/seeds" --plots "$work/seeds_plots" > "$work/rows.log" 2>&1
expect "--rows gda,diff: table2 exits 0 and trains nothing" bash -c "test $? -eq 0 && ! grep -q '^== ' '$work/rows.log'"
rows_table=$work/seeds/table2_smoke+diff+gda.md
expect "--rows: the table of diff and gda alone, each seed listed, in table2_smoke+diff+gda.md" bash -c "
    test \"\$(grep -cE '^\| (diff|gda) \| 202[45] \|' '$rows_table')\" = 4 && ! grep -qE '^\| (standard|dint|diff_shared) ' '$rows_table'"
# the same models (registry runs, parameters, checkpoints, copying checks) and the same verdicts
gda_lines() { grep -E '^(- gda, seed|\| gda \| diff \|)' "$1"; }
expect "--rows: gda's models and its paired gaps against diff as in the whole recipe's table" \
    bash -c 'test "$(grep -c "registry run" <<<"$1")" = 2 && test "$1" = "$2"' _ "$(gda_lines "$rows_table")" "$(gda_lines "$work/seeds/table2_smoke.md")"
expect "--rows: its figure drawn, and the whole recipe's table left as it was" bash -c "
    head -c 4 '$work/seeds_plots/table2_smoke+diff+gda.png' | grep -q PNG && test \"\$(sha256sum < '$work/seeds/table2_smoke.md')\" = '$whole'"
$bin needle "$work/needle.ini" --preset smoke --seeds 2 --rows gda,diff --task table3 --results "$work/seeds" --plots "$work/seeds_plots" > "$work/rows3.log" 2>&1
expect "--rows: Table 3's paired gaps of gda against diff, intervals included, as in the whole recipe's table" bash -c "
    test \"\$(grep -E '^\| gda \| diff \| (answer|noise) \|' '$work/seeds/table3_smoke+diff+gda.md')\" = \"\$(grep -E '^\| gda \| diff \| (answer|noise) \|' '$work/seeds/table3_smoke.md')\" &&
    test \"\$(grep -cE '^\| gda \| diff \| (answer|noise) \| mean \| [-+0-9.]+ \| \[' '$work/seeds/table3_smoke+diff+gda.md')\" = 2"
rows() { $bin needle "$work/needle.ini" --preset smoke --task table2 --results "$work/seeds" --rows "$1"; }
expect_fail "--rows: a row read against a row left out" "row 'gda' is read against 'diff'" rows gda
expect_fail "--rows: a name that is no row, with the recipe's rows" "'nope' is not a row of .*needle.ini \(its rows: standard, diff, gda, diff_shared, dint\)" rows diff,nope
expect_fail "--rows: a row named twice" "row 'diff' is named twice" rows diff,standard,diff
expect_fail "--rows: a trailing comma" "ends with a comma" rows diff,
expect_fail "--rows is the needle runner's alone" "rows" $bin table6 "$work/table6.ini" --preset smoke --rows diff

# the inspector reads the file alone
$bin attn "$maps" --sample 2 --layer 0 --head 1 --out "$work/attn.png" > "$work/attn.log" 2>&1
expect "attn renders a PNG" is_png "$work/attn.png"
$bin attn "$work/results/needle/smoke/maps_standard.h5" --sample 0 --layer 0 --head 0 > /dev/null 2>&1
expect "attn default output name" is_png "$work/results/needle/smoke/maps_standard_s0_l0_h0.png"
expect_fail "attn: missing sample" "has no group 'sample_009'" $bin attn "$maps" --sample 9 --layer 0 --head 0
expect_fail "attn: bad head" "--head 9: .* has heads 0..3" $bin attn "$maps" --sample 0 --layer 0 --head 9
expect_fail "attn: not a maps file" "not an attention-maps file" $bin attn "$work/results/needle/smoke/diff/seed2024/checkpoint.h5" --sample 0 --layer 0 --head 0
expect_fail "attn: missing file" "cannot read attention maps" $bin attn "$work/none.h5" --sample 0 --layer 0 --head 0
# plots/attn.gp is found beside the program, not in the working directory
(cd / && "$OLDPWD/$bin" attn "$maps" --sample 0 --layer 0 --head 0 --out "$work/elsewhere.png") > /dev/null 2>&1
expect "attn from another working directory" is_png "$work/elsewhere.png"
# a render that fails (no such output folder) leaves no temporary folder behind
temp_before=$(ls -d /tmp/difftx_attn_* 2>/dev/null | wc -l)
expect_fail "attn: an output folder that does not exist" "cannot write figure '.*/no/such/folder.png'.*No such file" $bin attn "$maps" --sample 0 --layer 0 --head 0 --out "$work/no/such/folder.png"
expect "a failed render leaves no temporary folder" test "$(ls -d /tmp/difftx_attn_* 2>/dev/null | wc -l)" = "$temp_before"
expect "no figure leaves gnuplot's private folder behind" test -z "$(find "$work" -name '.gnuplot.*')"
expect_fail "needle: bad task" "--task 'table9'" $bin needle "$work/needle.ini" --preset smoke --task table9
expect_fail "needle: bad preset" "no \\[preset huge\\]" $bin needle "$work/needle.ini" --preset huge --task table2
sed 's/^context = 256/context = 40/' "$work/needle.ini" > "$work/short.ini"
expect_fail "needle: context too short" "context of 40 tokens has no room" $bin needle "$work/short.ini" --preset smoke --task table2 --results "$work/results"
sed 's/^seq_len = 768/seq_len = 512/' "$work/needle.ini" > "$work/other_len.ini"
expect_fail "needle: mix cut for another seq_len" "holds needle blocks of 768 tokens but the recipe trains at seq_len 512" \
    $bin needle "$work/other_len.ini" --preset smoke --task table2 --results "$work/results"
sed 's/^against = diff$/against = nothing/' "$work/needle.ini" > "$work/bad_against.ini"
expect_fail "needle: against names no row" "\\[row gda\\] key 'against': 'nothing' is not another row" \
    $bin needle "$work/bad_against.ini" --preset smoke --task table2 --results "$work/results"
# the paper's numbers are the recipe's claims: a recipe without one, or with a claim of too few
# numbers, is refused naming it, before anything is made or trained
sed '/^\[claim table3_noise\]/,/^$/d' "$work/needle.ini" > "$work/no_claim.ini"
expect_fail "needle: a recipe without the paper's Table 3 noise shares is refused, naming the claim" "no_claim.ini: no \[claim table3_noise\]" \
    $bin needle "$work/no_claim.ini" --preset smoke --task table3 --results "$work/no_claim_results"
sed 's/^transformer = 1.00 0.85 0.62 0.55$/transformer = 1.00 0.85 0.62/' "$work/needle.ini" > "$work/short_claim.ini"
expect_fail "needle: a claim's numbers are counted" "\[claim table2\] key 'transformer': '1.00 0.85 0.62' is not 4 numbers" \
    $bin needle "$work/short_claim.ini" --preset smoke --task table2 --results "$work/no_claim_results"
sed 's/^direction = diff ahead$/direction = sideways/' "$work/needle.ini" > "$work/bad_direction.ini"
expect_fail "needle: a figure's claim states which way it goes" "\[claim fig5\] needs 'direction' = diff ahead or transformer ahead, not 'sideways'" \
    $bin needle "$work/bad_direction.ini" --preset smoke --task fig5 --results "$work/no_claim_results"
expect "a refused claim writes nothing" test ! -e "$work/no_claim_results"
grep -v '^copy_steps' "$work/needle.ini" > "$work/no_copy.ini"
expect_fail "needle: copy stage unset" "\\[smoke\\] needs 'copy_steps' as a positive integer" \
    $bin needle "$work/no_copy.ini" --preset smoke --task table2 --results "$work/results"
# `data` names the folder the needle mix is made in: a prepared corpus named there (it holds a
# tokenizer.bin too) is refused and left whole, its other files included
cp -r "$work/data" "$work/corpus_copy" && echo "my notes" > "$work/corpus_copy/notes.txt"
corpus_sum=$(cd "$work/corpus_copy" && sha256sum * | sha256sum)
expect_fail "needle: data naming a prepared corpus is refused, not replaced by the mix" \
    "output folder '$work/corpus_copy' is a folder with files but no copy/tokenizer.bin: not one this program made" \
    $bin needle "$work/needle.ini" data="$work/corpus_copy" --preset smoke --task table2 --results "$work/refused_data" --plots "$work/refused_data"
expect "the corpus and its other files are untouched" test "$(cd "$work/corpus_copy" && sha256sum * | sha256sum)" = "$corpus_sum"
# a row named like another row's copy stage (<row>_copy) is refused by file and line
{ cat "$work/needle.ini"; printf '%s\n' "[row diff_copy]" "attention = diff"; } > "$work/copy_name.ini"
expect_fail "needle: a row named <row>_copy is refused at its line" \
    "copy_name.ini:[0-9]+: section \[row diff_copy\]: a row name ending in '_copy' is reserved" \
    $bin needle "$work/copy_name.ini" --preset smoke --task table2 --results "$work/refused_data"

# kill -9 during a copy stage, then rerun: the killed attempt is KILLED (never FINISHED), the
# next one resumes from its checkpoint, and its log equals that of a run that never stopped
# (the standard row alone: the other rows' 300 copy steps would only repeat it)
sed 's/^copy_steps = 4$/copy_steps = 300/' "$work/needle.ini" | awk '/^\[row /{keep = ($0 == "[row standard]")} !/^\[row /&&!in_rows || keep {print} /^\[row /{in_rows = 1}' > "$work/long.ini"
long=($bin needle "$work/long.ini" --preset smoke --task table2)
"${long[@]}" --results "$work/killed" --plots "$work/plots_killed" > "$work/killed.log" 2>&1 &
pid=$!  # the binary itself, so kill -9 reaches it
ckpt="$work/killed/needle/smoke/standard_copy/seed2024/checkpoint.h5"
for _ in $(seq 1 600); do [ -e "$ckpt" ] && break; sleep 0.05; done
kill -9 $pid
wait $pid 2>/dev/null
status() { sqlite3 "$work/$1/registry.sqlite" "SELECT group_concat(status, ' ') FROM (SELECT status FROM runs WHERE row = 'standard_copy' ORDER BY attempt)"; }
expect "killed copy stage is not FINISHED" test "$(status killed)" = RUNNING
expect "killed copy stage's checkpoint is not finished" bash -c "h5dump -a finished '$ckpt' | grep -q '(0): 0'"
"${long[@]}" --results "$work/killed" --plots "$work/plots_killed" > "$work/resumed.log" 2>&1
expect "rerun after the kill exits 0" test $? -eq 0
expect "rerun resumes from the checkpoint" grep -q "^resuming $ckpt from step [1-9]" "$work/resumed.log"
expect "attempts: KILLED, then FINISHED" test "$(status killed)" = "KILLED FINISHED"
"${long[@]}" --results "$work/nonstop" --plots "$work/plots_nonstop" > /dev/null 2>&1
expect "resumed copy stage's log equals a non-stop run's" cmp -s "$work/killed/needle/smoke/standard_copy/seed2024/log.tsv" "$work/nonstop/needle/smoke/standard_copy/seed2024/log.tsv"
expect "resumed table equals a non-stop run's" cmp -s <(grep '^| standard' "$work/killed/table2_smoke.md") <(grep '^| standard' "$work/nonstop/table2_smoke.md")

# every documented query (docs/registry.md) runs on this registry; Table 2's give its cells
n=0
while IFS= read -r query; do
    n=$((n + 1))
    expect "documented query $n runs on the needle registry" sqlite3 -bail "$work/results/registry.sqlite" "$query" > "$work/query$n.out"
done < <(doc_queries)
cells=$(sql "SELECT COUNT(*) FROM (SELECT DISTINCT run_id, n_needles FROM episodes WHERE task = 'table2')")
expect "the smoke tables say they are a plumbing check" bash -c "grep -q '^> \*\*A plumbing check' '$work/results/table2_smoke.md' && grep -q '^> \*\*A plumbing check' '$work/results/table3_smoke.md'"
expect "Table 3's Figure 1 table is a Markdown table" bash -c "grep -qx 'Figure 1 breakdown (mean over depths):' '$work/results/table3_smoke.md' && grep -qx '| Model | answer | noise | question | BOS |' '$work/results/table3_smoke.md'"
expect "Table 2's documented queries give its $cells cells" test "$(wc -l < "$work/query4.out")" = "$cells" -a "$(wc -l < "$work/query5.out")" = "$cells" -a "$cells" -gt 0

summary
