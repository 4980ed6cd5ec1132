/*
 * tpot_first: for LLM serving tenants whose work is marked prefill or decode
 * (launch hint, else the vCtx's phase attribute, else LS = decode and BE =
 * prefill). Decode runs at the highest stream priority on the larger tier;
 * prefill is confined to a small LOW tier (ls_sms / 2) whose SMs decode never
 * uses, and while decode is active prefill's work in flight is held to half a
 * BE window, trading time-to-first-token for time-per-output-token.
 */
#include <stdlib.h>

#include "policy/builtin.h"

typedef struct tpot_state {
    uint32_t prefill, decode;
} tpot_state;

static ds_status tpot_init(void *user, ds_runtime_t rt, void **state)
{
    (void)user;
    tpot_state *s = calloc(1, sizeof *s);
    if (!s)
        return DS_ERR_OUT_OF_MEMORY;
    ds__ls_tiers(rt, rt->ls_sms / 2, &s->prefill, &s->decode);
    *state = s;
    return DS_SUCCESS;
}

static void tpot_fini(void *state) { free(state); }

static ds_phase phase_of(const struct ds_vctx *v, ds_phase hint)
{
    if (hint != DS_PHASE_NONE)
        return hint;
    if (v->phase != DS_PHASE_NONE)
        return v->phase;
    return v->cls == DS_CLASS_LATENCY_SENSITIVE ? DS_PHASE_DECODE : DS_PHASE_PREFILL;
}

static void place(tpot_state *s, struct ds_vctx *v)
{
    if (phase_of(v, DS_PHASE_NONE) == DS_PHASE_DECODE)
        ds__place(v, s->decode, 1, 0);
    else
        ds__place(v, s->prefill, 0, 0);
}

static void tpot_activate(void *st, const ds_policy_view *view)
{
    ds_vctx_t vs[256];
    uint32_t n = ds_view_vctxs(view, vs, 256);
    for (uint32_t i = 0; i < n && i < 256; i++)
        place(st, vs[i]);
}

static void tpot_create(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    (void)view;
    place(st, v);
}

static int decode_active(const ds_policy_view *view, struct ds_vctx *self)
{
    struct ds_runtime *rt = DS__RT(view);
    ds_vctx_t vs[256];
    uint32_t n = ds_view_vctxs(view, vs, 256);
    double now = -1;
    for (uint32_t i = 0; i < n && i < 256; i++) {
        struct ds_vctx *d = vs[i];
        if (d == self || phase_of(d, DS_PHASE_NONE) != DS_PHASE_DECODE)
            continue;
        if (ds__busy(d))
            return 1;
        if (now < 0)
            now = ds__now_us(rt);
        if (now - DS__LD(d->last_active_us) < rt->idle_us)
            return 1;
    }
    return 0;
}

static ds_decision tpot_launch(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    tpot_state *s = st;
    struct ds_vctx *v = ev->vctx;
    int decode = phase_of(v, ev->phase) == DS_PHASE_DECODE;
    if (!decode && ds__inflight(v) > DS__RT(view)->be_window_us / 2 && decode_active(view, v))
        return (ds_decision){.kind = DS_DISPATCH_HOLD, .wait_for = v, .hold_us = 50};
    uint32_t want = decode ? DS__BIND(s->decode, 1) : DS__BIND(s->prefill, 0);
    if (atomic_load_explicit(&v->pending, memory_order_relaxed) == want)
        return (ds_decision){.kind = DS_DISPATCH_HERE};
    return (ds_decision){.kind = DS_DISPATCH_REMAP, .pctx = DS__BIND_PCTX(want), .urgent = decode};
}

const ds_policy_ops ds__policy_tpot_first = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "tpot_first",
    .init = tpot_init,
    .fini = tpot_fini,
    .on_activate = tpot_activate,
    .on_vctx_create = tpot_create,
    .on_launch = tpot_launch,
};

