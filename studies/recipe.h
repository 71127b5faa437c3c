// Experiment recipes (experiments/table6.ini, experiments/needle.ini): `difftx train` keys
// shared by every run, [preset NAME] sections for model size and budget, [row NAME] sections
// for the compared models. Each kind of recipe adds its own non-training keys (extra_key).
#ifndef RECIPE_H
#define RECIPE_H

#include <stdint.h>

#include "../run/config.h"
#include "registry.h"

#define RECIPE_KEYS 64
#define RECIPE_SECTIONS 32

typedef struct {
    char name[64];
    char key[RECIPE_KEYS][64];
    char value[RECIPE_KEYS][CONFIG_STR];
    int n;
} Section;

// Where a recipe key stands
enum { RECIPE_PRESET = 0, RECIPE_ROW = 1, RECIPE_OUTSIDE = 2, RECIPE_CLAIM = 3 };
// 1 when key is a recipe key (not a training key) allowed at place: in a preset section, a row
// section, outside any section, or in a [claim NAME] section (which only a recipe whose
// extra_key allows some key there may have; every key of one must be allowed)
typedef int (*ExtraKey)(int place, const char* key);

#define RECIPE_CLAIMS 16

typedef struct {
    Section common;
    Section overrides;  // key=value from the command line: applied to every row, after its sections
    Section presets[RECIPE_SECTIONS], rows[RECIPE_SECTIONS];
    Section first_row;  // the file's first row, whose parameters `match_params` matches, kept where --rows leaves it out
    Section claims[RECIPE_CLAIMS];  // what the study says of its rows ([claim NAME]), in the file's order
    int n_presets, n_rows, n_claims;
    ExtraKey extra_key;
    const char* path;  // while parsing: relative paths are read from its folder
    int included;      // while parsing the file `presets_from` names
    char error[512];
} Recipe;

// Parses path; every training key is checked; dies naming the file and line. A [claim NAME]
// section is taken where extra_key allows its keys (Table 6's recipes: the paper's claims). Path values (the
// config's and a needle preset's `corpus`) are kept as read from path's folder. A key
// `presets_from = FILE` outside a section takes FILE's presets and keys outside a section (not
// its rows) at that line, so a study of other rows runs on another recipe's presets. Caller frees.
Recipe* recipe_load(const char* path, ExtraKey extra_key);
// The command line's key=value words after a runner's recipe, for every row (recorded with each
// run's config, so a table trained on other data is another table's runs). Refused by name: a
// word that is not key=value, a bad value, a key some row sets (the rows differ in it), and the
// runner's derived keys (NULL-terminated: computed per row, an override would be lost).
void recipe_override(Recipe* r, const char* const* words, int n, const char* const* derived, const char* path);
// Keeps only the rows `names` lists (comma-separated, each once), in the recipe's order; each
// keeps the config the whole recipe gives it (`match_params` still matches the file's first
// row), so a study of some rows trains and finds the whole recipe's models. Dies naming the
// recipe and its rows where a name is not a row, or is given twice.
void recipe_keep_rows(Recipe* r, const char* names, const char* path);
// "smoke, small, gpu124m, paper": the [preset NAME] sections of the recipe file at path, into out
void recipe_preset_names(const char* path, char* out, size_t n);
// The preset called name, or dies naming the recipe
const Section* recipe_preset(const Recipe* r, const char* name, const char* path);
// A preset with `plumbing = true` (the smoke presets) runs the code path in seconds; the note
// its tables carry says so, and "" for any other preset
const char* preset_note(const Section* preset, const char* path);
const char* section_get(const Section* s, const char* key);
// A positive integer key, or dies naming the recipe and section
int section_int(const Section* s, const char* key, const char* path);
// The paper's numbers a claim states: exactly n finite numbers, whitespace-separated, of key in
// section s, into out; dies naming the recipe, section and key
void section_numbers(const Section* s, const char* key, double* out, int n, const char* path);
// The recipe's [claim NAME], or dies naming the recipe and the claim it needs
const Section* recipe_claim(const Recipe* r, const char* name, const char* path);
// Applies the section's training keys to cfg
void section_apply(Config* cfg, const Section* s, ExtraKey extra_key);
// The full config of a row for a preset and its seed_index-th seed, resolved in one place for
// every runner: the defaults, then the recipe's common keys, the preset, the row and the
// command line's overrides (section_apply with extra_key), then the row's switches and shape;
// the seed is the recipe's + seed_index and the run folder <results>/<study>/<preset>/<row>/seed<N>.
// A row must state every switch that defines it, so no default decides what a table row is:
// `attention`, `head_norm`, `lambda_init` where the variant has a per-layer lambda, and its
// shape. Rows of different attention compare at one width: the preset's `h` and `d` are the
// Transformer's head count and head width, and a row states its heads as `h` or `h/2` and its
// head width as `d` or `2d`; this sets n_head, head_dim and d_model = h x d. Dies naming the
// recipe and row, or the section that sets n_head, head_dim or d_model itself (it would be
// overwritten). A row with `match_params = true` gets the SwiGLU width that gives it the first
// row's parameter count (a variant with smaller or larger attention projections pays or takes
// the difference there). recipe_shape_key says whether k is a shape key (`heads`, `width`,
// `match_params` on a row; `h`, `d` on a preset).
Config recipe_row_config(const Recipe* r, const Section* preset, const Section* row, int seed_index, const char* path,
                         const char* results, const char* study, ExtraKey extra_key);
int recipe_shape_key(int is_row, const char* k);

// Opens results/registry.sqlite (marking dead attempts KILLED) and finds or creates experiment
// `name` whose preset is the recipe file's name without .ini ("default" for default.ini)
int64_t recipe_file_experiment(Registry* reg, const char* results, const char* name, const char* recipe_path);

#endif
