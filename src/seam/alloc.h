/*
 * Host memory of the library. Every heap allocation of the runtime goes
 * through these, so that an application can supply its own allocator
 * (ds_replace_allocator) and tests can fail any one allocation.
 */
#ifndef DS_SEAM_ALLOC_H
#define DS_SEAM_ALLOC_H

#include <stddef.h>

#include "detshare/detshare.h"

void *ds__malloc(size_t size);
void *ds__calloc(size_t count, size_t size);
void *ds__realloc(void *ptr, size_t size);
void ds__free(void *ptr);

/* Installs the four functions (ds_replace_allocator checked them and that no
 * runtime is alive). */
void ds__alloc_set(ds_malloc_fn m, ds_realloc_fn r, ds_calloc_fn c, ds_free_fn f);

#endif /* DS_SEAM_ALLOC_H */
