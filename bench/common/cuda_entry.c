#include "cuda_entry.h"

#include <cuda_runtime.h>
#include <stdio.h>

int bench_cuda_entry(const char *symbol, void **fn)
{
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, fn, BENCH_ENTRY_POINT_VERSION, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn) {
        fprintf(stderr, "cudaGetDriverEntryPointByVersion(%s, %d) -> %s, query result %d\n", symbol,
                BENCH_ENTRY_POINT_VERSION, cudaGetErrorName(e), (int)q);
        return -1;
    }
    return 0;
}

int bench_driver_api_load(bench_driver_api *cu)
{
    if (BENCH_ENTRY_POINT(*cu, cuGetErrorName) || BENCH_ENTRY_POINT(*cu, cuModuleLoadData) ||
        BENCH_ENTRY_POINT(*cu, cuModuleGetFunction) || BENCH_ENTRY_POINT(*cu, cuModuleUnload) ||
        BENCH_ENTRY_POINT(*cu, cuLaunchKernel))
        return -1;
    return 0;
}
