#define _GNU_SOURCE
#include "dataset.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../model/util.h"

typedef struct {
    char** paths;
    int n, cap;
} PathList;

static void add_path(PathList* list, const char* path) {
    if (list->n == list->cap) {
        list->cap = list->cap ? 2 * list->cap : 256;
        char** grown = realloc(list->paths, list->cap * sizeof(char*));
        if (!grown) die("out of memory listing the corpus");
        list->paths = grown;
    }
    list->paths[list->n++] = strdup(path);
}

static void collect(PathList* list, const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) die("corpus input '%s': %s", path, strerror(errno));
    if (S_ISREG(st.st_mode)) {
        add_path(list, path);
        return;
    }
    if (!S_ISDIR(st.st_mode)) die("corpus input '%s' is neither a file nor a folder", path);
    DIR* dir = opendir(path);
    if (!dir) die("cannot open folder '%s': %s", path, strerror(errno));
    struct dirent* e;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        char child[4096];
        if ((size_t)snprintf(child, sizeof(child), "%s/%s", path, e->d_name) >= sizeof(child)) die("path too long under '%s'", path);
        collect(list, child);
    }
    closedir(dir);
}

static int compare_paths(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

void shard_write(const char* path, const int* ids, size_t n, int n_docs, const Tokenizer* tok, int block) {
    if (n > 0x7FFFFFFFu) die("'%s': too many tokens for one shard (%zu)", path, n);
    uint16_t* out = mallocCheck(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) out[i] = (uint16_t)ids[i];
    int32_t header[256] = {SHARD_MAGIC, SHARD_VERSION, (int32_t)n, n_docs, tok->vocab_size, block,
                           (int32_t)(uint32_t)tok->hash, (int32_t)(uint32_t)(tok->hash >> 32)};
    char tmp[4096];
    tmp_path(tmp, sizeof(tmp), path);
    FILE* f = fopenCheck(tmp, "wb");
    fwriteCheck(header, sizeof(int32_t), 256, f, tmp);
    fwriteCheck(out, sizeof(uint16_t), n, f, tmp);
    fcloseCheck(f, tmp);
    renameCheck(tmp, path);
    free(out);
}

static void write_shard(const char* path, const Tokenizer* tok, char** texts, size_t* lens, const int* docs, int n_docs) {
    size_t cap = 1;
    for (int i = 0; i < n_docs; i++) cap += lens[docs[i]] + 1;
    int* ids = mallocCheck(cap * sizeof(int));
    size_t n = 0;
    for (int i = 0; i < n_docs; i++) {
        ids[n++] = TOKEN_EOT;
        n += tokenizer_encode(tok, texts[docs[i]], lens[docs[i]], ids + n);
    }
    shard_write(path, ids, n, n_docs, tok, 0);
    printf("  %s: %d documents, %zu tokens\n", strrchr(path, '/') + 1, n_docs, n);
    free(ids);
}

void dataset_prepare(const char* out_dir, const char* const* inputs, int n_inputs, int vocab_size) {
    PathList list = {0};
    for (int i = 0; i < n_inputs; i++) collect(&list, inputs[i]);
    if (list.n < 2) die("the corpus needs at least 2 documents (files) to split into train and validation, found %d", list.n);
    qsort(list.paths, list.n, sizeof(char*), compare_paths);
    char** texts = mallocCheck(list.n * sizeof(char*));
    size_t* lens = mallocCheck(list.n * sizeof(size_t));
    int *train = mallocCheck(list.n * sizeof(int)), *val = mallocCheck(list.n * sizeof(int));
    int n_train = 0, n_val = 0;
    size_t bytes = 0;
    for (int i = 0; i < list.n; i++) {
        texts[i] = read_text_file(list.paths[i], &lens[i]);
        bytes += lens[i];
        if (i % VAL_EVERY == VAL_EVERY - 1) val[n_val++] = i; else train[n_train++] = i;
    }
    if (n_val == 0) val[n_val++] = train[--n_train];  // fewer than VAL_EVERY documents
    printf("prepare: %d documents (%zu bytes), %d train, %d validation\n", list.n, bytes, n_train, n_val);

    const char** train_texts = mallocCheck(n_train * sizeof(char*));
    size_t* train_lens = mallocCheck(n_train * sizeof(size_t));
    for (int i = 0; i < n_train; i++) {
        train_texts[i] = texts[train[i]];
        train_lens[i] = lens[train[i]];
    }
    double t0 = wall_time();
    Tokenizer tok;
    tokenizer_train(&tok, train_texts, train_lens, n_train, vocab_size);
    printf("  tokenizer: %d ids (%d merges) trained in %.1f s\n", tok.vocab_size, tok.n_merges, wall_time() - t0);

    char dir[4096], path[4200];
    tmp_folder(dir, sizeof(dir), out_dir);
    path_printf(path, sizeof(path), "%s/tokenizer.bin", dir);
    tokenizer_save(&tok, path);
    path_printf(path, sizeof(path), "%s/train.bin", dir);
    write_shard(path, &tok, texts, lens, train, n_train);
    path_printf(path, sizeof(path), "%s/val.bin", dir);
    write_shard(path, &tok, texts, lens, val, n_val);
    replace_folder(dir, out_dir);
    printf("  wrote %s/{tokenizer,train,val}.bin\n", out_dir);

    tokenizer_free(&tok);
    for (int i = 0; i < list.n; i++) {
        free(texts[i]);
        free(list.paths[i]);
    }
    free(list.paths);
    free(texts);
    free(lens);
    free(train);
    free(val);
    free(train_texts);
    free(train_lens);
}

void shard_load(Shard* s, const char* path) {
    FILE* f = fopenCheck(path, "rb");
    int32_t header[256];
    freadCheck(header, sizeof(int32_t), 256, f, path);
    if (header[0] != SHARD_MAGIC) die("'%s' is not a token shard (bad magic)", path);
    if (header[1] != 1 && header[1] != SHARD_VERSION) die("'%s': shard version %d, this program reads 1 and %d", path, header[1], SHARD_VERSION);
    if (header[2] < 2) die("'%s': shard holds %d tokens, too few to train on", path, header[2]);
    s->n_tokens = (size_t)header[2];
    s->n_documents = header[3];
    s->vocab_size = header[4];
    s->block = header[5];
    s->tokenizer_hash = header[1] == 1 ? 0 : (uint64_t)(uint32_t)header[6] | (uint64_t)(uint32_t)header[7] << 32;
    s->tokens = mallocCheck(s->n_tokens * sizeof(uint16_t));
    freadCheck(s->tokens, sizeof(uint16_t), s->n_tokens, f, path);
    fcloseCheck(f, path);
    for (size_t i = 0; i < s->n_tokens; i++) {
        if (s->tokens[i] >= s->vocab_size) die("'%s': token %zu has id %u outside the vocabulary (%d)", path, i, s->tokens[i], s->vocab_size);
    }
}

void shard_free(Shard* s) { free(s->tokens); }

void data_open(DataDir* d, const char* dir, int parts) {
    memset(d, 0, sizeof(*d));
    path_printf(d->dir, sizeof(d->dir), "%s", dir);
    d->parts = parts;
    char path[4200];
    path_printf(path, sizeof(path), "%s/tokenizer.bin", dir);
    if (access(path, R_OK) != 0) die("key 'data': '%s' has no readable tokenizer.bin; run `make data` or `difftx prepare` first", dir);
    tokenizer_load(&d->tok, path);
    Shard* shards[2] = {&d->train, &d->val};
    static const char* names[2] = {"train.bin", "val.bin"};
    for (int i = 0; i < 2; i++) {
        if (!(parts & (1 << i))) continue;
        path_printf(path, sizeof(path), "%s/%s", dir, names[i]);
        shard_load(shards[i], path);
        if (shards[i]->vocab_size != d->tok.vocab_size) {
            die("key 'data': '%s' has vocabulary %d but '%s/tokenizer.bin' has %d", path, shards[i]->vocab_size, dir,
                d->tok.vocab_size);
        }
        if (shards[i]->tokenizer_hash && shards[i]->tokenizer_hash != d->tok.hash) {
            die("key 'data': '%s' was made with another tokenizer than '%s/tokenizer.bin'; run `difftx prepare` again", path, dir);
        }
    }
}

void data_close(DataDir* d) {
    tokenizer_free(&d->tok);
    if (d->parts & DATA_TRAIN) shard_free(&d->train);
    if (d->parts & DATA_VAL) shard_free(&d->val);
}

void loader_init(Loader* l, const Shard* shard, int T, uint64_t seed) {
    if (shard->n_tokens < (size_t)T + 1) die("shard of %zu tokens is shorter than one window of seq_len + 1 = %d", shard->n_tokens, T + 1);
    l->shard = shard;
    l->T = T;
    l->seed = seed;
    l->n_windows = (shard->n_tokens - 1) / T;
    l->epoch = -1;
    l->order = mallocCheck(l->n_windows * sizeof(uint32_t));
}

void loader_free(Loader* l) { free(l->order); }

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
        copy_window(l->shard, window * l->T, l->T, inputs + (size_t)b * l->T, targets + (size_t)b * l->T);
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
