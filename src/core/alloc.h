/*
 * Host memory of the library. Every heap allocation of the runtime goes
 * through these, so that an application can supply its own allocator
 * (ds_replace_allocator) and tests can fail any one allocation.
 */
#ifndef DS_CORE_ALLOC_H
#define DS_CORE_ALLOC_H

#include <stddef.h>

void *ds__malloc(size_t size);
void *ds__calloc(size_t count, size_t size);
void *ds__realloc(void *ptr, size_t size);
void ds__free(void *ptr);

/* Runtimes alive in the process: the allocator may only be replaced at 0. */
void ds__alloc_runtime_created(void);
void ds__alloc_runtime_destroyed(void);

#endif /* DS_CORE_ALLOC_H */
