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
// text (a recipe's label) as one Markdown table cell into out (n bytes): '|' escaped as '\\|',
// which would otherwise end the cell and shift the row's columns; cut, never overrun
void markdown_cell(char* out, size_t n, const char* text);

// A row's numbers over its seeds: the mean and the sample standard deviation (0 for one seed)
// A figure's data file, written under a temporary name and renamed by data_file_close, so
// neither gnuplot nor a reader ever sees half of one
typedef struct {
    FILE* f;
    char path[4200], tmp[4300];
} DataFile;
void data_file_open(DataFile* d, const char* path);
void data_file_close(DataFile* d);

typedef struct {
    double mean, std;
} Spread;
// The spread of v[0], v[stride], ..., v[(n - 1) stride]; n >= 1
Spread spread_of(const double* v, int n, int stride);
// "0.553 ± 0.041" over several seeds, "0.553" for one, with digits decimals; returns out
const char* spread_text(char* out, size_t n, Spread s, int seeds, int digits);

// A gnuplot figure: plots/<script> run with no shell between, in a private folder made for
// the call, where gnuplot sees only names this program makes. Nothing taken from data or a
// path reaches gnuplot's command language, so no quoting rule is needed:
//   numbers        `-e "name=value"`, formatted here;
//   strings        (titles, names, labels) written to strings.tsv in the folder, which the
//                  script reads as data through plots/strings.gp: str('name');
//   input files    symbolic links in the folder; the variable holds the link's name;
//   output files   written in the folder under a fixed name, renamed into place when gnuplot
//                  has finished (so a figure is never half-written); all in one folder.
typedef struct {
    char numbers[4096];
    size_t n;
    int n_strings, n_inputs, n_outputs;
    char string_name[16][32];
    char* string_value[16];
    char input_name[16][32], input_path[16][4096];
    char output_name[4][32], output_path[4][4096];
} GnuplotVars;

void gnuplot_init(GnuplotVars* v);
void gnuplot_number(GnuplotVars* v, const char* name, double value);
// value as gnuplot_data_text writes it
void gnuplot_string(GnuplotVars* v, const char* name, const char* value);
// text as one field of a tab-separated line gnuplot reads as data: control characters become
// spaces, a double quote (which would end the field) two single quotes, a backslash (which
// gnuplot unescapes) a doubled one; into out (n bytes, cut to fit)
void gnuplot_data_text(char* out, size_t n, const char* text);
void gnuplot_input(GnuplotVars* v, const char* name, const char* path);
void gnuplot_output(GnuplotVars* v, const char* name, const char* path);
// Runs gnuplot on plots/<script>, found beside the program (its folder's ../plots), so any
// working directory works; frees v's strings. Dies naming the script when gnuplot fails,
// leaving the outputs as they were.
void gnuplot(const char* script, GnuplotVars* v);

#endif
