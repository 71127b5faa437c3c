#define _GNU_SOURCE
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../base/util.h"

void preset_path(char* out, size_t n, const char* dir, const char* name, const char* preset, const char* suffix) {
    path_printf(out, n, "%s/%s_%s%s", dir, name, preset, suffix);
}

void report_open(Report* r, const char* path, int to_stdout) {
    snprintf(r->path, sizeof(r->path), "%s", path);
    tmp_path(r->tmp, sizeof(r->tmp), path);
    r->md = fopenCheck(r->tmp, "w");
    r->to_stdout = to_stdout;
}

void report_printf(Report* r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (r->to_stdout) {
        va_list copy;
        va_copy(copy, ap);
        vprintf(fmt, copy);
        va_end(copy);
    }
    vfprintf(r->md, fmt, ap);
    va_end(ap);
}

void report_close(Report* r) {
    if (r->to_stdout) fflush(stdout);
    fcloseCheck(r->md, r->tmp);
    renameCheck(r->tmp, r->path);
}

void data_file_open(DataFile* d, const char* path) {
    path_printf(d->path, sizeof(d->path), "%s", path);
    tmp_path(d->tmp, sizeof(d->tmp), path);
    d->f = fopenCheck(d->tmp, "w");
}

void data_file_close(DataFile* d) {
    fcloseCheck(d->f, d->tmp);
    renameCheck(d->tmp, d->path);
}

void gnuplot_init(GnuplotVars* v) { memset(v, 0, sizeof(*v)); }

// Variable and file names are this program's own: letters, digits and '_'
static void check_name(const char* name) {
    size_t n = strlen(name);
    if (n == 0 || n >= 32 || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != n) {
        die("gnuplot variable name '%.40s': letters, digits and '_' only", name);
    }
}

static void append(GnuplotVars* v, const char* name, const char* value) {
    check_name(name);
    int w = snprintf(v->numbers + v->n, sizeof(v->numbers) - v->n, "%s%s=%s", v->n ? "; " : "", name, value);
    if (w < 0 || (size_t)w >= sizeof(v->numbers) - v->n) die("gnuplot variables too long at '%s'", name);
    v->n += (size_t)w;
}

void gnuplot_number(GnuplotVars* v, const char* name, double value) {
    char text[64];
    snprintf(text, sizeof(text), "%.17g", value);
    append(v, name, text);
}

void gnuplot_data_text(char* out, size_t n, const char* text) {
    size_t k = 0;
    for (const char* p = text; *p; p++) {
        unsigned char c = (unsigned char)*p;
        const char* add = c == '\\' ? "\\\\" : c == '"' ? "''" : c < 32 || c == 127 ? " " : NULL;
        size_t len = add ? strlen(add) : 1;
        if (k + len + 1 > n) break;  // cut, never overrun: a label or title, not a value
        if (add) memcpy(out + k, add, len);
        else out[k] = (char)c;
        k += len;
    }
    out[k] = 0;
}

void markdown_cell(char* out, size_t n, const char* text) {
    size_t k = 0;
    for (const char* p = text; *p; p++) {
        size_t len = *p == '|' ? 2 : 1;
        if (k + len + 1 > n) break;
        if (*p == '|') out[k++] = '\\';
        out[k++] = *p;
    }
    out[k] = 0;
}

void gnuplot_string(GnuplotVars* v, const char* name, const char* value) {
    check_name(name);
    if (v->n_strings == 16) die("gnuplot: more than 16 strings");
    snprintf(v->string_name[v->n_strings], 32, "%s", name);
    size_t n = 2 * strlen(value) + 1;
    v->string_value[v->n_strings] = mallocCheck(n);
    gnuplot_data_text(v->string_value[v->n_strings++], n, value);
}

// the file's name in the folder is the variable's name, its value that name quoted
static void file_variable(GnuplotVars* v, const char* name) {
    char quoted[40];
    snprintf(quoted, sizeof(quoted), "'%s'", name);
    append(v, name, quoted);
}

void gnuplot_input(GnuplotVars* v, const char* name, const char* path) {
    if (v->n_inputs == 16) die("gnuplot: more than 16 input files");
    file_variable(v, name);
    snprintf(v->input_name[v->n_inputs], 32, "%s", name);
    path_printf(v->input_path[v->n_inputs++], 4096, "%s", path);
}

void gnuplot_output(GnuplotVars* v, const char* name, const char* path) {
    if (v->n_outputs == 4) die("gnuplot: more than 4 output files");
    file_variable(v, name);
    snprintf(v->output_name[v->n_outputs], 32, "%s", name);
    path_printf(v->output_path[v->n_outputs++], 4096, "%s", path);
}

// The call's folder, removed however the program ends (die() exits)
static char work_dir[4200];
static void remove_work_dir(void) {
    if (work_dir[0]) remove_tree(work_dir);
    work_dir[0] = 0;
}

static void link_into(const char* dir, const char* name, const char* target) {
    char link[4400], full[PATH_MAX];
    if (!realpath(target, full)) die("gnuplot input '%s': %s", target, strerror(errno));
    path_printf(link, sizeof(link), "%s/%s", dir, name);
    if (symlink(full, link) != 0) die("cannot link '%s' for gnuplot: %s", link, strerror(errno));
}

// path's folder as written ("." for a bare name)
static void folder_of(char* out, size_t n, const char* path) {
    path_printf(out, n, "%s", path);
    char* slash = strrchr(out, '/');
    if (slash) *slash = 0;
    else snprintf(out, n, ".");
}

void gnuplot(const char* script, GnuplotVars* v) {
    char path[4200], strings_script[4200];
    char relative[64];
    snprintf(relative, sizeof(relative), "plots/%s", script);
    source_file_path(path, sizeof(path), relative);
    source_file_path(strings_script, sizeof(strings_script), "plots/strings.gp");
    if (v->n_outputs == 0) die("gnuplot %s: no output file", script);
    // the folder beside the outputs, so that renaming them into place stays on one file system
    char dir[4096];
    folder_of(dir, sizeof(dir), v->output_path[0]);
    for (int i = 1; i < v->n_outputs; i++) {
        char other[4096];
        folder_of(other, sizeof(other), v->output_path[i]);
        if (strcmp(other, dir) != 0) {
            die("gnuplot %s: outputs '%s' and '%s' are in different folders", script, v->output_path[0], v->output_path[i]);
        }
    }
    // a figure replaces only a regular file (rename would put it in place of a FIFO or a device)
    for (int i = 0; i < v->n_outputs; i++) refuse_replacing_non_file("figure", v->output_path[i]);
    static int registered;
    if (!registered++) atexit(remove_work_dir);
    path_printf(work_dir, sizeof(work_dir), "%s/.gnuplot.XXXXXX", dir);
    if (!mkdtemp(work_dir)) die("cannot write figure '%s': no folder for gnuplot beside it (%s)", v->output_path[0], strerror(errno));
    char file[4400];
    path_printf(file, sizeof(file), "%s/strings.tsv", work_dir);
    FILE* f = fopenCheck(file, "w");
    for (int i = 0; i < v->n_strings; i++) fprintf(f, "%s\t%s\n", v->string_name[i], v->string_value[i]);
    fcloseCheck(f, file);
    link_into(work_dir, "strings.gp", strings_script);
    for (int i = 0; i < v->n_inputs; i++) link_into(work_dir, v->input_name[i], v->input_path[i]);
    char vars[4200];
    snprintf(vars, sizeof(vars), "%s%sSTRINGS=%d", v->numbers, v->n ? "; " : "", v->n_strings);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) die("cannot start gnuplot: %s", strerror(errno));
    if (pid == 0) {
        if (chdir(work_dir) != 0) _exit(126);
        // gnuplot's messages go to a log, shown only when it fails: a figure drawn is one line
        int log = open("gnuplot.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (log < 0 || dup2(log, STDERR_FILENO) < 0) _exit(126);
        execlp("gnuplot", "gnuplot", "-e", vars, path, (char*)NULL);
        fprintf(stderr, "error: cannot run gnuplot: %s\n", strerror(errno));
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        path_printf(file, sizeof(file), "%s/gnuplot.log", work_dir);
        char* messages = access(file, R_OK) == 0 ? read_text_file(file, NULL) : NULL;
        if (messages) fputs(messages, stderr);
        free(messages);
        remove_work_dir();
        die("gnuplot failed on %s (its messages are above)", path);
    }
    for (int i = 0; i < v->n_outputs; i++) {
        path_printf(file, sizeof(file), "%s/%s", work_dir, v->output_name[i]);
        renameCheck(file, v->output_path[i]);
    }
    remove_work_dir();
    for (int i = 0; i < v->n_strings; i++) free(v->string_value[i]);
    v->n_strings = 0;
}

Spread spread_of(const double* v, int n, int stride) {
    Spread s = {0, 0};
    for (int i = 0; i < n; i++) s.mean += v[(size_t)i * stride] / n;
    for (int i = 0; n > 1 && i < n; i++) s.std += (v[(size_t)i * stride] - s.mean) * (v[(size_t)i * stride] - s.mean) / (n - 1);
    s.std = sqrt(s.std);
    return s;
}

const char* spread_text(char* out, size_t n, Spread s, int seeds, int digits) {
    if (seeds > 1) snprintf(out, n, "%.*f ± %.*f", digits, s.mean, digits, s.std);
    else snprintf(out, n, "%.*f", digits, s.mean);
    return out;
}
