#!/usr/bin/python3
"""Training tokens/s of the PyTorch reference model (tests/make_reference.py) on the same CPU and
thread count as `difftx bench`, for an honest comparison: at the bench shape (d_model 256, 6
layers, context 256, batch 16) or at d_model 768 (12 heads of 64, 4 layers, context 256, batch 8);
in fp32, or under bf16 autocast (oneDNN's bf16 matmuls, as `precision = bf16` is for difftx).
usage: bench_torch.py standard|diff [steps] [fp32|bf16] [bench|d768]"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_reference as ref  # noqa: E402

VARIANTS = {
    "standard": dict(attention="standard", head_norm=False, lambda_init="schedule"),
    "diff": dict(attention="diff", head_norm=True, lambda_init="schedule"),
}
# (n_layer, d_model, Transformer heads, head_dim, ffn_hidden, B): DIFF takes half the heads
SHAPES = {"bench": (6, 256, 8, 32, 704, 16), "d768": (4, 768, 12, 64, 2048, 8)}


def main():
    variant = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    precision = sys.argv[3] if len(sys.argv) > 3 else "fp32"
    shape = sys.argv[4] if len(sys.argv) > 4 else "bench"
    if variant not in VARIANTS or precision not in ("fp32", "bf16") or shape not in SHAPES:
        sys.exit(__doc__)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    L, C, H, D, F, B = SHAPES[shape]
    T, V = 256, 4096
    ref.V = V
    heads = H // 2 if variant == "diff" else H
    cfg = {**VARIANTS[variant], "n_layer": L, "d_model": C, "n_head": heads, "head_dim": D, "ffn_hidden": F,
           "rope_theta": 10000.0}
    torch.manual_seed(0)
    P = {k: (0.02 * torch.randn(s)).requires_grad_(True) for k, s in ref.param_shapes(cfg).items()}
    opt = torch.optim.AdamW(P.values(), lr=1e-4, betas=(0.9, 0.98), weight_decay=0.05)
    tokens = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    timed = 0.0
    for step in range(steps):
        start = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            _, loss = ref.forward(cfg, P, tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()
        if step > 0:
            timed += time.perf_counter() - start
    print(f"pytorch {torch.__version__} {variant} {precision} ({shape} shape): {B * T * (steps - 1) / timed:.0f} tokens/s "
          f"({timed / (steps - 1):.3f} s per step, {torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
