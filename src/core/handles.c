/*
 * Quarantine of destroyed handles. A caller that uses a handle after
 * destroying it (or its runtime) gets DS_ERR_INVALID_HANDLE rather than a
 * read of freed memory, for the last DS__QUARANTINE_SLOTS destroyed objects.
 * Beyond that, detection is best effort, as in any C library. Replacing the
 * allocator empties the quarantine first, with the allocator that gave the
 * memory.
 */
#include <pthread.h>
#include <stdlib.h>

#include "core/handles.h"
#include "seam/alloc.h"
#include "seam/log.h"

#define DS__QUARANTINE_SLOTS 1024

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static void *g_slots[DS__QUARANTINE_SLOTS];
static unsigned g_next;

void ds__quarantine_flush(void)
{
    pthread_mutex_lock(&g_lock);
    for (unsigned i = 0; i < DS__QUARANTINE_SLOTS; i++) {
        ds__free(g_slots[i]);
        g_slots[i] = NULL;
    }
    g_next = 0;
    pthread_mutex_unlock(&g_lock);
}

void ds__quarantine(void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&g_lock);
    void *old = g_slots[g_next];
    g_slots[g_next] = p;
    g_next = (g_next + 1) % DS__QUARANTINE_SLOTS;
    pthread_mutex_unlock(&g_lock);
    ds__free(old);
}

/* ------------------------------------------------------------------------ */
/* the allocator: replaced only while no runtime is alive                    */

static atomic_uint g_runtimes;

void ds__runtime_count(int delta)
{
    if (delta > 0)
        atomic_fetch_add(&g_runtimes, 1);
    else
        atomic_fetch_sub(&g_runtimes, 1);
}

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
    ds__alloc_set(malloc_fn, realloc_fn, calloc_fn, free_fn);
    return DS_SUCCESS;
}
