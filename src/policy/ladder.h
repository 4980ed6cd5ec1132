/*
 * The ladder the sizing policies walk: the pool's LOW tiers that have a
 * complement, by SM count (smallest first), each with its complement. Built
 * from the public view alone (policy.h), like the policies themselves.
 */
#ifndef DS_POLICY_LADDER_H
#define DS_POLICY_LADDER_H

#include <stdint.h>

#include <detshare/policy.h>

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

#endif
