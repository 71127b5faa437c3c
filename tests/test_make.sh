#!/usr/bin/env bash
# The Makefile plans no surprise work: after a build, with the corpus prepared, `make -n table6`
# plans the table alone, neither a relink nor a corpus preparation, even when the program is
# newer than the corpus (the corpus depends on its sources, not on the program). Where no corpus
# is prepared (a clean clone), a stand-in train.bin is made for the check and removed after.
set -u
cd "$(dirname "$0")/.."
source tests/harness.sh
unset MAKEFLAGS MFLAGS MAKELEVEL  # as a user types it, not as the make running the tests
made=""
if [ ! -e data/default/train.bin ]; then
    if [ -d data/default ]; then made=file; else made=dir; fi
    mkdir -p data/default
    : > data/default/train.bin
    touch -d "@$(( $(stat -c %Y data/fetch_corpus.sh) + 1 ))" data/default/train.bin  # newer than its source only
fi
plan=$(make --no-print-directory -n table6 2>&1)
expect "make -n table6 after a build plans the table only (plan: $(tr '\n' ';' <<<"$plan"))" \
    test "$(grep -cvE '^build/difftx table6 experiments/table6.ini --preset [a-z0-9]+ --seeds [0-9]+$' <<<"$plan")" = 0
plan=$(make --no-print-directory -n -W build/difftx data/default/train.bin 2>&1)
expect "a newer program does not prepare the corpus again ($(tr '\n' ';' <<<"$plan"))" grep -qE "is up to date|Nothing to be done" <<<"$plan"
expect "make -q says the program is up to date" make -q build/difftx
case $made in
    dir) rm -rf data/default ;;
    file) rm -f data/default/train.bin ;;
esac
summary
