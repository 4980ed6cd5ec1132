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
 *
 * Parameters (ds_policy_param_set): ls_sms picks the LS tier, idle_us and
 * be_window_us as above (BE's window is be_window_us expanded, half of it
 * confined), gate_interval_us. A new value applies from the next decision or
 * placement that uses it.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include <detshare/policy.h>

/* Most vCtxs one decision looks at. */

/* A (low, high) pair of pool indices (< DS_MAX_PCTX) in one word, published
 * with one atomic store. */
static uint32_t tiers_pack(uint32_t low, uint32_t high) { return low | high << 16; }
static uint32_t tiers_low(uint32_t packed) { return packed & 0xffffu; }
static uint32_t tiers_high(uint32_t packed) { return packed >> 16; }

enum { P_LS_SMS, P_IDLE_US, P_BE_WINDOW_US, P_GATE_INTERVAL_US, P_COUNT };

static const ds_policy_param slo_params[P_COUNT] = {
    [P_LS_SMS] = {.name = "ls_sms",
                  .help = "SMs of the latency-sensitive LOW tier: the LOW tier nearest this count",
                  .def = 64, .min = 1, .max = 256, .integer = 1},
    [P_IDLE_US] = {.name = "idle_us",
                   .help = "LS idle this long (us) counts as idle: BE may expand to the whole GPU",
                   .def = 2000, .min = 0, .max = 1e9, .integer = 1},
    [P_BE_WINDOW_US] = {.name = "be_window_us",
                        .help = "BE window (us) on the whole GPU; half of it while confined",
                        .def = 2000, .min = 1, .max = 1e9, .integer = 1},
    [P_GATE_INTERVAL_US] = {.name = "gate_interval_us",
                            .help = "predicted work (us) between BE's gates on the whole GPU beside LS "
                                    "(only with gates)",
                            .def = 100, .min = 0, .max = 1e9, .integer = 1},
};

typedef struct slo_state {
    _Atomic int confined;
    _Atomic uint32_t tiers; /* tiers_pack(LS tier, its complement) */
    _Atomic uint32_t idle_us, be_window_us, gate_interval_us;
    int want_gates; /* BE yields through gates (not in slo_aware_nogates); needs the runtime's gates on */
} slo_state;

static ds_status init(void **state, int gates)
{
    slo_state *s = calloc(1, sizeof *s);
    if (!s)
        return DS_ERR_OUT_OF_MEMORY;
    atomic_init(&s->idle_us, (uint32_t)slo_params[P_IDLE_US].def);
    atomic_init(&s->be_window_us, (uint32_t)slo_params[P_BE_WINDOW_US].def);
    atomic_init(&s->gate_interval_us, (uint32_t)slo_params[P_GATE_INTERVAL_US].def);
    s->want_gates = gates;
    *state = s;
    return DS_SUCCESS;
}

static ds_status slo_init(void *user, ds_runtime_t rt, void **state)
{
    (void)user;
    (void)rt;
    return init(state, 1);
}

static ds_status slo_init_nogates(void *user, ds_runtime_t rt, void **state)
{
    (void)user;
    (void)rt;
    return init(state, 0);
}

static void slo_fini(void *state) { free(state); }

static void slo_param(void *st, const ds_policy_view *view, uint32_t index, double value)
{
    slo_state *s = st;
    uint32_t u = (uint32_t)value;
    switch (index) {
    case P_LS_SMS: {
        uint32_t low, high;
        ds_policy_ls_tiers(view, u, &low, &high);
        atomic_store(&s->tiers, tiers_pack(low, high));
        break;
    }
    case P_IDLE_US: atomic_store(&s->idle_us, u); break;
    case P_BE_WINDOW_US: atomic_store(&s->be_window_us, u); break;
    case P_GATE_INTERVAL_US: atomic_store(&s->gate_interval_us, u); break;
    default: break;
    }
}

static int gates_on(const slo_state *s, const ds_policy_view *view)
{
    return s->want_gates && ds_view_gate_mode(view) != DS_GATES_OFF;
}

static uint32_t tiers(slo_state *s) { return atomic_load_explicit(&s->tiers, memory_order_relaxed); }
static uint32_t low_tier(slo_state *s) { return tiers_low(tiers(s)); }
static uint32_t high_tier(slo_state *s) { return tiers_high(tiers(s)); }
static uint32_t idle_us(slo_state *s) { return atomic_load_explicit(&s->idle_us, memory_order_relaxed); }
static uint32_t window_expanded(slo_state *s) { return atomic_load_explicit(&s->be_window_us, memory_order_relaxed); }
static uint32_t window_confined(slo_state *s) { return window_expanded(s) / 2; }

static int is_ls(const ds_vctx_state *st) { return st->cls == DS_CLASS_LATENCY_SENSITIVE; }

/* Active within idle_us of now (a vCtx never seen active is not). */
static int recently_active(const ds_vctx_state *st, double now, uint32_t idle)
{
    return st->last_active_us >= 0 && now - st->last_active_us < idle;
}

/* The live vCtxs as one decision sees them: one snapshot each. */
enum {
    VC_GONE = 1,  /* destroyed since listed */
    VC_LS = 2,    /* latency-sensitive */
    VC_YIELD = 4, /* BE off the complement tier with its gate open: a yield closes it */
};

typedef struct slo_scan {
    uint32_t n;
    int ls_live; /* an LS vCtx is listed */
    ds_vctx_t vs[DS_POLICY_LIST_MAX];
    unsigned char fl[DS_POLICY_LIST_MAX];
} slo_scan;

static void scan_list(slo_scan *sc, const ds_policy_view *view)
{
    sc->n = ds_policy_list(view, sc->vs, DS_POLICY_LIST_MAX);
    sc->ls_live = 0;
}

/* Records what the snapshot of vs[i] says (st NULL: gone). */
static void scan_note(slo_scan *sc, uint32_t i, const ds_vctx_state *st, uint32_t high)
{
    if (!st)
        sc->fl[i] = VC_GONE;
    else if (is_ls(st))
        sc->fl[i] = VC_LS, sc->ls_live = 1;
    else
        sc->fl[i] = st->pctx != high && !st->gate_closed ? VC_YIELD : 0;
}

/* Snapshots vs[i] into st and records it; returns whether it is live. */
static int scan_one(slo_scan *sc, const ds_policy_view *view, uint32_t i, uint32_t high, ds_vctx_state *st)
{
    int live = ds_policy_state(view, sc->vs[i], st);
    scan_note(sc, i, live ? st : NULL, high);
    return live;
}

/* Snapshots every listed vCtx (nothing else needed). */
static void scan_all(slo_scan *sc, const ds_policy_view *view, uint32_t high)
{
    scan_list(sc, view);
    for (uint32_t i = 0; i < sc->n; i++) {
        ds_vctx_state st;
        scan_one(sc, view, i, high, &st);
    }
}

/* BE on the complement (disjoint from LS: no gates needed), or on the whole
 * GPU with gates when an LS vCtx may need its SMs back. */
static void place_be(slo_state *s, const ds_policy_view *view, ds_vctx_t v, int confined, int ls_live, int gates)
{
    if (confined)
        ds_vctx_place(v, high_tier(s), 0, window_confined(s));
    else
        ds_vctx_place(v, ds_view_full_pctx(view), 0, window_expanded(s));
    if (gates)
        ds_vctx_set_gate_interval(v, !confined && ls_live ? atomic_load(&s->gate_interval_us) : DS_GATES_NONE);
}

/* Confines or expands every BE vCtx of the scan. With `yield`, BE vCtxs that
 * may be running on the LS tier's SMs then stop at their next gate (their
 * remap to the complement was just requested). A refused close (too few
 * hardware queues) leaves that BE to its window. */
static void set_confined(slo_state *s, const ds_policy_view *view, const slo_scan *sc, int confined, int yield)
{
    atomic_store(&s->confined, confined);
    int gates = gates_on(s, view);
    for (uint32_t i = 0; i < sc->n; i++)
        if (!(sc->fl[i] & (VC_GONE | VC_LS)))
            place_be(s, view, sc->vs[i], confined, sc->ls_live, gates);
    if (yield && gates)
        for (uint32_t i = 0; i < sc->n; i++)
            if (sc->fl[i] & VC_YIELD)
                ds_vctx_gate_close(sc->vs[i]);
}

/* No LS vCtx has work in flight: every BE gate opens. */
static void resume_be(slo_state *s, const ds_policy_view *view)
{
    if (!gates_on(s, view) || !ds_view_gates_closed(view))
        return;
    slo_scan sc;
    scan_list(&sc, view);
    for (uint32_t i = 0; i < sc.n; i++) {
        ds_vctx_state st;
        sc.fl[i] = 0;
        if (!ds_policy_state(view, sc.vs[i], &st))
            continue;
        if (is_ls(&st) && (st.busy || st.inflight_us > 0.5))
            return;
        if (!is_ls(&st) && st.gate_closed)
            sc.fl[i] = 1;
    }
    for (uint32_t i = 0; i < sc.n; i++)
        if (sc.fl[i])
            ds_vctx_gate_open(sc.vs[i]);
}

static void slo_activate(void *st, const ds_policy_view *view)
{
    slo_state *s = st;
    uint32_t high = high_tier(s);
    slo_scan sc;
    scan_list(&sc, view);
    for (uint32_t i = 0; i < sc.n; i++) {
        ds_vctx_state vs;
        int live = scan_one(&sc, view, i, high, &vs);
        if (live && is_ls(&vs))
            ds_vctx_place(sc.vs[i], low_tier(s), 1, 0);
    }
    set_confined(s, view, &sc, 0, 0);
}

/* The vCtx being created is not listed yet (ds_view_vctxs): the scans here
 * see the others. */
static void slo_create(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    slo_state *s = st;
    ds_vctx_state vs;
    if (!ds_policy_state(view, v, &vs))
        return;
    slo_scan sc;
    scan_all(&sc, view, high_tier(s));
    if (is_ls(&vs)) {
        ds_vctx_place(v, low_tier(s), 1, 0);
        set_confined(s, view, &sc, atomic_load(&s->confined), 0); /* BE gets gates */
    } else {
        place_be(s, view, v, atomic_load(&s->confined), sc.ls_live, gates_on(s, view));
    }
}

/* Scans the vCtxs for an LS launch (self: the launching vCtx, whose snapshot
 * is `me`) and returns the predicted head-of-line delay from BE work that may
 * occupy the LS tier's SMs: the work BE has in flight while bound (or about
 * to be bound) to the whole GPU; -1 when no BE is active there. */
static double scan_be_delay(slo_state *s, const ds_policy_view *view, slo_scan *sc, ds_vctx_t self,
                            const ds_vctx_state *me)
{
    uint32_t high = high_tier(s), idle = idle_us(s);
    double now = -1, delay = -1;
    scan_list(sc, view);
    for (uint32_t i = 0; i < sc->n; i++) {
        ds_vctx_state bs;
        const ds_vctx_state *b = sc->vs[i] == self                          ? me
                                 : ds_policy_state(view, sc->vs[i], &bs) ? &bs
                                                                               : NULL;
        scan_note(sc, i, b, high);
        if (!b || is_ls(b))
            continue;
        /* disjoint only if it is there and stays there: an expansion may be
         * pending while the BE thread is between kernels */
        if (b->pctx == high && b->pending_pctx == high)
            continue;
        if (now < 0)
            now = ds_view_now_us(view);
        int active = b->busy || b->inflight_us > 0.5 || recently_active(b, now, idle);
        if (active)
            delay = (delay < 0 ? 0 : delay) + b->inflight_us;
    }
    return delay;
}

static ds_decision slo_launch(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    slo_state *s = st;
    if (ev->cls != DS_CLASS_LATENCY_SENSITIVE)
        return (ds_decision){.kind = DS_DISPATCH_HERE}; /* BE placement comes from confine/expand */
    ds_vctx_state me;
    if (!ds_policy_state(view, ev->vctx, &me))
        return (ds_decision){.kind = DS_DISPATCH_HERE};
    uint32_t target = low_tier(s);
    if (!atomic_load_explicit(&s->confined, memory_order_relaxed)) {
        slo_scan sc;
        double delay = scan_be_delay(s, view, &sc, ev->vctx, &me);
        if (delay < 0)
            target = ds_view_full_pctx(view); /* BE idle: LS may use the whole GPU */
        else if (!me.slo_us || delay + ev->predicted_us > 0.5 * me.slo_us)
            set_confined(s, view, &sc, 1, 1); /* SLO at risk: BE yields */
    }
    if (me.pending_pctx == target && me.urgent)
        return (ds_decision){.kind = DS_DISPATCH_HERE};
    return (ds_decision){.kind = DS_DISPATCH_REMAP, .pctx = target, .urgent = 1};
}

static void slo_congestion(void *st, const ds_policy_view *view, ds_vctx_t v, double late_us)
{
    slo_state *s = st;
    /* Confining BE is the one thing that helps: once BE is on disjoint SMs, an
     * LS that is still late is limited by its own tier, and throttling BE
     * further would cost BE without helping LS. */
    if (!atomic_load(&s->confined)) {
        slo_scan sc;
        scan_all(&sc, view, high_tier(s));
        set_confined(s, view, &sc, 1, 1);
        return;
    }
    const char *name = "?";
    ds_vctx_get_name(v, &name);
    const ds_pctx_info *low = ds_view_pctx(view, low_tier(s));
    ds_log_message(DS_LOG_DEBUG, "slo_aware: vCtx '%s' late by %.0f us on its own tier (%u SMs)", name, late_us,
                   low ? low->sm_count : 0);
}

static void slo_completion(void *st, const ds_policy_view *view, const ds_completion *c)
{
    ds_vctx_state vs;
    if (ds_policy_state(view, c->vctx, &vs) && is_ls(&vs))
        resume_be(st, view);
}

/* Expanding BE is safe only if what BE may be running on the LS tier's SMs
 * when LS returns fits in LS's slack: with gates, its longest unit (a running
 * kernel is not preempted: stream priority does not stop a persistent GEMM);
 * without, that plus its window of queued work. Arrivals are memoryless, so
 * idleness alone does not make a return unlikely. BE's unit was measured on
 * its confined tier; on the whole GPU it is scaled by the SM ratio
 * (compute-bound estimate). LS vCtxs without an SLO impose no bound.
 *
 * Expands BE when that holds and every LS vCtx has been idle for idle_us. */
static void slo_tick(void *st, const ds_policy_view *view, double now_us)
{
    slo_state *s = st;
    resume_be(s, view);
    if (!atomic_load(&s->confined))
        return;
    int gates = gates_on(s, view);
    uint32_t high = high_tier(s), idle = idle_us(s);
    double w = gates ? 0 : window_expanded(s), be_unit = w, slack = 1e18;
    const ds_pctx_info *hp = ds_view_pctx(view, high), *fp = ds_view_pctx(view, ds_view_full_pctx(view));
    double scale = hp && fp ? (double)hp->sm_count / fp->sm_count : 1;
    slo_scan sc;
    scan_list(&sc, view);
    for (uint32_t i = 0; i < sc.n; i++) {
        ds_vctx_state vs;
        int live = scan_one(&sc, view, i, high, &vs);
        if (!live)
            continue;
        if (is_ls(&vs)) {
            if (vs.busy || recently_active(&vs, now_us, idle))
                return;
            if (vs.slo_us && vs.slo_us - vs.unit_us < slack)
                slack = vs.slo_us - vs.unit_us;
        } else if (w + vs.unit_us * scale > be_unit) {
            be_unit = w + vs.unit_us * scale;
        }
    }
    if (be_unit <= slack)
        set_confined(s, view, &sc, 0, 0); /* every LS idle for idle_us: BE takes the whole GPU */
}

/* The two variants differ in their init only (gates or not). */
#define SLO_AWARE_OPS(NAME, INIT)                                                               \
    {                                                                                           \
        .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,        \
        .name = NAME, .init = INIT, .fini = slo_fini, .on_activate = slo_activate,              \
        .on_vctx_create = slo_create, .on_launch = slo_launch, .on_completion = slo_completion, \
        .on_congestion = slo_congestion, .on_tick = slo_tick, .tick_us = 250,                   \
        .params = slo_params, .num_params = P_COUNT, .on_param = slo_param,                     \
    }

const ds_policy_ops ds_builtin_slo_aware = SLO_AWARE_OPS("slo_aware", slo_init);
const ds_policy_ops ds_builtin_slo_aware_nogates = SLO_AWARE_OPS("slo_aware_nogates", slo_init_nogates);
