// `difftx attn`: one head of an attention-maps file (eval/attnmap.h) drawn with gnuplot,
// without the model.
#define _GNU_SOURCE
#include "attn_plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../eval/attnmap.h"
#include "../model/base/h5.h"
#include "../model/base/util.h"
#include "report.h"

// A token's text as a tic label: up to 40 bytes, printable ASCII, a newline shown as \n, other
// bytes (tabs included) as '?'; then as a field gnuplot reads as data (gnuplot_data_text)
static void label_of(char* out, size_t n, const char* text) {
    char shown[48];
    size_t k = 0;
    for (const char* p = text ? text : ""; *p && k + 2 < sizeof(shown) && k < 40; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '\n') { shown[k++] = '\\'; shown[k++] = 'n'; }
        else shown[k++] = c >= 32 && c <= 126 ? (char)c : '?';
    }
    shown[k] = 0;
    gnuplot_data_text(out, n, shown);
}

// The plot's temporary folder, removed however the program ends (die() exits)
static char temp_dir[64];

#define CLIP_PERCENTILE 99  // colour scales end here, so that a BOS sink does not wash out the map

static int compare_floats(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x > y) - (x < y);
}

// The CLIP_PERCENTILE-th percentile of |A| over the causal entries (key <= query) of panels
// first..last of A (panels, T, T)
static float causal_percentile(const float* A, int first, int last, int T) {
    size_t n = 0, cap = (size_t)(last - first + 1) * T * (T + 1) / 2;
    float* v = mallocCheck(cap * sizeof(float));
    for (int p = first; p <= last; p++) {
        for (int q = 0; q < T; q++) {
            for (int k = 0; k <= q; k++) v[n++] = fabsf(A[((size_t)p * T + q) * T + k]);
        }
    }
    qsort(v, n, sizeof(float), compare_floats);
    float x = v[(size_t)((n - 1) * (CLIP_PERCENTILE / 100.0))];
    free(v);
    return x > 1e-6f ? x : 1e-6f;
}

static void remove_temp_dir(void) {
    if (temp_dir[0]) remove_tree(temp_dir);
    temp_dir[0] = 0;
}

void attn_render(const char* path, int sample, int layer, int head, const char* png) {
    char label[4200];
    hid_t file = maps_file_open(path, label, sizeof(label));
    char* attention = h5_read_string_attr(file, "attention", label);
    int diff = maps_file_maps_per_head(file, label) == 2;
    int n_layer, n_head;
    h5_read_attr(file, "n_layer", H5T_NATIVE_INT, &n_layer, label);
    h5_read_attr(file, "n_head", H5T_NATIVE_INT, &n_head, label);
    if (layer < 0 || layer >= n_layer) die("--layer %d: '%s' has layers 0..%d", layer, path, n_layer - 1);
    if (head < 0 || head >= n_head) die("--head %d: '%s' has heads 0..%d", head, path, n_head - 1);
    char group[64];
    snprintf(group, sizeof(group), "sample_%03d", sample);
    hid_t g = maps_file_open_sample(file, sample, path, label);
    char head_group[64];
    snprintf(head_group, sizeof(head_group), "layer_%02d", layer);
    int saved = H5Lexists(g, head_group, H5P_DEFAULT) > 0;
    snprintf(head_group, sizeof(head_group), "layer_%02d/head_%02d", layer, head);
    if (!saved || H5Lexists(g, head_group, H5P_DEFAULT) <= 0) {
        die("--layer %d --head %d: '%s' holds no maps of that head in %s (`difftx maps --layers/--heads` saves some)", layer, head,
            path, group);
    }
    int dims[2];
    int T = (int)h5_dataset_dims(g, "tokens", dims, label);
    int R = (int)h5_dataset_dims(g, "rows", dims, label);
    int N = (int)h5_dataset_dims(g, "needles", dims, label) / 2;
    int* needles = mallocCheck(2 * N * sizeof(int));
    char** text = mallocCheck(T * sizeof(char*));
    h5_read_dataset(g, "needles", H5T_NATIVE_INT, 2 * N, needles, label);
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    h5_read_dataset(g, "text", str, T, text, label);  // an unwritten string reads as NULL: an empty label
    H5Tclose(str);

    int panels = diff ? 3 : 1;
    static const char* names[3] = {"A1", "A2", "map"};
    int matrix = R == T;  // every row saved: a heatmap; otherwise the profile of the question rows
    float* A = mallocCheck((size_t)panels * R * T * sizeof(float));  // (panels, R, T)
    for (int p = 0; p < panels; p++) {
        char name[128];
        snprintf(name, sizeof(name), "layer_%02d/head_%02d/%s", layer, head, diff ? names[p] : "map");
        h5_read_dataset(g, name, H5T_NATIVE_FLOAT, (size_t)R * T, A + (size_t)p * R * T, label);
    }
    // the maps (A1, A2, or softmax) share one sequential scale, the difference a diverging one
    float maps_max = matrix ? causal_percentile(A, 0, diff ? 1 : 0, T) : 1, diff_max = matrix && diff ? causal_percentile(A, 2, 2, T) : 1;

    // everything is read: only now the temporary folder for the plot's data files
    snprintf(temp_dir, sizeof(temp_dir), "/tmp/difftx_attn_XXXXXX");
    if (!mkdtemp(temp_dir)) die("cannot create a temporary folder for the plot data");
    static int cleanup_registered;
    if (!cleanup_registered++) atexit(remove_temp_dir);
    GnuplotVars vars;
    gnuplot_init(&vars);
    for (int p = 0; p < panels; p++) {
        char data[128], name[16];
        const float* Ap = A + (size_t)p * R * T;
        path_printf(data, sizeof(data), "%s/panel%d.dat", temp_dir, p + 1);
        FILE* f = fopenCheck(data, "w");
        if (matrix) {
            for (int r = 0; r < R; r++) {
                for (int j = 0; j < T; j++) fprintf(f, "%.6g%c", Ap[(size_t)r * T + j], j + 1 < T ? '\t' : '\n');
            }
        } else {
            for (int j = 0; j < T; j++) {
                double mean = 0;
                for (int r = 0; r < R; r++) mean += Ap[(size_t)r * T + j];
                fprintf(f, "%d\t%.6g\n", j, mean / R);
            }
        }
        fcloseCheck(f, data);
        snprintf(name, sizeof(name), "panel%d", p + 1);
        gnuplot_input(&vars, name, data);
    }
    // token text where it can be read (up to 96 tokens), positions otherwise
    int labeled = matrix && T <= 96;
    if (labeled) {
        char labels[128];
        path_printf(labels, sizeof(labels), "%s/labels.dat", temp_dir);
        FILE* f = fopenCheck(labels, "w");
        for (int t = 0; t < T; t++) {
            char l[128];
            label_of(l, sizeof(l), text[t]);
            fprintf(f, "%d\t%s\n", t, l);
        }
        fcloseCheck(f, labels);
        gnuplot_input(&vars, "labels", labels);
    }
    gnuplot_number(&vars, "matrix", matrix);
    gnuplot_number(&vars, "labeled", labeled);
    gnuplot_number(&vars, "tic_step", (T / 8 + 9) / 10 * 10);
    gnuplot_number(&vars, "panels", panels);
    gnuplot_number(&vars, "T", T);
    gnuplot_number(&vars, "rows", R);
    gnuplot_number(&vars, "maps_max", maps_max);
    gnuplot_number(&vars, "diff_max", diff_max);
    gnuplot_number(&vars, "needles", N);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof(name), "needle_from%d", i + 1);
        gnuplot_number(&vars, name, needles[2 * i]);
        snprintf(name, sizeof(name), "needle_to%d", i + 1);
        gnuplot_number(&vars, name, needles[2 * i] + needles[2 * i + 1]);
    }
    char title[4400], subtitle[256];
    snprintf(title, sizeof(title), "%s: %s, layer %d, head %d, %d tokens", path, group, layer, head, T);
    snprintf(subtitle, sizeof(subtitle), "needles: bars above each map (answer green, distractors grey); colours end at the "
             "%dth percentile of the causal entries", CLIP_PERCENTILE);
    // λ beside the map it scales: the layer's for DIFF, each row's (per token) for DIFF V2, as
    // their mean over the saved rows
    char combined[128] = "softmax";
    if (diff) {
        char name[128];
        snprintf(name, sizeof(name), "layer_%02d/head_%02d/lambda", layer, head);
        float* lam = mallocCheck((size_t)R * sizeof(float));
        h5_read_dataset(g, name, H5T_NATIVE_FLOAT, (size_t)R, lam, label);
        double sum = 0, lo = INFINITY, hi = -INFINITY;
        for (int r = 0; r < R; r++) {
            sum += lam[r];
            lo = fmin(lo, lam[r]);
            hi = fmax(hi, lam[r]);
        }
        if (hi - lo < 1e-6) snprintf(combined, sizeof(combined), "A1 − λ·A2, λ = %.3f", sum / R);
        else snprintf(combined, sizeof(combined), "A1 − λ·A2, λ per token: mean %.3f (%.3f to %.3f)", sum / R, lo, hi);
        free(lam);
    }
    gnuplot_string(&vars, "title1", diff ? "A1" : "softmax");
    gnuplot_string(&vars, "title2", "A2");
    gnuplot_string(&vars, "title3", combined);
    gnuplot_string(&vars, "title_text", title);
    gnuplot_string(&vars, "subtitle", subtitle);
    gnuplot_output(&vars, "out", png);
    gnuplot("attn.gp", &vars);
    remove_temp_dir();
    for (int t = 0; t < T; t++) free(text[t]);
    free(text);
    free(A);
    free(needles);
    free(attention);
    H5Gclose(g);
    H5Fclose(file);
}
