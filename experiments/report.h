// Where tables and figures go: a report is written to stdout and to a markdown file at once
// (via a temporary file renamed into place on close); gnuplot draws figures from data files.
#ifndef REPORT_H
#define REPORT_H

#include <stdio.h>

typedef struct {
    FILE* md;
    char path[4096], tmp[4200];
    int to_stdout;
} Report;

// to_stdout = 0 writes the markdown file only
// dir/<name>_<preset><suffix> ("results/table6_small.md", "plots/table6_small_curves.png"):
// every table and figure carries its preset, so running one preset never overwrites another's
void preset_path(char* out, size_t n, const char* dir, const char* name, const char* preset, const char* suffix);

void report_open(Report* r, const char* path, int to_stdout);
void report_printf(Report* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void report_close(Report* r);

// gnuplot's variables for a script, set with `gnuplot -e`. Every value is written as a
// string expression of single-quoted pieces (a quote in the value becomes ."'".) or a number:
// gnuplot expands backquotes and macros in double-quoted strings and commands, never in
// single-quoted strings, so nothing from a path, a recipe or a token can run as a command.
typedef struct {
    char text[32768];
    size_t n;
} GnuplotVars;

void gnuplot_string(GnuplotVars* v, const char* name, const char* value);
void gnuplot_number(GnuplotVars* v, const char* name, double value);
// value quoted as gnuplot_string does, into out (n bytes)
void gnuplot_quote(char* out, size_t n, const char* value);
// Runs gnuplot (no shell between) on plots/<script>, found beside the program (its folder's
// ../plots), so any working directory works. Dies naming the script when gnuplot fails.
void gnuplot(const char* script, const GnuplotVars* v);

#endif
