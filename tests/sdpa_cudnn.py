#!/usr/bin/env python3
"""PyTorch's own cuDNN attention on the GPU window's shapes (gpu-check.sh window): bf16, causal,
forward and backward under sdpa_kernel(SDPBackend.CUDNN_ATTENTION), against the same computation
in fp32 by the math backend, each output and gradient separately (relative L2), and its time
(the best of 10 after a warm-up, forward + backward) with the TFLOP/s that makes (causal: half
of 4 B H T^2 (D + Dv) forward, 2.5 times that backward). An independent reference and speed
ceiling for difftx's bf16 attention on the same card. With CUDNN_LOGLEVEL_DBG=3 set (the window
sets it) cuDNN logs the graph it ran, kept as the known-good graph of that cuDNN.
usage: sdpa_cudnn.py NAME:B:H:T:D:DV ..."""
import sys

import torch
import torch.nn.functional as F

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError as e:
    sys.exit(f"sdpa_cudnn.py: this PyTorch ({torch.__version__}) has no torch.nn.attention.sdpa_kernel: {e}")


def rel_l2(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def run(name, B, H, T, D, Dv):
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(2024)
    q, k = (torch.randn(B, H, T, D, device=dev, generator=g) for _ in range(2))
    v = torch.randn(B, H, T, Dv, device=dev, generator=g)
    dy = torch.randn(B, H, T, Dv, device=dev, generator=g)
    ref = [x.clone().requires_grad_() for x in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        y_ref = F.scaled_dot_product_attention(*ref, is_causal=True)
        y_ref.backward(dy)
    low = [x.to(torch.bfloat16).requires_grad_() for x in (q, k, v)]
    dy_low = dy.to(torch.bfloat16)
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            y = F.scaled_dot_product_attention(*low, is_causal=True)
            y.backward(dy_low)
    except RuntimeError as e:
        print(f"| {name} B={B} H={H} T={T} D={D} Dv={Dv} | cuDNN attention refused: {str(e).splitlines()[0]} | | | | | |")
        return False
    errs = [rel_l2(y, y_ref)] + [rel_l2(a.grad, b.grad) for a, b in zip(low, ref)]

    def step():
        for x in low:
            x.grad = None
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(*low, is_causal=True).backward(dy_low)

    step()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(10):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        stop.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(stop))
    flops = 3.5 * 0.5 * 2 * B * H * T * T * (D + Dv)
    ok = max(errs) <= 2e-2
    print(f"| {name} B={B} H={H} T={T} D={D} Dv={Dv} | " + " | ".join(f"{e:.1e}" for e in errs)
          + f" | {best:.3f} ms | {flops / best / 1e9:.1f} | {'agrees' if ok else 'DISAGREES'} |")
    return ok


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print(f"PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    print("| shape | y | dQ | dK | dV | forward + backward | TFLOP/s | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    ok = True
    for spec in sys.argv[1:]:
        name, *dims = spec.split(":")
        ok &= run(name, *map(int, dims))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
