// The recipe file format, apart from what its keys mean (config.c reads the run keys,
// studies/recipe.c the sections of the table runners).
#ifndef RECIPE_FORMAT_H
#define RECIPE_FORMAT_H

#include <stddef.h>

// The recipe format, one line at a time: "[section]" lines, "key = value" lines, comment lines
// starting with '#' or ';', blank lines. Whitespace around a line, a key or a value does not
// count; lines have any length; there are no continuation lines and no comments after a value
// (a value may hold '#' and ';'); a key repeated within a section, a section repeated, a line of any other shape
// and a NUL byte are errors. fn gets section "" before the first section line and returns NULL
// or what is wrong with the key; it is also called at each section line, with key and value
// NULL, so that a section can be refused at its own line; every error dies naming origin and
// the line.
typedef const char* (*RecipeLineFn)(void* ctx, const char* section, const char* key, const char* value);
void recipe_parse(const char* text, size_t len, const char* origin, RecipeLineFn fn, void* ctx);
// The text of a recipe file; dies naming it when it is missing or not a regular file
char* read_recipe_file(const char* path, size_t* len);
// A path value read from the recipe file recipe_path into out (n bytes): an absolute one as it
// is, a relative one from the recipe's folder, made absolute (., .. and repeated slashes folded
// away, symbolic links kept) so that where it was read from no longer matters. Returns NULL, or
// what is wrong (static storage).
const char* recipe_path_value(char* out, size_t n, const char* value, const char* recipe_path);

#endif
