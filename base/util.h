// Checked allocation and I/O, error reporting, timing and a counter-based RNG.
// Every failure names the source location and, where there is one, the file.
#ifndef UTIL_H
#define UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// die: an error the user can act on, said in words (no source location); die_at with a source
// location for the failures of the machine or the program (allocation, I/O calls, a device),
// where the location helps a report
void die_at(const char* src, int line, const char* fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
#define die(...) die_at(NULL, 0, __VA_ARGS__)
// handler runs after die's message, before the exit (a data-parallel job aborts all its ranks)
void on_die(void (*handler)(void));

void* malloc_check(size_t size, const char* src, int line);
void* calloc_check(size_t n, size_t size, const char* src, int line);
#define mallocCheck(size) malloc_check(size, __FILE__, __LINE__)
#define callocCheck(n, size) calloc_check(n, size, __FILE__, __LINE__)

FILE* fopen_check(const char* path, const char* mode, const char* src, int line);
void fread_check(void* ptr, size_t size, size_t n, FILE* f, const char* path, const char* src, int line);
void fwrite_check(const void* ptr, size_t size, size_t n, FILE* f, const char* path, const char* src, int line);
void fclose_check(FILE* f, const char* path, const char* src, int line);
#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)
#define freadCheck(ptr, size, n, f, path) fread_check(ptr, size, n, f, path, __FILE__, __LINE__)
#define fwriteCheck(ptr, size, n, f, path) fwrite_check(ptr, size, n, f, path, __FILE__, __LINE__)
#define fcloseCheck(f, path) fclose_check(f, path, __FILE__, __LINE__)

// Whole-file writes go to a temporary beside path and are renamed into place, so a reader never
// sees a half-written file. tmp_path fills buf with the temporary name: "<path>.tmp", or
// "<path>.tmp.1" and on where that exists, created by this call (never a path that existed before). rename_check syncs the file to
// disk before the rename and its folder after, so the new file survives a power loss too. Until
// then the temporary is pending: die removes it (file or folder), so a failed write leaves none.
void tmp_path(char* buf, size_t n, const char* path);
// snprintf for paths: dies when the result does not fit buf (n bytes), so a long folder name is
// an error naming it, never a silently shortened path
void path_printf(char* buf, size_t n, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void rename_check(const char* from, const char* to, const char* src, int line);
#define renameCheck(from, to) rename_check(from, to, __FILE__, __LINE__)
void mkdir_p(const char* path);
void copy_file(const char* from, const char* to);  // whole, through a temporary file and rename
void remove_tree(const char* path);  // a file or folder and all it holds, without a shell
// A folder written whole: tmp_folder makes an empty folder of its own beside path to write into
// ("<path>.tmp", or the next free name; one an interrupted writer of this program left is
// taken again, any other left alone), replace_folder
// puts it in place of path in one atomic exchange (the old folder, if any, is then removed),
// so an interrupted writer never leaves a mix of old and new files under path.
void tmp_folder(char* buf, size_t n, const char* path);
void replace_folder(const char* tmp, const char* path);
// One writer per folder: an exclusive lock on dir/.lock (which holds the owner's pid), held
// until unlock_folder or the process ends. Dies naming `what` and the owner when it is taken.
int lock_folder(const char* dir, const char* what);
void unlock_folder(int fd);
char* read_text_file(const char* path, size_t* len);  // NUL-terminated, caller frees
// Dies when the output `what` (a file or folder this command writes) is, contains or lies inside
// one of its inputs, the paths compared resolved (./, .. and symbolic links count): a command
// never writes over what it reads
void refuse_output_over_input(const char* what, const char* output, const char* const* inputs, int n_inputs);
// Dies when path exists and is not a regular file: an output file replaces only a file
void refuse_replacing_non_file(const char* what, const char* path);
// Dies when path exists and is not a folder this program made, known by its file `marker`
// (an empty folder passes): an output folder replaces only one of its kind
void refuse_replacing_foreign_folder(const char* what, const char* path, const char* marker);

// text for an error message on one line: a newline as \n, a tab as \t, other control bytes and
// bytes from 0x80 as \xHH; cut to fit out (n bytes)
void printable_text(char* out, size_t n, const char* text);

// Whether text is a plain decimal number as a recipe or option states one: an optional '-',
// digits with at most one '.', and an exponent (e or E, optional sign, digits) where fraction
// is set; no '+', spaces, hexadecimal ("0x10", which strtol and strtof would read), inf or nan
int plain_number(const char* text, int fraction);

double wall_time(void);
void sort_doubles(double* x, size_t n);  // ascending, in place
// A file of the source tree the program was built in (plots/attn.gp, data/cities.txt), found
// from the executable: <its folder>/../<relative> (build/difftx) or ../../ (build/san/difftx),
// so that any working folder will do. Dies naming what is missing.
void source_file_path(char* out, size_t n, const char* relative);
// The name of names nearest to word in edits, or NULL when none is near (a typo, not another word)
const char* closest_name(const char* word, const char* const* names, int n);
// "1h05m" or "3m07s"
void format_duration(char* buf, size_t n, double seconds);
// "hostname, CPU model name" for provenance records
void machine_description(char* buf, size_t n);
size_t peak_rss_bytes(void);
double machine_memory_bytes(void);  // physical memory

// splitmix64: the whole state is one word. Initialisation and data order are pure functions
// of (seed, index), so a checkpoint holds no RNG state.
uint64_t rng_next(uint64_t* state);
float rng_uniform(uint64_t* state);  // [0, 1)
float rng_normal(uint64_t* state);   // N(0, 1), Box-Muller
uint64_t hash64(uint64_t x);
// FNV-1a of n bytes, continuing from h (FNV1A_START for a fresh hash), so a text read in
// pieces hashes as if whole
#define FNV1A_START 1469598103934665603ull
uint64_t fnv1a(uint64_t h, const void* bytes, size_t n);

#endif
