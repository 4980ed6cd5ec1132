/*
 * The simulated driver's memory (driver_sim_call.h gives the entry points'
 * shape): device allocations (host memory standing in for device memory),
 * pinned host memory, copies and memsets, stream memory operations (value
 * waits and writes, asynchronous copies), the virtual memory management API
 * and cuMemGetInfo.
 */
#include "seam/alloc.h"
#include "sim/driver_sim_call.h"

#include <string.h>
#include <sys/mman.h>

/* ------------------------------------------------------------------------ */
/* Memory (host memory standing in for device memory)                       */
/* ------------------------------------------------------------------------ */

static CUresult vmm_check(uintptr_t p, size_t n);

CUresult ds__sim_mem_check(uintptr_t p, size_t n, int remove)
{
    for (int slot = 0; slot < DS__SIM_MAX_DEVICES; slot++) {
        sim_dev *d;
        if (ds__sim_dev_acquire(slot, &d) != CUDA_SUCCESS)
            continue;
        CUresult r = ds__sim_mem_find(d, p, n, remove);
        ds__sim_dev_release(d);
        if (r == CUDA_SUCCESS)
            return CUDA_SUCCESS;
    }
    /* memory mapped through the virtual memory management API */
    return remove ? CUDA_ERROR_INVALID_VALUE : vmm_check(p, n);
}

SIM_LOCKED(cuMemAlloc, (CUdeviceptr *dptr, size_t bytesize), (dptr, bytesize),
           on_current(), 0,
           if (!dptr) return CUDA_ERROR_INVALID_VALUE;)
{
    void *p;
    CUresult r = ds__sim_mem_alloc(c->d, bytesize, 0, &p);
    if (r == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)(uintptr_t)p;
    return r;
}

CUresult ds__sim_cuMemFree(CUdeviceptr dptr)
{
    if (!dptr)
        return CUDA_SUCCESS;
    return ds__sim_mem_check((uintptr_t)dptr, 0, 1);
}

/* Pinned host memory mapped into the device: on the simulated device host and
 * device memory are one, so it is an ordinary (zeroed) allocation whose host
 * and device addresses are the same. */
SIM_LOCKED(cuMemHostAlloc, (void **pp, size_t bytesize, unsigned int Flags), (pp, bytesize, Flags),
           on_current(), 0,
           if (!pp || !bytesize || (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                                                        CU_MEMHOSTALLOC_WRITECOMBINED)))
               return CUDA_ERROR_INVALID_VALUE;)
{
    return ds__sim_mem_alloc(c->d, bytesize, 1, pp);
}

CUresult ds__sim_cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    if (!pdptr || !p || Flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ds__sim_mem_check((uintptr_t)p, 1, 0);
    if (r == CUDA_SUCCESS)
        *pdptr = (CUdeviceptr)(uintptr_t)p;
    return r;
}

CUresult ds__sim_cuMemFreeHost(void *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    return ds__sim_mem_check((uintptr_t)p, 0, 1);
}

/* A copy of n > 0 bytes between host and device memory: CUDA_SUCCESS if
 * both are given and [dev, dev+n) is allocated or mapped. */
static CUresult copy_check(CUdeviceptr dev, const void *host, size_t n)
{
    if (!host || !dev)
        return CUDA_ERROR_INVALID_VALUE;
    return ds__sim_mem_check((uintptr_t)dev, n, 0);
}

CUresult ds__sim_cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    if (!ByteCount)
        return CUDA_SUCCESS;
    CUresult r = copy_check(dstDevice, srcHost, ByteCount);
    if (r == CUDA_SUCCESS)
        memcpy((void *)(uintptr_t)dstDevice, srcHost, ByteCount);
    return r;
}

CUresult ds__sim_cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    if (!ByteCount)
        return CUDA_SUCCESS;
    CUresult r = copy_check(srcDevice, dstHost, ByteCount);
    if (r == CUDA_SUCCESS)
        memcpy(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount);
    return r;
}

CUresult ds__sim_cuMemsetD32(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    if (!N)
        return CUDA_SUCCESS;
    if (!dstDevice || dstDevice % 4 || N > SIZE_MAX / 4)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ds__sim_mem_check((uintptr_t)dstDevice, N * 4, 0);
    if (r == CUDA_SUCCESS) {
        uint32_t *p = (uint32_t *)(uintptr_t)dstDevice;
        for (size_t i = 0; i < N; i++)
            p[i] = ui;
    }
    return r;
}

/* ------------------------------------------------------------------------ */
/* Stream memory operations: value waits and writes, asynchronous copies     */
/* ------------------------------------------------------------------------ */

/* Enqueues a copy of op on the call's stream. */
static CUresult enqueue_op(sim_call *c, sim_op op)
{
    if (c->s->capture)
        return capture_refuse(c->s);
    sim_op *p = ds__calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = op;
    ds__sim_enqueue(c->d, c->s, p);
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuStreamWaitValue32, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
           (stream, addr, value, flags),
           on_stream(stream), SIM_STICKY,
           if ((flags & ~(unsigned)(0x3u | CU_STREAM_WAIT_VALUE_FLUSH)) || !addr || addr % 4)
               return CUDA_ERROR_INVALID_VALUE;)
{
    return enqueue_op(c, (sim_op){ .kind = SIM_OP_WAIT_VALUE,
                                   .addr = (uint32_t *)(uintptr_t)addr,
                                   .value = value,
                                   .flags = flags });
}

SIM_LOCKED(cuStreamWriteValue32, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
           (stream, addr, value, flags),
           on_stream(stream), SIM_STICKY,
           if ((flags & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) || !addr || addr % 4)
               return CUDA_ERROR_INVALID_VALUE;)
{
    return enqueue_op(c, (sim_op){ .kind = SIM_OP_WRITE_VALUE,
                                   .addr = (uint32_t *)(uintptr_t)addr,
                                   .value = value,
                                   .flags = flags });
}

/* Asynchronous copies: checked at the call (the device range must be
 * allocated or mapped), carried out when they reach the stream's head, so
 * they are ordered with the stream's kernels, events and value operations. */
SIM_LOCKED(cuMemcpyHtoDAsync,
           (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
           (dstDevice, srcHost, ByteCount, hStream),
           on_stream(hStream), SIM_STICKY,
           if (!ByteCount) return CUDA_SUCCESS;
           CUresult r = copy_check(dstDevice, srcHost, ByteCount);
           if (r != CUDA_SUCCESS) return r;)
{
    void *dst = (void *)(uintptr_t)dstDevice;
    return enqueue_op(c, (sim_op){ .kind = SIM_OP_COPY, .dst = dst, .src = srcHost, .n = ByteCount });
}

SIM_LOCKED(cuMemcpyDtoHAsync, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
           (dstHost, srcDevice, ByteCount, hStream),
           on_stream(hStream), SIM_STICKY,
           if (!ByteCount) return CUDA_SUCCESS;
           CUresult r = copy_check(srcDevice, dstHost, ByteCount);
           if (r != CUDA_SUCCESS) return r;)
{
    const void *src = (const void *)(uintptr_t)srcDevice;
    return enqueue_op(c, (sim_op){ .kind = SIM_OP_COPY, .dst = dstHost, .src = src, .n = ByteCount });
}

/* ------------------------------------------------------------------------ */
/* Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap...) */
/* ------------------------------------------------------------------------ */

/*
 * Process-wide, under one mutex (never taken with a device lock held, and no
 * device lock is taken under it except to validate a device ordinal).
 * A reservation is an mmap(PROT_NONE) range of host address space; mapping a
 * physical allocation over part of it makes that part zero-filled host memory
 * (the pages are dropped at unmap, so a later map reads zeros), readable and
 * writable once cuMemSetAccess grants access. Kernels and launch parameters
 * can point into it, and cuMemcpyHtoD/DtoH accept it. Simplification: the
 * contents belong to the mapping, not to the physical handle (a handle mapped
 * twice does not alias), and only offset 0 / whole-handle maps are accepted.
 */
typedef struct sim_vres {
    uintptr_t base;
    size_t size;
} sim_vres;

typedef struct sim_vphys {
    size_t size;
    int device;
    uint32_t maps;    /* live mappings of it */
    int released;     /* cuMemRelease called: freed at its last unmap */
} sim_vphys;

typedef struct sim_vmap {
    uintptr_t base;
    size_t size;
    sim_vphys *phys;
    int access;       /* cuMemSetAccess granted read/write */
} sim_vmap;

static pthread_mutex_t g_vmm_mu = PTHREAD_MUTEX_INITIALIZER;
static sim_vres *g_vres;
static size_t g_nvres, g_capvres;
static sim_vmap *g_vmap;
static size_t g_nvmap, g_capvmap;
static sim_vphys **g_vphys;
static size_t g_nvphys, g_capvphys;

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 16;
    void *a = ds__realloc(*arr, c * elem);
    if (!a)
        return -1;
    *arr = a;
    *cap = c;
    return 0;
}

/* CUDA_SUCCESS if prop is a pinned allocation on a live device. */
static CUresult vmm_prop_ok(const CUmemAllocationProp *prop)
{
    sim_dev *d;
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (ds__sim_dev_acquire(prop->location.id, &d) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_DEVICE;
    ds__sim_dev_release(d);
    return CUDA_SUCCESS;
}

CUresult ds__sim_cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                  CUmemAllocationGranularity_flags option)
{
    (void)option;
    if (!granularity)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = vmm_prop_ok(prop);
    if (r == CUDA_SUCCESS)
        *granularity = DS__SIM_VMM_GRANULARITY;
    return r;
}

CUresult ds__sim_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                        unsigned long long flags)
{
    (void)addr; /* a hint only, as on the driver */
    (void)flags;
    const size_t g = DS__SIM_VMM_GRANULARITY;
    if (!ptr || !size || size % g || (alignment && (alignment & (alignment - 1))))
        return CUDA_ERROR_INVALID_VALUE;
    size_t align = alignment > g ? alignment : g;
    if (size > SIZE_MAX - align)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *m = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t raw = (uintptr_t)m, base = (raw + align - 1) & ~(uintptr_t)(align - 1);
    if (base > raw)
        munmap(m, base - raw);
    if (raw + size + align > base + size)
        munmap((void *)(base + size), raw + size + align - (base + size));
    pthread_mutex_lock(&g_vmm_mu);
    CUresult r = CUDA_SUCCESS;
    if (grow((void **)&g_vres, &g_capvres, g_nvres, sizeof *g_vres) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        g_vres[g_nvres++] = (sim_vres){ base, size };
    pthread_mutex_unlock(&g_vmm_mu);
    if (r != CUDA_SUCCESS)
        munmap((void *)base, size);
    else
        *ptr = (CUdeviceptr)base;
    return r;
}

CUresult ds__sim_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_vmm_mu);
    for (size_t i = 0; i < g_nvres; i++)
        if (g_vres[i].base == (uintptr_t)ptr && g_vres[i].size == size) {
            int busy = 0;
            for (size_t k = 0; k < g_nvmap; k++)
                busy |= g_vmap[k].base >= g_vres[i].base && g_vmap[k].base < g_vres[i].base + size;
            if (busy)
                break; /* still mapped: the driver refuses */
            munmap((void *)g_vres[i].base, size);
            g_vres[i] = g_vres[--g_nvres];
            r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&g_vmm_mu);
    return r;
}

CUresult ds__sim_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                const CUmemAllocationProp *prop, unsigned long long flags)
{
    (void)flags;
    if (!handle || !size || size % DS__SIM_VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = vmm_prop_ok(prop);
    if (r != CUDA_SUCCESS)
        return r;
    sim_vphys *p = ds__calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->size = size;
    p->device = prop->location.id;
    pthread_mutex_lock(&g_vmm_mu);
    if (grow((void **)&g_vphys, &g_capvphys, g_nvphys, sizeof *g_vphys) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        g_vphys[g_nvphys++] = p;
    pthread_mutex_unlock(&g_vmm_mu);
    if (r != CUDA_SUCCESS)
        ds__free(p);
    else
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
    return r;
}

/* g_vmm_mu held: index of a live physical allocation, or -1. */
static ptrdiff_t vphys_find(CUmemGenericAllocationHandle h)
{
    for (size_t i = 0; i < g_nvphys; i++)
        if ((CUmemGenericAllocationHandle)(uintptr_t)g_vphys[i] == h && !g_vphys[i]->released)
            return (ptrdiff_t)i;
    return -1;
}

static void vphys_drop(sim_vphys *p)
{
    for (size_t i = 0; i < g_nvphys; i++)
        if (g_vphys[i] == p) {
            g_vphys[i] = g_vphys[--g_nvphys];
            ds__free(p);
            return;
        }
}

CUresult ds__sim_cuMemRelease(CUmemGenericAllocationHandle handle)
{
    pthread_mutex_lock(&g_vmm_mu);
    ptrdiff_t i = vphys_find(handle);
    if (i >= 0) {
        sim_vphys *p = g_vphys[i];
        p->released = 1;
        if (!p->maps)
            vphys_drop(p);
    }
    pthread_mutex_unlock(&g_vmm_mu);
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult ds__sim_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                             unsigned long long flags)
{
    if (!ptr || offset != 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t b = (uintptr_t)ptr;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_vmm_mu);
    ptrdiff_t pi = vphys_find(handle);
    int inside = 0, overlap = 0;
    for (size_t i = 0; i < g_nvres; i++)
        inside |= b >= g_vres[i].base && b - g_vres[i].base <= g_vres[i].size &&
                  size <= g_vres[i].size - (b - g_vres[i].base);
    for (size_t k = 0; k < g_nvmap; k++)
        overlap |= b < g_vmap[k].base + g_vmap[k].size && g_vmap[k].base < b + size;
    if (pi >= 0 && g_vphys[pi]->size == size && inside && !overlap) {
        if (grow((void **)&g_vmap, &g_capvmap, g_nvmap, sizeof *g_vmap) != 0) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            g_vmap[g_nvmap++] = (sim_vmap){ b, size, g_vphys[pi], 0 };
            g_vphys[pi]->maps++;
            r = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&g_vmm_mu);
    return r;
}

CUresult ds__sim_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    if (!ptr || !size || !desc || !count)
        return CUDA_ERROR_INVALID_VALUE;
    int rw = 0;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return CUDA_ERROR_INVALID_VALUE;
        rw |= desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    uintptr_t b = (uintptr_t)ptr;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_vmm_mu);
    /* the range must be covered by mappings: here, exactly one per call */
    for (size_t k = 0; k < g_nvmap; k++)
        if (g_vmap[k].base == b && g_vmap[k].size == size) {
            if (mprotect((void *)b, size, rw ? PROT_READ | PROT_WRITE : PROT_NONE) == 0) {
                g_vmap[k].access = rw;
                r = CUDA_SUCCESS;
            } else {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            }
            break;
        }
    pthread_mutex_unlock(&g_vmm_mu);
    return r;
}

CUresult ds__sim_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    uintptr_t b = (uintptr_t)ptr;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_vmm_mu);
    for (size_t k = 0; k < g_nvmap; k++)
        if (g_vmap[k].base == b && g_vmap[k].size == size) {
            /* drop the pages (a later map reads zeros) and the access */
            madvise((void *)b, size, MADV_DONTNEED);
            mprotect((void *)b, size, PROT_NONE);
            sim_vphys *p = g_vmap[k].phys;
            g_vmap[k] = g_vmap[--g_nvmap];
            if (--p->maps == 0 && p->released)
                vphys_drop(p);
            r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&g_vmm_mu);
    return r;
}

/* CUDA_SUCCESS if [p, p+n) lies in one mapping with read/write access. */
static CUresult vmm_check(uintptr_t p, size_t n)
{
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_vmm_mu);
    for (size_t k = 0; k < g_nvmap; k++)
        if (g_vmap[k].access && p >= g_vmap[k].base && p - g_vmap[k].base <= g_vmap[k].size &&
            n <= g_vmap[k].size - (p - g_vmap[k].base)) {
            r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&g_vmm_mu);
    return r;
}

void ds__sim_vmm_counts(size_t *reservations, size_t *physical, size_t *mappings)
{
    pthread_mutex_lock(&g_vmm_mu);
    *reservations = g_nvres;
    *physical = g_nvphys;
    *mappings = g_nvmap;
    pthread_mutex_unlock(&g_vmm_mu);
}


size_t ds__sim_vmm_device_bytes(int slot)
{
    size_t n = 0;
    pthread_mutex_lock(&g_vmm_mu);
    for (size_t i = 0; i < g_nvphys; i++)
        if (g_vphys[i]->device == slot)
            n += g_vphys[i]->size;
    pthread_mutex_unlock(&g_vmm_mu);
    return n;
}

/* free: the device's memory less what cuMemAlloc, executable graphs and
 * VMM physical allocations hold (cuMemHostAlloc memory is host memory). */
SIM_LOCKED(cuMemGetInfo, (size_t *free_bytes, size_t *total_bytes), (free_bytes, total_bytes),
           on_current(), SIM_STICKY | SIM_VMM_BYTES,
           if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;)
{
    const sim_dev *d = c->d;
    size_t used = d->mem_alloc_bytes + d->mem_graph_bytes + c->vmm_bytes;
    *total_bytes = DS__SIM_MEM_TOTAL;
    *free_bytes = used < DS__SIM_MEM_TOTAL ? DS__SIM_MEM_TOTAL - used : 0;
    return CUDA_SUCCESS;
}
