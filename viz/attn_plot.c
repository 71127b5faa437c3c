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
#include "../base/util.h"
#include "../studies/report.h"

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

#define PANELS_MAX 3  // A1, A2 and A1 - λ A2 for two maps per head; the softmax map for one

// The panels' data files in the temporary folder, handed to gnuplot as panel1..panelN: every row
// as a matrix when all were saved (matrix), else the mean over the saved rows per key
static void write_panels(const MapsSample* s, const float* A, int panels, int matrix, GnuplotVars* vars) {
    int T = s->T, R = s->R;
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
        gnuplot_input(vars, name, data);
    }
}

// Token text as tic labels, one per line (position, label), handed to gnuplot as labels
static void write_labels(const MapsSample* s, GnuplotVars* vars) {
    char labels[128];
    path_printf(labels, sizeof(labels), "%s/labels.dat", temp_dir);
    FILE* f = fopenCheck(labels, "w");
    for (int t = 0; t < s->T; t++) {
        char l[128];
        label_of(l, sizeof(l), s->text[t]);
        fprintf(f, "%d\t%s\n", t, l);
    }
    fcloseCheck(f, labels);
    gnuplot_input(vars, "labels", labels);
}

// λ beside the map it scales: the layer's for DIFF, each row's (per token) for DIFF V2, as their
// mean over the saved rows
static void lambda_title(const MapsSample* s, int layer, int head, char* out, size_t n) {
    float* lam = mallocCheck((size_t)s->R * sizeof(float));
    maps_sample_read(s, layer, head, "lambda", lam);
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    for (int r = 0; r < s->R; r++) {
        sum += lam[r];
        lo = fmin(lo, lam[r]);
        hi = fmax(hi, lam[r]);
    }
    if (hi - lo < 1e-6) snprintf(out, n, "A1 − λ·A2, λ = %.3f", sum / s->R);
    else snprintf(out, n, "A1 − λ·A2, λ per token: mean %.3f (%.3f to %.3f)", sum / s->R, lo, hi);
    free(lam);
}

void attn_render(const char* path, int sample, int layer, int head, const char* png) {
    MapsSample s;
    maps_sample_open(&s, path, sample);
    int diff = s.maps == 2, T = s.T, R = s.R;
    if (layer < 0 || layer >= s.n_layer) die("--layer %d: '%s' has layers 0..%d", layer, path, s.n_layer - 1);
    if (head < 0 || head >= s.n_head) die("--head %d: '%s' has heads 0..%d", head, path, s.n_head - 1);
    if (!maps_sample_has_head(&s, layer, head)) {
        die("--layer %d --head %d: '%s' holds no maps of that head in %s (`difftx maps --layers/--heads` saves some)", layer, head,
            path, s.name);
    }
    int panels = diff ? PANELS_MAX : 1;
    static const char* names[PANELS_MAX] = {"A1", "A2", "map"};
    int matrix = R == T;  // every row saved: a heatmap; otherwise the profile of the question rows
    float* A = mallocCheck((size_t)panels * R * T * sizeof(float));  // (panels, R, T)
    for (int p = 0; p < panels; p++) maps_sample_read(&s, layer, head, diff ? names[p] : "map", A + (size_t)p * R * T);
    // the maps (A1, A2, or softmax) share one sequential scale, the difference a diverging one
    float maps_max = matrix ? causal_percentile(A, 0, diff ? 1 : 0, T) : 1, diff_max = matrix && diff ? causal_percentile(A, 2, 2, T) : 1;
    char combined[128] = "softmax";
    if (diff) lambda_title(&s, layer, head, combined, sizeof(combined));

    // everything is read: only now the temporary folder for the plot's data files
    snprintf(temp_dir, sizeof(temp_dir), "/tmp/difftx_attn_XXXXXX");
    if (!mkdtemp(temp_dir)) die("cannot create a temporary folder for the plot data");
    static int cleanup_registered;
    if (!cleanup_registered++) atexit(remove_temp_dir);
    GnuplotVars vars;
    gnuplot_init(&vars);
    write_panels(&s, A, panels, matrix, &vars);
    // token text where it can be read (up to 96 tokens), positions otherwise
    int labeled = matrix && T <= 96;
    if (labeled) write_labels(&s, &vars);
    gnuplot_number(&vars, "matrix", matrix);
    gnuplot_number(&vars, "labeled", labeled);
    gnuplot_number(&vars, "tic_step", (T / 8 + 9) / 10 * 10);
    gnuplot_number(&vars, "panels", panels);
    gnuplot_number(&vars, "T", T);
    gnuplot_number(&vars, "rows", R);
    gnuplot_number(&vars, "maps_max", maps_max);
    gnuplot_number(&vars, "diff_max", diff_max);
    gnuplot_number(&vars, "needles", s.N);
    for (int i = 0; i < s.N; i++) {
        char name[32];
        snprintf(name, sizeof(name), "needle_from%d", i + 1);
        gnuplot_number(&vars, name, s.needles[2 * i]);
        snprintf(name, sizeof(name), "needle_to%d", i + 1);
        gnuplot_number(&vars, name, s.needles[2 * i] + s.needles[2 * i + 1]);
    }
    char title[4400], subtitle[256];
    snprintf(title, sizeof(title), "%s: %s, layer %d, head %d, %d tokens", path, s.name, layer, head, T);
    snprintf(subtitle, sizeof(subtitle), "needles: bars above each map (answer green, distractors grey); colours end at the "
             "%dth percentile of the causal entries", CLIP_PERCENTILE);
    gnuplot_string(&vars, "title1", diff ? "A1" : "softmax");
    gnuplot_string(&vars, "title2", "A2");
    gnuplot_string(&vars, "title3", combined);
    gnuplot_string(&vars, "title_text", title);
    gnuplot_string(&vars, "subtitle", subtitle);
    gnuplot_output(&vars, "out", png);
    gnuplot("attn.gp", &vars);
    remove_temp_dir();
    free(A);
    maps_sample_close(&s);
}
