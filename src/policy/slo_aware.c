/*
 * slo_aware (the default policy). After DetShare section 4.4: latency-
 * sensitive (LS) work runs on a LOW tier at the highest stream priority; when
 * best-effort (BE) work in flight on the same SMs would delay it past its SLO
 * (predicted from profiles and windows), BE is confined to the complement
 * tier (disjoint SMs) and its window shrinks, so the confinement takes effect
 * within one BE window. When LS has been idle for idle_us, BE expands back to
 * the whole GPU, provided BE's longest recent kernel or section would still
 * let a returning LS request meet its SLO (see expansion_safe). An LS still late while BE is confined is limited by its own
 * tier; the policy then leaves BE alone (on_congestion only confines). LS gets the largest tier that keeps BE's confinement
 * disjoint: the LOW tier while BE is active, the whole GPU while BE is idle.
 */
#include <stdlib.h>

#include "policy/builtin.h"

typedef struct slo_state {
    _Atomic int confined;
    uint32_t low, high, full;
} slo_state;

static ds_status slo_init(void *user, ds_runtime_t rt, void **state)
{
    (void)user;
    slo_state *s = calloc(1, sizeof *s);
    if (!s)
        return DS_ERR_OUT_OF_MEMORY;
    ds__ls_tiers(rt, rt->ls_sms, &s->low, &s->high);
    s->full = rt->full_pctx;
    *state = s;
    return DS_SUCCESS;
}

static void slo_fini(void *state) { free(state); }

static uint32_t window_expanded(const struct ds_runtime *rt) { return rt->be_window_us; }
static uint32_t window_confined(const struct ds_runtime *rt) { return rt->be_window_us / 2; }

static int is_ls(const struct ds_vctx *v) { return v->cls == DS_CLASS_LATENCY_SENSITIVE; }

static void place_be(slo_state *s, struct ds_runtime *rt, struct ds_vctx *v, int confined)
{
    if (confined)
        ds__place(v, s->high, 0, window_confined(rt));
    else
        ds__place(v, s->full, 0, window_expanded(rt));
}

static void set_confined(slo_state *s, const ds_policy_view *view, int confined)
{
    atomic_store(&s->confined, confined);
    ds_vctx_t vs[256];
    uint32_t n = ds_view_vctxs(view, vs, 256);
    for (uint32_t i = 0; i < n && i < 256; i++)
        if (!is_ls(vs[i]))
            place_be(s, DS__RT(view), vs[i], confined);
}

static void slo_activate(void *st, const ds_policy_view *view)
{
    slo_state *s = st;
    ds_vctx_t vs[256];
    uint32_t n = ds_view_vctxs(view, vs, 256);
    for (uint32_t i = 0; i < n && i < 256; i++)
        if (is_ls(vs[i]))
            ds__place(vs[i], s->low, 1, 0);
    set_confined(s, view, 0);
}

static void slo_create(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    slo_state *s = st;
    if (is_ls(v))
        ds__place(v, s->low, 1, 0);
    else
        place_be(s, DS__RT(view), v, atomic_load(&s->confined));
}

/* Predicted head-of-line delay from BE work that may occupy the LS tier's SMs:
 * the work BE has in flight while bound (or about to be bound) to the whole
 * GPU. Returns -1 when no BE is active there. */
static double be_delay_on_low(slo_state *s, const ds_policy_view *view)
{
    struct ds_runtime *rt = DS__RT(view);
    double now = -1, delay = -1;
    ds_vctx_t vs[256];
    uint32_t n = ds_view_vctxs(view, vs, 256);
    for (uint32_t i = 0; i < n && i < 256; i++) {
        struct ds_vctx *b = vs[i];
        if (is_ls(b))
            continue;
        /* disjoint only if it is there and stays there: an expansion may be
         * pending while the BE thread is between kernels */
        uint32_t pend = DS__BIND_PCTX(atomic_load_explicit(&b->pending, memory_order_relaxed));
        if (DS__BIND_PCTX(DS__LD(b->bound)) == s->high && pend == s->high)
            continue;
        if (now < 0)
            now = ds__now_us(rt);
        int active = ds__busy(b) || ds__inflight(b) > 0.5 || now - DS__LD(b->last_active_us) < rt->idle_us;
        if (active)
            delay = (delay < 0 ? 0 : delay) + ds__inflight(b);
    }
    return delay;
}

static ds_decision slo_launch(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    slo_state *s = st;
    struct ds_vctx *v = ev->vctx;
    if (!is_ls(v))
        return (ds_decision){.kind = DS_DISPATCH_HERE}; /* BE placement comes from confine/expand */
    uint32_t target = s->low;
    if (!atomic_load_explicit(&s->confined, memory_order_relaxed)) {
        double delay = be_delay_on_low(s, view);
        if (delay < 0) {
            target = s->full; /* BE idle: LS may use the whole GPU */
        } else if (!v->slo_us || delay + ev->predicted_us > 0.5 * v->slo_us) {
            set_confined(s, view, 1); /* SLO at risk: confine BE */
        }
    }
    uint32_t want = DS__BIND(target, 1);
    if (atomic_load_explicit(&v->pending, memory_order_relaxed) == want)
        return (ds_decision){.kind = DS_DISPATCH_HERE};
    return (ds_decision){.kind = DS_DISPATCH_REMAP, .pctx = target, .urgent = 1};
}

static void slo_congestion(void *st, const ds_policy_view *view, ds_vctx_t v, double late_us)
{
    (void)late_us;
    slo_state *s = st;
    /* Confining BE is the one thing that helps: once BE is on disjoint SMs, an
     * LS that is still late is limited by its own tier, and throttling BE
     * further would cost BE without helping LS. */
    if (!atomic_load(&s->confined)) {
        set_confined(s, view, 1);
        return;
    }
    ds__log(DS_LOG_DEBUG, "slo_aware: vCtx '%s' late by %.0f us on its own tier (%u SMs)", v->name, late_us,
            DS__RT(view)->pctx[s->low].sm_count);
}

/* Expanding BE is safe only if the longest BE unit that may be running on the
 * LS tier's SMs when LS returns fits in LS's slack: arrivals are memoryless,
 * so idleness alone does not make a return unlikely, and a running kernel is
 * not preempted (stream priority does not stop a persistent GEMM). BE's unit
 * was measured on its confined tier; on the whole GPU it is scaled by the SM
 * ratio (compute-bound estimate). LS vCtxs without an SLO impose no bound. */
static int expansion_safe(slo_state *s, struct ds_runtime *rt, ds_vctx_t *vs, uint32_t n)
{
    double be_unit = 0, slack = 1e18;
    double scale = (double)rt->pctx[s->high].sm_count / rt->pctx[s->full].sm_count;
    for (uint32_t i = 0; i < n; i++) {
        double u = atomic_load_explicit(&vs[i]->unit_us, memory_order_relaxed);
        if (!is_ls(vs[i])) {
            if (u * scale > be_unit)
                be_unit = u * scale;
        } else if (vs[i]->slo_us && vs[i]->slo_us - u < slack) {
            slack = vs[i]->slo_us - u;
        }
    }
    return be_unit <= slack;
}

static void slo_tick(void *st, const ds_policy_view *view, double now_us)
{
    slo_state *s = st;
    if (!atomic_load(&s->confined))
        return;
    struct ds_runtime *rt = DS__RT(view);
    ds_vctx_t vs[256];
    uint32_t n = ds_view_vctxs(view, vs, 256);
    if (n > 256)
        n = 256;
    for (uint32_t i = 0; i < n; i++)
        if (is_ls(vs[i]) && (ds__busy(vs[i]) || now_us - DS__LD(vs[i]->last_active_us) < rt->idle_us))
            return;
    if (expansion_safe(s, rt, vs, n))
        set_confined(s, view, 0); /* every LS idle for idle_us: BE takes the whole GPU */
}

const ds_policy_ops ds__policy_slo_aware = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "slo_aware",
    .init = slo_init,
    .fini = slo_fini,
    .on_activate = slo_activate,
    .on_vctx_create = slo_create,
    .on_launch = slo_launch,
    .on_congestion = slo_congestion,
    .on_tick = slo_tick,
    .tick_us = 250,
};
