// Causal multi-head attention, memory-linear in T, for every variant in one kernel.
//
// M is the number of softmax maps per head: M = 1 is standard attention, M = 2 differential
// attention, head_h = (A_{h,0} - lambda A_{h,1}) V_h. Two flavours of M = 2:
//   DIFF (paper Eq. 1-3): each map has its own key sub-head; V is Dv = 2D wide; one lambda
//     per layer.
//   DIFF V2 (shared_kv): both maps use key/value head h; V is Dv = D wide; lambda is per token
//     and head, read from qkv (a sigmoid of a projection, computed by the caller).
// Layout of one token's row of qkv (N, QKV):
//   [ q: M*H sub-heads of width D | k: KH heads of width D | v: H heads of width Dv | lambda: H ]
// with KH = M*H (KH = H when shared_kv) and the lambda columns only when shared_kv. Query
// sub-head h*M + m is map m of head h (the official code's pairing 2i, 2i+1); without
// shared_kv, key sub-head h*M + m pairs with it.
//
// Queries are processed in blocks of ATTN_BLOCK rows against all the keys they can see; the
// probabilities of one block live in per-thread scratch (ATTN_BLOCK x T per map) and are
// recomputed in the backward pass from the saved log-sum-exp, so nothing T x T is kept.
// Both maps of a head are combined, P = P_0 - lambda P_1, before the single product with the
// shared V block, so differential attention costs the same matmul FLOPs as standard
// attention of equal width.
#ifndef ATTENTION_H
#define ATTENTION_H

#define ATTN_BLOCK 64

typedef struct {
    int B, T, H, D;
    int M;          // maps per head: 1 or 2
    int shared_kv;  // DIFF V2
    int q0;         // first query row: rows q0..T-1 attend to keys 0..row (decoding on a
                    // cache of T - q0 new rows after q0 cached ones); 0 in training
} AttnShape;

// Columns of one qkv row for this shape
int attention_qkv_width(const AttnShape* s);
// Offset of the per-token lambda columns in a qkv row (DIFF V2), -1 otherwise
int attention_lambda_offset(const AttnShape* s);

// y (B*(T-q0), H*Dv); lse (B, H, M, T) saved for backward, or NULL. lambda: the layer's
// lambda for DIFF, ignored for M = 1 and DIFF V2.
void attention_forward(float* y, float* lse, const float* qkv, float lambda, const AttnShape* s);
// The softmax maps of head h for query rows q0..T-1 of sequence 0, each row zero beyond its
// own position: P (M, T-q0, T). The fused output of row i is (P_0 - lambda_i P_1) V_h; the
// analysis of attention allocation reads these maps.
void attention_maps(float* P, const float* qkv, const AttnShape* s, int h);
// q0 = 0 only. dqkv (N, QKV) overwritten, its lambda columns with dloss/dlambda (DIFF V2); returns
// dloss/dlambda of the layer's lambda (DIFF), 0 otherwise.
float attention_backward(float* dqkv, const float* dy, const float* qkv, const float* lse, float lambda,
                         const AttnShape* s);

#endif
