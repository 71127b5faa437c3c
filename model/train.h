// The training loop: data, model, optimizer, evaluation, logging, checkpoints, resume.
#ifndef TRAIN_H
#define TRAIN_H

#include "config.h"

// Receives the run's metrics: metric() for each value as it is produced ("train_loss" every
// step, "val_loss" at evaluations), flush() right after each checkpoint is written, so a
// consumer that stores only flushed values holds exactly what a resume will not repeat.
typedef struct {
    void (*metric)(void* ctx, const char* key, int step, long tokens, double value);
    void (*flush)(void* ctx);
    void* ctx;
} TrainObserver;

// Trains cfg in its run folder cfg->out, resuming from cfg->out/checkpoint.h5 when it exists
// and holds the same config. Stops after update `until` (cfg->steps for a whole run) and
// leaves the run resumable. Dies on bad input or a non-finite loss (the last good
// checkpoint stays). observer may be NULL. Returns the mean loss of the last step.
double train_run(const Config* cfg, int until, const TrainObserver* observer);

#endif
