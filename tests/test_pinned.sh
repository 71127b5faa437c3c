#!/usr/bin/env bash
# The numbers of each experiment's smallest preset (Table 6 smoke; the needle training with Table 2,
# Figure 5 and Table 3; Figure 8; Table 5), as the two runs above leave them in their registries,
# against `tests/golden/*.txt` (820 values: evaluations, final losses, episode outcomes). Each
# golden file names the machine facts that decide bitwise equality (threads, OpenBLAS's kernel, CPU
# model, the instruction sets the build targets and the CPU offers, compiler, build; a build without
# AVX-512, or glibc's libm kept off FMA, moves every Table 6 smoke row in its last digits on the
# same CPU): where they match, every value must equal its golden one to all 17 digits; elsewhere
# losses and statistics are held to 1e-3 relative and accuracies and counts to 0.1, and the test
# says it checked with tolerance. OpenBLAS's kernel is the fact that most often differs, and `make
# test` removes it: the three tests run under the golden files' kernel (`OPENBLAS_CORETYPE`)
# wherever the CPU has that kernel's instructions (AVX2 with FMA for the files' Zen, written on a
# CPU-family-25 EPYC), so the check is bitwise on a machine of the same facts whatever kernel
# OpenBLAS or the environment would pick (when the files were Cooperlake's, a CPU-family-26 EPYC VM
# whose environment set `Haswell` matched all of them bitwise). A one-ulp change of RMSNorm's scale
# fails all four files. A change to a golden number is a decision: `tests/test_pinned.sh --update`
# rewrites the files, committed with the reason. Run after test_table6.sh and test_needle.sh
# (tests/run.sh does).
set -u
cd "$(dirname "$0")/.."
source tests/harness.sh
BUILD=${BUILD:-build}
t6=build/test_table6/results/registry.sqlite
nd=build/test_needle_sh/results/registry.sqlite
for db in "$t6" "$nd"; do [ -f "$db" ] || { echo "no registry $db: run tests/test_table6.sh and tests/test_needle.sh first"; exit 1; }; done
facts="threads=${OMP_NUM_THREADS:-2}; $("$BUILD/write_fixture" machine); build=$BUILD"

# key<TAB>value lines, sorted: the evaluations of FINISHED runs (timings left out), each run's
# final losses (when FINALS is 1) and the needle tasks' episode outcomes per task; of a row
# trained again (test_table6.sh deletes a checkpoint), the last FINISHED attempt
values() {  # DB RUN-FILTER EVALUATION-FILTER EPISODE-FILTER FINALS
    local last="r.attempt = (SELECT MAX(q.attempt) FROM runs q WHERE q.experiment_id = r.experiment_id AND q.row = r.row
                             AND q.seed = r.seed AND q.status = 'FINISHED')"
    sqlite3 -separator $'\t' "$1" "
      SELECT x.name || '/' || x.preset || '/' || r.row || '/' || r.seed || '/' || e.key, printf('%.17g', e.value)
        FROM evaluations e JOIN runs r ON r.id = e.run_id JOIN experiments x ON x.id = r.experiment_id
        WHERE r.status = 'FINISHED' AND $last AND $2 AND $3 AND e.key NOT IN ('train_seconds', 'tokens_per_second')
      UNION ALL
      SELECT x.name || '/' || x.preset || '/' || r.row || '/' || r.seed || '/final_' || m.key, printf('%.17g', m.value)
        FROM metrics m JOIN runs r ON r.id = m.run_id JOIN experiments x ON x.id = r.experiment_id
        WHERE r.status = 'FINISHED' AND $last AND $2 AND $5 AND m.key IN ('train_loss', 'val_loss')
          AND m.step = (SELECT MAX(n.step) FROM metrics n WHERE n.run_id = m.run_id AND n.key = m.key)
      UNION ALL
      SELECT x.name || '/' || x.preset || '/' || r.row || '/' || r.seed || '/' || p.task || '_' || k.what,
             printf('%.17g', CASE k.what WHEN 'correct' THEN SUM(p.correct) WHEN 'answer' THEN AVG(p.answer) ELSE AVG(p.noise) END)
        FROM episodes p JOIN runs r ON r.id = p.run_id JOIN experiments x ON x.id = r.experiment_id
          JOIN (SELECT 'correct' AS what UNION SELECT 'answer' UNION SELECT 'noise') k
        WHERE r.status = 'FINISHED' AND $last AND $2 AND $4
        GROUP BY r.id, p.task, k.what
      ORDER BY 1"
}
declare -A query
query[table6_smoke]="$t6|x.name = 'table6' AND x.preset = 'smoke'|1|0|1"
query[needle_smoke]="$nd|x.name = 'needle' AND x.preset = 'smoke'|e.key NOT LIKE 'fig8%' AND e.key NOT LIKE 'table5%'|p.task NOT LIKE 'fig8%'|1"
query[fig8_smoke]="$nd|x.name = 'needle' AND x.preset = 'smoke'|e.key LIKE 'fig8%'|p.task LIKE 'fig8%'|0"
query[table5_smoke]="$nd|x.preset = 'smoke'|e.key LIKE 'table5%'|0|0"

mkdir -p build/pinned tests/golden
for name in table6_smoke needle_smoke fig8_smoke table5_smoke; do
    IFS='|' read -r db runs evaluations episodes finals <<<"${query[$name]}"
    values "$db" "$runs" "$evaluations" "$episodes" "$finals" > "build/pinned/$name.txt" || { echo "cannot read $db"; exit 1; }
    golden=tests/golden/$name.txt
    if [ "${1:-}" = --update ]; then
        { echo "# machine: $facts"; cat "build/pinned/$name.txt"; } > "$golden"
        echo "updated $golden ($(wc -l < "build/pinned/$name.txt") values)"
        continue
    fi
    expect "$name: the golden file exists" test -f "$golden"
    [ -f "$golden" ] || continue
    pinned_facts=$(sed -n 's/^# machine: //p' "$golden")
    expect "$name: the same values are measured ($(wc -l < "build/pinned/$name.txt") of them)" \
        test "$(grep -v '^#' "$golden" | cut -f1)" = "$(cut -f1 "build/pinned/$name.txt")"
    if [ "$pinned_facts" = "$facts" ]; then
        diff=$(diff <(grep -v '^#' "$golden") "build/pinned/$name.txt" | head -6)
        expect "$name: every value equals the golden one bitwise (same machine facts)${diff:+: $diff}" test -z "$diff"
    else
        # another machine: losses and statistics within 1e-3 relative, accuracies and counts
        # within 0.1 (of the unit they are in) absolute
        worst=$(paste <(grep -v '^#' "$golden") "build/pinned/$name.txt" | awk -F'\t' '
            { a = $2 + 0; b = $4 + 0; d = a - b; if (d < 0) d = -d
              if ($1 ~ /(accuracy|retrieval|correct|fraction|copy_score)/) tol = 0.1; else tol = 1e-3 * (a < 0 ? -a : a) + 1e-12
              if (d > tol) { print $1 " " $2 " vs " $4; exit } }')
        echo "   $name: machine differs from the golden file's (pinned: $pinned_facts; here: $facts): tolerance check"
        expect "$name: every value within tolerance of the golden one${worst:+ (not: $worst)}" test -z "$worst"
    fi
done
[ "${1:-}" = --update ] && exit 0
summary
