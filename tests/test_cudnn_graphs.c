// Without a GPU: every attention graph the recipes need (model/cuda/cudnn_attention.cu, for each
// variant and head shape of the bench recipes, Table 6's small preset and its one-GPU preset
// gpu124m) against an H100 and an H200 (tests/gpus/*.json: cuDNN's device properties, which let its
// heuristics run on a machine without a GPU, with the toolkit's stub libcuda on the library path):
// every graph, forward and backward, is accepted by cuDNN's heuristics (at least one engine); the
// same graphs on a V100's description get none (bf16 fused attention needs sm_80 or newer), so
// the check can fail. Where libcudnn is absent every case is skipped, said, and counted as neither.
//
// `--golden DIR`: the golden lowering. The forward and backward graphs of the 124M standard shape
// as cuDNN itself reads them (its CUDNN_LOGLEVEL_DBG=3 log: each tensor's type, dimensions,
// strides, virtual and by-value flags and reordering, each node's inputs, output and compute
// type) against the graphs cuDNN read from NVIDIA's cudnn-frontend v1.18.0 lowering at the same
// shape (DIR/cudnn_sdpa_{forward,backward}.json, tests/golden/frontend_sdpa.cpp), node by node
// and tensor by tensor, up to the tensors' uids and the nodes' order: each node is identified by
// its operation, mode, compute type, axis, its output's attributes and, through its inputs, the
// whole chain of nodes that produced them (a Merkle hash), so moving the mask after the
// statistics, a type or a stride changes the nodes it reaches. Every difference is listed.
// Built in the CUDA build only (make CUDA=1; tests/test_cuda_build.sh runs it).
#define _POSIX_C_SOURCE 200809L  // setenv
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/util.h"
#include "../model/cuda/cuda.h"
#include "check.h"
#include <unistd.h>

static char* read_json(const char* path) {
    size_t n;
    char* text = read_text_file(path, &n);
    if (!text) die("cannot read %s", path);
    return text;
}

typedef struct {
    const char* where;
    AttentionKind kind;
    int H, D, T, B;
} Case;

static const Case CASES[] = {
    {"bench shape", ATTN_STANDARD, 8, 32, 256, 16},        {"bench shape", ATTN_DIFF, 4, 32, 256, 16},
    {"bench shape", ATTN_DIFF2, 8, 32, 256, 16},           {"Table 6 small", ATTN_STANDARD, 4, 64, 256, 16},
    {"Table 6 small", ATTN_DIFF_SHARED, 4, 32, 256, 16},   {"gpu124m / 124M shape", ATTN_STANDARD, 12, 64, 1024, 8},
    {"gpu124m", ATTN_STANDARD, 6, 128, 1024, 8},            {"gpu124m / 124M shape", ATTN_DIFF, 6, 64, 1024, 8},
    {"gpu124m / 124M shape", ATTN_DIFF2, 12, 64, 1024, 8}, {"gpu124m", ATTN_DIFF_SHARED, 6, 64, 1024, 8},
};

// ---- --golden ----
static uint64_t fnv(uint64_t h, const char* text) {
    for (const unsigned char* c = (const unsigned char*)text; *c; c++) h = (h ^ *c) * 1099511628211ull;
    return (h ^ 0xff) * 1099511628211ull;  // a separator, so that fields cannot run together
}

// One logged operation graph: its tensors by name, and the node producing each tensor
typedef struct {
    json_t *tensors, *producer, *memo;  // objects keyed by tensor name
    json_t* nodes;
} LoggedGraph;

static const char* const IN_PORTS[] = {"X", "B", "T", "matA", "matB"};
static const char* const OUT_PORTS[] = {"Y", "matC"};

static const char* out_name(json_t* node) {
    for (int i = 0; i < 2; i++) {
        json_t* v = json_object_get(node, OUT_PORTS[i]);
        if (json_is_string(v)) return json_string_value(v);
    }
    return NULL;
}

static int logged_graph(LoggedGraph* g, json_t* og) {
    json_t* tensors = json_object_get(og, "tensors");
    g->nodes = json_object_get(og, "nodes");
    if (!json_is_array(tensors) || !json_is_array(g->nodes)) return 0;
    g->tensors = json_object(), g->producer = json_object(), g->memo = json_object();
    size_t i;
    json_t* t;
    json_array_foreach(tensors, i, t) json_object_set(g->tensors, json_string_value(json_object_get(t, "name")), t);
    json_array_foreach(g->nodes, i, t) {
        const char* out = out_name(t);
        if (out) json_object_set(g->producer, out, t);
    }
    return 1;
}

// what identifies a tensor by itself: its type, shape, strides and flags
static char* tensor_attributes(json_t* t) {
    json_t* a = json_pack("{s:O?,s:O?,s:O?,s:O?,s:O?,s:O?}", "dataType", json_object_get(t, "dataType"), "dim", json_object_get(t, "dim"),
                          "stride", json_object_get(t, "stride"), "isVirtual", json_object_get(t, "isVirtual"), "isByValue",
                          json_object_get(t, "isByValue"), "reordering", json_object_get(t, "reordering"));
    char* text = json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(a);
    return text;
}

static uint64_t node_hash(LoggedGraph* g, json_t* node);

// a tensor: its attributes and, when a node produced it, that node
static uint64_t tensor_hash(LoggedGraph* g, const char* name) {
    json_t* memo = json_object_get(g->memo, name);
    if (memo) return (uint64_t)json_integer_value(memo);
    json_t* t = json_object_get(g->tensors, name);
    char* attributes = t ? tensor_attributes(t) : strdup("missing");
    uint64_t h = fnv(1469598103934665603ull, attributes);
    free(attributes);
    json_t* producer = json_object_get(g->producer, name);
    if (producer) h = fnv(h ^ node_hash(g, producer), "produced");
    json_object_set_new(g->memo, name, json_integer((json_int_t)h));
    return h;
}

static const char* field(json_t* node, const char* key) {
    json_t* v = json_object_get(node, key);
    return json_is_string(v) ? json_string_value(v) : "";
}

static uint64_t node_hash(LoggedGraph* g, json_t* node) {
    char axis[32] = "";
    if (json_is_integer(json_object_get(node, "axis"))) snprintf(axis, sizeof(axis), "%lld", (long long)json_integer_value(json_object_get(node, "axis")));
    uint64_t h = fnv(1469598103934665603ull, field(node, "operation"));
    h = fnv(fnv(fnv(fnv(h, field(node, "pointwiseMode")), field(node, "reductionOp")), field(node, "mathPrec")), axis);
    for (int i = 0; i < 5; i++) {
        const char* in = field(node, IN_PORTS[i]);
        char port[64];
        snprintf(port, sizeof(port), "%s:%016llx", IN_PORTS[i], *in ? (unsigned long long)tensor_hash(g, in) : 0ull);
        h = fnv(h, port);
    }
    const char* out = out_name(node);
    json_t* t = out ? json_object_get(g->tensors, out) : NULL;
    char* attributes = t ? tensor_attributes(t) : strdup("none");
    h = fnv(h, attributes);
    free(attributes);
    return h;
}

// a node in words: its operation, mode, compute type, and each port's tensor (from what node)
static void describe(LoggedGraph* g, json_t* node, const char* who) {
    printf("  %s: %s %s%s %s", who, field(node, "operation") + strlen("CUDNN_BACKEND_OPERATION_"), field(node, "pointwiseMode"),
           field(node, "reductionOp"), field(node, "mathPrec"));
    const char* ports[] = {"X", "B", "T", "matA", "matB", "Y", "matC"};
    for (int i = 0; i < 7; i++) {
        const char* name = field(node, ports[i]);
        if (!*name) continue;
        char* attributes = json_object_get(g->tensors, name) ? tensor_attributes(json_object_get(g->tensors, name)) : strdup("?");
        json_t* from = i < 5 ? json_object_get(g->producer, name) : NULL;
        printf("; %s %s%s%s", ports[i], attributes, from ? " from " : "", from ? field(from, "pointwiseMode")[0] ? field(from, "pointwiseMode") : field(from, "operation") : "");
        free(attributes);
    }
    printf("\n");
}

static int compare_u64(const void* a, const void* b) {
    uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
    return x < y ? -1 : x > y;
}

// ours against golden: the nodes of each whose identity the other lacks; 1 when there are none
static int same_graph(json_t* ours_og, json_t* golden_og, const char* what) {
    LoggedGraph a, b;
    if (!logged_graph(&a, ours_og) || !logged_graph(&b, golden_og)) {
        printf("%s: a graph without tensors or nodes\n", what);
        return 0;
    }
    size_t na = json_array_size(a.nodes), nb = json_array_size(b.nodes);
    uint64_t *ha = mallocCheck((na + 1) * sizeof(uint64_t)), *hb = mallocCheck((nb + 1) * sizeof(uint64_t));
    for (size_t i = 0; i < na; i++) ha[i] = node_hash(&a, json_array_get(a.nodes, i));
    for (size_t i = 0; i < nb; i++) hb[i] = node_hash(&b, json_array_get(b.nodes, i));
    int differ = 0;
    for (int side = 0; side < 2; side++) {
        LoggedGraph* g = side ? &b : &a;
        uint64_t *mine = side ? hb : ha, *theirs = side ? ha : hb;
        size_t n_mine = side ? nb : na, n_theirs = side ? na : nb;
        uint64_t* sorted = mallocCheck((n_theirs + 1) * sizeof(uint64_t));
        memcpy(sorted, theirs, n_theirs * sizeof(uint64_t));
        qsort(sorted, n_theirs, sizeof(uint64_t), compare_u64);
        for (size_t i = 0; i < n_mine; i++) {
            if (bsearch(&mine[i], sorted, n_theirs, sizeof(uint64_t), compare_u64)) continue;
            if (!differ++) printf("%s: the nodes that differ from the frontend's lowering (each with what produced its inputs):\n", what);
            describe(g, json_array_get(g->nodes, i), side ? "only the frontend's" : "only difftx's");
        }
        free(sorted);
    }
    const char *mode_a = field(ours_og, "finalizeMode"), *mode_b = field(golden_og, "finalizeMode");
    if (strcmp(mode_a, mode_b) != 0) {
        printf("%s: cuDNN reads difftx's graph as %s, the frontend's as %s\n", what, mode_a, mode_b);
        differ++;
    }
    free(ha), free(hb);
    json_decref(a.tensors), json_decref(a.producer), json_decref(a.memo);
    json_decref(b.tensors), json_decref(b.producer), json_decref(b.memo);
    return !differ && na == nb;
}

// The operation graph cuDNN logged after byte `from` of the log, or NULL: the first it logged
// with the mode its heuristics gave it (SDPA_FWD, SDPA_BWD: what they recognised), else the first
// (logged when the graph is finalized, before any mode is given)
static json_t* logged_after(const char* log, long from) {
    FILE* f = fopenCheck(log, "r");
    if (fseek(f, from, SEEK_SET) != 0) die("cannot seek in %s", log);
    char* line = NULL;
    size_t cap = 0;
    json_t *found = NULL, *first = NULL;
    const char* key = "apiLog: type=json; val=";
    while (!found && getline(&line, &cap, f) > 0) {
        char* at = strstr(line, key);
        if (!at) continue;
        at += strlen(key);
        char* end = strrchr(at, ';');
        if (!end) continue;
        json_t* j = json_loadb(at, (size_t)(end - at), 0, NULL);
        json_t* og = j ? json_object_get(j, "operationGraph") : NULL;
        if (og && json_array_size(json_object_get(og, "nodes")) > 0) {
            if (strcmp(field(og, "finalizeMode"), "INVALID_OPERATION_MODE") != 0) found = json_incref(og);
            else if (!first) first = json_incref(og);
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
    if (found) {
        json_decref(first);
        return found;
    }
    return first;
}

static long file_size(const char* path) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static int golden(const char* dir, const char* log) {
    char* json = read_json("tests/gpus/h200.json");
    AttnShape s = attention_shape(&ATTN_VARIANTS[ATTN_STANDARD], 12, 64, 0);
    s.B = 8, s.T = 1024;
    for (int backward = 0; backward < 2; backward++) {
        const char* name = backward ? "backward" : "forward";
        long from = file_size(log);
        const char* why = NULL;
        int engines = cudnn_attention_engines(&s, backward, json, &why);
        json_t* ours = logged_after(log, from);
        char path[4096];
        path_printf(path, sizeof(path), "%s/cudnn_sdpa_%s.json", dir, name);
        json_error_t error;
        json_t* gold = json_load_file(path, 0, &error);
        if (!gold) die("%s: line %d: %s", path, error.line, error.text);
        char what[96];
        snprintf(what, sizeof(what), "the %s graph, 124M standard shape", name);
        int same = ours && same_graph(ours, json_object_get(gold, "operationGraph"), what);
        CHECK(ours && same, "%s as cuDNN reads it is the frontend's lowering, node by node (%s; %d engine configurations%s%s)", what,
              ours ? "compared" : "cuDNN logged no graph", engines, why ? ": " : "", why ? why : "");
        json_decref(ours);
        json_decref(gold);
    }
    free(json);
    return check_summary();
}

// usage: test_cudnn_graphs [--golden DIR]
int main(int argc, char** argv) {
    const char* golden_dir = argc == 3 && strcmp(argv[1], "--golden") == 0 ? argv[2] : NULL;
    if (argc > 1 && !golden_dir) die("usage: test_cudnn_graphs [--golden DIR]");
    char log[64] = "";
    if (golden_dir) {  // cuDNN reads its logging switches when it starts
        snprintf(log, sizeof(log), "/tmp/test_cudnn_graphs.%d.log", (int)getpid());
        setenv("CUDNN_LOGLEVEL_DBG", "3", 1);
        setenv("CUDNN_LOGDEST_DBG", log, 1);
    }
    size_t version = cudnn_version();
    if (version && golden_dir) {
        printf("cuDNN %zu\n", version);
        int rc = golden(golden_dir, log);
        remove(log);
        return rc;
    }
    if (!version) {
        const char* why = "";
        AttnShape s = attention_shape(&ATTN_VARIANTS[ATTN_STANDARD], 1, 8, 0);
        cudnn_attention_engines(&s, 0, "{}", &why);
        printf("skipped: libcudnn cannot be opened (%s); no graph was checked\n", why);
        return check_summary();
    }
    printf("cuDNN %zu\n", version);
    static const char* const GPUS[] = {"tests/gpus/h100.json", "tests/gpus/h200.json", "tests/gpus/v100.json"};
    for (int g = 0; g < 3; g++) {
        char* json = read_json(GPUS[g]);
        int old = strstr(GPUS[g], "v100") != NULL;
        for (size_t c = 0; c < sizeof(CASES) / sizeof(CASES[0]); c++) {
            const Case* k = &CASES[c];
            AttnShape s = attention_shape(&ATTN_VARIANTS[k->kind], k->H, k->D, 0);
            s.B = k->B;
            s.T = k->T;
            for (int backward = 0; backward < 2; backward++) {
                const char* why = NULL;
                int engines = cudnn_attention_engines(&s, backward, json, &why);
                int ok = old ? engines == 0 : engines > 0;
                CHECK(ok, "%s, %s %s %d x %d, T %d, B %d, %s: %d engine configurations%s%s", GPUS[g], k->where,
                      ATTN_VARIANTS[k->kind].name, k->H, k->D, k->T, k->B, backward ? "backward" : "forward", engines, why ? ": " : "",
                      why ? why : "");
                printf("| %s | %s %s %d x %d, T %d | %s | %d |\n", GPUS[g], k->where, ATTN_VARIANTS[k->kind].name, k->H, k->D, k->T,
                       backward ? "backward" : "forward", engines);
            }
        }
        free(json);
    }
    return check_summary();
}
