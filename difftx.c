// difftx: the command line, above every layer. One program, several subcommands, listed in
// COMMANDS at the end; `difftx help` prints them.
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/prepare.h"
#include "data/needle.h"
#include "data/tokenizer.h"
#include "eval/attnmap.h"
#include "eval/arhit.h"
#include "eval/outliers.h"
#include "eval/sample.h"
#include "viz/attn_plot.h"
#include "viz/attn_view.h"
#include "studies/bench.h"
#include "studies/needle/needle_tasks.h"
#include "studies/recipe.h"
#include "studies/runs.h"
#include "studies/table5.h"
#include "studies/table6.h"
#include "studies/verdict.h"
#include "run/train.h"
#include "model/backend.h"
#include "run/checkpoint.h"
#include "run/device.h"
#include "base/dist.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/safetensors.h"
#include "base/util.h"
#include "studies/tracked.h"

// The usage a mistake prints: while a subcommand runs, its own (run_command sets it)
static char USAGE[8192];

// An option getopt refused (opterr is off; c is ':' for a missing value, '?' otherwise): the
// value a known one lacks, or the nearest option of the subcommand. A short option is named by
// optopt, not argv: getopt may not have moved past its word (`-xyz`), and it permutes the words
static void bad_option(char** argv, const struct option* opts, int c) {
    if (c == ':') {  // optopt is the option's value: its short name, or 256 + its row
        for (int i = 0; opts[i].name; i++) {
            if (opts[i].val != optopt) continue;
            if (optopt < 256) die("option '-%c' (--%s) needs a value\n%s", optopt, opts[i].name, USAGE);
            die("option '--%s' needs a value\n%s", opts[i].name, USAGE);
        }
    }
    if (optopt > 0 && optopt < 256) die("unknown option '-%c'\n%s", optopt, USAGE);
    const char* word = argv[optind - 1];
    const char* p = word + strspn(word, "-");
    char name[64];
    snprintf(name, sizeof(name), "%.*s", (int)strcspn(p, "="), p);
    const char* names[32];
    int n = 0;
    while (opts[n].name && n < 32) {
        names[n] = opts[n].name;
        n++;
    }
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i], name) == 0) die("option '--%s' needs a value\n%s", name, USAGE);
    }
    const char* near = closest_name(name, names, n);
    if (near) die("unknown option '%s'; did you mean '--%s'?\n%s", word, near, USAGE);
    die("unknown option '%s'\n%s", word, USAGE);
}

// The recipe file at path, then the key=value overrides argv[first_override..], then validation;
// returns the backend of the device key, resolved here so that a device that cannot run stops
// the command before anything is written
static void load_recipe(Config* cfg, const char* path, int argc, char** argv, int first_override) {
    config_defaults(cfg);
    config_load_file(cfg, path);
    for (int i = first_override; i < argc; i++) config_apply_override(cfg, argv[i]);
    config_validate(cfg);
}

// load_recipe of the command's RECIPE argument argv[first], its overrides after it
static void load_config(Config* cfg, int argc, char** argv, int first) {
    if (first >= argc) die("missing RECIPE argument\n%s", USAGE);
    load_recipe(cfg, argv[first], argc, argv, first + 1);
}

static int parse_int_arg(const char* flag, const char* value) {
    char* end;
    long v = strtol(value, &end, 10);
    if (!plain_number(value, 0) || end == value || *end || v < 0 || v > 1000000000) die("option %s: '%s' is not a non-negative integer", flag, value);
    return (int)v;
}

// A subcommand's option: `--name VALUE` (or `--name=VALUE`; `-o VALUE` where short_name is
// 'o'), or a flag without a value. Exactly one target is set, and its type is the option's:
// text, a non-negative integer (count), a number >= 0, or a flag (1 when given). A text value is
// never empty (an empty path would name the root of a relative one: `--results ""` wrote
// /registry.sqlite) except where empty_ok says it means something (an empty prompt).
typedef struct {
    const char* name;
    const char** text;
    int* count;
    float* number;
    int* flag;
    char short_name;
    int empty_ok;
} Option;

#define MAX_OPTIONS 16

// Sets every option argv gives by its row of the table (n rows), refusing an unknown one or one
// without its value with the nearest name; options may come before, between or after the
// arguments. Returns the index of the first argument: the rest of argv from there is arguments.
static int parse_options(int argc, char** argv, const Option* table, int n) {
    struct option opts[MAX_OPTIONS + 1];
    char shorts[2 * MAX_OPTIONS + 2] = ":";  // ':' first: a missing value is told apart from an unknown option
    if (n > MAX_OPTIONS) die("a subcommand with more than %d options", MAX_OPTIONS);
    for (int i = 0; i < n; i++) {
        opts[i] = (struct option){table[i].name, table[i].flag ? no_argument : required_argument, 0,
                                  table[i].short_name ? table[i].short_name : 256 + i};
        if (table[i].short_name) snprintf(shorts + strlen(shorts), sizeof(shorts) - strlen(shorts), "%c:", table[i].short_name);
    }
    opts[n] = (struct option){0, 0, 0, 0};
    int c;
    while ((c = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
        int i = 0;
        while (i < n && opts[i].val != c) i++;
        if (i == n || c == ':' || c == '?') bad_option(argv, opts, c);
        char flag[80];
        snprintf(flag, sizeof(flag), "--%s", table[i].name);
        if (table[i].text && !*optarg && !table[i].empty_ok) die("option %s: an empty value (a folder or file is named by a non-empty path)", flag);
        // the folders a study records in its rows' recipes (`out=` of each run): text a recipe can hold
        const char* unstorable = table[i].text && (strcmp(table[i].name, "results") == 0 || strcmp(table[i].name, "plots") == 0)
                                     ? config_string_problem(optarg) : NULL;
        if (unstorable) die("option %s: '%s' %s", flag, optarg, unstorable);
        if (table[i].text) *table[i].text = optarg;
        else if (table[i].count) *table[i].count = parse_int_arg(flag, optarg);
        else if (table[i].flag) *table[i].flag = 1;
        else {
            char* end;
            float v = strtof(optarg, &end);
            if (!plain_number(optarg, 1) || end == optarg || *end || !(v >= 0)) die("option %s: '%s' is not a number >= 0", flag, optarg);
            *table[i].number = v;
        }
    }
    return optind;
}
#define OPTIONS(table) (int)(sizeof(table) / sizeof((table)[0]))

static int cmd_prepare(int argc, char** argv) {
    PrepareOptions opt = PREPARE_DEFAULTS;
    int sample_mb = -1, shard_tokens = -1;  // the options' types; opt's are double and size_t
    const Option options[] = {{"vocab", .count = &opt.vocab_size}, {"sample-mb", .count = &sample_mb},
                              {"shard-tokens", .count = &shard_tokens}};
    int first = parse_options(argc, argv, options, OPTIONS(options));
    if (sample_mb >= 0) opt.sample_mb = sample_mb;
    if (shard_tokens >= 0) opt.shard_tokens = (size_t)shard_tokens;
    if (argc - first < 2) die("prepare needs OUT_DIR and at least one INPUT\n%s", USAGE);
    dataset_prepare(argv[first], (const char* const*)argv + first + 1, argc - first - 1, &opt);
    return 0;
}

static int cmd_needle_data(int argc, char** argv) {
    int seq_len = 1024, max_needles = NEEDLE_TRAIN_NEEDLES, seed = NEEDLE_DATA_SEED;
    const Option options[] = {{"seq-len", .count = &seq_len}, {"max-needles", .count = &max_needles},
                              {"seed", .count = &seed}};
    int first = parse_options(argc, argv, options, OPTIONS(options));
    if (argc - first != 2) die("needle-data needs OUT_DIR and DATA_DIR\n%s", USAGE);
    if (max_needles < 1 || max_needles > NEEDLE_MAX) die("option --max-needles: must lie in 1..%d", NEEDLE_MAX);
    if (seq_len < 64 || seq_len > 1 << 20) die("option --seq-len: must lie in 64..%d, got %d", 1 << 20, seq_len);
    char cities[4200];
    source_file_path(cities, sizeof(cities), "data/cities.txt");
    needle_prepare(argv[first], argv[first + 1], cities, seq_len, max_needles, (uint64_t)seed);
    return 0;
}

static int cmd_train(int argc, char** argv) {
    int until = 0;
    const char* results = "results";
    const Option options[] = {{"until", .count = &until}, {"results", .text = &results}};
    int first = parse_options(argc, argv, options, OPTIONS(options));
    Config cfg;
    load_config(&cfg, argc, argv, first);
    backend_close(device_open_run(&cfg));  // the device and precision refused before anything is recorded
    train_tracked(argv[first], &cfg, until, results);
    return 0;
}

// The tokenizer a checkpoint was trained with: the run folder's copy first, so a checkpoint
// works from anywhere, then its data folder's; dies when neither holds it or it cannot decode
static void checkpoint_tokenizer(Tokenizer* found, const char* path, const Config* run, const CheckpointInfo* info) {
    char folder[4096];
    path_printf(folder, sizeof(folder), "%s", path);
    char* slash = strrchr(folder, '/');
    if (slash) *slash = 0; else strcpy(folder, ".");
    if (!tokenizer_in_folder(found, folder, info->tokenizer_hash) && !tokenizer_in_folder(found, run->data, info->tokenizer_hash)) {
        if (info->tokenizer_hash != GPT2_IDS_HASH) {
            die("no tokenizer for '%s': neither its folder '%s' nor its data folder '%s' holds the tokenizer.bin it was "
                "trained with", path, folder, run->data);
        }
        tokenizer_gpt2(found, NULL);  // GPT-2 ids without llm.c's token table: decoding says what is missing
    }
    tokenizer_decode(found, NULL, 0, NULL);  // dies now, not after the first token, when it cannot decode
}

static int cmd_sample(int argc, char** argv) {
    const char* prompt = "";
    const char* device = "cpu";
    int n_tokens = 200, seed = 1;
    float temperature = 0.8f;
    const Option options[] = {{"prompt", .text = &prompt, .empty_ok = 1}, {"tokens", .count = &n_tokens},
                              {"temperature", .number = &temperature}, {"seed", .count = &seed},
                              {"device", .text = &device}};
    int first = parse_options(argc, argv, options, OPTIONS(options));
    if (first >= argc) die("sample needs a CHECKPOINT\n%s", USAGE);
    if (first + 1 < argc) die("sample: '%s': sample takes one CHECKPOINT and options\n%s", argv[first + 1], USAGE);
    Config run;
    Model model;
    CheckpointInfo info;
    Backend* be = device_open_option(device, "--device");
    checkpoint_load(argv[first], be, &run, &model, NULL, &info);
    Tokenizer found;
    checkpoint_tokenizer(&found, argv[first], &run, &info);
    sample_text(&model, &found, prompt, n_tokens, temperature, (uint64_t)seed, stdout);
    tokenizer_free(&found);
    model_free(&model);
    backend_close(be);
    return 0;
}

static int cmd_bench(int argc, char** argv) {
    int vocab = 4096, steps = 6, forward_only = 0;
    const char* results = "results";
    const char* versus = NULL;
    const char* profile = NULL;
    const Option options[] = {{"vocab", .count = &vocab}, {"steps", .count = &steps},
                              {"forward", .flag = &forward_only}, {"results", .text = &results},
                              {"vs", .text = &versus}, {"profile", .text = &profile}};
    int first = parse_options(argc, argv, options, OPTIONS(options));
    Config cfg[2];
    load_config(&cfg[0], argc, argv, first);
    const char* paths[2] = {argv[first], versus};
    if (versus) {
        load_recipe(&cfg[1], versus, argc, argv, first + 1);  // the same overrides as the first
        if (cfg[1].device != cfg[0].device) {
            die("option --vs: %s runs on device %s and %s on device %s: alternated steps compare two models on one device",
                argv[first], BACKEND_DEVICES[cfg[0].device], versus, BACKEND_DEVICES[cfg[1].device]);
        }
    }
    if (steps < 2) die("option --steps: at least 2 (the first is a warm-up and is not timed)");
    if (profile && versus) die("option --profile: it profiles one recipe's step, not two alternated (--vs)");
    if (vocab < 2 || vocab > 65536) die("option --vocab: must lie in 2..65536, got %d", vocab);
    const Config* cfgs[2] = {&cfg[0], &cfg[1]};
    bench_run(cfgs, paths, versus ? 2 : 1, vocab, steps, forward_only, results, profile);
    return 0;
}

static int cmd_table6(int argc, char** argv) {
    Table6Options opt = {NULL, "small", 1, "results", "plots", NULL, 0};
    const Option options[] = {{"preset", .text = &opt.preset}, {"seeds", .count = &opt.seeds},
                              {"results", .text = &opt.results}, {"plots", .text = &opt.plots}};
    int first = parse_options(argc, argv, options, OPTIONS(options));
    if (first >= argc) die("table6 needs a RECIPE\n%s", USAGE);
    opt.recipe = argv[first];
    opt.overrides = (const char* const*)argv + first + 1;
    opt.n_overrides = argc - first - 1;
    return table6_main(&opt);
}

static int cmd_needle(int argc, char** argv) {
    NeedleOptions opt = {NULL, "default", NULL, "results", "plots", NULL, 0, 1, NULL};
    const Option options[] = {{"preset", .text = &opt.preset}, {"task", .text = &opt.task},
                              {"seeds", .count = &opt.seeds}, {"results", .text = &opt.results},
                              {"plots", .text = &opt.plots},   {"rows", .text = &opt.rows}};
    int first = parse_options(argc, argv, options, OPTIONS(options));
    if (first >= argc) die("needle needs a RECIPE\n%s", USAGE);
    if (!opt.task) die("needle needs --task table2, fig5, table3 or fig8\n%s", USAGE);
    opt.recipe = argv[first];
    opt.overrides = (const char* const*)argv + first + 1;
    opt.n_overrides = argc - first - 1;
    return needle_main(&opt);
}

// "0,2,3" into list (at most max numbers in 0..limit-1); NULL: all of 0..limit-1
static int parse_index_list(const char* flag, const char* text, int limit, int* list) {
    if (!text) {
        for (int i = 0; i < limit; i++) list[i] = i;
        return limit;
    }
    int n = 0;
    for (const char* p = text; *p;) {
        char* end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= limit || (*end && *end != ',')) die("option %s: '%s' is not a list of numbers in 0..%d", flag, text, limit - 1);
        for (int i = 0; i < n; i++) {
            if (list[i] == v) die("option %s: %ld is listed twice", flag, v);
        }
        list[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (!n) die("option %s: an empty list", flag);
    return n;
}

static int cmd_maps(int argc, char** argv) {
    const char *text_path = NULL, *prompt = NULL, *layers_arg = NULL, *heads_arg = NULL, *out = NULL, *device = "cpu";
    const Option options[] = {{"text", .text = &text_path},   {"prompt", .text = &prompt},
                              {"layers", .text = &layers_arg}, {"heads", .text = &heads_arg},
                              {"out", .text = &out, .short_name = 'o'},         {"device", .text = &device}};
    int first = parse_options(argc, argv, options, OPTIONS(options));
    if (first >= argc) die("maps needs a CHECKPOINT\n%s", USAGE);
    if (first + 1 < argc) die("maps: '%s': maps takes one CHECKPOINT and options\n%s", argv[first + 1], USAGE);
    if (!text_path == !prompt) die("maps needs exactly one of --text FILE and --prompt TEXT\n%s", USAGE);
    if (!out) die("maps needs -o OUT.h5\n%s", USAGE);
    const char* ckpt = argv[first];
    const char* inputs[2] = {ckpt, text_path};
    refuse_output_over_input("output", out, inputs, text_path ? 2 : 1);
    refuse_replacing_non_file("output", out);
    Config run;
    Model model;
    CheckpointInfo info;
    Backend* be = device_open_option(device, "--device");
    checkpoint_load(ckpt, be, &run, &model, NULL, &info);
    Tokenizer tok;
    checkpoint_tokenizer(&tok, ckpt, &run, &info);
    int layers[ATTNMAP_MAX_INDEX], heads[ATTNMAP_MAX_INDEX];
    if (model.L > ATTNMAP_MAX_INDEX || model.H > ATTNMAP_MAX_INDEX) die("'%s' has more than %d layers or heads", ckpt, ATTNMAP_MAX_INDEX);
    int n_layers = parse_index_list("--layers", layers_arg, model.L, layers);
    int n_heads = parse_index_list("--heads", heads_arg, model.H, heads);
    size_t len;
    char* text = text_path ? read_text_file(text_path, &len) : strdup(prompt);
    if (!text) die("out of memory");
    if (!text_path) len = strlen(text);
    maps_of_document(out, &model, &tok, text, len, text_path ? text_path : "--prompt", layers, n_layers, heads, n_heads, ckpt);
    printf("wrote %s (%s attention); view it with: difftx view %s -o VIEW.html\n", out, config_attention_name(&model.cfg), out);
    free(text);
    tokenizer_free(&tok);
    model_free(&model);
    backend_close(be);
    return 0;
}

static int cmd_view(int argc, char** argv) {
    int sample = 0;
    const char* out = NULL;
    const Option options[] = {{"sample", .count = &sample}, {"out", .text = &out, .short_name = 'o'}};
    int first = parse_options(argc, argv, options, OPTIONS(options));
    if (first >= argc) die("view needs a maps FILE\n%s", USAGE);
    if (first + 1 < argc) die("view: '%s': view takes one FILE and options\n%s", argv[first + 1], USAGE);
    if (!out) die("view needs -o OUT.html\n%s", USAGE);
    const char* inputs[1] = {argv[first]};
    refuse_output_over_input("output", out, inputs, 1);
    refuse_replacing_non_file("output", out);
    attn_view_write(argv[first], sample, out);
    return 0;
}

static int cmd_table5(int argc, char** argv) {
    Table5Options opt = {NULL, "small", NULL, "default", NULL, "results", "plots", NULL, 0, 1};
    const Option options[] = {{"preset", .text = &opt.preset},         {"needle", .text = &opt.needle_recipe},
                              {"needle-preset", .text = &opt.needle_preset}, {"needle-rows", .text = &opt.needle_rows},
                              {"seeds", .count = &opt.seeds},
                              {"results", .text = &opt.results},       {"plots", .text = &opt.plots}};
    int first = parse_options(argc, argv, options, OPTIONS(options));
    if (first >= argc || !opt.needle_recipe) die("table5 needs a Table 6 RECIPE and --needle RECIPE\n%s", USAGE);
    opt.table6_recipe = argv[first];
    opt.overrides = (const char* const*)argv + first + 1;
    opt.n_overrides = argc - first - 1;
    return table5_main(&opt);
}

static int cmd_attn(int argc, char** argv) {
    int sample = -1, layer = -1, head = -1;
    const char* out = NULL;
    const Option options[] = {{"sample", .count = &sample}, {"layer", .count = &layer},
                              {"head", .count = &head},     {"out", .text = &out}};
    int first = parse_options(argc, argv, options, OPTIONS(options));
    if (first >= argc) die("attn needs a FILE\n%s", USAGE);
    if (sample < 0 || layer < 0 || head < 0) die("attn needs --sample, --layer and --head\n%s", USAGE);
    if (first + 1 < argc) die("attn: '%s': attn takes one FILE and options\n%s", argv[first + 1], USAGE);
    const char* file = argv[first];
    char png[4200];
    if (out) snprintf(png, sizeof(png), "%s", out);
    else path_printf(png, sizeof(png), "%.*s_s%d_l%d_h%d.png", (int)(strlen(file) - (strstr(file, ".h5") ? 3 : 0)), file, sample, layer, head);
    refuse_output_over_input("output", png, &file, 1);
    refuse_replacing_non_file("output", png);
    attn_render(file, sample, layer, head, png);
    printf("wrote %s\n", png);
    return 0;
}

typedef struct {
    const char* name;
    int (*run)(int argc, char** argv);
    const char* args;
    const char* what;
} Command;

typedef struct {
    int windows;  // 0: the run's own (eval_windows)
    const char *device, *results;
    LogitQuant quant;
    int outliers, precise;
    int first_argument;  // argv's first argument after the options
} EvalArgs;

static EvalArgs parse_eval_args(int argc, char** argv) {
    EvalArgs a = {0, "cpu", "results", {0, QUANT_PER_TENSOR}, 0, 0, 0};
    const char* scope = "tensor";
    const Option options[] = {{"windows", .count = &a.windows},  {"device", .text = &a.device},
                              {"bits", .count = &a.quant.bits},  {"scope", .text = &scope},
                              {"outliers", .flag = &a.outliers}, {"precise", .flag = &a.precise},
                              {"results", .text = &a.results}};
    a.first_argument = parse_options(argc, argv, options, OPTIONS(options));
    if (strcmp(scope, "tensor") == 0) a.quant.scope = QUANT_PER_TENSOR;
    else if (strcmp(scope, "row") == 0) a.quant.scope = QUANT_PER_ROW;
    else die("option --scope: 'tensor' or 'row', not '%s'\n%s", scope, USAGE);
    if (a.quant.bits == 1 || a.quant.bits > LOGIT_QUANT_UNQUANTIZED) die("option --bits: 2..%d (16: unquantized)\n%s", LOGIT_QUANT_UNQUANTIZED, USAGE);
    return a;
}

// The windows to evaluate and where that number came from: --windows, else those the run was
// evaluated on by a table (its registry), else its training's validation; at most those the
// shard holds
static int eval_windows(const EvalArgs* a, const char* path, const Config* run, int T, int available, const char** source) {
    int windows = a->windows;
    *source = "--windows";
    if (!windows) {
        char run_dir[4096];
        path_printf(run_dir, sizeof(run_dir), "%s", path);
        char* slash = strrchr(run_dir, '/');
        if (slash) *slash = 0;
        else snprintf(run_dir, sizeof(run_dir), ".");
        windows = runs_recorded_windows(a->results, run_dir, T);
        *source = "the table's, as its registry records them";
        if (!windows) {
            windows = run->eval_batches * run->batch_size;
            *source = "the run's validation: eval_batches x batch_size";
        }
    }
    if (windows < 1) die("option --windows: at least 1");
    if (windows > available) {
        fprintf(stderr, "warning: the validation shard holds %d windows of %d tokens; evaluating those, not %d\n", available, T + 1, windows);
        windows = available;
    }
    return windows;
}

static int cmd_eval(int argc, char** argv) {
    EvalArgs a = parse_eval_args(argc, argv);
    if (a.first_argument >= argc) die("eval needs a CHECKPOINT\n%s", USAGE);
    const char* path = argv[a.first_argument];
    Config run;
    Model model;
    CheckpointInfo info;
    Backend* be = device_open_option(a.device, "--device");
    checkpoint_load(path, be, &run, &model, NULL, &info);
    const char* data_dir = run.data;
    for (int i = a.first_argument + 1; i < argc; i++) {
        if (strncmp(argv[i], "data=", 5) != 0) die("eval: '%s': expected data=DIR\n%s", argv[i], USAGE);
        data_dir = argv[i] + 5;
    }
    DataDir data;
    data_open(&data, data_dir, DATA_TRAIN | DATA_VAL);
    if (data.tok.hash != info.tokenizer_hash) die("'%s' was trained with another tokenizer than the data in '%s'", path, data_dir);
    int T = model.cfg.seq_len;
    if (data.val.n_tokens < (size_t)T + 1) {
        die("'%s' has %zu validation tokens, fewer than one window of seq_len + 1 = %d: nothing to evaluate", data_dir,
            data.val.n_tokens, T + 1);
    }
    const char* source;
    int windows = eval_windows(&a, path, &run, T, (int)((data.val.n_tokens - 1) / T), &source);
    model_set_logit_quant(&model, a.quant);  // Figure 8's quantizer, on any checkpoint
    SliceLoss s = evaluate_on_data(&model, &data, windows, run.batch_size, NULL);
    printf("%s: %s attention, step %d of %d%s\n", path, config_attention_name(&model.cfg), info.step, run.optim.steps,
           info.finished ? "" : " (unfinished)");
    printf("validation: the first %d windows (%s) of %d tokens of '%s' (%ld tokens)", windows, source, T, data_dir, s.tokens);
    if (logit_quant_levels(a.quant.bits)) printf("; attention logits quantized to %d bits per %s", a.quant.bits, a.quant.scope == QUANT_PER_ROW ? "row" : "tensor");
    printf("\n");
    const char* f = a.precise ? "%.17g" : "%.4f";  // every digit on request
    slice_loss_print(stdout, &s, f, T);
    if (a.outliers) {
        OutlierStats st;
        outlier_stats_collect(&st, &model, &data.val, T, windows, T, run.batch_size);  // Table 5's, over the same windows
        outlier_stats_print(stdout, &st, f);
        outlier_stats_free(&st);
    }
    data_close(&data);
    model_free(&model);
    backend_close(be);
    return 0;
}

static int cmd_export(int argc, char** argv) {
    if (argc > 3) die("export: '%s': export takes CHECKPOINT and OUT.safetensors only\n%s", argv[3], USAGE);
    if (argc != 3) die("export needs CHECKPOINT and OUT.safetensors\n%s", USAGE);
    refuse_output_over_input("output", argv[2], (const char* const*)argv + 1, 1);
    refuse_replacing_non_file("output", argv[2]);
    Config run;
    Model model;
    CheckpointInfo info;
    Backend* be = device_open_host();  // weights only: no computation
    checkpoint_load(argv[1], be, &run, &model, NULL, &info);
    char* config = config_to_text(&run);
    char step[32], vocab[32], eps[32], hash[32];
    snprintf(step, sizeof(step), "%d", info.step);
    snprintf(vocab, sizeof(vocab), "%d", model.V);
    snprintf(eps, sizeof(eps), "%g", RMSNORM_EPS);
    snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)info.tokenizer_hash);
    const char* metadata[][2] = {
        {"format", "difftx"}, {"layout", "docs/export.md"}, {"config", config}, {"step", step},
        {"vocab_size", vocab}, {"tokenizer_hash", hash}, {"rmsnorm_eps", eps},
        {"rope", "interleaved channel pairs (2j, 2j+1) of each query/key sub-head of width head_dim, rotated by position x rope_theta^(-2j/head_dim)"},
    };
    safetensors_write(argv[2], &model, metadata, (int)(sizeof(metadata) / sizeof(metadata[0])));
    printf("wrote %s: %d tensors, %zu parameters, from step %d of %s\n", argv[2], model.n_tensors, model.n_params, info.step, argv[1]);
    free(config);
    model_free(&model);
    backend_close(be);
    return 0;
}

static int cmd_runs(int argc, char** argv) {
    RunFilter f = {"results", NULL, NULL, NULL};
    const Option options[] = {{"results", .text = &f.results}, {"experiment", .text = &f.experiment},
                              {"preset", .text = &f.preset},   {"status", .text = &f.status}};
    int first = parse_options(argc, argv, options, OPTIONS(options));
    if (first < argc) die("runs takes options only\n%s", USAGE);
    runs_list(&f);
    return 0;
}

// `compare` and `lambda`: run ids, --results and --out (default plots/<figure>_<id>_<id>....png)
static int run_ids_command(int argc, char** argv, const char* figure,
                           void (*show)(const char* results, const int64_t* ids, int n, const char* png)) {
    const char *results = "results", *out = NULL;
    const Option options[] = {{"results", .text = &results}, {"out", .text = &out}};
    int first = parse_options(argc, argv, options, OPTIONS(options));
    int n = argc - first;
    if (n < 1 || n > 16) die("%s takes 1 to 16 run ids (`difftx runs` lists them)\n%s", figure, USAGE);
    int64_t ids[16];
    char png[4096];
    snprintf(png, sizeof(png), "plots/%s", figure);
    for (int i = 0; i < n; i++) {
        ids[i] = parse_int_arg("run id", argv[first + i]);
        size_t len = strlen(png);
        snprintf(png + len, sizeof(png) - len, "_%lld", (long long)ids[i]);
    }
    strncat(png, ".png", sizeof(png) - strlen(png) - 1);
    if (out) path_printf(png, sizeof(png), "%s", out);
    else mkdir_p("plots");
    show(results, ids, n, png);
    return 0;
}

static int cmd_compare(int argc, char** argv) { return run_ids_command(argc, argv, "compare", runs_compare); }
static int cmd_lambda(int argc, char** argv) { return run_ids_command(argc, argv, "lambda", runs_lambda); }

// A signed number as a table prints it ("+0.0401", "-0.03", "1e-3"), or dies naming what it is
static double parse_signed_arg(const char* what, const char* value) {
    const char* text = value[0] == '+' ? value + 1 : value;
    char* end;
    double v = strtod(text, &end);
    if (!plain_number(text, 1) || end == text || *end || !isfinite(v)) die("%s: '%s' is not a number", what, value);
    return v;
}

// `gap`: the tables' verdict policy on paired differences read elsewhere (a table of another
// run, a paper's per-seed values), one per seed. Parsed by hand, not by getopt: a difference
// such as -0.03 is an argument, not an option.
static int cmd_gap(int argc, char** argv) {
    static double d[VERDICT_MAX_SEEDS], zeros[VERDICT_MAX_SEEDS];
    double paper = NAN, margin = 0;
    int digits = 4, n = 0;
    for (int i = 1; i < argc; i++) {
        int is_paper = strcmp(argv[i], "--paper") == 0, is_margin = strcmp(argv[i], "--margin") == 0;
        if (is_paper || is_margin || strcmp(argv[i], "--digits") == 0) {
            if (i + 1 == argc) die("option %s needs a value\n%s", argv[i], USAGE);
            if (is_paper) paper = parse_signed_arg("option --paper", argv[++i]);
            else if (is_margin) margin = parse_signed_arg("option --margin", argv[++i]);
            else digits = parse_int_arg("--digits", argv[++i]);
            if (is_margin && !(margin > 0)) die("option --margin: '%s' is not a positive number", argv[i]);
            if (digits > 12) die("option --digits: at most 12, got %d", digits);
        } else if (strncmp(argv[i], "--", 2) == 0) {
            die("unknown option '%s' (gap takes --paper, --margin and --digits)\n%s", argv[i], USAGE);
        } else {
            if (n == VERDICT_MAX_SEEDS) die("gap takes at most %d differences", VERDICT_MAX_SEEDS);
            d[n++] = parse_signed_arg("a per-seed difference", argv[i]);
        }
    }
    if (n < 1) die("gap takes each seed's paired difference, at least one\n%s", USAGE);
    Paired p = {n, 1, d, NULL, zeros, NULL};
    GapInterval g = paired_gap(&p);
    char cells[2048];
    printf("| %s |\n|%s|\n|%s\n\n%s\n", GAP_HEADER, GAP_HEADER_RULE, gap_cells(cells, sizeof(cells), &g, paper, margin, digits),
           n > 1 ? interval_note(n, "units") : "One difference: no interval and no verdict.");
    return 0;
}

static int cmd_keys(int argc, char** argv) {
    (void)argv;
    if (argc > 1) die("keys takes no arguments\n%s", USAGE);
    config_print_keys(stdout);
    return 0;
}

static const Command COMMANDS[] = {
    {"prepare", cmd_prepare, "[--vocab N] [--sample-mb MB] [--shard-tokens N] OUT_DIR INPUT...",
     "tokenizer + token shards from text files, JSON-lines files (.jsonl) and folders of them"},
    {"needle-data", cmd_needle_data, "[--seq-len T] [--max-needles N] [--seed S] OUT_DIR DATA_DIR",
     "DATA_DIR's training text mixed with needle training episodes"},
    {"train", cmd_train, "RECIPE [key=value ...] [--until STEP] [--results DIR]",
     "train (resumes from OUT/checkpoint.h5 if present), recorded in DIR/registry.sqlite (default results)"},
    {"sample", cmd_sample, "CHECKPOINT [--prompt TEXT (\"\")] [--tokens N (200)] [--temperature X (0.8)] [--seed S (1)] [--device cpu|cuda (cpu)]", "generate text"},
    {"bench", cmd_bench, "RECIPE [key=value ...] [--vs RECIPE2] [--vocab N] [--steps N] [--forward] [--results DIR] [--profile CSV]",
     "speed and peak memory on random tokens; --vs: two recipes' steps in turn, compared; --profile: one more step's time by "
     "operation and layer, into CSV"},
    {"table6", cmd_table6, "RECIPE [key=value ...] [--preset P] [--seeds N] [--results DIR] [--plots DIR]",
     "the paper's Table 6 ablations (make table6)"},
    {"needle", cmd_needle, "RECIPE [key=value ...] --task table2|fig5|table3|fig8 [--preset P] [--seeds N] [--rows ROW,ROW] [--results DIR] [--plots DIR]",
     "multi-needle retrieval, attention allocation and attention-logit quantization"},
    {"table5", cmd_table5, "TABLE6_RECIPE [key=value ...] --needle RECIPE [--preset P] [--needle-preset Q] [--needle-rows ROW,ROW] [--seeds N] [--results DIR] [--plots DIR]",
     "activation outliers of trained standard and DIFF models"},
    {"eval", cmd_eval, "CHECKPOINT [data=DIR] [--windows N (the run's)] [--results DIR (results)] [--bits B [--scope tensor|row]] [--outliers] [--precise] [--device cpu|cuda (cpu)]",
     "validation loss and its AR-Hit / Others slices (Table 6's columns) of any checkpoint"},
    {"export", cmd_export, "CHECKPOINT OUT.safetensors", "the weights alone, for PyTorch (layout in docs/export.md)"},
    {"runs", cmd_runs, "[--results DIR] [--experiment E] [--preset P] [--status S]",
     "every recorded run: id, experiment, preset, row, seed, status, steps, final losses, tokens/s, start"},
    {"compare", cmd_compare, "ID... [--results DIR] [--out PNG]",
     "runs' differing config keys and final metrics side by side; their loss curves in one figure"},
    {"lambda", cmd_lambda, "ID... [--results DIR] [--out PNG]",
     "each run's lambda per layer at every evaluation of its training, printed and drawn (default plots/lambda_<ids>.png)"},
    {"gap", cmd_gap, "D1 D2 ... [--paper G] [--margin M] [--digits K (4)]",
     "the tables' verdict on per-seed paired differences: t-interval, p, minimum detectable gap, equivalence within ±M"},
    {"keys", cmd_keys, "", "every recipe key with its default and meaning, as a Markdown table"},
    {"help", NULL, "[SUBCOMMAND]", "this list, or one subcommand's usage (also: difftx SUBCOMMAND --help)"},
    {"maps", cmd_maps, "CHECKPOINT (--text FILE | --prompt TEXT) [--layers L,..] [--heads H,..] [--device cpu|cuda (cpu)] -o OUT.h5",
     "attention maps of any checkpoint on a text, every row (at most 2,048 tokens), to HDF5"},
    {"view", cmd_view, "FILE [--sample S (0)] -o OUT.html",
     "a maps file as one HTML page that opens from disk: every layer and head, A1, A2 and A1 - λ·A2, hover and query tokens"},
    {"attn", cmd_attn, "FILE --sample S --layer L --head H [--out PNG]",
     "heatmap of saved attention maps, without the model"},
};
#define N_COMMANDS (sizeof(COMMANDS) / sizeof(COMMANDS[0]))

// A subcommand's usage; where it takes a recipe, the keys it may set, and for a table runner
// given its recipe, the recipe's presets
static void print_command(FILE* f, const Command* c, int argc, char** argv) {
    fprintf(f, "usage: difftx %s%s%s\n  %s\n", c->name, c->args[0] ? " " : "", c->args, c->what);
    int runner = strcmp(c->name, "table6") == 0 || strcmp(c->name, "needle") == 0 || strcmp(c->name, "table5") == 0;
    if (runner || strcmp(c->name, "train") == 0 || strcmp(c->name, "bench") == 0) {
        fprintf(f, "  key=value: any recipe key (difftx keys lists them with their defaults)\n");
    }
    for (int i = 0; runner && i < argc; i++) {
        size_t n = strlen(argv[i]);
        if (n > 4 && strcmp(argv[i] + n - 4, ".ini") == 0 && access(argv[i], R_OK) == 0) {
            char names[1024];
            recipe_preset_names(argv[i], names, sizeof(names));
            fprintf(f, "  presets of %s: %s\n", argv[i], names);
        }
    }
}

static const Command* find_command(const char* name) {
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(name, COMMANDS[i].name) == 0) return &COMMANDS[i];
    }
    return NULL;
}

static int run_command(int argc, char** argv) {
    size_t n = (size_t)snprintf(USAGE, sizeof(USAGE), "usage:\n");
    for (size_t i = 0; i < N_COMMANDS && n < sizeof(USAGE); i++) {
        n += (size_t)snprintf(USAGE + n, sizeof(USAGE) - n, "  difftx %s%s%s\n      %s\n", COMMANDS[i].name,
                              COMMANDS[i].args[0] ? " " : "", COMMANDS[i].args, COMMANDS[i].what);
    }
    if (argc < 2) {
        fputs(USAGE, stderr);
        return 1;
    }
    if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        int about_help = argc > 2 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0);
        const Command* c = about_help ? find_command("help") : argc > 2 ? find_command(argv[2]) : NULL;
        if (argc > 2 && !c) {
            const char* names[N_COMMANDS];
            for (size_t i = 0; i < N_COMMANDS; i++) names[i] = COMMANDS[i].name;
            const char* near = closest_name(argv[2], names, (int)N_COMMANDS);
            if (near) die("help: unknown subcommand '%s'; did you mean '%s'?", argv[2], near);
            die("help: unknown subcommand '%s'\n%s", argv[2], USAGE);
        }
        if (c) print_command(stdout, c, argc - 2, argv + 2);
        else fputs(USAGE, stdout);
        return 0;
    }
    const Command* c = find_command(argv[1]);
    if (!c) {
        const char* names[N_COMMANDS];
        for (size_t i = 0; i < N_COMMANDS; i++) names[i] = COMMANDS[i].name;
        const char* near = closest_name(argv[1], names, (int)N_COMMANDS);
        if (near) die("unknown subcommand '%s'; did you mean '%s'?", argv[1], near);
        die("unknown subcommand '%s'\n%s", argv[1], USAGE);
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_command(stdout, c, argc - 2, argv + 2);
            return 0;
        }
    }
    // a mistake in this subcommand's arguments prints its usage, not every subcommand's
    snprintf(USAGE, sizeof(USAGE), "usage: difftx %s%s%s\n  (difftx %s --help: more; difftx help: every subcommand)", c->name,
             c->args[0] ? " " : "", c->args, c->name);
    opterr = 0;  // bad_option says what is wrong, with the nearest option
    return c->run(argc - 1, argv + 1);
}

// Under mpirun every rank starts here: rank 0 runs the command, the others join its training runs
int main(int argc, char** argv) {
    // Every parallel region gets the thread count that runs record: a dynamic team (OMP_DYNAMIC)
    // may be smaller, and OpenBLAS's OpenMP build then waits forever inside its first threaded
    // matmul for the threads the team withheld
    omp_set_dynamic(0);
    // A file-size limit (ulimit -f) would kill the program mid-write with SIGXFSZ, leaving its
    // temporary file and a run marked RUNNING; ignored, the write fails with EFBIG and takes the
    // checked-error path every failed write takes
    signal(SIGXFSZ, SIG_IGN);
    backend_select_blas_kernel(argv);  // may start this program again, before anything else
    dist_init(&argc, &argv);
    if (dist_rank() != 0) {
        train_follow();
        return dist_finish(0);
    }
    return dist_finish(run_command(argc, argv));
}
