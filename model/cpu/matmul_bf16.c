// The weights' products with bf16 operands, fp32 accumulation and fp32 output, through oneDNN's
// matmul primitive (`precision = bf16`).
//
// oneDNN picks its kernel for the CPU: AMX tiles or AVX-512 BF16 dot products where the CPU has
// them, an emulation of bf16 on plain AVX-512 or AVX2 otherwise (correct, and slower than
// OpenBLAS's fp32). The weights are rounded to bf16 once after each change (by AdamW as it
// writes them, by weights_changed after a load); a forward product's input once a step, by the
// operation that wrote it or by the product, its rounding kept for the backward product
// (weight_copies.h); the gradients once per product that reads them, but for those their
// writers round (the logits' and dgate_up's, layers.c). Every
// product's primitive is made once per shape and kept. oneDNN's OpenMP build runs on the same
// OpenMP threads as the rest of the backend.
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/util.h"
#include "../weight_copies.h"
#include "cpu.h"

#define DNNL_CHECK(call)                                                                              \
    do {                                                                                              \
        dnnl_status_t status_ = (call);                                                               \
        if (status_ != dnnl_success) die_at(__FILE__, __LINE__, "oneDNN: %s failed (status %d)", #call, (int)status_); \
    } while (0)

static dnnl_engine_t engine;
static dnnl_stream_t stream;

static void round_all(uint16_t* out, const float* x, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = cpu_bf16_round(x[i]);
}

// ---- the weights' bf16 copies, and every other operand rounded into scratch ----
static void* copy_alloc(size_t n) { return mallocCheck(n * sizeof(uint16_t)); }
static void copy_round(void* copy, const float* w, size_t n) { round_all(copy, w, n); }
static const WeightCopies KIND = {.alloc = copy_alloc, .release = free, .round = copy_round, .element = sizeof(uint16_t)};

WeightCopies* cpu_bf16_copies_open(void) { return weight_copies_open(&KIND); }

// x (n) as bf16. A forward's input (keep) inside a block of activations: the twin kept for its
// backward, rounded into unless the operation that wrote x wrote it. Otherwise its weights' copy,
// or the kept rounding of exactly these rows (a backward's input), else rounded into
// scratch[slot] (kept between calls).
static const uint16_t* operand(WeightCopies* copies, const float* x, size_t n, int slot, int keep) {
    int ready = 0;
    uint16_t* kept = copies && keep ? weight_copies_keep(copies, x, n, &ready) : NULL;
    if (kept) {
        if (!ready) round_all(kept, x, n);
        return kept;
    }
    const uint16_t* copy = copies ? weight_copies_find(copies, x, n) : NULL;
    if (copy) return copy;
    static uint16_t* scratch[3];
    static size_t capacity[3];
    if (n > capacity[slot]) {
        free(scratch[slot]);
        scratch[slot] = mallocCheck(n * sizeof(uint16_t));
        capacity[slot] = n;
    }
    round_all(scratch[slot], x, n);
    return scratch[slot];
}

// ---- one primitive per product shape ----
typedef struct {
    int M, N, K, trans_a, trans_b, accumulate;
    dnnl_primitive_t primitive;
    dnnl_memory_t a, b, c;
    char impl[64];
} Product;
static Product* products;
static int n_products, products_capacity;

// Row-major (rows, cols), or its transpose stored (cols, rows)
static void matrix_desc(dnnl_memory_desc_t* md, int rows, int cols, int transposed, dnnl_data_type_t type) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {transposed ? 1 : cols, transposed ? rows : 1};
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, type, strides));
}

// The primitive descriptor of one product shape: bf16 A and B, fp32 C, C's old value added by a
// sum post-op where accumulate is set
static dnnl_status_t product_desc(dnnl_primitive_desc_t* pd, int trans_a, int trans_b, int M, int N, int K, int accumulate) {
    dnnl_memory_desc_t a, b, c;
    matrix_desc(&a, M, K, trans_a, dnnl_bf16);
    matrix_desc(&b, K, N, trans_b, dnnl_bf16);
    matrix_desc(&c, M, N, 0, dnnl_f32);
    dnnl_matmul_desc_t desc;
    DNNL_CHECK(dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c));
    dnnl_primitive_attr_t attr = NULL;
    if (accumulate) {
        dnnl_post_ops_t post;
        DNNL_CHECK(dnnl_post_ops_create(&post));
        DNNL_CHECK(dnnl_post_ops_append_sum(post, 1.0f));
        DNNL_CHECK(dnnl_primitive_attr_create(&attr));
        DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, post));
        dnnl_post_ops_destroy(post);
    }
    dnnl_status_t status = dnnl_primitive_desc_create(pd, &desc, attr, engine, NULL);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return status;
}

static Product* product_for(int trans_a, int trans_b, int M, int N, int K, int accumulate) {
    for (int i = 0; i < n_products; i++) {
        Product* p = &products[i];
        if (p->M == M && p->N == N && p->K == K && p->trans_a == trans_a && p->trans_b == trans_b && p->accumulate == accumulate) return p;
    }
    if (n_products == products_capacity) {
        products_capacity = products_capacity ? 2 * products_capacity : 32;
        products = realloc(products, products_capacity * sizeof(Product));
        if (!products) die("out of memory keeping bf16 products");
    }
    Product* p = &products[n_products++];
    *p = (Product){M, N, K, trans_a, trans_b, accumulate, NULL, NULL, NULL, NULL, ""};
    dnnl_primitive_desc_t pd;
    dnnl_status_t status = product_desc(&pd, trans_a, trans_b, M, N, K, accumulate);
    if (status == dnnl_unimplemented) die("oneDNN has no bf16 matmul for this CPU (it needs AVX-512 at least)");
    DNNL_CHECK(status);
    const char* impl = "";
    DNNL_CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    snprintf(p->impl, sizeof(p->impl), "%s", impl);
    DNNL_CHECK(dnnl_primitive_create(&p->primitive, pd));
    DNNL_CHECK(dnnl_memory_create(&p->a, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), engine, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&p->b, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), engine, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&p->c, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), engine, DNNL_MEMORY_NONE));
    dnnl_primitive_desc_destroy(pd);
    return p;
}

// Row-major C (M, N) = op(A) op(B), plus C's old value when accumulate is set
static void product(int trans_a, int trans_b, int M, int N, int K, const uint16_t* A, const uint16_t* B, float* C, int accumulate) {
    Product* p = product_for(trans_a, trans_b, M, N, K, accumulate);
    DNNL_CHECK(dnnl_memory_set_data_handle(p->a, (void*)A));
    DNNL_CHECK(dnnl_memory_set_data_handle(p->b, (void*)B));
    DNNL_CHECK(dnnl_memory_set_data_handle(p->c, C));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}};
    DNNL_CHECK(dnnl_primitive_execute(p->primitive, stream, 3, args));
    DNNL_CHECK(dnnl_stream_wait(stream));
}

void cpu_bf16_matmul_forward(WeightCopies* copies, float* out, const float* inp, const float* w, int N, int IC, int OC,
                             int accumulate) {
    const uint16_t* x = operand(copies, inp, (size_t)N * IC, 0, 1);
    const uint16_t* wt = operand(copies, w, (size_t)OC * IC, 1, 0);
    product(0, 1, N, OC, IC, x, wt, out, accumulate);
}

void cpu_bf16_matmul_backward(WeightCopies* copies, float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                              int N, int IC, int OC) {
    const uint16_t* d = operand(copies, dout, (size_t)N * OC, 0, 0);
    const uint16_t* wt = operand(copies, w, (size_t)OC * IC, 1, 0);
    const uint16_t* x = operand(copies, inp, (size_t)N * IC, 2, 0);
    product(0, 0, N, IC, OC, d, wt, dinp, 0);
    product(1, 0, OC, IC, N, d, x, dw, 1);
}

double cpu_bf16_matmul_rate(void) {
    cpu_bf16_init();
    int n = 2048;
    uint16_t* a = mallocCheck((size_t)n * n * sizeof(uint16_t));
    float* c = mallocCheck((size_t)n * n * sizeof(float));
    for (size_t i = 0; i < (size_t)n * n; i++) a[i] = cpu_bf16_round(0.001f * (float)(i % 97));
    double best = 1e30;
    for (int rep = 0; rep < 4; rep++) {
        double t0 = wall_time();
        product(0, 0, n, n, n, a, a, c, 0);
        double dt = wall_time() - t0;
        best = dt < best ? dt : best;
    }
    free(a);
    free(c);
    return 2.0 * n * n * (double)n / best / 1e9;
}

const char* cpu_bf16_kernel(void) {
    static char kernel[64];
    cpu_bf16_init();
    // the implementation oneDNN picks for a product of the training step's kind
    snprintf(kernel, sizeof(kernel), "%s", product_for(0, 1, 256, 256, 256, 0)->impl);
    return kernel;
}

int cpu_bf16_runs(void) {
    cpu_bf16_init();
    // the three kinds of product the backend makes: forward (B transposed, with and without
    // accumulating), backward's dinp, backward's dw (A transposed, accumulating)
    static const int KINDS[][3] = {{0, 1, 0}, {0, 1, 1}, {0, 0, 0}, {1, 0, 1}};
    for (int k = 0; k < 4; k++) {
        dnnl_primitive_desc_t pd;
        if (product_desc(&pd, KINDS[k][0], KINDS[k][1], 64, 64, 64, KINDS[k][2]) != dnnl_success) return 0;
        dnnl_primitive_desc_destroy(pd);
    }
    return 1;
}

void cpu_bf16_init(void) {
    if (engine) return;
    DNNL_CHECK(dnnl_engine_create(&engine, dnnl_cpu, 0));
    DNNL_CHECK(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
}

const char* cpu_bf16_missing(CpuFeatures f) {
    if (f.avx512_bf16 || f.amx_bf16) return NULL;
    return "precision = bf16 needs bf16 dot-product instructions (AVX-512 BF16 or AMX), which this CPU lacks: oneDNN "
           "would emulate them, slower than the fp32 products; use precision = fp32";
}

const char* cpu_bf16_refusal(void) {
    const char* why = cpu_bf16_missing(cpu_features());
    if (why) return why;
    if (!cpu_bf16_runs()) return "precision = bf16: oneDNN has no bf16 matmul for this CPU (ONEDNN_MAX_CPU_ISA may limit it)";
    return NULL;
}
