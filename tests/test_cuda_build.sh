#!/usr/bin/env bash
# The CUDA build (make test compiles its portable form, build/cuda-portable, which `make CUDA=1`
# differs from in -march=native alone) without a GPU refuses `device = cuda` in `train`, `bench`, `sample`, `eval` and
# `maps` with "no CUDA device" before writing anything, the CPU-only build names `make CUDA=1`; cuDNN's
# attention graphs are built and offered engines by its heuristics for described GPUs
# (test_cudnn_graphs, with the toolkit's stub libcuda), and their golden lowering against NVIDIA's
# frontend with each former difference planted back (test_cudnn_graphs --golden); the CUDA build's
# `test_backend_ops` and `test_devices` pass on its CPU backend and say what they did not run; `make
# gpu-bundle` builds a bundle under 60 MiB whose programs find every library in it with the system's
# copies hidden, and whose `gpu-check.sh tests|bench|window OUT` reports "no CUDA device" cleanly, in its
# report too. What runs on a GPU is in docs/gpu.md. On a machine with a GPU the bundle's
# gpu-check.sh is the check.
set -u
cd "$(dirname "$0")/.."
source tests/harness.sh
cuda_build=build/cuda-portable  # make test compiles CUDA once, in the bundle's portable form
cuda=$cuda_build/difftx
work=build/test_cuda_build
rm -rf "$work"
mkdir -p "$work"

if "$cuda" bench experiments/bench_standard.ini device=cuda --steps 2 --results "$work/probe" >/dev/null 2>&1; then
    echo "a usable GPU is here: the refusals below do not apply; run make gpu-bundle && build/gpu-bundle/gpu-check.sh"
    gpu=1
else
    gpu=0
fi
if [ $gpu -eq 0 ]; then
    expect_fail "train device=cuda without a GPU" "device 'cuda' cannot run here: no CUDA device" \
        "$cuda" train experiments/default.ini device=cuda out="$work/run" --results "$work/results"
    expect "a refused cuda run writes nothing (no run folder, no registry)" test ! -e "$work/run" -a ! -e "$work/results"
    expect_fail "bench device=cuda without a GPU" "device 'cuda' cannot run here" \
        "$cuda" bench experiments/bench_standard.ini device=cuda --steps 2 --results "$work/results"
    expect_fail "sample --device cuda without a GPU" "device 'cuda' cannot run here" "$cuda" sample "$work/none.h5" --device cuda
    expect_fail "eval --device cuda without a GPU" "device 'cuda' cannot run here" "$cuda" eval "$work/none.h5" --device cuda
    expect_fail "maps --device cuda without a GPU" "device 'cuda' cannot run here" \
        "$cuda" maps "$work/none.h5" --prompt hi --device cuda -o "$work/maps.h5"
    expect "a refused maps writes nothing" test ! -e "$work/maps.h5"
fi
# cuDNN's graphs without a GPU: the toolkit's stub libcuda stands in for the driver, and
# test_cudnn_graphs holds every graph the recipes need to cuDNN's heuristics for described GPUs
toolkit=$(dirname "$(dirname "$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")")")
if [ -e "$toolkit/lib64/stubs/libcuda.so" ]; then
    mkdir -p "$work/stub"
    ln -sf "$toolkit/lib64/stubs/libcuda.so" "$work/stub/libcuda.so.1"
    out=$(LD_LIBRARY_PATH=$work/stub $cuda_build/test_cudnn_graphs 2>&1)
    if grep -q "^skipped: " <<<"$out"; then
        echo "skipped: cuDNN's graphs and their golden lowering: $(grep '^skipped: ' <<<"$out" | sed 's/^skipped: //')"
    else
        expect "cuDNN's heuristics take every graph the recipes need on an H100 and an H200, none on a V100 ($(grep -m1 '^cuDNN' <<<"$out"), $(grep -cE '^\| .*(h100|h200).* forward \| [1-9]' <<<"$out") forward and $(grep -cE '^\| .*(h100|h200).* backward \| [1-9]' <<<"$out") backward graphs accepted)" \
            grep -qE "^[0-9]+ passed, 0 failed$" <<<"$out"
        grep FAIL <<<"$out"
        # the golden lowering: the 124M shape's graphs as cuDNN reads them are the graphs it reads
        # from NVIDIA's frontend, node by node; and each difference the graphs once had, put back,
        # is found
        out=$(LD_LIBRARY_PATH=$work/stub $cuda_build/test_cudnn_graphs --golden tests/golden 2>&1)
        expect "cuDNN reads the 124M shape's forward and backward graphs as it reads NVIDIA's frontend lowering, node by node" \
            grep -qE "^2 passed, 0 failed$" <<<"$out"
        grep -E "FAIL|only " <<<"$out" | head -20
        for d in golden_d_virtual golden_p_bf16 golden_pt_fp32 golden_dst_fp32 golden_mask_before_stats golden_cmp_float golden_dp_times_one; do
            out=$(LD_LIBRARY_PATH=$work/stub $cuda_build/golden-defect/$d/test_cudnn_graphs --golden tests/golden 2>&1)
            expect "the golden lowering finds the planted $d ($(grep -c '^  only ' <<<"$out") nodes differ)" \
                bash -c '! grep -q "^[0-9]* passed, 0 failed$" <<<"$1" && grep -q "^  only difftx.s: " <<<"$1"' _ "$out"
        done
    fi
else
    echo "skipped: cuDNN's graphs and their golden lowering: no stub libcuda in $toolkit/lib64/stubs"
fi
expect_fail "the CPU build names the CUDA build" "built without CUDA \(build it with .make CUDA=1." \
    build/difftx train experiments/default.ini device=cuda out="$work/run"
expect_fail "an unknown device" "key 'device': 'tpu' is not one of cpu, cuda" build/difftx train experiments/default.ini device=tpu

ops=$(OMP_NUM_THREADS=2 $cuda_build/test_backend_ops --op table 2>&1)  # the CPU backend's operations are test_backend_ops's
expect "the CUDA build's backend test passes ($(tail -1 <<<"$ops"))" grep -qE '^[0-9]+ passed, 0 failed$' <<<"$ops"
expect "the CUDA build's backend test says what it did not run" grep -qE "^backend cuda: (not run: .*no CUDA device|[0-9]+ checks)" <<<"$ops"
# without a GPU its second device is the CPU, which the plain build's test_devices trains in full:
# two variants' training here (--small)
dev=$(OMP_NUM_THREADS=2 $cuda_build/test_devices --small 2>&1)
expect "the CUDA build's device test passes ($(tail -1 <<<"$dev"))" grep -qE '^[0-9]+ passed, 0 failed$' <<<"$dev"

# the bundle: built, under 60 MiB, and self-contained
make --no-print-directory gpu-bundle >"$work/bundle.log" 2>&1
expect "make gpu-bundle builds ($(tail -1 "$work/bundle.log"))" test -x build/gpu-bundle/gpu-check.sh
# portable: the GPU host's CPU may lack this one's vector extensions, so the bundle's programs
# hold no AVX instruction (a -march=native build here holds thousands) but in the peak-rate
# probe, which runs its FMA loop only where cpuid reports the registers
wide_instructions() {
    objdump -d --no-show-raw-insn "$1" | awk '/^[0-9a-f]+ </ { fn = $2 } /%[yz]mm[0-9]/ && fn !~ /^<cpu_peak_rate/ { n++ } END { print n + 0 }'
}
for p in difftx test_backend_ops test_devices; do
    wide=$(wide_instructions "build/gpu-bundle/bin/$p")
    expect "the bundle's $p is built portable ($wide instructions on ymm/zmm registers)" test "$wide" = 0
done
native_wide=$(wide_instructions build/difftx)
expect "while the native build uses them ($native_wide in build/difftx), so the check can fail" test "$native_wide" -gt 0
size=$(du -sm build/gpu-bundle | cut -f1)
expect "the bundle is under 60 MiB ($size MiB)" test "$size" -lt 60
mkdir -p "$work/unpacked/glibc"
tar -C "$work/unpacked" -xzf build/gpu-bundle/lib.tar.gz
# glibc's own libraries alone, in a folder of their own: with the loader's cache off nothing
# else of the system is found, so every other library must come from the bundle
for lib in libc.so.6 libm.so.6 libmvec.so.1 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2; do
    ln -s "$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64|AArch64/ {print $NF; exit}')" "$work/unpacked/glibc/$lib"
done
loader=$(readlink -f "$(ldd "$cuda" | awk '/ld-linux/ {print $1}')")
cuda_dir=$(dirname "$(readlink -f "$(ldd "$cuda" | awk '$1 ~ /libcudart/ {print $3}')")")
hidden() { "$loader" --inhibit-cache --library-path "$work/unpacked/lib:$work/unpacked/glibc:$cuda_dir" "$@"; }
for p in difftx test_backend_ops test_devices; do
    missing=$(LD_LIBRARY_PATH="$work/unpacked/lib:$work/unpacked/glibc:$cuda_dir" ldd "build/gpu-bundle/bin/$p" | grep "not found")
    expect "bundle $p finds every library${missing:+ (missing: $missing)}" test -z "$missing"
done
expect "the bundle's difftx starts with the system's libraries hidden" hidden build/gpu-bundle/bin/difftx keys >/dev/null
if [ $gpu -eq 0 ]; then
    expect_fail "the bundle's difftx says no CUDA device, libraries hidden" "device 'cuda' cannot run here: no CUDA device" \
        hidden build/gpu-bundle/bin/difftx bench build/gpu-bundle/experiments/bench_standard.ini device=cuda --steps 2 --results "$work/r"
    for part in tests bench window; do
        out=$(build/gpu-bundle/gpu-check.sh $part "$work/check-$part" 2>&1)
        rc=$?
        expect "gpu-check.sh $part without a GPU exits 1 saying no CUDA device (exit $rc)" test $rc -eq 1 -a -n "$(grep 'no CUDA device' <<<"$out")"
        expect "gpu-check.sh $part writes its report in the folder it is given even then" grep -q "no CUDA device" "$work/check-$part/report.md"
    done
    expect "gpu-check.sh window leaves exactly its three files even then" test "$(ls "$work/check-window" | tr '\n' ' ')" = "logs.tar.gz profile.csv report.md "
fi
# the window's deadline, in dry runs (each section sleeps): with time enough every section
# passes; with sections of 30 s and a deadline of 15 s the first is cut at the deadline and the
# rest are not started; either way the report, the logs and the profile (its header alone) are
# there, and nothing else
out=$(GPU_CHECK_DRY_RUN=1 GPU_CHECK_DEADLINE=120 GPU_CHECK_MARGIN=1 build/gpu-bundle/gpu-check.sh window "$work/dry" 2>&1)
rc=$?
expect "gpu-check.sh window in a dry run with time enough: every section passes (exit $rc)" \
    bash -c "test $rc = 0 && grep -qE '^14 passed, 0 failed, 0 skipped$' '$work/dry/report.md'"
out=$(GPU_CHECK_DRY_RUN=30 GPU_CHECK_DEADLINE=15 GPU_CHECK_MARGIN=1 build/gpu-bundle/gpu-check.sh window "$work/dry-cut" 2>&1)
rc=$?
expect "gpu-check.sh window in a dry run past its deadline: the first section cut at it, the rest not started (exit $rc)" \
    bash -c "test $rc = 1 && grep -q \"^\*\*CUT at the window's deadline of 15 s\*\*\" '$work/dry-cut/report.md' &&
             grep -qE '^0 passed, 1 failed, 13 skipped$' '$work/dry-cut/report.md' &&
             test \"\$(grep -c '^\*\*skipped\*\*: cut: ' '$work/dry-cut/report.md')\" = 13"
for d in dry dry-cut; do
    expect "gpu-check.sh window ($d) leaves exactly its three files: report.md, logs.tar.gz with each section's log, profile.csv" \
        bash -c "test \"\$(ls '$work/$d' | tr '\n' ' ')\" = 'logs.tar.gz profile.csv report.md ' &&
                 test \"\$(tar -tzf '$work/$d/logs.tar.gz' | grep -c '\.log$')\" = \"\$(grep -c '(full output: ' '$work/$d/report.md')\" &&
                 test \"\$(cat '$work/$d/profile.csv')\" = 'run,operation,layer,calls_per_step,ms_per_step,percent_of_step,least_bytes_per_step,flop_per_step'"
done
mkdir -p "$work/dry-used" && touch "$work/dry-used/mine.txt"
expect_fail "gpu-check.sh window refuses an OUT holding other files" "holds files other than its own three" \
    env GPU_CHECK_DRY_RUN=1 build/gpu-bundle/gpu-check.sh window "$work/dry-used"
for args in "" "tests" "all $work/x" "tests $work/x extra" "bench $work/x tpu" "window $work/x extra"; do
    expect_fail "gpu-check.sh ${args:-with no arguments} is a usage error" "usage: gpu-check.sh window OUT" build/gpu-bundle/gpu-check.sh $args
done
expect "gpu-check.sh gives the bundle's libraries to the project's programs only, never to PyTorch" \
    test "$(grep -c 'LD_LIBRARY_PATH=' build/gpu-bundle/gpu-check.sh)" = 1 -a -z "$(grep -n '^export LD_LIBRARY_PATH' build/gpu-bundle/gpu-check.sh)"
expect "every gpu-check.sh section runs under its time limit" grep -q 'limited "$limit" "$@"' build/gpu-bundle/gpu-check.sh
# the GPU check's NCCL section is the bundle's ranks_check.sh on cuda; here it runs on the CPU
# (MPI sums the gradients), so the script is held to its word without two GPUs
if command -v mpirun >/dev/null; then
    rc_out=$(OMP_NUM_THREADS=1 build/gpu-bundle/ranks_check.sh build/difftx cpu "$work/ranks" 2>&1)
    expect "the bundle's ranks_check.sh: 1 and 2 ranks on the cpu agree ($(grep relative <<<"$rc_out"))" grep -q "1 and 2 ranks agree" <<<"$rc_out"
fi
ops_args=$($cuda_build/test_backend_ops --backend cuda 2>&1)
rc=$?
if [ $gpu -eq 0 ]; then
    expect "test_backend_ops --backend cuda fails without a GPU, saying why (exit $rc)" test $rc -ne 0 -a -n "$(grep "no CUDA device" <<<"$ops_args")"
fi
summary
