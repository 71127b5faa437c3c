#!/usr/bin/env bash
# make bench: training speed and MFU of both attention variants at the reference shape (d_model
# 256, 6 layers, context 256, batch 16, vocabulary 4096), their steps alternated and compared pair
# by pair; peak memory and its bounds at long context; PyTorch's speed on the same model where
# python3-torch is installed; bf16 weight products (precision = bf16) at that shape and at d_model
# 768 (12 heads of 64, 4 layers, context 256, batch 8) beside fp32 and PyTorch's bf16 autocast,
# or the line that refuses bf16 on a CPU without bf16 dot products.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
bin=${BUILD:-build}/difftx  # make bench CUDA=1 benches build/cuda/difftx
echo "== training speed, the two variants' steps alternated (the first of each is a warm-up, not timed)"
"$bin" bench experiments/bench_standard.ini --vs experiments/bench_diff.ini --steps 11
echo "== memory: one training step at context 4096, batch 1 (bound: 2 GiB)"
"$bin" bench experiments/bench_standard.ini seq_len=4096 batch_size=1 --steps 2
"$bin" bench experiments/bench_diff.ini seq_len=4096 batch_size=1 --steps 2
echo "== memory: one forward pass at context 65536, batch 1 (bound: 8 GiB; takes minutes)"
"$bin" bench experiments/bench_diff.ini seq_len=65536 batch_size=1 --steps 2 --forward
torch=0
/usr/bin/python3 -c "import torch, h5py" 2>/dev/null && torch=1
if [ $torch = 1 ]; then
    echo "== PyTorch reference model (tests/make_reference.py), same shape and threads"
    /usr/bin/python3 tests/bench_torch.py standard 4
    /usr/bin/python3 tests/bench_torch.py diff 4
else
    echo "(python3-torch or python3-h5py not installed: PyTorch comparison skipped)"
fi
echo "== bf16 weight products (precision = bf16) against fp32, and PyTorch's bf16 autocast, same model and threads"
d768=(n_layer=4 d_model=768 head_dim=64 seq_len=256 batch_size=8)
for shape in bench d768; do
    for variant in standard diff; do
        extra=()
        if [ $shape = d768 ]; then extra=("${d768[@]}" n_head=$([ $variant = diff ] && echo 6 || echo 12)); fi
        for precision in fp32 bf16; do
            "$bin" bench "experiments/bench_$variant.ini" precision=$precision "${extra[@]}" --steps 6 2>&1 |
                grep -E 'bench train|tokens/s|products|precision' || true
        done
        if [ $torch = 1 ]; then
            /usr/bin/python3 tests/bench_torch.py $variant 4 fp32 $shape
            /usr/bin/python3 tests/bench_torch.py $variant 4 bf16 $shape
        fi
    done
done
