// The cuBLAS subset the CUDA backend calls, for its CPU emulation (cuda_runtime.h beside it):
// cublasSgemm runs on the CPU's BLAS (OpenBLAS) over the emulated device memory, after the
// checks cuBLAS makes of its arguments; cublasGemmEx takes bf16 operands with fp32 output and
// accumulation (the one combination the backend asks for), widens the operands to fp32 (exact)
// and multiplies them as cublasSgemm does; their batched forms run each entry so, after checking
// the pointer arrays lie in device memory and no two entries write one output element. Results agree with cuBLAS to fp32 rounding, not
// bitwise; the emulation checks the kernels around the matmuls, not cuBLAS.
#ifndef DIFFTX_CUDA_EMULATION_CUBLAS_H
#define DIFFTX_CUDA_EMULATION_CUBLAS_H

#include "cuda_runtime.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_PEDANTIC_MATH = 2 } cublasMath_t;
typedef struct EmuBlas* cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
const char* cublasGetStatusString(cublasStatus_t status);
cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                           const float* A, int lda, const float* B, int ldb, const float* beta, float* C, int ldc);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType a_type, int lda, const void* B, cudaDataType b_type, int ldb, const void* beta,
                            void* C, cudaDataType c_type, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo);
// The batched forms: one product per entry of the pointer arrays (device memory), the entries'
// outputs disjoint
cublasStatus_t cublasSgemmBatched(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                                  const float* const A[], int lda, const float* const B[], int ldb, const float* beta, float* const C[], int ldc,
                                  int count);
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha,
                                   const void* const A[], cudaDataType a_type, int lda, const void* const B[], cudaDataType b_type, int ldb,
                                   const void* beta, void* const C[], cudaDataType c_type, int ldc, int count, cublasComputeType_t compute,
                                   cublasGemmAlgo_t algo);

#endif
