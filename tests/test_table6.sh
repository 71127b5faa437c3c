#!/usr/bin/env bash
# The smoke preset end to end, killed with SIGKILL mid-row and rerun: the interrupted row resumes
# from its checkpoint, every row finishes once, no metric step is stored twice, the table, claims,
# DIFF V2 row and both PNG figures are written; a rerun trains nothing; figures drawn into a folder
# named with quotes, backquotes and `$(...)` from another working directory, nothing in the name
# run; a row without `paper`; a second `table6` on the same results folder refused naming the first;
# the learning-rate study (`lr_stability.ini` through `presets_from`): its 6 rows train at the
# preset's lr times 1, 2 and 4 (read from each run's recorded recipe), its table and figures carry
# its name while Table 6's stay untouched, only its own claims are written, and on a hand-made case
# (two loss spikes and one gradient-norm spike written into one run) the rerun trains nothing and
# its health table counts 2 and 1 beside the run's last training loss; a non-positive `lr_scale`, a
# `study` that is not a plain name, nested `presets_from` and `study` inside a preset are refused.
# Also: on a 300-token vocabulary no token is an AR-Hit token and the table says "no AR-Hit tokens"
# instead of failing the rows; a row that fails leaves the table and both figures to go on without
# it. The prepared tiny corpus it needs is made here.
set -u
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/difftx
work=$PWD/build/test_table6
rm -rf "$work" && mkdir -p "$work/corpus"
source tests/harness.sh
sql() { sqlite3 "$work/results/registry.sqlite" "$1"; }

prepare_table6_corpus
sed "s#^data = .*#data = $work/data#" experiments/table6.ini > "$work/table6.ini"
n_rows=$(grep -c '^\[row ' experiments/table6.ini)  # the table's rows, each trained once per seed
run_table() { $bin table6 "$work/table6.ini" --preset smoke --results "$work/results" --plots "$work/plots"; }

# 1. interrupted: SIGKILL once the first row has written a checkpoint
setsid bash -c "$(declare -f run_table); bin=$bin work=$work; run_table" > "$work/killed.log" 2>&1 &
leader=$!
ckpt="$work/results/table6/smoke/transformer/seed1000/checkpoint.h5"
# a busy wait, not a sleep: a smoke row trains its remaining 20 steps in tens of milliseconds,
# so a 0.1 s poll sometimes let the row finish before the kill (seen once the CPU code got faster)
deadline=$((SECONDS + 60))
while [ ! -f "$ckpt" ] && [ $SECONDS -lt $deadline ]; do :; done
kill -KILL -- -"$leader" 2>/dev/null
wait "$leader" 2>/dev/null
expect "checkpoint written before the kill" test -f "$ckpt"
expect "killed row is not FINISHED" test "$(sql "SELECT COUNT(*) FROM runs WHERE row = 'transformer' AND status = 'FINISHED'")" = 0
expect "killed row shows RUNNING until reaped" test "$(sql "SELECT status FROM runs WHERE row = 'transformer'")" = RUNNING

# 2. rerun: reaps the killed attempt, resumes it, finishes the table
run_table > "$work/resumed.log" 2>&1
expect "rerun exits 0" test $? -eq 0
expect "rerun reports the interrupted run" grep -q "marked 1 interrupted run(s) KILLED" "$work/resumed.log"
expect "interrupted row resumed from its checkpoint" grep -q "resuming $ckpt from step" "$work/resumed.log"
expect "killed attempt kept as KILLED" test "$(sql "SELECT status FROM runs WHERE row = 'transformer' AND attempt = 1")" = KILLED
expect "every row FINISHED once" test "$(sql "SELECT COUNT(DISTINCT row) FROM runs WHERE status = 'FINISHED'")" = $n_rows
expect "evaluations stored" test "$(sql "SELECT COUNT(*) FROM evaluations WHERE key IN ('valid', 'arhit', 'others')")" = $((3 * n_rows))

# W6: a results folder copied whole is rerun like the original: its runs found (their paths under
# the old folder read against the copy's), nothing trained, the figures drawn, the losses read
rm -rf "$work/results_copy" && cp -r "$work/results" "$work/results_copy"
$bin table6 "$work/table6.ini" --preset smoke --results "$work/results_copy" --plots "$work/plots_copy" > "$work/copy.log" 2>&1
expect "a copied results folder reruns: exit 0, nothing trained, every final loss read" \
    bash -c "test $? = 0 && ! grep -q '^== training' '$work/copy.log' && cmp -s '$work/results/table6_smoke.md' '$work/results_copy/table6_smoke.md'"
# W3: a finished run whose checkpoint this program cannot load (its config names a variant of
# another version; the registry's sha256 its own) is never called finished: the table warns,
# names why, and goes on without the row
rm -rf "$work/results_w3" && cp -r "$work/results" "$work/results_w3"
w3_ckpt="$work/results_w3/table6/smoke/diff/seed1000/checkpoint.h5"
${BUILD:-build}/write_fixture config_replace "$w3_ckpt" $'attention = diff\n' $'attention = no_such_variant\n'
sqlite3 "$work/results_w3/registry.sqlite" "UPDATE artifacts SET sha256 = '$(sha256sum "$w3_ckpt" | cut -d' ' -f1)' WHERE kind = 'checkpoint' AND run_id IN (SELECT id FROM runs WHERE row = 'diff')"
$bin table6 "$work/table6.ini" --preset smoke --results "$work/results_w3" --plots "$work/plots_w3" > "$work/w3.log" 2>&1
w3_rc=$?
expect "an unloadable finished checkpoint is not finished: warned with why, the row left out, exit 1" \
    bash -c "test $w3_rc = 1 && grep -q 'finished, but this program cannot load its checkpoint (its config: key .attention.: .no_such_variant. is not one of' '$work/w3.log' &&
             grep -q '^row diff: 0 of 1 seeds finished' '$work/w3.log'"
# W7: kill -9 of the table6 parent alone (its rows made long, 3000 steps): its worker, training a
# row, ends with it, and a rerun takes the folder over at once rather than finding it "in use" by
# the dead parent's pid
$bin table6 "$work/table6.ini" --preset smoke --results "$work/orphan" --plots "$work/orphan_plots" steps=3000 > "$work/orphan.log" 2>&1 &
parent=$!
deadline=$((SECONDS + 60)) worker=""
while [ -z "$worker" ] && [ $SECONDS -lt $deadline ]; do worker=$(pgrep -P "$parent" | head -1); done
kill -KILL "$parent" 2>/dev/null
wait "$parent" 2>/dev/null
deadline=$((SECONDS + 10))
while [ -n "$worker" ] && kill -0 "$worker" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
expect "the worker ends with its killed parent (worker pid ${worker:-none})" bash -c "test -n '$worker' && ! kill -0 '$worker' 2>/dev/null"
setsid $bin table6 "$work/table6.ini" --preset smoke --results "$work/orphan" --plots "$work/orphan_plots" steps=3000 > "$work/orphan_rerun.log" 2>&1 &
leader=$!
deadline=$((SECONDS + 60))
while ! grep -qs '^== training' "$work/orphan_rerun.log" && kill -0 "$leader" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
kill -KILL -- -"$leader" 2>/dev/null
wait "$leader" 2>/dev/null
expect "a rerun takes the folder over and trains" bash -c "grep -q '^== training' '$work/orphan_rerun.log' && ! grep -q 'in use by another difftx process' '$work/orphan_rerun.log'"
expect "3 validation points per row" test "$(sql "SELECT COUNT(*) FROM metrics WHERE key = 'val_loss'")" = $((3 * n_rows))
# counted over FINISHED runs: the killed attempt may have finished training (and recorded its
# shard) before the kill landed, as the smoke rows train in under a second
finished_artifacts() { sql "SELECT COUNT(*) FROM artifacts a JOIN runs r ON r.id = a.run_id WHERE r.status = 'FINISHED' AND $1"; }
expect "checkpoint artifacts with sha256" test "$(finished_artifacts "kind = 'checkpoint' AND length(sha256) = 64")" = $n_rows
expect "every row's training data recorded by its sha256" test "$(finished_artifacts "kind = 'training_data' AND path = '$work/data/train.bin' AND sha256 = '$(sha256sum "$work/data/train.bin" | cut -c1-64)'")" = $n_rows
expect "provenance recorded" test "$(sql "SELECT COUNT(*) FROM runs WHERE git_commit != '' AND cpu_model != '' AND threads > 0 AND recipe_text LIKE '%attention = %'")" -ge 9
# DIFF V2: 2 x 4 query heads on 4 key/value heads of 16, trained, parameters within 1% (else the run stops)
expect "DIFF V2 row trained" bash -c "grep -qE '^\\| DIFF V2 \\(not in paper\\) \\| 4 \\| 16 \\| ✗ \\| 1 \\| [0-9.]+ .*not in the paper' '$work/results/table6_smoke.md'"
expect "table written" grep -q "| DIFF | 2 | 16 | ✓ | 1 |" "$work/results/table6_smoke.md"
expect "claims written" grep -q "DIFF beats Transformer overall" "$work/results/table6_smoke.md"
n_against=$(grep -c '^against = ' experiments/table6.ini)
expect "each of the $n_against rows with \`against\` gets its paired gaps on three metrics, with intervals, per-seed values and no verdict from one seed" \
    test "$(grep -cE '^\| [^|]+ \| [^|]+ \| (Valid|AR-Hit|Others) \| [-+][0-9.]+ \| \[[-+0-9.]+, [-+0-9.]+\] \(evaluation noise only\) \| [-+][0-9.]+ \| 1 seed \| no verdict \(one seed\) \|$' "$work/results/table6_smoke.md")" = $((3 * n_against))
expect "DINT is read against DIFF" grep -qE '^\| DINT \(not in paper\) 2x16 GN \| DIFF 2x16 GN \|' "$work/results/table6_smoke.md"
expect "one seed: the claims' intervals say they cover the windows only" grep -q "covers the evaluation's noise only, not the seed-to-seed noise of training, so no verdict is drawn" "$work/results/table6_smoke.md"
expect "loss by position: 8 bins of 8 tokens for each of the $n_rows rows" bash -c "grep -q '^| Model | 1-8 | 9-16 | 17-24 | 25-32 | 33-40 | 41-48 | 49-56 | 57-64 |$' '$work/results/table6_smoke.md' &&
    test \"\$(grep -cE '^\| [^|]+ \|( [0-9]\.[0-9]{3} \|){8}$' '$work/results/table6_smoke.md')\" = $n_rows"
expect "and each row against the first per bin, with intervals" test "$(grep -cE '^\| [^|]+ \|( [-+][0-9.]+ \[[-+0-9.]+, [-+0-9.]+\] \|){8}$' "$work/results/table6_smoke.md")" = $((n_rows - 1))
expect "the position figure is drawn" test -s "$work/plots/table6_smoke_positions.png"
expect "each run's window losses are in the registry (64 windows x 10 slices)" test "$(sqlite3 "$work/results/registry.sqlite" "SELECT COUNT(*) FROM window_losses w JOIN runs r ON r.id = w.run_id WHERE r.row = 'diff'")" = 640
expect "bar figure" test -s "$work/plots/table6_smoke.png"
expect "curve figure" test -s "$work/plots/table6_smoke_curves.png"
is_png() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = "211PNG" ]; }
expect "figures are PNG" bash -c "$(declare -f is_png); is_png '$work/plots/table6_smoke.png' && is_png '$work/plots/table6_smoke_curves.png'"

# 3. a finished table trains nothing when rerun
run_table > "$work/again.log" 2>&1
expect "finished rows are skipped" bash -c "! grep -q '^== ' '$work/again.log'"
expect "table reprinted" grep -q "Table 6 (preset smoke)" "$work/again.log"
expect "a rerun names the rows already finished" test "$(grep -c '^[a-z_0-9]*, seed 1000: already finished (run [0-9]*)$' "$work/again.log")" = $n_rows
expect "the smoke table says it is a plumbing check" grep -q "^> \*\*A plumbing check.\*\*" "$work/results/table6_smoke.md"
expect "AR-Hit's token count beside its fraction" grep -qE "% of evaluated tokens \([0-9]+ of 4096\)" "$work/results/table6_smoke.md"
# the claims are the recipe's: one added there is judged on the finished runs, nothing trained;
# those with `table = 5` are Table 5's numbers, not judged here
n_claims=$(( $(grep -c '^\[claim ' experiments/table6.ini) - $(grep -c '^table = 5$' experiments/table6.ini) ))
expect "each of the recipe's $n_claims Table 6 claims has its row in the table" \
    test "$(sed -n '/^### The paper.s claims/,/^Gaps are/p' "$work/results/table6_smoke.md" | grep -c '^| [^c-]')" = "$n_claims"
{ cat "$work/table6.ini"; printf '%s\n' "[claim added]" "text = an added claim: DIFF V2 minus DIFF | on Others" "gap = diff2 - diff" "metric = others"; } > "$work/claims.ini"
$bin table6 "$work/claims.ini" --preset smoke --results "$work/results" --plots "$work/plots" > "$work/claims.log" 2>&1
expect "a claim added to the recipe is judged in the table, nothing trained, a '|' in its words escaped (W12)" bash -c "! grep -q '^== ' '$work/claims.log' &&
    grep -qE '^\| an added claim: DIFF V2 minus DIFF \\\\\| on Others \| n/a \(not in the paper\) \| [-+0-9.]+ \| \[[-+0-9.]+, [-+0-9.]+\] ' '$work/results/table6_smoke.md'"
run_table > "$work/again2.log" 2>&1
# W13: a window's stored loss sum set to inf is an error naming the run and the registry, never
# a gap of +inf beside a finite mean
d_run=$(sql "SELECT id FROM runs WHERE row = 'diff' AND status = 'FINISHED' ORDER BY id LIMIT 1")
sql "CREATE TABLE saved_windows AS SELECT * FROM window_losses WHERE run_id = $d_run AND window = 3;
     UPDATE window_losses SET loss_sum = 9e999 WHERE run_id = $d_run AND window = 3 AND slice = 'valid'"
expect_fail "a stored loss sum of inf stops the table, naming the run" \
    "registry '$work/results/registry.sqlite': run $d_run's window 3 \(slice valid\) holds a loss sum of Inf over [0-9]+ tokens, which no evaluation writes" run_table
sql "DELETE FROM window_losses WHERE run_id = $d_run AND window = 3; INSERT INTO window_losses SELECT * FROM saved_windows; DROP TABLE saved_windows"

# 4. figures into a folder whose name holds quotes and shell and gnuplot substitutions, from
#    another working directory: drawn, and nothing in the name runs
root=$PWD
hostile="$work/plots \`cd $work;touch PWNED\` '\$(cd $work;touch PWNED2)\""
# ... with a DIFF row that has no `paper` key (the claims against it say n/a)
# ... and a label holding '|', which must not end its Markdown cell
awk -v data="$work/data" '/^\[row /{row=$0} /^data = /{$0="data = " data}
    row=="[row transformer]" && /^label = /{$0="label = Transformer | baseline"} !(row=="[row diff]" && /^paper/)' \
    experiments/table6.ini > "$work/table6_abs.ini"
(cd / && "$root/$bin" table6 "$work/table6_abs.ini" --preset smoke --results "$work/results_abs" --plots "$hostile") > "$work/hostile.log" 2>&1
expect "figures drawn into a hostile folder name from another working directory" is_png "$hostile/table6_smoke.png"
expect "nothing in the folder name ran" test ! -e "$work/PWNED" -a ! -e "$work/PWNED2"
expect "a row without 'paper' is tabled as not in the paper" grep -qE '^\| DIFF \| 2 \| 16 \| ✓ \| 1 \| .*not in the paper' "$work/results_abs/table6_smoke.md"
expect "a label's '|' is escaped in its Markdown cell" grep -qE '^\| Transformer \\\| baseline \| 4 \| 16 \| ✗ \| 1 \| ' "$work/results_abs/table6_smoke.md"
expect "every row of the Markdown table has the header's columns" \
    test "$(sed -n '/^| Model | #Heads/,/^$/p' "$work/results_abs/table6_smoke.md" | sed 's/\\|//g' | awk -F'|' 'NF { print NF }' | sort -u)" = 14
expect "claims against it have no paper gap, the windows' interval and no verdict from one seed" grep -qE "DIFF beats Transformer overall \(Valid\) \| n/a \(not in the paper\) \| [-+0-9.]+ \| \[[-+0-9.]+, [-+0-9.]+\] \(evaluation noise only\) \| [-+0-9.]+ \| 1 seed \| no verdict \(one seed\) \|$" "$work/results_abs/table6_smoke.md"
sed 's/^against = diff2$/against = diff3/' "$work/table6.ini" > "$work/bad_against.ini"
expect_fail "an \`against\` naming no row" "bad_against.ini: \[row diff2_halves\] key 'against': 'diff3' is not another row of this recipe" \
    $bin table6 "$work/bad_against.ini" --preset smoke --results "$work/results_bad" --plots "$work/plots_bad"
sed 's/^gap = diff - diff_no_gn$/gap = diff - diff_no_norm/' "$work/table6.ini" > "$work/bad_claim.ini"
expect_fail "a claim naming no row" "bad_claim.ini: \[claim head_norm_diff\] key 'gap': 'diff - diff_no_norm' is not 'row - row' of two rows of this recipe" \
    $bin table6 "$work/bad_claim.ini" --preset smoke --results "$work/results_bad" --plots "$work/plots_bad"
sed 's/^metric = arhit$/metric = ar_hit/' "$work/table6.ini" > "$work/bad_metric.ini"
expect_fail "a claim's unknown metric" "bad_metric.ini: \[claim diff_arhit\] key 'metric': 'ar_hit' is not valid, arhit or others" \
    $bin table6 "$work/bad_metric.ini" --preset smoke --results "$work/results_bad" --plots "$work/plots_bad"
{ cat "$work/table6.ini"; printf '%s\n' "[claim extra]" "text = t" "gap = diff - transformer" "metric = valid" "lr = 1"; } > "$work/claim_key.ini"
expect_fail "a training key in a claim" "claim_key.ini:$(( $(wc -l < "$work/table6.ini") + 5 )): key 'lr': not a key of a claim" \
    $bin table6 "$work/claim_key.ini" --preset smoke --results "$work/results_bad" --plots "$work/plots_bad"
sed 's/^paper = 3.062 0.880 3.247$/paper = 3.062 high/' "$work/table6.ini" > "$work/bad_paper.ini"
expect_fail "a malformed paper value" "bad_paper.ini: \[row diff\] key 'paper': '3.062 high' is not three numbers" \
    $bin table6 "$work/bad_paper.ini" --preset smoke --results "$work/results_bad" --plots "$work/plots_bad"

# 5. one process per results folder and preset: a second table6 stops at once, naming the first
lock_table() { exec $bin table6 "$work/table6.ini" --preset smoke --results "$work/results_lock" --plots "$work/plots_lock"; }
lock_table > "$work/first.log" 2>&1 &
first=$!
for _ in $(seq 1 200); do [ -s "$work/results_lock/table6/smoke/.lock" ] && break; sleep 0.05; done
expect_fail "second table6 on one results folder" "table6 results folder '$work/results_lock/table6/smoke' is in use by another difftx process \(pid $first\)" \
    bash -c "$(declare -f lock_table); bin=$bin work=$work; lock_table"
wait $first
expect "the first finishes every row once" test "$(sqlite3 "$work/results_lock/registry.sqlite" "SELECT COUNT(*) FROM runs WHERE status = 'FINISHED'")" = $n_rows

# 6. a second preset in the same registry: every documented query (docs/registry.md) runs and
#    answers for its own preset only
{ cat "$work/table6.ini"; echo "[preset smoke2]"; sed -n '/^\[preset smoke\]$/,/^\[/p' "$work/table6.ini" | sed '1d;/^\[/d'; } > "$work/two_presets.ini"
$bin table6 "$work/two_presets.ini" --preset smoke2 --results "$work/results" --plots "$work/plots" > "$work/smoke2.log" 2>&1
expect "a second preset trains into the same registry" test "$(sql "SELECT COUNT(DISTINCT preset) FROM experiments")" = 2
expect "each preset keeps its own table" bash -c "grep -q 'Table 6 (preset smoke)' '$work/results/table6_smoke.md' && grep -q 'Table 6 (preset smoke2)' '$work/results/table6_smoke2.md'"
expect "each preset keeps its own figures" bash -c "test -s '$work/plots/table6_smoke.png' && test -s '$work/plots/table6_smoke2_curves.png'"
n=0
while IFS= read -r query; do
    n=$((n + 1))
    expect "documented query $n runs" sqlite3 -bail "$work/results/registry.sqlite" "$query" > "$work/query$n.out"
done < <(doc_queries)
expect "7 documented queries" test $n = 7
expect "the table query: $n_rows rows of one seed each" test "$(grep -c '|1|' "$work/query1.out")" = $n_rows
expect "the curve query: one curve of 3 points, not two presets' interleaved" test "$(wc -l < "$work/query2.out")" = 3

# 7. difftx eval: any checkpoint's Valid / AR-Hit / Others, equal to what the table recorded
t_ckpt=$work/results/table6/smoke/transformer/seed1000/checkpoint.h5
$bin eval "$t_ckpt" --windows 64 > "$work/eval.log" 2>&1
for key in valid arhit others; do
    want=$(printf '%.4f' "$(sql "SELECT e.value FROM evaluations e JOIN runs r ON r.id = e.run_id JOIN experiments x ON x.id = r.experiment_id WHERE x.preset = 'smoke' AND r.row = 'transformer' AND r.status = 'FINISHED' AND e.key = '$key'")")
    label=$(sed 's/arhit/AR-Hit/; s/others/Others/' <<<"$key")
    expect "difftx eval gives the recorded $key ($want)" grep -qE "(^| )$label $want( |$)" "$work/eval.log"
done
expect "difftx eval states its windows and the AR-Hit token count" grep -qE "^validation: the first 64 windows \(--windows\) of 64 tokens .*\(4096 tokens\)" "$work/eval.log"
$bin eval "$t_ckpt" --results "$work/results" > "$work/eval_default.log" 2>&1
expect "difftx eval defaults to the windows the table evaluated (its registry's)" \
    grep -qE "^validation: the first 64 windows \(the table's, as its registry records them\)" "$work/eval_default.log"
expect "and then gives the table's values" cmp -s <(grep '^valid ' "$work/eval.log") <(grep '^valid ' "$work/eval_default.log")
expect "difftx eval runs from another folder with data=" bash -c "cd /tmp && '$PWD/$bin' eval '$t_ckpt' data='$work/data' --windows 64 | grep -qE '^valid '"

# 8. difftx export: the weights alone in safetensors, every parameter once after the header
$bin export "$t_ckpt" "$work/transformer.safetensors" > "$work/export.log" 2>&1
params=$(sed -nE 's/^wrote .*: [0-9]+ tensors, ([0-9]+) parameters, from step 30 of .*/\1/p' "$work/export.log")
header=$(od -An -t u8 -N 8 "$work/transformer.safetensors" | tr -d ' ')
expect "export writes header and every parameter ($params)" test -n "$params" -a "$(stat -c %s "$work/transformer.safetensors")" = $((8 + header + 4 * params))
expect "the header names the config" bash -c "head -c $((8 + header)) '$work/transformer.safetensors' | grep -q '\"config\":\"attention = standard'"

# 9. difftx runs and compare over the table's registry
$bin runs --results "$work/results" --experiment table6 --preset smoke --status FINISHED > "$work/runs.log" 2>&1
expect "runs lists the $n_rows finished rows of preset smoke" grep -q "^$n_rows runs in $work/results/registry.sqlite" "$work/runs.log"
expect "runs shows steps, final losses and loss or gradient-norm spikes" grep -qE "^ +[0-9]+  table6 +smoke +diff +1000 FINISHED +30/30 +[0-9.]+ +[0-9.]+ +[0-9]+ +[-0-9]+  20" "$work/runs.log"
t_id=$(sql "SELECT r.id FROM runs r JOIN experiments x ON x.id = r.experiment_id WHERE x.preset = 'smoke' AND r.row = 'transformer' AND r.status = 'FINISHED'")
d_id=$(sql "SELECT r.id FROM runs r JOIN experiments x ON x.id = r.experiment_id WHERE x.preset = 'smoke' AND r.row = 'diff' AND r.status = 'FINISHED'")
$bin compare "$t_id" "$d_id" --results "$work/results" --out "$work/plots/compare.png" > "$work/compare.log" 2>&1
expect "compare names the differing switches" grep -qE "^attention +\| standard +\| diff" "$work/compare.log"
expect "compare leaves out what is the same" bash -c "! grep -qE '^(n_layer|lr|seq_len) ' '$work/compare.log'"
d_val=$(printf '%.4f' "$(sql "SELECT value FROM metrics WHERE run_id = $d_id AND key = 'val_loss' ORDER BY step DESC LIMIT 1")")
expect "compare shows the final validation loss ($d_val)" grep -qE "^final val loss +\| [0-9.]+ +\| $d_val" "$work/compare.log"
expect "compare draws the curves" is_png "$work/plots/compare.png"
expect "compare's data holds both runs' curves" test "$(grep -c '^"' "$work/results/compare.dat")" = 4
expect_fail "compare refuses an unknown run" "compare: no run 9999" $bin compare 9999 --results "$work/results" --out "$work/plots/none.png"
# lambda over training: each DIFF layer's lambda at the 3 evaluations (steps 10, 20, 30), and
# DIFF V2's per-token lambda as mean ± spread
v2_id=$(sql "SELECT id FROM runs WHERE row = 'diff2' AND status = 'FINISHED' ORDER BY id DESC LIMIT 1")
$bin lambda "$d_id" "$v2_id" --results "$work/results" --out "$work/plots/lambda.png" > "$work/lambda.log" 2>&1
expect "lambda prints each DIFF layer at each evaluation" bash -c "grep -q '^run $d_id (diff seed 1000, diff attention): lambda per layer' '$work/lambda.log' &&
    test \"\$(grep -cE '^ +[0-9]+ \| [0-9.]+ +\| [0-9.]+ *$' '$work/lambda.log')\" = 3"
expect "the DIFF lambdas are the registry's" test "$(sql "SELECT COUNT(*) FROM metrics WHERE run_id = $d_id AND key LIKE 'lambda_l%'")" = 6
expect "DIFF V2's per-token lambda: mean ± spread per layer" test "$(grep -cE '^ +[0-9]+ \| [0-9.]+ ± [0-9.]+ +\| [0-9.]+ ± [0-9.]+ *$' "$work/lambda.log")" = 3
expect "the lambda figure is drawn" test -s "$work/plots/lambda.png"
expect_fail "lambda refuses a run without lambda" "has standard attention, which has no lambda" $bin lambda "$t_id" --results "$work/results" --out "$work/plots/none.png"
# a figure never replaces the registry it is drawn from, nor anything but a regular file
reg_sum=$(sha256sum < "$work/results/registry.sqlite")
for fig in compare lambda; do
    expect_fail "$fig --out onto the registry is refused" "--out '$work/results/registry.sqlite' is the input" \
        $bin $fig "$d_id" --results "$work/results" --out "$work/results/registry.sqlite"
    expect_fail "$fig --out through another spelling of the registry is refused" "is the input" \
        $bin $fig "$d_id" --results "$work/results" --out "$work/results/../results/registry.sqlite"
done
expect "the registry is untouched" test "$(sha256sum < "$work/results/registry.sqlite")" = "$reg_sum"
mkfifo "$work/plots/fifo.png"
expect_fail "compare --out onto a FIFO is refused" "'$work/plots/fifo.png' exists and is not a regular file" \
    timeout 20 $bin compare "$d_id" --results "$work/results" --out "$work/plots/fifo.png"
expect "the FIFO is still a FIFO" test -p "$work/plots/fifo.png"
ln -s "$work/results/registry.sqlite" "$work/plots/link.png"
expect_fail "lambda --out onto a link to the registry is refused" "is the input" \
    $bin lambda "$d_id" --results "$work/results" --out "$work/plots/link.png"
# compare shows every key any listed run records: one recorded before a key existed lacks it
sqlite3 "$work/results/registry.sqlite" "CREATE TABLE saved_params AS SELECT * FROM params WHERE run_id = $t_id AND key = 'lambda_init';
    DELETE FROM params WHERE run_id = $t_id AND key = 'lambda_init'"
$bin compare "$t_id" "$d_id" --results "$work/results" --out "$work/plots/compare.png" > "$work/compare_missing.log" 2>&1
expect "compare shows a key the first run lacks" grep -qE "^lambda_init +\| \(not recorded\) +\| schedule" "$work/compare_missing.log"
sqlite3 "$work/results/registry.sqlite" "INSERT INTO params SELECT * FROM saved_params; DROP TABLE saved_params"
# a damaged registry is an error naming the file, never an empty one
cp "$work/results/registry.sqlite" "$work/damaged.sqlite"
mkdir -p "$work/damaged" && mv "$work/damaged.sqlite" "$work/damaged/registry.sqlite"
dd if=/dev/zero of="$work/damaged/registry.sqlite" bs=4096 seek=1 count=1 conv=notrunc 2>/dev/null
expect_fail "runs on a damaged registry fails naming it" "registry '$work/damaged/registry.sqlite'.*(malformed|corrupt|not a database)" \
    $bin runs --results "$work/damaged"

# 10. small and odd inputs: on a 300-token vocabulary no evaluation token is an AR-Hit token,
#     which the table states instead of failing its rows; one row that fails (its run folder
#     held by another process) leaves the table and its figures to go on without it. The data
#     comes as a key=value override after the recipe, applied to every row and recorded.
mkdir -p "$work/v300" && $bin prepare --vocab 300 "$work/v300/data" "$work/corpus" >/dev/null
held="$work/v300/results/table6/smoke/diff2/seed1000"
mkdir -p "$held"
exec 9>"$held/.lock"  # this shell holds the row's run-folder lock while the table runs
flock -x 9
$bin table6 "$work/table6.ini" --preset smoke --results "$work/v300/results" --plots "$work/v300/plots" data="$work/v300/data" > "$work/v300.log" 2>&1
rc=$?
exec 9>&-
v300_sql() { sqlite3 "$work/v300/results/registry.sqlite" "$1"; }
expect "rows without AR-Hit tokens are FINISHED, not FAILED" test "$(v300_sql "SELECT COUNT(*) FROM runs WHERE status = 'FINISHED'")" = $((n_rows - 1))
expect "the table states it" test "$(grep -c '| no AR-Hit tokens |' "$work/v300/results/table6_smoke.md")" = $((n_rows - 1))
expect "a claim on AR-Hit says there are no tokens" grep -q "DIFF beats Transformer on AR-Hit | -0.018 | n/a | n/a | - | - | n/a (no data) |" "$work/v300/results/table6_smoke.md"
expect "the failed row is said to be left out" grep -q "row diff2 seed 1000: the table goes on without it" "$work/v300.log"
expect "the table exits non-zero for the missing row (exit $rc)" test $rc -ne 0
expect "the failed row's cells are empty" grep -qE '^\| DIFF V2 \(not in paper\) \| 4 \| 16 \| ✗ \| 0 \| - \| - \| - \|' "$work/v300/results/table6_smoke.md"
expect "the override trained every row on its data, and the registry records it" \
    test "$(v300_sql "SELECT COUNT(*) FROM runs WHERE status = 'FINISHED' AND data_dir = '$work/v300/data' AND data_id LIKE 'tokenizer %'")" = $((n_rows - 1))
expect_fail "an override of what the rows differ in" "override 'attention=diff': the rows of .* differ in 'attention'" \
    $bin table6 "$work/table6.ini" --preset smoke --results "$work/refused" attention=diff
expect_fail "an override of a derived key" "override 'n_head=4': 'n_head' is derived for each row" \
    $bin table6 "$work/table6.ini" --preset smoke --results "$work/refused" n_head=4
# W9: a device (or precision) no row can run on here is refused once, naming the first row, before
# any row trains or anything is written
out=$($bin table6 "$work/table6.ini" --preset smoke --results "$work/refused_device" device=cuda 2>&1)
expect "a device this program cannot run is refused once, before any row, writing nothing" \
    bash -c "test \$(grep -c 'cannot run here' <<<\"\$1\") = 1 && grep -q 'row transformer: device .cuda. cannot run here' <<<\"\$1\" &&
             ! grep -q '^== training' <<<\"\$1\" && test ! -e '$work/refused_device'" _ "$out"
expect_fail "a stray word after the recipe" "'extra': expected key=value after the recipe" $bin table6 "$work/table6.ini" --preset smoke --results "$work/refused" extra
expect_fail "an override with an unknown key" "override 'dat=x': unknown key 'dat'; did you mean 'data'" $bin table6 "$work/table6.ini" --preset smoke --results "$work/refused" dat=x
expect "refused overrides train nothing" test ! -e "$work/refused/table6"
expect "and both figures are drawn" bash -c "$(declare -f is_png); is_png '$work/v300/plots/table6_smoke.png' && is_png '$work/v300/plots/table6_smoke_curves.png'"

# 11. the learning-rate study (experiments/lr_stability.ini): Table 6's presets through
#     presets_from, the Transformer and DIFF rows at 1x, 2x and 4x the preset's learning rate,
#     outputs of its own name, and the training-health table
sed "s#^presets_from = .*#presets_from = $work/table6.ini#" experiments/lr_stability.ini > "$work/lr_stability.ini"
t6_before=$(md5sum < "$work/results/table6_smoke.md")
$bin table6 "$work/lr_stability.ini" --preset smoke --results "$work/results" --plots "$work/plots" > "$work/lr.log" 2>&1
lr_run() { sql "SELECT r.id FROM runs r JOIN experiments x ON x.id = r.experiment_id WHERE x.name = 'lr_stability' AND r.row = '$1' AND r.status = 'FINISHED'"; }
expect "the lr study finishes its 6 rows as experiment lr_stability" test "$(sql "SELECT COUNT(*) FROM runs r JOIN experiments x ON x.id = r.experiment_id WHERE x.name = 'lr_stability' AND r.status = 'FINISHED'")" = 6
lr_of() { sql "SELECT instr(recipe_text, char(10) || 'lr = $2' || char(10)) > 0 AND instr(recipe_text, char(10) || 'lr_final = 0' || char(10)) > 0 FROM runs WHERE id = $(lr_run "$1")"; }
expect "rows train at the preset's lr (2e-3) times lr_scale: 1, 2, 4" \
    test "$(lr_of transformer_lr1 0.002)$(lr_of diff_lr2 0.004)$(lr_of transformer_lr4 0.008)$(lr_of diff_lr4 0.008)" = 1111
expect "its table and figures carry its name; Table 6's are untouched" bash -c "$(declare -f is_png); grep -q '^## Study lr_stability (Table 6.s presets and evaluation, preset smoke)' '$work/results/lr_stability_smoke.md' &&
    is_png '$work/plots/lr_stability_smoke.png' && test \"\$(md5sum < '$work/results/table6_smoke.md')\" = '$t6_before'"
expect "its run folders are its own" test -s "$work/results/lr_stability/smoke/diff_lr4/seed1000/checkpoint.h5"
expect "the health table: each row's lr, seeds finished, spikes and final training loss" \
    test "$(grep -cE '^\| (Transformer|DIFF), lr x[124] \| 0\.00[248] \| 1 of 1 \| [0-9]+ \| [0-9]+ \| [0-9]+\.[0-9]{3} \|$' "$work/results/lr_stability_smoke.md")" = 6
expect "only the claims about its own rows: DIFF against Transformer at each learning rate" bash -c "
    test \"\$(grep -c '^| DIFF beats Transformer at [124]x the learning rate (Valid) | n/a (not in the paper) | [-+]' '$work/results/lr_stability_smoke.md')\" = 3 &&
    ! grep -q 'DIFF beats Transformer overall' '$work/results/lr_stability_smoke.md' && ! grep -q 'learning rate' '$work/results/table6_smoke.md'"
# a hand-made case: two loss spikes and one gradient-norm spike written into DIFF lr x4's run; the
# rerun trains nothing and counts them, beside the run's last training loss from the registry
d4=$(lr_run diff_lr4)
sql "INSERT INTO metrics (run_id, key, step, tokens, value) VALUES ($d4, 'spike_loss', 12, 6144, 7.5), ($d4, 'spike_loss', 20, 10240, 6.1), ($d4, 'spike_grad_norm', 20, 10240, 8.0)"
final=$(printf '%.3f' "$(sql "SELECT value FROM metrics WHERE run_id = $d4 AND key = 'train_loss' ORDER BY step DESC LIMIT 1")")
$bin table6 "$work/lr_stability.ini" --preset smoke --results "$work/results" --plots "$work/plots" > "$work/lr_again.log" 2>&1
expect "the rerun trains nothing and counts 2 loss and 1 gradient-norm spike, final loss $final" bash -c "! grep -q '^== ' '$work/lr_again.log' &&
    grep -qF '| DIFF, lr x4 | 0.008 | 1 of 1 | 2 | 1 | $final |' '$work/results/lr_stability_smoke.md'"
# refused NAME PATTERN RECIPE: table6 on RECIPE stops at once with PATTERN
refused() { expect_fail "$1" "$2" $bin table6 "$3" --preset smoke --results "$work/refused" --plots "$work/refused"; }
sed 's/^lr_scale = 4$/lr_scale = 0/' "$work/lr_stability.ini" > "$work/lr_bad.ini"
refused "a non-positive lr_scale, naming the row" "lr_bad.ini: \[row transformer_lr4\] key 'lr_scale': '0' is not a positive number" "$work/lr_bad.ini"
sed '0,/^margin = 0.01$/s//margin = -0.01/' "$work/table6.ini" > "$work/margin_bad.ini"
refused "a claim's margin that is not a positive number, naming the claim" "margin_bad.ini: \[claim head_norm_transformer\] key 'margin': '-0.01' is not a positive number" "$work/margin_bad.ini"
sed 's/^study = lr_stability$/study = ..\/up/' "$work/lr_stability.ini" > "$work/lr_bad_study.ini"
refused "a study that is not a plain name" "key 'study': '../up' is not a name of 1 to 63 lowercase letters" "$work/lr_bad_study.ini"
{ echo "presets_from = $work/lr_stability.ini"; sed -n '/^\[row diff_lr1\]/,/^$/p' "$work/lr_stability.ini"; } > "$work/lr_nested.ini"
refused "presets_from one level only" "'presets_from' in a file that 'presets_from' names: one level only" "$work/lr_nested.ini"
{ sed -n '1,/^\[preset small\]/p' "$work/table6.ini" | sed '$d'; echo "study = inside"; } > "$work/study_in_preset.ini"
refused "study inside a preset is refused, not ignored" "unknown key 'study'" "$work/study_in_preset.ini"
long=$(printf 'diff%.0s' $(seq 16))  # 64 characters: one more than a name holds
sed "s/^\[row diff\]$/[row $long]/" "$work/table6.ini" > "$work/long_row.ini"
refused "a row name past the limit is refused saying the limit, never cut (W14)" "section \[row $long\]: a row name holds at most 63 characters, not 64" "$work/long_row.ini"
expect "the help lists the presets it takes from Table 6's recipe" bash -c "'$PWD/$bin' help table6 '$work/lr_stability.ini' 2>&1 | grep -qF 'presets of $work/lr_stability.ini: smoke, small, gpu124m, paper'"

sed 's/^study = lr_stability$/study = table6/' "$work/lr_stability.ini" > "$work/lr_as_table6.ini"
refused "a study named table6 is refused: it would write over Table 6's table" "key 'study': 'table6' is Table 6's own study" "$work/lr_as_table6.ini"
sed 's/^lr_scale = 4$/lr_scale = 0x10/' "$work/lr_stability.ini" > "$work/lr_hex.ini"
refused "a hexadecimal lr_scale is refused, not read as 16" "key 'lr_scale': '0x10' is not a positive number" "$work/lr_hex.ini"
{ cat "$work/lr_stability.ini"; printf '%s\n' "[preset smoke]" "steps = 3"; } > "$work/lr_own_smoke.ini"
refused "a recipe's own preset of a name its presets_from file defines is refused, not ignored" \
    "lr_own_smoke.ini:[0-9]+: section \[preset smoke\]: a preset of this name is defined already" "$work/lr_own_smoke.ini"

# On a CPU model OpenBLAS does not know, every command restarts onto the kernel the CPU's
# instructions allow and self-checks it (tests/fake_openblas.c makes any CPU take that path). A
# process whose OpenMP team has run cannot fork a worker that computes (the child waits forever
# in its first parallel product), so the restarted program's self-check runs on one thread and the
# runner itself never computes: a table trains its rows in forked workers on two threads, and a
# rerun that evaluates finished runs again (another eval_windows) and trains new seeds finishes.
# (Not under the sanitizers, whose runtime must be the first library loaded.)
if [ "$(uname -m)" = x86_64 ] && [ "${BUILD:-build}" != build/san ]; then
    unknown_cpu() { env -u OPENBLAS_CORETYPE LD_PRELOAD="$PWD/${BUILD:-build}/fake_openblas.so" OMP_NUM_THREADS=2 "$@"; }
    unknown_cpu timeout 300 $bin table6 "$work/table6.ini" --preset smoke --results "$work/restart" --plots "$work/restart" > "$work/restart.log" 2>&1
    rc=$?
    expect "the restarted program trains the table in forked workers on 2 threads (exit $rc, 124: hung)" \
        bash -c "test $rc = 0 && grep -q '^OpenBLAS kernel .*OpenBLAS chose Prescott' '$work/restart.log' && test \$(grep -c '^== ' '$work/restart.log') = $n_rows"
    sed 's/^eval_windows = 64$/eval_windows = 32/' "$work/table6.ini" > "$work/table6_windows.ini"
    unknown_cpu timeout 300 $bin table6 "$work/table6_windows.ini" --preset smoke --seeds 2 --results "$work/restart" --plots "$work/restart" \
        > "$work/restart2.log" 2>&1
    rc=$?
    expect "a rerun evaluating finished runs again, then training new seeds in forked workers, finishes (exit $rc)" \
        bash -c "test $rc = 0 && test \$(grep -c '^== .* seed 1001' '$work/restart2.log') = $n_rows && test \$(grep -c '^== .* seed 1000' '$work/restart2.log') = 0"
fi

# The gap against training tokens (experiments/scaling.ini, `make scaling PRESET=smoke SEEDS=3` on
# this corpus): 3 seeds of both rows, the gap at log-spaced validation points with the t-interval
# (the smoke preset validates 12 times, evenly in steps, so every point is reported: the nearest
# point to each log-spaced target alone would report 9, the early targets sharing points),
# and at the first point the gap, its interval and each seed's difference recomputed from the
# registry's validation losses (t(0.975, 2) = 4.302653); the gaps' figure and the loss curves,
# every figure titled by the study's name and the gaps' figure given the training split's tokens
# for its one-pass mark (a gnuplot in front of the real one keeps the titles and the numbers)
mkdir -p "$work/spy"
printf '#!/bin/sh\ncat strings.tsv >> "$SPY_TITLES" && printf "%%s\\n" "$2" >> "$SPY_NUMBERS" && exec "$SPY_GNUPLOT" "$@"\n' > "$work/spy/gnuplot"
chmod +x "$work/spy/gnuplot"
SPY_TITLES=$work/titles.tsv SPY_NUMBERS=$work/numbers.txt SPY_GNUPLOT=$(command -v gnuplot) PATH="$work/spy:$PATH" $bin table6 experiments/scaling.ini --preset smoke --seeds 3 --results "$work/scaling" \
    --plots "$work/scaling" data="$work/data" > "$work/scaling.log" 2>&1
expect "scaling smoke with 3 seeds exits 0, its gaps' figure and loss curves drawn" \
    bash -c "test $? = 0 && head -c 4 '$work/scaling/scaling_smoke_gaps.png' | grep -q PNG && head -c 4 '$work/scaling/scaling_smoke_curves.png' | grep -q PNG"
expect "scaling: its 4 figures' titles name the study, not Table 6 ($(grep -cE '^(title_text|[a-z]+_title)'$'\t' "$work/titles.tsv") titles)" \
    test "$(grep -E '^(title_text|[a-z]+_title)'$'\t' "$work/titles.tsv" | grep -c $'\tscaling, preset smoke: ')" = 4 -a \
         "$(grep -cE '^(title_text|[a-z]+_title)'$'\t' "$work/titles.tsv")" = 4
split=$(sed -n "s/.*over the training split's \([0-9]*\) tokens\..*/\1/p" "$work/scaling/scaling_smoke.md")
expect "scaling: the gaps' figure marks one pass over the training split (${split:-no} tokens)" \
    bash -c "test -n '$split' && grep '\\(^\\|; \\)pairs=1;' '$work/numbers.txt' | grep -qE '(^|; )pass_tokens=$split(;|\$)'"
# the smoke runs stop short of one pass over this corpus, so the mark itself is drawn here, on
# their data, once inside the runs' tokens and once past them: the two figures differ
mkdir -p "$work/pass" && cp plots/gap_curve.gp plots/strings.gp "$work/pass/" && printf 'title_text\tpass\n' > "$work/pass/strings.tsv"
for at in 10000 1e12; do
    (cd "$work/pass" && gnuplot -e "STRINGS=1; pairs=1; pass_tokens=$at; gaps='../scaling/scaling_smoke_gaps.dat'; out_gaps='$at.png'" gap_curve.gp)
done
expect "scaling: the one-pass mark is drawn inside the runs' tokens" \
    bash -c "head -c 4 '$work/pass/10000.png' | grep -q PNG && head -c 4 '$work/pass/1e12.png' | grep -q PNG && ! cmp -s '$work/pass/10000.png' '$work/pass/1e12.png'"
expect "scaling: its parameter counts are headed by the study's name, not Table 6" \
    grep -q '^scaling, preset smoke, 3 seed(s): parameters per row$' "$work/scaling.log"
expect "scaling: all 12 validation points of DIFF minus the Transformer, none from 3 seeds a verdict" \
    test "$(grep -cE '^\| DIFF 2x16 GN − Transformer 4x16 \| [0-9]+ \| [0-9.]+ \| [-+0-9.]+ \| \[[-+0-9.]+, [-+0-9.]+\] \| [-+0-9.]+, [-+0-9.]+, [-+0-9.]+ \| [0-3] of 3 seeds .* \| n too small for a verdict \|$' "$work/scaling/scaling_smoke.md")" = 12
first=$(sqlite3 "$work/scaling/registry.sqlite" "SELECT d.value - t.value FROM metrics d JOIN runs rd ON rd.id = d.run_id JOIN runs rt
    ON rt.seed = rd.seed AND rt.experiment_id = rd.experiment_id JOIN metrics t ON t.run_id = rt.id AND t.key = d.key AND t.step = d.step
    WHERE rd.row = 'diff' AND rt.row = 'transformer' AND rd.status = 'FINISHED' AND rt.status = 'FINISHED' AND d.key = 'val_loss'
    AND d.step = (SELECT min(step) FROM metrics WHERE key = 'val_loss') ORDER BY rd.seed" |
    awk '{v[NR] = $1; m += $1} END {m /= NR; for (i = 1; i <= NR; i++) s += (v[i] - m)^2; h = 4.302653 * sqrt(s / (NR - 1) / NR);
        printf "%+.4f | [%+.4f, %+.4f] | %+.4f, %+.4f, %+.4f", m, m - h, m + h, v[1], v[2], v[3]}')
expect "scaling: the first point's gap, t-interval and per-seed differences are the registry's ($first)" \
    grep -qE "^\| DIFF 2x16 GN − Transformer 4x16 \| 2560 \| [0-9.]+ \| $(sed 's/[][|+.]/\\&/g' <<<"$first") \|" "$work/scaling/scaling_smoke.md"

# last, as it adds an attempt: a rerun after a row's checkpoint is gone trains that row alone
# again, as a new attempt
rm "$ckpt"
run_table > "$work/lost.log" 2>&1
expect "a row whose checkpoint is gone is said not to count and trained again" bash -c "grep -q \"^warning: run [0-9]* (transformer, seed 1000) of .* finished, but its checkpoint is gone: '$ckpt'\" '$work/lost.log' && test \"\$(grep -c '^== ' '$work/lost.log')\" = 1 && grep -q '^== training transformer, seed 1000' '$work/lost.log' && test -s '$ckpt'"
expect "the row's new attempt is FINISHED" test "$(sql "SELECT attempt || status FROM runs WHERE row = 'transformer' ORDER BY attempt DESC LIMIT 1")" = 3FINISHED

summary
