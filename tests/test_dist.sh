#!/usr/bin/env bash
# Data-parallel training on 2 ranks (`mpirun --oversubscribe`) against 1 rank with the same global
# batch (within 1e-6 relative), a batch 3 ranks cannot split refused, a rank killed mid-run taking
# the job down and the run resumed on 2 ranks (bitwise) and on 1 (within 1e-6), `table6 --preset
# smoke` on 2 ranks equal to one process's table, an older registry migrated.
set -u
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/difftx
work=$PWD/build/test_dist
rm -rf "$work" && mkdir -p "$work/corpus"
source tests/harness.sh
if ! command -v mpirun >/dev/null || ! ldd "$bin" | grep -q libmpi; then
    echo "difftx was built without MPI (NO_MPI=1): nothing to test"
    expect_fail "an MPI-less program refuses to run under mpirun" "built without MPI" env OMPI_COMM_WORLD_SIZE=2 "$bin" help
    summary
    exit
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# leak checking stays off under mpirun: a sanitizer build would report MPI's own allocations
mpi() { ASAN_OPTIONS=detect_leaks=0 timeout 120 mpirun -np "$1" --oversubscribe "${@:2}"; }

prepare_table6_corpus
tiny="data=$work/data attention=diff n_layer=2 d_model=64 n_head=2 head_dim=16 seq_len=64 eval_batches=4 warmup_steps=5 log_every=10"

# largest relative difference between two logs' losses, row by row (same rows required)
max_rel_diff() {
    paste -d'|' "$1" "$2" | awk -F'|' 'NR > 1 { split($1, a, "\t"); split($2, b, "\t");
        if (a[1] != b[1] || a[2] != b[2]) { print "mismatch"; exit }
        d = a[4] - b[4]; if (d < 0) d = -d; r = d / a[4]; if (r > m) m = r; n++ }
        END { if (n == 0) print "empty"; else printf "%.3g\n", m }'
}
within() { awk -v x="$1" -v tol="$2" 'BEGIN { exit !(x != "" && x + 0 == x && x <= tol) }'; }

# 1. the same global batch on 1 and 2 ranks: split within a micro-batch (batch_size 8 ->
#    4 rows per rank) and across micro-batches (grad_accum 2 -> one micro-batch per rank)
for split in "batch_size=8 grad_accum=1" "batch_size=4 grad_accum=2"; do
    name=${split// /_}
    args="$tiny $split steps=40 eval_every=20 checkpoint_every=20"
    $bin train --results "$work/reg" experiments/default.ini $args out=$work/one_$name >/dev/null
    mpi 2 $bin train --results "$work/reg" experiments/default.ini $args out=$work/two_$name > "$work/two_$name.log" 2>&1
    expect "2 ranks ($split) exit 0" test $? -eq 0
    diff=$(max_rel_diff "$work/one_$name/log.tsv" "$work/two_$name/log.tsv")
    echo "   1 vs 2 ranks ($split): 40 steps and 2 validations, largest relative loss difference $diff"
    expect "2 ranks ($split) give 1 rank's losses within 1e-6 (got $diff)" within "$diff" 1e-6
    expect "2 ranks ($split) log 40 steps and 2 validations" test "$(wc -l < "$work/two_$name/log.tsv")" = 43
    expect "2 ranks ($split): rank 0 alone prints" test "$(grep -c "^step    40/40" "$work/two_$name.log")" = 1
done
expect "the rank count is stated" grep -q "2 ranks x 1 micro-batches of 4 rows" "$work/two_batch_size=8_grad_accum=1.log"

# 2. a global batch that does not split is refused by every rank, without a hang
expect_fail "3 ranks cannot split 8 rows" "8 rows per step do not split evenly across 3 ranks" \
    mpi 3 $bin train --results "$work/reg" experiments/default.ini $tiny batch_size=8 steps=4 out=$work/three
expect "the refused job records no run (no RUNNING row)" test "$(sqlite3 "$work/reg/registry.sqlite" "SELECT COUNT(*) FROM runs WHERE out_dir = '$work/three'")" = 0

# 3. a rank killed mid-run takes the job down; the run resumes exactly where it stopped
long="$tiny batch_size=8 steps=400 eval_every=100 checkpoint_every=25"
mpi 2 $bin train --results "$work/reg" experiments/default.ini $long out=$work/nonstop >/dev/null 2>&1
mpi 2 $bin train --results "$work/reg" experiments/default.ini $long out=$work/killed > "$work/killed.log" 2>&1 &
job=$!
ckpt=$work/killed/checkpoint.h5
for _ in $(seq 1 300); do [ -f "$ckpt" ] && break; sleep 0.05; done
follower=""
for pid in $(pgrep -f "difftx train .*out=$work/killed"); do
    grep -qz '^OMPI_COMM_WORLD_RANK=1$' "/proc/$pid/environ" 2>/dev/null && follower=$pid
done
expect "rank 1 found while running" test -n "$follower"
start=$SECONDS
kill -KILL $follower
wait $job
rc=$?
expect "the job fails when a rank is killed (exit $rc)" test $rc -ne 0
expect "the job goes down within 30 s" test $((SECONDS - start)) -lt 30
expect "the launcher names the dead rank" grep -qiE "rank 1 .*(killed|signal 9)|signal 9 \(Killed\)" "$work/killed.log"
expect "killed before the end" bash -c "! grep -qP '^val\t400\t' '$work/killed/log.tsv'"
cp -r "$work/killed" "$work/killed_one"
mpi 2 $bin train --results "$work/reg" experiments/default.ini $long out=$work/killed > "$work/resumed.log" 2>&1
expect "resumed with 2 ranks" grep -q "resuming $ckpt from step" "$work/resumed.log"
expect "resumed run logs exactly the non-stop run's losses" cmp -s "$work/nonstop/log.tsv" "$work/killed/log.tsv"
$bin train --results "$work/reg" experiments/default.ini $long out=$work/killed_one > "$work/resumed_one.log" 2>&1
expect "a 2-rank run resumes on 1 rank" grep -q "resuming .*killed_one/checkpoint.h5 from step" "$work/resumed_one.log"
d=$(max_rel_diff "$work/nonstop/log.tsv" "$work/killed_one/log.tsv")
expect "resumed on 1 rank: the non-stop run's losses within 1e-6 (got $d)" within "$d" 1e-6

# 4. table6 under mpirun: every row trained by both ranks, the table equal to one process's
sed "s#^data = .*#data = $work/data#" experiments/table6.ini > "$work/table6.ini"
n_rows=$(grep -c '^\[row ' experiments/table6.ini)
table() { $bin table6 "$work/table6.ini" --preset smoke --results "$work/$1" --plots "$work/plots_$1"; }
table one > "$work/table_one.log" 2>&1
mpi 2 $bin table6 "$work/table6.ini" --preset smoke --results "$work/two" --plots "$work/plots_two" > "$work/table_two.log" 2>&1
expect "table6 on 2 ranks exits 0" test $? -eq 0
sql() { sqlite3 "$work/$1/registry.sqlite" "$2"; }
expect "all $n_rows rows FINISHED on 2 ranks" test "$(sql two "SELECT COUNT(*) FROM runs WHERE status = 'FINISHED' AND ranks = 2")" = $n_rows
expect "the 2-rank table equals the 1-rank table" cmp -s "$work/one/table6_smoke.md" "$work/two/table6_smoke.md"
for row in transformer diff; do
    d=$(max_rel_diff "$work/one/table6/smoke/$row/seed1000/log.tsv" "$work/two/table6/smoke/$row/seed1000/log.tsv")
    expect "table6 row $row: 2 ranks within 1e-6 of 1 (got $d)" within "$d" 1e-6
done
# a registry from before the ranks column is migrated, its runs counted as 1 rank
sql one "ALTER TABLE runs DROP COLUMN ranks; PRAGMA user_version = 0"
table one > "$work/table_again.log" 2>&1
again_rc=$?
expect "an old registry is migrated" test "$(sql one "SELECT COUNT(*) FROM runs WHERE ranks = 1")" = $n_rows
expect "a migrated registry trains nothing again: exit 0, every row found finished, the table written" \
    bash -c "test $again_rc = 0 && ! grep -q '^== ' '$work/table_again.log' &&
             test \"\$(grep -c ', seed [0-9]*: already finished (run [0-9]*)$' '$work/table_again.log')\" = $n_rows &&
             grep -q '^wrote .*table6_smoke.md' '$work/table_again.log'"
summary
