#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/util.h"

#define TOKENIZER_MAGIC "DTXTOK01"

static int is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 128; }
static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int char_class(unsigned char c) { return is_letter(c) ? 0 : is_digit(c) ? 1 : is_space(c) ? 2 : 3; }

// Length of the chunk starting at text[0]
static size_t chunk_length(const unsigned char* text, size_t len) {
    size_t i = 0;
    if (text[0] == ' ' && len > 1 && !is_space(text[1])) i = 1;  // a space leads the next word
    int cls = char_class(text[i]);
    i++;
    while (i < len && char_class(text[i]) == cls) {
        // a run of whitespace leaves its last space to lead the following word
        if (cls == 2 && text[i] == ' ' && i + 1 < len && !is_space(text[i + 1])) break;
        i++;
    }
    return i;
}

size_t tokenizer_safe_cut(const char* text, size_t len) {
    // a whitespace run ends at a non-space and no space leads the word after a newline, so a
    // chunk boundary lies there whatever came before
    for (size_t p = len ? len - 1 : 0; p > 0; p--) {
        if (text[p - 1] == '\n' && !is_space((unsigned char)text[p])) return p;
    }
    return len;
}

// ---- chunk counting: open addressing on (bytes, length) ----
typedef struct {
    const unsigned char* text;
    int len;
    long count;
} ChunkEntry;

typedef struct {
    ChunkEntry* slots;
    size_t cap, used;
} ChunkTable;

// The slot holding (text, len), or the empty slot where it belongs
static size_t table_slot(const ChunkTable* t, const unsigned char* text, int len) {
    size_t j = fnv1a(FNV1A_START, text, len) & (t->cap - 1);
    while (t->slots[j].text && (t->slots[j].len != len || memcmp(t->slots[j].text, text, len))) j = (j + 1) & (t->cap - 1);
    return j;
}

static void table_add(ChunkTable* t, const unsigned char* text, int len) {
    if (2 * (t->used + 1) > t->cap) {
        ChunkTable bigger = {callocCheck(t->cap * 2, sizeof(ChunkEntry)), t->cap * 2, t->used};
        for (size_t i = 0; i < t->cap; i++) {
            if (t->slots[i].text) bigger.slots[table_slot(&bigger, t->slots[i].text, t->slots[i].len)] = t->slots[i];
        }
        free(t->slots);
        *t = bigger;
    }
    ChunkEntry* e = &t->slots[table_slot(t, text, len)];
    if (!e->text) {
        *e = (ChunkEntry){text, len, 0};
        t->used++;
    }
    e->count++;
}

// ---- pairs ----
#define PAIR_EMPTY UINT64_MAX

static uint64_t pair_key(int a, int b) { return (uint64_t)a << 16 | (uint64_t)b; }

static void pairs_init(PairMap* m, size_t expected) {
    m->cap = 64;
    while (m->cap < 2 * expected) m->cap *= 2;
    m->keys = mallocCheck(m->cap * sizeof(uint64_t));
    memset(m->keys, 0xff, m->cap * sizeof(uint64_t));
    m->values = callocCheck(m->cap, sizeof(int64_t));
    m->used = 0;
}

static void pairs_free(PairMap* m) {
    free(m->keys);
    free(m->values);
}

static size_t pairs_slot(const PairMap* m, uint64_t key) {
    size_t j = hash64(key) & (m->cap - 1);
    while (m->keys[j] != PAIR_EMPTY && m->keys[j] != key) j = (j + 1) & (m->cap - 1);
    return j;
}

static int64_t pairs_get(const PairMap* m, uint64_t key, int64_t missing) {
    size_t j = pairs_slot(m, key);
    return m->keys[j] == key ? m->values[j] : missing;
}

// The value of key, inserted as 0 when missing
static int64_t* pairs_at(PairMap* m, uint64_t key) {
    if (2 * (m->used + 1) > m->cap) {
        PairMap bigger;
        pairs_init(&bigger, m->cap);
        for (size_t i = 0; i < m->cap; i++) {
            if (m->keys[i] == PAIR_EMPTY) continue;
            size_t j = pairs_slot(&bigger, m->keys[i]);
            bigger.keys[j] = m->keys[i];
            bigger.values[j] = m->values[i];
        }
        bigger.used = m->used;
        pairs_free(m);
        *m = bigger;
    }
    size_t j = pairs_slot(m, key);
    if (m->keys[j] == PAIR_EMPTY) {
        m->keys[j] = key;
        m->values[j] = 0;
        m->used++;
    }
    return &m->values[j];
}

// ---- lazy max-heap of (count, pair): BPE training pops the most frequent pair; encoding
// pushes (-rank, position) and pops the lowest rank, leftmost first ----
typedef struct {
    long count;
    uint64_t pair;
} HeapItem;

typedef struct {
    HeapItem* items;
    size_t n, cap;
} Heap;

// larger count first; ties broken by the smaller pair so training is deterministic
static int heap_before(HeapItem x, HeapItem y) { return x.count > y.count || (x.count == y.count && x.pair < y.pair); }

static void heap_push(Heap* h, long count, uint64_t pair) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 1024;
        HeapItem* grown = realloc(h->items, h->cap * sizeof(HeapItem));
        if (!grown) die("out of memory growing the BPE heap");
        h->items = grown;
    }
    size_t i = h->n++;
    h->items[i] = (HeapItem){count, pair};
    while (i > 0 && heap_before(h->items[i], h->items[(i - 1) / 2])) {
        HeapItem tmp = h->items[i];
        h->items[i] = h->items[(i - 1) / 2];
        h->items[(i - 1) / 2] = tmp;
        i = (i - 1) / 2;
    }
}

static HeapItem heap_pop(Heap* h) {
    HeapItem top = h->items[0];
    h->items[0] = h->items[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        if (l < h->n && heap_before(h->items[l], h->items[best])) best = l;
        if (r < h->n && heap_before(h->items[r], h->items[best])) best = r;
        if (best == i) break;
        HeapItem tmp = h->items[i];
        h->items[i] = h->items[best];
        h->items[best] = tmp;
        i = best;
    }
    return top;
}

static void build_tables(Tokenizer* tok, const char* origin) {
    int V = tok->vocab_size;
    pairs_init(&tok->ranks, (size_t)tok->n_merges);
    tok->bytes = callocCheck(V, sizeof(unsigned char*));
    tok->length = callocCheck(V, sizeof(int));
    for (int i = 0; i < 256; i++) {
        tok->bytes[i] = mallocCheck(1);
        tok->bytes[i][0] = (unsigned char)i;
        tok->length[i] = 1;
    }
    tok->bytes[TOKEN_EOT] = mallocCheck(1);
    tok->length[TOKEN_EOT] = 0;
    tok->eot = TOKEN_EOT;
    tok->can_encode = tok->can_decode = 1;
    for (int i = 0; i < tok->n_merges; i++) {
        int a = tok->merges[i][0], b = tok->merges[i][1], id = TOKENIZER_BASE + i;
        if (a >= id || b >= id || a == TOKEN_EOT || b == TOKEN_EOT) die("%s: merge %d refers to an invalid id", origin, i);
        int64_t* rank = pairs_at(&tok->ranks, pair_key(a, b));
        if (*rank) die("%s: merge %d repeats the pair (%d, %d) of merge %d", origin, i, a, b, (int)*rank - TOKENIZER_BASE);
        *rank = id;
        int64_t length = (int64_t)tok->length[a] + tok->length[b];
        if (length > TOKEN_MAX_BYTES) die("%s: merge %d makes a token of %lld bytes, more than %d", origin, i, (long long)length, TOKEN_MAX_BYTES);
        tok->length[id] = (int)length;
        tok->bytes[id] = mallocCheck(tok->length[id]);
        memcpy(tok->bytes[id], tok->bytes[a], tok->length[a]);
        memcpy(tok->bytes[id] + tok->length[a], tok->bytes[b], tok->length[b]);
    }
    tok->hash = fnv1a(FNV1A_START, tok->merges, (size_t)tok->n_merges * sizeof(tok->merges[0]));
}

void tokenizer_train(Tokenizer* tok, const char* const* docs, const size_t* lens, int n_docs, int vocab_size) {
    if (vocab_size <= TOKENIZER_BASE || vocab_size > 65536) die("vocabulary size %d must lie in 258..65536", vocab_size);
    ChunkTable table = {callocCheck(1 << 16, sizeof(ChunkEntry)), 1 << 16, 0};
    for (int d = 0; d < n_docs; d++) {
        const unsigned char* text = (const unsigned char*)docs[d];
        for (size_t i = 0; i < lens[d];) {
            size_t n = chunk_length(text + i, lens[d] - i);
            table_add(&table, text + i, (int)n);
            i += n;
        }
    }
    // unique chunks as id sequences, all in one array; word w is ids[start[w] .. start[w] + len[w])
    size_t n_words = table.used, total = 0;
    long* freq = mallocCheck(n_words * sizeof(long));
    size_t* start = mallocCheck(n_words * sizeof(size_t));
    int* wlen = mallocCheck(n_words * sizeof(int));
    for (size_t i = 0, w = 0; i < table.cap; i++) {
        if (!table.slots[i].text) continue;
        freq[w] = table.slots[i].count;
        start[w] = total;
        wlen[w] = table.slots[i].len;
        total += table.slots[i].len;
        w++;
    }
    int* ids = mallocCheck(total * sizeof(int));
    for (size_t i = 0, w = 0; i < table.cap; i++) {
        if (!table.slots[i].text) continue;
        for (int j = 0; j < table.slots[i].len; j++) ids[start[w] + j] = table.slots[i].text[j];
        w++;
    }
    free(table.slots);

    int V = vocab_size;
    PairMap pair_count;  // (a, b) -> occurrences in the words
    pairs_init(&pair_count, 1 << 16);
    for (size_t w = 0; w < n_words; w++) {
        for (int j = 0; j + 1 < wlen[w]; j++) *pairs_at(&pair_count, pair_key(ids[start[w] + j], ids[start[w] + j + 1])) += freq[w];
    }
    Heap heap = {0};  // pop order is a total order on (count, pair), so insertion order does not matter
    for (size_t i = 0; i < pair_count.cap; i++) {
        if (pair_count.keys[i] != PAIR_EMPTY && pair_count.values[i] > 0) heap_push(&heap, pair_count.values[i], pair_count.keys[i]);
    }
    tok->merges = mallocCheck((size_t)(V - TOKENIZER_BASE) * sizeof(tok->merges[0]));
    tok->n_merges = 0;
    while (TOKENIZER_BASE + tok->n_merges < V && heap.n > 0) {
        HeapItem top = heap_pop(&heap);
        int64_t now = pairs_get(&pair_count, top.pair, 0);
        if (top.count != now) {
            // stale: the pair lost counts since this entry; queue its current count instead
            if (now > 0) heap_push(&heap, now, top.pair);
            continue;
        }
        if (top.count < 2) break;
        int a = (int)(top.pair >> 16), b = (int)(top.pair & 0xffff), z = TOKENIZER_BASE + tok->n_merges;
        tok->merges[tok->n_merges][0] = (uint16_t)a;
        tok->merges[tok->n_merges][1] = (uint16_t)b;
        tok->n_merges++;
        for (size_t w = 0; w < n_words; w++) {
            int* s = ids + start[w];
            int n = wlen[w], found = 0;
            for (int j = 0; j + 1 < n && !found; j++) found = s[j] == a && s[j + 1] == b;
            if (!found) continue;
            for (int j = 0; j + 1 < n; j++) *pairs_at(&pair_count, pair_key(s[j], s[j + 1])) -= freq[w];
            int out = 0;
            for (int j = 0; j < n; j++) {
                if (j + 1 < n && s[j] == a && s[j + 1] == b) {
                    s[out++] = z;
                    j++;
                } else {
                    s[out++] = s[j];
                }
            }
            wlen[w] = out;
            for (int j = 0; j + 1 < out; j++) {
                int64_t* count = pairs_at(&pair_count, pair_key(s[j], s[j + 1]));
                *count += freq[w];
                heap_push(&heap, *count, pair_key(s[j], s[j + 1]));
            }
        }
    }
    free(heap.items);
    pairs_free(&pair_count);
    free(ids);
    free(freq);
    free(start);
    free(wlen);
    tok->vocab_size = TOKENIZER_BASE + tok->n_merges;
    build_tables(tok, "trained tokenizer");
}

void tokenizer_free(Tokenizer* tok) {
    for (int i = 0; tok->bytes && i < tok->vocab_size; i++) free(tok->bytes[i]);
    free(tok->bytes);
    free(tok->length);
    pairs_free(&tok->ranks);
    free(tok->merges);
}

void tokenizer_save(const Tokenizer* tok, const char* path) {
    char tmp[4096];
    tmp_path(tmp, sizeof(tmp), path);
    FILE* f = fopenCheck(tmp, "wb");
    uint32_t header[2] = {(uint32_t)tok->vocab_size, (uint32_t)tok->n_merges};
    fwriteCheck(TOKENIZER_MAGIC, 1, 8, f, tmp);
    fwriteCheck(header, sizeof(uint32_t), 2, f, tmp);
    fwriteCheck(tok->merges, sizeof(tok->merges[0]), tok->n_merges, f, tmp);
    fcloseCheck(f, tmp);
    renameCheck(tmp, path);
}

void tokenizer_load(Tokenizer* tok, const char* path) {
    memset(tok, 0, sizeof(*tok));
    FILE* f = fopenCheck(path, "rb");
    char magic[8];
    uint32_t header[2];
    freadCheck(magic, 1, 8, f, path);
    if (memcmp(magic, TOKENIZER_MAGIC, 8) != 0) die("'%s' is not a tokenizer file (bad magic)", path);
    freadCheck(header, sizeof(uint32_t), 2, f, path);
    if (header[1] > 65536 - TOKENIZER_BASE || header[0] != TOKENIZER_BASE + header[1]) {
        die("'%s': inconsistent header (vocab %u, merges %u)", path, header[0], header[1]);
    }
    struct stat st;  // the size the header promises, before anything is allocated
    long expected = 16 + 4 * (long)header[1];
    if (fstat(fileno(f), &st) != 0 || st.st_size != expected) {
        die("'%s' has %lld bytes, but its header's %u merges make %ld", path, (long long)st.st_size, header[1], expected);
    }
    tok->vocab_size = (int)header[0];
    tok->n_merges = (int)header[1];
    tok->merges = mallocCheck((size_t)tok->n_merges * sizeof(tok->merges[0]) + 1);
    freadCheck(tok->merges, sizeof(tok->merges[0]), tok->n_merges, f, path);
    if (fgetc(f) != EOF) die("'%s': trailing bytes after the merge list", path);
    fcloseCheck(f, path);
    build_tables(tok, path);
}

// Working memory of encode_chunk, grown to the longest chunk
typedef struct {
    size_t* next;
    size_t* prev;
    size_t cap;
    Heap heap;
} EncodeScratch;

// llm.c's gpt2_tokenizer.bin: 256 uint32 (magic 20240328, version 1 or 2, vocab size, and in
// version 2 the EOT id), then per id one length byte and that many bytes
void tokenizer_gpt2(Tokenizer* tok, const char* path) {
    memset(tok, 0, sizeof(*tok));
    tok->vocab_size = GPT2_VOCAB;
    tok->eot = GPT2_EOT;
    tok->hash = GPT2_IDS_HASH;
    pairs_init(&tok->ranks, 1);
    if (!path) return;
    FILE* f = fopenCheck(path, "rb");
    uint32_t header[256];
    freadCheck(header, sizeof(uint32_t), 256, f, path);
    if (header[0] != 20240328) die("'%s' is not llm.c's GPT-2 tokenizer (bad magic)", path);
    if (header[1] != 1 && header[1] != 2) die("'%s': llm.c tokenizer version %u, this program reads 1 and 2", path, header[1]);
    if (header[2] != GPT2_VOCAB) die("'%s' holds %u tokens, GPT-2 has %d", path, header[2], GPT2_VOCAB);
    if (header[1] == 2 && header[3] != GPT2_EOT) die("'%s': end-of-text id %u, GPT-2's is %d", path, header[3], GPT2_EOT);
    tok->bytes = callocCheck(GPT2_VOCAB, sizeof(unsigned char*));
    tok->length = callocCheck(GPT2_VOCAB, sizeof(int));
    for (int i = 0; i < GPT2_VOCAB; i++) {
        unsigned char n;
        freadCheck(&n, 1, 1, f, path);
        tok->bytes[i] = mallocCheck(n);
        freadCheck(tok->bytes[i], 1, n, f, path);
        tok->length[i] = i == GPT2_EOT ? 0 : n;  // a separator, not text
    }
    fcloseCheck(f, path);
    tok->can_decode = 1;
}

static int rank_of(const Tokenizer* tok, int a, int b) { return (int)pairs_get(&tok->ranks, pair_key(a, b), -1); }

// Merges the byte ids s (n) in place, the lowest-ranked pair first and of equal pairs the
// leftmost, until no pair merges; returns the new length. The symbols form a linked list and
// the candidate merges a heap of (rank, position), so each merge costs O(log n) and a long run
// of one byte stays fast; entries a merge made stale are recognised when popped.
static size_t encode_chunk(const Tokenizer* tok, int* s, size_t n, EncodeScratch* w) {
    if (n > w->cap) {
        free(w->next);
        free(w->prev);
        w->next = mallocCheck(n * sizeof(size_t));
        w->prev = mallocCheck(n * sizeof(size_t));
        w->cap = n;
    }
    size_t *next = w->next, *prev = w->prev;
    const size_t none = SIZE_MAX;
    w->heap.n = 0;
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1;
        prev[i] = i ? i - 1 : none;
        int r = i + 1 < n ? rank_of(tok, s[i], s[i + 1]) : -1;
        if (r >= 0) heap_push(&w->heap, -r, i);
    }
    while (w->heap.n) {
        HeapItem top = heap_pop(&w->heap);
        size_t i = top.pair, j = next[i];
        if (s[i] < 0 || j >= n || rank_of(tok, s[i], s[j]) != -top.count) continue;  // merged away since
        s[i] = (int)-top.count;
        s[j] = -1;
        next[i] = next[j];
        if (next[i] < n) prev[next[i]] = i;
        int r;
        if (prev[i] != none && (r = rank_of(tok, s[prev[i]], s[i])) >= 0) heap_push(&w->heap, -r, prev[i]);
        if (next[i] < n && (r = rank_of(tok, s[i], s[next[i]])) >= 0) heap_push(&w->heap, -r, i);
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i = next[i]) s[m++] = s[i];  // symbol 0 is never merged away
    return m;
}

size_t tokenizer_encode(const Tokenizer* tok, const char* text, size_t len, int* out) {
    if (!tok->can_encode) {
        die("encoding text needs this project's tokenizer (a 'data' folder made by `difftx prepare`); llm.c's "
            "token shards hold GPT-2 ids, whose merges are not part of them");
    }
    const unsigned char* t = (const unsigned char*)text;
    size_t n_out = 0;
    EncodeScratch scratch = {NULL, NULL, 0, {0}};
    for (size_t i = 0; i < len;) {
        size_t n = chunk_length(t + i, len - i);
        int* s = out + n_out;
        for (size_t j = 0; j < n; j++) s[j] = t[i + j];
        n_out += encode_chunk(tok, s, n, &scratch);
        i += n;
    }
    free(scratch.next);
    free(scratch.prev);
    free(scratch.heap.items);
    return n_out;
}

size_t tokenizer_decode(const Tokenizer* tok, const int* ids, size_t n, char* out) {
    if (!tok->can_decode) {
        die("decoding GPT-2 ids needs llm.c's gpt2_tokenizer.bin beside the token shards (in the 'data' folder)");
    }
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->vocab_size) die("token id %d is outside the vocabulary (%d)", ids[i], tok->vocab_size);
        memcpy(out + len, tok->bytes[ids[i]], tok->length[ids[i]]);
        len += tok->length[ids[i]];
    }
    return len;
}
