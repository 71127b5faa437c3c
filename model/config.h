// Run configuration: one flat recipe file of "key = value" lines plus "key=value" overrides
// from the command line. Every key, its type and its default live in one table (config.c).
#ifndef CONFIG_H
#define CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "attention.h"
#include "base/recipe_format.h"

#define CONFIG_STR 4096  // PATH_MAX: string values, paths among them

typedef enum { SCHEDULE_LINEAR = 0, SCHEDULE_COSINE = 1 } ScheduleKind;

typedef struct {
    // model
    int attention;       // AttentionKind: an index into ATTN_VARIANTS
    int n_layer;         // L
    int d_model;         // C
    int n_head;          // H
    int head_dim;        // D, width of one Q/K (sub-)head; 0 = d_model / (maps * H), d_model / H for diff2
    int head_norm;       // per-head RMSNorm over the head's V width (the paper's GroupNorm);
                         // -1 until set: the variant's default (config_head_norm)
    char lambda_init[CONFIG_STR];  // "schedule" (0.8 - 0.6 exp(-0.3 depth)) or a constant
    int ffn_hidden;      // F; 0 = 8/3 C rounded up to a multiple of 64
    float rope_theta;
    int seq_len;         // T
    float init_std;
    char init_from[CONFIG_STR];  // "" = random init (init_std); else a finished run's checkpoint whose
                                 // parameters start this run (same architecture; fresh optimizer)
    // data
    char data[CONFIG_STR];  // directory made by `difftx prepare`: a run setting (runs record its identity)
    char out[CONFIG_STR];   // run directory: checkpoint and log
    // optimisation
    int batch_size;      // B, sequences per micro-batch
    int grad_accum;      // micro-batches per optimizer step
    int steps;
    float lr;
    float lr_final;      // learning rate reached at the last step
    int warmup_steps;
    int schedule;        // ScheduleKind, after warmup
    float beta1, beta2, adam_eps, weight_decay, grad_clip;
    int seed;
    int eval_every, eval_batches, checkpoint_every, log_every;
    // where the run computes, an index into BACKEND_DEVICES (backend_of_device): a run
    // setting, not part of the config text
    int device;
} Config;

void config_defaults(Config* cfg);
// Both die with the file and line (or the override text) and key on any bad input.
// A recipe file's relative paths (config_key_is_path) are read from the file's folder.
void config_load_file(Config* cfg, const char* path);
void config_apply_override(Config* cfg, const char* key_equals_value);
// Sets one key from its text; returns NULL, or a message saying what is wrong (static storage).
const char* config_set(Config* cfg, const char* key, const char* value);
// Cross-key checks (divisibility, ranges); dies naming the key.
void config_validate(const Config* cfg);
// data, out and init_from: paths, which a recipe file gives relative to its own folder
int config_key_is_path(const char* key);
// "key = value" lines for every key but the run settings (device, data), loadable again with
// config_load_string: what a run is, its identity in checkpoints and the registry.
char* config_to_text(const Config* cfg);
// Every key with its default and meaning, as a Markdown table (`difftx keys`)
void config_print_keys(FILE* f);
// "<out>/checkpoint.h5": where a run of this config keeps its checkpoint
void config_checkpoint_path(const Config* cfg, char* path, size_t n);
void config_load_string(Config* cfg, const char* text, const char* origin);

const AttnVariant* config_variant(const Config* cfg);
const char* config_attention_name(const Config* cfg);  // "standard", "diff", "diff2"
int config_head_norm(const Config* cfg);     // head_norm after resolving the variant's default
int config_head_dim(const Config* cfg);      // D after resolving 0
int config_ffn_hidden(const Config* cfg);    // F after resolving 0
// lambda_init for layer `depth` (from 0); used by per-layer lambda (diff)
float config_lambda_init(const Config* cfg, int depth);

#endif
