// precision = bf16 on the CPU backend (oneDNN's bf16 products; the products themselves and the
// weights' bf16 copies are test_backend_ops's, for every backend): the refusal where the CPU has
// no bf16 dot products, from its instruction sets, and where oneDNN has no bf16 matmul at all
// (AVX2 only). Where the CPU has them (AVX-512 BF16 or AMX): a small model of every variant in
// bf16 against fp32, each gradient tensor's relative L2 error at most 1e-2 (the field's bf16
// tolerance) or, for tensors that are one cancelling sum (the lambda vectors), FlashAttention's
// rule: at most twice the error of the same products rounded to bf16 another way
// (bf16_reference.h); 20 training steps' losses within 1e-2 relative of fp32's, bitwise equal
// when repeated and when the run is handed to a fresh model after 10 steps (a resume). Elsewhere the model cases say they are skipped and why.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../model/cpu/cpu.h"
#include "../model/model.h"
#include "../model/optim.h"
#include "bf16_reference.h"
#include "check.h"
#include "model_fixtures.h"
#include "instances.h"

static void test_refusal(void) {
    CpuFeatures avx2 = {.sse3 = 1, .avx = 1, .avx2 = 1, .fma = 1}, avx512 = avx2, bf16 = avx2, amx = avx2;
    avx512.avx512 = 1;
    bf16.avx512 = bf16.avx512_bf16 = 1;
    amx.amx_bf16 = 1;
    CHECK(cpu_bf16_missing(avx2) && strstr(cpu_bf16_missing(avx2), "AVX-512 BF16 or AMX"), "an AVX2 CPU is refused, naming what it lacks");
    CHECK(cpu_bf16_missing(avx512) != NULL, "AVX-512 without BF16 is refused");
    CHECK(!cpu_bf16_missing(bf16) && !cpu_bf16_missing(amx), "AVX-512 BF16 or AMX runs it");
    const char* why;
    Backend* be = backend_open(0, PRECISION_BF16, &why);
    int runs = !cpu_bf16_missing(cpu_features()) && cpu_bf16_runs();
    CHECK((be != NULL) == runs, "this CPU %s: %s", be ? "runs bf16" : "is refused", be ? "oneDNN's bf16 products" : why);
    if (be) {
        CHECK(strstr(be->device_name(be), "bf16") && !strstr(backend_named("cpu")->device_name(backend_named("cpu")), "bf16"),
              "a bf16 instance names its products (%s), the fp32 one beside it does not", be->device_name(be));
    }
    backend_close(be);
}

// Gradients and 20 AdamW steps of one model in fp32 (precision 0), bf16 through oneDNN (1),
// bf16 again (2), and bf16 emulated (3); where resume_at > 0, the model and its moments are
// handed to a fresh model and optimizer after that many steps, as a resume from a checkpoint does.
// With `beside` (a model of another precision on its own instance), each step of the trial's model
// follows one step of that model, in one process.
typedef struct {
    float* grads;
    double loss, losses[20];
} Trial;

typedef struct {
    Model m;
    AdamW opt;
    int B, T, *tokens, *targets;
} Stepper;

static void stepper_open(Stepper* s, TestModel cfg, const Backend* be) {
    int B = cfg.batch_size, T = cfg.model.seq_len, V = 64;
    s->B = B, s->T = T;
    model_build(&s->m, &cfg.model, be, V, B);
    model_init_params(&s->m, 5);
    s->tokens = mallocCheck((size_t)B * T * sizeof(int));
    s->targets = mallocCheck((size_t)B * T * sizeof(int));
    for (int i = 0; i < B * T; i++) s->tokens[i] = (i * 7 + 3) % V, s->targets[i] = (i * 5 + 1) % V;
    cfg.optim.lr = 3e-3f;
    adamw_alloc(&s->opt, &s->m, &cfg.optim);
}

static double stepper_step(Stepper* s, int step, float lr) {
    model_zero_grad(&s->m);
    model_forward(&s->m, s->tokens, s->targets, s->B, s->T, 1);
    model_backward(&s->m, 1.0f);
    double loss = model_loss(&s->m);
    clip_grad_norm(&s->m, 1.0f);
    adamw_update(&s->opt, &s->m, lr, step + 1);
    return loss;
}

static void stepper_close(Stepper* s) {
    adamw_free(&s->opt);
    model_free(&s->m);
    free(s->tokens);
    free(s->targets);
}

static void trial(Trial* out, TestModel cfg, int precision, int emulated, int resume_at, int beside) {
    Backend emu = bf16_reference_backend(0);
    const char* why;
    Backend* inst = emulated ? NULL : backend_open(0, precision, &why);
    if (!emulated && !inst) die("test_bf16: %s", why);
    const Backend* be = emulated ? &emu : inst;
    Backend* other_be = NULL;
    Stepper other;
    if (beside) {
        other_be = backend_open(0, precision == PRECISION_FP32 ? PRECISION_BF16 : PRECISION_FP32, &why);
        if (!other_be) die("test_bf16: %s", why);
        stepper_open(&other, cfg, other_be);
    }
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
        if (beside) stepper_step(&other, step, cfg.optim.lr);
        if (step && step == resume_at) {
            size_t bytes = m.n_params * sizeof(float);
            float *p = mallocCheck(bytes), *mom1 = mallocCheck(bytes), *mom2 = mallocCheck(bytes);
            model_get_params(&m, p);
            adamw_get_moments(&opt, m.n_params, mom1, mom2);
            adamw_free(&opt);
            model_free(&m);
            model_build(&m, &cfg.model, be, V, B);
            model_set_params(&m, p);
            adamw_alloc(&opt, &m, &cfg.optim);
            adamw_set_moments(&opt, m.n_params, mom1, mom2);
            free(p), free(mom1), free(mom2);
        }
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
    if (beside) stepper_close(&other);
    backend_close(other_be);
    backend_close(inst);
}

static void test_model(AttentionKind kind) {
    TestModel cfg = tiny_model(kind);
    cfg.model.init_std = 0.02f;  // the recipes' scale: the tiny model's 0.3 saturates its softmax maps
    Trial fp32, bf16, again, resumed, emulated, fp32_beside, bf16_beside;
    trial(&fp32, cfg, PRECISION_FP32, 0, 0, 0);
    trial(&bf16, cfg, PRECISION_BF16, 0, 0, 0);
    trial(&again, cfg, PRECISION_BF16, 0, 0, 0);
    trial(&resumed, cfg, PRECISION_BF16, 0, 10, 0);
    trial(&emulated, cfg, PRECISION_FP32, 1, 0, 0);
    trial(&fp32_beside, cfg, PRECISION_FP32, 0, 0, 1);
    trial(&bf16_beside, cfg, PRECISION_BF16, 0, 0, 1);
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
        double e = relative_l2(bf16.grads + t->offset, fp32.grads + t->offset, t->size);
        double e_ref = relative_l2(emulated.grads + t->offset, fp32.grads + t->offset, t->size);
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
    CHECK(memcmp(bf16.losses, resumed.losses, sizeof(bf16.losses)) == 0,
          "%s: a bf16 run handed to a fresh model after 10 steps (a resume) goes on bitwise as the non-stop run", name);
    // each model its own instance: the other precision's model stepping beside it changes nothing
    CHECK(memcmp(fp32.losses, fp32_beside.losses, sizeof(fp32.losses)) == 0 &&
              memcmp(fp32.grads, fp32_beside.grads, shape.n_params * sizeof(float)) == 0 &&
              memcmp(bf16.losses, bf16_beside.losses, sizeof(bf16.losses)) == 0 &&
              memcmp(bf16.grads, bf16_beside.grads, shape.n_params * sizeof(float)) == 0,
          "%s: an fp32 and a bf16 model stepping in turn in one process give each alone's losses and gradients bitwise", name);
    printf("%-13s worst gradient tensor %-22s %.2e; 20 steps within %.2e of fp32 (emulated bf16: %.2e)\n", name, worst_name, worst,
           drift, drift_ref);
    model_free(&shape);
    free(fp32.grads), free(bf16.grads), free(again.grads), free(resumed.grads), free(emulated.grads);
    free(fp32_beside.grads), free(bf16_beside.grads);
}

int main(void) {
    test_refusal();
    const char* why = cpu_bf16_missing(cpu_features());
    if (!cpu_bf16_runs()) {
        // an AVX2-only CPU: oneDNN 2.6 has no bf16 matmul at all, and precision = bf16 is refused
        const char* refusal = NULL;
        Backend* be = backend_open(0, PRECISION_BF16, &refusal);
        printf("oneDNN has no bf16 matmul for this CPU: the products cannot run here (%s)\n", refusal ? refusal : "");
        CHECK(be == NULL, "a CPU where oneDNN has no bf16 matmul is refused");
        backend_close(be);
        return check_summary();
    }
    if (why) {
        printf("skipped: the bf16 model cases: oneDNN's bf16 products would run as %s (an emulation: %s), and a run is refused\n",
               cpu_bf16_kernel(), why);
    } else {
        printf("bf16 products on oneDNN's %s\n", cpu_bf16_kernel());
        for (int k = 0; k < ATTN_VARIANT_COUNT; k++) test_model((AttentionKind)k);
    }
    return check_summary();
}
