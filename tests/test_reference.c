// `tests/make_reference.py` builds the same model independently in PyTorch (full attention maps,
// official semantics) and writes parameters, inputs, logits, loss, every gradient and five AdamW
// steps' losses to `tests/ref/*.h5` (committed; the script reruns with Debian's python3-torch). The
// C test matches every variant of ATTN_VARIANTS against the file named after it (a variant
// without one fails: the checklist a new variant meets), and the Transformer with head norm and
// DIFF without head norm at a constant λ_init, to the tolerances below.
//
// Tolerances, for fp32 on both sides with different summation orders:
//   logits max |diff| <= 2e-5 (logits are O(1); observed <= 1.2e-6);
//   loss |diff| <= 1e-5 (observed <= 5e-7);
//   each gradient tensor max |diff| <= 2e-5 * max |ref| + 1e-8 (observed <= 4.2e-6 relative);
//   AdamW step losses |diff| <= 1e-4 (rounding compounds over 5 updates at lr 1e-2; observed
//   <= 2.3e-5).
// Each AdamW step updates every parameter once, in at most 4 backend calls per layer and 3 for
// the embedding, final norm and classifier (runs of neighbouring tensors that share a decay).
#include <hdf5.h>
#include <string.h>
#include <unistd.h>

#include "../run/checkpoint.h"
#include "../model/optim.h"
#include "../base/util.h"
#include "check.h"
#include "instances.h"

static void read_dataset(hid_t file, const char* name, hid_t type, void* out, const char* path) {
    hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
    if (ds < 0 || H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) die("%s: cannot read '%s'", path, name);
    H5Dclose(ds);
}

// the backend's adamw_update, counted: calls and parameters per step
static int (*backend_adamw)(const Backend*, float*, const float*, float*, float*, size_t, const AdamWStep*);
static size_t adamw_calls, adamw_params;
static int counted_adamw(const Backend* be, float* p, const float* g, float* m, float* v, size_t n, const AdamWStep* step) {
    adamw_calls++, adamw_params += n;
    return backend_adamw(be, p, g, m, v, n, step);
}

static double max_abs(const float* a, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

static double max_diff(const float* a, const float* b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void test_case(const char* name, AttentionKind kind) {
    char path[256];
    snprintf(path, sizeof(path), "tests/ref/%s.h5", name);
    if (access(path, R_OK) != 0) {
        CHECK(0, "%s has no reference data: %s is missing (add its case to tests/make_reference.py and run it)", name, path);
        return;
    }
    Config cfg;
    Model model;
    CheckpointInfo info;
    checkpoint_load(path, backend_named("cpu"), &cfg, &model, NULL, &info);
    CHECK(cfg.model.attention == (int)kind, "%s: its reference data is of attention = %s", path, ATTN_VARIANTS[cfg.model.attention].name);
    int B = cfg.batch_size, T = cfg.model.seq_len, V = model.V, steps = cfg.optim.steps;
    size_t N = (size_t)B * T;
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int* tokens = mallocCheck(N * sizeof(int));
    int* targets = mallocCheck(N * sizeof(int));
    float* logits = mallocCheck(N * V * sizeof(float));
    float* grads = mallocCheck(model.n_params * sizeof(float));
    double* adamw_losses = mallocCheck(steps * sizeof(double));
    double loss;
    read_dataset(file, "tokens", H5T_NATIVE_INT, tokens, path);
    read_dataset(file, "targets", H5T_NATIVE_INT, targets, path);
    read_dataset(file, "logits", H5T_NATIVE_FLOAT, logits, path);
    read_dataset(file, "loss", H5T_NATIVE_DOUBLE, &loss, path);
    read_dataset(file, "adamw_losses", H5T_NATIVE_DOUBLE, adamw_losses, path);
    for (int i = 0; i < model.n_tensors; i++) {
        char ds[128];
        snprintf(ds, sizeof(ds), "grads/%s", model.tensors[i].name);
        read_dataset(file, ds, H5T_NATIVE_FLOAT, grads + model.tensors[i].offset, path);
    }
    H5Fclose(file);
    float* initial = mallocCheck(model.n_params * sizeof(float));
    model_get_params(&model, initial);

    printf("%s (%zu parameters)\n", name, model.n_params);
    // logits: forward without targets keeps them raw
    model_forward(&model, tokens, NULL, B, T, 1);
    float* ours = mallocCheck(N * V * sizeof(float));
    for (size_t n = 0; n < N; n++) model_logits(&model, (int)n, ours + n * V);
    double dl = max_diff(ours, logits, N * V);
    CHECK(dl <= 2e-5, "%s: logits differ by %g", name, dl);
    printf("  logits max |diff| %.2e\n", dl);
    model_zero_grad(&model);
    model_forward(&model, tokens, targets, B, T, 1);
    CHECK(fabs(model_loss(&model) - loss) <= 1e-5, "%s: loss %.7f vs PyTorch %.7f", name, model_loss(&model), loss);
    printf("  loss %.7f vs PyTorch %.7f\n", model_loss(&model), loss);
    model_backward(&model, 1.0f);
    float* our_grads = mallocCheck(model.n_params * sizeof(float));
    model_get_grads(&model, our_grads);
    double worst = 0.0;
    for (int i = 0; i < model.n_tensors; i++) {
        const ParamTensor* t = &model.tensors[i];
        double ref = max_abs(grads + t->offset, t->size);
        double diff = max_diff(our_grads + t->offset, grads + t->offset, t->size);
        CHECK(diff <= 2e-5 * ref + 1e-8, "%s: gradient of %s differs by %g (max |ref| %g)", name, t->name, diff, ref);
        worst = fmax(worst, diff / (ref + 1e-30));
    }
    printf("  %d gradient tensors, worst max|diff|/max|ref| %.2e\n", model.n_tensors, worst);

    model_set_params(&model, initial);
    AdamW opt;
    adamw_alloc(&opt, &model, &cfg.optim);
    double worst_step = 0.0;
    Backend counting = *model.be;
    backend_adamw = counting.adamw_update;
    counting.adamw_update = counted_adamw;
    model.be = &counting;
    for (int s = 0; s < steps; s++) {
        adamw_calls = adamw_params = 0;
        model_zero_grad(&model);
        model_forward(&model, tokens, targets, B, T, 1);
        model_backward(&model, 1.0f);
        clip_grad_norm(&model, cfg.optim.grad_clip);
        adamw_update(&opt, &model, lr_at(&cfg.optim, s), s + 1);
        worst_step = fmax(worst_step, fabs(model_loss(&model) - adamw_losses[s]));
        if (s == 0) {
            CHECK(adamw_params == model.n_params && adamw_calls <= 4 * (size_t)model.L + 3,
                  "%s: one AdamW step updates %zu of %zu parameters in %zu calls (at most %d)", name, adamw_params, model.n_params,
                  adamw_calls, 4 * model.L + 3);
        }
    }
    CHECK(worst_step <= 1e-4, "%s: AdamW losses differ by up to %g", name, worst_step);
    printf("  %d AdamW steps, loss %.5f -> %.5f, worst |diff| %.2e\n", steps, adamw_losses[0], adamw_losses[steps - 1], worst_step);
    adamw_free(&opt);
    free(tokens); free(targets); free(logits); free(grads); free(adamw_losses); free(initial); free(ours); free(our_grads);
    model_free(&model);
}

// Every row of ATTN_VARIANTS against the reference named after it, so a variant added without its
// reference data fails here; then two switch settings of their own
int main(void) {
    for (int k = 0; k < ATTN_VARIANT_COUNT; k++) test_case(ATTN_VARIANTS[k].name, (AttentionKind)k);
    test_case("standard_headnorm", ATTN_STANDARD);
    test_case("diff_no_headnorm", ATTN_DIFF);
    return check_summary();
}
