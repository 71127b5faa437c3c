#include "checkpoint.h"

#include <stdlib.h>
#include <string.h>

#include "../base/h5.h"
#include "../base/util.h"

#define CHECKPOINT_FORMAT "difftx-checkpoint"
#define CHECKPOINT_VERSION 1

static void write_tensors(hid_t file, const char* group, const Model* model, const float* base, const char* label) {
    hid_t lcpl = h5_id(H5Pcreate(H5P_LINK_CREATE), group, label);
    h5_check(H5Pset_create_intermediate_group(lcpl, 1), group, label);
    for (int i = 0; i < model->n_tensors; i++) {
        const ParamTensor* t = &model->tensors[i];
        hsize_t dims[2] = {(hsize_t)t->shape[0], (hsize_t)t->shape[1]};
        char name[128];
        path_printf(name, sizeof(name), "%s/%s", group, t->name);
        hid_t space = h5_id(H5Screate_simple(t->ndim, dims, NULL), name, label);
        hid_t dcpl = h5_id(H5Pcreate(H5P_DATASET_CREATE), name, label);
        h5_check(H5Pset_chunk(dcpl, t->ndim, dims), name, label);
        h5_check(H5Pset_fletcher32(dcpl), name, label);
        hid_t ds = h5_id(H5Dcreate2(file, name, H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT), name, label);
        h5_check(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, base + t->offset), name, label);
        // the close writes the chunk out: a full disk or an I/O error shows here, not at H5Dwrite
        h5_check(H5Dclose(ds), name, label);
        h5_check(H5Pclose(dcpl), name, label);
        h5_check(H5Sclose(space), name, label);
    }
    h5_check(H5Pclose(lcpl), group, label);
}

static void read_tensors(hid_t file, const char* group, const Model* model, float* base, const char* label) {
    for (int i = 0; i < model->n_tensors; i++) {
        const ParamTensor* t = &model->tensors[i];
        char name[128];
        path_printf(name, sizeof(name), "%s/%s", group, t->name);
        h5_require_local(file, name, label);
        if (H5Lexists(file, group, H5P_DEFAULT) <= 0 || H5Oexists_by_name(file, name, H5P_DEFAULT) <= 0) {
            die("%s: dataset '%s' is missing", label, name);
        }
        hid_t ds = h5_open_dataset(file, name, label);
        hid_t space = H5Dget_space(ds);
        hsize_t dims[2] = {0, 0};
        int ndim = H5Sget_simple_extent_dims(space, dims, NULL);
        if (ndim != t->ndim || dims[0] != (hsize_t)t->shape[0] || (ndim == 2 && dims[1] != (hsize_t)t->shape[1])) {
            die("%s: dataset '%s' has the wrong shape for the stored config", label, name);
        }
        if (H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, base + t->offset) < 0) {
            die("%s: cannot read dataset '%s' (corrupt data: Fletcher32 checksum or HDF5 structure)", label, name);
        }
        H5Sclose(space);
        H5Dclose(ds);
    }
}

void checkpoint_save(const char* path, const Config* cfg, const Model* model, const AdamW* opt, const CheckpointInfo* info) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char tmp[4096];
    tmp_path(tmp, sizeof(tmp), path);
    char label[4200];
    snprintf(label, sizeof(label), "checkpoint '%s'", tmp);
    hid_t file = h5_create_checksummed(tmp, label);
    int version = CHECKPOINT_VERSION;
    char* config_text = config_to_text(cfg);
    char hash[32];
    snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)info->tokenizer_hash);
    h5_write_string_attr(file, "format", CHECKPOINT_FORMAT, label);
    h5_write_attr(file, "format_version", H5T_NATIVE_INT, &version, label);
    h5_write_string_attr(file, "config", config_text, label);
    h5_write_attr(file, "vocab_size", H5T_NATIVE_INT, &model->V, label);
    h5_write_string_attr(file, "tokenizer_hash", hash, label);
    h5_write_attr(file, "step", H5T_NATIVE_INT, &info->step, label);
    h5_write_attr(file, "rows_seen", H5T_NATIVE_UINT64, &info->rows_seen, label);
    h5_write_attr(file, "data_seed", H5T_NATIVE_INT, &cfg->seed, label);
    h5_write_attr(file, "threads", H5T_NATIVE_INT, &info->threads, label);
    h5_write_attr(file, "ranks", H5T_NATIVE_INT, &info->ranks, label);
    h5_write_string_attr(file, "device", model->be->device_name(model->be), label);
    h5_write_string_attr(file, "data", cfg->data, label);
    h5_write_string_attr(file, "data_id", info->data_id, label);
    h5_write_attr(file, "finished", H5T_NATIVE_INT, &info->finished, label);
    h5_write_attr(file, "train_loss", H5T_NATIVE_DOUBLE, &info->train_loss, label);
    h5_write_string_attr(file, "git_commit", GIT_COMMIT, label);
    char machine[600];
    machine_description(machine, sizeof(machine));
    h5_write_string_attr(file, "machine", machine, label);
    free(config_text);
    size_t bytes = model->n_params * sizeof(float);
    float* host = mallocCheck(bytes);
    model_get_params(model, host);
    write_tensors(file, "params", model, host, label);
    if (opt) {
        adamw_get_moments(opt, model->n_params, host, NULL);
        write_tensors(file, "adam_m", model, host, label);
        adamw_get_moments(opt, model->n_params, NULL, host);
        write_tensors(file, "adam_v", model, host, label);
    }
    free(host);
    h5_check(H5Fclose(file), "closing", label);
    renameCheck(tmp, path);
}

// `attention = diff_grouped` was DIFF with shared noise maps, renamed diff_shared_noise (the
// registry's version 9 renames its runs alike): a checkpoint written before reads as the same run
// under today's name. Takes text (freed) and returns the text to read.
static char* renamed_config(char* text) {
    const char* old_name = "attention = diff_grouped\n";
    char* at = strstr(text, old_name);
    if (!at || (at != text && at[-1] != '\n')) return text;
    const char* new_name = "attention = diff_shared_noise\n";
    size_t head = (size_t)(at - text), rest = strlen(at + strlen(old_name));
    char* renamed = mallocCheck(head + strlen(new_name) + rest + 1);
    memcpy(renamed, text, head);
    memcpy(renamed + head, new_name, strlen(new_name));
    memcpy(renamed + head + strlen(new_name), at + strlen(old_name), rest + 1);
    free(text);
    return renamed;
}

const char* checkpoint_unloadable(const char* path) {
    static char why[800];
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (H5Fis_hdf5(path) <= 0) return "not an HDF5 file";
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) return "not a readable HDF5 file";
    const char* bad = NULL;
    if (H5Aexists(file, "config") <= 0) {
        bad = "it holds no config";
    } else {
        char* text = renamed_config(h5_read_string_attr(file, "config", path));
        const char* problem = config_text_problem(text);
        if (problem) {
            snprintf(why, sizeof(why), "its config: %s", problem);
            bad = why;
        }
        free(text);
    }
    H5Fclose(file);
    return bad;
}

void checkpoint_load(const char* path, const Backend* be, Config* run, Model* model, AdamW* opt, CheckpointInfo* info) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (H5Fis_hdf5(path) <= 0) die("cannot read checkpoint '%s': missing, unreadable or not an HDF5 file", path);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) die("cannot open checkpoint '%s': not a readable HDF5 file", path);
    char label[4200];
    snprintf(label, sizeof(label), "checkpoint '%s'", path);
    char* format = h5_read_string_attr(file, "format", label);
    if (strcmp(format, CHECKPOINT_FORMAT) != 0) die("'%s' is not a difftx checkpoint (format '%s')", path, format);
    free(format);
    int version, vocab;
    h5_read_attr(file, "format_version", H5T_NATIVE_INT, &version, label);
    if (version != CHECKPOINT_VERSION) die("checkpoint '%s' has format version %d, this program reads %d", path, version, CHECKPOINT_VERSION);
    char* config_text = renamed_config(h5_read_string_attr(file, "config", label));
    Config cfg;
    config_defaults(&cfg);
    char origin[4200];
    snprintf(origin, sizeof(origin), "%s (config attribute)", path);
    config_load_string(&cfg, config_text, origin);
    config_validate(&cfg);
    free(config_text);
    h5_read_attr(file, "vocab_size", H5T_NATIVE_INT, &vocab, label);
    char* hash = h5_read_string_attr(file, "tokenizer_hash", label);
    info->tokenizer_hash = strtoull(hash, NULL, 16);
    free(hash);
    h5_read_attr(file, "step", H5T_NATIVE_INT, &info->step, label);
    h5_read_attr(file, "rows_seen", H5T_NATIVE_UINT64, &info->rows_seen, label);
    h5_read_attr(file, "threads", H5T_NATIVE_INT, &info->threads, label);
    info->ranks = 1;  // written before data-parallel training existed
    if (H5Aexists(file, "ranks") > 0) h5_read_attr(file, "ranks", H5T_NATIVE_INT, &info->ranks, label);
    snprintf(info->device, sizeof(info->device), "cpu");  // written before the CUDA backend existed
    if (H5Aexists(file, "device") > 0) {
        char* written_on = h5_read_string_attr(file, "device", label);
        snprintf(info->device, sizeof(info->device), "%s", written_on);
        free(written_on);
    }
    // older files keep the data folder in the config text and record no identity
    if (H5Aexists(file, "data") > 0) {
        char* data = h5_read_string_attr(file, "data", label);
        const char* why = config_set(&cfg, "data", data);
        if (why) die("%s: attribute 'data': %s", label, why);
        free(data);
    }
    info->data_id[0] = 0;
    if (H5Aexists(file, "data_id") > 0) {
        char* id = h5_read_string_attr(file, "data_id", label);
        snprintf(info->data_id, sizeof(info->data_id), "%s", id);
        free(id);
    }
    h5_read_attr(file, "finished", H5T_NATIVE_INT, &info->finished, label);
    h5_read_attr(file, "train_loss", H5T_NATIVE_DOUBLE, &info->train_loss, label);
    // what the attributes must agree on: a corrupt or hand-edited file is refused, not resumed
    if (vocab < 1 || vocab > 65536) die("%s: attribute 'vocab_size' is %d, not 1..65536", label, vocab);
    if (info->step < 0 || info->step > cfg.optim.steps) die("%s: attribute 'step' is %d, outside 0..steps = %d", label, info->step, cfg.optim.steps);
    uint64_t rows = (uint64_t)info->step * cfg.batch_size * cfg.grad_accum;
    if (info->rows_seen != rows) {
        die("%s: attribute 'rows_seen' is %llu, but step %d x batch_size %d x grad_accum %d is %llu", label,
            (unsigned long long)info->rows_seen, info->step, cfg.batch_size, cfg.grad_accum, (unsigned long long)rows);
    }
    if (info->finished != (info->step == cfg.optim.steps)) die("%s: attribute 'finished' is %d at step %d of %d", label, info->finished, info->step, cfg.optim.steps);
    if (info->threads < 1) die("%s: attribute 'threads' is %d", label, info->threads);
    if (info->ranks < 1) die("%s: attribute 'ranks' is %d", label, info->ranks);
    int data_seed = cfg.seed;  // it repeats the config's seed; files written by other tools may leave it out
    if (H5Aexists(file, "data_seed") > 0) h5_read_attr(file, "data_seed", H5T_NATIVE_INT, &data_seed, label);
    if (data_seed != cfg.seed) die("%s: attribute 'data_seed' is %d but the config's seed is %d", label, data_seed, cfg.seed);
    const char* why = config_set(&cfg, "device", be->device);
    if (why) die("%s: %s", label, why);
    model_build(model, &cfg.model, be, vocab, cfg.batch_size);
    size_t bytes = model->n_params * sizeof(float);
    float* host = mallocCheck(bytes);
    read_tensors(file, "params", model, host, label);
    model_set_params(model, host);
    if (opt) {
        adamw_alloc(opt, model, &cfg.optim);
        read_tensors(file, "adam_m", model, host, label);
        adamw_set_moments(opt, model->n_params, host, NULL);
        read_tensors(file, "adam_v", model, host, label);
        adamw_set_moments(opt, model->n_params, NULL, host);
    }
    free(host);
    H5Fclose(file);
    if (run) *run = cfg;
}
