// Rows of one seed are paired at initialisation (the Transformer and DIFF rows share every weight
// tensor of one name and shape bit for bit; another seed changes each); every row of `table6.ini`
// (in every preset) and `needle.ini` resolves, through the runners' own functions, to the model
// docs/table6.md and docs/retrieval.md describe (attention, per-head norm, λ_init, heads, width);
// `head_norm` defaults to the variant's and is recorded explicitly. The one-GPU preset gpu124m is
// GPT-2 small's shape, its rows within 1% of each other's parameters at GPT-2's vocabulary, 0.52 B
// tokens a row.
#include <string.h>

#include "../base/util.h"
#include "../model/model.h"

#include "../studies/needle/needle_tasks.h"
#include "../studies/table6.h"
#include "../run/config.h"
#include "check.h"
#include "instances.h"

typedef struct {
    const char* row;
    const char* attention;
    int head_norm;
    const char* lambda_init;  // NULL: the variant has no per-layer lambda
    const char* heads;        // "h" or "h/2" of the preset's h
    const char* width;        // "d" or "2d" of the preset's d
} RowSpec;

// docs/table6.md: the paper's seven rows, DIFF V2 and its halves-pairing ablation, and the
// variants not in the paper
static const RowSpec TABLE6[] = {
    {"transformer", "standard", 0, NULL, "h", "d"},
    {"transformer_half", "standard", 0, NULL, "h/2", "2d"},
    {"transformer_gn", "standard", 1, NULL, "h/2", "2d"},
    {"diff", "diff", 1, "schedule", "h/2", "d"},
    {"diff_no_gn", "diff", 0, "schedule", "h/2", "d"},
    {"diff_lambda08", "diff", 1, "0.8", "h/2", "d"},
    {"diff_lambda05", "diff", 1, "0.5", "h/2", "d"},
    {"diff2", "diff2", 0, NULL, "h", "d"},
    {"diff2_halves", "diff2_halves", 0, NULL, "h", "d"},
    {"gda", "gda", 1, "schedule", "h", "d"},
    {"diff_shared_noise", "diff_shared_noise", 1, "schedule", "h/2", "d"},
    {"diff_shared", "diff_shared", 1, "schedule", "h/2", "d"},
    {"dint", "dint", 1, "schedule", "h/2", "d"},
};
#define TABLE6_ROWS ((int)(sizeof(TABLE6) / sizeof(TABLE6[0])))

// docs/retrieval.md: standard h heads x d without per-head norm; diff h/2 heads, two d-wide maps;
// the variants not in the paper at DIFF's query budget (GDA: h query heads)
static const RowSpec NEEDLE[] = {
    {"standard", "standard", 0, NULL, "h", "d"},
    {"diff", "diff", 1, "schedule", "h/2", "d"},
    {"gda", "gda", 1, "schedule", "h", "d"},
    {"diff_shared", "diff_shared", 1, "schedule", "h/2", "d"},
    {"dint", "dint", 1, "schedule", "h/2", "d"},
};
#define NEEDLE_ROWS ((int)(sizeof(NEEDLE) / sizeof(NEEDLE[0])))

static void check_row(const char* path, const Section* preset, const Config* cfg, const RowSpec* spec) {
    int h = section_int(preset, "h", path), d = section_int(preset, "d", path);
    int heads = strcmp(spec->heads, "h") == 0 ? h : h / 2, width = strcmp(spec->width, "d") == 0 ? d : 2 * d;
    const char* lambda = spec->lambda_init ? spec->lambda_init : "(unused)";
    int lambda_ok = !spec->lambda_init || strcmp(cfg->model.lambda_init, spec->lambda_init) == 0;
    CHECK(strcmp(config_attention_name(&cfg->model), spec->attention) == 0 && config_head_norm(&cfg->model) == spec->head_norm && lambda_ok &&
              cfg->model.n_head == heads && config_head_dim(&cfg->model) == width,
          "%s preset %s [row %s]: %s, head_norm %d, lambda_init %s, %d heads x %d; docs: %s, head_norm %d, lambda_init %s, %d x %d",
          path, preset->name,
          spec->row, config_attention_name(&cfg->model), config_head_norm(&cfg->model), cfg->model.lambda_init, cfg->model.n_head, config_head_dim(&cfg->model),
          spec->attention, spec->head_norm, lambda, heads, width);
}

static void test_table6(void) {
    const char* path = "experiments/table6.ini";
    Recipe* r = recipe_load(path, table6_extra_key);
    CHECK(r->n_rows == TABLE6_ROWS, "%s holds the paper's 7 rows, DIFF V2, its halves ablation, GDA, shared noise maps, Shared DIFF and DINT (%d rows)", path, r->n_rows);
    for (int p = 0; p < r->n_presets; p++) {
        for (int i = 0; i < r->n_rows && i < TABLE6_ROWS; i++) {
            const RowSpec* spec = &TABLE6[i];
            CHECK(strcmp(r->rows[i].name, spec->row) == 0, "%s: row %d is %s", path, i, spec->row);
            Config cfg = table6_row_config(r, &r->presets[p], i, 0, path, "build/test_recipes");
            check_row(path, &r->presets[p], &cfg, spec);
        }
    }
    free(r);
}

// The one-GPU research preset: GPT-2 small's shape on llm.c's shards (GPT-2's 50,257 ids), every
// row within 1% of the first row's parameters there (the check table6 makes before training),
// 65,536 tokens a step and 0.52 B a row
static void test_gpu_preset(void) {
    const char* path = "experiments/table6.ini";
    Recipe* r = recipe_load(path, table6_extra_key);
    const Section* preset = recipe_preset(r, "gpu124m", path);
    size_t first = 0;
    for (int i = 0; i < r->n_rows; i++) {
        Config cfg = table6_row_config(r, preset, i, 0, path, "build/test_recipes");
        size_t params = model_param_count(&cfg.model, 50257);
        if (i == 0) first = params;
        long long tokens = (long long)cfg.optim.steps * cfg.batch_size * cfg.grad_accum * cfg.model.seq_len;
        CHECK(cfg.model.d_model == 768 && cfg.model.n_layer == 12 && cfg.model.seq_len == 1024 && tokens == 524288000LL &&
                  fabs((double)params - (double)first) <= 0.01 * first && strstr(cfg.data, "data/fineweb10B"),
              "%s preset gpu124m [row %s]: d_model %d, %d layers, context %d, %lld tokens, %zu parameters at GPT-2's vocabulary "
              "(row %s: %zu), data %s", path, r->rows[i].name, cfg.model.d_model, cfg.model.n_layer, cfg.model.seq_len, tokens, params,
              r->rows[0].name, first, cfg.data);
    }
    free(r);
}

// The gap-against-tokens studies: both recipes resolve in every preset of scaling_presets.ini to
// the Transformer, DIFF (and in scaling_variants.ini DIFF V2 and GDA) rows of table6.ini's shape
// rule; the CPU preset trains at least 2e7 tokens a run with at least 12 validation points, and
// every row is within 1% of the Transformer's parameters (the check table6 makes before training)
static void test_scaling(void) {
    static const char* const PATHS[2] = {"experiments/scaling.ini", "experiments/scaling_variants.ini"};
    static const char* const ATTENTION[4] = {"standard", "diff", "diff2", "gda"};
    for (int f = 0; f < 2; f++) {
        Recipe* r = recipe_load(PATHS[f], table6_extra_key);
        CHECK(r->n_presets == 3 && r->n_rows == 2 + 2 * f && r->n_claims == 1, "%s: 3 presets, %d rows, a claim (got %d, %d, %d)",
              PATHS[f], 2 + 2 * f, r->n_presets, r->n_rows, r->n_claims);
        for (int p = 0; p < r->n_presets; p++) {
            size_t first = 0;
            for (int i = 0; i < r->n_rows; i++) {
                Config cfg = table6_row_config(r, &r->presets[p], i, 0, PATHS[f], "build/test_recipes");
                size_t params = model_param_count(&cfg.model, 4096);
                if (i == 0) first = params;
                long long tokens = (long long)cfg.optim.steps * cfg.batch_size * cfg.grad_accum * cfg.model.seq_len;
                int points = cfg.optim.steps / cfg.eval_every;
                CHECK(strcmp(config_attention_name(&cfg.model), ATTENTION[i]) == 0 && fabs((double)params - (double)first) <= 0.01 * first &&
                          points >= 12 && (strcmp(r->presets[p].name, "small") || tokens >= 20000000LL),
                      "%s preset %s [row %s]: %s, %zu parameters (first row %zu), %lld tokens, %d validation points", PATHS[f],
                      r->presets[p].name, r->rows[i].name, config_attention_name(&cfg.model), params, first, tokens, points);
            }
        }
        free(r);
    }
}

static const ParamTensor* param_named(const Model* m, const char* name) {
    for (int i = 0; i < m->n_tensors; i++) {
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    }
    die("no tensor %s", name);
}

// Rows of the smoke preset, built and initialised with one seed and with another
static void test_paired_init(void) {
    const char* path = "experiments/table6.ini";
    Recipe* r = recipe_load(path, table6_extra_key);
    const Section* preset = recipe_preset(r, "smoke", path);
    Model m[4];
    const Backend* cpu = backend_named("cpu");
    // transformer, diff, diff with another seed, diff2 (whose feed-forward match_params narrows)
    static const int rows[4] = {0, 3, 3, 7}, seeds[4] = {1000, 1000, 1001, 1000};
    for (int k = 0; k < 4; k++) {
        Config cfg = table6_row_config(r, preset, rows[k], 0, path, "build/test_recipes");
        model_build(&m[k], &cfg.model, cpu, 64, cfg.batch_size);
        model_init_params(&m[k], (uint64_t)seeds[k]);
    }
    // tensors of one name and shape: the same numbers for the same seed, others for another
    int same = 0, shared = 0, differs = 1;
    for (int i = 0; i < m[0].n_tensors; i++) {
        const ParamTensor* a = &m[0].tensors[i];
        for (int j = 0; j < m[1].n_tensors; j++) {
            const ParamTensor* b = &m[1].tensors[j];
            if (strcmp(a->name, b->name) || a->size != b->size || a->init == INIT_GAIN) continue;
            shared++;
            same += memcmp(m[0].params_memory + a->offset, m[1].params_memory + b->offset, a->size * sizeof(float)) == 0;
            differs &= memcmp(m[1].params_memory + b->offset, m[2].params_memory + b->offset, b->size * sizeof(float)) != 0;
        }
    }
    // the embedding, the LM head, and per layer wk, wv, wo (one width: h x d) at least
    CHECK(shared >= 2 + 3 * m[0].L && same == shared, "Transformer and DIFF share %d of %d coinciding weight tensors (at least %d)",
          same, shared, 2 + 3 * m[0].L);
    CHECK(differs, "another seed draws other numbers for each of them");
    // wq is one shape in both rows here (h x d = h/2 x 2 maps x d), so it is among the shared
    const ParamTensor* wq0 = param_named(&m[0], "layer_00/wq"), *wq1 = param_named(&m[1], "layer_00/wq");
    size_t lead = wq0->size < wq1->size ? wq0->size : wq1->size;
    CHECK(memcmp(m[0].params_memory + wq0->offset, m[1].params_memory + wq1->offset, lead * sizeof(float)) == 0,
          "wq of both rows starts with the same %zu numbers", lead);
    // a tensor of one name but fewer rows holds the leading rows of the wider one: DIFF V2's
    // narrower w_gate (F, C) is the first F rows of the Transformer's
    const ParamTensor* wide = param_named(&m[0], "layer_01/w_gate"), *narrow = param_named(&m[3], "layer_01/w_gate");
    CHECK(narrow->shape[0] < wide->shape[0] &&
              memcmp(m[0].params_memory + wide->offset, m[3].params_memory + narrow->offset, narrow->size * sizeof(float)) == 0,
          "DIFF V2's w_gate (%d rows) is the first rows of the Transformer's (%d)", narrow->shape[0], wide->shape[0]);
    for (int k = 0; k < 4; k++) model_free(&m[k]);
    free(r);
}

static void test_needle(void) {
    const char* path = "experiments/needle.ini";
    Recipe* r = recipe_load(path, needle_extra_key);
    CHECK(r->n_rows == NEEDLE_ROWS, "%s holds the paper's two needle rows, grouped and Shared DIFF (%d)", path, r->n_rows);
    for (int p = 0; p < r->n_presets; p++) {
        for (int i = 0; i < r->n_rows && i < NEEDLE_ROWS; i++) {
            CHECK(strcmp(r->rows[i].name, NEEDLE[i].row) == 0, "%s: row %d is %s", path, i, NEEDLE[i].row);
            Config cfg = needle_row_config(r, &r->presets[p], i, 0, path, "build/test_recipes");
            check_row(path, &r->presets[p], &cfg, &NEEDLE[i]);
        }
    }
    // docs/retrieval.md: d_model 256 with 8 x 32 and 4 x 32 heads in the default preset, 128 in short
    static const struct { const char* preset; int d_model, heads[2], width; } WIDTHS[] = {{"default", 256, {8, 4}, 32},
                                                                                          {"short", 128, {8, 4}, 16}};
    for (size_t w = 0; w < sizeof(WIDTHS) / sizeof(WIDTHS[0]); w++) {
        const Section* preset = recipe_preset(r, WIDTHS[w].preset, path);
        for (int i = 0; i < r->n_rows && i < 2; i++) {
            Config cfg = needle_row_config(r, preset, i, 0, path, "build/test_recipes");
            CHECK(cfg.model.d_model == WIDTHS[w].d_model && cfg.model.n_head == WIDTHS[w].heads[i] && config_head_dim(&cfg.model) == WIDTHS[w].width,
                  "%s preset %s [row %s]: d_model %d, %d heads x %d (docs: %d, %d x %d)", path, WIDTHS[w].preset, r->rows[i].name,
                  cfg.model.d_model, cfg.model.n_head, config_head_dim(&cfg.model), WIDTHS[w].d_model, WIDTHS[w].heads[i], WIDTHS[w].width);
        }
    }
    free(r);
}

// A training step's attention FLOPs per token grow with the context by 6 L (QH D + H Dv) / 2 per
// position: at the needle default preset DIFF has 8 query sub-heads of 32 and 4 heads of values
// 64 wide, 6 x 4 x (256 + 256) per two positions; GDA at DIFF's query budget the same 8 query heads
// (6 signal, 2 noise, each noise map counted once for the 3 heads that share it) and 6 heads of
// values, 6 x 4 x (256 + 384)
static void test_attention_flops(void) {
    const char* path = "experiments/needle.ini";
    Recipe* r = recipe_load(path, needle_extra_key);
    const Section* preset = recipe_preset(r, "default", path);
    static const struct { const char* row; double per_two_positions; } ROWS[] = {{"diff", 6.0 * 4 * 512}, {"gda", 6.0 * 4 * 640}};
    for (size_t k = 0; k < sizeof(ROWS) / sizeof(ROWS[0]); k++) {
        int i = 0;
        while (i < r->n_rows && strcmp(r->rows[i].name, ROWS[k].row)) i++;
        CHECK(i < r->n_rows, "%s holds the row %s", path, ROWS[k].row);
        if (i == r->n_rows) continue;
        Config cfg = needle_row_config(r, preset, i, 0, path, "build/test_recipes");
        Model m;
        model_build(&m, &cfg.model, backend_named("cpu"), 64, 1);
        double grown = model_flops_per_token(&m, 1025) - model_flops_per_token(&m, 1023);
        CHECK(grown == ROWS[k].per_two_positions, "%s [row %s]: attention FLOPs per token grow by %.0f over two positions (by hand %.0f)",
              path, ROWS[k].row, grown, ROWS[k].per_two_positions);
        model_free(&m);
    }
    free(r);
}

static void test_defaults(void) {
    // the paper's rule: the per-head norm belongs to the DIFF family, whose lambda is per layer
    int expected[ATTN_VARIANT_COUNT];
    for (int k = 0; k < ATTN_VARIANT_COUNT; k++) expected[k] = ATTN_VARIANTS[k].lambda == LAMBDA_PER_LAYER;
    for (int k = 0; k < ATTN_VARIANT_COUNT; k++) {
        Config cfg;
        config_defaults(&cfg);
        cfg.model.attention = k;
        char* text = config_to_text(&cfg);
        char want[32];
        snprintf(want, sizeof(want), "head_norm = %s\n", expected[k] ? "true" : "false");
        CHECK(config_head_norm(&cfg.model) == expected[k] && strstr(text, want), "%s: head_norm defaults to %d and is recorded explicitly",
              ATTN_VARIANTS[k].name, expected[k]);
        free(text);
        cfg.model.head_norm = !expected[k];
        CHECK(config_head_norm(&cfg.model) == !expected[k], "%s: an explicit head_norm wins over the default", ATTN_VARIANTS[k].name);
    }
}

int main(void) {
    test_table6();
    test_gpu_preset();
    test_scaling();
    test_paired_init();
    test_needle();
    test_attention_flops();
    test_defaults();
    return check_summary();
}
