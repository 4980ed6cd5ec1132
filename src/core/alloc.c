/*
 * The replaceable allocator (ds_replace_allocator). The four functions are
 * read with relaxed loads: they change only while no runtime exists, so no
 * allocation of one allocator is ever freed by another.
 */
#include "core/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "core/log.h"

void ds__quarantine_flush(void); /* handles.c */

static _Atomic(ds_malloc_fn) g_malloc = malloc;
static _Atomic(ds_calloc_fn) g_calloc = calloc;
static _Atomic(ds_realloc_fn) g_realloc = realloc;
static _Atomic(ds_free_fn) g_free = free;
static atomic_uint g_runtimes;

void *ds__malloc(size_t size) { return atomic_load_explicit(&g_malloc, memory_order_relaxed)(size); }

void *ds__calloc(size_t count, size_t size)
{
    return atomic_load_explicit(&g_calloc, memory_order_relaxed)(count, size);
}

void *ds__realloc(void *ptr, size_t size)
{
    return atomic_load_explicit(&g_realloc, memory_order_relaxed)(ptr, size);
}

void ds__free(void *ptr)
{
    if (ptr)
        atomic_load_explicit(&g_free, memory_order_relaxed)(ptr);
}

void ds__alloc_runtime_created(void) { atomic_fetch_add(&g_runtimes, 1); }

void ds__alloc_runtime_destroyed(void) { atomic_fetch_sub(&g_runtimes, 1); }

ds_status ds_replace_allocator(ds_malloc_fn malloc_fn, ds_realloc_fn realloc_fn, ds_calloc_fn calloc_fn,
                               ds_free_fn free_fn)
{
    if (!malloc_fn || !realloc_fn || !calloc_fn || !free_fn)
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_replace_allocator: malloc %s, realloc %s, calloc %s, free %s (all four are required)",
                        malloc_fn ? "set" : "NULL", realloc_fn ? "set" : "NULL", calloc_fn ? "set" : "NULL",
                        free_fn ? "set" : "NULL");
    if (atomic_load(&g_runtimes))
        return ds__fail(DS_ERR_BUSY, "ds_replace_allocator: %u runtime(s) alive; replace the allocator before "
                        "the first ds_runtime_create() or after the last ds_runtime_destroy()",
                        atomic_load(&g_runtimes));
    /* destroyed handles kept for checks were allocated by the outgoing one */
    ds__quarantine_flush();
    atomic_store(&g_malloc, malloc_fn);
    atomic_store(&g_realloc, realloc_fn);
    atomic_store(&g_calloc, calloc_fn);
    atomic_store(&g_free, free_fn);
    return DS_SUCCESS;
}
