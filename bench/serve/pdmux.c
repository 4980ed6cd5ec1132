/* pdmux_static, SGLang's PD multiplexing as a policy plug-in (pdmux.h). */
#include <stdio.h>

#include <detshare/policy.h>

#include "pdmux.h"

uint32_t pdmux_divide_sm(uint32_t total_sms, uint32_t parts, uint32_t *out)
{
    /* get_arch_constraints for major 9: (min_per_part 8, multiple 8). */
    const uint32_t min_per_part = 8, multiple = 8;
    uint32_t possible[64], n = 0;
    for (uint32_t x = min_per_part; x + min_per_part <= total_sms && n < 64; x += multiple)
        if (x >= total_sms - x && total_sms - x >= 16)
            possible[n++] = x;
    if (n == 0 || parts == 0)
        return 0;
    uint32_t step = n >= parts ? (n / parts > 1 ? n / parts : 1) : 1;
    uint32_t sel[64], k = 0;
    for (uint32_t i = 0; i < n && k < parts; i += step)
        sel[k++] = possible[i];
    for (uint32_t i = 0; i < k; i++) /* divisions.reverse(): larger prefill first */
        out[i] = sel[k - 1 - i];
    return k;
}

uint32_t pdmux_pool_tiers(uint32_t total_sms, const ds_tier_spec *base, uint32_t nbase, ds_tier_spec *out,
                          uint32_t cap)
{
    uint32_t prefill[PDMUX_SM_GROUP_NUM];
    uint32_t k = pdmux_divide_sm(total_sms, PDMUX_SM_GROUP_NUM - 2, prefill);
    if (nbase + 2 * k > cap)
        return 0;
    uint32_t n = 0;
    for (uint32_t i = 0; i < nbase; i++)
        out[n++] = base[i];
    for (uint32_t i = 0; i < k; i++) {
        out[n++] = (ds_tier_spec){.sm_count = prefill[i], .anchor = DS_ANCHOR_LOW};
        out[n++] = (ds_tier_spec){.sm_count = total_sms - prefill[i], .anchor = DS_ANCHOR_HIGH};
    }
    return n;
}

static int find_pctx(const ds_runtime_info *info, uint32_t sms, ds_tier_anchor anchor, uint32_t *out)
{
    for (uint32_t i = 0; i < info->num_pctx; i++)
        if (info->pctx[i].sm_count == sms && info->pctx[i].anchor == anchor) {
            *out = i;
            return 0;
        }
    fprintf(stderr, "pdmux: the pool has no %s pCtx of %u SMs (pdmux_pool_tiers lists the tiers it needs)\n",
            anchor == DS_ANCHOR_LOW ? "LOW" : anchor == DS_ANCHOR_HIGH ? "HIGH" : "FULL", sms);
    return -1;
}

/* ---- the policy ----------------------------------------------------------- */

static ds_status pdmux_init(void *user, ds_runtime_t rt, void **state)
{
    (void)rt;
    *state = user;
    return DS_SUCCESS;
}

/* The pCtx a vCtx of this phase belongs on in the current group. */
static uint32_t target(const pdmux *p, ds_phase phase)
{
    uint32_t g = atomic_load_explicit(&p->group, memory_order_relaxed);
    if (phase == DS_PHASE_PREFILL)
        return p->prefill_pctx[g];
    if (phase == DS_PHASE_DECODE)
        return p->decode_pctx[g];
    return p->full_pctx;
}

static void place(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    ds_vctx_state vs = DS_VCTX_STATE_INIT;
    if (ds_policy_state(view, v, &vs))
        ds_vctx_place(v, target(st, vs.phase), 0, 0);
}

static void pdmux_activate(void *st, const ds_policy_view *view) { ds_policy_for_each(view, place, st); }

static ds_decision pdmux_launch(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    ds_vctx_state me = DS_VCTX_STATE_INIT;
    if (!ds_policy_state(view, ev->vctx, &me))
        return (ds_decision){.kind = DS_DISPATCH_HERE};
    uint32_t want = target(st, ev->phase);
    if (me.pending_pctx == want && !me.urgent)
        return (ds_decision){.kind = DS_DISPATCH_HERE};
    return (ds_decision){.kind = DS_DISPATCH_REMAP, .pctx = want, .urgent = 0};
}

static const ds_policy_ops PDMUX_OPS = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = PDMUX_POLICY_NAME,
    .init = pdmux_init,
    .on_activate = pdmux_activate,
    .on_vctx_create = place,
    .on_launch = pdmux_launch,
};

int pdmux_register(ds_runtime_t rt, pdmux *p)
{
    ds_runtime_info info = {.size = sizeof info, .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION};
    ds_status st = ds_runtime_info_get(rt, &info);
    if (st != DS_SUCCESS) {
        fprintf(stderr, "pdmux: ds_runtime_info_get: %s\n", ds_status_name(st));
        return -1;
    }
    uint32_t prefill[PDMUX_SM_GROUP_NUM];
    uint32_t k = pdmux_divide_sm(info.sm_count, PDMUX_SM_GROUP_NUM - 2, prefill);
    if (k == 0) {
        fprintf(stderr, "pdmux: no prefill/decode split of %u SMs (SGLang's divide_sm)\n", info.sm_count);
        return -1;
    }
    p->full_pctx = info.num_pctx; /* found below */
    for (uint32_t i = 0; i < info.num_pctx; i++)
        if (info.pctx[i].anchor == DS_ANCHOR_FULL)
            p->full_pctx = i;
    if (p->full_pctx == info.num_pctx) {
        fprintf(stderr, "pdmux: the pool has no whole-GPU pCtx\n");
        return -1;
    }
    /* SM_COUNTS: (total, 0) for prefill only, the divisions, (0, total) for
     * decode only; both whole-GPU groups give the idle side the whole GPU too. */
    p->groups = k + 2;
    p->prefill_sms[0] = p->decode_sms[0] = info.sm_count;
    p->prefill_pctx[0] = p->decode_pctx[0] = p->full_pctx;
    for (uint32_t i = 0; i < k; i++) {
        p->prefill_sms[i + 1] = prefill[i];
        p->decode_sms[i + 1] = info.sm_count - prefill[i];
        if (find_pctx(&info, prefill[i], DS_ANCHOR_LOW, &p->prefill_pctx[i + 1]) ||
            find_pctx(&info, info.sm_count - prefill[i], DS_ANCHOR_HIGH, &p->decode_pctx[i + 1]))
            return -1;
    }
    p->prefill_sms[k + 1] = p->decode_sms[k + 1] = info.sm_count;
    p->prefill_pctx[k + 1] = p->decode_pctx[k + 1] = p->full_pctx;
    atomic_store(&p->group, 0);
    atomic_store(&p->changes, 0);
    st = ds_policy_register(rt, &PDMUX_OPS, p);
    if (st != DS_SUCCESS && st != DS_ERR_ALREADY_EXISTS) {
        fprintf(stderr, "pdmux: ds_policy_register: %s: %s\n", ds_status_name(st), ds_last_error_message());
        return -1;
    }
    return 0;
}

uint32_t pdmux_group_for(const pdmux *p, uint32_t decode_bs, int prefill_live)
{
    uint32_t g = p->groups;
    if (decode_bs > 0 && prefill_live) {
        uint32_t idx = decode_bs * (g - 2) / PDMUX_DECODE_BS_DIVISOR;
        if (idx > g - 2)
            idx = g - 2;
        return idx < 1 ? 1 : idx;
    }
    return decode_bs > 0 ? g - 1 : 0;
}

void pdmux_set_group(pdmux *p, uint32_t group)
{
    if (atomic_exchange(&p->group, group) != group)
        atomic_fetch_add(&p->changes, 1);
}
