#include "optim.h"

#include <math.h>
#include <stdlib.h>

#include "../base/util.h"

void adamw_alloc(AdamW* opt, const Model* model, const OptimConfig* cfg) {
    opt->cfg = *cfg;
    opt->be = model->be;
    opt->m = opt->be->alloc(model->n_params * sizeof(float));
    opt->v = opt->be->alloc(model->n_params * sizeof(float));
}

void adamw_free(AdamW* opt) {
    opt->be->release(opt->m);
    opt->be->release(opt->v);
}

void adamw_get_moments(const AdamW* opt, size_t n_params, float* m, float* v) {
    if (m) opt->be->download(m, opt->m, n_params * sizeof(float));
    if (v) opt->be->download(v, opt->v, n_params * sizeof(float));
}

void adamw_set_moments(AdamW* opt, size_t n_params, const float* m, const float* v) {
    if (m) opt->be->upload(opt->m, m, n_params * sizeof(float));
    if (v) opt->be->upload(opt->v, v, n_params * sizeof(float));
}

float lr_at(const OptimConfig* cfg, int step) {
    if (step < cfg->warmup_steps) return cfg->lr * (float)(step + 1) / (float)cfg->warmup_steps;
    int decay_steps = cfg->steps - cfg->warmup_steps;
    float progress = decay_steps > 0 ? (float)(step - cfg->warmup_steps) / (float)decay_steps : 0.0f;
    float shape = cfg->schedule == SCHEDULE_COSINE ? 0.5f * (1.0f + cosf(3.14159265358979f * progress)) : 1.0f - progress;
    return cfg->lr_final + (cfg->lr - cfg->lr_final) * shape;
}

float clip_grad_norm(Model* model, float max_norm) {
    float norm = (float)sqrt(model->be->sum_squares(model->grads_memory, model->n_params));
    float coef = max_norm / (norm + 1e-6f);
    if (max_norm > 0 && coef < 1.0f) model->be->scale(model->grads_memory, model->n_params, coef);
    return norm;
}

void adamw_update(AdamW* opt, Model* model, float lr, int t) {
    const OptimConfig* cfg = &opt->cfg;
    // the arithmetic follows torch.optim.AdamW step by step so the reference test can match it
    AdamWStep step = {1.0f, cfg->beta1, cfg->beta2, lr / (1.0f - powf(cfg->beta1, (float)t)),
                      sqrtf(1.0f - powf(cfg->beta2, (float)t)), cfg->adam_eps};
    // one update per run of neighbouring tensors that share a decay (the block holds them back
    // to back, from its start: model.c's tensor offsets): a GPU launches 4 per layer rather than
    // one per tensor. The runs cover the whole block, so where every update wrote its twins, they
    // are all current.
    int twins = 1;
    for (int k = 0; k < model->n_tensors;) {
        int decayed = model->tensors[k].init == INIT_MATRIX, end = k + 1;
        while (end < model->n_tensors && (model->tensors[end].init == INIT_MATRIX) == decayed) end++;
        step.decay = decayed ? 1.0f - lr * cfg->weight_decay : 1.0f;
        size_t at = model->tensors[k].offset, n = model->tensors[end - 1].offset + model->tensors[end - 1].size - at;
        twins &= model->be->adamw_update(model->be, model->params_memory + at, model->grads_memory + at, opt->m + at, opt->v + at, n, &step);
        k = end;
    }
    model_params_changed(model, twins);
}
