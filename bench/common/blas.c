/* cuBLAS helpers of the examples (blas.h). */
#include "blas.h"

#include <string.h>

#include "cuda_entry.h"

int bench_blas_create(bench_blas *b)
{
    memset(b, 0, sizeof *b);
    BENCH_CUBLAS_CHECK(cublasCreate(&b->handle));
    BENCH_CUDA_CHECK(cudaMalloc(&b->workspace, BENCH_BLAS_WORKSPACE_BYTES));
    return 0;
}

void bench_blas_destroy(bench_blas *b)
{
    if (b->handle)
        cublasDestroy(b->handle);
    if (b->workspace)
        cudaFree(b->workspace);
    memset(b, 0, sizeof *b);
}

int bench_blas_bind(bench_blas *b, cudaStream_t s)
{
    BENCH_CUBLAS_CHECK(cublasSetStream(b->handle, s));
    BENCH_CUBLAS_CHECK(cublasSetWorkspace(b->handle, b->workspace, BENCH_BLAS_WORKSPACE_BYTES));
    return 0;
}

int bench_blas_linear(const bench_blas *b, int m, int n, int k, const void *weight, const void *in, void *out,
                      cudaDataType out_type, float beta)
{
    const float one = 1.f;
    BENCH_CUBLAS_CHECK(cublasGemmEx(b->handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, weight, CUDA_R_16BF, k, in,
                                    CUDA_R_16BF, k, &beta, out, out_type, m, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
    return 0;
}
