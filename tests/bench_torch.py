#!/usr/bin/python3
"""Training tokens/s of the PyTorch reference model (tests/make_reference.py) at the bench shape,
on the same CPU and thread count as `difftx bench`, for an honest comparison.
usage: bench_torch.py standard|diff [steps]"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_reference as ref  # noqa: E402

VARIANTS = {
    "standard": dict(attention="standard", n_head=8, head_dim=32, head_norm=False, lambda_init="schedule"),
    "diff": dict(attention="diff", n_head=4, head_dim=32, head_norm=True, lambda_init="schedule"),
}


def main():
    variant = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    B, T, V = 16, 256, 4096
    ref.V = V
    cfg = {**VARIANTS[variant], "n_layer": 6, "d_model": 256, "ffn_hidden": 704, "rope_theta": 10000.0}
    torch.manual_seed(0)
    P = {k: (0.02 * torch.randn(s)).requires_grad_(True) for k, s in ref.param_shapes(cfg).items()}
    opt = torch.optim.AdamW(P.values(), lr=1e-4, betas=(0.9, 0.98), weight_decay=0.05)
    tokens = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    timed = 0.0
    for step in range(steps):
        start = time.perf_counter()
        opt.zero_grad()
        _, loss = ref.forward(cfg, P, tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()
        if step > 0:
            timed += time.perf_counter() - start
    print(f"pytorch {torch.__version__} {variant}: {B * T * (steps - 1) / timed:.0f} tokens/s "
          f"({timed / (steps - 1):.3f} s per step, {torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
