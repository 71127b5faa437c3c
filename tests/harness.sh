# Sourced by the shell tests: counters, checks and the closing "N passed, M failed" line.
passed=0 failed=0

expect() {  # expect NAME COMMAND...: COMMAND must succeed
    local name=$1
    shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $name"; fi
}

# expect_fail NAME PATTERN CMD...: CMD must exit non-zero and print PATTERN (grep -E) on stderr
expect_fail() {
    local name=$1 pattern=$2
    shift 2
    local err rc
    err=$("$@" 2>&1 >/dev/null)
    rc=$?
    if [ $rc -ne 0 ] && grep -qE -- "$pattern" <<<"$err"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL $name: exit $rc, stderr: $err"
    fi
}

summary() {  # prints the totals; the exit status says whether all passed
    echo "$passed passed, $failed failed"
    [ $failed -eq 0 ]
}

# doc_queries: the SQL statements of docs/registry.md's query block, one per line, with the
# presets of the examples ('small', 'default') read as the tests' 'smoke'
doc_queries() {
    sed -n '/^```sql/,/^```/p' docs/registry.md | sed '1d;$d' | grep -v '^--' | tr '\n' ' ' | tr ';' '\n' |
        sed -E "s/'(small|default)'/'smoke'/g; s/^ +//" | grep -v '^$'
}

# prepare_table6_corpus: $work/data, prepared from 60 documents with enough validation text for
# table6's smoke preset (64 windows of 64 tokens); needs $bin and $work
prepare_table6_corpus() {
    mkdir -p "$work/corpus"
    for d in $(seq -w 0 59); do
        for i in $(seq 1 150); do echo "Record $d, entry $i: the $((i * 7 % 13)) ships sailed past harbour $((10#$d % 5)) at dawn."; done > "$work/corpus/doc$d.txt"
    done
    $bin prepare --vocab 400 "$work/data" "$work/corpus" >/dev/null || { echo "prepare failed"; exit 1; }
}
