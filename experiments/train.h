// The training loop: data, model, optimizer, evaluation, logging, checkpoints, resume; and a
// run recorded in the results registry.
#ifndef TRAIN_H
#define TRAIN_H

#include <stdint.h>

#include "../model/config.h"
#include "../model/model.h"
#include "../model/optim.h"
#include "registry.h"

// Receives the run's metrics: resume() once with the step training starts from (0 for a new
// run), metric() for each value as it is produced ("train_loss" every step, "val_loss" at
// evaluations), flush() right before each checkpoint is written. A consumer that stores the
// flushed values and, on resume(step), drops what it stored past step holds exactly the
// metrics of the checkpoint it resumes from, whenever the previous process was killed.
typedef struct {
    void (*metric)(void* ctx, const char* key, int step, long tokens, double value);
    void (*flush)(void* ctx);
    void (*resume)(void* ctx, int step);
    void* ctx;
} TrainObserver;

// Trains cfg in its run folder cfg->out, resuming from cfg->out/checkpoint.h5 when it exists
// and holds the same config. Stops after update `until` (cfg->steps for a whole run) and
// leaves the run resumable. Dies on bad input or a non-finite loss (the last good
// checkpoint stays). observer may be NULL. Returns the mean loss of the last step.
double train_run(const Config* cfg, int until, const TrainObserver* observer);

// Dies, naming the keys, when training cfg needs more memory than the machine has (before
// anything is allocated)
void train_check_memory(const Config* cfg, int vocab_size);

typedef struct {
    double loss;  // mean over the micro-batches; the first non-finite one ends the step early
    float norm;   // gradient norm before clipping; NaN when the step ended early
    float lr;
} TrainStep;

// Update `step` (from 0) on cfg->grad_accum micro-batches: inputs, targets (grad_accum, B, T).
// Parameters change only when loss and norm are finite.
TrainStep train_step(Model* model, AdamW* opt, const Config* cfg, int step, const int* inputs, const int* targets);

// Trains cfg (resuming from its checkpoint) as registry run `run`, whose metrics are stored
// at each checkpoint so a killed run stores no step twice, and records its training shard as
// artifact `training_data`; returns the wall seconds.
double train_recorded(Registry* reg, int64_t run, const Config* cfg);

#endif
