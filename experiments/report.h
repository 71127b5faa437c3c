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
void report_open(Report* r, const char* path, int to_stdout);
void report_printf(Report* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void report_close(Report* r);

// Runs `gnuplot -e "<variables>" script`; variables is printf-formatted gnuplot assignments.
// Dies naming the command when gnuplot fails.
void gnuplot(const char* script, const char* variables, ...) __attribute__((format(printf, 2, 3)));

#endif
