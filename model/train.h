// The training loop: data, model, optimizer, evaluation, logging, checkpoints, resume.
#ifndef TRAIN_H
#define TRAIN_H

#include "config.h"

// Trains cfg in its run folder cfg->out, resuming from cfg->out/checkpoint.h5 when it exists
// and holds the same config. Stops after update `until` (cfg->steps for a whole run) and
// leaves the run resumable. Dies on bad input or a non-finite loss (the last good
// checkpoint stays). Returns the mean loss of the last step.
double train_run(const Config* cfg, int until);

#endif
