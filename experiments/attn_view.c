// `difftx view`: a sample of an attention-maps file (eval/attnmap.h) as one self-contained HTML
// page, the template plots/view.html filled with the sample's tokens, needles, λ and maps.
#define _GNU_SOURCE
#include "attn_view.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../eval/attnmap.h"
#include "../model/base/h5.h"
#include "../model/base/util.h"

#define DATA_MARK "/*DIFFTX_DATA*/"

// A token's bytes as a JSON string of the code points U+0000..U+00FF, one per byte: a byte-level
// token may hold part of a character, which the page completes with the tokens after it
static json_t* byte_string(const char* bytes) {
    size_t n = bytes ? strlen(bytes) : 0, k = 0;
    char* out = mallocCheck(2 * n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)bytes[i];
        if (c < 0x80) {
            out[k++] = (char)c;
        } else {
            out[k++] = (char)(0xC0 | c >> 6);
            out[k++] = (char)(0x80 | (c & 0x3F));
        }
    }
    json_t* s = json_stringn(out, k);
    free(out);
    if (!s) die("cannot hold a token's text as JSON");
    return s;
}

static char* base64(const unsigned char* data, size_t n) {
    static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char* out = mallocCheck(4 * ((n + 2) / 3) + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16 | (i + 1 < n ? (uint32_t)data[i + 1] << 8 : 0) | (i + 2 < n ? data[i + 2] : 0);
        out[k++] = ALPHABET[v >> 18 & 63];
        out[k++] = ALPHABET[v >> 12 & 63];
        out[k++] = i + 1 < n ? ALPHABET[v >> 6 & 63] : '=';
        out[k++] = i + 2 < n ? ALPHABET[v & 63] : '=';
    }
    out[k] = 0;
    return out;
}

// Every value the page gets passes here: a value jansson could not make (a non-finite real, a
// failed allocation) is an error, never a silently shorter list
static void append(json_t* array, json_t* value, const char* label) {
    if (!value || json_array_append_new(array, value) != 0) die("%s: a value the page cannot hold as JSON", label);
}

static void set(json_t* object, const char* key, json_t* value, const char* label) {
    if (!value || json_object_set_new(object, key, value) != 0) die("%s: a value the page cannot hold as JSON", label);
}

void attn_view_write(const char* path, int sample, const char* html) {
    char label[4200];
    hid_t file = maps_file_open(path, label, sizeof(label));
    char* attention = h5_read_string_attr(file, "attention", label);
    char* checkpoint = h5_read_string_attr(file, "checkpoint", label);
    int n_layer, n_head, maps = maps_file_maps_per_head(file, label), diff = maps == 2;
    h5_read_attr(file, "n_layer", H5T_NATIVE_INT, &n_layer, label);
    h5_read_attr(file, "n_head", H5T_NATIVE_INT, &n_head, label);
    if (n_layer < 1 || n_layer > ATTNMAP_MAX_INDEX || n_head < 1 || n_head > ATTNMAP_MAX_INDEX) {
        die("%s: n_layer %d and n_head %d must lie in 1..%d", label, n_layer, n_head, ATTNMAP_MAX_INDEX);
    }
    char group[64];
    snprintf(group, sizeof(group), "sample_%03d", sample);
    hid_t g = maps_file_open_sample(file, sample, path, label);
    int dims[2];
    int T = (int)h5_dataset_dims(g, "tokens", dims, label);
    int R = (int)h5_dataset_dims(g, "rows", dims, label);
    int N = (int)h5_dataset_dims(g, "needles", dims, label) / 2;
    if (T == 0 || R == 0) die("%s: %s holds no %s", label, group, T == 0 ? "tokens" : "rows");
    int* rows = mallocCheck((size_t)R * sizeof(int));
    int* needles = mallocCheck((size_t)(2 * N + 1) * sizeof(int));
    char** text = mallocCheck((size_t)T * sizeof(char*));
    h5_read_dataset(g, "rows", H5T_NATIVE_INT, R, rows, label);
    if (N) h5_read_dataset(g, "needles", H5T_NATIVE_INT, 2 * N, needles, label);
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    h5_read_dataset(g, "text", str, T, text, label);
    H5Tclose(str);
    for (int r = 0; r < R; r++) {
        if (rows[r] < 0 || rows[r] >= T || (r && rows[r] <= rows[r - 1])) die("%s: %s/rows is not increasing within 0..%d", label, group, T - 1);
    }

    // each saved head's maps, the causal entries only (row r holds keys 0..rows[r]), 8 bits
    // against the map's own largest entry: the page draws and reads them back from these
    size_t tri = 0;
    for (int r = 0; r < R; r++) tri += (size_t)rows[r] + 1;
    json_t* heads = json_array();
    unsigned char* q = NULL;
    size_t used = 0;
    float* A = mallocCheck((size_t)R * T * sizeof(float));
    float* lambda = mallocCheck((size_t)R * sizeof(float));
    for (int l = 0; l < n_layer; l++) {
        char name[128];
        snprintf(name, sizeof(name), "layer_%02d", l);
        if (H5Lexists(g, name, H5P_DEFAULT) <= 0) continue;  // `difftx maps --layers` keeps some
        for (int h = 0; h < n_head; h++) {
            snprintf(name, sizeof(name), "layer_%02d/head_%02d", l, h);
            if (H5Lexists(g, name, H5P_DEFAULT) <= 0) continue;
            json_t* head = json_pack("{s:i, s:i, s:I}", "layer", l, "head", h, "offset", (json_int_t)used);
            json_t* scales = json_array();
            q = realloc(q, used + (size_t)maps * tri);
            if (!q) die("out of memory holding the maps of '%s'", path);
            for (int m = 0; m < maps; m++) {
                snprintf(name, sizeof(name), "layer_%02d/head_%02d/%s", l, h, diff ? (m ? "A2" : "A1") : "map");
                h5_read_dataset(g, name, H5T_NATIVE_FLOAT, (size_t)R * T, A, label);
                float top = 0;
                for (int r = 0; r < R; r++) {
                    for (int k = 0; k <= rows[r]; k++) {
                        float v = A[(size_t)r * T + k];
                        if (!(v >= 0 && v <= 1)) die("%s: %s/%s holds %g; softmax maps lie in [0, 1]", label, group, name, v);
                        top = fmaxf(top, v);
                    }
                }
                double scale = top > 0 ? top / 255.0 : 1.0;
                for (int r = 0; r < R; r++) {
                    for (int k = 0; k <= rows[r]; k++) q[used++] = (unsigned char)lround(A[(size_t)r * T + k] / scale);
                }
                append(scales, json_real(scale), label);
            }
            set(head, "scale", scales, label);
            if (diff) {
                snprintf(name, sizeof(name), "layer_%02d/head_%02d/lambda", l, h);
                h5_read_dataset(g, name, H5T_NATIVE_FLOAT, R, lambda, label);
                json_t* lam = json_array();
                for (int r = 0; r < R; r++) {
                    if (!isfinite(lambda[r])) die("%s: %s/%s holds %g at row %d; λ is finite", label, group, name, lambda[r], r);
                    append(lam, json_real(lambda[r]), label);
                }
                set(head, "lambda", lam, label);
            }
            append(heads, head, label);
        }
    }
    if (!json_array_size(heads)) die("%s: %s holds no layer_LL/head_HH maps", label, group);
    uLongf packed_n = compressBound(used);
    unsigned char* packed = mallocCheck(packed_n);
    if (compress2(packed, &packed_n, q, used, 6) != Z_OK) die("cannot compress the maps of '%s'", path);
    char* encoded = base64(packed, packed_n);

    json_t* tokens = json_array();
    json_t* texts = json_array();
    int* ids = mallocCheck((size_t)T * sizeof(int));
    h5_read_dataset(g, "tokens", H5T_NATIVE_INT, T, ids, label);
    for (int t = 0; t < T; t++) {
        append(tokens, json_integer(ids[t]), label);
        append(texts, byte_string(text[t]), label);
    }
    json_t *row_list = json_array(), *needle_list = json_array();
    for (int r = 0; r < R; r++) append(row_list, json_integer(rows[r]), label);
    for (int i = 0; i < N; i++) append(needle_list, json_pack("[i, i]", needles[2 * i], needles[2 * i + 1]), label);
    json_t* data = json_pack("{s:o, s:s, s:i, s:o, s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:s}", "file", byte_string(path), "attention",
                             attention, "maps_per_head", maps, "checkpoint", byte_string(checkpoint), "sample", sample, "T", T, "tokens", tokens,
                             "text_bytes", texts, "rows", row_list, "needles", needle_list, "heads", heads, "maps", encoded);
    if (!data) die("cannot hold the page data of '%s' as JSON", path);
    char* json = json_dumps(data, JSON_COMPACT | JSON_ESCAPE_SLASH);
    if (!json) die("out of memory writing the page of '%s'", path);

    // the template around the data; '<' inside the JSON (only in strings) written as \u003c, so
    // no text closes or comments the script element that holds it
    char template_path[4200];
    source_file_path(template_path, sizeof(template_path), "plots/view.html");
    char* page = read_text_file(template_path, NULL);
    char* mark = strstr(page, DATA_MARK);
    if (!mark) die("%s lacks its data mark %s", template_path, DATA_MARK);
    char tmp[4200];
    tmp_path(tmp, sizeof(tmp), html);
    FILE* f = fopenCheck(tmp, "w");
    fwriteCheck(page, 1, (size_t)(mark - page), f, tmp);
    for (const char* c = json; *c;) {
        const char* lt = strchr(c, '<');
        size_t n = lt ? (size_t)(lt - c) : strlen(c);
        fwriteCheck(c, 1, n, f, tmp);
        if (lt) fwriteCheck("\\u003c", 1, 6, f, tmp);
        c += n + (lt != NULL);
    }
    const char* rest = mark + strlen(DATA_MARK);
    fwriteCheck(rest, 1, strlen(rest), f, tmp);
    fcloseCheck(f, tmp);
    renameCheck(tmp, html);
    printf("wrote %s: %s, %d tokens, %zu heads, %.1f MiB (maps %.1f MiB as 8 bits, %.1f MiB deflated)\n", html, group, T,
           json_array_size(heads), (double)(strlen(page) + strlen(json)) / (1 << 20), (double)used / (1 << 20), (double)packed_n / (1 << 20));
    free(page);
    free(json);
    json_decref(data);
    free(encoded);
    free(packed);
    free(q);
    free(A);
    free(lambda);
    free(ids);
    for (int t = 0; t < T; t++) free(text[t]);
    free(text);
    free(rows);
    free(needles);
    free(attention);
    free(checkpoint);
    H5Gclose(g);
    H5Fclose(file);
}
