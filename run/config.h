// Run configuration: one flat recipe file of "key = value" lines plus "key=value" overrides
// from the command line. Every key, its type and its default live in one table (config.c); the
// model's keys land in Config.model and the optimizer's in Config.optim, which is all the model
// layer sees of a recipe.
#ifndef CONFIG_H
#define CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "../model/backend.h"
#include "../base/recipe_format.h"
#include "../model/model_config.h"
#include "../model/optim.h"

typedef struct {
    ModelConfig model;   // what the model is (model/model_config.h)
    OptimConfig optim;   // AdamW and the schedule (model/optim.h)
    char init_from[CONFIG_STR];  // "" = random init (init_std); else a finished run's checkpoint whose
                                 // parameters start this run (same architecture; fresh optimizer)
    char data[CONFIG_STR];  // directory made by `difftx prepare`: a run setting (runs record its identity)
    char out[CONFIG_STR];   // run directory: checkpoint and log
    int batch_size;      // B, sequences per micro-batch
    int grad_accum;      // micro-batches per optimizer step
    int seed;
    int eval_every, eval_batches, checkpoint_every, log_every;
    // where the run computes, an index into BACKEND_DEVICES (run/device.h opens it): a run
    // setting, not part of the config text
    int device;
    // PRECISION_FP32 or PRECISION_BF16 (backend.h): the weights' products of training; a run
    // setting like device (a run may resume in the other, with a warning), recorded in the device
    int precision;
} Config;

void config_defaults(Config* cfg);
// Both die with the file and line (or the override text) and key on any bad input.
// A recipe file's relative paths (config_key_is_path) are read from the file's folder.
void config_load_file(Config* cfg, const char* path);
void config_apply_override(Config* cfg, const char* key_equals_value);
// Sets one key from its text; returns NULL, or a message saying what is wrong (static storage).
// Why a string value (a path, mostly) cannot be stored in recipe text, checkpoints and the
// registry as written (a control character, a leading or trailing space, not UTF-8), or NULL
const char* config_string_problem(const char* value);
// Why a config text of `key = value` lines (a checkpoint's) has a key or value this program does
// not take, or NULL; never dies
const char* config_text_problem(const char* text);
const char* config_set(Config* cfg, const char* key, const char* value);
// Cross-key checks (divisibility, ranges; the model's through model_config_validate); dies
// naming the key.
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
// A run's identity as another version of this program recorded it (config_to_text's lines): cfg
// from the defaults and those lines, so a key that version lacked keeps its default and the
// text config_to_text writes of cfg is today's text of that run. NULL, or why it cannot be read
// here (a key or value this version does not know; static storage); never dies.
const char* config_from_stored_text(Config* cfg, const char* text);

#endif
