// `difftx attn`: one head of an attention-maps file (eval/attnmap.h) drawn with gnuplot,
// without the model.
#define _GNU_SOURCE
#include "attn_plot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../eval/attnmap.h"
#include "../model/h5.h"
#include "../model/util.h"
#include "report.h"

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
    gnuplot("plots/attn.gp", "mode='%s'; panels=%d; files='%s'; titles='%s'; decor='%s'; T=%d; cbmax=%g; out='%s'; "
            "title_text='%s, %s, layer %d, head %d, %d tokens'", matrix ? "matrix" : "profile", panels, files, titles, decor,
            T, extreme, tmp, path, group, layer, head, T);
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
