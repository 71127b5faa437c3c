#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/backend.h"
#include "../base/util.h"

typedef enum { KEY_INT, KEY_FLOAT, KEY_BOOL, KEY_STRING, KEY_CHOICE, KEY_ATTENTION, KEY_DEVICE } KeyType;

// Variants a key's meaning names, from their rows (attention.h)
typedef enum {
    LIST_NONE,
    LIST_ALL,               // every variant, with its label
    LIST_PAIRED_SUB_HEADS,  // a query sub-head per map and head (d_model = 2 x n_head x head_dim)
    LIST_HEAD_NORM,         // head norm on by default
    LIST_SWITCH_USERS,      // the variants that need the switch
} VariantList;

typedef enum {
    KEY_IDENTITY,        // part of what a run is: in config_to_text, the registry's identity of a run
    KEY_RUN_SETTING,     // how a run is computed, not what it is: left out of config_to_text
    KEY_VARIANT_SWITCH,  // an integer only some variants use: in config_to_text where it is not 0, so that a
                         // new variant's switch leaves every other config's text, and its runs' identity, as it was
} KeyRole;

typedef struct {
    const char* name;
    KeyType type;
    size_t offset;
    const char* choices[4];  // KEY_CHOICE: value i is stored as int i
    const char* meaning;     // what `difftx keys` and docs/recipes.md say; {} marks where the variants listed go
    KeyRole role;
    VariantList list;        // the variants `difftx keys` lists in the meaning
} Key;

#define K(name, type, meaning) {#name, type, offsetof(Config, name), {0}, meaning, KEY_IDENTITY, LIST_NONE}
#define K_MODEL(name, type, meaning) {#name, type, offsetof(Config, model.name), {0}, meaning, KEY_IDENTITY, LIST_NONE}
#define K_OPTIM(name, type, meaning) {#name, type, offsetof(Config, optim.name), {0}, meaning, KEY_IDENTITY, LIST_NONE}
#define K_SWITCH(name) {#name, KEY_INT, offsetof(Config, model.name), {0}, NULL, KEY_VARIANT_SWITCH, LIST_SWITCH_USERS}
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)
static const Key KEYS[] = {
    {"attention", KEY_ATTENTION, offsetof(Config, model.attention), {0}, "the attention variant: {}", 0, LIST_ALL},
    K_MODEL(n_layer, KEY_INT, "L, the number of layers"),
    K_MODEL(d_model, KEY_INT, "C, the model width"),
    K_MODEL(n_head, KEY_INT, "H, attention heads (a DIFF head is a pair of softmax maps; for `gda` the query heads, signal and noise)"),
    {"head_dim", KEY_INT, offsetof(Config, model.head_dim), {0}, "D, the width of a Q/K (sub-)head; 0: d_model / (2 n_head) for {}, "
     "d_model / n_head otherwise", KEY_IDENTITY, LIST_PAIRED_SUB_HEADS},
    {"head_norm", KEY_BOOL, offsetof(Config, model.head_norm), {0}, "per-head RMSNorm (the paper's GroupNorm); unset: true for {}, false "
     "for the others; checkpoints and the registry record the resolved value", KEY_IDENTITY, LIST_HEAD_NORM},
    K_SWITCH(noise_group),
    K_SWITCH(update_rank),
    K_MODEL(lambda_init, KEY_STRING, "`schedule` (0.8 - 0.6 exp(-0.3 (layer - 1))) or a constant such as 0.8"),
    K_MODEL(ffn_hidden, KEY_INT, "F, the SwiGLU width; 0: 8/3 d_model rounded up to a multiple of 64"),
    K_MODEL(rope_theta, KEY_FLOAT, "RoPE base"),
    K_MODEL(seq_len, KEY_INT, "T, the context length"),
    K_MODEL(init_std, KEY_FLOAT, "standard deviation of the weight matrices at initialisation"),
    K(init_from, KEY_STRING, "warm start: a finished run's `checkpoint.h5` whose parameters this run starts from (same "
                             "architecture and tokenizer; step, optimizer state and data order start fresh)"),
    {"data", KEY_STRING, offsetof(Config, data), {0}, "folder made by `difftx prepare`, or of llm.c's token shards. Not "
     "part of the config's identity: checkpoints and the registry record the folder and what identifies its data (the "
     "tokenizer's hash, the shards and a hash of their tokens), so the same data by another path is the same run", KEY_RUN_SETTING, LIST_NONE},
    K(out, KEY_STRING, "run folder: `checkpoint.h5`, `log.tsv`"),
    K(batch_size, KEY_INT, "sequences per micro-batch"),
    K(grad_accum, KEY_INT, "micro-batches per update"),
    K_OPTIM(steps, KEY_INT, "updates"),
    K_OPTIM(lr, KEY_FLOAT, "peak learning rate"),
    K_OPTIM(lr_final, KEY_FLOAT, "learning rate at the last step"),
    K_OPTIM(warmup_steps, KEY_INT, "linear warmup length, in updates"),
    {"schedule", KEY_CHOICE, offsetof(Config, optim.schedule), {"linear", "cosine", 0}, "`linear` (the paper's) or `cosine` decay after warmup", 0, LIST_NONE},
    K_OPTIM(beta1, KEY_FLOAT, "AdamW's first-moment decay"),
    K_OPTIM(beta2, KEY_FLOAT, "AdamW's second-moment decay"),
    K_OPTIM(adam_eps, KEY_FLOAT, "AdamW's epsilon"),
    K_OPTIM(weight_decay, KEY_FLOAT, "AdamW's decoupled weight decay, applied to weight matrices only (embedding and LM head "
                               "included), not to gains or lambda vectors"),
    K_OPTIM(grad_clip, KEY_FLOAT, "global gradient-norm clipping (0: off)"),
    K(seed, KEY_INT, "initialisation and data order"),
    K(eval_every, KEY_INT, "validation loss every N updates (0: at the end only)"),
    K(eval_batches, KEY_INT, "validation over the first eval_batches x batch_size windows of the validation shard"),
    K(checkpoint_every, KEY_INT, "checkpoint every N updates (0: at the end only)"),
    K(log_every, KEY_INT, "progress line every N updates"),
    {"device", KEY_DEVICE, offsetof(Config, device), {0},
     "`cpu` or `cuda` (a build with `make CUDA=1` on a machine with an NVIDIA GPU): where the run computes. Not part "
     "of the config's identity: a run may resume on the other device; checkpoints and the registry record it (on the "
     "CPU with the OpenBLAS kernel that ran, e.g. `cpu (OpenBLAS Cooperlake)`)", KEY_RUN_SETTING, LIST_NONE},
    {"precision", KEY_CHOICE, offsetof(Config, precision), {"fp32", "bf16", 0},
     "`fp32` or `bf16`: the precision of training's weight products (projections, SwiGLU, LM head; forward and backward). "
     "bf16: operands rounded to bf16, fp32 accumulation and output, through oneDNN on the CPU (with AVX-512 BF16 or AMX) "
     "and cuBLAS's tensor cores on CUDA (the run's own validation losses too); master weights, AdamW, norms, attention, softmax and cross-entropy stay fp32, and "
     "so do the evaluations after the run (tables, `difftx eval`). A run setting like "
     "`device`: checkpoints and the registry record it in the device, e.g. `cpu (OpenBLAS Cooperlake; bf16 weight "
     "products: oneDNN brg:avx512_core_bf16)`", KEY_RUN_SETTING, LIST_NONE},
};
#undef K
#undef K_MODEL
#undef K_OPTIM
#define N_KEYS (sizeof(KEYS) / sizeof(KEYS[0]))

void config_defaults(Config* cfg) {
    memset(cfg, 0, sizeof(*cfg));
    cfg->model.attention = ATTN_DIFF;
    cfg->model.n_layer = 6;
    cfg->model.d_model = 256;
    cfg->model.n_head = 4;
    cfg->model.head_norm = -1;
    strcpy(cfg->model.lambda_init, "schedule");
    cfg->model.rope_theta = 10000.0f;
    cfg->model.seq_len = 256;
    cfg->model.init_std = 0.02f;
    strcpy(cfg->data, "data/default");
    strcpy(cfg->out, "results/runs/default");
    cfg->batch_size = 16;
    cfg->grad_accum = 1;
    cfg->optim.steps = 1000;
    cfg->optim.lr = 1e-3f;
    cfg->optim.warmup_steps = 100;
    cfg->optim.beta1 = 0.9f;
    cfg->optim.beta2 = 0.98f;
    cfg->optim.adam_eps = 1e-8f;
    cfg->optim.weight_decay = 0.05f;
    cfg->optim.grad_clip = 1.0f;
    cfg->seed = 1337;
    cfg->eval_every = 100;
    cfg->eval_batches = 8;
    cfg->checkpoint_every = 200;
    cfg->log_every = 10;
}

// Choice i of a choice key (the attention variants for `attention`), NULL past the last
static const char* choice_name(const Key* key, int i) {
    if (key->type == KEY_ATTENTION) return i < ATTN_VARIANT_COUNT ? ATTN_VARIANTS[i].name : NULL;
    if (key->type == KEY_DEVICE) return i < BACKEND_DEVICE_COUNT ? BACKEND_DEVICES[i] : NULL;
    return i < 4 ? key->choices[i] : NULL;
}

// A string value (a path, mostly) must read back as written from the recipe text that
// checkpoints and the registry store, and be text JSON can hold (safetensors metadata): one line,
// not starting or ending with a space (the recipe format trims them), valid UTF-8
const char* config_string_problem(const char* value) {
    size_t n = strlen(value);
    for (const unsigned char* p = (const unsigned char*)value; *p; p++) {
        if (*p < 32 || *p == 127) return "holds a control character (a newline, a tab, ...): it could not be read back";
    }
    if (n && (value[0] == ' ' || value[n - 1] == ' ')) return "begins or ends with a space, which a recipe line drops";
    for (const unsigned char* p = (const unsigned char*)value; *p;) {
        int extra = *p < 0x80 ? 0 : (*p & 0xE0) == 0xC0 && *p >= 0xC2 ? 1 : (*p & 0xF0) == 0xE0 ? 2 : (*p & 0xF8) == 0xF0 && *p <= 0xF4 ? 3 : -1;
        if (extra < 0) return "is not UTF-8 text";
        p++;
        for (int i = 0; i < extra; i++, p++) {
            if ((*p & 0xC0) != 0x80) return "is not UTF-8 text";
        }
    }
    return NULL;
}

const char* config_set(Config* cfg, const char* name, const char* value) {
    static char msg[512];
    const Key* key = NULL;
    for (size_t i = 0; i < N_KEYS; i++) {
        if (strcmp(KEYS[i].name, name) == 0) key = &KEYS[i];
    }
    if (!key) {
        const char* names[N_KEYS];
        for (size_t i = 0; i < N_KEYS; i++) names[i] = KEYS[i].name;
        const char* near = closest_name(name, names, (int)N_KEYS);
        int n = snprintf(msg, sizeof(msg), "unknown key '%.100s'", name);
        if (near) snprintf(msg + n, sizeof(msg) - n, "; did you mean '%s'?", near);
        else snprintf(msg + n, sizeof(msg) - n, " (`difftx keys` lists them)");
        return msg;
    }
    char* field = (char*)cfg + key->offset;
    char* end = NULL;
    switch (key->type) {
    case KEY_INT: {
        long v = strtol(value, &end, 10);
        if (!plain_number(value, 0) || end == value || *end || v < -2147483647L || v > 2147483647L) break;
        *(int*)field = (int)v;
        return NULL;
    }
    case KEY_FLOAT: {
        // a value float rounds to a subnormal or to zero is not the value the recipe states
        float v = strtof(value, &end);
        if (!plain_number(value, 1) || end == value || *end || !isfinite(v) || (v != 0 && !isnormal(v)) ||
            (v == 0 && strtod(value, NULL) != 0)) break;
        *(float*)field = v;
        return NULL;
    }
    case KEY_BOOL:
        if (strcmp(value, "true") == 0 || strcmp(value, "1") == 0) { *(int*)field = 1; return NULL; }
        if (strcmp(value, "false") == 0 || strcmp(value, "0") == 0) { *(int*)field = 0; return NULL; }
        break;
    case KEY_STRING: {
        if (strlen(value) >= CONFIG_STR) break;
        const char* why = config_string_problem(value);
        if (why) {
            char shown[160];
            printable_text(shown, sizeof(shown), value);
            snprintf(msg, sizeof(msg), "key '%s': '%s' %s", name, shown, why);
            return msg;
        }
        strcpy(field, value);
        return NULL;
    }
    case KEY_CHOICE:
    case KEY_ATTENTION:
    case KEY_DEVICE:
        for (int i = 0; choice_name(key, i); i++) {
            if (strcmp(choice_name(key, i), value) == 0) { *(int*)field = i; return NULL; }
        }
        int n = snprintf(msg, sizeof(msg), "key '%s': '%s' is not one of", name, value);
        for (int i = 0; choice_name(key, i); i++) n += snprintf(msg + n, sizeof(msg) - n, "%s %s", i ? "," : "", choice_name(key, i));
        return msg;
    }
    static const char* expected[] = {"a decimal integer", "a decimal number in float's normal range (0, or 1.2e-38 to 3.4e38 either side)",
                                     "true or false", "a string under " STRINGIFY(CONFIG_STR) " bytes"};
    snprintf(msg, sizeof(msg), "key '%s': '%.100s' is not %s", name, value, expected[key->type]);
    return msg;
}

int config_key_is_path(const char* key) {
    return strcmp(key, "data") == 0 || strcmp(key, "out") == 0 || strcmp(key, "init_from") == 0;
}

typedef struct {
    Config* cfg;
    const char* recipe_path;  // NULL: the text is a checkpoint's, whose paths are as recorded
} RecipeLines;

static const char* on_recipe_line(void* ctx, const char* section, const char* name, const char* value) {
    RecipeLines* r = ctx;
    if (section[0]) return "sections are not used: write plain 'key = value' lines";
    if (!r->recipe_path || !config_key_is_path(name)) return config_set(r->cfg, name, value);
    char path[CONFIG_STR + 64];
    const char* err = recipe_path_value(path, sizeof(path), value, r->recipe_path);
    return err ? err : config_set(r->cfg, name, path);
}

void config_load_file(Config* cfg, const char* path) {
    size_t len;
    char* text = read_recipe_file(path, &len);
    RecipeLines lines = {cfg, path};
    recipe_parse(text, len, path, on_recipe_line, &lines);
    free(text);
}

void config_load_string(Config* cfg, const char* text, const char* origin) {
    RecipeLines lines = {cfg, NULL};
    recipe_parse(text, strlen(text), origin, on_recipe_line, &lines);
}


const char* config_from_stored_text(Config* cfg, const char* text) {
    static char why[700];
    config_defaults(cfg);
    for (const char* line = text; *line;) {
        size_t n = strcspn(line, "\n");
        const char* eq = memchr(line, '=', n);
        char key[128], value[CONFIG_STR + 64];
        if (!eq || eq - line < 2 || eq[-1] != ' ' || (size_t)(eq - line - 1) >= sizeof(key) || n - (size_t)(eq - line) < 2 ||
            eq[1] != ' ' || n - (size_t)(eq - line) - 2 >= sizeof(value)) {
            snprintf(why, sizeof(why), "line '%.*s' is not 'key = value'", (int)(n < 100 ? n : 100), line);
            return why;
        }
        memcpy(key, line, (size_t)(eq - line - 1));
        key[eq - line - 1] = 0;
        size_t vn = n - (size_t)(eq - line) - 2;
        memcpy(value, eq + 2, vn);
        value[vn] = 0;
        const char* err = config_set(cfg, key, value);
        if (err) {
            snprintf(why, sizeof(why), "%s", err);
            return why;
        }
        line += n + (line[n] == '\n');
    }
    return NULL;
}

void config_apply_override(Config* cfg, const char* kv) {
    const char* eq = strchr(kv, '=');
    if (!eq || eq == kv) die("command-line override '%s': expected key=value", kv);
    char name[128];
    size_t n = (size_t)(eq - kv);
    if (n >= sizeof(name)) die("command-line override '%s': key too long", kv);
    memcpy(name, kv, n);
    name[n] = 0;
    const char* err = config_set(cfg, name, eq + 1);
    char shown[200];
    printable_text(shown, sizeof(shown), kv);
    if (err) die("command-line override '%s': %s", shown, err);
}

void config_validate(const Config* cfg) {
    model_config_validate(&cfg->model);
    struct { const char* key; int value; } positive[] = {
        {"batch_size", cfg->batch_size}, {"grad_accum", cfg->grad_accum}, {"steps", cfg->optim.steps},
        {"eval_batches", cfg->eval_batches}, {"log_every", cfg->log_every},
    };
    for (size_t i = 0; i < sizeof(positive) / sizeof(positive[0]); i++) {
        if (positive[i].value <= 0) die("key '%s' must be positive, got %d", positive[i].key, positive[i].value);
    }
    struct { const char* key; int value, max; } bounded[] = {
        {"batch_size", cfg->batch_size, 1 << 22}, {"grad_accum", cfg->grad_accum, 1 << 16},
        {"eval_batches", cfg->eval_batches, 1 << 20}, {"steps", cfg->optim.steps, 1 << 30},
    };
    for (size_t i = 0; i < sizeof(bounded) / sizeof(bounded[0]); i++) {
        if (bounded[i].value > bounded[i].max) die("key '%s': %d is too large (at most %d)", bounded[i].key, bounded[i].value, bounded[i].max);
    }
    const ModelConfig* m = &cfg->model;
    int64_t rows = (int64_t)cfg->batch_size * m->seq_len * m->n_head * config_variant(m)->maps;
    if (rows > 2147483647) {
        die("keys 'batch_size' and 'seq_len': %d x %d tokens per micro-batch are too many for %d heads (batch_size x seq_len x "
            "heads x maps must stay below 2^31)", cfg->batch_size, m->seq_len, m->n_head);
    }
    const OptimConfig* o = &cfg->optim;
    if (o->warmup_steps < 0) die("key 'warmup_steps' must be >= 0");
    if (cfg->eval_every < 0 || cfg->checkpoint_every < 0) die("keys 'eval_every' and 'checkpoint_every' must be >= 0");
    if (!(o->lr > 0)) die("key 'lr' must be positive");
    if (o->lr_final < 0) die("key 'lr_final' must be >= 0");
    if (!(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1)) die("keys 'beta1', 'beta2' must lie in [0, 1)");
}

void config_checkpoint_path(const Config* cfg, char* path, size_t n) { path_printf(path, n, "%s/checkpoint.h5", cfg->out); }

// A key's value in cfg as a recipe writes it; a float in the fewest digits that read back as
// the same float, so 1e-3 prints as 0.001, not 0.00100000005
static void format_value(char* value, size_t n, const Key* k, const Config* cfg) {
    const char* field = (const char*)cfg + k->offset;
    switch (k->type) {
    case KEY_INT: snprintf(value, n, "%d", *(const int*)field); break;
    case KEY_FLOAT: {
        float x = *(const float*)field;
        for (int digits = 1; digits <= 9; digits++) {
            snprintf(value, n, "%.*g", digits, x);
            if (strtof(value, NULL) == x) break;
        }
        break;
    }
    case KEY_BOOL: snprintf(value, n, "%s", *(const int*)field ? "true" : "false"); break;
    case KEY_STRING: snprintf(value, n, "%s", field); break;
    case KEY_CHOICE:
    case KEY_ATTENTION:
    case KEY_DEVICE: snprintf(value, n, "%s", choice_name(k, *(const int*)field)); break;
    }
}

// The switch a KEY_VARIANT_SWITCH key holds
static VariantSwitch switch_of(const Key* k) {
    for (int s = SWITCH_NONE + 1; s < SWITCH_COUNT; s++) {
        if (strcmp(VARIANT_SWITCHES[s].key, k->name) == 0) return (VariantSwitch)s;
    }
    die("key '%s' is no variant switch of attention.h", k->name);
}

static int listed(const Key* k, const AttnVariant* v) {
    switch (k->list) {
    case LIST_ALL: return 1;
    case LIST_PAIRED_SUB_HEADS: return variant_sub_heads_per_head(v) == 2;
    case LIST_HEAD_NORM: return v->head_norm;
    case LIST_SWITCH_USERS: return v->needs == switch_of(k);
    default: return 0;
    }
}

// A key's meaning with the variants its list names, in the variant table's order
static void print_meaning(FILE* f, const Key* k) {
    const char* meaning = k->role == KEY_VARIANT_SWITCH ? VARIANT_SWITCHES[switch_of(k)].meaning : k->meaning;
    const char* mark = strstr(meaning, "{}");
    fprintf(f, "%.*s", mark ? (int)(mark - meaning) : (int)strlen(meaning), meaning);
    if (k->role == KEY_VARIANT_SWITCH) fprintf(f, "; stated for ");
    int n = 0, total = 0;
    for (int v = 0; v < ATTN_VARIANT_COUNT; v++) total += listed(k, &ATTN_VARIANTS[v]);
    for (int v = 0; v < ATTN_VARIANT_COUNT; v++) {
        if (!listed(k, &ATTN_VARIANTS[v])) continue;
        fprintf(f, "%s`%s`", n == 0 ? "" : n + 1 < total ? ", " : k->list == LIST_ALL ? " or " : " and ", ATTN_VARIANTS[v].name);
        if (k->list == LIST_ALL) fprintf(f, " (%s)", ATTN_VARIANTS[v].label);
        n++;
    }
    if (k->role == KEY_VARIANT_SWITCH) fprintf(f, ", 0 (or left out) for the other variants");
    if (mark) fprintf(f, "%s", mark + 2);
}

void config_print_keys(FILE* f) {
    Config defaults;
    config_defaults(&defaults);
    fprintf(f, "| key | default | meaning |\n|---|---|---|\n");
    for (size_t i = 0; i < N_KEYS; i++) {
        const Key* k = &KEYS[i];
        char value[CONFIG_STR + 32];
        format_value(value, sizeof(value), k, &defaults);
        // unset head_norm defers to the attention variant
        if (k->type == KEY_BOOL && *(const int*)((const char*)&defaults + k->offset) < 0) snprintf(value, sizeof(value), "(the variant's)");
        fprintf(f, "| `%s` | %s | ", k->name, value[0] ? value : "(empty)");
        print_meaning(f, k);
        fprintf(f, " |\n");
    }
}

// Every key explicit, head_norm, head_dim and ffn_hidden resolved: the text records what the
// run is, not which keys were left to defaults, nor where it computed (device) or which path
// its data had (data: runs record the data's identity)
const char* config_text_problem(const char* text) {
    static char why[600];
    Config scratch;
    config_defaults(&scratch);
    for (const char* line = text; *line;) {
        size_t n = strcspn(line, "\n");
        char buf[CONFIG_STR + 256];
        if (n >= sizeof(buf)) {
            snprintf(why, sizeof(why), "a line of %zu characters", n);
            return why;
        }
        memcpy(buf, line, n);
        buf[n] = 0;
        char* eq = strstr(buf, " = ");
        if (n && !eq) {
            snprintf(why, sizeof(why), "line '%.100s' is not 'key = value'", buf);
            return why;
        }
        if (eq) {
            *eq = 0;
            const char* err = config_set(&scratch, buf, eq + 3);
            if (err) {
                snprintf(why, sizeof(why), "%.500s", err);  // config_set names the key
                return why;
            }
        }
        line += n + (line[n] == '\n');
    }
    return NULL;
}

char* config_to_text(const Config* cfg) {
    Config resolved = *cfg;
    resolved.model.head_norm = config_head_norm(&cfg->model);
    resolved.model.head_dim = config_head_dim(&cfg->model);
    resolved.model.ffn_hidden = config_ffn_hidden(&cfg->model);
    cfg = &resolved;
    size_t cap = N_KEYS * (CONFIG_STR + 64), len = 0;
    char* text = mallocCheck(cap);
    for (size_t i = 0; i < N_KEYS; i++) {
        const Key* k = &KEYS[i];
        if (k->role == KEY_RUN_SETTING) continue;
        if (k->role == KEY_VARIANT_SWITCH && *(const int*)((const char*)cfg + k->offset) == 0) continue;
        char value[CONFIG_STR + 32];
        format_value(value, sizeof(value), k, cfg);
        len += (size_t)snprintf(text + len, cap - len, "%s = %s\n", k->name, value);
    }
    return text;
}
