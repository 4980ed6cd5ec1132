/*
 * cuBLAS for the examples that run GEMMs in sections (colocate, pairs,
 * serve): a handle with a workspace of its own, so cuBLAS never allocates
 * (and never synchronizes) inside a timed step or a graph capture, and the
 * linear layer every model-shaped workload runs.
 *
 * A handle must not be used by two threads at once: one per tenant thread.
 * Functions that can fail return 0, or -1 after printing the failing call.
 */
#ifndef DETSHARE_EXAMPLES_BLAS_H
#define DETSHARE_EXAMPLES_BLAS_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

/* cuBLAS recommends 32 MiB of workspace on Hopper. */
#define BENCH_BLAS_WORKSPACE_BYTES (32u << 20)

typedef struct bench_blas {
    cublasHandle_t handle;
    void *workspace; /* BENCH_BLAS_WORKSPACE_BYTES of device memory */
} bench_blas;

/** Creates the handle and its workspace (cudaMalloc on the current device). */
int bench_blas_create(bench_blas *b);
/** Frees what bench_blas_create made (either may be missing); b is zeroed. */
void bench_blas_destroy(bench_blas *b);
/** Points the handle at stream s (a section's: it can change between
 *  sections after a remap, so call it every time). cublasSetStream resets the
 *  workspace to cuBLAS's own pool, hence the cublasSetWorkspace after it. */
int bench_blas_bind(bench_blas *b, cudaStream_t s);
/** A linear layer, row-major: out[n][m] = in[n][k] . weight[m][k]^T + beta
 *  out, bf16 in, fp32 accumulation (CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
 *  out_type out; beta 1 adds a residual already in out. Column-major cuBLAS
 *  sees weight as k x m (hence OP_T), in as k x n and out as m x n. On the
 *  handle's current stream. */
int bench_blas_linear(const bench_blas *b, int m, int n, int k, const void *weight, const void *in, void *out,
                      cudaDataType out_type, float beta);

#endif /* DETSHARE_EXAMPLES_BLAS_H */
