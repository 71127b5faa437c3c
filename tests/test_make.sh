#!/usr/bin/env bash
# The Makefile plans no surprise work: after a build, with the corpus prepared, `make -n table6`
# plans the table alone, neither a relink nor a corpus preparation, even when the program is
# newer than the corpus (the corpus depends on its sources, not on the program). Where no corpus
# is prepared (a clean clone), a stand-in train.bin is made for the check and removed on every
# exit, an interrupted one included: a stand-in left behind, newer than its sources, would make
# `make` plan training on an empty corpus. That is checked too, by stopping a second copy of this
# script with SIGTERM while its stand-in is in place (TEST_MAKE_HOLD makes it wait there).
# Then every `make` command the README and docs/ show is run as a user types it in a copy of the
# tracked files (a clean clone's tree, with this checkout's edits): `make help` for real, the
# others as `make -n` (they train for minutes to hours), each of which must plan without error;
# `make CUDA=1` and `make gpu-bundle` where no nvcc is found must say so. A changed header
# rebuilds the objects that include it and no others (the compiler's -MMD lists). `make check`
# plans the unit programs alone, and test_backend_ops --op runs one group of operations.
set -u
cd "$(dirname "$0")/.."
source tests/harness.sh
unset MAKEFLAGS MFLAGS MAKELEVEL  # as a user types it, not as the make running the tests
made=""
remove_stand_in() {
    case $made in
        dir) rm -rf data/default ;;
        file) rm -f data/default/train.bin ;;
    esac
    made=""
}
trap remove_stand_in EXIT
trap 'exit 143' TERM INT HUP  # through the EXIT trap
if [ ! -e data/default/train.bin ]; then
    if [ -d data/default ]; then made=file; else made=dir; fi
    mkdir -p data/default
    : > data/default/train.bin
    touch -d "@$(( $(stat -c %Y data/fetch_corpus.sh) + 1 ))" data/default/train.bin  # newer than its source only
    if [ -n "${TEST_MAKE_HOLD:-}" ]; then
        sleep 60 &
        wait $!
        exit 0
    fi
fi
plan=$(make --no-print-directory -n table6 2>&1)
expect "make -n table6 after a build plans the table only (plan: $(tr '\n' ';' <<<"$plan"))" \
    test "$(grep -cvE '^build/difftx table6 experiments/table6.ini --preset [a-z0-9]+ --seeds [0-9]+ device=cpu$' <<<"$plan")" = 0
plan=$(make --no-print-directory -n -W build/difftx data/default/train.bin 2>&1)
expect "a newer program does not prepare the corpus again ($(tr '\n' ';' <<<"$plan"))" grep -qE "is up to date|Nothing to be done" <<<"$plan"
expect "make -q says the program is up to date" make -q build/difftx
plan=$(make --no-print-directory -n -W data/tokenizer.h build/difftx 2>&1)
expect "a changed header rebuilds the objects that include it (data/tokenizer.h: tokenizer.o)" \
    grep -q -- "-o build/obj/data/tokenizer.o " <<<"$plan"
expect "and no other (data/tokenizer.h: nothing of model/ rebuilt; plan: $(grep -o -- '-o build/obj/[^ ]*' <<<"$plan" | tr '\n' ' '))" \
    test -z "$(grep -- "-o build/obj/model/" <<<"$plan")"
if [ -n "$made" ]; then
    remove_stand_in
    TEST_MAKE_HOLD=1 bash tests/test_make.sh > /dev/null 2>&1 &
    held=$!
    deadline=$((SECONDS + 30))
    while [ ! -e data/default/train.bin ] && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
    kill -TERM $held
    wait $held
    rc=$?
    expect "a stopped check leaves no stand-in corpus (exit $rc)" test $rc = 143 -a ! -e data/default/train.bin
fi

# every documented make command, in a clean tree
documented_make_commands() {
    {
        grep -ohE '`make( [^`]*)?`' README.md docs/*.md | tr -d '`'
        grep -hE '^ *make( |$)' README.md docs/*.md | sed 's/ *#.*//'
    } | while read -r line; do
        # `make table2 | fig5 | table3` names three commands
        local first=${line%% | *} rest=""
        echo "$first"
        [[ $line == *" | "* ]] && rest=${line#* | }
        while [ -n "$rest" ]; do
            echo "make ${rest%% | *}"
            [[ $rest == *" | "* ]] && rest=${rest#* | } || rest=""
        done
    done | sed 's/  */ /g; s/ $//' | sort -u
}
clean=$PWD/build/test_make_clean
rm -rf "$clean" && mkdir -p "$clean"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$clean"
n=0
while read -r command; do
    n=$((n + 1))
    read -ra words <<<"${command#make}"  # no shell sees the line: its words are make's arguments
    if [ "$command" = "make help" ]; then
        expect "documented: '$command' runs" bash -c "cd '$clean' && make --no-print-directory help > /dev/null"
    elif [[ " ${words[*]} " == *" CUDA=1 "* || " ${words[*]} " == *" gpu-bundle "* ]] && [ ! -x "${CUDA_HOME:-/nonexistent}/bin/nvcc" ] && ! command -v nvcc > /dev/null; then
        out=$(cd "$clean" && make --no-print-directory -n "${words[@]}" 2>&1)
        rc=$?
        expect "documented: '$command' without nvcc stops and says so (exit $rc)" bash -c 'test "$1" != 0 && grep -q "no nvcc found" <<<"$2"' _ "$rc" "$out"
    else
        out=$(cd "$clean" && make --no-print-directory -n "${words[@]}" 2>&1)
        rc=$?
        for word in "${words[@]}"; do  # a preset it names is one its recipe has
            case $word in
                PRESET=*) expect "documented: '$command' names a preset of table6.ini" grep -qx "\[preset ${word#PRESET=}\]" experiments/table6.ini ;;
                NEEDLE_PRESET=*) expect "documented: '$command' names a preset of needle.ini" grep -qx "\[preset ${word#NEEDLE_PRESET=}\]" experiments/needle.ini ;;
            esac
        done
        expect "documented: '$command' plans without error ($(grep -m1 -E 'No rule|\*\*\*|rror' <<<"$out"))" test "$rc" = 0
    fi
done < <(documented_make_commands)
expect "the README and docs show at least 30 make commands (found $n)" test "$n" -ge 30

# The fast loop: make check runs the unit programs alone (tests/run.sh --check), test_backend_ops
# at its small shapes; test_backend_ops --op runs one group of operations
plan=$(make --no-print-directory -n check 2>&1)
expect "make check runs the unit programs through run.sh --check, test_checkpoint left out" \
    bash -c 'grep -q "tests/run.sh --check .*test_backend_ops" <<<"$1" && ! grep -q test_checkpoint <<<"$1"' _ "$plan"
out=$(tests/run.sh --check test_blas_kernel 2>&1)
expect "run.sh --check runs only the programs named and totals them" \
    bash -c 'test "$(grep -c "^== " <<<"$1")" = 1 && grep -qE "^[0-9]+ passed, 0 failed$" <<<"$1"' _ "$out"
# a check a test cannot run on this machine (a "skipped: " line) is listed at the end, apart
# from the counts: never a silent pass
fake=$(mktemp -d) && printf '#!/bin/sh\necho "skipped: the widget checks: no widget here"\necho "1 passed, 0 failed"\n' > "$fake/test_fake"
chmod +x "$fake/test_fake"
out=$(BUILD="$fake" tests/run.sh --check test_fake 2>&1)
expect "run.sh lists the checks a test skipped, not counted" \
    bash -c 'grep -qx "skipped on this machine (not counted):" <<<"$1" && grep -qx "  test_fake: the widget checks: no widget here" <<<"$1" && test "$(tail -1 <<<"$1")" = "1 passed, 0 failed"' _ "$out"
rm -rf "$fake"
out=$(${BUILD:-build}/test_backend_ops --op rope 2>&1)
expect "test_backend_ops --op rope runs the rope group alone ($(grep -m1 '^backend cpu' <<<"$out"))" \
    grep -qE "^backend cpu: [0-9] checks of rope$" <<<"$out"
expect_fail "test_backend_ops --op refuses a group it does not have, naming those it has" \
    "no operation group 'ropes' \(usage: .*\|rope\|" ${BUILD:-build}/test_backend_ops --op ropes
summary
