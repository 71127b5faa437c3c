#include "recipe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/util.h"

// A key the runner reads rather than the config: `plumbing` (preset_note) in every recipe's
// presets, and the runner's own
static int runner_key(ExtraKey extra_key, int place, const char* key) {
    return (place == RECIPE_PRESET && strcmp(key, "plumbing") == 0) || extra_key(place, key);
}

// A row's or preset's name becomes a folder of the results (results/<experiment>/<preset>/<row>):
// letters, digits, '_', '-' and '.', and not '.' or '..', so that no name reaches outside it
static int plain_name(const char* name) {
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return 0;
    for (const char* c = name; *c; c++) {
        if (!(*c >= 'a' && *c <= 'z') && !(*c >= 'A' && *c <= 'Z') && !(*c >= '0' && *c <= '9') && !strchr("_-.", *c)) return 0;
    }
    return 1;
}

static const char* on_line(void* user, const char* section, const char* key, const char* value);

// The presets and the keys outside a section of another recipe, its rows and claims left out
static const char* on_included_line(void* user, const char* section, const char* key, const char* value) {
    return strncmp(section, "row ", 4) == 0 || strncmp(section, "claim ", 6) == 0 ? NULL : on_line(user, section, key, value);
}

static const char* include_presets(Recipe* r, const char* value) {
    if (r->included) return "'presets_from' in a file that 'presets_from' names: one level only";
    char path[CONFIG_STR + 64];
    const char* err = recipe_path_value(path, sizeof(path), value, r->path);
    if (err) return err;
    size_t len;
    char* text = read_recipe_file(path, &len);  // dies naming the file
    const char* outer = r->path;
    r->path = path;
    r->included = 1;
    recipe_parse(text, len, path, on_included_line, r);  // dies naming its line
    r->included = 0;
    r->path = outer;
    free(text);
    return NULL;
}

// Whether the runner's recipes take [claim NAME] sections (its extra_key allows a claim's keys)
static int takes_claims(const Recipe* r) { return r->extra_key && r->extra_key(RECIPE_CLAIM, "text"); }

// A line of a [claim NAME] section: its keys the runner's (recipe_parse refuses a repeated
// section or key, naming the first line)
static const char* claim_line(Recipe* r, const char* name, const char* key, const char* value) {
    if (!key) {
        if (r->n_claims == RECIPE_CLAIMS || strlen(name) >= sizeof(r->claims[0].name) || !plain_name(name)) {
            snprintf(r->error, sizeof(r->error), "section [claim %.200s]: at most %d claims, named by letters, digits, '_', '-' and '.'",
                     name, RECIPE_CLAIMS);
            return r->error;
        }
        snprintf(r->claims[r->n_claims++].name, sizeof(r->claims[0].name), "%s", name);
        return NULL;
    }
    Section* s = &r->claims[r->n_claims - 1];
    if (!r->extra_key(RECIPE_CLAIM, key) || strlen(value) >= CONFIG_STR) {
        snprintf(r->error, sizeof(r->error), "key '%.60s': not a key of a claim of this recipe, or its value too long", key);
        return r->error;
    }
    snprintf(s->key[s->n], sizeof(s->key[0]), "%s", key);
    snprintf(s->value[s->n], sizeof(s->value[0]), "%s", value);
    s->n++;
    return NULL;
}

static const char* on_line(void* user, const char* section, const char* key, const char* value) {
    Recipe* r = user;
    Section* s = &r->common;
    if (!section[0] && key && strcmp(key, "presets_from") == 0) return include_presets(r, value);
    if (strncmp(section, "claim ", 6) == 0 && takes_claims(r)) return claim_line(r, section + 6, key, value);
    if (section[0]) {
        int is_row = strncmp(section, "row ", 4) == 0, is_preset = strncmp(section, "preset ", 7) == 0;
        if (!is_row && !is_preset) {
            snprintf(r->error, sizeof(r->error), "section [%.200s]: expected [preset NAME] or [row NAME]%s", section,
                     takes_claims(r) ? " or [claim NAME]" : "");
            return r->error;
        }
        if (!key) {  // the section line itself
            const char* name = section + (is_row ? 4 : 7);
            size_t len = strlen(name);
            if (!plain_name(name)) {
                snprintf(r->error, sizeof(r->error), "section [%.200s]: a %s name is a folder of the results: letters, digits, "
                         "'_', '-' and '.' only, and not '.' or '..'", section, is_row ? "row" : "preset");
                return r->error;
            }
            if (len >= sizeof(r->rows[0].name)) {  // a longer name would be cut, and its row not found by it
                snprintf(r->error, sizeof(r->error), "section [%.200s]: a %s name holds at most %zu characters, not %zu", section,
                         is_row ? "row" : "preset", sizeof(r->rows[0].name) - 1, len);
                return r->error;
            }
            // the needle runner trains each row's copy stage as row <name>_copy, in <name>_copy/
            if (is_row && len >= 5 && strcmp(name + len - 5, "_copy") == 0) {
                snprintf(r->error, sizeof(r->error), "section [%.200s]: a row name ending in '_copy' is reserved (the needle "
                         "runner's copy stage of row '%.*s' takes it)", section, (int)(len - 5), name);
                return r->error;
            }
            // a preset defined both here and in the file `presets_from` names: which one runs would
            // depend on the order of the lines
            const Section* list = is_row ? r->rows : r->presets;
            int n = is_row ? r->n_rows : r->n_presets;
            for (int i = 0; !is_row && i < n; i++) {
                if (strcmp(list[i].name, name) == 0) {
                    snprintf(r->error, sizeof(r->error), "section [%.200s]: a preset of this name is defined already (here, "
                             "or in the file 'presets_from' names); rename one of them", section);
                    return r->error;
                }
            }
            return NULL;
        }
        Section* list = is_row ? r->rows : r->presets;
        int* n = is_row ? &r->n_rows : &r->n_presets;
        const char* name = section + (is_row ? 4 : 7);
        if (*n == 0 || strcmp(list[*n - 1].name, name) != 0) {
            if (*n == RECIPE_SECTIONS) { snprintf(r->error, sizeof(r->error), "too many sections"); return r->error; }
            snprintf(list[(*n)++].name, sizeof(list[0].name), "%s", name);
        }
        s = &list[*n - 1];
    }
    int place = !section[0] ? RECIPE_OUTSIDE : strncmp(section, "row ", 4) == 0 ? RECIPE_ROW : RECIPE_PRESET;
    if (!runner_key(r->extra_key, place, key)) {
        Config scratch;
        config_defaults(&scratch);
        const char* err = config_set(&scratch, key, value);
        if (err) return err;
    }
    char path[CONFIG_STR + 64];
    if (config_key_is_path(key) || strcmp(key, "corpus") == 0) {
        const char* err = recipe_path_value(path, sizeof(path), value, r->path);
        if (err) return err;
        value = path;
    }
    if (s->n == RECIPE_KEYS || strlen(value) >= CONFIG_STR || strlen(key) >= sizeof(s->key[0])) {
        snprintf(r->error, sizeof(r->error), "key '%.60s': too many keys, or the key or value too long", key);
        return r->error;
    }
    snprintf(s->key[s->n], sizeof(s->key[0]), "%s", key);
    snprintf(s->value[s->n], sizeof(s->value[0]), "%s", value);
    s->n++;
    return NULL;
}

Recipe* recipe_load(const char* path, ExtraKey extra_key) {
    Recipe* r = callocCheck(1, sizeof(Recipe));
    r->extra_key = extra_key;
    r->path = path;
    size_t len;
    char* text = read_recipe_file(path, &len);
    recipe_parse(text, len, path, on_line, r);
    r->path = NULL;
    free(text);
    if (r->n_rows) r->first_row = r->rows[0];
    return r;
}

void recipe_keep_rows(Recipe* r, const char* names, const char* path) {
    char all[RECIPE_SECTIONS * 66] = "";
    for (int i = 0; i < r->n_rows; i++) snprintf(all + strlen(all), sizeof(all) - strlen(all), "%s%s", i ? ", " : "", r->rows[i].name);
    if (!*names) die("--rows: no row named (its rows: %s)", all);
    int keep[RECIPE_SECTIONS] = {0};
    for (const char* name = names; *name;) {
        size_t len = strcspn(name, ",");
        int i = 0;
        while (i < r->n_rows && (strlen(r->rows[i].name) != len || strncmp(r->rows[i].name, name, len))) i++;
        if (i == r->n_rows) die("--rows: '%.*s' is not a row of %s (its rows: %s)", (int)len, name, path, all);
        if (keep[i]) die("--rows: row '%s' is named twice", r->rows[i].name);
        keep[i] = 1;
        name += len;
        if (*name == ',' && !*++name) die("--rows: '%s' ends with a comma", names);
    }
    int n = 0;
    for (int i = 0; i < r->n_rows; i++) {
        if (keep[i]) r->rows[n++] = r->rows[i];
    }
    r->n_rows = n;
}

void recipe_override(Recipe* r, const char* const* words, int n, const char* const* derived, const char* path) {
    for (int i = 0; i < n; i++) {
        const char* eq = strchr(words[i], '=');
        char key[64];
        if (!eq || eq == words[i] || (size_t)(eq - words[i]) >= sizeof(key)) die("'%s': expected key=value after the recipe", words[i]);
        snprintf(key, sizeof(key), "%.*s", (int)(eq - words[i]), words[i]);
        Config scratch;
        config_defaults(&scratch);
        config_apply_override(&scratch, words[i]);  // dies naming a bad key or value
        for (int d = 0; derived && derived[d]; d++) {
            if (strcmp(key, derived[d]) == 0) die("override '%s': '%s' is derived for each row of %s; edit the recipe instead", words[i], key, path);
        }
        for (int k = 0; k < r->n_rows; k++) {
            if (section_get(&r->rows[k], key)) {
                die("override '%s': the rows of %s differ in '%s' ([row %s] sets it); edit the recipe instead", words[i], path, key,
                    r->rows[k].name);
            }
        }
        Section* s = &r->overrides;
        int at = 0;
        while (at < s->n && strcmp(s->key[at], key) != 0) at++;
        if (at == RECIPE_KEYS) die("too many overrides");
        snprintf(s->key[at], sizeof(s->key[0]), "%s", key);
        snprintf(s->value[at], sizeof(s->value[0]), "%s", eq + 1);
        if (at == s->n) s->n++;
    }
}

typedef struct {
    char *out, *end;   // the list and its end
    const char* path;  // the recipe being read: `presets_from` is relative to its folder
    int included;      // one level only, as recipe_load
} PresetNames;

// Called at each section line (key NULL) and key line: a preset's name is added at its line,
// and the presets of the file a `presets_from` names at that line
static const char* collect_preset(void* ctx, const char* section, const char* key, const char* value) {
    PresetNames* names = ctx;
    if (!section[0] && key && strcmp(key, "presets_from") == 0 && !names->included) {
        char path[CONFIG_STR + 64];
        if (recipe_path_value(path, sizeof(path), value, names->path)) return NULL;  // recipe_load says why
        size_t len;
        char* text = read_recipe_file(path, &len);
        PresetNames included = {names->out, names->end, path, 1};
        recipe_parse(text, len, path, collect_preset, &included);
        free(text);
        return NULL;
    }
    if (key || strncmp(section, "preset ", 7) != 0) return NULL;
    size_t len = strlen(names->out);
    snprintf(names->out + len, (size_t)(names->end - names->out) - len, "%s%s", len ? ", " : "", section + 7);
    return NULL;
}

void recipe_preset_names(const char* path, char* out, size_t n) {
    size_t len;
    char* text = read_recipe_file(path, &len);
    out[0] = 0;
    PresetNames names = {out, out + n, path, 0};
    recipe_parse(text, len, path, collect_preset, &names);
    free(text);
}

const Section* recipe_preset(const Recipe* r, const char* name, const char* path) {
    for (int i = 0; i < r->n_presets; i++) {
        if (strcmp(r->presets[i].name, name) == 0) return &r->presets[i];
    }
    char names[1024] = "";
    size_t n = 0;
    for (int i = 0; i < r->n_presets && n < sizeof(names); i++) n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s", i ? ", " : "", r->presets[i].name);
    die("%s: no [preset %s]; its presets are %s", path, name, names);
}

const char* preset_note(const Section* preset, const char* path) {
    const char* v = section_get(preset, "plumbing");
    if (!v || strcmp(v, "false") == 0) return "";
    if (strcmp(v, "true") != 0) die("%s: [preset %s] key 'plumbing': '%s' is not true or false", path, preset->name, v);
    return "> **A plumbing check.** This preset trains for seconds to run every code path; its numbers and verdicts "
           "say nothing about the paper's claims. Use a larger preset for those.\n\n";
}

const char* section_get(const Section* s, const char* key) {
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->key[i], key) == 0) return s->value[i];
    }
    return NULL;
}

int section_int(const Section* s, const char* key, const char* path) {
    const char* v = section_get(s, key);
    char* end = NULL;
    long value = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || value <= 0 || value > 2147483647L) {
        die("%s: [%s] needs '%s' as a positive integer%s%s%s", path, s->name, key, v ? ", not '" : "", v ? v : "", v ? "'" : "");
    }
    return (int)value;
}

void section_numbers(const Section* s, const char* key, double* out, int n, const char* path) {
    const char* v = section_get(s, key);
    if (!v) die("%s: [claim %s] needs '%s': %d numbers", path, s->name, key, n);
    const char* p = v;
    for (int i = 0; i < n; i++) {
        char* end;
        out[i] = strtod(p, &end);
        if (end == p || !isfinite(out[i])) die("%s: [claim %s] key '%s': '%s' is not %d numbers", path, s->name, key, v, n);
        p = end;
    }
    while (*p == ' ' || *p == '\t') p++;
    if (*p) die("%s: [claim %s] key '%s': '%s' is not %d numbers (more follow)", path, s->name, key, v, n);
}

const Section* recipe_claim(const Recipe* r, const char* name, const char* path) {
    for (int c = 0; c < r->n_claims; c++) {
        if (strcmp(r->claims[c].name, name) == 0) return &r->claims[c];
    }
    die("%s: no [claim %s], which states the paper's numbers this table reads", path, name);
}

void section_apply(Config* cfg, const Section* s, ExtraKey extra_key) {
    for (int i = 0; i < s->n; i++) {
        int runners = 0;
        for (int place = RECIPE_PRESET; place <= RECIPE_OUTSIDE; place++) runners |= runner_key(extra_key, place, s->key[i]);
        if (runners) continue;
        const char* err = config_set(cfg, s->key[i], s->value[i]);
        if (err) die("%s", err);
    }
}

int recipe_shape_key(int is_row, const char* k) {
    return is_row ? !strcmp(k, "heads") || !strcmp(k, "width") || !strcmp(k, "match_params") : !strcmp(k, "h") || !strcmp(k, "d");
}

static void recipe_resolve_row(Config* cfg, const Recipe* r, const Section* preset, const Section* row, const char* path) {
    const char* switches[6] = {"attention", "head_norm", "heads", "width"};
    int n = 4;
    if (config_variant(&cfg->model)->lambda == LAMBDA_PER_LAYER) switches[n++] = "lambda_init";
    if (config_variant(&cfg->model)->needs) switches[n++] = VARIANT_SWITCHES[config_variant(&cfg->model)->needs].key;
    for (int i = 0; i < n; i++) {
        if (!section_get(row, switches[i])) {
            die("%s: [row %s] must state '%s' (a row states every switch that defines it)", path, row->name, switches[i]);
        }
    }
    static const char* const derived[] = {"n_head", "head_dim", "d_model"};
    const Section* sections[] = {&r->common, preset, row};
    for (int s = 0; s < 3; s++) {
        for (int k = 0; k < 3; k++) {
            if (!section_get(sections[s], derived[k])) continue;
            char where[128];
            if (s == 0) snprintf(where, sizeof(where), "the keys outside a section");
            else snprintf(where, sizeof(where), "[%s %s]", s == 1 ? "preset" : "row", sections[s]->name);
            die("%s: %s sets '%s', which each row derives from the preset's h and d and its heads and width", path, where, derived[k]);
        }
    }
    int h = section_int(preset, "h", path), d = section_int(preset, "d", path);
    const char *heads = section_get(row, "heads"), *width = section_get(row, "width");
    if (strcmp(heads, "h") && strcmp(heads, "h/2")) die("%s: [row %s]: 'heads' must be h or h/2", path, row->name);
    if (strcmp(width, "d") && strcmp(width, "2d")) die("%s: [row %s]: 'width' must be d or 2d", path, row->name);
    cfg->model.n_head = strcmp(heads, "h") == 0 ? h : h / 2;
    cfg->model.head_dim = strcmp(width, "d") == 0 ? d : 2 * d;
    cfg->model.d_model = h * d;
}

Config recipe_row_config(const Recipe* r, const Section* preset, const Section* row, int seed_index, const char* path,
                         const char* results, const char* study, ExtraKey extra_key) {
    Config cfg;
    config_defaults(&cfg);
    section_apply(&cfg, &r->common, extra_key);
    section_apply(&cfg, preset, extra_key);
    section_apply(&cfg, row, extra_key);
    section_apply(&cfg, &r->overrides, extra_key);
    recipe_resolve_row(&cfg, r, preset, row, path);
    cfg.seed += seed_index;
    path_printf(cfg.out, sizeof(cfg.out), "%s/%s/%s/%s/seed%d", results, study, preset->name, row->name, cfg.seed);
    config_validate(&cfg);
    const char* match = section_get(row, "match_params");
    if (match && strcmp(match, "true") && strcmp(match, "false")) {
        die("%s: [row %s] key 'match_params': '%s' is neither true nor false", path, row->name, match);
    }
    if (match && strcmp(match, "true") == 0 && strcmp(row->name, r->first_row.name)) {
        // one unit of ffn_hidden is 3 x d_model parameters per layer; the vocabulary cancels
        Config reference = recipe_row_config(r, preset, &r->first_row, seed_index, path, results, study, extra_key);
        double missing = (double)model_param_count(&reference.model, 1) - (double)model_param_count(&cfg.model, 1);
        cfg.model.ffn_hidden = config_ffn_hidden(&cfg.model) + (int)lround(missing / (3.0 * cfg.model.d_model * cfg.model.n_layer));
        config_validate(&cfg);
    }
    return cfg;
}

int64_t recipe_file_experiment(Registry* reg, const char* results, const char* name, const char* recipe_path) {
    char path[4200], preset[256];
    mkdir_p(results);
    registry_path(path, sizeof(path), results);
    registry_open(reg, path);
    int reaped = registry_reap(reg);
    if (reaped) printf("marked %d interrupted run(s) KILLED\n", reaped);
    const char* base = strrchr(recipe_path, '/') ? strrchr(recipe_path, '/') + 1 : recipe_path;
    const char* ini = strstr(base, ".ini");
    snprintf(preset, sizeof(preset), "%.*s", (int)(ini ? ini - base : (long)strlen(base)), base);
    char* recipe_text = read_text_file(recipe_path, NULL);
    int64_t experiment = registry_experiment(reg, name, preset, recipe_path, recipe_text);
    free(recipe_text);
    return experiment;
}
