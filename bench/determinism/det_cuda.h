/*
 * What the CUDA back end (det_cuda.c) shares with the cuBLAS audit
 * (det_cublas.c): the kernels of kernels.cu and CUDA_CHECK (cuda_entry.h's
 * BENCH_CUDA_CHECK, as in the other benchmarks).
 */
#ifndef DET_CUDA_H
#define DET_CUDA_H

#include <stdint.h>
#include <stdio.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cuda_entry.h"
#include "determinism.h"

#define CUDA_CHECK(call) BENCH_CUDA_CHECK(call)

typedef struct det_cuda_functions {
    CUfunction fill_bf16, fill_f16, fill_f32, fill_u32;
    CUfunction lm_head, combine, softmax, argmax;
    CUfunction be_burn, be_stream;
} det_cuda_functions;

enum { DET_FILL_BF16 = 0, DET_FILL_F16 = 1, DET_FILL_F32 = 2, DET_FILL_U32 = 3 };

/** Queues a grid-stride fill of n elements on v through ds_launch: random
 *  non-zero values scale * (-1, 1) from `seed` (bf16, f16, f32), or the 32-bit
 *  word (uint32_t)seed everywhere (DET_FILL_U32). */
int det_cuda_fill(det_backend *b, ds_vctx_t v, void *p, unsigned long long n, int kind, uint64_t seed,
                  float scale);

const det_cuda_functions *det_cuda_get_functions(det_backend *b);

#endif /* DET_CUDA_H */
