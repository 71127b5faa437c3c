// Finite differences of every parameter tensor of a whole model, for every row of ATTN_VARIANTS
// with its own head norm, and for the Transformer with head norm, DIFF without it and with a
// constant λ_init, and DIFF V2 with it; and a second backward doubling every gradient (backward
// accumulates), which a second backward of one forward may not do (the first turned its logits
// into their gradient). Each operation's own backward is test_backend_ops' gradient mode, on
// every backend.
//
// Tolerance: fp32 central differences with step h = 1e-3 (the loss is a mean). The loss is
// summed in double, so the numeric gradient's rounding error is about 1e-7 |loss| / h and its
// truncation error about h^2 |f'''|; with losses of order 1-10 both stay below atol = 2e-4 with
// rtol = 1e-2. A sign or factor error in a backward pass misses these bounds by orders of
// magnitude; the worst observed is a third of them.
#define _DEFAULT_SOURCE  // fork
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../model/model.h"
#include "../base/util.h"
#include "check.h"
#include "model_fixtures.h"
#include "instances.h"

static uint64_t rng_state = 42;

// ---- whole model ----
// params: a host copy the finite differences perturb, uploaded before each loss
typedef struct { Model* model; int* tokens; int* targets; int B, T; float* params; } ModelCase;
static double model_case_loss(void* p) {
    ModelCase* c = p;
    model_set_params(c->model, c->params);
    model_forward(c->model, c->tokens, c->targets, c->B, c->T, 1);
    return model_loss(c->model);
}

// A variant's whole model, 2 layers of 2 groups of heads of width 4 (attention_test_heads)
static void test_model(int attention, int head_norm, const char* lambda_init) {
    const AttnVariant* v = &ATTN_VARIANTS[attention];
    int n_head = attention_test_heads(v, 2);
    // init_std large enough that attention is far from uniform
    ModelConfig cfg = {.attention = attention, .n_layer = 2, .d_model = variant_sub_heads_per_head(v) * n_head * 4, .n_head = n_head,
                       .head_dim = 4, .head_norm = head_norm, .rope_theta = 10000.0f, .seq_len = 256, .init_std = 0.3f};
    set_variant_switches(&cfg);
    snprintf(cfg.lambda_init, sizeof(cfg.lambda_init), "%s", lambda_init);
    model_config_validate(&cfg);
    Model model;
    model_build(&model, &cfg, backend_named("cpu"), 32, 2);
    model_init_params(&model, 7);
    int B = 2, T = 70;  // two query blocks
    int tokens[2 * 70], targets[2 * 70];
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (int)(rng_next(&rng_state) % 32);
        targets[i] = (int)(rng_next(&rng_state) % 32);
    }
    float* params = mallocCheck(model.n_params * sizeof(float));
    model_get_params(&model, params);
    ModelCase c = {&model, tokens, targets, B, T, params};
    model_zero_grad(&model);
    model_case_loss(&c);
    model_backward(&model, 1.0f);
    float* grads = mallocCheck(model.n_params * sizeof(float));
    model_get_grads(&model, grads);
    // backward adds to the gradients (gradient accumulation): the same pass again doubles every one,
    // up to the rounding of sums that accumulate row by row (an overwrite would leave it single)
    float* twice = mallocCheck(model.n_params * sizeof(float));
    model_case_loss(&c);
    model_backward(&model, 1.0f);
    model_get_grads(&model, twice);
    for (int i = 0; i < model.n_tensors; i++) {
        const ParamTensor* t = &model.tensors[i];
        double worst = 0, largest = 0;
        for (size_t j = 0; j < t->size; j++) {
            worst = fmax(worst, fabs(twice[t->offset + j] - 2.0 * grads[t->offset + j]));
            largest = fmax(largest, fabs(2.0 * grads[t->offset + j]));
        }
        CHECK(worst <= 1e-5 * largest, "%s: a second backward doubles the gradient of %s (off by %g of %g)", config_attention_name(&cfg),
              t->name, worst, largest);
    }
    free(twice);
    // the last call was a backward: another one, without a forward, dies (in a child; one that
    // went on instead could hang in OpenMP after the fork, so an alarm ends it)
    fflush(stdout);
    pid_t kid = fork();
    if (kid == 0) {
        alarm(10);
        if (!freopen("/dev/null", "w", stderr)) _exit(2);
        model_backward(&model, 1.0f);
        _exit(0);
    }
    int status = 0;
    waitpid(kid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "%s: a second backward of one forward is refused (exit %d)",
          config_attention_name(&cfg), WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    printf(" model %s head_norm=%d lambda_init=%s, loss %.4f\n", config_attention_name(&cfg), head_norm, lambda_init, model_loss(&model));
    for (int i = 0; i < model.n_tensors; i++) {
        const ParamTensor* t = &model.tensors[i];
        grad_check(t->name, model_case_loss, &c, params + t->offset, grads + t->offset, t->size, 12, 1e-3, 1e-2, 2e-4);
    }
    free(grads);
    free(params);
    model_free(&model);
}

int main(void) {
    printf("model gradients (finite differences)\n");
    for (int k = 0; k < ATTN_VARIANT_COUNT; k++) test_model(k, ATTN_VARIANTS[k].head_norm, "schedule");
    test_model(ATTN_STANDARD, 1, "schedule");
    test_model(ATTN_DIFF, 0, "schedule");
    test_model(ATTN_DIFF, 1, "0.5");
    test_model(ATTN_DIFF2, 1, "schedule");
    return check_summary();
}
