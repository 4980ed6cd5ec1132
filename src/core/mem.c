/*
 * Tenant memory: ds_mem_alloc / ds_mem_free over the CUDA virtual
 * memory management API, per-vCtx quota and accounting, the working set of
 * launches (parameter introspection), release at vCtx teardown. The
 * registry and the scan live in memory/tenant_memory.c.
 *
 * VMM sequence: CUDA Driver API, "Virtual Memory Management"
 * (cuMemGetAllocationGranularity, cuMemAddressReserve, cuMemCreate, cuMemMap,
 * cuMemSetAccess; cuMemUnmap, cuMemRelease, cuMemAddressFree to undo).
 */
#include <stdlib.h>
#include <string.h>

#include "core/fault.h"
#include "core/handles.h"
#include "core/mem.h"
#include "core/runtime.h"
#include "core/vctx.h"
#include "memory/tenant_memory.h"
#include "seam/driver.h"
#include "seam/log.h"

static int vmm_available(const ds__driver *cu)
{
    return cu->cuMemGetAllocationGranularity && cu->cuMemAddressReserve && cu->cuMemAddressFree &&
           cu->cuMemCreate && cu->cuMemRelease && cu->cuMemMap && cu->cuMemUnmap && cu->cuMemSetAccess;
}

static void make_current(const struct ds_runtime *rt)
{
    CUcontext cur;
    if (rt->cu->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != rt->primary)
        rt->cu->cuCtxSetCurrent(rt->primary);
}

static CUmemAllocationProp device_prop(const struct ds_runtime *rt)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)rt->dev;
    return prop;
}

/* Unmaps, releases and frees the address range of e; returns the first
 * failure (every step is tried). */
static CUresult unmap_release(const ds__driver *cu, const ds__mem_entry *e)
{
    CUresult r1 = cu->cuMemUnmap(e->base, e->mapped);
    CUresult r2 = cu->cuMemRelease(e->handle);
    CUresult r3 = cu->cuMemAddressFree(e->base, e->mapped);
    return r1 != CUDA_SUCCESS ? r1 : r2 != CUDA_SUCCESS ? r2 : r3;
}

static ds_status vmm_fail(struct ds_vctx *v, const char *call, CUresult r)
{
    if (ds__fault_note(v->rt, r, v, call))
        return ds__fault_status(v->rt, "ds_mem_alloc");
    return ds__fail(r == CUDA_ERROR_NOT_SUPPORTED ? DS_ERR_NOT_SUPPORTED : ds__cu_status(r),
                    "ds_mem_alloc('%s'): %s -> %s", v->name, call, ds__cu_error_name(v->cu, r));
}

ds_status ds_mem_alloc(ds_vctx_t v, size_t bytes, CUdeviceptr *out)
{
    DS__TRY(ds__vctx_check(v, "ds_mem_alloc"));
    if (!bytes || !out)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_mem_alloc('%s'): %s", v->name,
                        !out ? "out is NULL" : "bytes is 0");
    struct ds_runtime *rt = v->rt;
    if (DS__UNLIKELY(ds__faulted(rt)))
        return ds__fault_status(rt, "ds_mem_alloc");
    const ds__driver *cu = v->cu;
    if (!vmm_available(cu))
        return ds__fail(DS_ERR_NOT_SUPPORTED,
                        "ds_mem_alloc('%s'): the driver (%s) lacks the virtual memory management API",
                        v->name, cu->origin ? cu->origin : "?");
    make_current(rt);
    CUmemAllocationProp prop = device_prop(rt);
    size_t gran = 0;
    CUresult r = cu->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS)
        return vmm_fail(v, "cuMemGetAllocationGranularity", r);
    if (!gran)
        return ds__fail(DS_ERR_DRIVER, "ds_mem_alloc('%s'): granularity 0", v->name);
    atomic_store_explicit(&v->mem.granularity, gran, memory_order_relaxed);
    if (bytes > SIZE_MAX - gran)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_mem_alloc('%s'): %zu bytes overflow", v->name, bytes);
    size_t mapped = (bytes + gran - 1) / gran * gran;

    if (ds__memreg_charge(&v->mem, mapped) != 0)
        return ds__fail(DS_ERR_MEMORY_QUOTA,
                        "ds_mem_alloc('%s'): %zu bytes (%zu mapped) with %llu of the quota of %llu bytes in use",
                        v->name, bytes, mapped,
                        (unsigned long long)atomic_load_explicit(&v->mem.allocated, memory_order_relaxed),
                        (unsigned long long)atomic_load_explicit(&v->mem.quota, memory_order_relaxed));

    ds__mem_entry e = {0, bytes, mapped, 0, 0};
    const char *step = "cuMemAddressReserve";
    r = cu->cuMemAddressReserve(&e.base, mapped, 0, 0, 0);
    if (r != CUDA_SUCCESS)
        goto fail_charge;
    step = "cuMemCreate";
    r = cu->cuMemCreate(&e.handle, mapped, &prop, 0);
    if (r != CUDA_SUCCESS)
        goto fail_reserve;
    step = "cuMemMap";
    r = cu->cuMemMap(e.base, mapped, 0, e.handle, 0);
    if (r != CUDA_SUCCESS)
        goto fail_create;
    step = "cuMemSetAccess";
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = cu->cuMemSetAccess(e.base, mapped, &access, 1);
    if (r != CUDA_SUCCESS)
        goto fail_map;
    ds_status st = ds__memreg_insert(&v->mem, &e);
    if (st != DS_SUCCESS) {
        unmap_release(cu, &e);
        ds__memreg_uncharge(&v->mem, mapped);
        return st;
    }
    *out = e.base;
    return DS_SUCCESS;

fail_map:
    cu->cuMemUnmap(e.base, mapped);
fail_create:
    cu->cuMemRelease(e.handle);
fail_reserve:
    cu->cuMemAddressFree(e.base, mapped);
fail_charge:
    ds__memreg_uncharge(&v->mem, mapped);
    return vmm_fail(v, step, r);
}

ds_status ds_mem_free(ds_vctx_t v, CUdeviceptr ptr)
{
    DS__TRY(ds__vctx_check(v, "ds_mem_free"));
    ds__mem_entry e;
    if (ds__memreg_remove(&v->mem, ptr, &e) != 0)
        return ds__fail(DS_ERR_NOT_FOUND, "ds_mem_free('%s'): 0x%llx is not an allocation of this vCtx",
                        v->name, (unsigned long long)ptr);
    ds__memreg_uncharge(&v->mem, e.mapped);
    if (ds__faulted(v->rt))
        return DS_SUCCESS; /* the driver frees everything with the context */
    make_current(v->rt);
    CUresult r = unmap_release(v->cu, &e);
    if (r != CUDA_SUCCESS)
        return ds__fail(DS_ERR_DRIVER, "ds_mem_free('%s'): 0x%llx: %s", v->name, (unsigned long long)ptr,
                        ds__cu_error_name(v->cu, r));
    return DS_SUCCESS;
}

ds_status ds_vctx_set_mem_quota(ds_vctx_t v, uint64_t bytes)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_set_mem_quota"));
    pthread_mutex_lock(&v->mem.lock);
    atomic_store_explicit(&v->mem.quota, bytes, memory_order_relaxed);
    pthread_mutex_unlock(&v->mem.lock);
    return DS_SUCCESS;
}

ds_status ds_vctx_get_mem_stats(ds_vctx_t v, ds_mem_stats *stats)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_get_mem_stats"));
    DS__TRY(ds__check_abi(stats, sizeof *stats, "ds_mem_stats"));
    size_t size = stats->size;
    ds_mem_stats s = DS_MEM_STATS_INIT;
    s.size = size;
    ds__memreg *m = &v->mem;
    uint64_t ws = 0, samples = 0;
    ds__memreg_recent(m, &ws, &samples); /* takes the lock: a consistent view */
    pthread_mutex_lock(&m->lock);
    s.bytes_allocated = atomic_load_explicit(&m->allocated, memory_order_relaxed);
    s.allocations = m->n;
    s.peak_bytes = atomic_load_explicit(&m->peak, memory_order_relaxed);
    s.quota_bytes = atomic_load_explicit(&m->quota, memory_order_relaxed);
    s.total_allocations = atomic_load_explicit(&m->total_allocs, memory_order_relaxed);
    s.quota_refusals = atomic_load_explicit(&m->quota_refusals, memory_order_relaxed);
    pthread_mutex_unlock(&m->lock);
    s.granularity = atomic_load_explicit(&m->granularity, memory_order_relaxed);
    s.working_set_bytes = ws;
    s.working_set_window = DS__MEM_WS_WINDOW;
    s.sampled_launches = samples;
    s.copies = atomic_load_explicit(&v->copy.done, memory_order_relaxed);
    s.copy_bytes = atomic_load_explicit(&v->copy.bytes, memory_order_relaxed);
    s.copy_wait_ns = atomic_load_explicit(&v->copy.wait_ns, memory_order_relaxed);
    *stats = s;
    return DS_SUCCESS;
}

ds_status ds_mem_working_set(ds_vctx_t v, CUfunction f, void **params, CUdeviceptr *out, size_t cap,
                             size_t *n)
{
    DS__TRY(ds__vctx_check(v, "ds_mem_working_set"));
    if (!f || !n || (!out && cap))
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_mem_working_set('%s'): %s", v->name,
                        !f ? "f is NULL" : !n ? "n is NULL" : "out is NULL with cap > 0");
    size_t sizes[DS__MEM_MAX_PARAMS];
    int np = ds__mem_param_sizes(v->cu, f, sizes, DS__MEM_MAX_PARAMS);
    if (np < 0)
        return ds__fail(DS_ERR_NOT_SUPPORTED,
                        "ds_mem_working_set('%s'): the driver cannot give the kernel's parameter layout "
                        "(cuFuncGetParamInfo, CUDA 12.4+)",
                        v->name);
    size_t found = 0;
    if (ds__memreg_scan(&v->mem, params, sizes, params ? np : 0, 0, out, cap, &found, NULL) != 0)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "ds_mem_working_set('%s'): scan state", v->name);
    *n = found;
    return DS_SUCCESS;
}

void ds__mem_release_all(struct ds_vctx *v)
{
    size_t count = 0;
    uint64_t bytes = 0;
    int dead = ds__faulted(v->rt);
    if (atomic_load_explicit(&v->mem.count, memory_order_relaxed) && !dead)
        make_current(v->rt);
    CUresult first = CUDA_SUCCESS;
    ds__mem_entry e;
    while (ds__memreg_pop(&v->mem, &e) == 0) {
        ds__memreg_uncharge(&v->mem, e.mapped);
        count++;
        bytes += e.mapped;
        if (!dead) {
            CUresult r = unmap_release(v->cu, &e);
            if (r != CUDA_SUCCESS && first == CUDA_SUCCESS)
                first = r;
        }
    }
    if (count)
        ds__log(first == CUDA_SUCCESS ? DS_LOG_INFO : DS_LOG_WARN,
                "vCtx '%s' destroyed with %zu allocation(s) of %llu bytes; freed%s%s", v->name, count,
                (unsigned long long)bytes, first == CUDA_SUCCESS ? "" : ", a release failed: ",
                first == CUDA_SUCCESS ? "" : ds__cu_error_name(v->cu, first));
}
