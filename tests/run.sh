#!/usr/bin/env bash
# tests/run.sh [--check] PROGRAM...: runs the test programs named (build/NAME) and the shell
# tests, then prints the total of their "N passed, M failed" lines. --check (make check) runs
# the programs named alone, test_backend_ops at its small shapes: the fast loop.
#
# Two phases. The programs named, test_memory and test_cli run one after another with
# OMP_NUM_THREADS threads (2 unless set): they hold the threaded kernels to their references and
# use both cores. The end-to-end tests then run in two lanes at once, one thread each (the CUDA
# build's test, the emulation's and the layer, data-parallel and make tests in the second): at
# their tiny shapes a second thread costs more in fork and join than it saves (table6's smoke
# preset: 10.9 s with two threads, 7.0 s with one, measured on a 2-core EPYC), so two lanes of
# one thread finish them in about half the time, and a lane never waits at a barrier for a thread
# the other lane has pre-empted. The pinned numbers (tests/golden/) are therefore one thread's.
# Each test's start is a line ("-> NAME") and its report is printed whole when it finishes, so
# the lanes' reports do not interleave.
set -u
check=0
if [ "${1:-}" = --check ]; then
    check=1
    shift
fi
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export BUILD=${BUILD:-build}  # build/san for make test SANITIZE=1
reports=$(mktemp -d) || exit 1  # each test's counts; its own folder, as a test may run run.sh too
trap 'rm -rf "$reports"' EXIT
run() {  # NAME COMMAND...: one test; its report goes out whole, its counts to $reports/NAME
    local name=$1 out rc summary start=$SECONDS
    shift
    echo "-> $name" | flock "$reports" cat  # which tests are running, should one hang
    out=$("$@" 2>&1)
    rc=$?
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' <<<"$out" | tail -1)
    {   # broken: no summary, or a non-zero exit that no failed check explains
        [ -z "$summary" ] || echo "counts ${summary%% passed*} $(sed -E 's/.*, ([0-9]+) failed/\1/' <<<"$summary")"
        [ -n "$summary" ] && { [ $rc -eq 0 ] || [ "${summary#*, }" != "0 failed" ]; } || echo "broken $name(exit $rc)"
        # a program that checked nothing and did not say what it skipped asserted nothing
        [ "$summary" != "0 passed, 0 failed" ] || grep -qE '^skipped: ' <<<"$out" || echo "broken $name(no checks, none said skipped)"
        grep -E '^skipped: ' <<<"$out" | sed "s/^skipped: /skipped $name: /"  # checks this machine cannot run, said
    } > "$reports/$name"
    {
        echo "== $name"
        echo "$out" | grep -vE '^(step |model: |prepare: |  build/|  tokenizer: |  train: |  val: |  wrote |resuming |run already|finished at step |stopped at step )'
        [ -z "$summary" ] || echo "   ($((SECONDS - start)) s)"
    } | flock "$reports" cat
}
finish() {
    local total_passed=0 total_failed=0 broken="" skipped="" kind rest
    for f in "$reports"/*; do
        [ -f "$f" ] || continue
        while read -r kind rest; do
            case $kind in
                counts) total_passed=$((total_passed + ${rest% *})) total_failed=$((total_failed + ${rest#* })) ;;
                broken) broken="$broken $rest" ;;
                skipped) skipped="$skipped"$'\n'"  $rest" ;;
            esac
        done < "$f"
    done
    # what did not run here is said, never counted as passed
    [ -z "$skipped" ] || echo "skipped on this machine (not counted):$skipped"
    [ -z "$broken" ] || echo "broken test programs:$broken"
    echo "$total_passed passed, $total_failed failed"
    [ $total_failed -eq 0 ] && [ -z "$broken" ]
    exit
}
for t in "$@"; do
    # make check's fast loop: test_backend_ops at its small shapes, test_devices training two variants
    if [ $check = 1 ] && { [ "$t" = test_backend_ops ] || [ "$t" = test_devices ]; }; then run "$t" "$BUILD/$t" --small; else run "$t" "$BUILD/$t"; fi
done
[ $check = 0 ] || finish
[ "$BUILD" = build/san ] || run test_memory tests/test_memory.sh  # sanitizers' shadow memory voids its bounds
run test_cli tests/test_cli.sh

# The pinned numbers are bitwise only under the golden files' OpenBLAS kernel, and OpenBLAS picks
# its kernel by CPU model: a CPU whose own pick differs but which has that kernel's instructions
# computes the golden numbers bitwise when given it (measured, when the files were Cooperlake's:
# all of them on a CPU-family-26 EPYC VM). So the runs that leave the pinned numbers get that kernel wherever the CPU has its
# instructions, whatever OPENBLAS_CORETYPE the environment sets (one VM set Haswell).
kernel_instructions() {  # the /proc/cpuinfo flags an OpenBLAS x86-64 kernel executes
    case $1 in
        Cooperlake) echo avx512f avx512vl avx512bw avx512dq avx512_bf16 ;;
        SkylakeX) echo avx512f avx512vl avx512bw avx512dq ;;
        Haswell | Zen) echo avx2 fma ;;
        *) echo unknown-kernel ;;
    esac
}
pinned_kernel=$(sed -n 's/^# machine: .*openblas=\([A-Za-z0-9]*\);.*/\1/p' tests/golden/table6_smoke.txt)
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
for f in $(kernel_instructions "$pinned_kernel"); do [[ $flags == *" $f "* ]] || pinned_kernel=""; done
if [ -n "$pinned_kernel" ]; then
    echo "== OpenBLAS kernel $pinned_kernel (the golden files') for test_table6, test_needle_sh and test_pinned${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE from the environment set aside)}"
    pinned() { OPENBLAS_CORETYPE=$pinned_kernel run "$@"; }
else
    pinned() { run "$@"; }
fi

export OMP_NUM_THREADS=1
(   # the numbers test_table6 and test_needle_sh leave in their registries, against tests/golden/
    # (the plain build's: a sanitizer build computes with other code, and its numbers are not
    # pinned); then the tests that read their models and registries
    pinned test_table6 tests/test_table6.sh
    pinned test_needle_sh tests/test_needle.sh
    [ "$BUILD" = build/san ] || pinned test_pinned tests/test_pinned.sh
    run test_view tests/test_view.sh
    run test_write_errors tests/test_write_errors.sh
    run test_corpora_sh tests/test_corpora.sh
) &
lane=$!
# the CUDA build (its portable form), compiled by make test wherever nvcc is found: one thread of
# work for a minute and a half, so it runs beside the end-to-end lane, not before it
if [ "$BUILD" != build/san ] && [ -x build/cuda-portable/difftx ]; then run test_cuda_build tests/test_cuda_build.sh; fi
# the CUDA kernels under the CPU emulation (tests/cuda_emulation; not built under the sanitizers)
if [ -x "$BUILD/emu/test_backend_ops" ]; then
    # the CUDA backend alone (the CPU's is test_backend_ops), without T = 1024, whose 16 blocks
    # T = 130's three already cover at a fifth of the emulated time; a GPU runs it whole
    run test_backend_ops_emulated "$BUILD/emu/test_backend_ops" --backend cuda --small
    run test_devices_emulated "$BUILD/emu/test_devices"
    run test_cuda_emulation tests/test_cuda_emulation.sh
fi
run test_layers tests/test_layers.sh
run test_dist tests/test_dist.sh
[ "$BUILD" = build/san ] || run test_make tests/test_make.sh  # the plain build's targets
wait $lane
lane_rc=$?  # a lane that died (killed, say) left some of its tests unrun: broken, not a pass
[ $lane_rc -eq 0 ] || echo "broken end-to-end-lane(exit $lane_rc)" > "$reports/end-to-end-lane"
finish
