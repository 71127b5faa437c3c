// The training loop: data, model, optimizer, evaluation, logging, checkpoints, resume. It never
// sees the results registry: what a run reports goes to its TrainObserver
// (studies/tracked.h records it there).
#ifndef TRAIN_H
#define TRAIN_H

#include <stdint.h>

#include "config.h"
#include "../model/model.h"
#include "../model/optim.h"

// Receives the run's metrics: resume() once with the step training starts from (0 for a new
// run), metric() for each value as it is produced ("train_loss" every step, "val_loss" at
// evaluations), flush() right before each checkpoint is written. A consumer that stores the
// flushed values and, on resume(step), drops what it stored past step holds exactly the
// metrics of the checkpoint it resumes from, whenever the previous process was killed.
typedef struct {
    void (*metric)(void* ctx, const char* key, int step, long tokens, double value);
    void (*flush)(void* ctx);
    // device: the backend's device_name, the run's provenance
    void (*resume)(void* ctx, int step, const char* device);
    void* ctx;
} TrainObserver;

// Trains cfg in its run folder cfg->out, resuming from cfg->out/checkpoint.h5 when it exists
// and holds the same config. Stops after update `until` (cfg->optim.steps for a whole run) and
// leaves the run resumable. Dies on bad input or a non-finite loss (the last good
// checkpoint stays). observer may be NULL. Returns the mean loss of the last step.
// In a data-parallel job rank 0 calls it and the followers join in (train_follow); only rank
// 0 writes the run folder and calls the observer.
double train_run(const Config* cfg, int until, const TrainObserver* observer);

// A data-parallel follower (rank > 0): trains its share of every run rank 0 starts, until
// rank 0 finishes
void train_follow(void);

// Dies, naming the keys, when training cfg needs more memory than the machine has beside
// `held` bytes that another model of the same process needs (0: none), before anything is
// allocated; returns the bytes cfg needs
double train_check_memory(const Config* cfg, const Backend* be, int vocab_size, double held);

typedef struct {
    double loss;  // mean over the micro-batches; the first non-finite one ends the step early
    float norm;   // gradient norm before clipping; NaN when the step ended early
    float lr;
} TrainStep;

// One rank's share of each step's global batch of grad_accum x batch_size rows: rows
// first_row .. first_row + micros * micro_rows - 1 of the step, in micros micro-batches of
// micro_rows (at most batch_size). The ranks' gradients are summed, so a step averages the
// loss over the global batch whatever the number of ranks.
typedef struct {
    int rank, ranks;
    int first_row, micro_rows, micros;
} BatchShare;

// Dies naming the keys when the global batch does not split evenly across `ranks`
BatchShare batch_share(const Config* cfg, int rank, int ranks);

// Update `step` (from 0) on this rank's share: inputs, targets (micros, micro_rows, T).
// Parameters change only when loss and norm are finite on every rank.
TrainStep train_step(Model* model, AdamW* opt, const Config* cfg, const BatchShare* share, int step, const int* inputs,
                     const int* targets);

#endif
