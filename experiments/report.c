#include "report.h"

#include <stdarg.h>
#include <stdlib.h>

#include "../model/util.h"

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

void gnuplot(const char* script, const char* variables, ...) {
    char vars[16384], cmd[16384 + 4200];
    va_list ap;
    va_start(ap, variables);
    int n = vsnprintf(vars, sizeof(vars), variables, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(vars)) die("gnuplot variables for %s are too long", script);
    snprintf(cmd, sizeof(cmd), "gnuplot -e \"%s\" %s", vars, script);
    if (system(cmd) != 0) die("gnuplot failed: %s", cmd);
}
