// The recipe file format: sections, key = value lines, comments; see recipe_format.h.
#include "recipe_format.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

// Trims spaces and tabs from both ends of s (in place); returns the new start
static char* trim(char* s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
    return s;
}

// The sections and keys read so far, each with its line, to refuse a repeat
typedef struct {
    char** id;
    int* line;
    int n;
} Seen;

// Records id (owned from here) at line; returns the line it was first seen on, or 0
static int seen_before(Seen* s, char* id, int line, const char* origin) {
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->id[i], id) == 0) return s->line[i];
    }
    s->id = realloc(s->id, (s->n + 1) * sizeof(char*));
    s->line = realloc(s->line, (s->n + 1) * sizeof(int));
    if (!s->id || !s->line) die("out of memory reading %s", origin);
    s->id[s->n] = id;
    s->line[s->n++] = line;
    return 0;
}

void recipe_parse(const char* text, size_t len, const char* origin, RecipeLineFn fn, void* ctx) {
    if (memchr(text, 0, len)) {
        size_t at = (const char*)memchr(text, 0, len) - text;
        int line = 1;
        for (size_t i = 0; i < at; i++) line += text[i] == '\n';
        die("%s:%d: a NUL byte (not a text file?)", origin, line);
    }
    char* copy = mallocCheck(len + 1);
    memcpy(copy, text, len);
    copy[len] = 0;
    Seen seen = {NULL, NULL, 0};  // "[section]" and "section\nkey" of every line so far
    char section[4096] = "";  // a section name: like a value, under 4096 bytes
    int line = 0;
    for (char *at = copy, *next; at; at = next) {
        next = strchr(at, '\n');
        if (next) *next++ = 0;
        line++;
        char* s = trim(at);
        if (!*s || *s == '#' || *s == ';') continue;
        if (*s == '[') {
            char* close = strchr(s, ']');
            if (!close || close[1]) die("%s:%d: a section line is '[name]' alone", origin, line);
            *close = 0;
            char* name = trim(s + 1);
            if (!*name || strlen(name) >= sizeof(section)) die("%s:%d: a section needs a name (under %zu bytes)", origin, line, sizeof(section));
            strcpy(section, name);
            // a section is one block: a second [name] would add keys the first does not show
            size_t slen = strlen(name) + 3;
            char* id = mallocCheck(slen);
            snprintf(id, slen, "[%s]", name);
            int first = seen_before(&seen, id, line, origin);
            if (first) die("%s:%d: section '[%s]' repeats line %d", origin, line, name, first);
            const char* err = fn(ctx, section, NULL, NULL);
            if (err) die("%s:%d: %s", origin, line, err);
            continue;
        }
        char* eq = strchr(s, '=');
        if (!eq) die("%s:%d: expected 'key = value'", origin, line);
        *eq = 0;
        char *key = trim(s), *value = trim(eq + 1);
        if (!*key) die("%s:%d: a key is missing before '='", origin, line);
        size_t klen = strlen(section) + strlen(key) + 2;
        char* id = mallocCheck(klen);
        snprintf(id, klen, "%s\n%s", section, key);  // no section line holds a newline: ids never collide
        int first = seen_before(&seen, id, line, origin);
        if (first) die("%s:%d: key '%s' repeats line %d", origin, line, key, first);
        const char* err = fn(ctx, section, key, value);
        if (err) die("%s:%d: %s", origin, line, err);
    }
    for (int i = 0; i < seen.n; i++) free(seen.id[i]);
    free(seen.id);
    free(seen.line);
    free(copy);
}

char* read_recipe_file(const char* path, size_t* len) {
    struct stat st;
    if (stat(path, &st) != 0) die("cannot open recipe '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) die("recipe '%s' is not a regular file", path);
    return read_text_file(path, len);
}

const char* recipe_path_value(char* out, size_t n, const char* value, const char* recipe_path) {
    static char msg[160];
    if (!value[0] || value[0] == '/') {
        if (strlen(value) >= n) return "the path is too long";
        strcpy(out, value);
        return NULL;
    }
    char cwd[4096] = "";
    if (recipe_path[0] != '/' && !getcwd(cwd, sizeof(cwd))) {
        snprintf(msg, sizeof(msg), "cannot read the working folder to resolve '%.60s': %s", value, strerror(errno));
        return msg;
    }
    const char* slash = strrchr(recipe_path, '/');
    size_t cap = strlen(cwd) + strlen(recipe_path) + strlen(value) + 4;
    char* joined = mallocCheck(cap);
    snprintf(joined, cap, "%s/%.*s/%s", cwd, slash ? (int)(slash - recipe_path) : 0, recipe_path, value);
    // fold the components: "" and "." vanish, ".." takes the previous one away (none above the root)
    size_t len = 0;
    for (char *part = joined, *next; part; part = next) {
        next = strchr(part, '/');
        if (next) *next++ = 0;
        if (!*part || strcmp(part, ".") == 0) continue;
        if (strcmp(part, "..") == 0) {
            while (len && out[len - 1] != '/') len--;
            if (len) len--;
            continue;
        }
        size_t k = strlen(part);
        if (len + k + 2 > n) {
            free(joined);
            return "the path, read from the recipe's folder, is too long";
        }
        out[len++] = '/';
        memcpy(out + len, part, k);
        len += k;
    }
    if (!len) out[len++] = '/';
    out[len] = 0;
    free(joined);
    return NULL;
}
