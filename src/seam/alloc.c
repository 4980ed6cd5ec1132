/*
 * The replaceable allocator. The four functions are read with relaxed loads:
 * ds_replace_allocator (handles.c) changes them only while no runtime exists,
 * so no allocation of one allocator is ever freed by another.
 */
#include "seam/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "seam/log.h"


static _Atomic(ds_malloc_fn) g_malloc = malloc;
static _Atomic(ds_calloc_fn) g_calloc = calloc;
static _Atomic(ds_realloc_fn) g_realloc = realloc;
static _Atomic(ds_free_fn) g_free = free;

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

void ds__alloc_set(ds_malloc_fn m, ds_realloc_fn r, ds_calloc_fn c, ds_free_fn f)
{
    atomic_store(&g_malloc, m);
    atomic_store(&g_realloc, r);
    atomic_store(&g_calloc, c);
    atomic_store(&g_free, f);
}
