// A CPU emulation of the part of the CUDA runtime and of the device language that
// model/cuda/*.cu uses, so that the CUDA backend's kernels run unchanged in every `make test`
// (tests/cuda_emulation/emulator.cc implements it; tests/cuda_emulation/translate.sh maps the
// launch syntax and __shared__, the two things a C++ compiler cannot read).
//
// Every thread of a block runs as a fiber. __syncthreads, warp shuffles and votes are real
// rendezvous: a thread waits there until every thread that must reach the same call has
// reached it, and a barrier reached by part of a block, a warp operation reached by part of
// its mask, or threads that wait on each other forever are reported and end the program.
// Shared memory starts as a signalling NaN (arithmetic on it traps), and device allocations
// and shared memory end at a guard page, so an out-of-bounds access stops at once, named.
// Blocks run one after another; the threads of a block in index order, each until it waits.
#ifndef DIFFTX_CUDA_EMULATION_RUNTIME_H
#define DIFFTX_CUDA_EMULATION_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- the runtime API subset ----
typedef enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
} cudaError_t;

typedef enum {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
} cudaMemcpyKind;

typedef enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 } cudaFuncAttribute;
typedef enum { cudaMemPoolAttrReleaseThreshold = 4, cudaMemPoolAttrUsedMemHigh = 8 } cudaMemPoolAttr;
typedef enum {
    cudaDevAttrClockRate = 13,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
} cudaDeviceAttr;

typedef struct EmuStream* cudaStream_t;
typedef struct EmuEvent* cudaEvent_t;
typedef struct EmuPool* cudaMemPool_t;

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor, multiProcessorCount;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaGetLastError(void);
const char* cudaGetErrorString(cudaError_t err);
const char* cudaGetErrorName(cudaError_t err);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);
cudaError_t cudaEventDestroy(cudaEvent_t event);

// A kernel's opt-in to more than the default dynamic shared memory, kept per kernel
cudaError_t emu_set_max_dynamic_shared(const void* kernel, int bytes);
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
    return emu_set_max_dynamic_shared((const void*)kernel, value);
}

// ---- the device language ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

// The running thread's coordinates: the scheduler sets them at every switch between fibers
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

// rendezvous, each with the source line of its call (threads must meet at the same one)
enum EmuWarpOp { EMU_SHFL_IDX, EMU_SHFL_XOR, EMU_SHFL_UP, EMU_SHFL_DOWN, EMU_BALLOT, EMU_ALL, EMU_ANY, EMU_SYNCWARP };
void emu_syncthreads(const char* file, int line);
uint64_t emu_warp_op(EmuWarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line);

template <typename T>
T emu_shuffle(EmuWarpOp op, const char* file, int line, unsigned mask, T value, int arg, int width = 32) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "a shuffle moves at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &value, sizeof(T));
    bits = emu_warp_op(op, mask, bits, arg, width, file, line);
    T out;
    memcpy(&out, &bits, sizeof(T));
    return out;
}

#define __syncthreads() emu_syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ((void)emu_warp_op(EMU_SYNCWARP, emu_mask_or_full(__VA_ARGS__), 0, 0, 32, __FILE__, __LINE__))
#define __shfl_sync(...) emu_shuffle(EMU_SHFL_IDX, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) emu_shuffle(EMU_SHFL_XOR, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) emu_shuffle(EMU_SHFL_UP, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) emu_shuffle(EMU_SHFL_DOWN, __FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(mask, pred) ((unsigned)emu_warp_op(EMU_BALLOT, (mask), (pred) != 0, 0, 32, __FILE__, __LINE__))
#define __all_sync(mask, pred) ((int)emu_warp_op(EMU_ALL, (mask), (pred) != 0, 0, 32, __FILE__, __LINE__))
#define __any_sync(mask, pred) ((int)emu_warp_op(EMU_ANY, (mask), (pred) != 0, 0, 32, __FILE__, __LINE__))
static inline unsigned emu_mask_or_full(unsigned mask = 0xffffffffu) { return mask; }

// Shared memory of the running block, poisoned when the block starts. The build rewrites
// `extern __shared__ T name[];` to the launch's dynamic shared memory and `__shared__ T
// name[N];` to an array of its own (one per declaration, `key` tells them apart).
void* emu_shared(size_t bytes, size_t element, const void* key, const char* name);
template <typename T>
T* emu_dynamic_shared() {
    return (T*)emu_shared(0, sizeof(T), NULL, "dynamic shared memory");
}
template <typename T>
T* emu_static_shared(size_t count, const void* key, const char* name) {
    return (T*)emu_shared(count * sizeof(T), sizeof(T), key, name);
}

// The _rn intrinsics round each operation on its own; the emulation is compiled with
// -ffp-contract=off, so they are never fused into multiply-adds here either
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

// ---- launches: the build rewrites `kernel<<<grid, block, smem>>>(args)` to
// `emu_launch(kernel, "kernel", __FILE__, __LINE__, grid, block, smem)(args)` ----
struct EmuLaunchConfig {
    dim3 grid, block;
    size_t dynamic_shared;
    const void* kernel;
    const char *name, *file;
    int line;
};
// Runs body once per thread of every block, or records why the launch is invalid for
// cudaGetLastError (as a real launch does); pointer arguments are checked to be device memory
void emu_run_grid(const EmuLaunchConfig& cfg, const std::function<void()>& body);
void emu_check_argument(const EmuLaunchConfig& cfg, int index, const void* pointer);

template <typename T>
void emu_check_one(const EmuLaunchConfig& cfg, int index, const T& arg) {
    if constexpr (std::is_pointer<T>::value) emu_check_argument(cfg, index, (const void*)arg);
    (void)cfg;
    (void)index;
    (void)arg;
}

template <typename... P>
struct EmuLaunch {
    void (*kernel)(P...);
    EmuLaunchConfig cfg;
    // the parameters' own types, so that arguments convert as at a kernel call (NULL included)
    void operator()(P... a) const {
        std::tuple<P...> args(a...);
        int index = 0;
        (emu_check_one(cfg, index++, a), ...);
        emu_run_grid(cfg, [&] { std::apply(kernel, args); });
    }
};

template <typename... P>
EmuLaunch<P...> emu_launch(void (*kernel)(P...), const char* name, const char* file, int line, dim3 grid, dim3 block,
                           size_t dynamic_shared = 0, cudaStream_t stream = 0) {
    (void)stream;
    return EmuLaunch<P...>{kernel, {grid, block, dynamic_shared, (const void*)kernel, name, file, line}};
}

#endif
