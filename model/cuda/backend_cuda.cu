// The CUDA backend's table and what every operation shares: the device, its memory (the
// device's default memory pool, so the peak is the pool's high-water mark), the fp32 products'
// cuBLAS handle with TF32 off, scratch buffers, NCCL for the ranks. Every operation runs in order on the
// default stream; upload and download are synchronous.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef DIFFTX_MPI
#include <nccl.h>
#endif

#include "cuda.h"

extern "C" {
#include "../../base/dist.h"
#include "../../base/util.h"
}

static int device = -1;
static cublasHandle_t cublas;
static char gpu[128];  // "NVIDIA H100 80GB HBM3 (sm_90)"
static double device_bytes;
static size_t shared_limit;
static cudaMemPool_t pool;

void cuda_check_at(cudaError_t err, const char* what, const char* src, int line) {
    if (err != cudaSuccess) die_at(src, line, "CUDA: %s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

void cublas_check_at(cublasStatus_t status, const char* what, const char* src, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) die_at(src, line, "cuBLAS: %s: %s", what, cublasGetStatusString(status));
}

cublasHandle_t cuda_cublas(void) { return cublas; }
size_t cuda_shared_memory_limit(void) { return shared_limit; }

// One device per rank on a machine (rank k of a machine takes GPU k mod count); the pool keeps
// freed memory for reuse instead of handing it back, as a training step frees and allocates the
// same sizes again
static const char* cuda_init(void) {
    static char why[256];
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        snprintf(why, sizeof(why), "no CUDA device (%s)", err != cudaSuccess ? cudaGetErrorString(err) : "none found");
        return why;
    }
    device = dist_local_rank() % count;
    cudaCheck(cudaSetDevice(device));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    // the kernels are built for one generation with PTX for newer ones (CUDA_ARCH in the Makefile)
    if (prop.major * 10 + prop.minor < DIFFTX_CUDA_ARCH) {
        snprintf(why, sizeof(why), "GPU %d (%.100s) has compute capability %d.%d; this build's kernels need sm_%d or newer "
                 "(rebuild with make CUDA=1 CUDA_ARCH=%d%d)", device, prop.name, prop.major, prop.minor, DIFFTX_CUDA_ARCH,
                 prop.major, prop.minor);
        return why;
    }
    snprintf(gpu, sizeof(gpu), "%.100s (sm_%d%d)", prop.name, prop.major, prop.minor);
    device_bytes = (double)prop.totalGlobalMem;
    int optin = 0;
    cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    shared_limit = (size_t)optin;
    cudaCheck(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep = UINT64_MAX;
    cudaCheck(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    cublasCheck(cublasCreate(&cublas));
    // fp32 arithmetic throughout: no TF32 tensor-core rounding of the inputs, whatever the
    // environment (NVIDIA_TF32_OVERRIDE) says
    cublasCheck(cublasSetMathMode(cublas, CUBLAS_PEDANTIC_MATH));
    return NULL;
}

// The device context, handles and scratch are the process's, shared by its instances (one
// stream, in order); an instance owns its precision and its weights' bf16 copies
static const char* cuda_open(Backend* be) {
    if (be->precision == PRECISION_BF16) {
        be->copies = cuda_bf16_copies_open();
        snprintf(be->description, sizeof(be->description), "cuda %s; bf16 weight products: cuBLAS tensor cores", gpu);
    } else {
        snprintf(be->description, sizeof(be->description), "cuda %s", gpu);
    }
    return NULL;
}
static double cuda_memory_bytes(void) { return device_bytes; }

static double cuda_peak_memory_bytes(void) {
    uint64_t high = 0;
    cudaCheck(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high));
    return (double)high;
}

static void cuda_synchronize(void) { cudaCheck(cudaDeviceSynchronize()); }

void* cuda_alloc(size_t bytes) {
    void* p = NULL;
    size_t n = bytes ? bytes : 1;
    cudaError_t err = cudaMallocAsync(&p, n, 0);
    if (err != cudaSuccess) {
        size_t free_bytes = 0, total = 0;
        cudaMemGetInfo(&free_bytes, &total);
        die("CUDA: cannot allocate %.1f MiB on cuda %s (%.1f MiB free of %.1f MiB): %s", n / 1048576.0, gpu,
            free_bytes / 1048576.0, total / 1048576.0, cudaGetErrorString(err));
    }
    cudaCheck(cudaMemsetAsync(p, 0, n, 0));
    return p;
}

void cuda_release(void* buf) {
    if (buf) cudaCheck(cudaFreeAsync(buf, 0));
}

static void cuda_zero(void* buf, size_t bytes) { cudaCheck(cudaMemsetAsync(buf, 0, bytes, 0)); }
static void cuda_copy(void* dst, const void* src, size_t bytes) {
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
}
void cuda_upload(void* dst, const void* host, size_t bytes) { cudaCheck(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice)); }
void cuda_download(void* host, const void* src, size_t bytes) { cudaCheck(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost)); }

void* cuda_scratch(int slot, size_t bytes) {
    static void* buf[SCRATCH_SLOTS];
    static size_t capacity[SCRATCH_SLOTS];
    if (bytes > capacity[slot]) {
        cuda_release(buf[slot]);
        buf[slot] = cuda_alloc(bytes);
        capacity[slot] = bytes;
    }
    return buf[slot];
}

void cuda_sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const float* A, int lda,
                const float* B, int ldb, float beta, float* C, int ldc) {
    cublasCheck(cublasSgemm(cublas, ta, tb, m, n, k, &alpha, A, lda, B, ldb, &beta, C, ldc));
}

__global__ void fill_kernel(float* x, size_t n, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    x[i] = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

void cuda_fill(float* x, size_t n, uint32_t seed) {
    fill_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS>>>(x, n, seed);
    cudaCheckLaunch();
}

float cuda_best_ms(void (*call)(void* ctx), void* ctx) {
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    float best = 1e30f;
    for (int rep = 0; rep < 5; rep++) {
        cudaCheck(cudaEventRecord(start, 0));
        call(ctx);
        cudaCheck(cudaEventRecord(stop, 0));
        cudaCheck(cudaEventSynchronize(stop));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, start, stop));
        if (rep > 0 && ms < best) best = ms;  // the first call loads the kernel
    }
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    return best;
}

#define RATE_N CUDA_RATE_N
static void square_sgemm(void* abc) {
    float** m = (float**)abc;
    cuda_sgemm(CUBLAS_OP_N, CUBLAS_OP_N, RATE_N, RATE_N, RATE_N, 1.0f, m[0], RATE_N, m[1], RATE_N, 0.0f, m[2], RATE_N);
}

// A product of side CUDA_RATE_N in the weights' products' precision
static double cuda_matmul_rate(const Backend* be) {
    if (be->precision == PRECISION_BF16) return cuda_bf16_matmul_rate();
    size_t count = (size_t)RATE_N * RATE_N;
    float* abc[3];
    for (int i = 0; i < 3; i++) abc[i] = (float*)cuda_alloc(count * sizeof(float));
    cuda_fill(abc[0], count, 1);
    cuda_fill(abc[1], count, 2);
    float ms = cuda_best_ms(square_sgemm, abc);
    for (int i = 0; i < 3; i++) cuda_release(abc[i]);
    return 2.0 * count * RATE_N / (ms / 1e3) / 1e9;
}

// SMs x multiply-adds per SM and clock x 2 x the peak clock the driver reports: fp32 lanes, or in
// bf16 the tensor cores' dense bf16 rate
static double cuda_peak_rate(const Backend* be, char* how, size_t n) {
    int major, minor, sms, khz;
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    cudaCheck(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
    const char* unit;
    int per_sm;
    if (be->precision == PRECISION_BF16) {
        // dense bf16 multiply-adds per SM and clock with fp32 accumulation (NVIDIA's A100 and
        // H100 whitepapers: 312 and 989 TFLOP/s at their boost clocks): 1024 on sm_80, 2048 on
        // sm_90; the other generations' parts differ within one generation
        unit = "bf16 tensor-core multiply-adds";
        per_sm = major == 8 && minor == 0 ? 1024 : major == 9 && minor == 0 ? 2048 : 0;
    } else {
        // fp32 lanes by generation (NVIDIA's CUDA programming guide): 64 on Volta, Turing and
        // A100, 128 on the others from sm_86 on
        unit = "fp32 lanes";
        per_sm = major == 7 || (major == 8 && minor == 0) ? 64 : major >= 8 ? 128 : 0;
    }
    if (!per_sm) {
        snprintf(how, n, "no count of %s per SM known for sm_%d%d", unit, major, minor);
        return 0.0;
    }
    snprintf(how, n, "%d SMs x %d %s x 2 x %.2f GHz (the driver's peak clock)", sms, per_sm, unit, khz / 1e6);
    return (double)sms * per_sm * 2.0 * khz / 1e6;
}

// NCCL's all-reduce in place, one GPU per rank; the communicator's id travels over MPI once
static void cuda_sum_across_ranks(float* x, size_t n) {
    if (dist_ranks() == 1) return;
#ifdef DIFFTX_MPI
    static ncclComm_t comm;
    static int ready;
    if (!ready) {
        ncclUniqueId id;
        if (dist_rank() == 0 && ncclGetUniqueId(&id) != ncclSuccess) die("NCCL: cannot create a communicator id");
        dist_broadcast(&id, sizeof(id));
        ncclResult_t r = ncclCommInitRank(&comm, dist_ranks(), id, dist_rank());
        if (r != ncclSuccess) die("NCCL: rank %d cannot join the communicator: %s", dist_rank(), ncclGetErrorString(r));
        ready = 1;
    }
    ncclResult_t r = ncclAllReduce(x, x, n, ncclFloat, ncclSum, comm, 0);
    if (r != ncclSuccess) die("NCCL: all-reduce of %zu floats: %s", n, ncclGetErrorString(r));
    cudaCheck(cudaStreamSynchronize(0));
#else
    (void)x;
    (void)n;
    die("this program was built without MPI: it cannot sum across ranks");
#endif
}

// Marks as events on the stream, read on the GPU's clock
static cudaEvent_t* marks;
static int mark_capacity;
static void cuda_timer_mark(int i) {
    while (i >= mark_capacity) {
        marks = (cudaEvent_t*)realloc(marks, (size_t)(mark_capacity + 64) * sizeof(cudaEvent_t));
        if (!marks) die("out of memory for timer marks");
        for (int k = mark_capacity; k < mark_capacity + 64; k++) cudaCheck(cudaEventCreate(&marks[k]));
        mark_capacity += 64;
    }
    cudaCheck(cudaEventRecord(marks[i], 0));
}
static void cuda_timer_read(double* seconds, int n) {
    if (n <= 0) return;
    cudaCheck(cudaEventSynchronize(marks[n - 1]));
    for (int i = 0; i < n; i++) {
        float ms = 0.0f;
        cudaCheck(cudaEventElapsedTime(&ms, marks[0], marks[i]));
        seconds[i] = ms / 1e3;
    }
}

static Backend table(void) {
    Backend b;
    memset(&b, 0, sizeof(b));
    b.name = CUDA_BACKEND_NAME;
    b.device = "cuda";
    b.host_memory = 0;
    b.init = cuda_init;
    b.open = cuda_open;
    b.close = backend_release_copies;
    b.device_name = backend_description;
    b.memory_bytes = cuda_memory_bytes;
    b.peak_memory_bytes = cuda_peak_memory_bytes;
    b.synchronize = cuda_synchronize;
    b.alloc = cuda_alloc;
    b.release = cuda_release;
    b.zero = cuda_zero;
    b.copy = cuda_copy;
    b.upload = cuda_upload;
    b.download = cuda_download;
    b.matmul_forward = cuda_matmul_forward;
    b.matmul_backward = cuda_matmul_backward;
    b.rmsnorm_forward = cuda_rmsnorm_forward;
    b.rmsnorm_backward = cuda_rmsnorm_backward;
    b.rope_apply = cuda_rope_apply;
    b.swiglu_forward = cuda_swiglu_forward;
    b.swiglu_backward = cuda_swiglu_backward;
    b.embedding_forward = cuda_embedding_forward;
    b.embedding_backward = cuda_embedding_backward;
    b.crossentropy_forward = cuda_crossentropy_forward;
    b.crossentropy_backward = cuda_crossentropy_backward;
    b.supports = cuda_attention_supports;
    b.attention_forward = cuda_attention_forward;
    b.attention_backward = cuda_attention_backward;
    b.integral_forward = cuda_integral_forward;
    b.integral_backward = cuda_integral_backward;
    b.attention_maps = cuda_attention_maps;
    b.lambda_forward = cuda_lambda_forward;
    b.lambda_backward = cuda_lambda_backward;
    b.token_lambda_forward = cuda_token_lambda_forward;
    b.token_lambda_backward = cuda_token_lambda_backward;
    b.sum_squares = cuda_sum_squares;
    b.scale = cuda_scale;
    b.add = cuda_add;
    b.sum_across_ranks = cuda_sum_across_ranks;
    b.adamw_update = cuda_adamw_update;
    b.matmul_spent = cuda_matmul_spent;
    b.matmul_rate = cuda_matmul_rate;
    b.peak_rate = cuda_peak_rate;
    b.weights_changed = backend_weights_changed;
    b.activations_changed = backend_activations_changed;
    b.attention_path = cuda_attention_path;
    b.timer_mark = cuda_timer_mark;
    b.timer_read = cuda_timer_read;
    return b;
}

extern "C" const Backend* backend_cuda(void) {
    static const Backend CUDA = table();
    return &CUDA;
}
