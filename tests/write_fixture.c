// Helpers of the shell tests. Writes one file of a kind that has no cheap command of its own,
// for tests/test_write_errors.sh to fail a write inside: `write_fixture maps PATH` (an
// attention-maps file: its attributes and one head's maps), `write_fixture outliers PATH`
// (outlier statistics of a model that saw a few values); exits 0 when the file was written,
// dies (exit 1) with the writer's message when not. `write_fixture tamper PATH HOW` damages a
// maps file in place the way a hostile one would be, for tests/test_view.sh: HOW is n_layer or
// n_head (claiming 2^31 - 1), huge_tokens (sample 0's tokens declaring 2^31 values, none stored),
// inf (sample 0's first A1 entry +inf), nan_lambda (its first λ
// NaN) or no_tokens (sample 0's tokens emptied); or valid in a way a page must hold: lambda_one_first
// (the first λ exactly 1, where DIFF V2's sigmoid saturates) or zero_map (A2 = A1 and every λ 1:
// a combined map exactly zero). `write_fixture redirect PATH HOW DATASET SOURCE` points a dataset
// of a checkpoint or maps file at another file (redirect below); `write_fixture config_replace PATH
// FROM TO` edits a checkpoint's config text as an older program wrote it. `write_fixture hand_maps PATH`: a DIFF maps
// file of one needle episode whose metrics are known by hand (hand_maps below). `write_fixture machine` prints what decides
// whether two machines compute bitwise alike, for tests/test_pinned.sh: the BLAS library's
// kernel, the CPU model, the compiler, the instruction set it built for and the one the C
// library's exp and log pick at run time.
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../eval/attnmap.h"
#include "../eval/outliers.h"
#include "../base/h5.h"
#include "../base/util.h"
#include "fixtures.h"
#include "instances.h"

// The widest vectors and FMA of the build (-march=native follows the CPU) and of the CPU at run
// time (glibc picks the FMA or AVX2 variant of its scalar expf and logf by it): measured on one
// machine, a build without AVX-512, or glibc kept off FMA, each moves the last digits of every
// Table 6 smoke row, while the CPU model reads "AMD EPYC" either way
static void instruction_sets(char* buf, size_t n) {
#if defined(__x86_64__)
    const char* built = "sse2";
#if defined(__AVX512F__)
    built = "avx512f";
#elif defined(__AVX2__)
    built = "avx2";
#endif
#if defined(__FMA__)
    const char* built_fma = "+fma";
#else
    const char* built_fma = "";
#endif
    __builtin_cpu_init();
    snprintf(buf, n, "built %s%s, runs %s%s", built, built_fma,
             __builtin_cpu_supports("avx512f") ? "avx512f" : __builtin_cpu_supports("avx2") ? "avx2" : "sse2",
             __builtin_cpu_supports("fma") ? "+fma" : "");
#else
    snprintf(buf, n, "not x86-64");
#endif
}

static void write_float(hid_t file, const char* dataset, float value) {
    hid_t ds = h5_id(H5Dopen2(file, dataset, H5P_DEFAULT), dataset, "tamper");
    hid_t space = H5Dget_space(ds);
    hsize_t start[2] = {0, 0}, count[2] = {1, 1};
    h5_check(H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL), "select", dataset);
    hid_t one = H5Screate_simple(1, count, NULL);
    h5_check(H5Dwrite(ds, H5T_NATIVE_FLOAT, one, space, H5P_DEFAULT, &value), "write", dataset);
    H5Sclose(one);
    H5Sclose(space);
    H5Dclose(ds);
}

// Every entry of a float dataset: value, or where from is set, from's entries
static void write_all(hid_t file, const char* dataset, float value, const char* from) {
    hid_t ds = h5_id(H5Dopen2(file, dataset, H5P_DEFAULT), dataset, "tamper");
    hid_t space = H5Dget_space(ds);
    hssize_t n = H5Sget_simple_extent_npoints(space);
    float* values = mallocCheck((size_t)n * sizeof(float));
    for (hssize_t i = 0; i < n; i++) values[i] = value;
    if (from) {
        hid_t src = h5_id(H5Dopen2(file, from, H5P_DEFAULT), from, "tamper");
        h5_check(H5Dread(src, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), "read", from);
        H5Dclose(src);
    }
    h5_check(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), "write", dataset);
    free(values);
    H5Sclose(space);
    H5Dclose(ds);
}

static void tamper(const char* path, const char* how) {
    hid_t file = h5_id(H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), path, "tamper");
    if (strcmp(how, "n_layer") == 0 || strcmp(how, "n_head") == 0) {
        int huge = 2147483647;
        hid_t a = h5_id(H5Aopen(file, how, H5P_DEFAULT), how, path);
        h5_check(H5Awrite(a, H5T_NATIVE_INT, &huge), how, path);
        H5Aclose(a);
    } else if (strcmp(how, "inf") == 0) {
        write_float(file, "sample_000/layer_00/head_00/A1", INFINITY);
    } else if (strcmp(how, "lambda_one_first") == 0) {
        write_float(file, "sample_000/layer_00/head_00/lambda", 1.0f);
    } else if (strcmp(how, "zero_map") == 0) {
        write_all(file, "sample_000/layer_00/head_00/A2", 0, "sample_000/layer_00/head_00/A1");
        write_all(file, "sample_000/layer_00/head_00/lambda", 1.0f, NULL);
    } else if (strcmp(how, "nan_lambda") == 0) {
        write_float(file, "sample_000/layer_00/head_00/lambda", NAN);
    } else if (strcmp(how, "huge_tokens") == 0) {  // 2^31 tokens declared, none stored
        h5_check(H5Ldelete(file, "sample_000/tokens", H5P_DEFAULT), "delete tokens", path);
        hsize_t n = 2147483648ull, chunk = 1 << 16;
        hid_t space = H5Screate_simple(1, &n, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
        h5_check(H5Pset_chunk(dcpl, 1, &chunk), "chunk", path);
        H5Dclose(h5_id(H5Dcreate2(file, "sample_000/tokens", H5T_STD_I32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), "tokens", path));
        H5Pclose(dcpl);
        H5Sclose(space);
    } else if (strcmp(how, "no_tokens") == 0) {
        h5_check(H5Ldelete(file, "sample_000/tokens", H5P_DEFAULT), "delete tokens", path);
        int none[1] = {0};
        h5_write_dataset(file, "sample_000/tokens", H5T_STD_I32LE, H5T_NATIVE_INT, 1, none, NULL, path);
    } else {
        die("tamper: unknown HOW '%s'", how);
    }
    H5Fclose(file);
}

// One DIFF head, λ = 0.5, over BOS, a noise token, the answer needle (position 2) and one
// question token (n_context 3), every row saved. The question's row: A1 all on the answer, A2
// even over the 4 positions, so w = (A1 - A2 / 2) / (1 - 1/2) = (-0.25, -0.25, 1.75, -0.25):
// sink -0.25, negative mass 0.75, answer 1.75, noise -0.25, entropy of |w| / 2.5 =
// (0.1, 0.1, 0.7, 0.1): -(3 x 0.1 ln 0.1 + 0.7 ln 0.7) = 0.9404480
static void hand_maps(const char* path) {
    Config cfg = tiny_model_config(ATTN_DIFF);
    Model m;
    model_build(&m, &cfg.model, backend_named(BACKEND_DEVICES[cfg.device]), 40, cfg.batch_size);
    MapsFile f;
    maps_file_create(&f, path, &m, "hand.h5");
    enum { T = 4 };
    int tokens[T] = {0, 11, 12, 13}, needles[2] = {2, 1}, rows[T] = {0, 1, 2, 3}, n_context = 3, dims[2] = {T, 0};
    const char* text[T] = {"<bos>", " hay", " 42", " ?"};
    f.sample = h5_id(H5Gcreate2(f.file, "sample_000", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "sample_000", path);
    f.n_samples = 1;
    h5_write_dataset(f.sample, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT, 1, dims, tokens, path);
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    h5_write_dataset(f.sample, "text", str, str, 1, dims, text, path);
    H5Tclose(str);
    h5_write_dataset(f.sample, "rows", H5T_STD_I32LE, H5T_NATIVE_INT, 1, dims, rows, path);
    int ndims[2] = {1, 2};
    h5_write_dataset(f.sample, "needles", H5T_STD_I32LE, H5T_NATIVE_INT, 2, ndims, needles, path);
    h5_write_attr(f.sample, "n_context", H5T_NATIVE_INT, &n_context, path);
    float A[2 * T * T] = {1, 0, 0, 0, 0.5f, 0.5f, 0, 0, 0.2f, 0.3f, 0.5f, 0, 0, 0, 1, 0,                       // A1
                          1, 0, 0, 0, 0.5f, 0.5f, 0, 0, 0.25f, 0.25f, 0.5f, 0, 0.25f, 0.25f, 0.25f, 0.25f};  // A2
    float lambda[T] = {0.5f, 0.5f, 0.5f, 0.5f};
    HeadMaps maps = {T, T, 2, 0, A, lambda, 0};
    maps_file_head(&f, 0, 0, &maps);
    maps_file_close(&f);
    model_free(&m);
}

// Dataset `name` of the HDF5 file at path (a checkpoint or maps file) made to take its data
// from elsewhere, as a hostile file would (`write_fixture redirect PATH HOW DATASET SOURCE`):
//   external  stored in the file SOURCE (HDF5 external storage, from byte 0), its type and shape kept
//   link      an external link to dataset /d of a new HDF5 file SOURCE holding its values
//   virtual   a virtual dataset mapping all of /d of a new HDF5 file SOURCE holding its values
static void redirect(const char* path, const char* how, const char* name, const char* source) {
    hid_t file = h5_id(H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), path, "redirect");
    hid_t ds = h5_id(H5Dopen2(file, name, H5P_DEFAULT), name, "redirect");
    hid_t type = H5Dget_type(ds), space = H5Dget_space(ds);
    size_t bytes = (size_t)H5Sget_simple_extent_npoints(space) * H5Tget_size(type);
    void* values = mallocCheck(bytes + 1);
    h5_check(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), "read", name);
    H5Dclose(ds);
    h5_check(H5Ldelete(file, name, H5P_DEFAULT), "delete", name);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (strcmp(how, "external") == 0) {
        h5_check(H5Pset_external(dcpl, source, 0, (hsize_t)bytes), "external", source);
        H5Dclose(h5_id(H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), name, "redirect"));
    } else if (strcmp(how, "link") == 0 || strcmp(how, "virtual") == 0) {
        hid_t src = h5_id(H5Fcreate(source, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), source, "redirect");
        hid_t d = h5_id(H5Dcreate2(src, "d", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "d", source);
        h5_check(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), "write", source);
        H5Dclose(d);
        H5Fclose(src);
        if (strcmp(how, "link") == 0) {
            h5_check(H5Lcreate_external(source, "/d", file, name, H5P_DEFAULT, H5P_DEFAULT), "external link", name);
        } else {
            h5_check(H5Pset_virtual(dcpl, space, source, "/d", space), "virtual", name);
            H5Dclose(h5_id(H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), name, "redirect"));
        }
    } else {
        die("redirect: unknown HOW '%s'", how);
    }
    H5Pclose(dcpl);
    H5Tclose(type);
    H5Sclose(space);
    free(values);
    H5Fclose(file);
}

// The checkpoint's config attribute with its first `from` replaced by `to`: a checkpoint as an
// older program wrote it (`write_fixture config_replace PATH FROM TO`)
static void config_replace(const char* path, const char* from, const char* to) {
    hid_t file = h5_id(H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), path, "config_replace");
    char* text = h5_read_string_attr(file, "config", path);
    char* at = strstr(text, from);
    if (!at) die("config_replace: '%s' is not in the config of %s", from, path);
    char* out = mallocCheck(strlen(text) + strlen(to) + 1);
    snprintf(out, strlen(text) + strlen(to) + 1, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    h5_check(H5Adelete(file, "config"), "delete config", path);
    h5_write_string_attr(file, "config", out, path);
    free(text);
    free(out);
    H5Fclose(file);
}

int main(int argc, char** argv) {
    if (argc == 5 && strcmp(argv[1], "config_replace") == 0) {
        config_replace(argv[2], argv[3], argv[4]);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "tamper") == 0) {
        tamper(argv[2], argv[3]);
        return 0;
    }
    if (argc == 6 && strcmp(argv[1], "redirect") == 0) {
        redirect(argv[2], argv[3], argv[4], argv[5]);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "machine") == 0) {
        char machine[600], isa[128];
        machine_description(machine, sizeof(machine));
        instruction_sets(isa, sizeof(isa));
        const char* cpu = strstr(machine, ", ") ? strstr(machine, ", ") + 2 : machine;  // not the host name
        printf("openblas=%s; cpu=%s; isa=%s; compiler=gcc %s\n", openblas_get_corename(), cpu, isa, __VERSION__);
        return 0;
    }
    if (argc != 3) die("usage: write_fixture maps|outliers PATH, or write_fixture machine");
    const char* path = argv[2];
    if (strcmp(argv[1], "maps") == 0) {
        Config cfg = tiny_model_config(ATTN_DIFF);
        Model m;
        model_build(&m, &cfg.model, backend_named(BACKEND_DEVICES[cfg.device]), 40, cfg.batch_size);
        MapsFile f;
        maps_file_create(&f, path, &m, "fixture.h5");
        maps_file_close(&f);
        model_free(&m);
        return 0;
    }
    if (strcmp(argv[1], "hand_maps") == 0) {
        hand_maps(path);
        return 0;
    }
    if (strcmp(argv[1], "outliers") == 0) {
        OutlierStats s = {.L = 2, .T = 8, .windows = 4, .stride = 8, .positions = 32, .distinct = 32};
        float values[64];
        for (int i = 0; i < 64; i++) values[i] = (float)(i % 17) - 8.0f;
        for (int k = 0; k < OUTLIER_KINDS; k++) {
            s.layer[k] = mallocCheck(2 * sizeof(ActStats));
            act_stats_init(&s.pooled[k]);
            for (int l = 0; l < 2; l++) {
                act_stats_init(&s.layer[k][l]);
                act_stats_add(&s.layer[k][l], values, 64);
                act_stats_merge(&s.pooled[k], &s.layer[k][l]);
            }
        }
        outlier_stats_write(&s, path, "fixture");
        outlier_stats_free(&s);
        return 0;
    }
    die("write_fixture: unknown kind '%s'", argv[1]);
}
