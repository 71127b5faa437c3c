// precision = bf16 on the CPU backend: the weights' products with bf16 operands and fp32
// accumulation (oneDNN), held to references on any CPU where oneDNN has a bf16 matmul (AVX-512
// at least: natively with AVX-512 BF16 or AMX, emulated otherwise; an AVX2-only CPU has none, and
// only its refusal is checked). Each product against the same product
// of the bf16-rounded operands in double (tight: fp32 accumulation's bound) and against the fp32
// product of the unrounded operands (bf16's 8-bit mantissa: each operand off by at most 2^-9);
// the weights' bf16 copies made once per change, not per product; the refusal where the CPU has
// no bf16 dot products, from its instruction sets. Where the CPU has them (AVX-512 BF16 or AMX):
// a small model of every variant in bf16 against fp32, each gradient tensor's relative L2 error
// at most 1e-2 (the field's bf16 tolerance); 20 training steps' losses within 1e-2 relative of
// fp32's, and bitwise equal when repeated. Elsewhere the model cases say they are skipped and why.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../model/cpu/cpu.h"
#include "../model/model.h"
#include "../model/optim.h"
#include "check.h"
#include "fixtures.h"

static float rounded(float x) {
    uint32_t u = (uint32_t)cpu_bf16_round(x) << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static void fill(float* x, size_t n, uint64_t seed) {
    uint64_t rng = hash64(seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_uniform(&rng) * 2.0f - 1.0f;
}

// ref (M, N) = op(A) op(B) (+ C0) in double, of A and B rounded to bf16 first when round is set;
// bound: sum of |terms| per element
static void reference(double* ref, double* bound, int ta, int tb, int M, int N, int K, const float* A, const float* B,
                      const float* C0, int round) {
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double s = C0 ? C0[(size_t)i * N + j] : 0.0, mag = fabs(s);
            for (int k = 0; k < K; k++) {
                float a = ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
                float b = tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                if (round) a = rounded(a), b = rounded(b);
                s += (double)a * b;
                mag += fabs((double)a * b);
            }
            ref[(size_t)i * N + j] = s;
            bound[(size_t)i * N + j] = mag;
        }
    }
}

// worst |got - ref| / (unit * bound) over (M, N): <= 1 passes
static double worst_ratio(const float* got, const double* ref, const double* bound, size_t n, double unit) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs(got[i] - ref[i]) / (unit * bound[i] + 1e-30);
        if (!(r <= worst)) worst = isnan(r) ? INFINITY : r;
    }
    return worst;
}

static void test_products(void) {
    static const int SHAPES[][3] = {{1, 5, 3}, {7, 5, 3}, {64, 96, 80}, {130, 257, 129}};
    for (size_t s = 0; s < sizeof(SHAPES) / sizeof(SHAPES[0]); s++) {
        int N = SHAPES[s][0], IC = SHAPES[s][1], OC = SHAPES[s][2];
        float* inp = mallocCheck((size_t)N * IC * sizeof(float));
        float* w = mallocCheck((size_t)OC * IC * sizeof(float));
        float* out = mallocCheck((size_t)N * OC * sizeof(float));
        float* out0 = mallocCheck((size_t)N * OC * sizeof(float));
        float* dinp = mallocCheck((size_t)N * IC * sizeof(float));
        float* dw = mallocCheck((size_t)OC * IC * sizeof(float));
        float* dw0 = mallocCheck((size_t)OC * IC * sizeof(float));
        size_t most = (size_t)(N > OC ? N : OC) * (IC > OC ? IC : OC);
        double* ref = mallocCheck(most * sizeof(double));
        double* bound = mallocCheck(most * sizeof(double));
        fill(inp, (size_t)N * IC, s + 1);
        fill(w, (size_t)OC * IC, s + 101);
        fill(out0, (size_t)N * OC, s + 201);
        fill(dw0, (size_t)OC * IC, s + 301);
        // fp32 accumulation of K terms (in any order, with FMA): 2 (K + 2) 2^-24 of their magnitude
        double fp32_unit = 2.0 * (IC + OC + N + 2) * ldexp(1.0, -24);
        // and bf16 operands, each within 2^-9 of the fp32 one: 2^-8 + 2^-18 of each term more
        double bf16_unit = ldexp(1.0, -8) + ldexp(1.0, -18) + fp32_unit;
        for (int acc = 0; acc < 2; acc++) {
            memcpy(out, out0, (size_t)N * OC * sizeof(float));
            cpu_bf16_matmul_forward(out, inp, w, N, IC, OC, acc);
            reference(ref, bound, 0, 1, N, OC, IC, inp, w, acc ? out0 : NULL, 1);
            double tight = worst_ratio(out, ref, bound, (size_t)N * OC, fp32_unit);
            reference(ref, bound, 0, 1, N, OC, IC, inp, w, acc ? out0 : NULL, 0);
            double loose = worst_ratio(out, ref, bound, (size_t)N * OC, bf16_unit);
            CHECK(tight <= 1 && loose <= 1, "forward (%d, %d, %d)%s: %.3g of the rounded operands' bound, %.3g of the fp32 one", N, IC,
                  OC, acc ? " accumulating" : "", tight, loose);
        }
        // backward: dinp = dout . w (overwritten), dw += dout^T . inp; out0 plays dout
        memcpy(dw, dw0, (size_t)OC * IC * sizeof(float));
        fill(dinp, (size_t)N * IC, 7);  // overwritten
        cpu_bf16_matmul_backward(dinp, dw, out0, inp, w, N, IC, OC);
        reference(ref, bound, 0, 0, N, IC, OC, out0, w, NULL, 1);
        double tight = worst_ratio(dinp, ref, bound, (size_t)N * IC, fp32_unit);
        reference(ref, bound, 0, 0, N, IC, OC, out0, w, NULL, 0);
        double loose = worst_ratio(dinp, ref, bound, (size_t)N * IC, bf16_unit);
        CHECK(tight <= 1 && loose <= 1, "backward dinp (%d, %d, %d): %.3g, %.3g of the bounds", N, IC, OC, tight, loose);
        reference(ref, bound, 1, 0, OC, IC, N, out0, inp, dw0, 1);
        tight = worst_ratio(dw, ref, bound, (size_t)OC * IC, fp32_unit);
        reference(ref, bound, 1, 0, OC, IC, N, out0, inp, dw0, 0);
        loose = worst_ratio(dw, ref, bound, (size_t)OC * IC, bf16_unit);
        CHECK(tight <= 1 && loose <= 1, "backward dw (%d, %d, %d), accumulated: %.3g, %.3g of the bounds", N, IC, OC, tight, loose);
        free(inp), free(w), free(out), free(out0), free(dinp), free(dw), free(dw0), free(ref), free(bound);
    }
    CHECK(cpu_bf16_round(1.0f + ldexp(1.0f, -8)) == 0x3F80 && cpu_bf16_round(1.0f + 3 * ldexp(1.0f, -8)) == 0x3F82,
          "rounding to nearest, ties to even (1 + 2^-8 -> 1, 1 + 3 2^-8 -> 1 + 2^-6)");
    CHECK(isnan(rounded(NAN)) && isinf(rounded(INFINITY)), "NaN stays NaN, infinity stays infinity");
}

// A weight's bf16 copy is made when the model says the weights changed, and every product reads
// that copy: a change not announced is not seen, one announced is
static void test_weight_copies(int enabled) {
    enum { N = 8, IC = 16, OC = 12 };
    float inp[N * IC], w[OC * IC], before[N * OC], after[N * OC], fresh[N * OC];
    fill(inp, N * IC, 11);
    fill(w, OC * IC, 12);
    cpu_weights_changed(w, OC * IC);
    cpu_bf16_matmul_forward(before, inp, w, N, IC, OC, 0);
    for (int i = 0; i < OC * IC; i++) w[i] += 0.5f;
    cpu_bf16_matmul_forward(after, inp, w, N, IC, OC, 0);
    cpu_weights_changed(w, OC * IC);
    cpu_bf16_matmul_forward(fresh, inp, w, N, IC, OC, 0);
    cpu_weights_changed(w, 0);
    if (enabled) {
        CHECK(memcmp(before, after, sizeof(before)) == 0, "a product reads the weights' copy, made once per announced change");
        CHECK(memcmp(after, fresh, sizeof(after)) != 0, "an announced change makes the copy again");
    } else {
        CHECK(memcmp(before, after, sizeof(before)) != 0 && memcmp(after, fresh, sizeof(after)) == 0,
              "without precision = bf16 no copy is kept: every product rounds the weights it is given");
    }
}

static void test_refusal(void) {
    CpuFeatures avx2 = {.sse3 = 1, .avx = 1, .avx2 = 1, .fma = 1}, avx512 = avx2, bf16 = avx2, amx = avx2;
    avx512.avx512 = 1;
    bf16.avx512 = bf16.avx512_bf16 = 1;
    amx.amx_bf16 = 1;
    CHECK(cpu_bf16_missing(avx2) && strstr(cpu_bf16_missing(avx2), "AVX-512 BF16 or AMX"), "an AVX2 CPU is refused, naming what it lacks");
    CHECK(cpu_bf16_missing(avx512) != NULL, "AVX-512 without BF16 is refused");
    CHECK(!cpu_bf16_missing(bf16) && !cpu_bf16_missing(amx), "AVX-512 BF16 or AMX runs it");
    const char* why = backend_named("cpu")->set_precision(PRECISION_BF16);
    int runs = !cpu_bf16_missing(cpu_features()) && cpu_bf16_runs();
    CHECK((why == NULL) == runs, "this CPU %s: %s", why ? "is refused" : "runs bf16", why ? why : "oneDNN's bf16 products");
    backend_named("cpu")->set_precision(PRECISION_FP32);
}

// The same products computed another way, as the reference bf16's own error is measured by
// (FlashAttention's rule): operands rounded to bf16 here, then the fp32 products of OpenBLAS
static float* rounded_copy(const float* x, size_t n, int slot) {
    static float* scratch[3];
    static size_t capacity[3];
    if (n > capacity[slot]) {
        free(scratch[slot]);
        scratch[slot] = mallocCheck(n * sizeof(float));
        capacity[slot] = n;
    }
    for (size_t i = 0; i < n; i++) scratch[slot][i] = rounded(x[i]);
    return scratch[slot];
}
static void emulated_forward(float* out, const float* inp, const float* w, int N, int IC, int OC, int accumulate) {
    cpu_matmul_forward(out, rounded_copy(inp, (size_t)N * IC, 0), rounded_copy(w, (size_t)OC * IC, 1), N, IC, OC, accumulate);
}
static void emulated_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int IC, int OC) {
    cpu_matmul_backward(dinp, dw, rounded_copy(dout, (size_t)N * OC, 0), rounded_copy(inp, (size_t)N * IC, 1),
                        rounded_copy(w, (size_t)OC * IC, 2), N, IC, OC);
}

// relative L2 error of got against ref
static double rel_l2(const float* got, const float* ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]), den += (double)ref[i] * ref[i];
    return sqrt(num / (den + 1e-300));
}

// Gradients and 20 AdamW steps of one model in fp32 (precision 0), bf16 through oneDNN (1),
// bf16 again (2), and bf16 emulated (3)
typedef struct {
    float* grads;
    double loss, losses[20];
} Trial;

static void trial(Trial* out, Config cfg, int precision, int emulated) {
    Backend emu = *backend_named("cpu");
    emu.matmul_forward = emulated_forward;
    emu.matmul_backward = emulated_backward;
    const Backend* be = emulated ? &emu : backend_named("cpu");
    backend_named("cpu")->set_precision(precision);
    int B = cfg.batch_size, T = cfg.model.seq_len, V = 64;
    Model m;
    model_build(&m, &cfg.model, be, V, B);
    model_init_params(&m, 5);
    int* tokens = mallocCheck((size_t)B * T * sizeof(int));
    int* targets = mallocCheck((size_t)B * T * sizeof(int));
    for (int i = 0; i < B * T; i++) tokens[i] = (i * 7 + 3) % V, targets[i] = (i * 5 + 1) % V;
    out->grads = mallocCheck(m.n_params * sizeof(float));
    AdamW opt;
    cfg.optim.lr = 3e-3f;
    adamw_alloc(&opt, &m, &cfg.optim);
    for (int step = 0; step < 20; step++) {
        model_zero_grad(&m);
        model_forward(&m, tokens, targets, B, T, 1);
        model_backward(&m, 1.0f);
        out->losses[step] = model_loss(&m);
        if (step == 0) model_get_grads(&m, out->grads), out->loss = out->losses[0];
        clip_grad_norm(&m, 1.0f);
        adamw_update(&opt, &m, cfg.optim.lr, step + 1);
    }
    adamw_free(&opt);
    model_free(&m);
    free(tokens);
    free(targets);
    backend_named("cpu")->set_precision(PRECISION_FP32);
}

static void test_model(AttentionKind kind) {
    Config cfg = tiny_model_config(kind);
    cfg.model.init_std = 0.02f;  // the recipes' scale: the tiny model's 0.3 saturates its softmax maps
    Trial fp32, bf16, again, emulated;
    trial(&fp32, cfg, PRECISION_FP32, 0);
    trial(&bf16, cfg, PRECISION_BF16, 0);
    trial(&again, cfg, PRECISION_BF16, 0);
    trial(&emulated, cfg, PRECISION_FP32, 1);
    Model shape;  // the tensors' names and places
    model_build(&shape, &cfg.model, backend_named("cpu"), 64, cfg.batch_size);
    const char* name = ATTN_VARIANTS[kind].name;
    // each gradient tensor: relative L2 error <= 1e-2 (the field's bf16 tolerance), or, where
    // the tensor is a sum that cancels (the lambda vectors' gradients), FlashAttention's rule:
    // no more than twice the error of the same products rounded to bf16 another way
    double worst = 0, worst_ratio = 0;
    const char* worst_name = "";
    int failed = 0;
    for (int i = 0; i < shape.n_tensors; i++) {
        const ParamTensor* t = &shape.tensors[i];
        double e = rel_l2(bf16.grads + t->offset, fp32.grads + t->offset, t->size);
        double e_ref = rel_l2(emulated.grads + t->offset, fp32.grads + t->offset, t->size);
        if (e > worst) worst = e, worst_name = t->name;
        if (e > 1e-2) {
            worst_ratio = fmax(worst_ratio, e / e_ref);
            failed |= !(e <= 2 * e_ref);
        }
    }
    CHECK(!failed && fabs(bf16.loss - fp32.loss) <= 1e-2 * fabs(fp32.loss),
          "%s: bf16 loss %.6f against fp32 %.6f; worst gradient tensor %s at relative L2 error %.2e; those over 1e-2 at %.2f "
          "times the emulation's error (at most 2)", name, bf16.loss, fp32.loss, worst_name, worst, worst_ratio);
    double drift = 0, drift_ref = 0;
    for (int step = 0; step < 20; step++) {
        drift = fmax(drift, fabs(bf16.losses[step] - fp32.losses[step]) / fabs(fp32.losses[step]));
        drift_ref = fmax(drift_ref, fabs(emulated.losses[step] - fp32.losses[step]) / fabs(fp32.losses[step]));
    }
    CHECK((drift <= 1e-2 || drift <= 2 * drift_ref) && bf16.losses[19] < bf16.losses[0],
          "%s: 20 steps in bf16 within %.2e relative of fp32's losses (the emulation %.2e); %.4f -> %.4f", name, drift, drift_ref,
          bf16.losses[0], bf16.losses[19]);
    CHECK(memcmp(bf16.losses, again.losses, sizeof(bf16.losses)) == 0 &&
              memcmp(bf16.grads, again.grads, shape.n_params * sizeof(float)) == 0,
          "%s: a bf16 run repeats bitwise", name);
    printf("%-13s worst gradient tensor %-22s %.2e; 20 steps within %.2e of fp32 (emulated bf16: %.2e)\n", name, worst_name, worst,
           drift, drift_ref);
    model_free(&shape);
    free(fp32.grads), free(bf16.grads), free(again.grads), free(emulated.grads);
}

int main(void) {
    test_refusal();
    const char* why = cpu_bf16_missing(cpu_features());
    if (!cpu_bf16_runs()) {
        // an AVX2-only CPU: oneDNN 2.6 has no bf16 matmul at all, and precision = bf16 is refused
        const char* refusal = backend_named("cpu")->set_precision(PRECISION_BF16);
        printf("oneDNN has no bf16 matmul for this CPU: the products cannot run here (%s)\n", refusal ? refusal : "");
        CHECK(refusal != NULL, "a CPU where oneDNN has no bf16 matmul is refused");
        return check_summary();
    }
    test_products();
    test_weight_copies(0);
    if (why) {
        printf("bf16 products ran on oneDNN's %s (an emulation: %s); the model cases are skipped, as a run is refused\n",
               cpu_bf16_kernel(), why);
    } else {
        backend_named("cpu")->set_precision(PRECISION_BF16);
        printf("bf16 products on oneDNN's %s\n", cpu_bf16_kernel());
        test_weight_copies(1);
        backend_named("cpu")->set_precision(PRECISION_FP32);
        for (int k = 0; k < ATTN_VARIANT_COUNT; k++) test_model((AttentionKind)k);
    }
    return check_summary();
}
