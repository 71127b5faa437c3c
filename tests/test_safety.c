// Hostile input never runs as a command: gnuplot quoting, and `difftx attn` on attention-map
// files written here by hand, one with token texts and a file name holding backquoted shell
// commands and quotes, one whose token strings were never written (they read as NULL).
#define _GNU_SOURCE
#include <hdf5.h>
#include <string.h>
#include <unistd.h>

#include "../eval/attnmap.h"
#include "../experiments/attn_plot.h"
#include "../experiments/report.h"
#include "../model/h5.h"
#include "../model/util.h"
#include "check.h"

#define DIR "build/safety_fixture"

static void test_quote(void) {
    char out[64];
    gnuplot_quote(out, sizeof(out), "it's `touch x` @m");
    CHECK(strcmp(out, "'it'.\"'\".'s `touch x` @m'") == 0, "quotes joined as .\"'\"., the rest single-quoted: %s", out);
    gnuplot_quote(out, sizeof(out), "'5'");
    CHECK(strcmp(out, "''.\"'\".'5'.\"'\".''") == 0, "a leading quote: %s", out);
    GnuplotVars v = {"", 0};
    gnuplot_string(&v, "a", "x'y");
    gnuplot_number(&v, "n", 3);
    CHECK(strcmp(v.text, "a='x'.\"'\".'y'; n=3") == 0, "gnuplot variables: %s", v.text);
}

// A standard-attention maps file of T tokens; text NULL: the strings are left unwritten
static void write_maps(const char* path, int T, const char* const* text) {
    const char* label = path;
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) die("cannot create %s", path);
    int one = 1;
    h5_write_string_attr(file, "format", ATTNMAP_FORMAT, label);
    h5_write_string_attr(file, "attention", "standard", label);
    h5_write_attr(file, "n_layer", H5T_NATIVE_INT, &one, label);
    h5_write_attr(file, "n_head", H5T_NATIVE_INT, &one, label);
    hid_t g = H5Gcreate2(file, "sample_000", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int tokens[16], rows[16], needles[2] = {2, 3}, dims[2] = {T, 0}, ndims[2] = {1, 2}, mdims[2] = {T, T};
    float map[16 * 16];
    for (int t = 0; t < T; t++) tokens[t] = rows[t] = t;
    for (int r = 0; r < T; r++) for (int j = 0; j < T; j++) map[r * T + j] = j <= r ? 1.0f / (r + 1) : 0.0f;
    h5_write_dataset(g, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT, 1, dims, tokens, label);
    h5_write_dataset(g, "rows", H5T_STD_I32LE, H5T_NATIVE_INT, 1, dims, rows, label);
    h5_write_dataset(g, "needles", H5T_STD_I32LE, H5T_NATIVE_INT, 2, ndims, needles, label);
    h5_write_dataset(g, "layer_00/head_00/map", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, mdims, map, label);
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    if (text) {
        h5_write_dataset(g, "text", str, str, 1, dims, text, label);
    } else {
        hsize_t d = (hsize_t)T;
        hid_t space = H5Screate_simple(1, &d, NULL);
        H5Dclose(H5Dcreate2(g, "text", str, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        H5Sclose(space);
    }
    H5Tclose(str);
    H5Gclose(g);
    H5Fclose(file);
}

static int is_png(const char* path) {
    FILE* f = fopen(path, "rb");
    unsigned char head[4] = {0};
    if (!f) return 0;
    size_t n = fread(head, 1, 4, f);
    fclose(f);
    return n == 4 && head[1] == 'P' && head[2] == 'N' && head[3] == 'G';
}

static void test_attn(void) {
    mkdir_p(DIR);
    unlink(DIR "/PWNED_text");
    unlink("build/PWNED_name");
    unlink("build/PWNED_out");
    const char* hostile[8] = {"`touch " DIR "/PWNED_text`", "\"", "'", "\\", "\n", "@x", "$(touch " DIR "/PWNED_text)", "ok"};
    // a file name holds no '/': its commands work from the current folder, the repository root
    const char* path = DIR "/a`cd build;touch PWNED_name`'b\"$(cd build;touch PWNED_name).h5";
    const char* png = DIR "/out`cd build;touch PWNED_out`'.png";
    write_maps(path, 8, hostile);
    attn_render(path, 0, 0, 0, png);
    const char* unquoted = DIR "/b`cd build;touch PWNED_name`.h5";  // the shell once ran this one
    write_maps(unquoted, 8, hostile);
    attn_render(unquoted, 0, 0, 0, DIR "/b.png");
    CHECK(is_png(png), "a maps file with hostile token texts and name renders");
    CHECK(access(DIR "/PWNED_text", F_OK) != 0 && access("build/PWNED_name", F_OK) != 0 && access("build/PWNED_out", F_OK) != 0,
          "no backquoted or $() text from a token, a file name or the output name ran");
    write_maps(DIR "/unwritten.h5", 6, NULL);
    attn_render(DIR "/unwritten.h5", 0, 0, 0, DIR "/unwritten.png");
    CHECK(is_png(DIR "/unwritten.png"), "a maps file whose token strings were never written renders with empty labels");
}

int main(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    test_quote();
    test_attn();
    return check_summary();
}
