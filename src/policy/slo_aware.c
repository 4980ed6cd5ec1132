/*
 * slo_aware (the default policy). After DetShare sections 4.2 and 4.4:
 * latency-sensitive (LS) work runs on a LOW tier at the highest stream
 * priority; when best-effort (BE) work in flight on the same SMs would delay
 * it past its SLO (predicted from profiles and windows), BE yields: it is
 * confined to the complement tier (disjoint SMs), its window shrinks, and its
 * gate closes, so its already-queued work stops at its next kernel boundary
 * instead of running out its window on the LS SMs. The gate reopens as soon as
 * no LS vCtx has work in flight (on_completion, on_tick): the queued work then
 * finishes where it was queued and BE continues on the complement. While BE
 * runs on the whole GPU beside a live LS vCtx it carries gates every
 * gate_interval_us of predicted work.
 *
 * When LS has been idle for idle_us, BE expands back to the whole GPU,
 * provided BE's longest recent kernel or section (plus its window, when BE
 * has no gates) would still let a returning LS request meet its SLO (see
 * expansion_safe). An LS still late while BE is confined is limited by its
 * own tier; the policy then leaves BE alone (on_congestion only confines). LS
 * gets the largest tier that keeps BE's confinement disjoint: the LOW tier
 * while BE is active, the whole GPU while BE is idle.
 *
 * "slo_aware_nogates" is the same policy without gates (windows alone), the
 * baseline that shows what gates add. The policy owns its BE vCtxs' gates:
 * it opens every one it finds closed once LS is idle.
 */
#include <stdlib.h>

#include "policy/builtin.h"

typedef struct slo_state {
    _Atomic int confined;
    uint32_t low, high, full;
    int gates; /* BE yields through gates (not in slo_aware_nogates, not when off) */
} slo_state;

static ds_status init(ds_runtime_t rt, void **state, int gates)
{
    slo_state *s = calloc(1, sizeof *s);
    if (!s)
        return DS_ERR_OUT_OF_MEMORY;
    ds__ls_tiers(rt, rt->ls_sms, &s->low, &s->high);
    s->full = rt->full_pctx;
    s->gates = gates && rt->gate_mode != DS_GATES_OFF;
    *state = s;
    return DS_SUCCESS;
}

static ds_status slo_init(void *user, ds_runtime_t rt, void **state)
{
    (void)user;
    return init(rt, state, 1);
}

static ds_status slo_init_nogates(void *user, ds_runtime_t rt, void **state)
{
    (void)user;
    return init(rt, state, 0);
}

static void slo_fini(void *state) { free(state); }

static uint32_t window_expanded(const struct ds_runtime *rt) { return rt->be_window_us; }
static uint32_t window_confined(const struct ds_runtime *rt) { return rt->be_window_us / 2; }

static int is_ls(const struct ds_vctx *v) { return v->cls == DS_CLASS_LATENCY_SENSITIVE; }

static int any_ls(ds_vctx_t *vs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (is_ls(vs[i]))
            return 1;
    return 0;
}

/* BE on the complement (disjoint from LS: no gates needed), or on the whole
 * GPU with gates when an LS vCtx may need its SMs back. */
static void place_be(slo_state *s, struct ds_runtime *rt, struct ds_vctx *v, int confined, int ls_live)
{
    if (confined)
        ds__place(v, s->high, 0, window_confined(rt));
    else
        ds__place(v, s->full, 0, window_expanded(rt));
    if (s->gates)
        ds__set_gates(v, !confined && ls_live ? rt->gate_interval_us : DS_GATES_NONE);
}

static void set_confined(slo_state *s, const ds_policy_view *view, int confined)
{
    atomic_store(&s->confined, confined);
    ds_vctx_t vs[256];
    uint32_t n = ds_view_vctxs(view, vs, 256);
    if (n > 256)
        n = 256;
    int ls_live = any_ls(vs, n);
    for (uint32_t i = 0; i < n; i++)
        if (!is_ls(vs[i]))
            place_be(s, DS__RT(view), vs[i], confined, ls_live);
}

/* Yield: BE vCtxs that may be running on the LS tier's SMs stop at their
 * next gate (their remap to the complement was just requested). A refused
 * close (too few hardware queues) leaves that BE to its window. */
static void yield_be(slo_state *s, const ds_policy_view *view)
{
    if (!s->gates)
        return;
    ds_vctx_t vs[256];
    uint32_t n = ds_view_vctxs(view, vs, 256);
    for (uint32_t i = 0; i < n && i < 256; i++) {
        struct ds_vctx *b = vs[i];
        if (!is_ls(b) && DS__BIND_PCTX(DS__LD(b->bound)) != s->high && !DS__LD(b->gate_closed))
            ds_vctx_gate_close(b);
    }
}

/* No LS vCtx has work in flight: every BE gate opens. */
static void resume_be(slo_state *s, const ds_policy_view *view)
{
    if (!s->gates || !atomic_load_explicit(&DS__RT(view)->gates_closed, memory_order_relaxed))
        return;
    ds_vctx_t vs[256];
    uint32_t n = ds_view_vctxs(view, vs, 256);
    if (n > 256)
        n = 256;
    for (uint32_t i = 0; i < n; i++)
        if (is_ls(vs[i]) && (ds__busy(vs[i]) || ds__inflight(vs[i]) > 0.5))
            return;
    for (uint32_t i = 0; i < n; i++)
        if (!is_ls(vs[i]) && DS__LD(vs[i]->gate_closed))
            ds_vctx_gate_open(vs[i]);
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
    if (is_ls(v)) {
        ds__place(v, s->low, 1, 0);
        set_confined(s, view, atomic_load(&s->confined)); /* BE gets gates */
    } else {
        ds_vctx_t vs[256];
        uint32_t n = ds_view_vctxs(view, vs, 256);
        place_be(s, DS__RT(view), v, atomic_load(&s->confined), any_ls(vs, n < 256 ? n : 256));
    }
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
            set_confined(s, view, 1); /* SLO at risk: BE yields */
            yield_be(s, view);
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
        yield_be(s, view);
        return;
    }
    ds__log(DS_LOG_DEBUG, "slo_aware: vCtx '%s' late by %.0f us on its own tier (%u SMs)", v->name, late_us,
            DS__RT(view)->pctx[s->low].sm_count);
}

/* Expanding BE is safe only if what BE may be running on the LS tier's SMs
 * when LS returns fits in LS's slack: with gates, its longest unit (a running
 * kernel is not preempted: stream priority does not stop a persistent GEMM);
 * without, that plus its window of queued work. Arrivals are memoryless, so
 * idleness alone does not make a return unlikely. BE's unit was measured on
 * its confined tier; on the whole GPU it is scaled by the SM ratio
 * (compute-bound estimate). LS vCtxs without an SLO impose no bound. */
static int expansion_safe(slo_state *s, struct ds_runtime *rt, ds_vctx_t *vs, uint32_t n)
{
    double be_unit = s->gates ? 0 : window_expanded(rt), slack = 1e18;
    double scale = (double)rt->pctx[s->high].sm_count / rt->pctx[s->full].sm_count;
    for (uint32_t i = 0; i < n; i++) {
        double u = atomic_load_explicit(&vs[i]->unit_us, memory_order_relaxed);
        if (!is_ls(vs[i])) {
            double w = s->gates ? 0 : window_expanded(rt);
            if (w + u * scale > be_unit)
                be_unit = w + u * scale;
        } else if (vs[i]->slo_us && vs[i]->slo_us - u < slack) {
            slack = vs[i]->slo_us - u;
        }
    }
    return be_unit <= slack;
}

static void slo_completion(void *st, const ds_policy_view *view, const ds_completion *c)
{
    if (is_ls(c->vctx))
        resume_be(st, view);
}

static void slo_tick(void *st, const ds_policy_view *view, double now_us)
{
    slo_state *s = st;
    resume_be(s, view);
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

/* The two variants differ in their init only (gates or not). */
#define SLO_AWARE_OPS(NAME, INIT)                                                               \
    {                                                                                           \
        .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,        \
        .name = NAME, .init = INIT, .fini = slo_fini, .on_activate = slo_activate,              \
        .on_vctx_create = slo_create, .on_launch = slo_launch, .on_completion = slo_completion, \
        .on_congestion = slo_congestion, .on_tick = slo_tick, .tick_us = 250,                   \
    }

const ds_policy_ops ds__policy_slo_aware = SLO_AWARE_OPS("slo_aware", slo_init);
const ds_policy_ops ds__policy_slo_aware_nogates = SLO_AWARE_OPS("slo_aware_nogates", slo_init_nogates);
