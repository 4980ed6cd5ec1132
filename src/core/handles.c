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

#include "core/alloc.h"
#include "core/runtime.h"

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
