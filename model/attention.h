// Causal multi-head attention, memory-linear in T, for both variants in one kernel.
//
// M is the number of softmax maps per head: M = 1 is standard attention, M = 2 is
// differential attention (paper Eq. 1-3): head_h = (A_{h,0} - lambda A_{h,1}) V_h.
// Layout of one token's row of qkv (N, QKV), QKV = 2*M*H*D + H*Dv, Dv = M*D:
//   [ q: M*H sub-heads of width D | k: M*H sub-heads of width D | v: H heads of width Dv ]
// Sub-head h*M + m is map m of head h (the official flash code's pairing 2i, 2i+1).
//
// Queries are processed in blocks of ATTN_BLOCK rows against all the keys they can see; the
// probabilities of one block live in per-thread scratch (ATTN_BLOCK x T per map) and are
// recomputed in the backward pass from the saved log-sum-exp, so nothing T x T is kept.
// Both maps of a DIFF head are combined, P = P_0 - lambda P_1, before the single product with
// the shared V block, so DIFF costs the same matmul FLOPs as standard attention of equal width.
#ifndef ATTENTION_H
#define ATTENTION_H

#define ATTN_BLOCK 64

// y (N, H*Dv); lse (B, H, M, T) saved for backward; lambda is ignored when M = 1
void attention_forward(float* y, float* lse, const float* qkv, float lambda, int B, int T, int H, int D, int M);
// dqkv (N, QKV) overwritten; returns dloss/dlambda (0 when M = 1)
float attention_backward(float* dqkv, const float* dy, const float* qkv, const float* lse, float lambda,
                         int B, int T, int H, int D, int M);

#endif
