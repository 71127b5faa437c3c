#!/usr/bin/env bash
# The GPU check, one command on a machine with an NVIDIA GPU, its driver and CUDA 13, and none
# of this project's libraries (make gpu-bundle packs them). Writes one Markdown report:
#   1. test_backend_ops: every backend operation on cuda, forward and backward, at shapes
#      with partial tiles, against the same references as the CPU;
#   2. test_devices: the whole model on cuda against cpu in one process, same weights: loss
#      and every gradient for six variants and one AdamW step;
#   3. (test_devices) 20 training steps of each on both devices, a bitwise repeat of the cuda
#      run, a resume across devices;
#   4. bench: tokens/s, MFU and peak GPU memory at the bench shape and a 124M shape for
#      standard, diff and diff2, beside PyTorch on the same GPU (fp32, SDPA, torch.compile).
# usage: gpu-check.sh [REPORT.md]   (default: gpu-check-report.md beside this script)
set -u
here=$(cd "$(dirname "$0")" && pwd)
report=$(realpath -m "${1:-$here/gpu-check-report.md}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
mkdir -p build
tar -xzf "$here/lib.tar.gz"  # lib/: the bundle's libraries

# CUDA's libraries: the toolkit's, else those of the CUDA wheels a PyTorch install carries
dirs=""
for d in ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && dirs="$dirs:$d"
done
wheels=$(python3 -c 'import nvidia, os; print(":".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in sorted(os.listdir(p))))' 2>/dev/null)
export LD_LIBRARY_PATH="$work/lib$dirs${wheels:+:$wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

failed=0
{
    echo "# GPU check of difftx $(cat "$here/COMMIT")"
    echo
    echo "- date: $(date -u +%Y-%m-%dT%H:%MZ), host $(hostname), $(nproc) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS"
    echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
    echo
} >"$report"

section() {  # TITLE COMMAND...: runs it, its output in the report; fails the check unless it ends "N passed, 0 failed"
    local title=$1 start=$SECONDS
    shift
    local out
    out=$("$@" 2>&1)
    local rc=$?
    {
        echo "## $title"
        echo
        echo '```'
        echo "$out" | grep -v '^|'
        echo '```'
        echo
        echo "$out" | grep '^|'
        echo
        echo "exit $rc, $((SECONDS - start)) s"
        echo
    } >>"$report"
    if [ $rc -ne 0 ] || ! grep -qE '^[0-9]+ passed, 0 failed$' <<<"$out"; then failed=1; fi
    if grep -q "not run" <<<"$out"; then
        echo "FAILED: $title did not run on the GPU" >>"$report"
        failed=1
    fi
}

if ! "$here/bin/difftx" keys >/dev/null 2>&1; then
    echo "difftx does not start: $("$here/bin/difftx" keys 2>&1 | head -3)" | tee -a "$report"
    exit 1
fi
why=$("$here/bin/difftx" bench "$here/experiments/bench_standard.ini" device=cuda --steps 2 --results "$work/results" 2>&1 >/dev/null | grep -o "device 'cuda' cannot run here: .*")
if [ -n "$why" ]; then
    echo "no CUDA device: $why" | tee -a "$report"
    exit 1
fi

section "1. every backend operation on cuda (test_backend_ops)" "$here/bin/test_backend_ops"
section "2-3. the model on cuda against cpu, training, repeat, resume (test_devices)" "$here/bin/test_devices"

{
    echo "## 4. bench (difftx bench device=cuda; PyTorch on the same GPU)"
    echo
    echo '```'
} >>"$report"
bench() {  # LABEL VARIANT L C H D T B V
    local label=$1 variant=$2 L=$3 C=$4 H=$5 D=$6 T=$7 B=$8 V=$9 recipe=bench_standard.ini norm=false
    [ "$variant" = diff ] && recipe=bench_diff.ini norm=true
    echo "-- $label $variant"
    "$here/bin/difftx" bench "$here/experiments/$recipe" device=cuda attention="$variant" head_norm=$norm n_layer="$L" d_model="$C" \
        n_head="$H" head_dim="$D" seq_len="$T" batch_size="$B" --vocab "$V" --steps 11 --results "$work/results" 2>&1
    python3 "$here/bench_torch_gpu.py" "$variant" "$L" "$C" "$H" "$D" "$T" "$B" "$V" 11 2>&1 | grep -E "^pytorch|Error"
}
{
    bench "bench shape" standard 6 256 8 32 256 16 4096
    bench "bench shape" diff 6 256 4 32 256 16 4096
    bench "bench shape" diff2 6 256 8 32 256 16 4096
    bench "124M shape" standard 12 768 12 64 1024 8 50304
    bench "124M shape" diff 12 768 6 64 1024 8 50304
    bench "124M shape" diff2 12 768 12 64 1024 8 50304
} >>"$report" 2>&1
echo '```' >>"$report"
echo >>"$report"
if [ $failed -eq 0 ]; then echo "**GPU check passed.**" >>"$report"; else echo "**GPU check FAILED.**" >>"$report"; fi
cat "$report"
exit $failed
