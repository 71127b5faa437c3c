// Nothing from data runs as a command. gnuplot's command text holds only numbers and names this
// program makes: strings (titles, row names, token labels) reach it as data files it reads, input
// files as links with fixed names in a private folder, outputs by fixed names renamed into place
// afterwards (`studies/report.h`), so no quoting rule is needed. `difftx attn` on hand-written
// maps files whose token texts, file names, folder names and output names hold quotes, backquoted
// and `$(...)` shell commands, gnuplot `@` macros (a quote followed by a token `@out`, the second
// audit's case) and newlines draws them verbatim and runs nothing; a maps file whose strings were
// never written renders with empty labels.
#define _GNU_SOURCE
#include <hdf5.h>
#include <string.h>
#include <unistd.h>

#include "../eval/attnmap.h"
#include "../viz/attn_plot.h"
#include "../studies/report.h"
#include "../base/h5.h"
#include "../base/util.h"
#include "check.h"

#define DIR "build/safety_fixture"

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
    if (T > 16) die("write_maps: at most 16 tokens");
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

// No file named PWNED_* anywhere a hostile command could have created one
static int nothing_ran(void) {
    const char* places[] = {DIR "/PWNED_text", "build/PWNED_name", "build/PWNED_out", "build/PWNED_dir", "PWNED", DIR "/PWNED"};
    for (size_t i = 0; i < sizeof(places) / sizeof(places[0]); i++) {
        if (access(places[i], F_OK) == 0) return 0;
    }
    return 1;
}

static void test_attn(void) {
    remove_tree(DIR);
    mkdir_p(DIR);
    unlink("build/PWNED_name");
    unlink("build/PWNED_out");
    unlink("build/PWNED_dir");
    unlink("PWNED");
    const char* hostile[12] = {"it's", "@out", "`touch " DIR "/PWNED_text`", "\"", "'", "\\", "\n", "@x", "$(touch " DIR "/PWNED_text)",
                               "a\tb", "'`touch PWNED`'", "ok"};
    // a file name holds no '/': its commands work from the current folder, the repository root
    const char* path = DIR "/a`cd build;touch PWNED_name`'b\"$(cd build;touch PWNED_name).h5";
    const char* png = DIR "/out`cd build;touch PWNED_out`'.png";
    write_maps(path, 12, hostile);
    attn_render(path, 0, 0, 0, png);
    CHECK(is_png(png), "a maps file with hostile token texts and name renders");
    // the audit's output name, and a maps file named with a quote, a backquote command and a
    // newline drawn to the default name beside it
    const char* audit_png = DIR "/x'`touch PWNED`.png";
    attn_render(path, 0, 0, 0, audit_png);
    CHECK(is_png(audit_png), "the audit's output name x'`touch PWNED`.png renders");
    const char* newline = DIR "/m'`touch PWNED`\n$(touch PWNED)@out.h5";
    write_maps(newline, 12, hostile);
    attn_render(newline, 0, 0, 0, DIR "/m'`touch PWNED`\n$(touch PWNED)@out_s0_l0_h0.png");
    CHECK(is_png(DIR "/m'`touch PWNED`\n$(touch PWNED)@out_s0_l0_h0.png"), "a maps file named with a quote, a backquote and a newline renders");
    // a hostile folder for the output (gnuplot's private folder is made inside it)
    const char* dir = DIR "/d'`cd build;touch PWNED_dir`$(cd build;touch PWNED_dir)@out\nx";
    mkdir_p(dir);
    char in_dir[512];
    snprintf(in_dir, sizeof(in_dir), "%s/f'@out.png", dir);
    attn_render(path, 0, 0, 0, in_dir);
    CHECK(is_png(in_dir), "an output inside a hostile folder renders");
    const char* unquoted = DIR "/b`cd build;touch PWNED_name`.h5";  // the shell once ran this one
    write_maps(unquoted, 8, hostile);
    attn_render(unquoted, 0, 0, 0, DIR "/b.png");
    CHECK(nothing_ran(), "no backquoted or $() text from a token, a file name, a folder name or the output name ran");
    write_maps(DIR "/unwritten.h5", 6, NULL);
    attn_render(DIR "/unwritten.h5", 0, 0, 0, DIR "/unwritten.png");
    CHECK(is_png(DIR "/unwritten.png"), "a maps file whose token strings were never written renders with empty labels");
}

int main(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    test_attn();
    return check_summary();
}
