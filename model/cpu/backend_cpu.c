// The CPU backend's table, its (host) memory and its matmul rate.
#define _GNU_SOURCE
#include <cblas.h>
#include <errno.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../../base/dist.h"
#include "../../base/util.h"
#include "cpu.h"

#define HUGE_PAGE ((size_t)2 << 20)
#define SMALL_PAGE ((size_t)4096)

// Every buffer is preceded by this header, which tells release how it was made; its 64 bytes
// keep calloc's alignment.
typedef struct {
    size_t mapped;  // bytes mapped from the page before the buffer, 0 for calloc
    char pad[64 - sizeof(size_t)];
} BufferHeader;

// Buffers of a huge page or more are mapped on a 2 MiB boundary and ask for transparent huge
// pages, which Debian's kernels give only on request ("madvise" mode): the matmuls stream
// parameters and activations of hundreds of MiB, and on 4 KiB pages the packing walks miss the
// TLB (3-8% of the training speed at the bench shape, in paired runs). Where the kernel has huge
// pages off, the request is refused and nothing else changes. Mapped memory comes zeroed and is
// faulted in only where it is used, as calloc's is.
static void* cpu_alloc(size_t bytes) {
    if (bytes < HUGE_PAGE) {
        BufferHeader* h = callocCheck(1, sizeof(BufferHeader) + bytes);
        return h + 1;
    }
    size_t len = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    size_t span = SMALL_PAGE + len + HUGE_PAGE;  // room for the header's page and the alignment
    char* map = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) die("out of memory mapping %zu bytes on the CPU: %s", span, strerror(errno));
    char* buf = (char*)(((uintptr_t)map + SMALL_PAGE + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    char* first = buf - SMALL_PAGE;
    if (first > map && munmap(map, first - map) != 0) die("munmap: %s", strerror(errno));
    char* tail = buf + len;
    if (map + span > tail && munmap(tail, map + span - tail) != 0) die("munmap: %s", strerror(errno));
    madvise(buf, len, MADV_HUGEPAGE);  // a request, not a requirement: its refusal is not an error
    BufferHeader* h = (BufferHeader*)buf - 1;
    h->mapped = SMALL_PAGE + len;
    return buf;
}

static void cpu_release(void* buf) {
    if (!buf) return;
    BufferHeader* h = (BufferHeader*)buf - 1;
    if (!h->mapped) free(h);
    else if (munmap((char*)buf - SMALL_PAGE, h->mapped) != 0) die("munmap: %s", strerror(errno));
}
static void cpu_zero(void* buf, size_t bytes) { memset(buf, 0, bytes); }
static void cpu_copy(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
// OpenBLAS's kernel is part of what the numbers are computed on: two kernels differ in the last
// bits of a matmul (which one runs: blas_kernel.c)
static const char* cpu_init(void) { return NULL; }
static const char* cpu_open(Backend* be) {
    if (be->precision == PRECISION_BF16) {
        const char* why = cpu_bf16_refusal();
        if (why) return why;
        be->copies = cpu_bf16_copies_open();
        snprintf(be->description, sizeof(be->description), "cpu (OpenBLAS %s; bf16 weight products: oneDNN %s)", openblas_get_corename(),
                 cpu_bf16_kernel());
    } else {
        snprintf(be->description, sizeof(be->description), "cpu (OpenBLAS %s)", openblas_get_corename());
    }
    return NULL;
}
static void cpu_synchronize(void) {}
static double cpu_peak_memory_bytes(void) { return (double)peak_rss_bytes(); }
// the machine's memory, or less where a ulimit bounds this process: a model past it would make
// OpenBLAS wait forever for its buffers, not fail
static double cpu_memory_bytes(void) {
    double ram = machine_memory_bytes(), left = cpu_limit_bytes();
    return left >= 0 && left < ram ? left : ram;
}

// Best of a few 2048^3 products in the weights' products' precision (sgemm in fp32)
static double cpu_matmul_rate(const Backend* be) {
    if (be->precision == PRECISION_BF16) return cpu_bf16_matmul_rate();
    int n = 2048;
    float* a = mallocCheck((size_t)n * n * sizeof(float));
    float* b = mallocCheck((size_t)n * n * sizeof(float));
    float* c = mallocCheck((size_t)n * n * sizeof(float));
    for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = 0.001f * (float)(i % 97);
    double best = 1e30;
    for (int rep = 0; rep < 4; rep++) {
        double t0 = wall_time();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = wall_time() - t0;
        best = dt < best ? dt : best;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * n * n * (double)n / best / 1e9;
}

// every shape: the CPU kernels have no head-dim or grid limits, and memory is checked by the caller
static int cpu_supports(const Backend* be, const AttnShape* s, int hooked, const char** why) {
    (void)be, (void)s, (void)hooked, (void)why;
    return 1;
}

// fp32 in every precision: bf16 reaches the weights' products only
static const char* cpu_attention_path(const Backend* be, const AttnShape* s) {
    (void)be, (void)s;
    return "fp32 kernels";
}

// the fp32 peak; no model of the bf16 units' peak (AMX, AVX-512 BF16) yet
static double cpu_peak(const Backend* be, char* how, size_t n) {
    if (be->precision == PRECISION_BF16) {
        snprintf(how, n, "no model of the bf16 units' peak (AVX-512 BF16, AMX)");
        return 0.0;
    }
    return cpu_peak_rate(omp_get_max_threads(), how, n);
}

// Marks on the host's clock: every operation here has finished when it returns
static double* marks;
static int mark_capacity;
static void cpu_timer_mark(int i) {
    if (i >= mark_capacity) {
        mark_capacity = 2 * i + 64;
        marks = realloc(marks, (size_t)mark_capacity * sizeof(double));
        if (!marks) die("out of memory for timer marks");
    }
    marks[i] = wall_time();
}
static void cpu_timer_read(double* seconds, int n) {
    for (int i = 0; i < n; i++) seconds[i] = marks[i] - marks[0];
}

static const Backend CPU = {
    .name = "cpu",
    .device = "cpu",
    .host_memory = 1,
    .init = cpu_init,
    .open = cpu_open,
    .close = backend_release_copies,
    .device_name = backend_description,
    .memory_bytes = cpu_memory_bytes,
    .peak_memory_bytes = cpu_peak_memory_bytes,
    .synchronize = cpu_synchronize,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .upload = cpu_copy,  // host memory on both sides
    .download = cpu_copy,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope_apply = cpu_rope_apply,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .crossentropy_forward = cpu_crossentropy_forward,
    .crossentropy_backward = cpu_crossentropy_backward,
    .supports = cpu_supports,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .attention_maps = cpu_attention_maps,
    .integral_forward = cpu_integral_forward,
    .integral_backward = cpu_integral_backward,
    .lambda_forward = cpu_lambda_forward,
    .lambda_backward = cpu_lambda_backward,
    .token_lambda_forward = cpu_token_lambda_forward,
    .token_lambda_backward = cpu_token_lambda_backward,
    .sum_squares = cpu_sum_squares,
    .scale = cpu_scale,
    .add = cpu_add,
    .sum_across_ranks = dist_sum_floats,  // MPI reduces host memory in place
    .adamw_update = cpu_adamw_update,
    .matmul_spent = cpu_matmul_spent,
    .matmul_rate = cpu_matmul_rate,
    .weights_changed = backend_weights_changed,
    .activations_changed = backend_activations_changed,
    .peak_rate = cpu_peak,
    .attention_path = cpu_attention_path,
    .timer_mark = cpu_timer_mark,
    .timer_read = cpu_timer_read,
};

const Backend* backend_cpu(void) { return &CPU; }
