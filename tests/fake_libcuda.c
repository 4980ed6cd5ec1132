/* A stand-in libcuda.so.1 for the driver-loading tests: reports the version
 * FAKE_VERSION and resolves no entry point named FAKE_MISSING. Every entry
 * point it does resolve fails with CUDA_ERROR_NO_DEVICE. */
#include <cuda.h>
#include <string.h>

#ifndef FAKE_MISSING
#define FAKE_MISSING ""
#endif

static CUresult fake_version(int *v)
{
    *v = FAKE_VERSION;
    return CUDA_SUCCESS;
}

static CUresult fake_fail(void) { return CUDA_ERROR_NO_DEVICE; }

static CUresult fake_error_name(CUresult r, const char **s)
{
    (void)r;
    *s = "CUDA_ERROR_NO_DEVICE";
    return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult
cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                    CUdriverProcAddressQueryResult *status)
{
    (void)version;
    (void)flags;
    if (strcmp(symbol, FAKE_MISSING) == 0) {
        *pfn = NULL;
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    if (strcmp(symbol, "cuDriverGetVersion") == 0)
        *pfn = (void *)fake_version;
    else if (strcmp(symbol, "cuGetErrorName") == 0 || strcmp(symbol, "cuGetErrorString") == 0)
        *pfn = (void *)fake_error_name;
    else
        *pfn = (void *)fake_fail;
    *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}
