/*
 * What the sizing policies (slo_aware, tpot_first) share around sizing.c:
 * the ladder they walk (the pool's LOW tiers that have a complement, by SM
 * count, smallest first, each with its complement) and the request counts
 * they feed it, and whether a kind of vCtx is live (where sizing starts).
 * Built from the public view alone (policy.h), like the
 * policies themselves.
 */
#ifndef DS_POLICY_LADDER_H
#define DS_POLICY_LADDER_H

#include <stdint.h>

#include <detshare/policy.h>

#include "sizing.h"

/* Fills low[k] and high[k] (pool indices: the k-th LOW tier by SMs and its
 * complement) and returns how many, at most `max`. */
static inline uint32_t ds_policy_low_ladder(const ds_policy_view *view, uint32_t *low, uint32_t *high, uint32_t max)
{
    uint32_t n = ds_view_num_pctx(view), nlev = 0;
    for (uint32_t i = 0; i < n && nlev < max; i++) {
        const ds_pctx_info *p = ds_view_pctx(view, i);
        if (!p || p->anchor != DS_ANCHOR_LOW || p->complement < 0)
            continue;
        uint32_t k = nlev++;
        while (k > 0 && ds_view_pctx(view, low[k - 1])->sm_count > p->sm_count) {
            low[k] = low[k - 1];
            high[k] = high[k - 1];
            k--;
        }
        low[k] = i;
        high[k] = (uint32_t)p->complement;
    }
    return nlev;
}

/* Adds to f the requests of every vCtx that `pick` takes and that has an SLO
 * and has recorded any (totals, runs of lates, the worst window p99 over its
 * SLO); returns whether any did. */
static inline int ds_policy_sum_requests(const ds_policy_view *view, int (*pick)(const ds_vctx_state *st),
                                         ds_sizing_input *f)
{
    ds_vctx_t vs[DS_POLICY_LIST_MAX];
    uint32_t n = ds_policy_list(view, vs, DS_POLICY_LIST_MAX);
    int any = 0;
    for (uint32_t i = 0; i < n; i++) {
        ds_vctx_state st;
        if (!ds_policy_state(view, vs[i], &st) || !pick(&st) || !st.slo_us || !st.requests)
            continue;
        f->req += st.requests;
        f->over += st.requests_over_slo;
        f->runs += st.requests_over_slo_runs;
        if (st.request_p99_us / st.slo_us > f->p99_share)
            f->p99_share = st.request_p99_us / st.slo_us;
        any = 1;
    }
    return any;
}

/* Whether a live vCtx is one `pick` takes. */
static inline int ds_policy_any(const ds_policy_view *view, int (*pick)(const ds_vctx_state *st))
{
    ds_vctx_t vs[DS_POLICY_LIST_MAX];
    uint32_t n = ds_policy_list(view, vs, DS_POLICY_LIST_MAX);
    for (uint32_t i = 0; i < n; i++) {
        ds_vctx_state st;
        if (ds_policy_state(view, vs[i], &st) && pick(&st))
            return 1;
    }
    return 0;
}

#endif
