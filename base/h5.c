#include "h5.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// HDF5 flushes open files from an exit handler of its own; after a failed write (a full disk)
// that handler crashed the program on its way out. Every writer here closes its file itself and
// checks the close, so the handler has nothing to do: it is never installed, and a program that
// dies mid-write leaves a temporary file, never a crash. (Runs before main, before any other
// HDF5 call, as H5dont_atexit requires.)
__attribute__((constructor)) static void h5_no_exit_handler(void) { H5dont_atexit(); }

void h5_check(herr_t status, const char* what, const char* label) {
    if (status < 0) die("%s: HDF5 error while %s", label, what);
}

hid_t h5_create_checksummed(const char* path, const char* label) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    h5_check(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110), "choosing the file format", label);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    h5_check(H5Pclose(fapl), "closing a property list", label);
    if (file < 0) die("cannot create %s", label);
    return file;
}

hid_t h5_id(hid_t id, const char* what, const char* label) {
    if (id < 0) die("%s: HDF5 error while %s", label, what);
    return id;
}

void h5_write_attr(hid_t obj, const char* name, hid_t type, const void* value, const char* label) {
    hid_t space = h5_id(H5Screate(H5S_SCALAR), name, label);
    hid_t attr = h5_id(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), name, label);
    h5_check(H5Awrite(attr, type, value), name, label);
    h5_check(H5Aclose(attr), name, label);
    h5_check(H5Sclose(space), name, label);
}

void h5_write_string_attr(hid_t obj, const char* name, const char* value, const char* label) {
    hid_t type = h5_id(H5Tcopy(H5T_C_S1), name, label);
    h5_check(H5Tset_size(type, strlen(value) + 1), name, label);
    h5_write_attr(obj, name, type, value, label);
    h5_check(H5Tclose(type), name, label);
}

void h5_read_attr(hid_t obj, const char* name, hid_t type, void* value, const char* label) {
    if (H5Aexists(obj, name) <= 0) die("%s: attribute '%s' is missing", label, name);
    hid_t attr = h5_id(H5Aopen(obj, name, H5P_DEFAULT), name, label);
    h5_check(H5Aread(attr, type, value), name, label);
    H5Aclose(attr);
}

char* h5_read_string_attr(hid_t obj, const char* name, const char* label) {
    if (H5Aexists(obj, name) <= 0) die("%s: attribute '%s' is missing", label, name);
    hid_t attr = h5_id(H5Aopen(obj, name, H5P_DEFAULT), name, label);
    hid_t type = H5Aget_type(attr);
    size_t size = H5Tget_size(type);
    char* value = callocCheck(size + 1, 1);
    hid_t mem = H5Tcopy(H5T_C_S1);
    H5Tset_size(mem, size + 1);
    h5_check(H5Aread(attr, mem, value), name, label);
    H5Tclose(mem);
    H5Tclose(type);
    H5Aclose(attr);
    return value;
}

void h5_write_dataset(hid_t loc, const char* name, hid_t file_type, hid_t mem_type, int ndim, const int* dims,
                      const void* data, const char* label) {
    hsize_t d[2] = {(hsize_t)dims[0], ndim > 1 ? (hsize_t)dims[1] : 1};
    hid_t space = h5_id(H5Screate_simple(ndim, d, NULL), name, label);
    hid_t lcpl = h5_id(H5Pcreate(H5P_LINK_CREATE), name, label);
    h5_check(H5Pset_create_intermediate_group(lcpl, 1), name, label);
    hid_t dcpl = h5_id(H5Pcreate(H5P_DATASET_CREATE), name, label);
    if (d[0] > 0 && d[1] > 0) {
        h5_check(H5Pset_chunk(dcpl, ndim, d), name, label);
        h5_check(H5Pset_deflate(dcpl, 4), name, label);
    }
    hid_t ds = h5_id(H5Dcreate2(loc, name, file_type, space, lcpl, dcpl, H5P_DEFAULT), name, label);
    h5_check(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), name, label);
    h5_check(H5Dclose(ds), name, label);  // where a dataset's data is written out
    h5_check(H5Pclose(dcpl), name, label);
    h5_check(H5Pclose(lcpl), name, label);
    h5_check(H5Sclose(space), name, label);
}

// name (relative to loc) as a path from the file's root, for messages: "sample_000/tokens"
static const char* rooted(hid_t loc, const char* name) {
    static char out[2200];
    char where[1024] = "";
    if (H5Iget_name(loc, where, sizeof(where)) < 0) where[0] = 0;
    snprintf(out, sizeof(out), "%s%s%s", where[0] == '/' ? where + 1 : where, where[0] && strcmp(where, "/") != 0 ? "/" : "", name);
    return out;
}

void h5_require_local(hid_t loc, const char* name, const char* label) {
    char prefix[1024];
    size_t n = strlen(name);
    if (n >= sizeof(prefix)) die("%s: object name too long: '%.80s...'", label, name);
    // each link on the path, from the first: none may be followed into another file
    for (size_t end = 1; end <= n; end++) {
        if (end < n && name[end] != '/') continue;
        memcpy(prefix, name, end);
        prefix[end] = 0;
        if (H5Lexists(loc, prefix, H5P_DEFAULT) <= 0) return;  // missing: the caller says so
        H5L_info_t info;
        if (H5Lget_info(loc, prefix, &info, H5P_DEFAULT) < 0) die("%s: cannot read the link '%s'", label, prefix);
        if (info.type != H5L_TYPE_HARD && info.type != H5L_TYPE_SOFT) {
            die("%s: '%s' is a link into another file (%s): refused, so that opening this file reads no other", label, rooted(loc, prefix),
                info.type == H5L_TYPE_EXTERNAL ? "an external link" : "a user-defined link");
        }
    }
}

hid_t h5_open_group(hid_t loc, const char* name, const char* label) {
    h5_require_local(loc, name, label);
    return h5_id(H5Gopen2(loc, name, H5P_DEFAULT), name, label);
}

hid_t h5_open_dataset(hid_t loc, const char* name, const char* label) {
    h5_require_local(loc, name, label);
    hid_t ds = h5_id(H5Dopen2(loc, name, H5P_DEFAULT), name, label);
    hid_t dcpl = h5_id(H5Dget_create_plist(ds), name, label);
    int external = H5Pget_external_count(dcpl);
    H5D_layout_t layout = H5Pget_layout(dcpl);
    H5Pclose(dcpl);
    if (external != 0) {
        die("%s: dataset '%s' stores its data in other files (external storage): refused, so that opening this file reads no other",
            label, rooted(loc, name));
    }
    if (layout == H5D_VIRTUAL) {
        die("%s: dataset '%s' is a virtual dataset (its data mapped from other datasets): refused, so that opening this file reads no "
            "other", label, rooted(loc, name));
    }
    if (layout < 0) die("%s: cannot read the layout of dataset '%s'", label, name);
    return ds;
}

size_t h5_dataset_dims(hid_t loc, const char* name, int* dims, const char* label) {
    if (H5Oexists_by_name(loc, name, H5P_DEFAULT) <= 0) die("%s: dataset '%s' is missing", label, name);
    hid_t ds = h5_open_dataset(loc, name, label);
    hid_t space = H5Dget_space(ds), type = H5Dget_type(ds);
    hsize_t d[2] = {0, 0};
    int ndim = H5Sget_simple_extent_dims(space, d, NULL);
    double raw = (double)H5Sget_simple_extent_npoints(space) * (double)H5Tget_size(type);
    double stored = (double)H5Dget_storage_size(ds);
    H5Tclose(type);
    H5Sclose(space);
    H5Dclose(ds);
    if (ndim < 1 || ndim > 2) die("%s: dataset '%s' has %d dimensions, expected 1 or 2", label, name, ndim);
    // the size a dataset declares, checked against what it stores before a reader allocates it:
    // deflate shrinks data at most about 1032:1, so a dataset declaring more than that times its
    // stored bytes (a 1 MB file declaring 2^31 tokens) never wrote them
    if (raw > 1100.0 * stored + 65536.0) {
        die("%s: dataset '%s' declares %.0f bytes of values but stores %.0f: more than any compression gives, so not data "
            "this program wrote", label, rooted(loc, name), raw, stored);
    }
    dims[0] = (int)d[0];
    dims[1] = ndim > 1 ? (int)d[1] : 0;
    return (size_t)d[0] * (ndim > 1 ? d[1] : 1);
}

void h5_read_dataset(hid_t loc, const char* name, hid_t mem_type, size_t count, void* data, const char* label) {
    int dims[2];
    size_t n = h5_dataset_dims(loc, name, dims, label);
    if (n != count) die("%s: dataset '%s' holds %zu values, expected %zu", label, name, n, count);
    hid_t ds = h5_open_dataset(loc, name, label);
    if (H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) die("%s: cannot read dataset '%s' (corrupt data)", label, name);
    H5Dclose(ds);
}
