// AdamW (decoupled weight decay on weight matrices only), global-norm clipping and the
// learning-rate schedule: linear warmup, then linear (the paper's) or cosine decay to lr_final.
#ifndef OPTIM_H
#define OPTIM_H

#include "model.h"

typedef enum { SCHEDULE_LINEAR = 0, SCHEDULE_COSINE = 1 } ScheduleKind;

// The optimizer's part of a run's recipe (run/config.h)
typedef struct {
    int steps;           // updates: the schedule's length
    float lr;            // peak learning rate
    float lr_final;      // learning rate reached at the last step
    int warmup_steps;
    int schedule;        // ScheduleKind, after warmup
    float beta1, beta2, adam_eps, weight_decay;
    float grad_clip;     // global gradient-norm clipping, 0: off
} OptimConfig;

typedef struct {
    OptimConfig cfg;
    const Backend* be;  // the model's, which holds the moments
    float* m;  // (n_params) first moment
    float* v;  // (n_params) second moment
} AdamW;

void adamw_alloc(AdamW* opt, const Model* model, const OptimConfig* cfg);
void adamw_free(AdamW* opt);
// The moments as host floats (n_params each; either pointer may be NULL)
void adamw_get_moments(const AdamW* opt, size_t n_params, float* m, float* v);
void adamw_set_moments(AdamW* opt, size_t n_params, const float* m, const float* v);
// step counts from 0; returns the learning rate of that step
float lr_at(const OptimConfig* cfg, int step);
// Scales the gradients so their global L2 norm is at most max_norm (as torch's
// clip_grad_norm_); returns the norm before clipping.
float clip_grad_norm(Model* model, float max_norm);
// One update with the step's learning rate; t is the 1-based update count for bias correction.
void adamw_update(AdamW* opt, Model* model, float lr, int t);

#endif
