/*
 * Tenant memory (mem.c): ds_mem_alloc and quotas over the allocation
 * registry of src/memory/tenant_memory.h, and working-set sampling.
 */
#ifndef DS_CORE_MEM_H
#define DS_CORE_MEM_H

#include "seam/driver.h"

struct ds_vctx;

/* Scans a sampled launch's parameters for the vCtx's allocations (owner
 * thread, only when v->mem.count != 0). */
void ds__mem_sample(struct ds_vctx *v, CUfunction f, void **params);
/* Frees every allocation left at teardown, logging what it freed. */
void ds__mem_release_all(struct ds_vctx *v);

#endif /* DS_CORE_MEM_H */
