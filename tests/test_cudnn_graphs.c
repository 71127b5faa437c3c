// Without a GPU: every attention graph the recipes need (model/cuda/cudnn_attention.cu, for each
// variant and head shape of the bench recipes, Table 6's small preset and its one-GPU preset
// gpu124m) against an H100 and an H200 (tests/gpus/*.json: cuDNN's device properties, which let its
// heuristics run on a machine without a GPU, with the toolkit's stub libcuda on the library path):
// every graph, forward and backward, is accepted by cuDNN's heuristics (at least one engine); the
// same graphs on a V100's description get none (bf16 fused attention needs sm_80 or newer), so
// the check can fail. Where libcudnn is absent every case is skipped, said, and counted as neither.
// Built in the CUDA build only (make CUDA=1; tests/test_cuda_build.sh runs it).
#include <stdio.h>
#include <string.h>

#include "../base/util.h"
#include "../model/cuda/cuda.h"
#include "check.h"

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

int main(void) {
    size_t version = cudnn_version();
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
