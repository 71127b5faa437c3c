#define _GNU_SOURCE
#include "dataset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/util.h"

void shard_header(int32_t header[256], size_t n, int n_docs, const Tokenizer* tok, int block) {
    int32_t fields[8] = {SHARD_MAGIC, SHARD_VERSION, (int32_t)n, n_docs, tok->vocab_size, block,
                         (int32_t)(uint32_t)tok->hash, (int32_t)(uint32_t)(tok->hash >> 32)};
    memset(header, 0, 256 * sizeof(int32_t));
    memcpy(header, fields, sizeof(fields));
}

void shard_write(const char* path, const int* ids, size_t n, int n_docs, const Tokenizer* tok, int block) {
    if (n > 0x7FFFFFFFu) die("'%s': too many tokens for one shard (%zu)", path, n);
    uint16_t* out = mallocCheck(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) out[i] = (uint16_t)ids[i];
    int32_t header[256];
    shard_header(header, n, n_docs, tok, block);
    char tmp[4096];
    tmp_path(tmp, sizeof(tmp), path);
    FILE* f = fopenCheck(tmp, "wb");
    fwriteCheck(header, sizeof(int32_t), 256, f, tmp);
    fwriteCheck(out, sizeof(uint16_t), n, f, tmp);
    fcloseCheck(f, tmp);
    renameCheck(tmp, path);
    free(out);
}

// Four ids a step (a multiply per 8 bytes keeps pace with the page cache); any changed id, or
// the same ids moved, changes it
static uint64_t content_hash(const uint16_t* ids, size_t n) {
    uint64_t h = hash64(n);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint64_t word;
        memcpy(&word, ids + i, sizeof(word));
        h = (h ^ word) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ ids[i]) * 0x100000001b3ULL;
    return hash64(h);
}

void shard_load(Shard* s, const char* path) {
    memset(s, 0, sizeof(*s));
    int fd = open(path, O_RDONLY);
    if (fd < 0) die("cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) die("cannot read '%s': %s", path, strerror(errno));
    if (st.st_size < SHARD_HEADER_BYTES) die("'%s' is not a token shard (%lld bytes, shorter than a header)", path, (long long)st.st_size);
    s->map_bytes = (size_t)st.st_size;
    s->map = mmap(NULL, s->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (s->map == MAP_FAILED) die("cannot map '%s': %s", path, strerror(errno));
    const int32_t* header = s->map;
    if (header[0] == SHARD_MAGIC) {
        if (header[1] != 1 && header[1] != SHARD_VERSION) die("'%s': shard version %d, this program reads 1 and %d", path, header[1], SHARD_VERSION);
        s->n_documents = header[3];
        s->vocab_size = header[4];
        s->block = header[5];
        s->tokenizer_hash = header[1] == 1 ? 0 : (uint64_t)(uint32_t)header[6] | (uint64_t)(uint32_t)header[7] << 32;
    } else if (header[0] == LLMC_SHARD_MAGIC) {
        if (header[1] != 1) die("'%s': llm.c shard version %d, this program reads 1", path, header[1]);
        s->vocab_size = GPT2_VOCAB;
        s->tokenizer_hash = GPT2_IDS_HASH;
    } else {
        die("'%s' is not a token shard (magic %d; expected %d, or llm.c's %d)", path, header[0], SHARD_MAGIC, LLMC_SHARD_MAGIC);
    }
    if (header[2] < 2) die("'%s': shard holds %d tokens, too few to train on", path, header[2]);
    s->n_tokens = (size_t)(uint32_t)header[2];
    if (s->map_bytes != SHARD_HEADER_BYTES + 2 * s->n_tokens) {
        die("'%s' has %zu bytes, but its header's %zu tokens make %zu (cut short?)", path, s->map_bytes, s->n_tokens,
            SHARD_HEADER_BYTES + 2 * s->n_tokens);
    }
    s->tokens = (uint16_t*)((char*)s->map + SHARD_HEADER_BYTES);
    // a branch-free maximum vectorizes: billions of tokens are checked in seconds, on one core,
    // since OpenMP is not safe in the processes table6 forks after opening its data
    uint16_t largest = 0;
    for (size_t i = 0; i < s->n_tokens; i++) largest = s->tokens[i] > largest ? s->tokens[i] : largest;
    s->content_hash = content_hash(s->tokens, s->n_tokens);
    if (largest >= s->vocab_size) {
        size_t i = 0;
        while (s->tokens[i] < s->vocab_size) i++;
        die("'%s': token %zu has id %u outside the vocabulary (%d)", path, i, s->tokens[i], s->vocab_size);
    }
}

void shard_free(Shard* s) {
    if (s->map) munmap(s->map, s->map_bytes);
}

// ---- data folders ----

static int compare_names(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

// The shard files of a split, sorted: exactly `name`.bin, else name_<digits>.bin (this project's
// folders); or files holding "_name" and ending in .bin (llm.c's)
static int is_split_file(const char* file, const char* name, int llmc) {
    size_t n = strlen(file), k = strlen(name);
    if (n < 5 || strcmp(file + n - 4, ".bin") != 0) return 0;
    if (llmc) {
        char pattern[64];
        snprintf(pattern, sizeof(pattern), "_%s", name);
        return strstr(file, pattern) != NULL;
    }
    if (strncmp(file, name, k) != 0) return 0;
    if (n == k + 4) return 1;
    if (file[k] != '_' || n == k + 5) return 0;
    for (size_t i = k + 1; i < n - 4; i++) {
        if (file[i] < '0' || file[i] > '9') return 0;
    }
    return 1;
}

static void list_split(ShardList* list, const char* dir, const char* name, int llmc) {
    DIR* d = opendir(dir);
    if (!d) die("key 'data': cannot open folder '%s': %s", dir, strerror(errno));
    char** names = NULL;
    int n = 0, cap = 0, single = 0;
    struct dirent* e;
    while ((e = readdir(d))) {
        if (!is_split_file(e->d_name, name, llmc)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            names = realloc(names, cap * sizeof(char*));
            if (!names) die("out of memory listing '%s'", dir);
        }
        names[n++] = strdup(e->d_name);
        single |= !llmc && strlen(e->d_name) == strlen(name) + 4;
    }
    closedir(d);
    if (n == 0 && llmc) {
        die("key 'data': '%s' has neither tokenizer.bin nor llm.c's %s shards (names holding _%s); run `make data` or "
            "`difftx prepare` first", dir, name, name);
    }
    if (n == 0) die("key 'data': '%s' holds no %s shard (expected %s.bin, or %s_000000.bin, ...)", dir, name, name, name);
    if (single && n > 1) die("key 'data': '%s' holds both %s.bin and numbered %s shards; keep one kind", dir, name, name);
    qsort(names, n, sizeof(char*), compare_names);
    list->n = n;
    list->paths = callocCheck(n, sizeof(list->paths[0]));
    for (int i = 0; i < n; i++) {
        path_printf(list->paths[i], sizeof(list->paths[i]), "%s/%s", dir, names[i]);
        free(names[i]);
    }
    free(names);
}

static void load_split(ShardList* list, const DataDir* d) {
    list->parts = callocCheck(list->n, sizeof(Shard));
    list->n_tokens = 0;
    for (int i = 0; i < list->n; i++) {
        Shard* s = &list->parts[i];
        shard_load(s, list->paths[i]);
        list->n_tokens += s->n_tokens;
        if (s->vocab_size != d->tok.vocab_size) {
            die("key 'data': '%s' has vocabulary %d but the folder's tokenizer has %d", list->paths[i], s->vocab_size, d->tok.vocab_size);
        }
        if (s->tokenizer_hash && s->tokenizer_hash != d->tok.hash) {
            die("key 'data': '%s' was made with another tokenizer than '%s/tokenizer.bin'; run `difftx prepare` again",
                list->paths[i], d->dir);
        }
    }
}

void shard_list_free(ShardList* list) {
    for (int i = 0; list->parts && i < list->n; i++) shard_free(&list->parts[i]);
    free(list->parts);
    free(list->paths);
    memset(list, 0, sizeof(*list));
}

// A folder without tokenizer.bin is llm.c's (list_split says so when it holds no shards either)
static int is_llmc_folder(const char* dir) {
    char path[4200];
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        // a relative path is read from the working folder: say which folder was looked at
        char cwd[4096] = "";
        if (dir[0] != '/' && !getcwd(cwd, sizeof(cwd))) cwd[0] = 0;
        die("key 'data': '%s' is not a folder%s%s%s; run `make data` or `difftx prepare` first, or name a folder of llm.c's token shards", dir, cwd[0] ? " (looked for it in " : "",
            cwd, cwd[0] ? ")" : "");
    }
    path_printf(path, sizeof(path), "%s/tokenizer.bin", dir);
    return access(path, F_OK) != 0;
}

void data_list_split(ShardList* list, const char* dir, const char* name) {
    memset(list, 0, sizeof(*list));
    list_split(list, dir, name, is_llmc_folder(dir));
}

// The last folder opened whole and its identity: data_identity's answer without a second pass
static char known_dir[4096], known_identity[DATA_IDENTITY];

// Folds a shard's file name (not its folder), token count and content hash into h
static uint64_t shard_identity(uint64_t h, const char* path, const Shard* s) {
    const char* name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    for (const char* c = name; *c; c++) h = hash64(h ^ (uint64_t)(unsigned char)*c);
    return hash64(hash64(h ^ s->n_tokens) ^ s->content_hash);
}

void data_open(DataDir* d, const char* dir, int parts) {
    memset(d, 0, sizeof(*d));
    path_printf(d->dir, sizeof(d->dir), "%s", dir);
    d->parts = parts;
    d->llmc = is_llmc_folder(dir);
    char path[4200];
    path_printf(path, sizeof(path), "%s/%s", dir, d->llmc ? "gpt2_tokenizer.bin" : "tokenizer.bin");
    if (!d->llmc) tokenizer_load(&d->tok, path);
    else tokenizer_gpt2(&d->tok, access(path, F_OK) == 0 ? path : NULL);
    if (parts & DATA_TRAIN) {
        list_split(&d->train, dir, "train", d->llmc);
        load_split(&d->train, d);
    }
    uint64_t content = hash64(d->tok.hash);
    int n = snprintf(d->identity, sizeof(d->identity), "tokenizer %016llx", (unsigned long long)d->tok.hash);
    if (parts & DATA_TRAIN) {
        for (int i = 0; i < d->train.n; i++) content = shard_identity(content, d->train.paths[i], &d->train.parts[i]);
        n += snprintf(d->identity + n, sizeof(d->identity) - n, "; train %d shard%s, %zu tokens", d->train.n,
                      d->train.n == 1 ? "" : "s", d->train.n_tokens);
    }
    if (parts & DATA_VAL) {
        ShardList val = {0};
        list_split(&val, dir, "val", d->llmc);
        val.n = 1;  // evaluation reads the first
        load_split(&val, d);
        d->val = val.parts[0];
        content = shard_identity(content, val.paths[0], &d->val);
        n += snprintf(d->identity + n, sizeof(d->identity) - n, "; val %zu tokens", d->val.n_tokens);
        free(val.parts);
        free(val.paths);
    }
    snprintf(d->identity + n, sizeof(d->identity) - n, "; content %016llx", (unsigned long long)content);
    if (!realpath(dir, d->absolute)) die("key 'data': cannot resolve '%s': %s", dir, strerror(errno));
    if (parts == (DATA_TRAIN | DATA_VAL)) {
        snprintf(known_dir, sizeof(known_dir), "%s", dir);
        snprintf(known_identity, sizeof(known_identity), "%s", d->identity);
    }
}

const char* data_identity(const char* dir) {
    if (!known_identity[0] || strcmp(known_dir, dir) != 0) {
        DataDir d;
        data_open(&d, dir, DATA_TRAIN | DATA_VAL);
        data_close(&d);
    }
    return known_identity;
}

void data_close(DataDir* d) {
    tokenizer_free(&d->tok);
    shard_list_free(&d->train);
    if (d->parts & DATA_VAL) shard_free(&d->val);
}

int tokenizer_in_folder(Tokenizer* tok, const char* folder, uint64_t hash) {
    char path[4200];
    path_printf(path, sizeof(path), "%s/%s", folder, hash == GPT2_IDS_HASH ? "gpt2_tokenizer.bin" : "tokenizer.bin");
    if (access(path, R_OK) != 0) return 0;
    Tokenizer found;
    if (hash == GPT2_IDS_HASH) tokenizer_gpt2(&found, path);
    else tokenizer_load(&found, path);
    if (found.hash != hash) {
        tokenizer_free(&found);
        return 0;
    }
    *tok = found;
    return 1;
}

void data_copy_tokenizer(const DataDir* d, const char* folder) {
    const char* name = d->llmc ? "gpt2_tokenizer.bin" : "tokenizer.bin";
    char from[4200], to[4200];
    path_printf(from, sizeof(from), "%s/%s", d->dir, name);
    path_printf(to, sizeof(to), "%s/%s", folder, name);
    if (access(from, R_OK) == 0) copy_file(from, to);
}

const Shard* data_single_train_shard(const DataDir* d, const char* purpose) {
    if (d->train.n != 1) die("key 'data': %s reads one training shard, and '%s' has %d", purpose, d->dir, d->train.n);
    return &d->train.parts[0];
}

// ---- batches ----

void loader_init(Loader* l, const ShardList* shards, int T, uint64_t seed) {
    l->shards = shards;
    l->T = T;
    l->seed = seed;
    l->first_window = mallocCheck((shards->n + 1) * sizeof(size_t));
    l->n_windows = 0;
    for (int i = 0; i < shards->n; i++) {
        l->first_window[i] = l->n_windows;
        if (shards->parts[i].n_tokens > (size_t)T) l->n_windows += (shards->parts[i].n_tokens - 1) / T;
    }
    l->first_window[shards->n] = l->n_windows;
    if (l->n_windows == 0) die("the training shards hold no window of seq_len + 1 = %d tokens", T + 1);
    if (l->n_windows > UINT32_MAX) die("%zu training windows: more than this loader indexes (2^32); raise seq_len", l->n_windows);
    l->epoch = -1;
    l->order = mallocCheck(l->n_windows * sizeof(uint32_t));
}

void loader_free(Loader* l) {
    free(l->order);
    free(l->first_window);
}

static void copy_window(const Shard* s, size_t start, int T, int* inputs, int* targets) {
    for (int t = 0; t < T; t++) {
        inputs[t] = s->tokens[start + t];
        targets[t] = s->tokens[start + t + 1];
    }
}

void loader_rows(Loader* l, size_t first_row, int B, int* inputs, int* targets) {
    for (int b = 0; b < B; b++) {
        size_t row = first_row + b;
        long epoch = (long)(row / l->n_windows);
        if (epoch != l->epoch) {  // Fisher-Yates from (seed, epoch)
            uint64_t rng = hash64(l->seed ^ hash64((uint64_t)epoch));
            for (size_t i = 0; i < l->n_windows; i++) l->order[i] = (uint32_t)i;
            for (size_t i = l->n_windows - 1; i > 0; i--) {
                size_t j = rng_next(&rng) % (i + 1);
                uint32_t tmp = l->order[i];
                l->order[i] = l->order[j];
                l->order[j] = tmp;
            }
            l->epoch = epoch;
        }
        size_t window = l->order[row % l->n_windows];
        int lo = 0, hi = l->shards->n - 1;  // the shard holding it: the last whose first window is <= it
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (l->first_window[mid] <= window) lo = mid; else hi = mid - 1;
        }
        copy_window(&l->shards->parts[lo], (window - l->first_window[lo]) * l->T, l->T, inputs + (size_t)b * l->T,
                    targets + (size_t)b * l->T);
    }
}

void loader_eval_rows(const Shard* shard, int T, size_t first_row, int B, int* inputs, int* targets) {
    if (shard->n_tokens < (size_t)T + 1) die("validation shard of %zu tokens is shorter than one window of %d", shard->n_tokens, T + 1);
    size_t n_windows = (shard->n_tokens - 1) / T;
    for (int b = 0; b < B; b++) {
        size_t window = (first_row + b) % n_windows;
        copy_window(shard, window * T, T, inputs + (size_t)b * T, targets + (size_t)b * T);
    }
}
