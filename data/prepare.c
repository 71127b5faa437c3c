#define _GNU_SOURCE
#include "prepare.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/util.h"
#include "dataset.h"
#include "tokenizer.h"

#define PIECE_BYTES (4u << 20)    // the longest text read at once: longer documents come in pieces
#define BATCH_BYTES_PER_THREAD (4u << 20)  // text encoded in parallel between two writes
#define BATCH_BYTES_MAX (64u << 20)
#define MALFORMED_SHOWN 5

// ---- inputs ----
typedef struct {
    char** paths;
    int n, cap;
    size_t bytes;  // all files together
} InputList;

static void add_input(InputList* list, const char* path, size_t bytes) {
    if (list->n == list->cap) {
        list->cap = list->cap ? 2 * list->cap : 256;
        list->paths = realloc(list->paths, list->cap * sizeof(char*));
        if (!list->paths) die("out of memory listing the corpus");
    }
    list->paths[list->n++] = strdup(path);
    list->bytes += bytes;
}

static void collect(InputList* list, const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) die("corpus input '%s': %s", path, strerror(errno));
    if (S_ISREG(st.st_mode)) {
        add_input(list, path, (size_t)st.st_size);
        return;
    }
    if (!S_ISDIR(st.st_mode)) die("corpus input '%s' is neither a file nor a folder", path);
    DIR* dir = opendir(path);
    if (!dir) die("cannot open folder '%s': %s", path, strerror(errno));
    struct dirent* e;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        char child[4096];
        path_printf(child, sizeof(child), "%s/%s", path, e->d_name);
        collect(list, child);
    }
    closedir(dir);
}

static int compare_paths(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

static int is_json_lines(const char* path) {
    size_t n = strlen(path);
    return (n > 6 && strcmp(path + n - 6, ".jsonl") == 0) || (n > 7 && strcmp(path + n - 7, ".ndjson") == 0);
}

// ---- reading documents in order, as units: a JSON line, or a piece of a text file ----
typedef struct {
    int file;
    long line;       // of a JSON line (from 1); 0 in text
    size_t doc;      // the document's number
    int piece;       // its index within the document
    char* data;      // the raw line or text (owned by the unit)
    size_t len;
    // filled by encode_units
    int* ids;
    size_t n_ids;
    char error[160];
} Unit;

typedef struct {
    const InputList* in;
    int file, json;
    FILE* f;
    long line;
    size_t next_doc, consumed;
    int pieces;           // of the current text file so far
    char* buf;            // (PIECE_BYTES) text not yet returned, carry bytes at its start
    size_t carry;
    char* line_buf;
    size_t line_cap;
} Reader;

static void open_file(Reader* r) {
    const char* path = r->in->paths[r->file];
    r->f = fopenCheck(path, "rb");
    char head[8192];
    size_t got = fread(head, 1, sizeof(head), r->f);
    const char* nul = memchr(head, 0, got);
    if (nul) {
        die("corpus input '%s' looks binary (a zero byte at offset %td); decompress it or leave it out", path, nul - head);
    }
    rewind(r->f);
    r->json = is_json_lines(path);
    r->line = 0;
    r->pieces = 0;
    r->carry = 0;
}

// The next unit (0 at the end of the corpus); u->data is the caller's to free
static int reader_next(Reader* r, Unit* u) {
    memset(u, 0, sizeof(*u));
    for (;;) {
        if (!r->f) {
            if (r->file + 1 >= r->in->n) return 0;
            r->file++;
            open_file(r);
        }
        const char* path = r->in->paths[r->file];
        u->file = r->file;
        if (r->json) {
            ssize_t n = getline(&r->line_buf, &r->line_cap, r->f);
            if (n < 0) {
                if (ferror(r->f)) die("cannot read '%s': %s", path, strerror(errno));
                fcloseCheck(r->f, path);
                r->f = NULL;
                continue;
            }
            r->line++;
            r->consumed += (size_t)n;
            size_t i = 0;
            while (i < (size_t)n && isspace((unsigned char)r->line_buf[i])) i++;
            if (i == (size_t)n) continue;  // blank
            u->line = r->line;
            u->doc = r->next_doc++;
            u->data = mallocCheck((size_t)n);
            memcpy(u->data, r->line_buf, (size_t)n);
            u->len = (size_t)n;
            return 1;
        }
        size_t got = fread(r->buf + r->carry, 1, PIECE_BYTES - r->carry, r->f);
        if (ferror(r->f)) die("cannot read '%s': %s", path, strerror(errno));
        r->consumed += got;
        size_t total = r->carry + got;
        int at_end = r->carry + got < PIECE_BYTES;
        if (total == 0 && r->pieces > 0) {
            fcloseCheck(r->f, path);
            r->f = NULL;
            continue;
        }
        size_t cut = at_end ? total : tokenizer_safe_cut(r->buf, total);
        if (r->pieces == 0) r->next_doc++;
        u->doc = r->next_doc - 1;
        u->piece = r->pieces++;
        u->data = mallocCheck(cut);
        memcpy(u->data, r->buf, cut);
        u->len = cut;
        r->carry = total - cut;
        memmove(r->buf, r->buf + cut, r->carry);
        if (at_end && r->carry == 0) {
            fcloseCheck(r->f, path);
            r->f = NULL;
        }
        return 1;
    }
}

static void reader_init(Reader* r, const InputList* in) {
    memset(r, 0, sizeof(*r));
    r->in = in;
    r->file = -1;
    r->buf = mallocCheck(PIECE_BYTES);
}

static void reader_free(Reader* r) {
    free(r->buf);
    free(r->line_buf);
}

// The document text of a unit: the JSON line's "text", decoded into u->data; else the text
// itself. Returns 0 with u->error set for a malformed line.
static int unit_text(Unit* u) {
    if (u->line == 0) return 1;
    json_error_t err;
    json_t* obj = json_loadb(u->data, u->len, JSON_ALLOW_NUL, &err);
    json_t* text = obj && json_is_object(obj) ? json_object_get(obj, "text") : NULL;
    int ok = text && json_is_string(text);
    if (!obj) snprintf(u->error, sizeof(u->error), "not JSON (%.100s, column %d)", err.text, err.column);
    else if (!ok) snprintf(u->error, sizeof(u->error), "no string field \"text\"");
    if (ok) {
        size_t n = json_string_length(text);
        memcpy(u->data, json_string_value(text), n);  // a decoded string is never longer than its JSON
        u->len = n;
    }
    json_decref(obj);
    return ok;
}

// ---- progress ----
typedef struct {
    const char* stage;
    size_t total_bytes;
    double t0, last;
} Progress;

// A line every 5 s, and one at the end (last) with the time taken instead of the time left
static void progress(Progress* p, size_t bytes, size_t docs, int last) {
    double now = wall_time();
    if (!last && now - p->last < 5.0) return;
    p->last = now;
    double mb = 1e6, rate = bytes / mb / (now - p->t0 + 1e-9);
    char eta[32];
    format_duration(eta, sizeof(eta), last ? now - p->t0 : rate > 0 ? (p->total_bytes - bytes) / mb / rate : 0);
    printf("prepare: %s %.1f of %.1f MB (%.0f%%), %zu documents, %.1f MB/s, %s %s\n", p->stage, bytes / mb,
           p->total_bytes / mb, 100.0 * bytes / (p->total_bytes ? p->total_bytes : 1), docs, rate,
           last ? "took" : "eta", eta);
    fflush(stdout);
}

// ---- pass 1: the tokenizer's sample ----
static int is_val_number(size_t doc, size_t n_docs) {
    return n_docs < VAL_EVERY ? doc == n_docs - 1 : doc % VAL_EVERY == VAL_EVERY - 1;
}

typedef struct {
    char** texts;
    size_t* lens;
    size_t* docs;
    int n, cap;
    size_t bytes;
} Sample;

static void sample_add(Sample* s, Unit* u) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->texts = realloc(s->texts, s->cap * sizeof(char*));
        s->lens = realloc(s->lens, s->cap * sizeof(size_t));
        s->docs = realloc(s->docs, s->cap * sizeof(size_t));
        if (!s->texts || !s->lens || !s->docs) die("out of memory holding the tokenizer's sample");
    }
    s->texts[s->n] = u->data;
    s->lens[s->n] = u->len;
    s->docs[s->n] = u->doc;
    s->n++;
    s->bytes += u->len;
    u->data = NULL;
}

// Trains tok on a sample of the training documents; returns the number of documents
static size_t train_tokenizer(Tokenizer* tok, const InputList* in, const PrepareOptions* opt) {
    double fraction = opt->sample_mb * 1e6 / (double)(in->bytes ? in->bytes : 1);
    uint64_t keep_below = fraction >= 1 ? UINT64_MAX : (uint64_t)(fraction * 18446744073709551615.0);
    size_t cap = (size_t)(opt->sample_mb * 1e6 * 1.25);  // a hard bound on the sample's memory
    Sample s = {0};
    Reader r;
    reader_init(&r, in);
    Progress p = {"sampling", in->bytes, wall_time(), wall_time()};
    Unit u;
    while (reader_next(&r, &u)) {
        // validation documents are left out later, once their count is known
        if (hash64(u.doc * 1000003u + (uint64_t)u.piece) <= keep_below && s.bytes + u.len <= cap && unit_text(&u)) sample_add(&s, &u);
        free(u.data);
        progress(&p, r.consumed, r.next_doc, 0);
    }
    progress(&p, r.consumed, r.next_doc, 1);
    size_t n_docs = r.next_doc;
    reader_free(&r);
    if (n_docs < 2) die("the corpus needs at least 2 documents to split into train and validation, found %zu", n_docs);
    if (in->bytes == 0) die("the corpus holds no text: its %d file%s %s empty", in->n, in->n == 1 ? "" : "s", in->n == 1 ? "is" : "are");
    int kept = 0;
    size_t bytes = 0;
    for (int i = 0; i < s.n; i++) {
        if (is_val_number(s.docs[i], n_docs)) {
            free(s.texts[i]);
            continue;
        }
        s.texts[kept] = s.texts[i];
        s.lens[kept++] = s.lens[i];
        bytes += s.lens[i];
    }
    printf("prepare: %zu documents (%zu bytes) in %d files; tokenizer sample %.1f MB%s\n", n_docs, in->bytes, in->n,
           bytes / 1e6, fraction >= 1 ? " (every training document)" : "");
    double t0 = wall_time();
    tokenizer_train(tok, (const char* const*)s.texts, s.lens, kept, opt->vocab_size);
    printf("  tokenizer: %d ids (%d merges) trained in %.1f s\n", tok->vocab_size, tok->n_merges, wall_time() - t0);
    if (tok->vocab_size < opt->vocab_size) {
        fprintf(stderr, "warning: the tokenizer learned %d of the %d ids asked (--vocab): no pair of tokens repeats in its "
                "sample (%zu bytes of training text) any more; models trained on this folder have %d ids\n",
                tok->vocab_size, opt->vocab_size, bytes, tok->vocab_size);
    }
    for (int i = 0; i < kept; i++) free(s.texts[i]);
    free(s.texts);
    free(s.lens);
    free(s.docs);
    return n_docs;
}

// ---- duplicate documents ----
// A document whose text repeats an earlier one's is kept but warned about: a validation document's
// twin in the training split makes the validation loss a memory test. Compared by a 63-bit FNV-1a
// hash of the text (fnv1a), streamed over the document's pieces, with the split in the low bit. A slot
// is 8 bytes and the table at most half full; past DUPLICATE_SLOTS_MAX slots it stops checking
// (saying so), so prepare's memory stays bounded whatever the number of documents.
#define DUPLICATE_SLOTS_MAX (1u << 22)
typedef struct {
    uint64_t* slots;  // hash with its low bit replaced by "in validation"; 0 for an empty slot
    size_t cap, used;
    uint64_t current;  // the hash of the document being read so far
    int current_in_val;
    size_t current_bytes;  // 0 when no document is being read
    const char* current_name;
    long current_line;
    long repeats, across;
    int stopped;
} Duplicates;

static void duplicates_insert(uint64_t* slots, size_t cap, uint64_t key) {
    size_t j = (key >> 1) & (cap - 1);
    while (slots[j]) j = (j + 1) & (cap - 1);
    slots[j] = key;
}

// Ends the current document: remembered, or warned about when its text was seen before
static void duplicates_end_doc(Duplicates* d) {
    if (d->current_bytes == 0 || d->stopped) return;
    d->current_bytes = 0;
    uint64_t key = ((d->current | 2) & ~1ull) | (uint64_t)d->current_in_val;  // bit 1 set: never 0, the empty slot
    if (2 * (d->used + 1) > d->cap) {
        if (2 * d->cap > DUPLICATE_SLOTS_MAX) {
            fprintf(stderr, "warning: the duplicate check stops at %zu documents, the most it holds; later ones are not checked\n", d->used);
            d->stopped = 1;
            return;
        }
        size_t cap = d->cap ? 2 * d->cap : 1024;
        uint64_t* slots = callocCheck(cap, sizeof(uint64_t));
        for (size_t i = 0; i < d->cap; i++) {
            if (d->slots[i]) duplicates_insert(slots, cap, d->slots[i]);
        }
        free(d->slots);
        d->slots = slots;
        d->cap = cap;
    }
    size_t j = (key >> 1) & (d->cap - 1);
    while (d->slots[j] && d->slots[j] >> 1 != key >> 1) j = (j + 1) & (d->cap - 1);
    if (!d->slots[j]) {
        d->slots[j] = key;
        d->used++;
        return;
    }
    int across = (d->slots[j] & 1) != (key & 1);
    if (d->repeats++ < MALFORMED_SHOWN) {
        char where[32] = "";
        if (d->current_line) snprintf(where, sizeof(where), ":%ld", d->current_line);
        fprintf(stderr, "warning: %s%s: the same text as an earlier document%s\n", d->current_name, where,
                across ? (key & 1 ? " of the training split, while this one is in validation" : " of the validation split, while this one is in training") : "");
    }
    d->across += across;
}

static void duplicates_add(Duplicates* d, const InputList* in, const Unit* u, int in_val) {
    if (u->piece == 0) {
        duplicates_end_doc(d);
        d->current = FNV1A_START;
        d->current_in_val = in_val;
        d->current_name = in->paths[u->file];
        d->current_line = u->line;
    }
    d->current = fnv1a(d->current, u->data, u->len);
    d->current_bytes += u->len;
}

// ---- pass 2: shards written as they fill ----
typedef struct {
    char dir[4096];
    const char* name;
    const Tokenizer* tok;
    size_t limit;
    FILE* f;
    char path[4200];
    size_t n_tokens, total_tokens;
    int n_docs, files;
    long total_docs;
} ShardWriter;

static void writer_finish_file(ShardWriter* w) {
    if (!w->f) return;
    int32_t header[256];
    shard_header(header, w->n_tokens, w->n_docs, w->tok, 0);
    if (fseek(w->f, 0, SEEK_SET) != 0) die("cannot write '%s': %s", w->path, strerror(errno));
    fwriteCheck(header, sizeof(int32_t), 256, w->f, w->path);
    fcloseCheck(w->f, w->path);
    w->f = NULL;
}

// ids (n) of one unit; a shard ends before a unit that would take it past the limit
static void writer_add(ShardWriter* w, const int* ids, size_t n, int starts_doc) {
    if (w->f && w->n_tokens > 0 && w->n_tokens + n > w->limit) writer_finish_file(w);
    if (!w->f) {
        path_printf(w->path, sizeof(w->path), "%s/%s_%06d.bin", w->dir, w->name, w->files++);
        w->f = fopenCheck(w->path, "wb");
        int32_t zeros[256] = {0};  // the header is written last, when the counts are known
        fwriteCheck(zeros, sizeof(int32_t), 256, w->f, w->path);
        w->n_tokens = 0;
        w->n_docs = 0;
    }
    if (w->n_tokens + n > 0x7FFFFFFFu) die("'%s': a document piece of %zu tokens does not fit a shard", w->path, n);
    uint16_t out[4096];
    for (size_t i = 0; i < n; i += 4096) {
        size_t k = n - i < 4096 ? n - i : 4096;
        for (size_t j = 0; j < k; j++) out[j] = (uint16_t)ids[i + j];
        fwriteCheck(out, sizeof(uint16_t), k, w->f, w->path);
    }
    w->n_tokens += n;
    w->total_tokens += n;
    w->n_docs += starts_doc;
    w->total_docs += starts_doc;
}

// A split that fits one shard is name.bin
static void writer_close(ShardWriter* w) {
    writer_finish_file(w);
    if (w->files == 1) {
        char single[4200];
        path_printf(single, sizeof(single), "%s/%s.bin", w->dir, w->name);
        renameCheck(w->path, single);
    }
    printf("  %s: %ld documents, %zu tokens in %d shard%s\n", w->name, w->total_docs, w->total_tokens, w->files,
           w->files == 1 ? "" : "s");
}

static void encode_units(Unit* units, int n, const Tokenizer* tok) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; i++) {
        Unit* u = &units[i];
        if (!unit_text(u)) continue;
        u->ids = mallocCheck((u->len + 1) * sizeof(int));
        if (u->piece == 0) u->ids[u->n_ids++] = TOKEN_EOT;  // documents start with <|endoftext|>
        u->n_ids += tokenizer_encode(tok, u->data, u->len, u->ids + u->n_ids);
    }
}

void dataset_prepare(const char* out_dir, const char* const* inputs, int n_inputs, const PrepareOptions* opt) {
    if (opt->sample_mb <= 0) die("option --sample-mb: must be positive, got %g", opt->sample_mb);
    if (opt->shard_tokens < 1024 || opt->shard_tokens > 0x7FFFFFFFu) die("option --shard-tokens: must lie in 1024..2^31-1, got %zu", opt->shard_tokens);
    refuse_output_over_input("output folder", out_dir, inputs, n_inputs);
    refuse_replacing_foreign_folder("output folder", out_dir, "tokenizer.bin");
    InputList in = {0};
    for (int i = 0; i < n_inputs; i++) collect(&in, inputs[i]);
    if (in.n == 0) die("the corpus holds no files");
    qsort(in.paths, in.n, sizeof(char*), compare_paths);
    Tokenizer tok;
    size_t n_docs = train_tokenizer(&tok, &in, opt);

    char dir[4096], path[4200];
    tmp_folder(dir, sizeof(dir), out_dir);
    path_printf(path, sizeof(path), "%s/tokenizer.bin", dir);
    tokenizer_save(&tok, path);
    ShardWriter train = {.name = "train", .tok = &tok, .limit = opt->shard_tokens};
    ShardWriter val = {.name = "val", .tok = &tok, .limit = 0x7FFFFFFF};  // one shard: evaluation reads the first
    snprintf(train.dir, sizeof(train.dir), "%s", dir);
    snprintf(val.dir, sizeof(val.dir), "%s", dir);
    size_t val_cap = opt->shard_tokens < VAL_MAX_TOKENS ? opt->shard_tokens : VAL_MAX_TOKENS;

    Reader r;
    reader_init(&r, &in);
    Progress p = {"encoding", in.bytes, wall_time(), wall_time()};
    int cap = 1024;
    long malformed = 0;
    Unit* units = mallocCheck(cap * sizeof(Unit));
    ShardWriter* doc_split = &train;
    Duplicates dups = {0};
    size_t batch_bytes = (size_t)BATCH_BYTES_PER_THREAD * omp_get_max_threads();
    if (batch_bytes > BATCH_BYTES_MAX) batch_bytes = BATCH_BYTES_MAX;
    for (int more = 1; more;) {
        int n = 0;
        size_t bytes = 0;
        while (bytes < batch_bytes && (more = reader_next(&r, &units[n]))) {
            bytes += units[n++].len;
            if (n == cap) {
                cap *= 2;
                units = realloc(units, cap * sizeof(Unit));
                if (!units) die("out of memory batching documents");
            }
        }
        encode_units(units, n, &tok);
        for (int i = 0; i < n; i++) {
            Unit* u = &units[i];
            if (u->error[0]) {
                if (malformed++ < MALFORMED_SHOWN) fprintf(stderr, "warning: %s:%ld: skipped: %s\n", in.paths[u->file], u->line, u->error);
            } else {
                // every piece follows its document's split; validation stops growing at its cap
                if (u->piece == 0) doc_split = is_val_number(u->doc, n_docs) && val.total_tokens < val_cap ? &val : &train;
                writer_add(doc_split, u->ids, u->n_ids, u->piece == 0);
                duplicates_add(&dups, &in, u, doc_split == &val);
            }
            free(u->ids);
            free(u->data);
        }
        progress(&p, r.consumed, r.next_doc, 0);
    }
    progress(&p, r.consumed, r.next_doc, 1);
    reader_free(&r);
    free(units);
    if (malformed) fprintf(stderr, "warning: skipped %ld malformed JSON line%s in all\n", malformed, malformed == 1 ? "" : "s");
    duplicates_end_doc(&dups);
    if (dups.repeats) {
        fprintf(stderr, "warning: %ld document%s repeat%s an earlier one's text (%ld across the training and validation "
                "splits); they are kept: remove the copies from the inputs to leave them out\n", dups.repeats,
                dups.repeats == 1 ? "" : "s", dups.repeats == 1 ? "s" : "", dups.across);
    }
    free(dups.slots);
    if (!train.files || !val.files) die("the corpus left the %s split empty (%zu documents, %ld malformed)", train.files ? "validation" : "training", n_docs, malformed);
    ShardWriter* small = train.total_tokens < 2 ? &train : val.total_tokens < 2 ? &val : NULL;
    if (small) {
        die("the corpus left the %s split with %zu token%s, and a model needs at least an input and its target: give more text",
            small == &train ? "training" : "validation", small->total_tokens, small->total_tokens == 1 ? "" : "s");
    }
    writer_close(&train);
    writer_close(&val);
    replace_folder(dir, out_dir);
    printf("  wrote %s: tokenizer.bin and the train and val shards\n", out_dir);
    tokenizer_free(&tok);
    for (int i = 0; i < in.n; i++) free(in.paths[i]);
    free(in.paths);
}
