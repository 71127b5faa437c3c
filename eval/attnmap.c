#define _GNU_SOURCE
#include "attnmap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/h5.h"
#include "../base/util.h"

void maps_file_create(MapsFile* f, const char* path, const Model* m, const char* checkpoint) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    snprintf(f->path, sizeof(f->path), "%s", path);
    tmp_path(f->tmp, sizeof(f->tmp), path);
    snprintf(f->label, sizeof(f->label), "attention maps '%s'", f->tmp);
    f->file = h5_create_checksummed(f->tmp, f->label);
    f->sample = -1;
    f->n_samples = 0;
    char machine[600];
    machine_description(machine, sizeof(machine));
    h5_write_string_attr(f->file, "format", ATTNMAP_FORMAT, f->label);
    h5_write_string_attr(f->file, "attention", config_attention_name(&m->cfg), f->label);
    h5_write_string_attr(f->file, "checkpoint", checkpoint, f->label);
    h5_write_string_attr(f->file, "git_commit", GIT_COMMIT, f->label);
    h5_write_string_attr(f->file, "machine", machine, f->label);
    h5_write_attr(f->file, "n_layer", H5T_NATIVE_INT, &m->L, f->label);
    h5_write_attr(f->file, "n_head", H5T_NATIVE_INT, &m->H, f->label);
    h5_write_attr(f->file, "maps_per_head", H5T_NATIVE_INT, &m->M, f->label);
}

static void close_sample(MapsFile* f) {
    if (f->sample >= 0) h5_check(H5Gclose(f->sample), "closing a sample", f->label);
    f->sample = -1;
}

// A new sample group holding tokens (T) with their texts, needles (n_needles start/length
// pairs) and the saved rows first..T-1
static void begin_sample(MapsFile* f, const int* tokens, int T, const Tokenizer* tok, const int* needles, int n_needles, int first) {
    close_sample(f);
    char name[32];
    snprintf(name, sizeof(name), "sample_%03d", f->n_samples++);
    f->sample = h5_id(H5Gcreate2(f->file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), name, f->label);
    char** text = mallocCheck(T * sizeof(char*));
    for (int t = 0; t < T; t++) {
        text[t] = callocCheck(tok->length[tokens[t]] + 1, 1);
        tokenizer_decode(tok, &tokens[t], 1, text[t]);
    }
    int rows = T - first;
    int* row_pos = mallocCheck(rows * sizeof(int));
    for (int r = 0; r < rows; r++) row_pos[r] = first + r;
    int dims[2] = {T, 0}, ndims[2] = {n_needles, 2};
    h5_write_dataset(f->sample, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT, 1, dims, tokens, f->label);
    hid_t str = h5_id(H5Tcopy(H5T_C_S1), "text", f->label);
    h5_check(H5Tset_size(str, H5T_VARIABLE), "text", f->label);
    h5_write_dataset(f->sample, "text", str, str, 1, dims, text, f->label);
    h5_check(H5Tclose(str), "text", f->label);
    h5_write_dataset(f->sample, "needles", H5T_STD_I32LE, H5T_NATIVE_INT, 2, ndims, needles, f->label);
    dims[0] = rows;
    h5_write_dataset(f->sample, "rows", H5T_STD_I32LE, H5T_NATIVE_INT, 1, dims, row_pos, f->label);
    for (int t = 0; t < T; t++) free(text[t]);
    free(text);
    free(row_pos);
}

int maps_file_sample(MapsFile* f, const Episode* e, const Tokenizer* tok, int length, uint64_t seed) {
    int T = e->n_context + e->question_len[0];
    int full = T <= ATTNMAP_FULL_ROWS, first = full ? 0 : e->n_context;
    int* tokens = mallocCheck(T * sizeof(int));
    memcpy(tokens, e->tokens, e->n_context * sizeof(int));
    memcpy(tokens + e->n_context, e->question[0], e->question_len[0] * sizeof(int));
    int needles[NEEDLE_MAX * 2];
    for (int i = 0; i < e->n_needles; i++) {
        needles[2 * i] = e->start[i];
        needles[2 * i + 1] = e->len[i];
    }
    begin_sample(f, tokens, T, tok, needles, e->n_needles, first);
    h5_write_attr(f->sample, "depth", H5T_NATIVE_DOUBLE, &e->depth, f->label);
    h5_write_attr(f->sample, "n_context", H5T_NATIVE_INT, &e->n_context, f->label);
    h5_write_attr(f->sample, "n_needles", H5T_NATIVE_INT, &e->n_needles, f->label);
    h5_write_attr(f->sample, "length", H5T_NATIVE_INT, &length, f->label);
    h5_write_attr(f->sample, "seed", H5T_NATIVE_UINT64, &seed, f->label);
    free(tokens);
    return full;
}

void maps_file_text(MapsFile* f, const int* tokens, int T, const Tokenizer* tok) {
    begin_sample(f, tokens, T, tok, NULL, 0, 0);
    int zero = 0;
    h5_write_attr(f->sample, "n_context", H5T_NATIVE_INT, &T, f->label);
    h5_write_attr(f->sample, "n_needles", H5T_NATIVE_INT, &zero, f->label);
    h5_write_attr(f->sample, "length", H5T_NATIVE_INT, &T, f->label);
}

void maps_of_text(Model* m, const int* tokens, int T, const int* layers, int n_layers, const int* heads, int n_heads,
                  MapsCallback maps_cb, void* ctx) {
    if (model_cache_size(m) < T) model_cache_init(m, T);
    model_forward_cached(m, tokens, T, 0);
    HeadMaps maps = {T, T, m->M, 0, mallocCheck((size_t)m->M * T * T * sizeof(float)), mallocCheck(T * sizeof(float)), m->shape.integral};
    for (int i = 0; i < n_layers; i++) {
        for (int j = 0; j < n_heads; j++) {
            model_attention_maps(m, layers[i], heads[j], 0, T, maps.A, maps.lambda);
            maps_cb(ctx, layers[i], heads[j], &maps);
        }
    }
    free(maps.A);
    free(maps.lambda);
}

void maps_file_head(void* ctx, int layer, int head, const HeadMaps* maps) {
    MapsFile* f = ctx;
    char name[64];
    int dims[2] = {maps->rows, maps->T};
    size_t n = (size_t)maps->rows * maps->T;
    float* combined = mallocCheck(n * sizeof(float));
    for (int r = 0; r < maps->rows; r++) head_maps_combined_row(maps, r, 0, combined + (size_t)r * maps->T);
    snprintf(name, sizeof(name), "layer_%02d/head_%02d/map", layer, head);
    h5_write_dataset(f->sample, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, dims, combined, f->label);
    if (maps->M == 2) {
        snprintf(name, sizeof(name), "layer_%02d/head_%02d/A1", layer, head);
        h5_write_dataset(f->sample, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, dims, maps->A, f->label);
        snprintf(name, sizeof(name), "layer_%02d/head_%02d/A2", layer, head);
        h5_write_dataset(f->sample, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, dims, maps->A + n, f->label);
        snprintf(name, sizeof(name), "layer_%02d/head_%02d/lambda", layer, head);
        h5_write_dataset(f->sample, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, dims, maps->lambda, f->label);
    }
    free(combined);
}

void maps_file_close(MapsFile* f) {
    close_sample(f);
    h5_check(H5Fclose(f->file), "closing", f->label);
    renameCheck(f->tmp, f->path);
}

static hid_t open_file(const char* path, char* label, size_t label_n) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    snprintf(label, label_n, "attention maps '%s'", path);
    if (H5Fis_hdf5(path) <= 0) die("cannot read attention maps '%s': missing, unreadable or not an HDF5 file", path);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) die("cannot open attention maps '%s'", path);
    char* format = h5_read_string_attr(file, "format", label);
    if (strcmp(format, ATTNMAP_FORMAT) != 0) die("'%s' is not an attention-maps file (format '%s')", path, format);
    free(format);
    return file;
}

static int maps_per_head(hid_t file, const char* attention, const char* label) {
    int maps;
    if (H5Aexists(file, "maps_per_head") > 0) {
        h5_read_attr(file, "maps_per_head", H5T_NATIVE_INT, &maps, label);
        if (maps != 1 && maps != 2) die("%s: attribute 'maps_per_head' is %d, not 1 or 2", label, maps);
        return maps;
    }
    // files written before the attribute: only standard attention had one map
    return strcmp(attention, "standard") == 0 ? 1 : 2;
}

void maps_sample_open(MapsSample* s, const char* path, int sample) {
    memset(s, 0, sizeof(*s));
    s->file = open_file(path, s->label, sizeof(s->label));
    const char* label = s->label;
    s->attention = h5_read_string_attr(s->file, "attention", label);
    if (H5Aexists(s->file, "checkpoint") > 0) s->checkpoint = h5_read_string_attr(s->file, "checkpoint", label);
    s->maps = maps_per_head(s->file, s->attention, label);
    const AttnVariant* variant = attention_variant_named(s->attention);  // NULL for a variant since renamed
    s->integral = variant && variant->extension == EXTENSION_INTEGRAL;
    h5_read_attr(s->file, "n_layer", H5T_NATIVE_INT, &s->n_layer, label);
    h5_read_attr(s->file, "n_head", H5T_NATIVE_INT, &s->n_head, label);
    if (s->n_layer < 1 || s->n_layer > ATTNMAP_MAX_INDEX || s->n_head < 1 || s->n_head > ATTNMAP_MAX_INDEX) {
        die("%s: n_layer %d and n_head %d must lie in 1..%d", label, s->n_layer, s->n_head, ATTNMAP_MAX_INDEX);
    }
    snprintf(s->name, sizeof(s->name), "sample_%03d", sample);
    if (H5Lexists(s->file, s->name, H5P_DEFAULT) <= 0) die("--sample %d: '%s' has no group '%s'", sample, path, s->name);
    s->group = h5_open_group(s->file, s->name, label);
    int dims[2];
    s->T = (int)h5_dataset_dims(s->group, "tokens", dims, label);
    s->R = (int)h5_dataset_dims(s->group, "rows", dims, label);
    s->N = (int)h5_dataset_dims(s->group, "needles", dims, label) / 2;
    if (s->T == 0 || s->R == 0) die("%s: %s holds no %s", label, s->name, s->T == 0 ? "tokens" : "rows");
    s->n_context = -1;
    if (H5Aexists(s->group, "n_context") > 0) {
        h5_read_attr(s->group, "n_context", H5T_NATIVE_INT, &s->n_context, label);
        if (s->n_context < 1 || s->n_context > s->T) die("%s: %s has n_context %d, outside 1..%d", label, s->name, s->n_context, s->T);
    }
    s->tokens = mallocCheck((size_t)s->T * sizeof(int));
    s->text = mallocCheck((size_t)s->T * sizeof(char*));
    s->rows = mallocCheck((size_t)s->R * sizeof(int));
    s->needles = mallocCheck((size_t)(2 * s->N + 1) * sizeof(int));
    h5_read_dataset(s->group, "tokens", H5T_NATIVE_INT, s->T, s->tokens, label);
    h5_read_dataset(s->group, "rows", H5T_NATIVE_INT, s->R, s->rows, label);
    if (s->N) h5_read_dataset(s->group, "needles", H5T_NATIVE_INT, 2 * s->N, s->needles, label);
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    h5_read_dataset(s->group, "text", str, s->T, s->text, label);  // an unwritten string reads as NULL
    H5Tclose(str);
    for (int r = 0; r < s->R; r++) {
        if (s->rows[r] < 0 || s->rows[r] >= s->T || (r && s->rows[r] <= s->rows[r - 1])) {
            die("%s: %s/rows is not increasing within 0..%d", label, s->name, s->T - 1);
        }
    }
    for (int i = 0; i < s->N; i++) {
        int from = s->needles[2 * i], n = s->needles[2 * i + 1];
        if (from < 0 || n < 1 || from + n > s->T) die("%s: %s/needles row %d spans %d..%d, outside 0..%d", label, s->name, i, from, from + n - 1, s->T - 1);
    }
}

int maps_sample_has_head(const MapsSample* s, int layer, int head) {
    char name[64];
    snprintf(name, sizeof(name), "layer_%02d", layer);
    if (H5Lexists(s->group, name, H5P_DEFAULT) <= 0) return 0;
    snprintf(name, sizeof(name), "layer_%02d/head_%02d", layer, head);
    return H5Lexists(s->group, name, H5P_DEFAULT) > 0;
}

void maps_sample_read(const MapsSample* s, int layer, int head, const char* map, float* out) {
    char name[128];
    snprintf(name, sizeof(name), "layer_%02d/head_%02d/%s", layer, head, map);
    if (strcmp(map, "lambda") == 0) {
        h5_read_dataset(s->group, name, H5T_NATIVE_FLOAT, s->R, out, s->label);
        for (int r = 0; r < s->R; r++) {
            if (!isfinite(out[r])) die("%s: %s/%s holds %g at row %d; λ is finite", s->label, s->name, name, out[r], r);
        }
        return;
    }
    h5_read_dataset(s->group, name, H5T_NATIVE_FLOAT, (size_t)s->R * s->T, out, s->label);
    if (s->maps == 2 && strcmp(map, "map") == 0) return;  // A1 - λ A2: any sign
    int less_integral = s->integral && strcmp(map, "A2") == 0;  // a softmax map less a mean of softmax maps
    float low = less_integral ? -1 : 0;
    for (int r = 0; r < s->R; r++) {
        for (int k = 0; k <= s->rows[r]; k++) {
            float v = out[(size_t)r * s->T + k];
            if (!(v >= low && v <= 1)) {
                die("%s: %s/%s holds %g; %s lie in [%g, 1]", s->label, s->name, name, v, less_integral ? "DINT's A2 less its integral term must" : "softmax maps", low);
            }
        }
    }
}

int maps_sample_noise(const MapsSample* s, const float* A, const float* lambda, Allocation* out) {
    *out = (Allocation){0};
    if (s->n_context < 0) return 0;  // which rows are the question's is not known
    HeadMaps maps = {s->R, s->T, s->maps, 0, (float*)A, (float*)lambda, s->integral};
    float* row = mallocCheck((size_t)s->T * sizeof(float));
    Allocation sum = {0};
    int n = 0, episode = s->N > 0;
    for (int r = 0; r < s->R; r++) {
        if (episode && s->rows[r] < s->n_context) continue;
        if (!head_maps_combined_row(&maps, r, 1, row)) continue;
        Allocation a = allocation_of_row(row, s->rows[r] + 1, s->n_context, episode ? s->needles[0] : 0, episode ? s->needles[1] : 0);
        allocation_add(&sum, &a);
        n++;
    }
    free(row);
    *out = n ? allocation_divide(sum, n) : sum;
    return n;
}

void maps_sample_close(MapsSample* s) {
    for (int t = 0; t < s->T; t++) free(s->text[t]);
    free(s->text);
    free(s->tokens);
    free(s->rows);
    free(s->needles);
    free(s->attention);
    free(s->checkpoint);
    H5Gclose(s->group);
    H5Fclose(s->file);
}

void maps_of_document(const char* out, Model* model, const Tokenizer* tok, const char* text, size_t len, const char* source,
                      const int* layers, int n_layers, const int* heads, int n_heads, const char* checkpoint) {
    const char* nul = memchr(text, 0, len);  // a zero byte: binary data, whose tokens would mean nothing
    if (nul) die("--text '%s' looks binary (a zero byte at offset %td); give a text file", source, nul - text);
    int* tokens = mallocCheck((len + 1) * sizeof(int));
    tokens[0] = tok->eot;  // documents start with <|endoftext|> in training
    int T = 1 + (len ? (int)tokenizer_encode(tok, text, len, tokens + 1) : 0);
    int maps_per_head = model->M == 2 ? 3 : 1;
    double mib = (double)n_layers * n_heads * maps_per_head * T * (double)T * sizeof(float) / (1 << 20);
    if (T > MAPS_MAX_TOKENS) {
        die("%s: %d tokens; maps take T x T floats per map and head (%.0f MiB before compression for these %d layers x %d "
            "heads), so a text is at most %d tokens: shorten it", source, T, mib, n_layers, n_heads, MAPS_MAX_TOKENS);
    }
    printf("%s: %d tokens (BOS and the text), %d layer(s) x %d head(s) x %d map(s) of %d x %d: %.1f MiB before compression\n",
           checkpoint, T, n_layers, n_heads, maps_per_head, T, T, mib);
    MapsFile maps;
    maps_file_create(&maps, out, model, checkpoint);
    maps_file_text(&maps, tokens, T, tok);
    maps_of_text(model, tokens, T, layers, n_layers, heads, n_heads, maps_file_head, &maps);
    maps_file_close(&maps);
    free(tokens);
}
