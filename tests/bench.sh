#!/usr/bin/env bash
# make bench: training speed and MFU of both attention variants at the reference shape (d_model
# 256, 6 layers, context 256, batch 16, vocabulary 4096), their steps alternated and compared pair
# by pair; peak memory and its bounds at long context; PyTorch's speed on the same model where
# python3-torch is installed.
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
if /usr/bin/python3 -c "import torch, h5py" 2>/dev/null; then
    echo "== PyTorch reference model (tests/make_reference.py), same shape and threads"
    /usr/bin/python3 tests/bench_torch.py standard 4
    /usr/bin/python3 tests/bench_torch.py diff 4
else
    echo "(python3-torch or python3-h5py not installed: PyTorch comparison skipped)"
fi
