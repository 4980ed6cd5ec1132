/*
 * slo_aware, the default policy (DetShare sections 4.2 and 4.4). The rules;
 * docs/design.md 4.8 gives each in full, with the measurements behind them.
 *  1. LS runs on a LOW tier at the highest stream priority, BE on the
 *     tier's complement (disjoint SMs), with a window of half of
 *     be_window_us beyond two of its longest units; LS prefill (its SLO a
 *     TTFT) unheld, urgent beside BE (or, prefill_whole, on the whole
 *     GPU), not counted in the LS tier's sizing.
 *  2. The LS tier is sized from the requests LS records against its SLO
 *     (right_size 1) from ls_sms (decode_sms beside LS prefill: decode is
 *     memory-bound, prefill compute-bound): a budget of (1 - target) lates
 *     per request, at most 512 requests' worth times the lates' dispersion,
 *     steps LS up when overdrawn; after shrink_requests and dwell_us (a
 *     quarter, none if prefill_press and prefill overdraws its own budget)
 *     with a full budget and p99 headroom, LS steps down, as a probe failing
 *     at a clear excess of lates (Poisson, 2 SDs), held after 2 x shrink_requests.
 *  3. Overload (a miss on the largest tier): the tier below, as good, caps.
 *  4. A step up moves BE off the SMs LS gains first (gate closed where it is
 *     bound elsewhere); requests served while BE is on its way are not judged.
 *  5. BE yields: an LS launch while BE may be on LS's SMs confines BE and
 *     closes its gate until LS has nothing in flight. Where BE's units fit
 *     half of LS's slack, BE expands to the whole GPU while LS is idle.
 *  6. Reserve mode: where LS misses on the largest tier, or serves requests
 *     over 60% of the time, and BE's units fit half its SLO, LS runs urgent on
 *     the whole GPU and BE on the complement (below it in priority); sizing
 *     then moves BE alone. reserve 0: never.
 * Parameters (ds_policy_param_set): ls_sms, decode_sms, idle_us, be_window_us, gate_interval_us,
 * right_size, target, shrink_requests, dwell_us, prefill_whole, prefill_press, reserve; a new value applies
 * from the next decision; ls_sms, decode_sms, right_size, target or a switch restart sizing.
 */

/* Here the hooks: each reads the runtime, decides, and applies its decision
 * through slo_aware_place.c (the scans and placements). slo_aware_modes.c
 * judges when BE may share LS's SMs (rules 5-6), slo_aware_tiers.c sizes the
 * LS tier (rules 2-4); slo_state.h holds the state they share. */

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include <detshare/policy.h>

#include "sizing.h"
#include "slo_state.h"

enum {
    P_LS_SMS,
    P_DECODE_SMS,
    P_IDLE_US,
    P_BE_WINDOW_US,
    P_GATE_INTERVAL_US,
    P_RIGHT_SIZE,
    P_TARGET,
    P_SHRINK_REQUESTS,
    P_DWELL_US,
    P_PREFILL_WHOLE,
    P_PREFILL_PRESS,
    P_RESERVE,
    P_COUNT
};

static const ds_policy_param slo_params[P_COUNT] = {
    [P_LS_SMS] = {.name = "ls_sms",
                  .help = "SMs of the fixed LS tier (right_size 0, or before LS records requests): the LOW tier "
                          "nearest this count",
                  .def = 64, .min = 1, .max = 256, .integer = 1},
    [P_DECODE_SMS] = {.name = "decode_sms",
                      .help = "SMs of the LS tier where sizing starts while a latency-sensitive prefill (phase "
                              "prefill, its SLO a TTFT) is live: the LOW tier nearest this count; prefill gets "
                              "its complement",
                      .def = 32, .min = 1, .max = 256, .integer = 1},
    [P_IDLE_US] = {.name = "idle_us",
                   .help = "LS idle this long (us) before BE may expand to the whole GPU; 0: as soon as LS has "
                           "nothing in flight",
                   .def = 0, .min = 0, .max = 1e9, .integer = 1},
    [P_BE_WINDOW_US] = {.name = "be_window_us",
                        .help = "BE window (us) on the whole GPU; on the complement half of it beyond two of BE's "
                                "units (half alone while a step up moves BE)",
                        .def = 2000, .min = 1, .max = 1e9, .integer = 1},
    [P_GATE_INTERVAL_US] = {.name = "gate_interval_us",
                            .help = "predicted work (us) between BE's gates on the whole GPU beside LS; 0: a gate "
                                    "before every kernel (only with gates)",
                            .def = 0, .min = 0, .max = 1e9, .integer = 1},
    [P_RIGHT_SIZE] = {.name = "right_size",
                      .help = "1: size the LS tier from the SLO attainment of its recorded requests; 0: ls_sms",
                      .def = 1, .min = 0, .max = 1, .integer = 1},
    [P_TARGET] = {.name = "target",
                  .help = "SLO attainment the LS tier must keep: share of requests within the SLO",
                  .def = 0.99, .min = 0.5, .max = 0.9999},
    [P_SHRINK_REQUESTS] = {.name = "shrink_requests",
                           .help = "requests a tier must serve, with a full error budget, before LS shrinks one step "
                                   "(at least DS_REQUEST_WINDOW on a tier entered by a step down; a step down holds "
                                   "after twice as many)",
                           .def = 128, .min = 8, .max = 1e6, .integer = 1},
    [P_DWELL_US] = {.name = "dwell_us",
                    .help = "least time (us) on a tier before LS shrinks from it",
                    .def = 20000, .min = 0, .max = 1e9, .integer = 1},
    [P_PREFILL_WHOLE] = {.name = "prefill_whole",
                         .help = "where LS prefill (phase prefill, its SLO a TTFT) runs: 0 urgent on the LS "
                                 "tier's complement, beside BE; 1 urgent on the whole GPU, beside decode's tier "
                                 "as in one engine; 2 on the whole GPU below decode in stream priority, level with BE",
                         .def = 0, .min = 0, .max = 2, .integer = 1},
    [P_PREFILL_PRESS] = {.name = "prefill_press",
                         .help = "1: LS prefill's TTFT lates (its error budget overdrawn) let the LS tier step down "
                                 "after a quarter of shrink_requests, without dwell_us, giving prefill SMs",
                         .def = 0, .min = 0, .max = 1, .integer = 1},
    [P_RESERVE] = {.name = "reserve",
                   .help = "1: reserve mode where LS misses on its largest tier or serves requests over 60% of the "
                           "time (LS urgent on the whole GPU, BE on the complement); 0: never, LS keeps its tier",
                   .def = 1, .min = 0, .max = 1, .integer = 1},
};

/* BE expands only this long (us) after LS's track_all was turned on: an LS
 * launch that began before (and so does not publish ds_vctx_state.launching)
 * has ended by then (an LS launch is not held: no window, gate or hold). */
#define TRACK_GRACE_US 1000.0

static ds_status init(void **state, int gates)
{
    slo_state *s = calloc(1, sizeof *s);
    if (!s)
        return DS_ERR_OUT_OF_MEMORY;
    atomic_init(&s->idle_us, (uint32_t)slo_params[P_IDLE_US].def);
    atomic_init(&s->be_window_us, (uint32_t)slo_params[P_BE_WINDOW_US].def);
    atomic_init(&s->gate_interval_us, (uint32_t)slo_params[P_GATE_INTERVAL_US].def);
    atomic_init(&s->right_size, (uint32_t)slo_params[P_RIGHT_SIZE].def);
    atomic_init(&s->shrink_requests, (uint32_t)slo_params[P_SHRINK_REQUESTS].def);
    atomic_init(&s->dwell_us, (uint32_t)slo_params[P_DWELL_US].def);
    atomic_init(&s->prefill_whole, (uint32_t)slo_params[P_PREFILL_WHOLE].def);
    atomic_init(&s->prefill_press, (uint32_t)slo_params[P_PREFILL_PRESS].def);
    atomic_init(&s->reserve_allowed, (uint32_t)slo_params[P_RESERVE].def);
    atomic_init(&s->target, slo_params[P_TARGET].def);
    atomic_init(&s->reset, 1);
    atomic_init(&s->may_expand, 1); /* not known yet: completions check */
    s->busy_at_us = -1;
    s->top_base = UINT64_MAX;
    s->want_gates = gates;
    ds_sizing_config cfg;
    ds_sizing_config_default(&cfg);
    ds_sizing_init(&s->sz, &cfg);
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

/* Every LS prefill vCtx where prefill_whole puts it (ds_slo_place_be's
 * prefill placement). */
static void place_prefill(slo_state *s, const ds_policy_view *view)
{
    ds_vctx_t vs[DS_POLICY_LIST_MAX];
    uint32_t n = ds_policy_list(view, vs, DS_POLICY_LIST_MAX);
    for (uint32_t i = 0; i < n; i++) {
        ds_vctx_state st;
        if (ds_policy_state(view, vs[i], &st) && is_prefill_ls(&st))
            ds_slo_place_be(s, view, vs[i], st.unit_us, 1, 1, gates_on(s, view), 1);
    }
}

static void slo_param(void *st, const ds_policy_view *view, uint32_t index, double value)
{
    slo_state *s = st;
    uint32_t u = (uint32_t)value;
    switch (index) {
    case P_LS_SMS:
    case P_DECODE_SMS: { /* the next tick moves LS to the start (start_tiers) */
        uint32_t low, high;
        ds_policy_ls_tiers(view, u, &low, &high);
        atomic_store(index == P_LS_SMS ? &s->fixed_tiers : &s->decode_tiers, tiers_pack(low, high));
        atomic_store(&s->reset, 1);
        break;
    }
    case P_IDLE_US: atomic_store(&s->idle_us, u); break;
    case P_BE_WINDOW_US: atomic_store(&s->be_window_us, u); break;
    case P_GATE_INTERVAL_US: atomic_store(&s->gate_interval_us, u); break;
    case P_RIGHT_SIZE: atomic_store(&s->right_size, u); atomic_store(&s->reset, 1); break;
    case P_TARGET: atomic_store(&s->target, value); atomic_store(&s->reset, 1); break;
    case P_SHRINK_REQUESTS: atomic_store(&s->shrink_requests, u); break;
    case P_DWELL_US: atomic_store(&s->dwell_us, u); break;
    case P_PREFILL_WHOLE: atomic_store(&s->prefill_whole, u); place_prefill(s, view); break;
    case P_PREFILL_PRESS: atomic_store(&s->prefill_press, u); break;
    case P_RESERVE: atomic_store(&s->reserve_allowed, u); break; /* the next tick leaves reserve mode */
    default: break;
    }
}

static void slo_activate(void *st, const ds_policy_view *view)
{
    slo_state *s = st;
    atomic_store(&s->reset, 1);
    atomic_store(&s->tiers, atomic_load(&s->fixed_tiers));
    atomic_store(&s->reserve, 0); /* LS's busy share is measured again (choose_mode) */
    atomic_store(&s->mode_restart, 1);
    slo_scan sc;
    ds_slo_scan_all(&sc, s, view);
    ds_slo_place_ls(s, view, &sc);
    /* beside LS, BE expands only once its units are known to fit LS's slack */
    ds_slo_set_confined(s, view, &sc, sc.ls_live, 0);
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
    ds_slo_scan_all(&sc, s, view);
    if (is_ls(&vs)) {
        ds_slo_place_one_ls(s, view, v);
        sc.ls_live = 1;
        ds_slo_set_confined(s, view, &sc, 1, 0); /* until BE's units are known to fit LS's slack */
    } else {
        ds_slo_place_be(s, view, v, vs.unit_us, atomic_load(&s->confined), sc.ls_live, gates_on(s, view),
                        is_prefill_ls(&vs));
        if (is_prefill_ls(&vs))
            atomic_store(&s->reset, 1); /* sizing starts again from decode_sms */
    }
}

/* An LS launch: LS goes to its tier (the whole GPU when no BE is active
 * there); BE that may be on LS's SMs moves to the complement and stops at its
 * next gate. */
static ds_decision slo_launch(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    slo_state *s = st;
    if (ev->cls != DS_CLASS_LATENCY_SENSITIVE)
        return (ds_decision){.kind = DS_DISPATCH_HERE}; /* BE placement comes from confine/expand */
    ds_vctx_state me;
    if (!ds_policy_state(view, ev->vctx, &me) || is_prefill_ls(&me))
        return (ds_decision){.kind = DS_DISPATCH_HERE}; /* prefill: placed with BE */
    if (reserving(s) && !shares_gpu(s, view)) { /* BE shares SMs with LS under stream priority: nobody yields */
        uint32_t full = ds_view_full_pctx(view);
        return me.pending_pctx == full && me.urgent ? (ds_decision){.kind = DS_DISPATCH_HERE}
                                                    : (ds_decision){.kind = DS_DISPATCH_REMAP, .pctx = full, .urgent = 1};
    }
    uint32_t target = low_tier(s);
    int expanded = !atomic_load(&s->confined); /* sequentially consistent: after_ls's Dekker */
    if (expanded || shares_gpu(s, view) || atomic_load_explicit(&s->unsettled, memory_order_relaxed)) {
        slo_scan sc;
        if (ds_slo_scan_be_on_ls(s, view, &sc, ev->vctx, &me))
            ds_slo_set_confined(s, view, &sc, 1, 1); /* BE yields */
        else if (expanded)
            target = ds_view_full_pctx(view); /* BE idle: LS may use the whole GPU */
    }
    if (me.pending_pctx == target && me.urgent)
        return (ds_decision){.kind = DS_DISPATCH_HERE};
    if (target == ds_view_full_pctx(view))
        ds_log_message(DS_LOG_DEBUG, "slo_aware: LS on the whole GPU (BE idle)");
    return (ds_decision){.kind = DS_DISPATCH_REMAP, .pctx = target, .urgent = 1};
}

static void slo_congestion(void *st, const ds_policy_view *view, ds_vctx_t v, double late_us)
{
    slo_state *s = st;
    /* Confining BE is the one thing that helps at once: once BE is on
     * disjoint SMs, an LS that is still late is limited by its own tier,
     * which right-sizing grows from the requests' attainment. */
    if (!atomic_load(&s->confined)) {
        slo_scan sc;
        ds_slo_scan_all(&sc, s, view);
        ds_slo_set_confined(s, view, &sc, 1, 1);
        return;
    }
    const char *name = "?";
    ds_vctx_get_name(v, &name);
    ds_log_message(DS_LOG_DEBUG, "slo_aware: vCtx '%s' late by %.0f us on its own tier (%u SMs)", name, late_us,
                   step_sms(view, low_tier(s)));
}

/* ------------------------------------------------------------------------ */
/* completions and ticks                                                     */

/* LS has no work in flight: BE's gates open, and with gates BE expands at
 * once where its units fit LS's slack. */
static void after_ls(slo_state *s, const ds_policy_view *view, double now)
{
    if (!ds_slo_resume_be(s, view) || !atomic_load_explicit(&s->may_expand, memory_order_relaxed) ||
        !atomic_load(&s->confined) || shares_gpu(s, view) || reserving(s))
        return;
    slo_scan sc;
    if (!ds_slo_expansion_safe(s, view, &sc, now, 1))
        return;
    /* LS's launches must publish `launching` (below) before BE expands: an
     * LS launch that began before track_all was on does not, so BE expands
     * only TRACK_GRACE_US after it was turned on */
    if (!atomic_load(&s->ls_track)) {
        ds_slo_track_all_ls(s, view, 1);
        return;
    }
    if (now < atomic_load(&s->track_since_us) + TRACK_GRACE_US)
        return;
    ds_slo_set_confined(s, view, &sc, 0, 0); /* BE takes the whole GPU until LS's next launch */
    /* An LS launch that read `confined` before the store above did not
     * confine BE. Dekker with the runtime's ds_vctx_state.launching (LS has
     * track_all once BE may share its SMs; both sides sequentially
     * consistent): such a launch is seen here, and BE goes back. */
    for (uint32_t i = 0; i < sc.n; i++) {
        ds_vctx_state st;
        if ((sc.fl[i] & VC_LS) && ds_policy_state(view, sc.vs[i], &st) && (st.launching || in_flight(&st))) {
            ds_slo_scan_all(&sc, s, view);
            ds_slo_set_confined(s, view, &sc, 1, 1);
            return;
        }
    }
}

static void slo_completion(void *st, const ds_policy_view *view, const ds_completion *c)
{
    slo_state *s = st;
    /* LS going quiet matters only to a closed gate or to a BE that may expand */
    if (!ds_view_gates_closed(view) && !atomic_load_explicit(&s->may_expand, memory_order_relaxed))
        return;
    ds_vctx_state vs;
    if (ds_policy_state(view, c->vctx, &vs) && is_ls(&vs) && !in_flight(&vs))
        after_ls(s, view, ds_view_now_us(view));
}

static void slo_tick(void *st, const ds_policy_view *view, double now_us)
{
    slo_state *s = st;
    ds_slo_choose_mode(s, view, now_us);
    ds_slo_size_ls(s, view, now_us);
    after_ls(s, view, now_us);
    ds_slo_settle(s, view, now_us);
    ds_slo_fit_windows(s, view);
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
