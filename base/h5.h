// Checked HDF5 helpers shared by checkpoints and attention-map files. `label` names the file
// in errors, e.g. "checkpoint 'out/checkpoint.h5'".
#ifndef H5_H
#define H5_H

#include <hdf5.h>

void h5_check(herr_t status, const char* what, const char* label);
// Creates path (truncating) in HDF5 1.10's format, whose superblock, object headers and
// attributes carry checksums: a flipped metadata bit is an error on reading, not a wrong value
// (the oldest format, HDF5's default, checksums chunk data only). Dies naming the file.
hid_t h5_create_checksummed(const char* path, const char* label);
hid_t h5_id(hid_t id, const char* what, const char* label);
void h5_write_attr(hid_t obj, const char* name, hid_t type, const void* value, const char* label);
void h5_write_string_attr(hid_t obj, const char* name, const char* value, const char* label);
void h5_read_attr(hid_t obj, const char* name, hid_t type, void* value, const char* label);
char* h5_read_string_attr(hid_t obj, const char* name, const char* label);  // caller frees
// A dataset of ndim (<= 2) dims under loc, deflate-compressed, intermediate groups created
void h5_write_dataset(hid_t loc, const char* name, hid_t file_type, hid_t mem_type, int ndim, const int* dims,
                      const void* data, const char* label);
// Reads a whole dataset of the expected element count, dying on any other shape
void h5_read_dataset(hid_t loc, const char* name, hid_t mem_type, size_t count, void* data, const char* label);
// Element count of a dataset (dims[0..1] filled, 0 where absent), dying when it is missing
size_t h5_dataset_dims(hid_t loc, const char* name, int* dims, const char* label);
// Every read of a file this program did not write goes through these: they refuse, naming the
// file and the object, what would make opening it read another file (a checkpoint or maps file
// shared by someone must not put the reader's own files into what the reader then shares): a
// link on the path that leads into another file (an external link, or a user-defined one), a
// dataset whose data is stored in other files (external storage), a virtual dataset.
void h5_require_local(hid_t loc, const char* name, const char* label);
hid_t h5_open_dataset(hid_t loc, const char* name, const char* label);
hid_t h5_open_group(hid_t loc, const char* name, const char* label);

#endif
