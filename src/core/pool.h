/*
 * The pCtx pool (pool.c): the SM split done once, one green context per tier,
 * streams of a pCtx.
 */
#ifndef DS_CORE_POOL_H
#define DS_CORE_POOL_H

#include <stdint.h>

#include "seam/driver.h"

typedef struct ds__pctx {
    uint32_t sm_count;
    ds_tier_anchor anchor;
    uint64_t group_mask;
    int32_t complement;
    CUgreenCtx green;
    CUcontext ctx; /* cuCtxFromGreenCtx(green) */
} ds__pctx;

struct ds_runtime;

ds_status ds__pool_build(struct ds_runtime *rt, const ds_tier_spec *tiers, uint32_t num_tiers);
void ds__pool_destroy(struct ds_runtime *rt);
/* A green context over the split groups in `mask` (outside the pool), and
 * the SMs those groups hold. */
ds_status ds__pool_green(struct ds_runtime *rt, uint64_t mask, CUgreenCtx *out);
uint32_t ds__pool_mask_sms(const struct ds_runtime *rt, uint64_t mask);
/* Creates a stream of pCtx `index` (non-blocking, given priority). */
ds_status ds__pool_stream_create(struct ds_runtime *rt, uint32_t index, int priority, CUstream *out);

#endif /* DS_CORE_POOL_H */
