#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU, its driver and CUDA 13, and none of this
# project's libraries (make gpu-bundle packs them). Three parts:
#   gpu-check.sh window OUT           what a short loan of a GPU (15 minutes, its start included)
#                                     must return, in order of value under one deadline (540 s
#                                     from the start, GPU_CHECK_DEADLINE), checked before each
#                                     section and cutting the one it overtakes: the GPU, driver
#                                     and cuDNN; the bf16 attention verdict part by part at the 124M
#                                     and bench shapes (test_backend_ops --parts); one training
#                                     step's profile by operation and layer at 124M (DIFF, then the
#                                     Transformer and GDA) in fp32 and bf16 (difftx bench --profile); PyTorch's own cuDNN
#                                     attention on those shapes, its cuDNN log kept; then
#                                     test_backend_ops and test_devices on cuda, ncu on the
#                                     attention and cross-entropy kernels, PyTorch eager and
#                                     torch.compile at 124M. OUT ends with exactly report.md,
#                                     logs.tar.gz (every section's full output) and profile.csv,
#                                     whatever happens
#   gpu-check.sh tests OUT            test_backend_ops and test_devices on cuda against the CPU
#                                     (bf16 products and attention included); test_cudnn_graphs
#                                     (the cuDNN version loaded and its engines for our graphs);
#                                     test_backend_ops --small under compute-sanitizer memcheck,
#                                     racecheck and synccheck; 1 and 2 ranks training the same
#                                     model, gradients summed by NCCL (two GPUs; with one it is
#                                     reported as skipped, not passed)
#   gpu-check.sh bench OUT [VARIANT]  difftx bench device=cuda in fp32 and in bf16 beside the same
#                                     model in PyTorch on the same GPU (fp32 eager, bf16 autocast
#                                     eager and under torch.compile), at the bench shape and a 124M
#                                     shape, for standard, diff and diff2 (or VARIANT alone)
# OUT is a folder (created): report.md is written section by section as the check goes, so a
# hang or a kill loses only the section that was running, and each section's full output is
# kept in its own log beside it (window: in logs.tar.gz). Every section runs under `timeout`;
# progress goes to stdout. The bundle's libraries are given to this project's programs only,
# never to PyTorch. Exit 0 when every section that ran passed, 1 when one failed, 2 on a usage
# error. GPU_CHECK_DRY_RUN=S (for the script's own test, without a GPU) runs `sleep S` in place
# of each section's command and holds it to its exit status alone, so the deadline's arithmetic
# shows (with GPU_CHECK_DEADLINE and GPU_CHECK_MARGIN small).
set -u
usage() {
    echo "usage: gpu-check.sh window OUT | gpu-check.sh tests OUT | gpu-check.sh bench OUT [standard|diff|diff2]" >&2
    exit 2
}
[ $# -ge 2 ] || usage
part=$1 out=$2 only=${3:-}
dry=${GPU_CHECK_DRY_RUN:-}
deadline=${GPU_CHECK_DEADLINE:-540} margin=${GPU_CHECK_MARGIN:-10}
[[ $deadline =~ ^[0-9]+$ ]] && [[ $margin =~ ^[0-9]+$ ]] && [[ $dry =~ ^[0-9]*$ ]] || usage
case $part in
    tests | window) [ $# -eq 2 ] || usage ;;
    bench) [ $# -le 3 ] && [[ $only =~ ^(|standard|diff|diff2)$ ]] || usage ;;
    *) usage ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out" || usage
out=$(cd "$out" && pwd)
report=$out/report.md
work=$(mktemp -d)
logs=$out  # each section's log; the window's go into logs.tar.gz
if [ "$part" = window ]; then
    logs=$work/logs
    mkdir -p "$logs"
    rm -f "$out/report.md" "$out/logs.tar.gz" "$out/profile.csv"
    [ -z "$(ls -A "$out")" ] || { echo "gpu-check.sh window: '$out' holds files other than its own three: choose an empty OUT" >&2; exit 2; }
    # the three files, whatever happens: the logs packed and the profiles gathered on every exit
    pack() {
        tar -C "$logs" -czf "$out/logs.tar.gz" . 2>/dev/null || echo "could not pack the logs" >>"$report"
        {
            echo "run,operation,layer,calls_per_step,ms_per_step,percent_of_step,least_bytes_per_step,flop_per_step"
            for f in "$logs"/profile-*.csv; do
                [ -f "$f" ] || continue
                local run=${f##*/profile-}
                tail -n +2 "$f" | sed "s/^/${run%.csv},/"
            done
        } >"$out/profile.csv"
        rm -rf "$work"
    }
    trap pack EXIT
else
    trap 'rm -rf "$work"' EXIT
fi
tar -C "$work" -xzf "$here/lib.tar.gz"  # lib/: the bundle's libraries

# CUDA's libraries: the toolkit's, else those of the CUDA wheels a PyTorch install carries
dirs=""
for d in ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && dirs="$dirs:$d"
done
wheels=$(python3 -c 'import nvidia, os; print(":".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in sorted(os.listdir(p))))' 2>/dev/null)
libpath="$work/lib$dirs${wheels:+:$wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# this project's programs, and a sanitizer running one; a command, not a function, so that
# timeout can run it
project=(env "LD_LIBRARY_PATH=$libpath")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
if command -v timeout >/dev/null; then limited() { timeout --kill-after=10 "$@"; }; else limited() { shift; "$@"; }; fi

passed=0 failed=0 skipped=0 n=0
say() { echo "[gpu-check $part] $*"; }
{
    echo "# GPU check ($part) of difftx $(cat "$here/COMMIT")"
    echo
    echo "- date: $(date -u +%Y-%m-%dT%H:%MZ), host $(hostname), $(nproc) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS"
    echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -3 | tr '\n' ';')"
    [ "$part" != window ] || echo "- deadline: ${deadline} s from the start${dry:+; a dry run: every section sleeps $dry s}"
    command -v timeout >/dev/null || echo "- no \`timeout\` on this machine: sections run without their time limits"
    echo
} >"$report"

# section TITLE LIMIT_S PASS COMMAND...: runs COMMAND under the limit, its output in a log of its
# own; PASS is grep -E patterns, one per line, the output must all hold (besides exit 0). The report gets a
# "running" line first, so a check killed here shows where it stopped.
# In the window, a section's limit is also what is left before the deadline, less a margin
# (GPU_CHECK_MARGIN, 10 s) to pack the files; a section with less than the margin left is not
# started, and one the deadline stops is "cut".
section() {
    local title=$1 limit=$2 pass=$3 start=$SECONDS rc verdict cut=0
    shift 3
    if [ "$part" = window ]; then
        local left=$((deadline - SECONDS - margin))
        if [ $left -lt "$margin" ] || [ $left -lt 1 ]; then
            skip "$title" "cut: ${left} s left before the window's deadline of $deadline s"
            return
        fi
        [ $left -lt "$limit" ] && limit=$left cut=1
    fi
    [ -z "$dry" ] || set -- sleep "$dry"
    n=$((n + 1))
    local log="$logs/$(printf '%02d' $n)-$(tr -c 'a-zA-Z0-9\n' '-' <<<"${title%%(*}" | tr -s '-' | sed 's/-$//').log"
    say "$title: running (limit $limit s)"
    printf '## %s\n\nrunning since %s (limit %s s) ...\n' "$title" "$(date -u +%H:%M:%SZ)" "$limit" >>"$report"
    limited "$limit" "$@" >"$log" 2>&1
    rc=$?
    local held=1 p
    [ -n "$dry" ] || while IFS= read -r p; do grep -qE -- "$p" "$log" || held=0; done <<<"$pass"
    if [ $rc -eq 0 ] && [ $held -eq 1 ]; then
        verdict=passed
        passed=$((passed + 1))
    else
        verdict=FAILED
        [ $rc -eq 124 ] || [ $rc -eq 137 ] && verdict="FAILED (over its $limit s limit)"
        [ $rc -eq 124 ] || [ $rc -eq 137 ] && [ $cut = 1 ] && verdict="CUT at the window's deadline of $deadline s"
        failed=$((failed + 1))
    fi
    {
        echo
        echo '```'
        grep -v '^|' "$log" | tail -40
        echo '```'
        echo
        grep '^|' "$log"
        echo
        echo "**$verdict**: exit $rc, $((SECONDS - start)) s (full output: $(basename "$log"))"
        echo
    } >>"$report"
    say "$title: $verdict ($((SECONDS - start)) s)"
}

skip() {  # TITLE REASON
    skipped=$((skipped + 1))
    printf '## %s\n\n**skipped**: %s\n\n' "$1" "$2" >>"$report"
    say "$1: skipped: $2"
}

finish() {
    printf '%d passed, %d failed, %d skipped\n' $passed $failed $skipped >>"$report"
    say "$passed passed, $failed failed, $skipped skipped; report: $report"
    [ $failed -eq 0 ]
    exit $?
}

if [ -n "$dry" ]; then
    :  # the dry run checks the script, not the machine
elif ! "${project[@]}" "$here/bin/difftx" keys >/dev/null 2>&1; then
    echo "difftx does not start: $("${project[@]}" "$here/bin/difftx" keys 2>&1 | head -3)" | tee -a "$report"
    exit 1
fi
why=$([ -n "$dry" ] || "${project[@]}" "$here/bin/difftx" bench "$here/experiments/bench_standard.ini" device=cuda --steps 2 --results "$work/results" 2>&1 >/dev/null |
    grep -o "device 'cuda' cannot run here: .*")
if [ -n "$why" ]; then
    echo "no CUDA device: $why" | tee -a "$report"
    exit 1
fi

ok='^[0-9]+ passed, 0 failed$'
if [ "$part" = window ]; then
    # the shapes: GPT-2 124M (d_model 768, 12 layers, T 1,024, B 8, V 50,304) standard and DIFF
    # (6 heads of two 64-wide maps, values 128 wide), and the bench shape's DIFF
    shapes=(standard:8:1024:12:64 diff:8:1024:6:64 diff:16:256:4:32)
    parts=()
    for s in "${shapes[@]}"; do parts+=(--parts "$s"); done
    section "the GPU, its driver and cuDNN" 60 "^cuDNN [0-9]+$" bash -c 'nvidia-smi; cd "$1" && shift && "$@"' _ "$here" "${project[@]}" \
        "$here/bin/test_cudnn_graphs"
    section "bf16 attention part by part against the fp32 kernels (test_backend_ops --parts)" 120 "$ok" \
        "${project[@]}" "$here/bin/test_backend_ops" --backend cuda "${parts[@]}"
    # the 124M shape's profile for DIFF first, then the Transformer and GDA (12 query heads, 3 signal
    # and 1 noise per group) beside it: the table of issue 80 wants all three
    for model in "diff bench_diff.ini n_head=6" "standard bench_standard.ini n_head=12" "gda bench_diff.ini attention=gda noise_group=3 n_head=12"; do
        read -r name recipe keys <<<"$model"
        for precision in fp32 bf16; do
            # shellcheck disable=SC2086  # keys: key=value words
            section "one training step's profile, 124M $name, $precision (difftx bench --profile)" 120 "tokens/s
^  \(between the calls\)" "${project[@]}" "$here/bin/difftx" bench "$here/experiments/$recipe" device=cuda precision=$precision $keys \
                n_layer=12 d_model=768 head_dim=64 seq_len=1024 batch_size=8 --vocab 50304 --steps 3 --results "$work/results" \
                --profile "$logs/profile-$name-124M-$precision.csv"
        done
    done
    section "PyTorch's cuDNN attention, bf16, causal (sdpa_cudnn.py; its cuDNN log kept)" 120 "^\| .* \| agrees \|$" \
        env CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$logs/cudnn-pytorch.log" python3 "$here/sdpa_cudnn.py" \
        standard-124M:8:12:1024:64:64 diff-124M-map:8:6:1024:64:128 diff-bench-map:16:4:256:32:64
    [ -f "$logs/cudnn-pytorch.log" ] && gzip -f "$logs/cudnn-pytorch.log"
    section "every backend operation on cuda (test_backend_ops --backend cuda)" 150 "$ok" \
        "${project[@]}" "$here/bin/test_backend_ops" --backend cuda
    section "the model on cuda against cpu (test_devices)" 180 "$ok" "${project[@]}" "$here/bin/test_devices"
    ncu=$(command -v ncu || ls "${CUDA_HOME:-/usr/local/cuda}/bin/ncu" 2>/dev/null)
    if [ -z "$ncu" ] && [ -z "$dry" ]; then
        skip "ncu on the attention and cross-entropy kernels" "ncu not found (PATH, CUDA_HOME/bin, /usr/local/cuda/bin)"
    else
        # one launch of each kernel, a program run per kernel (ncu counts launches over all the
        # names it matches): the written-out path's two row kernels, the memory-linear kernels
        # (DIFFTX_ATTENTION_PATH=kernels) and the cross-entropy, at the bench shape in fp32
        section "ncu on one launch of each attention kernel and the cross-entropy (bench shape, DIFF, fp32)" 200 "==PROF==" \
            bash -c 'ncu=$1 bench=$2; shift 2
                for k in softmax_rows_kernel grad_rows_kernel attention_forward_kernel attention_backward_dq_kernel \
                         attention_backward_dkv_kernel crossentropy_forward_kernel crossentropy_backward_kernel; do
                    path=auto; [[ $k == attention_* ]] && path=kernels
                    DIFFTX_ATTENTION_PATH=$path "$@" "$ncu" --kernel-name-base function --kernel-name "regex:^$k" --launch-count 1 \
                        --section SpeedOfLight --section Occupancy --section LaunchStats "$bench" bench "${bench%/bin/difftx}/experiments/bench_diff.ini" \
                        device=cuda --steps 2 --results "$(mktemp -d)" || exit 1
                done' _ "${ncu:-ncu}" "$here/bin/difftx" "${project[@]}"
    fi
    section "PyTorch at 124M, DIFF: fp32, bf16 autocast, bf16 torch.compile" 200 "^pytorch .* bf16 torch.compile" \
        python3 "$here/bench_torch_gpu.py" diff 12 768 6 64 1024 8 50304 11
    section "PyTorch at 124M, Transformer: fp32, bf16 autocast, bf16 torch.compile" 200 "^pytorch .* bf16 torch.compile" \
        python3 "$here/bench_torch_gpu.py" standard 12 768 12 64 1024 8 50304 11
    finish
fi

if [ "$part" = tests ]; then
    section "every backend operation on cuda (test_backend_ops --backend cuda)" 120 "$ok" \
        "${project[@]}" "$here/bin/test_backend_ops" --backend cuda
    section "the model on cuda against cpu: gradients, AdamW, training, repeat, resume (test_devices)" 180 "$ok
^devices: cpu and cuda \(" "${project[@]}" "$here/bin/test_devices"
    # cuDNN as this machine loads it (the PyTorch wheel's): its version, and its heuristics for the
    # attention graphs on the described GPUs (the bf16 paths of each shape are the lines
    # "attention ...: cuDNN ..." or "...: this backend's fp32 kernels (why)" in the sections above)
    section "cuDNN's attention graphs against described GPUs (test_cudnn_graphs)" 120 "$ok
^cuDNN [0-9]+$" bash -c 'cd "$1" && shift && "$@"' _ "$here" "${project[@]}" "$here/bin/test_cudnn_graphs"
    sanitizer=$(command -v compute-sanitizer || ls "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" 2>/dev/null)
    for tool in memcheck racecheck synccheck; do
        if [ -z "$sanitizer" ]; then
            skip "compute-sanitizer $tool" "compute-sanitizer not found (PATH, CUDA_HOME/bin, /usr/local/cuda/bin)"
            continue
        fi
        # racecheck instruments every shared-memory access: over cuBLAS's kernels too it ran past
        # 150 s on an H100, over cuDNN's attention kernels on an H200, where it also reported
        # hazards in them, as synccheck reported divergent threads at a barrier of cuDNN's
        # backward kernel (cudnn_generated_..._flash_bprop_wgmma_..., cuDNN 9.19). Those are
        # NVIDIA's kernels: racecheck and synccheck check this project's (no "gemm" and no
        # "cudnn_generated" in their names; the option repeated, as compute-sanitizer took it
        # there); memcheck checks every kernel, cuDNN's reading the strides this project gives
        filter=() clean="ERROR SUMMARY: 0 errors" unchecked=""
        [ $tool != memcheck ] && filter=(--kernel-name-exclude kns=gemm --kernel-name-exclude kns=cudnn_generated) \
            unchecked="cuBLAS's and cuDNN's kernels"
        [ $tool = racecheck ] && clean="RACECHECK SUMMARY: 0 hazards displayed \(0 errors, 0 warnings\)"
        section "compute-sanitizer $tool on test_backend_ops --backend cuda --small${unchecked:+ ($unchecked not checked)}" 150 "$clean
$ok" \
            "${project[@]}" "$sanitizer" --tool $tool "${filter[@]}" --error-exitcode 3 "$here/bin/test_backend_ops" --backend cuda --small
    done
    # which path each attention shape took (cuDNN's graphs, the maps written out, or this
    # backend's kernels, and why not the others)
    {
        echo "## attention paths (test_backend_ops, test_devices)"
        echo
        echo '```'
        grep -hE '^attention B=.*, (training|forward only): ' "$out"/0[12]-*.log | sort | uniq -c
        echo '```'
        echo
    } >>"$report"
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ "$gpus" -lt 2 ]; then
        skip "two ranks summing gradients through NCCL" "it needs two GPUs; this machine has $gpus"
    elif ! command -v mpirun >/dev/null; then
        skip "two ranks summing gradients through NCCL" "it needs mpirun (Open MPI) on this machine"
    else
        section "two ranks summing gradients through NCCL (ranks_check.sh: 1 and 2 ranks, same losses)" 180 "1 and 2 ranks agree" \
            env DIFFTX_LIBS="$libpath" "$here/ranks_check.sh" "$here/bin/difftx" cuda "$work/nccl"
    fi
    finish
fi

# bench LABEL VARIANT L C H D T B V: difftx in fp32 and in bf16, then PyTorch on the same model and GPU
bench() {
    local label=$1 variant=$2 L=$3 C=$4 H=$5 D=$6 T=$7 B=$8 V=$9 recipe=bench_standard.ini norm=false precision
    [ -z "$only" ] || [ "$only" = "$variant" ] || return 0
    [ "$variant" = diff ] && recipe=bench_diff.ini norm=true
    for precision in fp32 bf16; do
        section "$label, $variant: difftx $precision" 150 "tokens/s" "${project[@]}" "$here/bin/difftx" bench "$here/experiments/$recipe" \
            device=cuda precision=$precision attention="$variant" head_norm=$norm n_layer="$L" d_model="$C" n_head="$H" head_dim="$D" \
            seq_len="$T" batch_size="$B" --vocab "$V" --steps 11 --results "$work/results"
    done
    section "$label, $variant: PyTorch fp32, bf16 autocast, bf16 torch.compile" 200 "^pytorch .* bf16 torch.compile" \
        python3 "$here/bench_torch_gpu.py" "$variant" "$L" "$C" "$H" "$D" "$T" "$B" "$V" 11
}
bench "bench shape" standard 6 256 8 32 256 16 4096
bench "bench shape" diff 6 256 4 32 256 16 4096
bench "bench shape" diff2 6 256 8 32 256 16 4096
bench "124M shape" standard 12 768 12 64 1024 8 50304
bench "124M shape" diff 12 768 6 64 1024 8 50304
bench "124M shape" diff2 12 768 12 64 1024 8 50304
finish
