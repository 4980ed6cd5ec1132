/* least_loaded: place each vCtx on the half of the GPU with the least
 * predicted work in flight, latency-sensitive ones on their urgent stream
 * (least_loaded.h says what it does; README.md here how to build it).
 *
 * Written against the installed public headers only: the hook table
 * (ds_policy_ops), the read-only view (ds_view_*) and the actions
 * (ds_vctx_remap(), ds_vctx_set_urgent(), and ::DS_DISPATCH_REMAP from
 * on_launch).
 *
 * Threads: on_launch runs on each tenant's thread, on_activate on the thread
 * switching policies, possibly at the same time; the state is read-only after
 * init, and every read of the runtime goes through the view (lock-free
 * snapshots). Two vCtxs starting at the same instant on two threads may both
 * see the same loads and pick the same half: the policy balances load, it
 * does not guarantee a split.
 */
#include "least_loaded.h"

#include <stdlib.h>

#include <detshare/policy.h>

/* Most live vCtxs looked at when weighing the halves. */
#define LL_MAX_SEEN 256

typedef struct least_loaded {
    uint32_t split_sms; /* SMs wanted on the LOW half, 0 = half the GPU */
} least_loaded;

/* The halves as pool indices, the one with more SMs first (the tie-break
 * order): the LOW tier nearest split_sms and its complement. Returns 2, or 1
 * (the whole GPU alone) when the pool has no such pair. */
static uint32_t halves(const least_loaded *ll, const ds_policy_view *view, uint32_t half[2])
{
    const uint32_t full = ds_view_full_pctx(view);
    const uint32_t want = ll->split_sms ? ll->split_sms : ds_view_pctx(view, full)->sm_count / 2;
    const int32_t low = ds_view_low_tier(view, want);
    const ds_pctx_info *lo = low >= 0 ? ds_view_pctx(view, (uint32_t)low) : NULL;
    const ds_pctx_info *hi = lo && lo->complement >= 0 ? ds_view_pctx(view, (uint32_t)lo->complement) : NULL;
    if (!hi) {
        half[0] = full;
        return 1;
    }
    const int hi_first = hi->sm_count >= lo->sm_count;
    half[0] = hi_first ? hi->index : lo->index;
    half[1] = hi_first ? lo->index : hi->index;
    return 2;
}

/* Which of the n halves `pctx` is, or -1. */
static int half_of(const uint32_t *half, uint32_t n, uint32_t pctx)
{
    for (uint32_t h = 0; h < n; h++)
        if (half[h] == pctx)
            return (int)h;
    return -1;
}

/* The half for `self`: least predicted work in flight of the other vCtxs
 * bound there, then fewest vCtxs bound or moving there, then most SMs. */
static uint32_t least_loaded_half(const ds_policy_view *view, ds_vctx_t self, const uint32_t *half, uint32_t n)
{
    double work[2] = {0.0, 0.0};
    uint32_t count[2] = {0, 0};
    ds_vctx_t seen[LL_MAX_SEEN];
    uint32_t live = ds_view_vctxs(view, seen, LL_MAX_SEEN);
    if (live > LL_MAX_SEEN)
        live = LL_MAX_SEEN;
    for (uint32_t i = 0; i < live; i++) {
        ds_vctx_view v;
        if (seen[i] == self || ds_view_vctx(view, seen[i], &v) != DS_SUCCESS)
            continue; /* itself, or destroyed meanwhile */
        int h = half_of(half, n, v.pctx);
        if (h >= 0)
            work[h] += v.inflight_us; /* its work in flight runs where it is bound */
        h = half_of(half, n, v.pending_pctx);
        if (h >= 0)
            count[h]++; /* where it is, or where it goes at its next kernel */
    }
    uint32_t best = 0;
    for (uint32_t h = 1; h < n; h++)
        if (work[h] < work[best] || (work[h] == work[best] && count[h] < count[best]))
            best = h;
    return half[best];
}

/* The hot path: one snapshot of the launching vCtx; the other vCtxs are
 * looked at only when it is not on a half yet (its first kernel). */
static ds_decision ll_on_launch(void *state, const ds_policy_view *view, const ds_launch_event *ev)
{
    const ds_decision here = {.kind = DS_DISPATCH_HERE};
    ds_vctx_view me;
    if (ds_view_vctx(view, ev->vctx, &me) != DS_SUCCESS)
        return here;
    uint32_t half[2];
    const uint32_t n = halves(state, view, half);
    const int urgent = me.cls == DS_CLASS_LATENCY_SENSITIVE;
    const int h = half_of(half, n, me.pending_pctx);
    if (h >= 0 && (me.urgent != 0) == urgent)
        return here; /* placed already */
    const uint32_t target = h >= 0 ? half[h] : least_loaded_half(view, ev->vctx, half, n);
    return (ds_decision){.kind = DS_DISPATCH_REMAP, .pctx = target, .urgent = urgent};
}

/* Switched to on a live runtime: place the vCtxs not on a half yet, one after
 * the other (each placement counts for the next), and set every vCtx's
 * stream urgency. The moves take effect at each vCtx's next kernel. */
static void ll_on_activate(void *state, const ds_policy_view *view)
{
    uint32_t half[2];
    const uint32_t n = halves(state, view, half);
    ds_vctx_t live[LL_MAX_SEEN];
    uint32_t count = ds_view_vctxs(view, live, LL_MAX_SEEN);
    if (count > LL_MAX_SEEN)
        count = LL_MAX_SEEN;
    for (uint32_t i = 0; i < count; i++) {
        ds_vctx_view v;
        if (ds_view_vctx(view, live[i], &v) != DS_SUCCESS)
            continue;
        if (half_of(half, n, v.pending_pctx) < 0)
            (void)ds_vctx_remap(live[i], least_loaded_half(view, live[i], half, n));
        (void)ds_vctx_set_urgent(live[i], v.cls == DS_CLASS_LATENCY_SENSITIVE);
    }
}

static ds_status ll_init(void *user_data, ds_runtime_t rt, void **state)
{
    (void)rt;
    least_loaded *ll = malloc(sizeof *ll);
    if (!ll)
        return DS_ERR_OUT_OF_MEMORY;
    ll->split_sms = *(const uint32_t *)user_data;
    *state = ll;
    return DS_SUCCESS;
}

static void ll_fini(void *state) { free(state); }

ds_status least_loaded_register(ds_runtime_t rt, uint32_t split_sms)
{
    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    ops.name = LEAST_LOADED_NAME;
    ops.init = ll_init; /* user_data (&split_sms) is read there, during this call */
    ops.fini = ll_fini;
    ops.on_activate = ll_on_activate;
    ops.on_launch = ll_on_launch;
    return ds_policy_register(rt, &ops, &split_sms);
}
