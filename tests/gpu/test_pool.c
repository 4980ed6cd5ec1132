/*
 * The pCtx pool on the real driver: its layout as ds_runtime_info reports it
 * (a), and where each pCtx's kernels actually run, probed with %smid (b).
 */
#include <string.h>

#include "gpu_fixture.h"

#define WORDS (DS_MAX_SMS / 64)

static uint64_t all_groups(const ds_runtime_info *in)
{
    return in->num_groups >= 64 ? ~0ull : (1ull << in->num_groups) - 1;
}

static uint32_t popcount_words(const uint64_t *w)
{
    uint32_t n = 0;
    for (int i = 0; i < WORDS; i++)
        n += (uint32_t)__builtin_popcountll(w[i]);
    return n;
}

/* a. layout */
Test(pool, layout, .timeout = 60)
{
    gpu_env e;
    gpu_open(&e, NULL);
    const ds_runtime_info *in = &e.info;

    cr_assert_eq(in->device, DS_DEVICE_CUDA);
    cr_assert_gt(strlen(in->device_name), 0, "device name empty");
    cr_assert_geq(in->driver_version, 12050, "driver %d below 12.5", in->driver_version);
    cr_assert_gt(in->compute_capability, 0);
    cr_assert_gt(in->sm_count, 0);
    cr_assert_leq(in->sm_count, DS_MAX_SMS);
    cr_assert_geq(in->num_pctx, 2, "pool has %u pCtxs", in->num_pctx);
    cr_assert_leq(in->num_pctx, DS_MAX_PCTX);
    cr_assert_gt(in->pool_build_ms, 0.0, "pool_build_ms = %f", in->pool_build_ms);
    cr_log_info("%s: %u SMs, %u groups, %u pCtxs, pool built in %.3f ms", in->device_name,
                in->sm_count, in->num_groups, in->num_pctx, in->pool_build_ms);

    /* The groups of the one split cover the device exactly. */
    cr_assert_gt(in->num_groups, 0);
    cr_assert_leq(in->num_groups, DS_MAX_GROUPS);
    uint32_t group_total = 0;
    for (uint32_t g = 0; g < in->num_groups; g++) {
        cr_assert_gt(in->group_sm_count[g], 0, "group %u is empty", g);
        group_total += in->group_sm_count[g];
    }
    cr_assert_eq(group_total, in->sm_count, "groups hold %u SMs, device %u", group_total, in->sm_count);

    uint32_t full = 0;
    uint32_t lows = 0;
    for (uint32_t i = 0; i < in->num_pctx; i++) {
        const ds_pctx_info *p = &in->pctx[i];
        cr_assert_eq(p->index, i);
        cr_assert_gt(p->sm_count, 0, "pCtx %u has no SMs", i);
        cr_assert_eq(p->group_mask & ~all_groups(in), 0, "pCtx %u names a group past %u", i, in->num_groups);
        uint32_t from_groups = 0;
        for (uint32_t g = 0; g < in->num_groups; g++)
            if (p->group_mask & (1ull << g))
                from_groups += in->group_sm_count[g];
        cr_assert_eq(p->sm_count, from_groups, "pCtx %u: sm_count %u, its groups hold %u", i, p->sm_count,
                     from_groups);
        cr_log_info("pCtx %u: %u SMs, anchor %d, groups 0x%llx, complement %d", i, p->sm_count,
                    (int)p->anchor, (unsigned long long)p->group_mask, p->complement);
        if (p->anchor == DS_ANCHOR_FULL) {
            full++;
            cr_assert_eq(p->sm_count, in->sm_count, "FULL pCtx %u has %u of %u SMs", i, p->sm_count,
                         in->sm_count);
            cr_assert_eq(p->group_mask, all_groups(in));
        }
        if (p->anchor == DS_ANCHOR_LOW) {
            lows++;
            cr_assert_geq(p->complement, 0, "LOW pCtx %u has no complement", i);
            cr_assert_lt((uint32_t)p->complement, in->num_pctx);
            const ds_pctx_info *c = &in->pctx[p->complement];
            cr_assert_eq(p->sm_count + c->sm_count, in->sm_count, "pCtx %u (%u SMs) + complement %d (%u) != %u", i,
                         p->sm_count, p->complement, c->sm_count, in->sm_count);
            cr_assert_eq(p->group_mask & c->group_mask, 0, "pCtx %u and its complement share groups", i);
            cr_assert_eq(p->group_mask | c->group_mask, all_groups(in));
            cr_assert_eq(c->complement, (int32_t)i, "complement of %d is %d, not %u", p->complement,
                         c->complement, i);
        }
    }
    cr_assert_eq(full, 1, "%u FULL pCtxs in the default pool, want exactly 1", full);
    cr_assert_geq(lows, 1, "default pool has no LOW pCtx");
    gpu_close(&e);
}

/* b. confinement: the SMs a pCtx's blocks run on, measured with %smid. */
Test(pool, confinement, .timeout = 120)
{
    gpu_env e;
    gpu_open(&e, NULL);
    const ds_runtime_info *in = &e.info;
    uint64_t sets[DS_MAX_PCTX][WORDS];
    int full = -1;
    for (uint32_t i = 0; i < in->num_pctx; i++) {
        uint32_t count = 0;
        memset(sets[i], 0, sizeof sets[i]);
        GPU_DS(ds_pctx_probe_sms(e.rt, i, sets[i], &count));
        cr_log_info("pCtx %u: %u SMs configured, %u probed", i, in->pctx[i].sm_count, count);
        cr_assert_eq(count, popcount_words(sets[i]), "pCtx %u: count %u, bitmap holds %u", i, count,
                     popcount_words(sets[i]));
        cr_assert_eq(count, in->pctx[i].sm_count, "pCtx %u ran on %u SMs, configured for %u", i, count,
                     in->pctx[i].sm_count);
        if (in->pctx[i].anchor == DS_ANCHOR_FULL)
            full = (int)i;
    }
    cr_assert_geq(full, 0, "no FULL pCtx");

    for (uint32_t i = 0; i < in->num_pctx; i++) {
        const ds_pctx_info *p = &in->pctx[i];
        if (p->anchor != DS_ANCHOR_LOW)
            continue;
        cr_assert_geq(p->complement, 0, "LOW pCtx %u has no complement", i);
        const uint64_t *a = sets[i], *b = sets[p->complement];
        uint64_t uni[WORDS];
        for (int w = 0; w < WORDS; w++) {
            cr_assert_eq(a[w] & b[w], 0, "pCtx %u and its complement %d both ran on SMs 0x%llx (word %d)", i,
                         p->complement, (unsigned long long)(a[w] & b[w]), w);
            uni[w] = a[w] | b[w];
            /* The union is every SM: the same set the whole-GPU pCtx runs on. */
            cr_assert_eq(uni[w], sets[full][w], "pCtx %u + complement %d: SM word %d is 0x%llx, full GPU 0x%llx",
                         i, p->complement, w, (unsigned long long)uni[w], (unsigned long long)sets[full][w]);
        }
        cr_assert_eq(popcount_words(uni), in->sm_count);
    }
    gpu_close(&e);
}
