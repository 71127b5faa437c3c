#include "optim.h"

#include <math.h>
#include <stdlib.h>

#include "util.h"

void adamw_alloc(AdamW* opt, const Model* model) {
    opt->m = callocCheck(model->n_params, sizeof(float));
    opt->v = callocCheck(model->n_params, sizeof(float));
}

void adamw_free(AdamW* opt) {
    free(opt->m);
    free(opt->v);
}

float lr_at(const Config* cfg, int step) {
    if (step < cfg->warmup_steps) return cfg->lr * (float)(step + 1) / (float)cfg->warmup_steps;
    int decay_steps = cfg->steps - cfg->warmup_steps;
    float progress = decay_steps > 0 ? (float)(step - cfg->warmup_steps) / (float)decay_steps : 0.0f;
    float shape = cfg->schedule == SCHEDULE_COSINE ? 0.5f * (1.0f + cosf(3.14159265358979f * progress)) : 1.0f - progress;
    return cfg->lr_final + (cfg->lr - cfg->lr_final) * shape;
}

float clip_grad_norm(Model* model, float max_norm) {
    // partial sums over fixed chunks, added in order: the same result for any thread count
    size_t n = model->n_params, chunk = 1 << 16, n_chunks = (n + chunk - 1) / chunk;
    double* partial = callocCheck(n_chunks, sizeof(double));
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < n_chunks; c++) {
        const float* g = model->grads_memory + c * chunk;
        size_t len = c + 1 < n_chunks ? chunk : n - c * chunk;
        double s = 0.0;
        for (size_t i = 0; i < len; i++) s += (double)g[i] * g[i];
        partial[c] = s;
    }
    double sum = 0.0;
    for (size_t c = 0; c < n_chunks; c++) sum += partial[c];
    free(partial);
    float norm = (float)sqrt(sum);
    float coef = max_norm / (norm + 1e-6f);
    if (max_norm > 0 && coef < 1.0f) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) model->grads_memory[i] *= coef;
    }
    return norm;
}

void adamw_update(AdamW* opt, Model* model, float lr, int t) {
    const Config* cfg = &model->cfg;
    float b1 = cfg->beta1, b2 = cfg->beta2;
    // the arithmetic follows torch.optim.AdamW step by step so the reference test can match it
    float step_size = lr / (1.0f - powf(b1, (float)t));
    float bc2_sqrt = sqrtf(1.0f - powf(b2, (float)t));
    for (int k = 0; k < model->n_tensors; k++) {
        const ParamTensor* tensor = &model->tensors[k];
        float decay = tensor->decay ? 1.0f - lr * cfg->weight_decay : 1.0f;
        float* p = model->params_memory + tensor->offset;
        const float* g = model->grads_memory + tensor->offset;
        float* m = opt->m + tensor->offset;
        float* v = opt->v + tensor->offset;
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < tensor->size; i++) {
            p[i] *= decay;
            m[i] = b1 * m[i] + (1.0f - b1) * g[i];
            v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
            p[i] -= step_size * m[i] / (sqrtf(v[i]) / bc2_sqrt + cfg->adam_eps);
        }
    }
}
