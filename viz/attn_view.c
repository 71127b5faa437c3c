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
#include "../base/util.h"

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

// Each saved head's maps, the causal entries only (row r holds keys 0..rows[r]), 8 bits against
// the map's own largest entry, appended to *q (used bytes so far): the page draws and reads them
// back from these. A map with negative entries (DINT's A2 less its integral term) is stored
// around byte 128 (zero), 127 steps either way. Returns the heads' list: layer, head, offset into
// *q, scale and zero per map, λ per row
static json_t* pack_heads(const MapsSample* s, unsigned char** q, size_t* used) {
    const char* label = s->label;
    size_t tri = 0;
    for (int r = 0; r < s->R; r++) tri += (size_t)s->rows[r] + 1;
    json_t* heads = json_array();
    size_t per_map = (size_t)s->R * s->T;
    float* A = mallocCheck(s->maps * per_map * sizeof(float));  // (M, R, T)
    float* lambda = callocCheck(s->R, sizeof(float));
    for (int l = 0; l < s->n_layer; l++) {
        for (int h = 0; h < s->n_head; h++) {
            if (!maps_sample_has_head(s, l, h)) continue;
            json_t* head = json_pack("{s:i, s:i, s:I}", "layer", l, "head", h, "offset", (json_int_t)*used);
            json_t* scales = json_array();
            json_t* zeros = json_array();
            *q = realloc(*q, *used + (size_t)s->maps * tri);
            if (!*q) die("out of memory holding the maps of %s", label);
            for (int m = 0; m < s->maps; m++) {
                float* Am = A + m * per_map;
                maps_sample_read(s, l, h, s->maps == 2 ? (m ? "A2" : "A1") : "map", Am);
                float top = 0, bottom = 0;
                for (int r = 0; r < s->R; r++) {
                    for (int k = 0; k <= s->rows[r]; k++) {
                        top = fmaxf(top, fabsf(Am[(size_t)r * s->T + k]));
                        bottom = fminf(bottom, Am[(size_t)r * s->T + k]);
                    }
                }
                int zero = bottom < 0 ? 128 : 0;
                double scale = top > 0 ? top / (zero ? 127.0 : 255.0) : 1.0;
                for (int r = 0; r < s->R; r++) {
                    for (int k = 0; k <= s->rows[r]; k++) (*q)[(*used)++] = (unsigned char)(zero + lround(Am[(size_t)r * s->T + k] / scale));
                }
                append(scales, json_real(scale), label);
                append(zeros, json_integer(zero), label);
            }
            set(head, "scale", scales, label);
            set(head, "zero", zeros, label);
            if (s->maps == 2) {
                maps_sample_read(s, l, h, "lambda", lambda);
                json_t* lam = json_array();
                for (int r = 0; r < s->R; r++) append(lam, json_real(lambda[r]), label);
                set(head, "lambda", lam, label);
            }
            Allocation a;
            int rows = maps_sample_noise(s, A, lambda, &a);
            if (rows) {
                json_t* metrics = json_pack("{s:i, s:f, s:f, s:f}", "rows", rows, "sink", a.bos, "entropy", a.entropy, "negative", a.negative);
                if (s->N) {
                    set(metrics, "answer", json_real(a.answer), label);
                    set(metrics, "noise", json_real(a.noise), label);
                    set(metrics, "answer_abs", json_real(a.answer_abs), label);
                    set(metrics, "noise_abs", json_real(a.noise_abs), label);
                }
                set(head, "metrics", metrics, label);
            }
            append(heads, head, label);
        }
    }
    free(A);
    free(lambda);
    if (!json_array_size(heads)) die("%s: %s holds no layer_LL/head_HH maps", label, s->name);
    return heads;
}

// The page's data: the sample's tokens, rows, needles and heads, the maps deflated and in base64
static json_t* page_data(const MapsSample* s, const char* path, int sample, json_t* heads, const char* encoded) {
    const char* label = s->label;
    json_t *tokens = json_array(), *texts = json_array();
    for (int t = 0; t < s->T; t++) {
        append(tokens, json_integer(s->tokens[t]), label);
        append(texts, byte_string(s->text[t]), label);
    }
    json_t *row_list = json_array(), *needle_list = json_array();
    for (int r = 0; r < s->R; r++) append(row_list, json_integer(s->rows[r]), label);
    for (int i = 0; i < s->N; i++) append(needle_list, json_pack("[i, i]", s->needles[2 * i], s->needles[2 * i + 1]), label);
    json_t* data = json_pack("{s:o, s:s, s:i, s:o, s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:s}", "file", byte_string(path), "attention",
                             s->attention, "maps_per_head", s->maps, "checkpoint", byte_string(s->checkpoint), "sample", sample,
                             "T", s->T, "tokens", tokens, "text_bytes", texts, "rows", row_list, "needles", needle_list, "heads",
                             heads, "maps", encoded);
    if (!data) die("cannot hold the page data of '%s' as JSON", path);
    return data;
}

// The template around the data, written under a temporary name and renamed; '<' inside the
// JSON (only in strings) written as \u003c, so no text closes or comments the script element
// that holds it. Returns the page's size in bytes
static size_t write_page(const char* html, const char* json) {
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
    size_t size = strlen(page) + strlen(json);
    free(page);
    return size;
}

void attn_view_write(const char* path, int sample, const char* html) {
    MapsSample s;
    maps_sample_open(&s, path, sample);
    if (!s.checkpoint) die("%s: attribute 'checkpoint' is missing", s.label);  // the page names the model
    unsigned char* q = NULL;
    size_t used = 0;
    json_t* heads = pack_heads(&s, &q, &used);
    size_t n_heads = json_array_size(heads);
    uLongf packed_n = compressBound(used);
    unsigned char* packed = mallocCheck(packed_n);
    if (compress2(packed, &packed_n, q, used, 6) != Z_OK) die("cannot compress the maps of '%s'", path);
    char* encoded = base64(packed, packed_n);
    json_t* data = page_data(&s, path, sample, heads, encoded);
    char* json = json_dumps(data, JSON_COMPACT | JSON_ESCAPE_SLASH);
    if (!json) die("out of memory writing the page of '%s'", path);
    size_t size = write_page(html, json);
    printf("wrote %s: %s, %d tokens, %zu heads, %.1f MiB (maps %.1f MiB as 8 bits, %.1f MiB deflated)\n", html, s.name, s.T,
           n_heads, (double)size / (1 << 20), (double)used / (1 << 20), (double)packed_n / (1 << 20));
    free(json);
    json_decref(data);
    free(encoded);
    free(packed);
    free(q);
    maps_sample_close(&s);
}
