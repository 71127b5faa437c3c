// Decoding on the KV cache (prefill in pieces across a query block, then single tokens, then
// stepping back) equal to the full forward pass for every variant (within 5e-5 of the largest
// logit, about 8e-4, on logits of peaked attention); DINT's maps over a filled cache; the analysis maps times V
// equal to the fused attention output (within 1e-4) with rows summing to 1.
#define _DEFAULT_SOURCE
#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../model/cpu/cpu.h"
#include "../base/util.h"
#include "check.h"
#include "model_fixtures.h"
#include "instances.h"

// DINT's maps over a filled cache of T positions: map 1 less the integral term, so each row of
// A_0 - lambda A_1 sums to one, A_1's rows to zero, row 0 is all on token 0 (its integral term
// is map 0's one row), and rows asked from first_row on are those asked from row 0
static void test_integral_maps(Model* m, int T) {
    int first = 40, rows = T - first;
    float *A = mallocCheck((size_t)2 * T * T * sizeof(float)), *lambda = mallocCheck(T * sizeof(float));
    float *later = mallocCheck((size_t)2 * rows * T * sizeof(float)), *later_lambda = mallocCheck(rows * sizeof(float));
    model_attention_maps(m, 1, 1, 0, T, A, lambda);
    model_attention_maps(m, 1, 1, first, T, later, later_lambda);
    double worst_sum = 0, worst_noise = 0, worst_later = 0;
    for (int i = 0; i < T; i++) {
        double sum = 0, noise = 0;
        for (int k = 0; k < T; k++) {
            sum += A[(size_t)i * T + k] - lambda[i] * A[((size_t)T + i) * T + k];
            noise += A[((size_t)T + i) * T + k];
        }
        worst_sum = fmax(worst_sum, fabs(sum - 1));
        worst_noise = fmax(worst_noise, fabs(noise));
    }
    for (int r = 0; r < rows; r++) {
        for (int k = 0; k < T; k++) {
            worst_later = fmax(worst_later, fabs(later[(size_t)r * T + k] - A[(size_t)(first + r) * T + k]));
            worst_later = fmax(worst_later, fabs(later[((size_t)rows + r) * T + k] - A[((size_t)T + first + r) * T + k]));
        }
    }
    CHECK(worst_sum < 1e-5 && worst_noise < 1e-5, "dint maps: rows of A_0 - lambda A_1 sum to one (worst %.1e), of A_1 to zero (%.1e)",
          worst_sum, worst_noise);
    CHECK(A[0] == 1.0f && A[(size_t)T * T] == 0.0f, "dint maps: row 0 is all on token 0 (A_0 %g, A_1 %g)", A[0], A[(size_t)T * T]);
    CHECK(worst_later == 0, "dint maps: rows asked from %d on are those asked from 0 (max |diff| %.1e)", first, worst_later);
    free(A);
    free(lambda);
    free(later);
    free(later_lambda);
}

// Prefill in pieces, then one token at a time, gives the full forward pass's logits; a cached
// forward has its last row's logits only
static void test_cache(int attention) {
    TestModel cfg = short_context_model(attention);
    Model m;
    model_build(&m, &cfg.model, backend_named("cpu"), 300, cfg.batch_size);
    model_init_params(&m, 11);
    float* params = mallocCheck(m.n_params * sizeof(float));
    model_get_params(&m, params);
    for (size_t i = 0; i < m.n_params; i++) params[i] *= 6.0f;  // peaked attention
    model_set_params(&m, params);
    int T = 90, tokens[90];
    uint64_t rng = 3;
    for (int t = 0; t < T; t++) tokens[t] = (int)(rng_next(&rng) % 300);
    model_forward(&m, tokens, NULL, 1, T, 0);
    float* full = mallocCheck((size_t)T * m.V * sizeof(float));
    float* row = mallocCheck((size_t)m.V * sizeof(float));
    for (int t = 0; t < T; t++) model_logits(&m, t, full + (size_t)t * m.V);
    // A tolerance relative to the logits' scale: the peaked maps pass a rounding difference of
    // the two paths' summation orders on to the logits amplified where two keys nearly tie.
    // Measured, the largest |logit| about 16: most variants within 7e-5, and outliers of 1.3e-4
    // (diff_shared_noise, -march=native) and 3.2e-4 (diff_shared, the sanitizer build), which
    // move from variant to variant with the compiler's flags. A wrong row or key is off by the
    // logits' own size.
    double largest = 0;
    for (size_t i = 0; i < (size_t)T * m.V; i++) largest = fmax(largest, fabs(full[i]));
    double tolerance = 5e-5 * largest;
    model_cache_init(&m, 128);
    double worst = 0;
    int pieces[] = {70, 13, 1, 1, 1, 4};  // 70 > the kernel's 64-row query block: the prefill crosses a block
    int pos = 0;
    for (int k = 0; k < 6; k++) {
        model_forward_cached(&m, tokens + pos, pieces[k], pos);
        pos += pieces[k];
        model_logits(&m, pieces[k] - 1, row);
        for (int v = 0; v < m.V; v++) worst = fmax(worst, fabs(row[v] - full[(size_t)(pos - 1) * m.V + v]));
    }
    CHECK(pos == T && worst < tolerance, "%s: cached decoding matches the full forward (max |diff| %.2e, tolerance %.2e)",
          config_attention_name(&cfg.model), worst, tolerance);
    // stepping back reuses the prefix, rows from pos on are replaced: every row from 70 on as
    // the last of a piece that starts at 70, so each one's logits depend on the piece's rows before it
    double back = 0;
    for (int end = 71; end <= T; end++) {
        model_forward_cached(&m, tokens + 70, end - 70, 70);
        model_logits(&m, end - 71, row);
        for (int v = 0; v < m.V; v++) back = fmax(back, fabs(row[v] - full[(size_t)(end - 1) * m.V + v]));
    }
    CHECK(back < tolerance, "%s: stepping the cache back gives the same logits (%.2e, tolerance %.2e)", config_attention_name(&cfg.model),
          back, tolerance);
    pid_t child = fork();
    if (child == 0) {
        freopen("/dev/null", "w", stderr);
        model_logits(&m, 0, row);  // row 0 of the last 20-row cached forward
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0, "%s: a cached forward's other rows have no logits to read",
          config_attention_name(&cfg.model));
    if (m.shape.integral) test_integral_maps(&m, T);
    free(full);
    free(row);
    free(params);
    model_free(&m);
}

// attention_maps' rows combined with lambda and multiplied by V equal attention_forward's
// output for the same rows, q0 > 0 included
static void test_maps_times_v(int M, int shared_kv) {
    AttnShape s = {1, 80, 2, 8, M, shared_kv ? LAYOUT_SHARED_KV : LAYOUT_PAIRED, shared_kv, 30, {0, QUANT_PER_TENSOR}, 0, 0};
    const Backend* be = backend_cpu();
    HookSite no_hook = {NULL, 0};
    int QKV = attention_qkv_width(&s), lam = attention_lambda_offset(&s);
    int Dv = shared_kv ? s.D : M * s.D, HDv = s.H * Dv, rows = s.T - s.q0;
    float* qkv = mallocCheck((size_t)s.T * QKV * sizeof(float));
    uint64_t rng = 17 + M + shared_kv;
    for (int i = 0; i < s.T * QKV; i++) qkv[i] = 1.5f * rng_normal(&rng);
    if (lam >= 0) {
        for (int t = 0; t < s.T; t++) for (int h = 0; h < s.H; h++) qkv[(size_t)t * QKV + lam + h] = rng_uniform(&rng);
    }
    float lambda = 0.37f;
    size_t qkv_bytes = (size_t)s.T * QKV * sizeof(float), y_bytes = (size_t)rows * HDv * sizeof(float);
    size_t P_bytes = (size_t)M * rows * s.T * sizeof(float);
    float *d_qkv = be->alloc(qkv_bytes), *d_lambda = be->alloc(sizeof(float)), *d_y = be->alloc(y_bytes), *d_P = be->alloc(P_bytes);
    be->upload(d_qkv, qkv, qkv_bytes);
    be->upload(d_lambda, &lambda, sizeof(float));
    float* y = mallocCheck(y_bytes);
    be->attention_forward(be, d_y, NULL, NULL, d_qkv, d_lambda, &s, no_hook);
    be->download(y, d_y, y_bytes);
    float* P = mallocCheck(P_bytes);
    double worst = 0, row_sum_err = 0;
    for (int h = 0; h < s.H; h++) {
        be->attention_maps(be, d_P, d_qkv, &s, h, no_hook);
        be->download(P, d_P, P_bytes);
        int v_col = attention_v_col(&s, h, 0);
        for (int r = 0; r < rows; r++) {
            int t = s.q0 + r;
            float lam_r = M == 1 ? 0.0f : lam >= 0 ? qkv[(size_t)t * QKV + lam + h] : lambda;
            for (int m = 0; m < M; m++) {
                double sum = 0;
                for (int j = 0; j < s.T; j++) sum += P[((size_t)m * rows + r) * s.T + j];
                row_sum_err = fmax(row_sum_err, fabs(sum - 1.0));
            }
            for (int c = 0; c < Dv; c++) {
                double acc = 0;
                for (int j = 0; j <= t; j++) {
                    double p = P[(size_t)r * s.T + j] - (M == 2 ? lam_r * P[((size_t)rows + r) * s.T + j] : 0.0);
                    acc += p * qkv[(size_t)j * QKV + v_col + c];
                }
                worst = fmax(worst, fabs(acc - y[(size_t)r * HDv + h * Dv + c]));
            }
        }
    }
    CHECK(worst < 1e-4, "M=%d shared_kv=%d: maps x V equal the fused output (max |diff| %.2e)", M, shared_kv, worst);
    CHECK(row_sum_err < 1e-5, "M=%d shared_kv=%d: every map row sums to 1 (%.2e)", M, shared_kv, row_sum_err);
    free(qkv);
    free(y);
    free(P);
    be->release(d_qkv);
    be->release(d_lambda);
    be->release(d_y);
    be->release(d_P);
}

int main(void) {
    for (int a = 0; a < ATTN_VARIANT_COUNT; a++) test_cache(a);
    test_maps_times_v(1, 0);
    test_maps_times_v(2, 0);
    test_maps_times_v(2, 1);
    return check_summary();
}
