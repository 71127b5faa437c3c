// A training run recorded in the results registry: run/train.c's loop with a TrainObserver that
// stores its metrics at each checkpoint, the run begun only when training starts, its
// evaluations, data and checkpoint recorded, its end state set.
#ifndef TRACKED_H
#define TRACKED_H

#include <stdint.h>

#include "../run/config.h"
#include "registry.h"

// `difftx train`: trains cfg (from recipe_path) up to `until` as a run of experiment "train",
// preset the recipe's file name, row its out folder, in results/registry.sqlite; FINISHED at
// its last step, KILLED when it stops before (--until, or a kill noticed later)
void train_tracked(const char* recipe_path, const Config* cfg, int until, const char* results);

// The one way a registry row is trained (table6's rows, the needle rows): cfg trained to the
// end (resuming from its checkpoint) as row `row` of experiment, its run begun in reg only when
// training starts, after every check (a refused run writes nothing); metrics stored at each
// checkpoint (a killed run stores no step twice), the evaluations train_seconds and
// tokens_per_second of this process's training, each training shard as artifact
// `training_data` and the checkpoint as `checkpoint`; the run ended FINISHED when `end` is
// set (else the caller ends it, after evaluations of its own). Returns the run.
int64_t train_registry_row(Registry* reg, int64_t experiment, const char* row, const Config* cfg, int end);
// The registry's FINISHED run of (row, cfg) on cfg's data, saying so; 0 when there is none
int64_t train_finished_row(Registry* reg, int64_t experiment, const char* row, const Config* cfg);

#endif
