/*
 * Driver entry points for the examples, through cudart
 * (cudaGetDriverEntryPointByVersion): the examples link cudart and cuBLAS but
 * never libcuda, so they start on machines without a driver and fall back to
 * the simulated device there.
 */
#ifndef DS_EXAMPLES_CUDA_ENTRY_H
#define DS_EXAMPLES_CUDA_ENTRY_H

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>

/* ABI version asked for every entry point: each one used existed in 12.0,
 * and libdetshare needs a 12.5 driver anyway. */
#define BENCH_ENTRY_POINT_VERSION 12000

/* Stores the driver's `symbol` in *fn. Prints what failed and returns -1. */
int bench_cuda_entry(const char *symbol, void **fn);

/* POSIX allows storing a function address through a void ** (dlsym idiom). */
#define BENCH_ENTRY_POINT(table, name) bench_cuda_entry(#name, (void **)&(table).name)

/* The driver calls the examples make themselves (module loading, launches
 * outside ds_launch), and one loader for all of them. */
typedef struct bench_driver_api {
    __typeof__(cuGetErrorName) *cuGetErrorName;
    __typeof__(cuModuleLoadData) *cuModuleLoadData;
    __typeof__(cuModuleGetFunction) *cuModuleGetFunction;
    __typeof__(cuModuleUnload) *cuModuleUnload;
    __typeof__(cuLaunchKernel) *cuLaunchKernel;
} bench_driver_api;

/* Fills every entry of *cu; -1 (printed) if one is missing. */
int bench_driver_api_load(bench_driver_api *cu);

/* Check macros for example programs: print the failing call and return -1. */
#define BENCH_CUDA_CHECK(call)                                                                    \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_), \
                    cudaGetErrorString(e_));                                                      \
            return -1;                                                                            \
        }                                                                                         \
    } while (0)

#define BENCH_CUBLAS_CHECK(call)                                                                  \
    do {                                                                                          \
        cublasStatus_t s_ = (call);                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,                   \
                    cublasGetStatusName(s_), cublasGetStatusString(s_));                          \
            return -1;                                                                            \
        }                                                                                         \
    } while (0)

/* `api` is a bench_driver_api (for the error name). */
#define BENCH_CU_CHECK(api, call)                                                                 \
    do {                                                                                          \
        CUresult r_ = (call);                                                                     \
        if (r_ != CUDA_SUCCESS) {                                                                 \
            const char *n_ = "unknown CUresult";                                                  \
            if ((api).cuGetErrorName)                                                             \
                (api).cuGetErrorName(r_, &n_);                                                    \
            fprintf(stderr, "%s:%d: %s -> %s (%d)\n", __FILE__, __LINE__, #call, n_, (int)r_);    \
            return -1;                                                                            \
        }                                                                                         \
    } while (0)

#endif
