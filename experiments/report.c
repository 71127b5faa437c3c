#define _GNU_SOURCE
#include "report.h"

#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../model/util.h"

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

void gnuplot_quote(char* out, size_t n, const char* value) {
    // single-quoted pieces joined by ."'". around each quote: gnuplot reads a doubled quote at
    // the start of a string as an empty string, and expands nothing in "'"
    static const char joint[] = "'.\"'\".'";
    size_t k = 0;
    if (n < 3) die("gnuplot_quote: no room");
    out[k++] = '\'';
    for (const char* p = value; *p; p++) {
        const char* add = *p == '\'' ? joint : NULL;
        size_t len = add ? sizeof(joint) - 1 : 1;
        if (k + len + 2 > n) die("gnuplot value too long: %.60s...", value);
        if (add) memcpy(out + k, add, len);
        else out[k] = *p;
        k += len;
    }
    out[k++] = '\'';
    out[k] = 0;
}

static void append(GnuplotVars* v, const char* name, const char* value) {
    int w = snprintf(v->text + v->n, sizeof(v->text) - v->n, "%s%s=%s", v->n ? "; " : "", name, value);
    if (w < 0 || (size_t)w >= sizeof(v->text) - v->n) die("gnuplot variables too long at '%s'", name);
    v->n += (size_t)w;
}

void gnuplot_string(GnuplotVars* v, const char* name, const char* value) {
    char quoted[8192];
    gnuplot_quote(quoted, sizeof(quoted), value);
    append(v, name, quoted);
}

void gnuplot_number(GnuplotVars* v, const char* name, double value) {
    char text[64];
    snprintf(text, sizeof(text), "%.17g", value);
    append(v, name, text);
}

// plots/<script> of the source tree the program was built in: <folder of the executable>/../plots
// (build/difftx) or ../../plots (build/san/difftx)
static void script_path(char* out, size_t n, const char* script) {
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0) die("cannot find this program's folder (/proc/self/exe) to locate plots/%s", script);
    exe[len] = 0;
    const char* dir = dirname(exe);
    for (int up = 1; up <= 2; up++) {
        path_printf(out, n, "%s/%s/plots/%s", dir, up == 1 ? ".." : "../..", script);
        if (access(out, R_OK) == 0) return;
    }
    die("gnuplot script plots/%s is missing beside the program's folder '%s'", script, dir);
}

void gnuplot(const char* script, const GnuplotVars* v) {
    char path[4200];
    script_path(path, sizeof(path), script);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) die("cannot start gnuplot: %s", strerror(errno));
    if (pid == 0) {
        execlp("gnuplot", "gnuplot", "-e", v->text, path, (char*)NULL);
        fprintf(stderr, "error: cannot run gnuplot: %s\n", strerror(errno));
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        die("gnuplot failed on %s with: %s", path, v->text);
    }
}
