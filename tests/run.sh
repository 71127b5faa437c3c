#!/usr/bin/env bash
# tests/run.sh [--check] PROGRAM...: runs the test programs named (build/NAME) and the shell
# tests, then prints the total of their "N passed, M failed" lines. --check (make check) runs
# the programs named alone, test_backend_ops at its small shapes: the fast loop.
set -u
check=0
if [ "${1:-}" = --check ]; then
    check=1
    shift
fi
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export BUILD=${BUILD:-build}  # build/san for make test SANITIZE=1
total_passed=0 total_failed=0 broken=""
run() {  # NAME COMMAND...
    local name=$1 out rc summary start=$SECONDS
    shift
    echo "== $name"
    out=$("$@" 2>&1)
    rc=$?
    echo "$out" | grep -vE '^(step |model: |prepare: |  build/|  tokenizer: |  train: |  val: |  wrote |resuming |run already|finished at step |stopped at step )'
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' <<<"$out" | tail -1)
    if [ -z "$summary" ]; then
        broken="$broken $name(exit $rc)"
        return
    fi
    total_passed=$((total_passed + ${summary%% passed*}))
    total_failed=$((total_failed + $(sed -E 's/.*, ([0-9]+) failed/\1/' <<<"$summary")))
    [ $rc -eq 0 ] || [ "${summary#*, }" != "0 failed" ] || broken="$broken $name(exit $rc)"
    echo "   ($((SECONDS - start)) s)"
}
finish() {
    [ -z "$broken" ] || echo "broken test programs:$broken"
    echo "$total_passed passed, $total_failed failed"
    [ $total_failed -eq 0 ] && [ -z "$broken" ]
    exit
}
for t in "$@"; do
    if [ $check = 1 ] && [ "$t" = test_backend_ops ]; then run "$t" "$BUILD/$t" --small; else run "$t" "$BUILD/$t"; fi
done
[ $check = 0 ] || finish
# the CUDA kernels under the CPU emulation (tests/cuda_emulation; not built under the sanitizers)
if [ -x "$BUILD/emu/test_backend_ops" ]; then
    # the CUDA backend alone (the CPU's is test_backend_ops), without T = 1024, whose 16 blocks
    # T = 130's three already cover at a fifth of the emulated time; a GPU runs it whole
    run test_backend_ops_emulated "$BUILD/emu/test_backend_ops" --backend cuda --small
    run test_devices_emulated "$BUILD/emu/test_devices"
    run test_cuda_emulation tests/test_cuda_emulation.sh
fi
run test_layers tests/test_layers.sh
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
pinned test_table6 tests/test_table6.sh
pinned test_needle_sh tests/test_needle.sh
# the numbers the two above leave in their registries, against tests/golden/ (the plain build's:
# a sanitizer build computes with other code, and its numbers are not pinned)
[ "$BUILD" = build/san ] || pinned test_pinned tests/test_pinned.sh
run test_view tests/test_view.sh  # the models the two above trained
run test_dist tests/test_dist.sh
run test_write_errors tests/test_write_errors.sh
run test_corpora_sh tests/test_corpora.sh
[ "$BUILD" = build/san ] || run test_memory tests/test_memory.sh
[ "$BUILD" = build/san ] || run test_make tests/test_make.sh  # the plain build's targets
# the CUDA build, compiled by make test wherever nvcc is found
if [ "$BUILD" != build/san ] && [ -x build/cuda/difftx ]; then run test_cuda_build tests/test_cuda_build.sh; fi
finish
