#include "checkpoint.h"

#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define CHECKPOINT_FORMAT "difftx-checkpoint"
#define CHECKPOINT_VERSION 1

static void check(herr_t status, const char* what, const char* path) {
    if (status < 0) die("checkpoint '%s': HDF5 error while %s", path, what);
}

static hid_t check_id(hid_t id, const char* what, const char* path) {
    if (id < 0) die("checkpoint '%s': HDF5 error while %s", path, what);
    return id;
}

static void write_attr(hid_t obj, const char* name, hid_t type, const void* value, const char* path) {
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = check_id(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), name, path);
    check(H5Awrite(attr, type, value), name, path);
    H5Aclose(attr);
    H5Sclose(space);
}

static void write_string_attr(hid_t obj, const char* name, const char* value, const char* path) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, strlen(value) + 1);
    write_attr(obj, name, type, value, path);
    H5Tclose(type);
}

static void read_attr(hid_t obj, const char* name, hid_t type, void* value, const char* path) {
    if (H5Aexists(obj, name) <= 0) die("checkpoint '%s': attribute '%s' is missing", path, name);
    hid_t attr = check_id(H5Aopen(obj, name, H5P_DEFAULT), name, path);
    check(H5Aread(attr, type, value), name, path);
    H5Aclose(attr);
}

static char* read_string_attr(hid_t obj, const char* name, const char* path) {
    if (H5Aexists(obj, name) <= 0) die("checkpoint '%s': attribute '%s' is missing", path, name);
    hid_t attr = check_id(H5Aopen(obj, name, H5P_DEFAULT), name, path);
    hid_t type = H5Aget_type(attr);
    size_t size = H5Tget_size(type);
    char* value = callocCheck(size + 1, 1);
    hid_t mem = H5Tcopy(H5T_C_S1);
    H5Tset_size(mem, size + 1);
    check(H5Aread(attr, mem, value), name, path);
    H5Tclose(mem);
    H5Tclose(type);
    H5Aclose(attr);
    return value;
}

static void write_tensors(hid_t file, const char* group, const Model* model, const float* base, const char* path) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    for (int i = 0; i < model->n_tensors; i++) {
        const ParamTensor* t = &model->tensors[i];
        hsize_t dims[2] = {(hsize_t)t->shape[0], (hsize_t)t->shape[1]};
        hid_t space = H5Screate_simple(t->ndim, dims, NULL);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, t->ndim, dims);
        H5Pset_fletcher32(dcpl);
        char name[128];
        snprintf(name, sizeof(name), "%s/%s", group, t->name);
        hid_t ds = check_id(H5Dcreate2(file, name, H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT), name, path);
        check(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, base + t->offset), name, path);
        H5Dclose(ds);
        H5Pclose(dcpl);
        H5Sclose(space);
    }
    H5Pclose(lcpl);
}

static void read_tensors(hid_t file, const char* group, const Model* model, float* base, const char* path) {
    for (int i = 0; i < model->n_tensors; i++) {
        const ParamTensor* t = &model->tensors[i];
        char name[128];
        snprintf(name, sizeof(name), "%s/%s", group, t->name);
        if (H5Lexists(file, group, H5P_DEFAULT) <= 0 || H5Oexists_by_name(file, name, H5P_DEFAULT) <= 0) {
            die("checkpoint '%s': dataset '%s' is missing", path, name);
        }
        hid_t ds = check_id(H5Dopen2(file, name, H5P_DEFAULT), name, path);
        hid_t space = H5Dget_space(ds);
        hsize_t dims[2] = {0, 0};
        int ndim = H5Sget_simple_extent_dims(space, dims, NULL);
        if (ndim != t->ndim || dims[0] != (hsize_t)t->shape[0] || (ndim == 2 && dims[1] != (hsize_t)t->shape[1])) {
            die("checkpoint '%s': dataset '%s' has the wrong shape for the stored config", path, name);
        }
        if (H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, base + t->offset) < 0) {
            die("checkpoint '%s': cannot read dataset '%s' (corrupt data: Fletcher32 checksum or HDF5 structure)", path, name);
        }
        H5Sclose(space);
        H5Dclose(ds);
    }
}

void checkpoint_save(const char* path, const Model* model, const AdamW* opt, const CheckpointInfo* info) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char tmp[4096];
    tmp_path(tmp, sizeof(tmp), path);
    hid_t file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) die("cannot create checkpoint '%s'", tmp);
    int version = CHECKPOINT_VERSION;
    char* config_text = config_to_text(&model->cfg);
    char hash[32];
    snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)info->tokenizer_hash);
    write_string_attr(file, "format", CHECKPOINT_FORMAT, tmp);
    write_attr(file, "format_version", H5T_NATIVE_INT, &version, tmp);
    write_string_attr(file, "config", config_text, tmp);
    write_attr(file, "vocab_size", H5T_NATIVE_INT, &model->V, tmp);
    write_string_attr(file, "tokenizer_hash", hash, tmp);
    write_attr(file, "step", H5T_NATIVE_INT, &info->step, tmp);
    write_attr(file, "rows_seen", H5T_NATIVE_UINT64, &info->rows_seen, tmp);
    write_attr(file, "data_seed", H5T_NATIVE_INT, &model->cfg.seed, tmp);
    write_attr(file, "threads", H5T_NATIVE_INT, &info->threads, tmp);
    write_attr(file, "finished", H5T_NATIVE_INT, &info->finished, tmp);
    write_attr(file, "train_loss", H5T_NATIVE_DOUBLE, &info->train_loss, tmp);
    write_string_attr(file, "git_commit", GIT_COMMIT, tmp);
    char machine[600];
    machine_description(machine, sizeof(machine));
    write_string_attr(file, "machine", machine, tmp);
    free(config_text);
    write_tensors(file, "params", model, model->params_memory, tmp);
    if (opt) {
        write_tensors(file, "adam_m", model, opt->m, tmp);
        write_tensors(file, "adam_v", model, opt->v, tmp);
    }
    check(H5Fclose(file), "closing", tmp);
    renameCheck(tmp, path);
}

void checkpoint_load(const char* path, Model* model, AdamW* opt, CheckpointInfo* info) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (H5Fis_hdf5(path) <= 0) die("cannot read checkpoint '%s': missing, unreadable or not an HDF5 file", path);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) die("cannot open checkpoint '%s': not a readable HDF5 file", path);
    char* format = read_string_attr(file, "format", path);
    if (strcmp(format, CHECKPOINT_FORMAT) != 0) die("'%s' is not a difftx checkpoint (format '%s')", path, format);
    free(format);
    int version, vocab;
    read_attr(file, "format_version", H5T_NATIVE_INT, &version, path);
    if (version != CHECKPOINT_VERSION) die("checkpoint '%s' has format version %d, this program reads %d", path, version, CHECKPOINT_VERSION);
    char* config_text = read_string_attr(file, "config", path);
    Config cfg;
    config_defaults(&cfg);
    char origin[4200];
    snprintf(origin, sizeof(origin), "%s (config attribute)", path);
    config_load_string(&cfg, config_text, origin);
    config_validate(&cfg);
    free(config_text);
    read_attr(file, "vocab_size", H5T_NATIVE_INT, &vocab, path);
    char* hash = read_string_attr(file, "tokenizer_hash", path);
    info->tokenizer_hash = strtoull(hash, NULL, 16);
    free(hash);
    read_attr(file, "step", H5T_NATIVE_INT, &info->step, path);
    read_attr(file, "rows_seen", H5T_NATIVE_UINT64, &info->rows_seen, path);
    read_attr(file, "threads", H5T_NATIVE_INT, &info->threads, path);
    read_attr(file, "finished", H5T_NATIVE_INT, &info->finished, path);
    read_attr(file, "train_loss", H5T_NATIVE_DOUBLE, &info->train_loss, path);
    model_build(model, &cfg, vocab);
    read_tensors(file, "params", model, model->params_memory, path);
    if (opt) {
        adamw_alloc(opt, model);
        read_tensors(file, "adam_m", model, opt->m, path);
        read_tensors(file, "adam_v", model, opt->v, path);
    }
    H5Fclose(file);
}
