/*
 * SM-set probe: runs the embedded ds_probe_smid kernel on a pCtx and reports
 * which SMs its blocks ran on (%smid). Used by dsinfo and by the confinement
 * test in suite `gpu`; the simulated device implements the same kernel.
 */
#include <string.h>

#include "core/handles.h"
#include "core/pool.h"
#include "core/probe.h"
#include "core/runtime.h"
#include "seam/driver.h"
#include "seam/log.h"

ds_status ds__module_function(struct ds_runtime *rt, const char *name, CUfunction *out)
{
    DS__CU(rt, cuCtxSetCurrent(rt->primary));
    if (!rt->module)
        DS__CU(rt, cuModuleLoadData(&rt->module, rt->device_image));
    DS__CU(rt, cuModuleGetFunction(out, rt->module, name));
    return DS_SUCCESS;
}

/* The probe kernel and its bitmap, made once (under rt->lock) and kept until
 * the runtime goes: freeing device memory would wait for the RCK, which never
 * finishes while the runtime lives. */
ds_status ds__probe_prepare(struct ds_runtime *rt)
{
    if (rt->probe_fn)
        return DS_SUCCESS;
    DS__TRY(ds__module_function(rt, "ds_probe_smid", &rt->probe_fn));
    DS__CU(rt, cuMemAlloc(&rt->probe_buf, DS_MAX_SMS / 8));
    return DS_SUCCESS;
}

static ds_status run_probe(struct ds_runtime *rt, uint32_t index, uint32_t words[DS_MAX_SMS / 32])
{
    DS__TRY(ds__probe_prepare(rt));
    CUstream s = NULL;
    CUdeviceptr buf = rt->probe_buf;
    ds_status st = DS_SUCCESS;
    DS__TRY_GOTO(ds__pool_stream_create(rt, index, rt->prio_least, &s), st, out);
    CUresult r = rt->cu->cuMemsetD32(buf, 0, DS_MAX_SMS / 32);
    if (r == CUDA_SUCCESS) {
        /* 8 blocks per SM of the pCtx, each resident 20 us: every SM gets some. */
        unsigned long long spin_ns = 20000;
        void *params[] = {&buf, &spin_ns};
        r = rt->cu->cuLaunchKernel(rt->probe_fn, rt->pctx[index].sm_count * 8, 1, 1, 32, 1, 1, 0, s,
                                   params, NULL);
    }
    if (r == CUDA_SUCCESS)
        r = rt->cu->cuStreamSynchronize(s);
    if (r == CUDA_SUCCESS)
        r = rt->cu->cuMemcpyDtoH(words, buf, DS_MAX_SMS / 8);
    if (r != CUDA_SUCCESS)
        st = ds__fail(DS_ERR_DRIVER, "ds_pctx_probe_sms(pCtx %u): %s", index, ds__cu_error_name(rt->cu, r));
out:
    if (s)
        rt->cu->cuStreamDestroy(s);
    return st;
}

ds_status ds_pctx_probe_sms(ds_runtime_t rt, uint32_t index, uint64_t sm_bitmap[DS_MAX_SMS / 64],
                            uint32_t *count)
{
    DS__TRY(ds__rt_check(rt, "ds_pctx_probe_sms"));
    if (!sm_bitmap || !count)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_pctx_probe_sms: NULL output");
    if (index >= rt->num_pctx)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_pctx_probe_sms: pCtx %u, pool has %u", index,
                        rt->num_pctx);
    uint32_t words[DS_MAX_SMS / 32];
    memset(words, 0, sizeof words);
    pthread_mutex_lock(&rt->lock);
    ds_status st = run_probe(rt, index, words);
    pthread_mutex_unlock(&rt->lock);
    if (st != DS_SUCCESS)
        return st;
    uint32_t n = 0;
    for (int i = 0; i < DS_MAX_SMS / 64; i++) {
        sm_bitmap[i] = (uint64_t)words[2 * i] | ((uint64_t)words[2 * i + 1] << 32);
        n += (uint32_t)__builtin_popcountll(sm_bitmap[i]);
    }
    *count = n;
    return DS_SUCCESS;
}
