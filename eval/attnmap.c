#define _GNU_SOURCE
#include "attnmap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../model/h5.h"
#include "../model/util.h"

void maps_file_create(MapsFile* f, const char* path, const Model* m, const char* checkpoint) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    snprintf(f->path, sizeof(f->path), "%s", path);
    tmp_path(f->tmp, sizeof(f->tmp), path);
    snprintf(f->label, sizeof(f->label), "attention maps '%s'", f->tmp);
    f->file = H5Fcreate(f->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f->file < 0) die("cannot create attention maps '%s'", f->tmp);
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
}

static void close_sample(MapsFile* f) {
    if (f->sample >= 0) H5Gclose(f->sample);
    f->sample = -1;
}

int maps_file_sample(MapsFile* f, const Episode* e, const Tokenizer* tok, int length, uint64_t seed) {
    close_sample(f);
    char name[32];
    snprintf(name, sizeof(name), "sample_%03d", f->n_samples++);
    f->sample = h5_id(H5Gcreate2(f->file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), name, f->label);
    int T = e->n_context + e->question_len[0];
    int full = T <= ATTNMAP_FULL_ROWS, first = full ? 0 : e->n_context;
    int* tokens = mallocCheck(T * sizeof(int));
    memcpy(tokens, e->tokens, e->n_context * sizeof(int));
    memcpy(tokens + e->n_context, e->question[0], e->question_len[0] * sizeof(int));
    char** text = mallocCheck(T * sizeof(char*));
    for (int t = 0; t < T; t++) {
        text[t] = callocCheck(tok->length[tokens[t]] + 1, 1);
        tokenizer_decode(tok, &tokens[t], 1, text[t]);
    }
    int needles[NEEDLE_MAX * 2], rows = T - first;
    for (int i = 0; i < e->n_needles; i++) {
        needles[2 * i] = e->start[i];
        needles[2 * i + 1] = e->len[i];
    }
    int* row_pos = mallocCheck(rows * sizeof(int));
    for (int r = 0; r < rows; r++) row_pos[r] = first + r;
    int dims[2] = {T, 0}, ndims[2] = {e->n_needles, 2};
    h5_write_dataset(f->sample, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT, 1, dims, tokens, f->label);
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    h5_write_dataset(f->sample, "text", str, str, 1, dims, text, f->label);
    H5Tclose(str);
    h5_write_dataset(f->sample, "needles", H5T_STD_I32LE, H5T_NATIVE_INT, 2, ndims, needles, f->label);
    dims[0] = rows;
    h5_write_dataset(f->sample, "rows", H5T_STD_I32LE, H5T_NATIVE_INT, 1, dims, row_pos, f->label);
    h5_write_attr(f->sample, "depth", H5T_NATIVE_DOUBLE, &e->depth, f->label);
    h5_write_attr(f->sample, "n_context", H5T_NATIVE_INT, &e->n_context, f->label);
    h5_write_attr(f->sample, "n_needles", H5T_NATIVE_INT, &e->n_needles, f->label);
    h5_write_attr(f->sample, "length", H5T_NATIVE_INT, &length, f->label);
    h5_write_attr(f->sample, "seed", H5T_NATIVE_UINT64, &seed, f->label);
    for (int t = 0; t < T; t++) free(text[t]);
    free(text);
    free(tokens);
    free(row_pos);
    return full;
}

void maps_file_head(void* ctx, int layer, int head, const HeadMaps* maps) {
    MapsFile* f = ctx;
    char name[64];
    int dims[2] = {maps->rows, maps->T};
    size_t n = (size_t)maps->rows * maps->T;
    float* combined = mallocCheck(n * sizeof(float));
    for (int r = 0; r < maps->rows; r++) {
        const float* a0 = maps->A + (size_t)r * maps->T;
        const float* a1 = maps->M == 2 ? a0 + n : NULL;
        for (int j = 0; j < maps->T; j++) combined[(size_t)r * maps->T + j] = a1 ? a0[j] - maps->lambda[r] * a1[j] : a0[j];
    }
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

// Gnuplot-safe token label: printable ASCII without quotes or backslashes, newlines as "\n"
static void label_of(char* out, size_t n, const char* text) {
    size_t k = 0;
    for (const char* p = text; *p && k + 3 < n; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '\n') { out[k++] = '\\'; out[k++] = '\\'; out[k++] = 'n'; }
        else if (c == '"' || c == '\\' || c == '\'' || c < 32 || c > 126) out[k++] = c == ' ' ? ' ' : '?';
        else out[k++] = (char)c;
    }
    out[k] = 0;
}

void attn_render(const char* path, int sample, int layer, int head, const char* png) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char label[4200];
    snprintf(label, sizeof(label), "attention maps '%s'", path);
    if (H5Fis_hdf5(path) <= 0) die("cannot read attention maps '%s': missing, unreadable or not an HDF5 file", path);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) die("cannot open attention maps '%s'", path);
    char* format = h5_read_string_attr(file, "format", label);
    if (strcmp(format, ATTNMAP_FORMAT) != 0) die("'%s' is not an attention-maps file (format '%s')", path, format);
    free(format);
    char* attention = h5_read_string_attr(file, "attention", label);
    int n_layer, n_head;
    h5_read_attr(file, "n_layer", H5T_NATIVE_INT, &n_layer, label);
    h5_read_attr(file, "n_head", H5T_NATIVE_INT, &n_head, label);
    if (layer < 0 || layer >= n_layer) die("--layer %d: '%s' has layers 0..%d", layer, path, n_layer - 1);
    if (head < 0 || head >= n_head) die("--head %d: '%s' has heads 0..%d", head, path, n_head - 1);
    char group[64];
    snprintf(group, sizeof(group), "sample_%03d", sample);
    if (H5Lexists(file, group, H5P_DEFAULT) <= 0) die("--sample %d: '%s' has no group '%s'", sample, path, group);
    hid_t g = H5Gopen2(file, group, H5P_DEFAULT);
    int dims[2];
    int T = (int)h5_dataset_dims(g, "tokens", dims, label);
    int R = (int)h5_dataset_dims(g, "rows", dims, label);
    int N = (int)h5_dataset_dims(g, "needles", dims, label) / 2;
    int* needles = mallocCheck(2 * N * sizeof(int));
    char** text = mallocCheck(T * sizeof(char*));
    h5_read_dataset(g, "needles", H5T_NATIVE_INT, 2 * N, needles, label);
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    h5_read_dataset(g, "text", str, T, text, label);
    H5Tclose(str);

    int diff = strcmp(attention, "standard") != 0, panels = diff ? 3 : 1;
    static const char* names[3] = {"A1", "A2", "map"};
    const char* titles = diff ? "A1 A2 A1-lambda*A2" : "softmax";
    char dir[] = "/tmp/difftx_attn_XXXXXX";
    if (!mkdtemp(dir)) die("cannot create a temporary folder for the plot data");
    char files[3 * 4200] = "", decor[4200];
    int matrix = R == T;  // every row saved: a heatmap; otherwise the profile of the question rows
    float* A = mallocCheck((size_t)R * T * sizeof(float));
    double extreme = 1e-6;  // the colour scale is symmetric around 0 and spans every panel
    for (int p = 0; p < panels; p++) {
        char name[128], data[4200];
        snprintf(name, sizeof(name), "layer_%02d/head_%02d/%s", layer, head, diff ? names[p] : "map");
        h5_read_dataset(g, name, H5T_NATIVE_FLOAT, (size_t)R * T, A, label);
        snprintf(data, sizeof(data), "%s/panel%d.dat", dir, p);
        FILE* f = fopenCheck(data, "w");
        for (size_t i = 0; i < (size_t)R * T; i++) extreme = fmax(extreme, fabs(A[i]));
        if (matrix) {
            for (int r = 0; r < R; r++) {
                for (int j = 0; j < T; j++) fprintf(f, "%.6g%c", A[(size_t)r * T + j], j + 1 < T ? ' ' : '\n');
            }
        } else {
            for (int j = 0; j < T; j++) {
                double mean = 0;
                for (int r = 0; r < R; r++) mean += A[(size_t)r * T + j];
                fprintf(f, "%d %.6g\n", j, mean / R);
            }
        }
        fcloseCheck(f, data);
        snprintf(files + strlen(files), sizeof(files) - strlen(files), "%s%s", p ? " " : "", data);
    }
    snprintf(decor, sizeof(decor), "%s/decor.gp", dir);
    FILE* f = fopenCheck(decor, "w");
    if (matrix) {
        int every = T <= 64 ? 1 : (T + 63) / 64;
        for (int axis = 0; axis < 2; axis++) {
            fprintf(f, "set %s (", axis ? "ytics" : "xtics");
            for (int t = 0; t < T; t += every) {
                char l[64];
                label_of(l, sizeof(l), text[t]);
                fprintf(f, "%s\"%s\" %d", t ? ", " : "", l, t);
            }
            fprintf(f, ")\n");
        }
        for (int i = 0; i < N; i++) {  // needle spans outlined on the key axis
            fprintf(f, "set object %d rect from %g, graph 0 to %g, graph 1 front fs empty border lc rgb '%s' lw 1.5\n", i + 1,
                    needles[2 * i] - 0.5, needles[2 * i] + needles[2 * i + 1] - 0.5, i == 0 ? "#00aa00" : "#888888");
        }
    } else {
        for (int i = 0; i < N; i++) {
            fprintf(f, "set object %d rect from %d, graph 0 to %d, graph 1 back fs solid 0.35 noborder fc rgb '%s'\n", i + 1,
                    needles[2 * i], needles[2 * i] + needles[2 * i + 1], i == 0 ? "#00aa00" : "#999999");
        }
        fprintf(f, "set label 1 'answer needle (green), distractors (grey); mean over the %d question rows' at graph 0.01, graph 0.95\n", R);
    }
    fcloseCheck(f, decor);
    char tmp[4200];
    tmp_path(tmp, sizeof(tmp), png);
    char cmd[16384];
    snprintf(cmd, sizeof(cmd), "gnuplot -e \"mode='%s'; panels=%d; files='%s'; titles='%s'; decor='%s'; T=%d; cbmax=%g; out='%s'; "
             "title_text='%s, %s, layer %d, head %d, %d tokens'\" plots/attn.gp", matrix ? "matrix" : "profile", panels, files,
             titles, decor, T, extreme, tmp, path, group, layer, head, T);
    if (system(cmd) != 0) die("gnuplot failed: %s", cmd);
    renameCheck(tmp, png);
    char rm[4300];
    snprintf(rm, sizeof(rm), "rm -rf '%s'", dir);
    if (system(rm) != 0) die("cannot remove '%s'", dir);
    for (int t = 0; t < T; t++) free(text[t]);
    free(text);
    free(A);
    free(needles);
    free(attention);
    H5Gclose(g);
    H5Fclose(file);
}
