#!/usr/bin/python3
"""Writes tests/ref/<case>.h5: PyTorch reference data for tests/test_reference.c.

The model is written here from scratch in plain PyTorch, following the official
Diff-Transformer semantics (../shared/notes/reference-semantics.md) with full T x T attention
maps, so it shares no code with the C implementation. Each file is a valid difftx checkpoint
(docs/checkpoint.md) holding the initial parameters, plus:
  tokens, targets (B, T) int32; logits (B*T, V); loss (scalar);
  grads/<tensor> (same names as params/); adamw_losses (STEPS,) losses of STEPS AdamW steps
  with warmup, linear decay, weight decay and gradient clipping.
Run with Debian's python3-torch and python3-h5py: /usr/bin/python3 tests/make_reference.py [CASE...]
(all cases without arguments).
"""
import sys
import math
import os

import h5py
import numpy as np
import torch

B, T, V, STEPS = 2, 80, 64, 5  # T = 80 spans two 64-row query blocks of the C kernel

CASES = {
    "standard": dict(attention="standard", n_head=4, head_dim=8, head_norm=False, lambda_init="schedule"),
    "standard_headnorm": dict(attention="standard", n_head=2, head_dim=16, head_norm=True, lambda_init="schedule"),
    "diff": dict(attention="diff", n_head=2, head_dim=8, head_norm=True, lambda_init="schedule"),
    "diff_no_headnorm": dict(attention="diff", n_head=2, head_dim=8, head_norm=False, lambda_init="0.5"),
    "diff2": dict(attention="diff2", n_head=2, head_dim=16, head_norm=False, lambda_init="schedule"),
    "diff2_halves": dict(attention="diff2_halves", n_head=2, head_dim=16, head_norm=False, lambda_init="schedule"),
    # DIFF with shared noise maps: 4 signal heads, 2 noise sub-heads, each shared by 2 heads
    "diff_shared_noise": dict(attention="diff_shared_noise", n_head=4, head_dim=4, noise_group=2, head_norm=True,
                              lambda_init="schedule"),
    # Shared DIFF: one query and one key projection shared by both maps, plus a rank-3 update per map
    "diff_shared": dict(attention="diff_shared", n_head=2, head_dim=8, update_rank=3, head_norm=True,
                        lambda_init="schedule"),
    # DINT: DIFF plus lambda times the causal column mean of map 0, as a T x T map
    "dint": dict(attention="dint", n_head=2, head_dim=8, head_norm=True, lambda_init="schedule"),
    # grouped differential attention as Motif's code computes it: 8 query heads in 2 groups of
    # 3 signal heads and 1 noise head, each group on one signal key, one noise key, two values
    "gda": dict(attention="gda", n_head=8, head_dim=4, noise_group=3, head_norm=True, lambda_init="schedule"),
}
PER_LAYER_LAMBDA = ("diff", "diff_shared_noise", "diff_shared", "dint", "gda")
COMMON = dict(n_layer=2, d_model=32, ffn_hidden=64, rope_theta=10000.0, seq_len=T, batch_size=B, steps=STEPS,
              lr=1e-2, lr_final=1e-3, warmup_steps=2, beta1=0.9, beta2=0.98, adam_eps=1e-8, weight_decay=0.1,
              grad_clip=0.5)


def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    """x (B, T, heads, D); rotates interleaved channel pairs (2j, 2j+1) by t * theta^(-2j/D)."""
    T, D = x.shape[1], x.shape[-1]
    freqs = theta ** (-2.0 * torch.arange(D // 2, dtype=torch.float64) / D)
    angle = torch.outer(torch.arange(T, dtype=torch.float64), freqs)
    cos, sin = angle.cos().float()[None, :, None, :], angle.sin().float()[None, :, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


def lambda_init_of(cfg, depth):
    if cfg["lambda_init"] == "schedule":
        return 0.8 - 0.6 * math.exp(-0.3 * depth)
    return float(cfg["lambda_init"])


def query_heads(cfg):
    """Query sub-heads: one per map and head, H signal and H / G noise ones with shared noise
    maps, GDA's n_head."""
    M = 1 if cfg["attention"] == "standard" else 2
    if cfg["attention"] == "diff_shared_noise":
        return cfg["n_head"] + cfg["n_head"] // cfg["noise_group"]
    if cfg["attention"] == "gda":
        return cfg["n_head"]
    return M * cfg["n_head"]


def heads(cfg):
    """(H, KH, VH, Dv): heads giving an output, key heads, value heads and their width."""
    M = 1 if cfg["attention"] == "standard" else 2
    H, D = cfg["n_head"], cfg["head_dim"]
    if cfg["attention"] in ("diff2", "diff2_halves"):  # 2H query heads share H key/value heads of width D
        return H, H, H, D
    if cfg["attention"] == "gda":  # per group of G + 1 query heads: two keys, two D-wide values
        groups = H // (cfg["noise_group"] + 1)
        return H - groups, 2 * groups, groups, 2 * D
    return H, query_heads(cfg), H, M * D


def param_shapes(cfg):
    M = 1 if cfg["attention"] == "standard" else 2
    v2 = cfg["attention"] in ("diff2", "diff2_halves")
    D, C, F = cfg["head_dim"], cfg["d_model"], cfg["ffn_hidden"]
    QH = query_heads(cfg)
    H, KH, VH, Dv = heads(cfg)
    shapes = {"tok_embedding": (V, C)}
    for l in range(cfg["n_layer"]):
        p = f"layer_{l:02d}/"
        shapes[p + "attn_norm"] = (C,)
        if cfg["attention"] == "diff_shared":  # map m's projection: shared + update_out[m] @ update_in[m].T
            R = cfg["update_rank"]
            for w in ("wq", "wk"):
                shapes[p + w + "_shared"] = (H * D, C)
                shapes[p + w + "_update_out"] = (M * H * D, R)
                shapes[p + w + "_update_in"] = (M * C, R)
        else:
            shapes[p + "wq"] = (QH * D, C)
            shapes[p + "wk"] = (KH * D, C)
        shapes[p + "wv"] = (VH * Dv, C)
        if v2:
            shapes[p + "w_lambda"] = (H, C)
        shapes[p + "wo"] = (C, H * Dv)
        if cfg["attention"] in PER_LAYER_LAMBDA:
            for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                shapes[p + name] = (D,)
        if cfg["head_norm"]:
            shapes[p + "head_norm"] = (Dv,)
        shapes[p + "ffn_norm"] = (C,)
        shapes[p + "w_gate"] = (F, C)
        shapes[p + "w_up"] = (F, C)
        shapes[p + "w_down"] = (C, F)
    shapes["final_norm"] = (C,)
    shapes["lm_head"] = (V, C)
    return shapes


def forward(cfg, P, tokens, targets):
    M = 1 if cfg["attention"] == "standard" else 2
    v2 = cfg["attention"] in ("diff2", "diff2_halves")
    halves = cfg["attention"] == "diff2_halves"
    shared_noise = cfg["attention"] == "diff_shared_noise"
    D = cfg["head_dim"]
    QH = query_heads(cfg)
    H, KH, VH, Dv = heads(cfg)
    Bn, Tn = tokens.shape
    x = P["tok_embedding"][tokens]
    causal = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    for l in range(cfg["n_layer"]):
        p = lambda name: P[f"layer_{l:02d}/{name}"]
        h = rmsnorm(x, p("attn_norm"))
        if cfg["attention"] == "diff_shared":
            def project(w):  # (B, T, H*2, D): head h's maps 0 and 1 adjacent, as DIFF's
                maps = []
                for m in range(2):
                    up = p(w + "_update_out")[m * H * D:(m + 1) * H * D]
                    down = p(w + "_update_in")[m * h.shape[-1]:(m + 1) * h.shape[-1]]
                    maps.append((h @ p(w + "_shared").T + (h @ down) @ up.T).view(Bn, Tn, H, D))
                return torch.stack(maps, dim=3).view(Bn, Tn, 2 * H, D)
            q = rope(project("wq"), cfg["rope_theta"]).transpose(1, 2)
            k = rope(project("wk"), cfg["rope_theta"]).transpose(1, 2)
        else:
            q = rope((h @ p("wq").T).view(Bn, Tn, QH, D), cfg["rope_theta"]).transpose(1, 2)
            k = rope((h @ p("wk").T).view(Bn, Tn, KH, D), cfg["rope_theta"]).transpose(1, 2)
        v = (h @ p("wv").T).view(Bn, Tn, VH, Dv).transpose(1, 2)
        lam_init = lambda_init_of(cfg, l)
        if cfg["attention"] == "gda":
            x = layer_output(cfg, p, x, grouped_differential_attention(cfg, q, k, v, causal, P, l), lam_init)
            continue
        if v2:  # query heads 2i and 2i+1 share key head i
            k = k.repeat_interleave(2, dim=1)
        if shared_noise:  # signal sub-heads, then noise sub-heads repeated for the G heads sharing each
            G = cfg["noise_group"]
            q = torch.stack([q[:, :H], q[:, H:].repeat_interleave(G, dim=1)], dim=2).flatten(1, 2)
            k = torch.stack([k[:, :H], k[:, H:].repeat_interleave(G, dim=1)], dim=2).flatten(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        attn = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)  # (B, M*H, T, T)
        if halves:  # each query head j on key/value head j // 2; head i is o_i - lambda_i o_{i+H}
            lam = torch.sigmoid(h @ p("w_lambda").T).transpose(1, 2).unsqueeze(-1)
            o = attn @ v.repeat_interleave(2, dim=1)  # (B, 2H, T, D)
            y = o[:, :H] - lam * o[:, H:]
        elif v2:  # lambda per token and head: sigmoid(x W_lambda), (B, H, T, 1)
            attn = attn.view(Bn, H, 2, Tn, Tn)
            lam = torch.sigmoid(h @ p("w_lambda").T).transpose(1, 2).unsqueeze(-1)
            attn = attn[:, :, 0] - lam * attn[:, :, 1]
        elif M == 2:
            attn = attn.view(Bn, H, 2, Tn, Tn)
            lam = (torch.exp(torch.dot(p("lambda_q1"), p("lambda_k1"))) -
                   torch.exp(torch.dot(p("lambda_q2"), p("lambda_k2"))) + lam_init)
            integral = 0
            if cfg["attention"] == "dint":  # G_i: the mean of map 0's rows 0..i
                rows = torch.arange(1, Tn + 1, dtype=attn.dtype).view(Tn, 1)
                integral = lam * attn[:, :, 0].cumsum(dim=-2) / rows
            attn = attn[:, :, 0] - lam * attn[:, :, 1] + integral
        if not halves:
            y = attn @ v  # (B, H, T, Dv)
        x = layer_output(cfg, p, x, y, lam_init)
    logits = rmsnorm(x, P["final_norm"]) @ P["lm_head"].T
    logits = logits.view(Bn * Tn, V)
    return logits, torch.nn.functional.cross_entropy(logits, targets.reshape(-1))


def layer_output(cfg, p, x, y, lam_init):
    """The layer after its heads' outputs y (B, H, T, Dv): head norm, output projection with the
    residual, then the SwiGLU block with its own."""
    if cfg["head_norm"]:
        y = rmsnorm(y, p("head_norm")) * ((1 - lam_init) if cfg["attention"] in PER_LAYER_LAMBDA else 1.0)
    Bn, H, Tn, Dv = y.shape
    x = x + y.transpose(1, 2).reshape(Bn, Tn, H * Dv) @ p("wo").T
    h = rmsnorm(x, p("ffn_norm"))
    return x + (torch.nn.functional.silu(h @ p("w_gate").T) * (h @ p("w_up").T)) @ p("w_down").T


def grouped_differential_attention(cfg, q, k, v, causal, P, l):
    """GDA as Motif's code computes it (its vLLM backend's split of heads, one softmax map per
    query head against its grouped-query key, each map times both D-wide halves of the group's
    value, the noise heads' outputs repeated for the group's signal heads): q (B, n_head, T, D)
    striped [Q1 x G, Q2] per group, k (B, 2 groups, T, D) and v (B, groups, T, 2D) as pairs
    (signal, noise) and (v1, v2). Returns (B, signal heads, T, 2D) before the head norm."""
    G = cfg["noise_group"]
    Bn, n_head, Tn, D = q.shape
    groups = n_head // (G + 1)
    q = q.reshape(Bn, groups, G + 1, Tn, D)
    q1, q2 = q[:, :, :G].flatten(1, 2), q[:, :, G]  # (B, groups G, T, D), (B, groups, T, D)
    k1, k2 = k[:, 0::2], k[:, 1::2]  # (B, groups, T, D) each
    v1, v2 = v[..., :D], v[..., D:]

    def single(query, key, value):
        key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
        value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
        scores = (query @ key.transpose(-1, -2)) / math.sqrt(D)
        return torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ value

    attn1 = torch.cat([single(q1, k1, v1), single(q1, k1, v2)], dim=-1)
    attn2 = torch.cat([single(q2, k2, v1), single(q2, k2, v2)], dim=-1).repeat_interleave(G, dim=1)
    p = lambda name: P[f"layer_{l:02d}/{name}"]
    lam = (torch.exp(torch.dot(p("lambda_q1"), p("lambda_k1"))) - torch.exp(torch.dot(p("lambda_q2"), p("lambda_k2"))) +
           lambda_init_of(cfg, l))
    return attn1 - lam * attn2


def lr_at(cfg, step):
    if step < cfg["warmup_steps"]:
        return cfg["lr"] * (step + 1) / cfg["warmup_steps"]
    progress = (step - cfg["warmup_steps"]) / (cfg["steps"] - cfg["warmup_steps"])
    return cfg["lr_final"] + (cfg["lr"] - cfg["lr_final"]) * (1 - progress)


def recipe_text(cfg):
    lines = []
    for key, value in cfg.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def write_case(name, cfg, path):
    torch.manual_seed(sum(map(ord, name)))
    P = {}
    for key, shape in param_shapes(cfg).items():
        leaf = key.split("/")[-1]
        if leaf.endswith("norm"):
            P[key] = 1.0 + 0.1 * torch.randn(shape)
        elif "_update_" in leaf:
            # Shared DIFF's maps differ by update_out @ update_in.T: at 0.1 they would be nearly one
            # map, which the head norm's scale invariance turns into a near-zero, cancelling
            # gradient of lambda that fp32 cannot check to 2e-5
            P[key] = 0.3 * torch.randn(shape)
        else:
            P[key] = 0.1 * torch.randn(shape)
        P[key].requires_grad_(True)
    tokens = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))

    logits, loss = forward(cfg, P, tokens, targets)
    loss.backward()
    initial = {k: v.detach().clone() for k, v in P.items()}
    grads = {k: v.grad.detach().clone() for k, v in P.items()}

    decay = [v for k, v in P.items() if v.dim() == 2]
    no_decay = [v for k, v in P.items() if v.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["adam_eps"])
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        _, step_loss = forward(cfg, P, tokens, targets)
        step_loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), cfg["grad_clip"])
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step)
        opt.step()
        losses.append(step_loss.item())

    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs["format"] = np.string_("difftx-checkpoint")
        f.attrs["format_version"] = np.int32(1)
        f.attrs["config"] = np.string_(recipe_text(cfg))
        f.attrs["vocab_size"] = np.int32(V)
        f.attrs["tokenizer_hash"] = np.string_("0000000000000000")
        f.attrs["step"] = np.int32(0)
        f.attrs["rows_seen"] = np.uint64(0)
        f.attrs["threads"] = np.int32(1)
        f.attrs["finished"] = np.int32(0)
        f.attrs["train_loss"] = np.float64(loss.item())
        for key in P:
            f.create_dataset("params/" + key, data=initial[key].numpy(), fletcher32=True)
            f.create_dataset("grads/" + key, data=grads[key].numpy())
        f.create_dataset("tokens", data=tokens.numpy().astype(np.int32))
        f.create_dataset("targets", data=targets.numpy().astype(np.int32))
        f.create_dataset("logits", data=logits.detach().numpy())
        f.create_dataset("loss", data=np.float64(loss.item()))
        f.create_dataset("adamw_losses", data=np.array(losses, dtype=np.float64))
    os.replace(tmp, path)
    print(f"{path}: loss {loss.item():.6f}, AdamW losses {['%.5f' % x for x in losses]}")


def main():
    torch.set_num_threads(1)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref")
    os.makedirs(out, exist_ok=True)
    for name in sys.argv[1:] or CASES:
        write_case(name, {**CASES[name], **COMMON}, os.path.join(out, name + ".h5"))


if __name__ == "__main__":
    main()
