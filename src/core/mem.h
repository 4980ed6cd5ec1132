/*
 * Tenant memory (mem.c): ds_mem_alloc and quotas over the allocation
 * registry of src/memory/tenant_memory.h (which also samples working sets).
 */
#ifndef DS_CORE_MEM_H
#define DS_CORE_MEM_H

#include "seam/driver.h"

struct ds_vctx;

/* Frees every allocation left at teardown, logging what it freed. */
void ds__mem_release_all(struct ds_vctx *v);

#endif /* DS_CORE_MEM_H */
