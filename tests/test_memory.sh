#!/usr/bin/env bash
# Memory stays linear in the context length: peak resident memory of the bench model
# (d_model 256, 6 layers, vocabulary 4096) for a training step at context 4096 and a forward
# pass at context 16384 must stay under 2 GiB. (make bench measures the forward pass at 65536
# against its 8 GiB bound; it takes minutes, too long for the test suite.)
set -u
cd "$(dirname "$0")/.."
source tests/harness.sh
limit_mib=2048

check_peak() {  # NAME ARGS...: runs difftx bench and checks the peak RSS it reports
    local name=$1 out peak
    shift
    out=$(build/difftx bench "$@" 2>&1)
    peak=$(grep -oE 'peak RSS [0-9]+ MiB' <<<"$out" | grep -oE '[0-9]+')
    if [ -n "$peak" ] && [ "$peak" -lt $limit_mib ]; then
        passed=$((passed + 1))
        echo "  $name: peak RSS $peak MiB (limit $limit_mib MiB)"
    else
        failed=$((failed + 1))
        echo "FAIL $name: peak RSS ${peak:-unknown} MiB, limit $limit_mib MiB"
        echo "$out"
    fi
}

check_peak "diff training step, T=4096 B=1" experiments/bench_diff.ini seq_len=4096 batch_size=1 --steps 2
check_peak "standard training step, T=4096 B=1" experiments/bench_standard.ini seq_len=4096 batch_size=1 --steps 2
check_peak "diff forward pass, T=16384 B=1" experiments/bench_diff.ini seq_len=16384 batch_size=1 --steps 2 --forward
summary
