#include "safetensors.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../base/util.h"

void safetensors_write(const char* path, const Model* model, const char* const (*metadata)[2], int n_meta) {
    json_t* header = json_object();
    json_t* meta = json_object();
    for (int i = 0; i < n_meta; i++) {
        // JSON holds UTF-8 text only: a value that is not (a path in an old checkpoint's config)
        // is refused by name, never left out
        json_t* value = json_string(metadata[i][1]);
        if (!value) die("'%s': the metadata '%s' is not UTF-8 text, which the safetensors header (JSON) cannot hold", path, metadata[i][0]);
        if (json_object_set_new(meta, metadata[i][0], value) != 0) die("'%s': cannot add the metadata '%s'", path, metadata[i][0]);
    }
    json_object_set_new(header, "__metadata__", meta);
    for (int i = 0; i < model->n_tensors; i++) {
        const ParamTensor* t = &model->tensors[i];
        json_t* shape = json_array();
        for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        json_t* range = json_array();
        json_array_append_new(range, json_integer((json_int_t)(t->offset * sizeof(float))));
        json_array_append_new(range, json_integer((json_int_t)((t->offset + t->size) * sizeof(float))));
        json_t* entry = json_object();
        json_object_set_new(entry, "dtype", json_string("F32"));
        json_object_set_new(entry, "shape", shape);
        json_object_set_new(entry, "data_offsets", range);
        json_object_set_new(header, t->name, entry);
    }
    char* text = json_dumps(header, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(header);
    if (!text) die("'%s': cannot write the safetensors header", path);
    // the tensors start 8-byte aligned: the header is padded with spaces, as the format allows
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;
    uint64_t n = padded;  // little-endian on every machine this builds for
    float* params = mallocCheck(model->n_params * sizeof(float));  // the parameters, in tensor order
    model_get_params(model, params);
    char tmp[4096];
    tmp_path(tmp, sizeof(tmp), path);
    FILE* f = fopenCheck(tmp, "wb");
    fwriteCheck(&n, sizeof(n), 1, f, tmp);
    fwriteCheck(text, 1, len, f, tmp);
    fwriteCheck("       ", 1, padded - len, f, tmp);
    fwriteCheck(params, sizeof(float), model->n_params, f, tmp);
    fcloseCheck(f, tmp);
    renameCheck(tmp, path);
    free(params);
    free(text);
}
