// Forward/backward pairs for the building blocks of the model, llm.c style: plain float
// arrays with their shapes in comments. N = number of token rows (B*T).
// Backward functions accumulate (+=) into parameter gradients; what they do to input
// gradients is stated per function.
#ifndef LAYERS_H
#define LAYERS_H

#include <stdint.h>

#define RMSNORM_EPS 1e-5f

// out (N, OC) = inp (N, IC) . w (OC, IC)^T, plus out's old value when accumulate is set
void matmul_forward(float* out, const float* inp, const float* w, int N, int IC, int OC, int accumulate);
// dinp (N, IC) = dout . w (overwritten); dw (OC, IC) += dout^T . inp
void matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int IC, int OC);

// out = inp / rms(inp) * weight * out_scale, per row of width W; rstd (rows) kept for backward.
// out_scale carries DIFF's constant (1 - lambda_init) factor of the per-head norm.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, float out_scale, int rows, int W);
// dinp (rows, W) += ...; dweight (W) += ...
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, float out_scale, int rows, int W);

// RoPE with interleaved channel pairs (2j, 2j+1), in place on `heads` sub-heads of width D that
// start at column 0 of each row of x (rows, stride). Row n is at position n % T.
// cos_sin (T, D/2, 2). inverse rotates backwards, which is the backward pass.
void rope_precompute(float* cos_sin, int T, int D, float theta);
void rope_apply(float* x, const float* cos_sin, int rows, int T, int heads, int D, int stride, int inverse);

// gate_up (N, 2F) holds [gate | up] per row; h (N, F) = silu(gate) * up
void swiglu_forward(float* h, const float* gate_up, int N, int F);
// dgate_up (N, 2F) overwritten
void swiglu_backward(float* dgate_up, const float* dh, const float* gate_up, int N, int F);

// x (N, C) = tok_embedding (V, C)[tokens]
void embedding_forward(float* x, const int* tokens, const float* tok_embedding, int N, int C);
// dtok_embedding (V, C) += scatter of dx
void embedding_backward(float* dtok_embedding, const float* dx, const int* tokens, int N, int C);

// x (n) turned into softmax(x) in place; returns log(sum(exp(x))), the log-sum-exp
float softmax_inplace(float* x, int n);

// logits (N, V) are turned into probabilities in place; row_loss (N) gets each row's
// cross-entropy against targets (N); returns their sum in double.
double crossentropy_forward(float* probs_inout, float* row_loss, const int* targets, int N, int V);
// probs (N, V) turned into dlogits = (probs - onehot) * dloss in place
void crossentropy_backward(float* probs_inout, const int* targets, float dloss, int N, int V);

#endif
