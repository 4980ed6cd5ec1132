/*
 * Allocation registry and kernel-parameter introspection (tenant_memory.h).
 */
#include "seam/alloc.h"
#include "memory/tenant_memory.h"

#include <stdlib.h>
#include <string.h>

#include "seam/log.h"

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define ST(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)

void ds__memreg_init(ds__memreg *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
}

void ds__memreg_fini(ds__memreg *r)
{
    ds__free(r->e);
    r->e = NULL;
    r->n = r->cap = 0;
    ST(r->count, 0);
    pthread_mutex_destroy(&r->lock);
}

int ds__memreg_charge(ds__memreg *r, size_t mapped)
{
    pthread_mutex_lock(&r->lock);
    uint64_t q = LD(r->quota), a = LD(r->allocated);
    int ok = !q || (mapped <= q && a <= q - mapped);
    if (ok) {
        ST(r->allocated, a + mapped);
        if (a + mapped > LD(r->peak))
            ST(r->peak, a + mapped);
    } else {
        ST(r->quota_refusals, LD(r->quota_refusals) + 1);
    }
    pthread_mutex_unlock(&r->lock);
    return ok ? 0 : -1;
}

void ds__memreg_uncharge(ds__memreg *r, size_t mapped)
{
    pthread_mutex_lock(&r->lock);
    ST(r->allocated, LD(r->allocated) - mapped);
    pthread_mutex_unlock(&r->lock);
}

/* lock held: first index whose base is > p */
static size_t upper(const ds__memreg *r, uintptr_t p)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->e[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* lock held: index of the allocation holding address p, or -1. Addresses in
 * the rounding tail (bytes .. mapped) count: they are mapped memory. */
static ptrdiff_t find(const ds__memreg *r, uint64_t p)
{
    size_t i = upper(r, (uintptr_t)p);
    if (i == 0)
        return -1;
    const ds__mem_entry *e = &r->e[i - 1];
    return p - e->base < e->mapped ? (ptrdiff_t)(i - 1) : -1;
}

ds_status ds__memreg_insert(ds__memreg *r, const ds__mem_entry *e)
{
    pthread_mutex_lock(&r->lock);
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        ds__mem_entry *a = ds__realloc(r->e, cap * sizeof *a);
        if (!a) {
            pthread_mutex_unlock(&r->lock);
            return ds__fail(DS_ERR_OUT_OF_MEMORY, "allocation registry: %zu entries", cap);
        }
        r->e = a;
        r->cap = cap;
    }
    size_t i = upper(r, (uintptr_t)e->base);
    memmove(&r->e[i + 1], &r->e[i], (r->n - i) * sizeof *r->e);
    r->e[i] = *e;
    r->e[i].last_seen = 0;
    r->n++;
    ST(r->count, r->n);
    ST(r->total_allocs, LD(r->total_allocs) + 1);
    pthread_mutex_unlock(&r->lock);
    return DS_SUCCESS;
}

static void remove_at(ds__memreg *r, size_t i, ds__mem_entry *out)
{
    *out = r->e[i];
    memmove(&r->e[i], &r->e[i + 1], (r->n - i - 1) * sizeof *r->e);
    r->n--;
    ST(r->count, r->n);
}

int ds__memreg_remove(ds__memreg *r, CUdeviceptr base, ds__mem_entry *out)
{
    pthread_mutex_lock(&r->lock);
    ptrdiff_t i = find(r, base);
    int ok = i >= 0 && r->e[i].base == base;
    if (ok)
        remove_at(r, (size_t)i, out);
    pthread_mutex_unlock(&r->lock);
    return ok ? 0 : -1;
}

int ds__memreg_pop(ds__memreg *r, ds__mem_entry *out)
{
    pthread_mutex_lock(&r->lock);
    int ok = r->n > 0;
    if (ok)
        remove_at(r, r->n - 1, out);
    pthread_mutex_unlock(&r->lock);
    return ok ? 0 : -1;
}

int ds__mem_param_sizes(const ds__driver *cu, CUfunction f, size_t *sizes, int cap)
{
    if (!cu->cuFuncGetParamInfo || !f)
        return -1;
    int n = 0;
    for (; n < cap; n++) {
        size_t off = 0, sz = 0;
        if (cu->cuFuncGetParamInfo(f, (size_t)n, &off, &sz) != CUDA_SUCCESS)
            break; /* CUDA_ERROR_INVALID_VALUE past the last parameter */
        sizes[n] = sz;
    }
    if (n == 0) {
        /* no parameters, or a function the driver cannot describe */
        size_t off, sz;
        CUresult res = cu->cuFuncGetParamInfo(f, 0, &off, &sz);
        return res == CUDA_ERROR_INVALID_VALUE ? 0 : -1;
    }
    return n;
}

int ds__memreg_scan(ds__memreg *r, void **params, const size_t *sizes, int nparams, int mark,
                    CUdeviceptr *out, size_t cap, size_t *n, uint64_t *bytes)
{
    size_t found = 0;
    pthread_mutex_lock(&r->lock);
    uint64_t stamp = mark ? ++r->samples : 0;
    /* Two passes: stamp what the parameters point into (with a marker that
     * is unique to this scan), then collect in address order. */
    uint64_t tag = mark ? stamp : UINT64_MAX; /* UINT64_MAX: a temporary tag */
    uint64_t *saved = NULL;
    if (!mark && r->n) {
        saved = ds__malloc(r->n * sizeof *saved);
        if (!saved) {
            pthread_mutex_unlock(&r->lock);
            *n = 0;
            return -1;
        }
        for (size_t i = 0; i < r->n; i++)
            saved[i] = r->e[i].last_seen;
    }
    for (int k = 0; params && k < nparams && r->n; k++) {
        const unsigned char *p = params[k];
        if (!p)
            continue;
        for (size_t off = 0; off + sizeof(uint64_t) <= sizes[k]; off += 8) {
            uint64_t val;
            memcpy(&val, p + off, sizeof val);
            ptrdiff_t i = find(r, val);
            if (i >= 0)
                r->e[i].last_seen = tag;
        }
    }
    uint64_t b = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->e[i].last_seen == tag) {
            if (found < cap)
                out[found] = r->e[i].base;
            found++;
            b += r->e[i].mapped;
        }
    if (saved) {
        for (size_t i = 0; i < r->n; i++)
            r->e[i].last_seen = saved[i];
        ds__free(saved);
    }
    pthread_mutex_unlock(&r->lock);
    *n = found;
    if (bytes)
        *bytes += b;
    return 0;
}

void ds__memreg_recent(ds__memreg *r, uint64_t *bytes, uint64_t *samples)
{
    pthread_mutex_lock(&r->lock);
    uint64_t b = 0, s = r->samples;
    for (size_t i = 0; i < r->n; i++) {
        uint64_t t = r->e[i].last_seen;
        if (t && t + DS__MEM_WS_WINDOW > s)
            b += r->e[i].mapped;
    }
    pthread_mutex_unlock(&r->lock);
    *bytes = b;
    *samples = s;
}

void ds__memreg_sample(ds__memreg *r, const ds__driver *cu, CUfunction f, void **params)
{
    size_t sizes[DS__MEM_MAX_PARAMS];
    int np = ds__mem_param_sizes(cu, f, sizes, DS__MEM_MAX_PARAMS);
    if (np <= 0 || !params)
        return;
    size_t found = 0;
    ds__memreg_scan(r, params, sizes, np, 1, NULL, 0, &found, NULL);
}
