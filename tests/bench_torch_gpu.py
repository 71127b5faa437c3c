#!/usr/bin/env python3
"""Training tokens/s and peak memory of the same model in PyTorch on the GPU, for gpu-check.sh's
comparison with `difftx bench device=cuda`: fp32 (TF32 off, as difftx), then bf16 autocast
(fp32 master weights, as difftx's precision = bf16) eager and under torch.compile. Attention
through scaled_dot_product_attention (DIFF as the official code does it: one call per map with
the 2D-wide V, DIFF V2 with both maps on the shared key/value head). AdamW, gradient clipping,
untied LM head, SwiGLU, RMSNorm, interleaved RoPE.
usage: bench_torch_gpu.py standard|diff|diff2 L C H D T B V [steps]"""
import math
import sys
import time

import torch
import torch.nn.functional as F


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def rope(x, cos, sin):  # x (B, h, T, D), interleaved pairs (2j, 2j+1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def make(variant, L, C, H, D, V, dev):
    M = 1 if variant == "standard" else 2
    KH = H if variant != "diff" else M * H
    Dv = 2 * D if variant == "diff" else D
    F_ = (8 * C + 2) // 3
    F_ = (F_ + 63) // 64 * 64
    qkv = M * H * D + KH * D + H * Dv + (H if variant == "diff2" else 0)
    P = {"emb": torch.randn(V, C) * 0.02, "head": torch.randn(V, C) * 0.02, "fn": torch.ones(C)}
    for l in range(L):
        P[f"{l}.an"] = torch.ones(C)
        P[f"{l}.wqkv"] = torch.randn(qkv, C) * 0.02
        P[f"{l}.wo"] = torch.randn(C, H * Dv) * 0.02
        P[f"{l}.fn"] = torch.ones(C)
        P[f"{l}.wgu"] = torch.randn(2 * F_, C) * 0.02
        P[f"{l}.wd"] = torch.randn(C, F_) * 0.02
        if variant == "diff":
            P[f"{l}.lam"] = torch.randn(4, D) * 0.1
            P[f"{l}.hn"] = torch.ones(Dv)
    return {k: v.to(dev).requires_grad_(True) for k, v in P.items()}, (M, KH, Dv, F_)


def forward(variant, P, dims, L, H, D, tokens, targets, cos, sin):
    M, KH, Dv, F_ = dims
    Bn, T = tokens.shape
    x = P["emb"][tokens]
    for l in range(L):
        h = rmsnorm(x, P[f"{l}.an"]) @ P[f"{l}.wqkv"].t()
        q = h[..., : M * H * D].view(Bn, T, M * H, D).transpose(1, 2)
        k = h[..., M * H * D: (M * H + KH) * D].view(Bn, T, KH, D).transpose(1, 2)
        v = h[..., (M * H + KH) * D: (M * H + KH) * D + H * Dv].view(Bn, T, H, Dv).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if variant == "standard":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            q1, q2 = q[:, 0::2], q[:, 1::2]
            k1, k2 = (k[:, 0::2], k[:, 1::2]) if variant == "diff" else (k, k)
            a1 = F.scaled_dot_product_attention(q1, k1, v, is_causal=True)
            a2 = F.scaled_dot_product_attention(q2, k2, v, is_causal=True)
            if variant == "diff":
                lq = P[f"{l}.lam"]
                lam = torch.exp((lq[0] * lq[1]).sum()) - torch.exp((lq[2] * lq[3]).sum()) + 0.8 - 0.6 * math.exp(-0.3 * l)
                y = rmsnorm(a1 - lam * a2, P[f"{l}.hn"]) * (1 - (0.8 - 0.6 * math.exp(-0.3 * l)))
            else:
                lam = torch.sigmoid(h[..., -H:]).transpose(1, 2).unsqueeze(-1)
                y = a1 - lam * a2
        x = x + y.transpose(1, 2).reshape(Bn, T, H * Dv) @ P[f"{l}.wo"].t()
        gu = rmsnorm(x, P[f"{l}.fn"]) @ P[f"{l}.wgu"].t()
        x = x + (F.silu(gu[..., :F_]) * gu[..., F_:]) @ P[f"{l}.wd"].t()
    logits = rmsnorm(x, P["fn"]) @ P["head"].t()
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    variant = sys.argv[1]
    L, C, H, D, T, Bn, V = (int(a) for a in sys.argv[2:9])
    steps = int(sys.argv[9]) if len(sys.argv) > 9 else 11
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    torch.manual_seed(0)
    pos = torch.arange(T, device=dev, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-2.0 * torch.arange(D // 2, device=dev, dtype=torch.float64) / D)
    cos, sin = torch.cos(pos * freq).float(), torch.sin(pos * freq).float()
    tokens = torch.randint(0, V, (Bn, T), device=dev)
    targets = torch.randint(0, V, (Bn, T), device=dev)
    for precision, compiled in (("fp32", False), ("bf16", False), ("bf16", True)):
        P, dims = make(variant, L, C, H, D, V, dev)
        opt = torch.optim.AdamW(P.values(), lr=1e-4, betas=(0.9, 0.98), weight_decay=0.05)
        fwd = torch.compile(forward) if compiled else forward
        torch.cuda.reset_peak_memory_stats()
        timed = 0.0
        for step in range(steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = fwd(variant, P, dims, L, H, D, tokens, targets, cos, sin)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
            opt.step()
            torch.cuda.synchronize()
            if step > 0:
                timed += time.perf_counter() - start
        tok_s = Bn * T * (steps - 1) / timed
        print(f"pytorch {torch.__version__} {variant} {precision}{' torch.compile' if compiled else ' eager'}: {tok_s:.0f} tokens/s, "
              f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
