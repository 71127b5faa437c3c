#!/usr/bin/env bash
# The CPU emulation of a GPU that runs the CUDA backend's kernels in every test run
# (tests/cuda_emulation; the backend and device tests run them as the backend cuda-emulated):
#   - its own test: warp operations give each lane the right value, a block's tree sum through
#     shared memory is right, and launch limits are refused as a GPU refuses them;
#   - it reports each kind of defect it promises to, naming the kernel, block and thread:
#     a barrier reached by part of a block, a shuffle reached by part of a warp, a deadlock,
#     threads at different barriers, arithmetic on shared memory no thread wrote, an
#     out-of-bounds write, a host pointer passed to a kernel, two entries of a batched cuBLAS product
#     writing one element;
#   - the backend test fails on each defect planted in the real attention kernels
#     (tests/cuda_emulation/plant.sh): a missing barrier, shared memory 16 bytes short, an
#     unclamped index. Without the emulation's checks each would pass or fail only by luck;
#   - the attention checks fail on each defect planted in the path that writes the maps out
#     (a wrong stride, a strict causal mask, a missing -lambda);
#   - the bf16 attention checks fail on each defect planted in the host code around cuDNN's
#     graphs (a wrong row stride, a strict causal mask, a missing -lambda, the key gradient from
#     dS rather than its transpose), which the emulated
#     cuDNN interprets literally.
set -u
cd "$(dirname "$0")/.."
source tests/harness.sh
emu=${BUILD:-build}/emu

out=$("$emu/selftest" ok 2>&1)
expect "the emulator's own checks pass ($(tail -1 <<<"$out"))" grep -qE '^[0-9]+ passed, 0 failed$' <<<"$out"
grep FAIL <<<"$out"

expect_fail "a barrier reached by part of a block" \
    "kernel barrier_after_exit_kernel .*__syncthreads at tests/cuda_emulation/selftest.cu:[0-9]+ reached by part of the block: 16 threads wait there, 48 have exited" \
    "$emu/selftest" barrier_after_exit
expect_fail "a shuffle reached by part of a warp" \
    "kernel shuffle_after_exit_kernel .*__shfl_sync at tests/cuda_emulation/selftest.cu:[0-9]+ reached by part of warp 0: lane 5 of mask 0xffffffff has exited" \
    "$emu/selftest" shuffle_after_exit
expect_fail "a deadlock: half a warp at a barrier, half at a shuffle" \
    "kernel deadlock_kernel .*deadlock: no thread can go on; threads 0-15 wait at __syncthreads at .*; threads 16-31 wait at __shfl_sync" \
    "$emu/selftest" deadlock
expect_fail "threads at different barriers" "threads of one block wait at different barriers: tests/cuda_emulation/selftest.cu:[0-9]+ and" \
    "$emu/selftest" two_barriers
expect_fail "arithmetic on shared memory no thread wrote" \
    "kernel unwritten_shared_kernel .*thread \(0,0,0\): invalid floating-point operation: arithmetic on shared memory that no thread of this block wrote" \
    "$emu/selftest" unwritten_shared
expect_fail "an out-of-bounds write" \
    "kernel out_of_bounds_kernel .*thread \(64,0,0\): out-of-bounds write at byte 256 of a device allocation of 256 bytes" \
    "$emu/selftest" out_of_bounds
expect_fail "two entries of a batched product writing one element" \
    "cublasSgemmBatched.*entries 0 and 1 of the batch write the same output element" "$emu/selftest" batch_overlap
expect_fail "a host pointer passed to a kernel" "kernel out_of_bounds_kernel \(launched at [^)]*\): argument 1 is the pointer 0x[0-9a-f]+, which is not device memory" \
    "$emu/selftest" host_pointer

# the defects planted in the real kernels: the emulated backend test must stop at each, with
# the emulation's report (a numeric mismatch alone would not show the emulation at work)
declare -A report=(
    [missing_barrier]="kernel attention_forward_kernel<ONCE> .*arithmetic on shared memory that no thread of this block wrote"
    [short_shared_memory]="kernel attention_forward_kernel<ONCE> .*out-of-bounds write at byte [0-9]+ of the dynamic shared memory of kernel attention_forward_kernel<ONCE>"
    [unclamped_index]="kernel attention_backward_dkv_kernel<ONCE> .*out-of-bounds read at byte [0-9]+ of a device allocation"
)
for defect in missing_barrier short_shared_memory unclamped_index; do
    expect_fail "the backend test stops at the planted $defect" "${report[$defect]}" "$emu/defect/$defect/test_backend_ops" --backend cuda \
        --op attention --small --variant standard
done
# the defects planted in the host code around cuDNN's graphs: the emulated cuDNN interprets the
# graphs literally, and the bf16 attention checks fail at each
# (DIFF's cases, whose two maps show the -lambda; the five programs two at a time, one per core)
# run_planted DIR ARGS... -- DEFECT...: each DEFECT's test_backend_ops in $emu/DIR with ARGS, two at a
# time (one per core), its output into $emu/DIR/out/DEFECT.txt
run_planted() {
    local dir=$1 args=() i defect
    shift
    while [ "$1" != -- ]; do args+=("$1"); shift; done
    shift
    local defects=("$@")
    mkdir -p "$emu/$dir/out"
    for ((i = 0; i < ${#defects[@]}; i += 2)); do
        for defect in "${defects[@]:$i:2}"; do
            "$emu/$dir/$defect/test_backend_ops" "${args[@]}" > "$emu/$dir/out/$defect.txt" 2>&1 &
        done
        wait
    done
}
cudnn_defects=(cudnn_wrong_stride cudnn_strict_causal cudnn_missing_minus_lambda cudnn_untransposed_ds cudnn_fp32_output)
run_planted cudnn-defect --op bf16 --backend cuda --variant diff -- "${cudnn_defects[@]}"
for defect in "${cudnn_defects[@]}"; do
    out=$(cat "$emu/cudnn-defect/out/$defect.txt")
    expect "the bf16 attention checks fail at the planted $defect ($(grep -m1 -o 'FAIL.*fused graphs\]' <<<"$out"))" \
        bash -c '! grep -q "^[0-9]* passed, 0 failed$" <<<"$1" && grep -q "^FAIL .*bf16 .*cuDNN" <<<"$1"' _ "$out"
done
expect "the cuDNN plants differ from the real source by one edit each" \
    test "$(for d in cudnn_wrong_stride cudnn_strict_causal cudnn_missing_minus_lambda cudnn_untransposed_ds cudnn_fp32_output; do diff model/cuda/cudnn_attention.cu "$emu/cudnn-defect/$d/cudnn_attention.cu" | grep -c '^[<>]'; done | tr '\n' ' ')" = "2 2 2 2 2 "
# the defects planted in the path that writes the maps out: the fp32 attention checks fail at each
# (DIFF's cases, whose two maps show the -lambda)
written_defects=(written_wrong_stride written_strict_causal written_missing_minus_lambda)
run_planted written-defect --op attention --backend cuda --variant diff --small -- "${written_defects[@]}"
for defect in "${written_defects[@]}"; do
    out=$(cat "$emu/written-defect/out/$defect.txt")
    expect "the attention checks fail at the planted $defect ($(grep -m1 -oE '^(FAIL|.*emulat).{0,90}' <<<"$out"))" \
        bash -c '! grep -q "^[0-9]* passed, 0 failed$" <<<"$1" && grep -qE "^FAIL .*diff .*q0=0|cuBLAS|cublas" <<<"$1"' _ "$out"
done
expect "the written-out plants differ from the real source by one edit each" \
    test "$(for d in "${written_defects[@]}"; do diff model/cuda/attention_written.cu "$emu/written-defect/$d/attention_written.cu" | grep -c '^[<>]'; done | tr '\n' ' ')" = "2 2 2 "
# and the unplanted kernels pass the same test (run in full as test_backend_ops_emulated)
expect "the planted sources differ from the real one by one edit each" \
    test "$(for d in missing_barrier short_shared_memory unclamped_index; do diff model/cuda/attention.cu "$emu/defect/$d/attention.cu" | grep -c '^[<>]'; done | tr '\n' ' ')" = "1 2 2 "
summary
