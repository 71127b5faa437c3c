// HDF5 checkpoints; the layout is documented in docs/checkpoint.md.
#ifndef CHECKPOINT_H
#define CHECKPOINT_H

#include <stdint.h>

#include "../model/model.h"
#include "../model/optim.h"
#include "config.h"

typedef struct {
    int step;               // optimizer updates done
    uint64_t rows_seen;     // training rows consumed: the data loader's position
    uint64_t tokenizer_hash;
    int threads;            // OpenMP threads (per rank) of the run that wrote it
    int ranks;              // data-parallel processes of the run that wrote it
    int finished;           // step == steps
    double train_loss;      // mean loss of the last step
    char device[160];       // read only: the device_name of the backend that wrote it ("cpu" in older files)
    char data_id[256];      // the training data's identity (data_open's), "" in older files; the
                            // folder itself is the model config's `data`
} CheckpointInfo;

// A run's state: its recipe (cfg), the model's parameters, AdamW's moments and where training
// stands. Writes "<path>.tmp" and renames it to path. opt may be NULL (weights only).
void checkpoint_save(const char* path, const Config* cfg, const Model* model, const AdamW* opt, const CheckpointInfo* info);
// Reads the stored recipe into *run (unless run is NULL) (its device key set to be's, its data folder the one the
// file records) and builds the model from it on backend be (the file is the same whichever
// device wrote it), filling parameters (and moments when opt is not NULL: they are allocated
// here). Dies naming the file on any problem, checksum errors included.
void checkpoint_load(const char* path, const Backend* be, Config* run, Model* model, AdamW* opt, CheckpointInfo* info);
// Why this program could not load the checkpoint at path (not HDF5, or a config it does not
// take: a key or value of another version), from its attributes alone, or NULL; never dies
const char* checkpoint_unloadable(const char* path);

#endif
