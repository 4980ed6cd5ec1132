/*
 * Helpers shared by the built-in policies, on the public plug-in ABI only.
 */
#include "builtin.h"

uint32_t ds__policy_vctxs(const ds_policy_view *view, ds_vctx_t vs[DS__POLICY_MAX_VCTX])
{
    uint32_t n = ds_view_vctxs(view, vs, DS__POLICY_MAX_VCTX);
    return n < DS__POLICY_MAX_VCTX ? n : DS__POLICY_MAX_VCTX;
}

int ds__policy_vctx_state(const ds_policy_view *view, ds_vctx_t v, ds_vctx_state *out)
{
    *out = (ds_vctx_state)DS_VCTX_STATE_INIT;
    return ds_view_vctx_state(view, v, out) == DS_SUCCESS;
}

void ds__policy_place_all(void *state, const ds_policy_view *view,
                          void (*place_one)(void *state, const ds_policy_view *view, ds_vctx_t v))
{
    ds_vctx_t vs[DS__POLICY_MAX_VCTX];
    uint32_t n = ds__policy_vctxs(view, vs);
    for (uint32_t i = 0; i < n; i++)
        place_one(state, view, vs[i]);
}

void ds__policy_ls_tiers(const ds_policy_view *view, uint32_t sms, uint32_t *low, uint32_t *high)
{
    int32_t l = ds_view_low_tier(view, sms);
    const ds_pctx_info *p = l < 0 ? NULL : ds_view_pctx(view, (uint32_t)l);
    if (!p || p->complement < 0) {
        *low = *high = ds_view_full_pctx(view); /* a pool without LOW tiers: nothing to split */
        return;
    }
    *low = (uint32_t)l;
    *high = (uint32_t)p->complement;
}
