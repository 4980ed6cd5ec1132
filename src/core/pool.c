/*
 * The pCtx pool: one split of the device's SM resource into groups of
 * minSmPartitionSize SMs, then one green context per tier over a union of
 * groups. Built once at runtime creation (cuGreenCtxCreate costs 1-2 ms each),
 * never on the hot path.
 *
 * Source: CUDA Driver API, "Green Contexts" (cuDevSmResourceSplitByCount,
 * cuDevResourceGenerateDesc, cuGreenCtxCreate); a descriptor may combine any
 * subset of one split's outputs (docs/device-facts.md).
 */
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/pool.h"
#include "core/runtime.h"
#include "seam/driver.h"
#include "seam/log.h"

static uint32_t mask_sms(const struct ds_runtime *rt, uint64_t mask)
{
    uint32_t n = 0;
    for (uint32_t g = 0; g < rt->num_groups; g++)
        if (mask & (1ull << g))
            n += rt->groups[g].sm.smCount;
    return n;
}

static uint64_t all_groups(const struct ds_runtime *rt)
{
    return rt->num_groups == 64 ? ~0ull : (1ull << rt->num_groups) - 1;
}

/* Groups for a tier spec: from the low end upward or the high end downward
 * until at least sm_count SMs are covered. */
static ds_status tier_mask(const struct ds_runtime *rt, const ds_tier_spec *t, uint32_t i,
                           uint64_t *out)
{
    uint32_t total = mask_sms(rt, all_groups(rt));
    if (t->anchor == DS_ANCHOR_FULL) {
        *out = all_groups(rt);
        return DS_SUCCESS;
    }
    if (t->anchor != DS_ANCHOR_LOW && t->anchor != DS_ANCHOR_HIGH)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "tier %u: anchor %d is not LOW, HIGH or FULL", i,
                        (int)t->anchor);
    if (t->sm_count == 0 || t->sm_count > total)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "tier %u: sm_count %u outside 1-%u", i, t->sm_count,
                        total);
    uint64_t m = 0;
    uint32_t have = 0;
    for (uint32_t k = 0; k < rt->num_groups && have < t->sm_count; k++) {
        uint32_t g = t->anchor == DS_ANCHOR_LOW ? k : rt->num_groups - 1 - k;
        m |= 1ull << g;
        have += rt->groups[g].sm.smCount;
    }
    if (have != t->sm_count)
        ds__log(DS_LOG_INFO, "tier %u: %u SMs requested, %u given (whole groups of the split)", i,
                t->sm_count, have);
    *out = m;
    return DS_SUCCESS;
}

/* Default layout: the whole GPU, then for k = 2, 4 and half of the groups, a LOW tier of k groups and its exact complement (HIGH). On 132 SMs:
 * 132, 16 + 116, 32 + 100, 64 + 68. */
static uint32_t default_masks(const struct ds_runtime *rt, uint64_t *masks, ds_tier_anchor *anchors)
{
    uint32_t n = 0;
    masks[n] = all_groups(rt);
    anchors[n++] = DS_ANCHOR_FULL;
    uint32_t ks[3] = {2, 4, rt->num_groups / 2};
    uint32_t prev = 0;
    for (int i = 0; i < 3; i++) {
        uint32_t k = ks[i];
        if (k <= prev || k >= rt->num_groups)
            continue;
        prev = k;
        uint64_t low = (1ull << k) - 1;
        masks[n] = low;
        anchors[n++] = DS_ANCHOR_LOW;
        masks[n] = all_groups(rt) & ~low;
        anchors[n++] = DS_ANCHOR_HIGH;
    }
    return n;
}

ds_status ds__pool_green(struct ds_runtime *rt, uint64_t mask, CUgreenCtx *out)
{
    CUdevResource res[DS_MAX_GROUPS];
    unsigned n = 0;
    for (uint32_t g = 0; g < rt->num_groups; g++)
        if (mask & (1ull << g))
            res[n++] = rt->groups[g];
    CUdevResourceDesc desc;
    DS__CU(rt, cuDevResourceGenerateDesc(&desc, res, n));
    DS__CU(rt, cuGreenCtxCreate(out, desc, rt->dev, CU_GREEN_CTX_DEFAULT_STREAM));
    return DS_SUCCESS;
}

uint32_t ds__pool_mask_sms(const struct ds_runtime *rt, uint64_t mask) { return mask_sms(rt, mask); }

static ds_status create_pctx(struct ds_runtime *rt, uint32_t i, uint64_t mask, ds_tier_anchor anchor)
{
    ds__pctx *p = &rt->pctx[i];
    DS__TRY(ds__pool_green(rt, mask, &p->green));
    rt->num_pctx = i + 1; /* from here on, teardown destroys it */
    DS__CU(rt, cuCtxFromGreenCtx(&p->ctx, p->green));
    p->group_mask = mask;
    p->anchor = anchor;
    p->sm_count = mask_sms(rt, mask);
    p->complement = -1;
    return DS_SUCCESS;
}

ds_status ds__pool_build(struct ds_runtime *rt, const ds_tier_spec *tiers, uint32_t num_tiers)
{
    double t0 = ds__wall_ms();
    CUdevResource sm;
    memset(&sm, 0, sizeof sm);
    DS__CU(rt, cuDeviceGetDevResource(rt->dev, &sm, CU_DEV_RESOURCE_TYPE_SM));
    unsigned min = sm.sm.minSmPartitionSize ? sm.sm.minSmPartitionSize : 1;

    unsigned n = 0;
    DS__CU(rt, cuDevSmResourceSplitByCount(NULL, &n, &sm, NULL, 0, min));
    if (n == 0)
        return ds__fail(DS_ERR_NOT_SUPPORTED, "device has %u SMs: too few to split into groups of %u",
                        sm.sm.smCount, min);
    if (n > DS_MAX_GROUPS - 1)
        n = DS_MAX_GROUPS - 1; /* the rest goes to the remainder group */
    CUdevResource rem;
    memset(&rem, 0, sizeof rem);
    DS__CU(rt, cuDevSmResourceSplitByCount(rt->groups, &n, &sm, &rem, 0, min));
    rt->num_groups = n;
    if (rem.sm.smCount > 0)
        rt->groups[rt->num_groups++] = rem;

    uint64_t masks[DS_MAX_PCTX];
    ds_tier_anchor anchors[DS_MAX_PCTX];
    uint32_t count;
    if (tiers) {
        for (uint32_t i = 0; i < num_tiers; i++) {
            DS__TRY(tier_mask(rt, &tiers[i], i, &masks[i]));
            anchors[i] = tiers[i].anchor;
        }
        count = num_tiers;
    } else {
        count = default_masks(rt, masks, anchors);
    }

    rt->full_pctx = UINT32_MAX;
    for (uint32_t i = 0; i < count; i++) {
        DS__TRY(create_pctx(rt, i, masks[i], anchors[i]));
        if (masks[i] == all_groups(rt) && rt->full_pctx == UINT32_MAX)
            rt->full_pctx = i;
    }
    if (rt->full_pctx == UINT32_MAX) {
        /* Every vCtx needs somewhere to start: add the whole GPU. */
        if (count == DS_MAX_PCTX)
            return ds__fail(DS_ERR_INVALID_ARGUMENT,
                            "%u tiers and none covers the whole GPU: no room to add it", count);
        DS__TRY(create_pctx(rt, count, all_groups(rt), DS_ANCHOR_FULL));
        rt->full_pctx = count++;
    }
    for (uint32_t i = 0; i < rt->num_pctx; i++)
        for (uint32_t j = 0; j < rt->num_pctx; j++)
            if (rt->pctx[i].complement < 0 && rt->pctx[j].group_mask == (all_groups(rt) & ~rt->pctx[i].group_mask))
                rt->pctx[i].complement = (int32_t)j;

    ds_runtime_info *in = &rt->info;
    in->sm_count = sm.sm.smCount;
    in->min_partition_sms = sm.sm.minSmPartitionSize;
    in->sm_alignment = sm.sm.smCoscheduledAlignment;
    in->num_groups = rt->num_groups;
    for (uint32_t g = 0; g < rt->num_groups; g++)
        in->group_sm_count[g] = rt->groups[g].sm.smCount;
    in->num_pctx = rt->num_pctx;
    for (uint32_t i = 0; i < rt->num_pctx; i++) {
        const ds__pctx *p = &rt->pctx[i];
        in->pctx[i] = (ds_pctx_info){i, p->sm_count, p->anchor, p->group_mask, p->complement};
    }
    in->pool_build_ms = ds__wall_ms() - t0;
    ds__log(DS_LOG_INFO, "pool: %u SMs in %u groups, %u pCtxs built in %.2f ms", in->sm_count,
            rt->num_groups, rt->num_pctx, in->pool_build_ms);
    return DS_SUCCESS;
}

void ds__pool_destroy(struct ds_runtime *rt)
{
    for (uint32_t i = 0; i < rt->num_pctx; i++) {
        if (rt->pctx[i].green) {
            CUresult r = rt->cu->cuGreenCtxDestroy(rt->pctx[i].green);
            if (r != CUDA_SUCCESS)
                ds__log(DS_LOG_WARN, "pCtx %u: cuGreenCtxDestroy -> %s", i, ds__cu_error_name(rt->cu, r));
            rt->pctx[i].green = NULL;
        }
    }
    rt->num_pctx = 0;
}

ds_status ds__pool_stream_create(struct ds_runtime *rt, uint32_t index, int priority, CUstream *out)
{
    CUstream s;
    DS__CU(rt, cuGreenCtxStreamCreate(&s, rt->pctx[index].green, CU_STREAM_NON_BLOCKING, priority));
    *out = s;
    return DS_SUCCESS;
}
