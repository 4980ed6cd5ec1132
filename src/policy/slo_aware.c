/*
 * slo_aware, the default policy (DetShare sections 4.2 and 4.4). The rules;
 * docs/design.md 4.8 gives each in full, with the measurements behind them.
 *  1. LS runs on a LOW tier at the highest stream priority, BE on the
 *     tier's complement (disjoint SMs), with a window of half of
 *     be_window_us beyond two of its longest units; LS prefill (its SLO a
 *     TTFT) beside BE, urgent, unheld, not counted in the LS tier's sizing.
 *  2. The LS tier is sized from the requests LS records against its SLO
 *     (right_size 1): it starts on the ls_sms tier; an error budget of
 *     (1 - target) late requests per request, at most 512 requests' worth
 *     times the late count's dispersion, steps LS up when overdrawn; after
 *     shrink_requests and dwell_us with a full budget and p99 headroom, LS
 *     steps down, as a probe that fails at a clear excess of lates (Poisson,
 *     two standard deviations) and holds after twice shrink_requests.
 *  3. Overload (a miss on the largest tier): the tier below is checked
 *     against the largest's late share and, if as good, becomes a cap.
 *  4. A step up moves BE off the SMs LS gains first (gate closed where it is
 *     bound elsewhere); requests served while BE is on its way are not judged.
 *  5. BE yields: an LS launch while BE may be on LS's SMs confines BE and
 *     closes its gate until LS has nothing in flight. Where BE's units fit
 *     half of LS's slack, BE expands to the whole GPU while LS is idle.
 *  6. Reserve mode: where LS misses on the largest tier, or serves requests
 *     over 60% of the time, and BE's units fit half its SLO, LS runs urgent on
 *     the whole GPU and BE on the complement (below it in priority); sizing
 *     then moves BE alone.
 * Parameters (ds_policy_param_set): ls_sms, idle_us, be_window_us, gate_interval_us,
 * right_size, target, shrink_requests, dwell_us; a new value applies from the next
 * decision using it; ls_sms, right_size, target or a switch restart sizing.
 */

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <detshare/policy.h>

#include "ladder.h"
#include "sizing.h"

_Static_assert(DS_SIZING_MAX_LEVELS >= DS_MAX_PCTX + 1, "a level per LOW tier and the whole GPU");

/* A (low, high) pair of pool indices (< DS_MAX_PCTX) in one word, published
 * with one atomic store. */
static uint32_t tiers_pack(uint32_t low, uint32_t high) { return low | high << 16; }
static uint32_t tiers_low(uint32_t packed) { return packed & 0xffffu; }
static uint32_t tiers_high(uint32_t packed) { return packed >> 16; }

enum {
    P_LS_SMS,
    P_IDLE_US,
    P_BE_WINDOW_US,
    P_GATE_INTERVAL_US,
    P_RIGHT_SIZE,
    P_TARGET,
    P_SHRINK_REQUESTS,
    P_DWELL_US,
    P_COUNT
};

static const ds_policy_param slo_params[P_COUNT] = {
    [P_LS_SMS] = {.name = "ls_sms",
                  .help = "SMs of the fixed LS tier (right_size 0, or before LS records requests): the LOW tier "
                          "nearest this count",
                  .def = 64, .min = 1, .max = 256, .integer = 1},
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
};

/* BE's unit must fit in this share of LS's slack before BE expands: a request
 * that arrives while the unit runs waits for it (and for the gate to reopen
 * after it), and those requests are LS's tail; the rest covers the error of a
 * p99 taken over at most DS_REQUEST_WINDOW requests. (H200, W1: with the
 * whole slack, BE's GEMMs expanded ~10 times per 1600 requests, LS's p99 on
 * the same 96 SMs rose 10-20% over static's and BE gained nothing.) */
#define SLACK_SHARE 0.5
/* BE expands only this long (us) after LS's track_all was turned on: an LS
 * launch that began before (and so does not publish ds_vctx_state.launching)
 * has ended by then (an LS launch is not held: no window, gate or hold). */
#define TRACK_GRACE_US 1000.0
/* Reserve mode (choose_mode): LS's share of time with work in flight,
 * averaged over about BUSY_TAU_US, above which LS takes the whole GPU
 * urgent and BE stays on the complement (on at RESERVE_ON, off again below
 * RESERVE_OFF). Expanding harvests LS's idle time only: an LS busy most of
 * the time leaves little of it, and on its own tier runs on fewer SMs than it
 * could use under stream priority. (H100, Llama-3-8B-shaped decode at 20%
 * of capacity beside segmented ResNet-50 training, decode in flight about
 * 80% of the time: LS on its 64-SM tier gave TPOT p99 1.88x alone with BE
 * 0.64; LS urgent on the whole GPU with BE on the complement of 64, 32 and
 * 16 SMs 1.09x / 0.60, 1.19x / 0.71 and 1.20x / 0.74; stream priority alone
 * 1.30x / 0.82; docs/results/h100/segments/.) */
#define BUSY_TAU_US 1e6
/* LS's requests since activation before ls_misses_on_top may judge its
 * largest tier; the clear-miss test (a failed probe's, sizing.c) is what
 * guards against noise (at 16: at least 4 late where 1% are allowed). (H100, decode at 20%
 * load beside segmented ResNet-50: 7-15 decode steps a second, so 64 took
 * 4-9 s of an 8-s window on a tier where every step was late.) */
#define TOP_WINDOW 16
/* A BE vCtx not seen active for this long (us) does not count in may_expand
 * (resume_be): e.g. a tenant kept for later, whose long units would
 * otherwise rule reserve mode out (expansion_safe still counts it). */
#define BE_IDLE_US 1e6
#define RESERVE_ON 0.6
/* Off well below on: the share is measured over a second of trace arrivals
 * (bursty), and LS runs faster in reserve mode. (H100, same run: 61% at
 * entry, 40% a second later, back on its tier, then reserve again.) */
#define RESERVE_OFF 0.25
/* A BE unit not yet known counts as this long (us): longer than any LS
 * slack, within the unbounded slack of no LS. */
#define BE_UNIT_UNKNOWN_US 1e17
/* BE's unit (ds_vctx_state::unit_us, a decaying max of its units'
 * predictions over about a hundred launches) counts as known only after this
 * many units (kernels, sections and graph segments): before, it says how BE started,
 * from profiles still filling, not how long its units run. (H200, W1 on 96
 * SMs, sizing off: BE's first cuBLAS sections predicted 368 us, 100 us on the
 * whole GPU, against 2800 us on the complement 20 ms later; expansions judged
 * on them put BE's GEMMs on LS's SMs while the LS tenant started, and in
 * the windows that followed LS's p50 was 25-47 us over static's on the same
 * SMs (medians per variant and run), against -4 to +15 us where BE had not
 * expanded; docs/results/ls_cost/README.md, exp11-exp15.) */
#define BE_UNIT_LAUNCHES 256
/* BE's window on the complement holds this many of its units beyond half of
 * be_window_us (window_confined). */
#define CONFINED_UNITS 2.0
typedef struct slo_state {
    _Atomic int confined;
    _Atomic uint32_t tiers;       /* tiers_pack(LS tier, its complement): what placements use */
    _Atomic uint32_t fixed_tiers; /* the ls_sms tier and its complement */
    _Atomic uint32_t idle_us, be_window_us, gate_interval_us;
    _Atomic uint32_t right_size, shrink_requests, dwell_us;
    _Atomic double target;
    _Atomic int reset;    /* sizing restarts at the next tick */
    _Atomic int unsettled; /* a BE vCtx may still be bound off the complement: LS launches check */
    _Atomic double left_us;    /* BE's work queued before it rebound on the complement has passed its window
                                  (runtime clock: the tick that saw it bound there plus its window) */
    _Atomic double settled_us; /* ... and has run (plus its longest unit) */
    _Atomic double drain_until_us; /* BE confined from the whole GPU: its gated leftovers there may run until */
    _Atomic int ls_track;          /* LS vCtxs have track_all on (this policy set it) */
    _Atomic int moving;            /* a step up waits for BE to leave the SMs LS gains (written by the tick);
                                      BE's window is then half of be_window_us alone */
    _Atomic double track_since_us; /* runtime clock when ls_track was last turned on */
    _Atomic int may_expand;        /* the units of BE vCtxs active lately fit half of LS's slack at best
                                      (resume_be, each tick) */
    _Atomic int reserve;           /* LS urgent on the whole GPU, BE on the complement (see choose_mode) */
    _Atomic int mode_restart;      /* activation: choose_mode measures LS again (busy share, requests) */
    int top_missed;                /* LS grew past its largest tier's reach (size_ls; tick only): reserve */
    uint64_t top_base_over;        /* ... and of them over their SLO */
    uint64_t top_base;             /* LS's requests (summed) at activation: ls_misses_on_top counts from it
                                      (UINT64_MAX: not read yet) */
    double busy_share;             /* LS's share of time serving requests, decaying (choose_mode; tick only) */
    double busy_sum_us, time_sum_us; /* its decaying sums: time serving requests, time */
    double busy_at_us;             /* runtime clock of its last update (-1: none yet) */
    double busy_logged_us;         /* runtime clock of its last debug line */
    uint32_t busy_n;               /* LS vCtxs and their request counts at that update */
    ds_vctx_t busy_vs[DS_POLICY_LIST_MAX];
    uint64_t busy_req[DS_POLICY_LIST_MAX];
    int want_gates; /* BE yields through gates (not in slo_aware_nogates); needs the runtime's gates on */
    ds_sizing sz;     /* the sizing rule's state: written by the tick only, restarted through `reset` */
    uint32_t lad_low[DS_SIZING_MAX_LEVELS], lad_high[DS_SIZING_MAX_LEVELS]; /* its ladder: LS's tier, BE's */
} slo_state;

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

static void slo_param(void *st, const ds_policy_view *view, uint32_t index, double value)
{
    slo_state *s = st;
    uint32_t u = (uint32_t)value;
    switch (index) {
    case P_LS_SMS: {
        uint32_t low, high;
        ds_policy_ls_tiers(view, u, &low, &high);
        atomic_store(&s->fixed_tiers, tiers_pack(low, high));
        atomic_store(&s->tiers, tiers_pack(low, high));
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

/* BE's window on the complement: half of be_window_us beyond CONFINED_UNITS
 * of its longest recent units (unit_us: 0 while not known), so that its next
 * unit is queued while one runs. A unit that does not fit the window runs
 * only once nothing is in flight: BE's SMs then idle for a host round trip
 * per unit (H200, W1 on 96 SMs: BE 0.332 of alone against static's 0.336 with
 * half of be_window_us alone, 0.339 against 0.339 without a window). While
 * a step up moves BE (`moving`), half of be_window_us alone: BE rebinds once
 * its queue on the SMs LS gains has drained below it. */
static uint32_t window_confined(slo_state *s, double unit_us)
{
    double w = window_expanded(s) / 2;
    if (!atomic_load_explicit(&s->moving, memory_order_relaxed))
        w += CONFINED_UNITS * (unit_us > 0 ? unit_us : 0);
    return w < 1e9 ? (uint32_t)ceil(w) : 1000000000u;
}

/* A confined BE vCtx's window is refitted (fit_windows) once its unit has
 * grown past it or shrunk to below half its share of it. */
static int window_fits(slo_state *s, uint32_t window_us, double unit_us)
{
    return window_us >= window_confined(s, unit_us) && window_us <= window_confined(s, 2 * unit_us) + 1;
}

/* BE's "complement" is the whole GPU: LS is on the ladder's top step, and BE
 * shares every SM with it (held at its gate while LS has work in flight). */
static int shares_gpu(slo_state *s, const ds_policy_view *view) { return high_tier(s) == ds_view_full_pctx(view); }

/* The LS tier's tenants: latency-sensitive work but prefill. A
 * latency-sensitive prefill vCtx (its SLO a TTFT) runs beside BE on the
 * complement, above it in stream priority and never held: its chunks are far
 * longer than decode's slack, so it may not share decode's SMs, and holding
 * it (gates, a window) is what made TTFT miss. It counts as BE for what
 * decode's tier must leave room for (expansion, yields, moves). */
static int is_prefill_ls(const ds_vctx_state *st)
{
    return st->cls == DS_CLASS_LATENCY_SENSITIVE && st->phase == DS_PHASE_PREFILL;
}

static int is_ls(const ds_vctx_state *st) { return st->cls == DS_CLASS_LATENCY_SENSITIVE && !is_prefill_ls(st); }

/* SMs of pool index pctx (0 if there is none), for the log lines. */
static uint32_t step_sms(const ds_policy_view *view, uint32_t pctx)
{
    const ds_pctx_info *p = ds_view_pctx(view, pctx);
    return p ? p->sm_count : 0;
}

/* Work in flight (or a section open). */
static int in_flight(const ds_vctx_state *st) { return st->busy || st->inflight_us > 0.5; }

/* Active within idle_us of now (a vCtx never seen active is not). */
static int recently_active(const ds_vctx_state *st, double now, uint32_t idle)
{
    return st->last_active_us >= 0 && now - st->last_active_us < idle;
}

/* The live vCtxs as one decision sees them: one snapshot each. */
enum {
    VC_GONE = 1,  /* destroyed since listed */
    VC_LS = 2,    /* latency-sensitive */
    VC_YIELD = 4, /* BE that may be on LS's SMs with its gate open: a yield closes it */
    VC_FULL = 8,  /* BE bound, or about to be bound, on the whole GPU */
    VC_PREFILL = 16, /* a latency-sensitive prefill vCtx (is_prefill_ls), placed with BE */
};

typedef struct slo_scan {
    uint32_t n;
    int ls_live; /* an LS vCtx is listed */
    int top;     /* LS on the whole GPU beside BE, or BE draining from it: every BE vCtx yields */
    uint32_t full; /* the whole GPU's pCtx */
    ds_vctx_t vs[DS_POLICY_LIST_MAX];
    unsigned char fl[DS_POLICY_LIST_MAX];
    double unit[DS_POLICY_LIST_MAX]; /* a BE vCtx's ds_vctx_state.unit_us */
} slo_scan;

/* BE was confined from the whole GPU less than its window ago: what it
 * queued there (a gate before every kernel) may still run on any SM. */
static int draining(slo_state *s, const ds_policy_view *view)
{
    double until = atomic_load_explicit(&s->drain_until_us, memory_order_relaxed);
    return until > 0 && ds_view_now_us(view) < until;
}

static void scan_list(slo_scan *sc, slo_state *s, const ds_policy_view *view)
{
    sc->n = ds_policy_list(view, sc->vs, DS_POLICY_LIST_MAX);
    sc->ls_live = 0;
    sc->top = shares_gpu(s, view) || draining(s, view);
    sc->full = ds_view_full_pctx(view);
}

/* Records what the snapshot of vs[i] says (st NULL: gone). BE yields when it
 * is bound, or about to be bound, anywhere but the complement. */
static void scan_note(slo_scan *sc, uint32_t i, const ds_vctx_state *st, uint32_t high)
{
    if (!st)
        sc->fl[i] = VC_GONE;
    else if (is_ls(st))
        sc->fl[i] = VC_LS, sc->ls_live = 1;
    else {
        sc->fl[i] = (st->pctx != high || st->pending_pctx != high || sc->top) && !st->gate_closed ? VC_YIELD : 0;
        sc->fl[i] |= st->pctx == sc->full || st->pending_pctx == sc->full ? VC_FULL : 0;
        sc->fl[i] |= is_prefill_ls(st) ? VC_PREFILL : 0;
        sc->unit[i] = st->unit_us;
    }
}

/* Snapshots vs[i] into st and records it; returns whether it is live. */
static int scan_one(slo_scan *sc, const ds_policy_view *view, uint32_t i, uint32_t high, ds_vctx_state *st)
{
    int live = ds_policy_state(view, sc->vs[i], st);
    scan_note(sc, i, live ? st : NULL, high);
    return live;
}

/* Snapshots every listed vCtx (nothing else needed). */
static void scan_all(slo_scan *sc, slo_state *s, const ds_policy_view *view)
{
    uint32_t high = high_tier(s);
    scan_list(sc, s, view);
    for (uint32_t i = 0; i < sc->n; i++) {
        ds_vctx_state st;
        scan_one(sc, view, i, high, &st);
    }
}

/* BE on the complement (disjoint from LS: no gates needed), or where it
 * shares SMs with LS (the whole GPU) with gates. A latency-sensitive prefill
 * vCtx: on the complement, urgent, without window or gates. */
static void place_be(slo_state *s, const ds_policy_view *view, ds_vctx_t v, double unit_us, int confined, int ls_live,
                     int gates, int prefill)
{
    if (prefill) {
        ds_vctx_place(v, high_tier(s), 1, 0);
        if (gates)
            ds_vctx_set_gate_interval(v, DS_GATES_NONE);
        return;
    }
    int shared = !confined || shares_gpu(s, view);
    if (confined)
        ds_vctx_place(v, high_tier(s), 0, window_confined(s, unit_us));
    else
        ds_vctx_place(v, ds_view_full_pctx(view), 0, window_expanded(s));
    if (gates)
        ds_vctx_set_gate_interval(v, shared && ls_live ? atomic_load(&s->gate_interval_us) : DS_GATES_NONE);
}

/* Where BE may share SMs with LS (expanded, or LS on the whole GPU), every
 * LS unit is marked (ds_vctx_set_track_all): BE's gates reopen, and BE
 * expands, only once LS is known to have nothing in flight, and an unmarked
 * LS kernel would count as in flight until LS's next wait. Off again once BE
 * has settled on the complement (settle): there a mark per unit only costs
 * LS an event record each (H200, W1: 20-35 us more host time per request). */
static void set_ls_track(slo_state *s, const ds_policy_view *view, int on)
{
    if (on && !atomic_load(&s->ls_track))
        atomic_store(&s->track_since_us, ds_view_now_us(view));
    atomic_store(&s->ls_track, on);
}

static void track_ls(slo_state *s, const ds_policy_view *view, ds_vctx_t v, int yield)
{
    if (!gates_on(s, view))
        return;
    if (!atomic_load(&s->confined) || shares_gpu(s, view) || yield)
        set_ls_track(s, view, 1);
    if (atomic_load(&s->ls_track))
        ds_vctx_set_track_all(v, 1);
}

/* Sets every LS vCtx's track_all to `on` (ls_track says which). */
static void track_all_ls(slo_state *s, const ds_policy_view *view, int on)
{
    set_ls_track(s, view, on);
    ds_vctx_t vs[DS_POLICY_LIST_MAX];
    uint32_t n = ds_policy_list(view, vs, DS_POLICY_LIST_MAX);
    for (uint32_t i = 0; i < n; i++) {
        ds_vctx_state st;
        if (ds_policy_state(view, vs[i], &st) && is_ls(&st))
            ds_vctx_set_track_all(vs[i], on);
    }
}

/* Some BE vCtx of the scan is bound, or about to be bound, on the whole GPU. */
static int be_on_full(const slo_scan *sc)
{
    for (uint32_t i = 0; i < sc->n; i++)
        if (sc->fl[i] & VC_FULL)
            return 1;
    return 0;
}

/* Confines or expands every BE vCtx of the scan. With `yield`, BE vCtxs that
 * may be running on LS's SMs then stop at their next gate (their move to
 * the complement was just requested), and LS's units are marked (track_ls),
 * so that the gates reopen once LS has nothing in flight. A refused close
 * (too few hardware queues) leaves that BE to its window. */
static void set_confined(slo_state *s, const ds_policy_view *view, const slo_scan *sc, int confined, int yield)
{
    if (atomic_exchange(&s->confined, confined) != confined) {
        /* BE's work queued on the whole GPU runs on after the move (gated):
         * LS's launches keep closing BE's gates until it has drained */
        if (confined && be_on_full(sc))
            atomic_store(&s->drain_until_us, ds_view_now_us(view) + window_expanded(s));
        ds_log_message(DS_LOG_DEBUG, "slo_aware: BE %s", confined ? "confined to the complement"
                                                                   : "expands to the whole GPU");
    }
    atomic_store(&s->unsettled, 1); /* until a tick sees every BE settled on the complement */
    int gates = gates_on(s, view);
    for (uint32_t i = 0; i < sc->n; i++)
        if (sc->fl[i] & VC_LS)
            track_ls(s, view, sc->vs[i], yield);
        else if (!(sc->fl[i] & VC_GONE))
            place_be(s, view, sc->vs[i], sc->unit[i], confined, sc->ls_live, gates, sc->fl[i] & VC_PREFILL);
    if (yield && gates)
        for (uint32_t i = 0; i < sc->n; i++)
            if ((sc->fl[i] & (VC_YIELD | VC_PREFILL)) == VC_YIELD)
                ds_vctx_gate_close(sc->vs[i]);
}

static int reserving(slo_state *s) { return atomic_load_explicit(&s->reserve, memory_order_relaxed); }

/* Where LS runs: its tier, or in reserve mode the whole GPU (its tier's SMs
 * are then the ones BE's complement leaves it alone). */
static uint32_t ls_pctx(slo_state *s, const ds_policy_view *view)
{
    return reserving(s) ? ds_view_full_pctx(view) : low_tier(s);
}

/* Places one LS vCtx on the LS tier (one being created: set_confined's
 * scan does not list it yet, so its marks are set here). */
static void place_one_ls(slo_state *s, const ds_policy_view *view, ds_vctx_t v)
{
    track_ls(s, view, v, 0);
    ds_vctx_place(v, ls_pctx(s, view), 1, 0);
}

/* Places every LS vCtx of the scan on the LS tier; set_confined, called
 * with the same scan, sets their marks. */
static void place_ls(slo_state *s, const ds_policy_view *view, const slo_scan *sc)
{
    for (uint32_t i = 0; i < sc->n; i++)
        if (sc->fl[i] & VC_LS)
            ds_vctx_place(sc->vs[i], ls_pctx(s, view), 1, 0);
}

/* What BE may run on LS's SMs when LS returns, expanded (us): with gates its
 * longest unit (a running kernel is not preempted), without them that plus
 * its window of queued work; measured on its confined tier, scaled by the SM
 * ratio (compute-bound estimate). A unit not known yet (no prediction, or
 * fewer than BE_UNIT_LAUNCHES units so far) counts as BE_UNIT_UNKNOWN_US.
 * `scale`: SMs of the complement over the whole GPU's. */
static double be_bound_us(slo_state *s, const ds_policy_view *view, const ds_vctx_state *st, double scale)
{
    if (st->unit_us <= 0 || st->launches + st->sections + st->graph_units < BE_UNIT_LAUNCHES)
        return BE_UNIT_UNKNOWN_US;
    return (gates_on(s, view) ? 0 : window_expanded(s)) + st->unit_us * scale;
}

/* SMs of the complement over the whole GPU's (be_bound_us). */
static double complement_scale(slo_state *s, const ds_policy_view *view)
{
    const ds_pctx_info *hp = ds_view_pctx(view, high_tier(s)), *fp = ds_view_pctx(view, ds_view_full_pctx(view));
    return hp && fp ? (double)hp->sm_count / fp->sm_count : 1;
}

/* No LS vCtx has work in flight: every BE gate opens. Returns whether LS
 * is quiet (no LS vCtx in flight). Also publishes may_expand: whether BE's
 * units fit half of LS's slack at best (LS's whole SLO, a tail of 0). Only
 * then can expansion_safe pass, so after_ls asks it (a second scan) only
 * then, and a completion that finds no gate closed acts only then: W1's
 * GEMMs are far over half the SLO, and LS's completions then cost two atomic
 * loads. (W1 on 96 SMs with sizing off, LS's mean service over static@96's
 * on the same SMs: simulated, 40 repetitions at 40 and 50% load, from
 * +9.3/+6.6 us to -0.6/+0.2 us; H200, from 11-17 us to +7.3/+10.0 us;
 * docs/results/ls_cost/.) */
static int resume_be(slo_state *s, const ds_policy_view *view)
{
    slo_scan sc;
    scan_list(&sc, s, view);
    int closed = gates_on(s, view) && ds_view_gates_closed(view), ls_busy = 0;
    double scale = complement_scale(s, view), be_unit = 0, slo = 1e18, now = -1;
    for (uint32_t i = 0; i < sc.n; i++) {
        ds_vctx_state st;
        sc.fl[i] = 0;
        if (!ds_policy_state(view, sc.vs[i], &st))
            continue;
        if (is_ls(&st)) {
            ls_busy |= in_flight(&st);
            if (st.slo_us && st.slo_us < slo)
                slo = st.slo_us;
            continue;
        }
        sc.fl[i] = st.gate_closed;
        /* a BE vCtx idle for a while (a tenant paused) does not bound what runs now */
        if (!in_flight(&st) && !recently_active(&st, now < 0 ? (now = ds_view_now_us(view)) : now, BE_IDLE_US))
            continue;
        double bound = be_bound_us(s, view, &st, scale);
        be_unit = bound > be_unit ? bound : be_unit;
    }
    atomic_store_explicit(&s->may_expand, be_unit <= SLACK_SHARE * slo, memory_order_relaxed);
    if (ls_busy)
        return 0;
    if (closed)
        for (uint32_t i = 0; i < sc.n; i++)
            if (sc.fl[i])
                ds_vctx_gate_open(sc.vs[i]);
    return 1;
}

static void slo_activate(void *st, const ds_policy_view *view)
{
    slo_state *s = st;
    atomic_store(&s->reset, 1);
    atomic_store(&s->tiers, atomic_load(&s->fixed_tiers));
    atomic_store(&s->reserve, 0); /* LS's busy share is measured again (choose_mode) */
    atomic_store(&s->mode_restart, 1);
    slo_scan sc;
    scan_all(&sc, s, view);
    place_ls(s, view, &sc);
    /* beside LS, BE expands only once its units are known to fit LS's slack */
    set_confined(s, view, &sc, sc.ls_live, 0);
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
    scan_all(&sc, s, view);
    if (is_ls(&vs)) {
        place_one_ls(s, view, v);
        sc.ls_live = 1;
        set_confined(s, view, &sc, 1, 0); /* until BE's units are known to fit LS's slack */
    } else {
        place_be(s, view, v, vs.unit_us, atomic_load(&s->confined), sc.ls_live, gates_on(s, view), is_prefill_ls(&vs));
    }
}

/* Scans the vCtxs for an LS launch (self: the launching vCtx, whose snapshot
 * is `me`) and returns whether some BE vCtx is active where it may occupy
 * LS's SMs (bound, or about to be bound, off the complement, or anywhere
 * when LS is on the whole GPU); the scan records who must yield. */
static int scan_be_on_ls(slo_state *s, const ds_policy_view *view, slo_scan *sc, ds_vctx_t self,
                         const ds_vctx_state *me)
{
    uint32_t high = high_tier(s), idle = idle_us(s);
    double now = -1;
    int any = 0;
    scan_list(sc, s, view);
    for (uint32_t i = 0; i < sc->n; i++) {
        ds_vctx_state bs;
        const ds_vctx_state *b = sc->vs[i] == self                      ? me
                                 : ds_policy_state(view, sc->vs[i], &bs) ? &bs
                                                                         : NULL;
        scan_note(sc, i, b, high);
        if (!b || is_ls(b) || !(sc->fl[i] & VC_YIELD))
            continue;
        if (now < 0)
            now = ds_view_now_us(view);
        if (in_flight(b) || recently_active(b, now, idle))
            any = 1;
    }
    return any;
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
        if (scan_be_on_ls(s, view, &sc, ev->vctx, &me))
            set_confined(s, view, &sc, 1, 1); /* BE yields */
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
        scan_all(&sc, s, view);
        set_confined(s, view, &sc, 1, 1);
        return;
    }
    const char *name = "?";
    ds_vctx_get_name(v, &name);
    ds_log_message(DS_LOG_DEBUG, "slo_aware: vCtx '%s' late by %.0f us on its own tier (%u SMs)", name, late_us,
                   step_sms(view, low_tier(s)));
}

/* Expanding BE is safe only if what BE may be running on LS's SMs when LS
 * returns fits in half of LS's slack (SLACK_SHARE): with gates, its longest unit (a running kernel
 * is not preempted: stream priority does not stop a persistent GEMM);
 * without, that plus its window of queued work. Arrivals are memoryless, so
 * idleness alone does not make a return unlikely. BE's unit was measured on
 * its confined tier; on the whole GPU it is scaled by the SM ratio
 * (compute-bound estimate). LS's slack is its SLO minus its recent request
 * p99; an LS vCtx that records requests gives none until 32 are in its
 * window (BE stays confined meanwhile), one that records none its SLO minus
 * its longest unit. LS vCtxs without an SLO impose no bound. `wait_idle`: also require
 * every LS vCtx idle for idle_us. Fills the scan. */
static int expansion_safe(slo_state *s, const ds_policy_view *view, slo_scan *sc, double now_us, int wait_idle)
{
    uint32_t high = high_tier(s), idle = idle_us(s);
    double scale = complement_scale(s, view), be_unit = gates_on(s, view) ? 0 : window_expanded(s), slack = 1e18;
    scan_list(sc, s, view);
    for (uint32_t i = 0; i < sc->n; i++) {
        ds_vctx_state vs;
        if (!scan_one(sc, view, i, high, &vs))
            continue;
        if (is_ls(&vs)) {
            if (in_flight(&vs) || vs.launching || (wait_idle && recently_active(&vs, now_us, idle)))
                return 0;
            if (vs.requests && vs.request_window < 32)
                return 0; /* records requests, too few yet to know its tail */
            double used = vs.requests ? vs.request_p99_us : vs.unit_us;
            if (vs.slo_us && vs.slo_us - used < slack)
                slack = vs.slo_us - used;
        } else {
            double bound = be_bound_us(s, view, &vs, scale);
            be_unit = bound > be_unit ? bound : be_unit;
        }
    }
    return be_unit <= SLACK_SHARE * slack;
}

/* ------------------------------------------------------------------------ */
/* right-sizing: the rule is sizing.c's; here the ladder and the moves       */

/* The ladder: LOW tiers with a complement, by SM count; the whole GPU on top
 * when `full` (BE's units fit LS's slack, with gates). Starts from the
 * ls_sms tier (the last where it is not on the ladder). */
static void build_ladder(slo_state *s, const ds_policy_view *view, int full, ds_sizing_config *cfg)
{
    ds_sizing_config_default(cfg);
    uint32_t nlev = ds_policy_low_ladder(view, s->lad_low, s->lad_high, DS_MAX_PCTX);
    cfg->has_full = full && nlev > 0;
    if (cfg->has_full) {
        s->lad_low[nlev] = s->lad_high[nlev] = ds_view_full_pctx(view);
        nlev++;
    }
    cfg->nlev = nlev;
    for (uint32_t k = 0; k < nlev; k++)
        cfg->sms[k] = step_sms(view, s->lad_low[k]);
    uint32_t splits = nlev - (uint32_t)cfg->has_full;
    while (cfg->start + 1 < splits && s->lad_low[cfg->start] != tiers_low(atomic_load(&s->fixed_tiers)))
        cfg->start++;
}

/* What LS's recorded requests say, summed over the LS vCtxs with an SLO that
 * recorded any (totals, runs of lates, the worst window p99 over its SLO);
 * 0 where none has. */
static int ls_counts(const ds_policy_view *view, ds_sizing_input *f) { return ds_policy_sum_requests(view, is_ls, f); }

enum { STEP_UP, STEP_DOWN, STEP_START };

/* Moves LS to the sizing's level. A step up moves BE first: BE is placed on
 * the new (smaller) complement and yields where it is bound elsewhere, and
 * LS stays on its tier until BE is off the SMs it gains (move_done; on the
 * whole GPU, until BE has nothing in flight), so that no BE kernel starts on
 * LS's SMs while LS has work in flight. A step down frees SMs: LS moves at
 * once; as a probe (z->probing), BE keeps the larger tier's complement until
 * the smaller tier has held (BE's running kernels would delay LS on the SMs
 * it gets back). In reserve mode LS stays on the whole GPU: a step moves
 * only BE, which shares SMs with LS under stream priority and so need not
 * yield first. */
static void enter_level(slo_state *s, const ds_policy_view *view, uint64_t req, int kind)
{
    const ds_sizing *z = &s->sz;
    int lvl = z->lvl;
    uint32_t old_low = low_tier(s), old_high = high_tier(s), full = ds_view_full_pctx(view);
    int by_shrink = kind == STEP_DOWN;
    int reserve = reserving(s) && s->lad_low[lvl] != full;
    uint32_t high = s->lad_high[lvl + (z->probing ? 1 : 0)];
    int confined = atomic_load(&s->confined) || shares_gpu(s, view);
    /* expanded BE is gated before every kernel and yields at LS's next launch */
    int moving = kind == STEP_UP && confined && s->lad_low[lvl] != old_low && high != old_high && !reserve;
    atomic_store(&s->moving, moving);
    if (moving) /* toward the whole GPU BE stays put, gated, until it has nothing in flight */
        atomic_store(&s->tiers, tiers_pack(old_low, high == full ? old_high : high));
    else
        atomic_store(&s->tiers, tiers_pack(s->lad_low[lvl], high));
    slo_scan sc;
    scan_all(&sc, s, view);
    set_confined(s, view, &sc, confined, confined && !by_shrink && !reserve); /* a step down frees SMs: nobody yields */
    if (moving && high == full)
        for (uint32_t i = 0; i < sc.n; i++)
            if (!(sc.fl[i] & (VC_LS | VC_GONE)))
                ds_vctx_gate_close(sc.vs[i]);
    place_ls(s, view, &sc);
    static const char *const what[] = {"grow", "shrink", "start"};
    ds_log_message(DS_LOG_INFO, "slo_aware: LS tier %u -> %u SMs (%s, %llu requests%s%s)", step_sms(view, old_low),
                   step_sms(view, s->lad_low[lvl]), what[kind], (unsigned long long)req,
                   moving ? "; BE moves off first" : "", reserve ? "; reserve mode: LS on the whole GPU" : "");
}

/* A step up's move is done once BE is off the SMs LS gains: bound on the new
 * complement (a tick saw it there: settle) for longer than its window (it
 * rebinds at its next launch, which its window lets through only once at
 * most a window of work is queued on the old binding); or with nothing in
 * flight. */
static int move_done(slo_state *s, const ds_policy_view *view, double now)
{
    if (s->lad_high[s->sz.lvl] != ds_view_full_pctx(view) && !atomic_load(&s->unsettled) &&
        now >= atomic_load(&s->left_us))
        return 1;
    ds_vctx_t vs[DS_POLICY_LIST_MAX];
    uint32_t n = ds_policy_list(view, vs, DS_POLICY_LIST_MAX);
    for (uint32_t i = 0; i < n; i++) {
        ds_vctx_state st;
        if (ds_policy_state(view, vs[i], &st) && !is_ls(&st) && in_flight(&st))
            return 0;
    }
    return 1;
}

/* The step up's second half: LS takes its new tier. */
static void finish_move(slo_state *s, const ds_policy_view *view)
{
    int lvl = s->sz.lvl;
    atomic_store(&s->tiers, tiers_pack(s->lad_low[lvl], s->lad_high[lvl]));
    slo_scan sc;
    scan_all(&sc, s, view);
    int confined = atomic_load(&s->confined) || shares_gpu(s, view);
    set_confined(s, view, &sc, confined, confined);
    place_ls(s, view, &sc);
    /* the move ends after BE's placement above, which keeps the window it
     * rebound with: the tick that sees it settled times its leftovers by that
     * window, and fit_windows widens it after */
    atomic_store(&s->moving, 0);
    ds_log_message(DS_LOG_DEBUG, "slo_aware: LS on its new tier (%u SMs), BE off it", step_sms(view, s->lad_low[lvl]));
}

/* A probe (a step down with BE still on the larger step's complement)
 * holds: BE gets the SMs it freed. */
static void confirm_probe(slo_state *s, const ds_policy_view *view, uint64_t req)
{
    int lvl = s->sz.lvl;
    atomic_store(&s->tiers, tiers_pack(s->lad_low[lvl], s->lad_high[lvl]));
    slo_scan sc;
    scan_all(&sc, s, view);
    set_confined(s, view, &sc, atomic_load(&s->confined), 0);
    ds_log_message(DS_LOG_INFO, "slo_aware: LS tier %u SMs held (probe, %llu requests): BE takes its complement",
                   step_sms(view, s->lad_low[lvl]), (unsigned long long)req);
}

/* One tick of right-sizing: LS's counts and the runtime's state into the
 * rule (ds_sizing_step), its decision applied. */
static void size_ls(slo_state *s, const ds_policy_view *view, double now)
{
    ds_sizing *z = &s->sz;
    if (atomic_exchange(&s->reset, 0) && z->lvl >= 0) {
        z->lvl = -1;
        atomic_store(&s->moving, 0);
        atomic_store(&s->tiers, atomic_load(&s->fixed_tiers));
    }
    if (!atomic_load_explicit(&s->right_size, memory_order_relaxed))
        return;
    ds_sizing_input in = {.now_us = now};
    if (!ls_counts(view, &in))
        return;
    if (z->lvl < 0) { /* first requests: a new ladder */
        ds_sizing_config cfg;
        slo_scan sc;
        build_ladder(s, view, gates_on(s, view) && expansion_safe(s, view, &sc, now, 0), &cfg);
        ds_sizing_init(z, &cfg);
    }
    z->cfg.target = atomic_load_explicit(&s->target, memory_order_relaxed);
    z->cfg.shrink_requests = atomic_load_explicit(&s->shrink_requests, memory_order_relaxed);
    z->cfg.dwell_us = atomic_load(&s->dwell_us);
    in.reserving = reserving(s);
    in.may_expand = atomic_load_explicit(&s->may_expand, memory_order_relaxed);
    if (z->lvl >= 0 && atomic_load(&s->moving)) { /* a step up: LS follows once BE is off its new SMs */
        in.phase = DS_SIZING_HOLD;
        if (move_done(s, view, now)) {
            finish_move(s, view);
            in.phase = DS_SIZING_MOVED;
        }
    } else if (atomic_load(&s->confined) && !shares_gpu(s, view) &&
               (atomic_load(&s->unsettled) || now < atomic_load(&s->settled_us))) {
        /* BE on its way to the complement (at the start, after a step up):
         * its work queued before, up to its window, may still hold LS's SMs */
        in.phase = DS_SIZING_HOLD;
    }
    if (z->lvl >= 0 && z->cfg.has_full && z->lvl == (int)z->cfg.nlev - 2) { /* the whole GPU only while BE's
                                                                              units still fit the slack */
        slo_scan sc;
        in.full_allowed = expansion_safe(s, view, &sc, now, 0);
    }
    ds_sizing_action a = ds_sizing_step(z, &in);
    uint32_t from = a.from >= 0 ? step_sms(view, s->lad_low[a.from]) : 0;
    if (a.warn_top)
        ds_log_message(DS_LOG_INFO, "slo_aware: LS misses its attainment target %.4f on the largest tier (%u SMs)",
                       z->cfg.target, from);
    switch (a.kind) {
    case DS_SIZING_START: enter_level(s, view, in.req, STEP_START); break;
    case DS_SIZING_UP: enter_level(s, view, in.req, STEP_UP); break;
    case DS_SIZING_DOWN: enter_level(s, view, in.req, STEP_DOWN); break;
    case DS_SIZING_PROBE_HELD: confirm_probe(s, view, in.req); break;
    case DS_SIZING_TOP_MISSED: s->top_missed = 1; break; /* choose_mode, next: LS on the whole GPU, BE on the
                                                            complement */
    case DS_SIZING_CAP_CHECK:
        ds_log_message(DS_LOG_INFO, "slo_aware: LS misses its target on %u SMs (late share %.4f): checking whether %u "
                       "SMs do as well", from, a.ref_share, step_sms(view, s->lad_low[a.to]));
        enter_level(s, view, in.req, STEP_DOWN);
        break;
    case DS_SIZING_CAP_UP:
        if (a.capped_worse)
            ds_log_message(DS_LOG_INFO, "slo_aware: LS's late share on %u SMs (%.4f) is above %.4f, the larger tier's: "
                           "it grows again", from, a.late / a.n, a.ref_share);
        enter_level(s, view, in.req, STEP_UP);
        break;
    case DS_SIZING_CAPPED:
        if (a.confirm)
            confirm_probe(s, view, in.req);
        ds_log_message(DS_LOG_INFO, "slo_aware: LS capped at %u SMs: late share %.4f there against %.4f on the larger "
                       "tier; BE takes the rest", from, a.late / a.n, a.ref_share);
        break;
    default: break;
    }
}

/* ------------------------------------------------------------------------ */
/* completions and ticks                                                     */

/* LS has no work in flight: BE's gates open, and with gates BE expands at
 * once where its units fit LS's slack. */
static void after_ls(slo_state *s, const ds_policy_view *view, double now)
{
    if (!resume_be(s, view) || !atomic_load_explicit(&s->may_expand, memory_order_relaxed) ||
        !atomic_load(&s->confined) || shares_gpu(s, view) || reserving(s))
        return;
    slo_scan sc;
    if (!expansion_safe(s, view, &sc, now, 1))
        return;
    /* LS's launches must publish `launching` (below) before BE expands: an
     * LS launch that began before track_all was on does not, so BE expands
     * only TRACK_GRACE_US after it was turned on */
    if (!atomic_load(&s->ls_track)) {
        track_all_ls(s, view, 1);
        return;
    }
    if (now < atomic_load(&s->track_since_us) + TRACK_GRACE_US)
        return;
    set_confined(s, view, &sc, 0, 0); /* BE takes the whole GPU until LS's next launch */
    /* An LS launch that read `confined` before the store above did not
     * confine BE. Dekker with the runtime's ds_vctx_state.launching (LS has
     * track_all once BE may share its SMs; both sides sequentially
     * consistent): such a launch is seen here, and BE goes back. */
    for (uint32_t i = 0; i < sc.n; i++) {
        ds_vctx_state st;
        if ((sc.fl[i] & VC_LS) && ds_policy_state(view, sc.vs[i], &st) && (st.launching || in_flight(&st))) {
            scan_all(&sc, s, view);
            set_confined(s, view, &sc, 1, 1);
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

/* Every BE vCtx bound and bound-to-be on the complement: LS launches need
 * not check them. */
static void settle(slo_state *s, const ds_policy_view *view, double now)
{
    if (!atomic_load(&s->unsettled) || !atomic_load(&s->confined) || shares_gpu(s, view) || draining(s, view))
        return;
    uint32_t high = high_tier(s);
    slo_scan sc;
    scan_list(&sc, s, view);
    double unit = 0, window = 0;
    for (uint32_t i = 0; i < sc.n; i++) {
        ds_vctx_state st;
        if (!scan_one(&sc, view, i, high, &st) || (sc.fl[i] & VC_LS))
            continue;
        if (st.pctx != high || st.pending_pctx != high)
            return;
        unit = st.unit_us > unit ? st.unit_us : unit;
        window = st.window_us > window ? st.window_us : window;
    }
    /* what BE queued before its move may run for its window plus one unit */
    atomic_store(&s->left_us, now + window);
    atomic_store(&s->settled_us, now + window + unit);
    atomic_store(&s->unsettled, 0);
    if (atomic_load(&s->ls_track)) /* BE on disjoint SMs: LS's marks would only cost it */
        track_all_ls(s, view, 0);
}

/* BE on the complement keeps a window of CONFINED_UNITS of its units beyond
 * half of be_window_us as its units change (window_confined). */
static void fit_windows(slo_state *s, const ds_policy_view *view)
{
    if (!atomic_load(&s->confined) || shares_gpu(s, view) || atomic_load(&s->moving) || atomic_load(&s->unsettled))
        return;
    uint32_t high = high_tier(s);
    ds_vctx_t vs[DS_POLICY_LIST_MAX];
    uint32_t n = ds_policy_list(view, vs, DS_POLICY_LIST_MAX);
    for (uint32_t i = 0; i < n; i++) {
        ds_vctx_state st;
        if (ds_policy_state(view, vs[i], &st) && !is_ls(&st) && !is_prefill_ls(&st) && st.pending_pctx == high &&
            !window_fits(s, st.window_us, st.unit_us))
            ds_vctx_set_window(vs[i], window_confined(s, st.unit_us));
    }
}

/* What one pass over the LS vCtxs tells choose_mode: whether any is live,
 * the time they served requests since the last tick (the requests each
 * ended or recorded since, times its median latency: measured from what LS
 * reports, so it holds for requests whose work is not tracked, and in
 * virtual time), and the request and late counts of those with an SLO. */
typedef struct ls_tally {
    int any;
    double busy_us;
    uint64_t req, over;
} ls_tally;

static ls_tally tally_ls(slo_state *s, const ds_policy_view *view)
{
    ls_tally t = {0};
    ds_vctx_t vs[DS_POLICY_LIST_MAX];
    uint64_t req[DS_POLICY_LIST_MAX];
    uint32_t n = ds_policy_list(view, vs, DS_POLICY_LIST_MAX), m = 0;
    for (uint32_t i = 0; i < n; i++) {
        ds_vctx_state st;
        if (!ds_policy_state(view, vs[i], &st) || !is_ls(&st))
            continue;
        t.any = 1;
        for (uint32_t j = 0; j < s->busy_n; j++)
            if (s->busy_vs[j] == vs[i] && st.requests >= s->busy_req[j])
                t.busy_us += (double)(st.requests - s->busy_req[j]) * st.request_p50_us;
        if (st.slo_us) {
            t.req += st.requests;
            t.over += st.requests_over_slo;
        }
        vs[m] = vs[i];
        req[m++] = st.requests;
    }
    memcpy(s->busy_vs, vs, m * sizeof vs[0]);
    memcpy(s->busy_req, req, m * sizeof req[0]);
    s->busy_n = m;
    return t;
}

/* LS is on the ladder's largest LOW tier and, of at least TOP_WINDOW of its
 * requests since activation, clearly more than the target allows were late
 * (clearly_over, as a probe fails): that tier does not serve it. (Counted
 * over every request, not the judged ones alone: while BE expands between
 * LS's requests and yields at each, few are judged.) */
static int ls_misses_on_top(slo_state *s, const ls_tally *t)
{
    const ds_sizing *z = &s->sz;
    if (s->top_base == UINT64_MAX) /* LS's window holds another configuration's requests: counted from now */
        s->top_base = t->req, s->top_base_over = t->over;
    uint64_t nreq = t->req - s->top_base, nover = t->over - s->top_base_over;
    if (z->lvl < 0 || z->cfg.nlev == 0 || nreq < TOP_WINDOW)
        return 0;
    uint32_t top = z->cfg.nlev - 1 - (uint32_t)z->cfg.has_full;
    double late_share = 1.0 - atomic_load_explicit(&s->target, memory_order_relaxed);
    return low_tier(s) == s->lad_low[top] &&
           ds_sizing_clearly_over(late_share, (double)nreq, (double)nover, z->cfg.probe_fail_sd);
}

/* Reserve mode or not: on once LS misses its target on the largest tier
 * (size_ls: top_missed), or from LS's busy share (BUSY_TAU_US, RESERVE_ON,
 * RESERVE_OFF); reserve only where BE's units fit half of LS's SLO (as for
 * expanding: BE's running kernels delay LS's on the SMs they share). A change
 * restarts sizing from the ls_sms tier: what the ladder learnt was the other
 * mode's. */
static void choose_mode(slo_state *s, const ds_policy_view *view, double now)
{
    if (atomic_exchange(&s->mode_restart, 0)) {
        s->busy_share = s->busy_sum_us = s->time_sum_us = 0, s->busy_at_us = -1, s->busy_n = 0, s->top_missed = 0;
        s->top_base = UINT64_MAX;
    }
    ls_tally t = tally_ls(s, view);
    double busy = t.busy_us;
    if (s->busy_at_us >= 0 && now > s->busy_at_us) {
        /* both sums decay: a request's time counts whole when it is reported */
        double dt = now - s->busy_at_us, keep = exp(-dt / BUSY_TAU_US);
        s->busy_sum_us = s->busy_sum_us * keep + busy;
        s->time_sum_us = s->time_sum_us * keep + dt;
        double share = s->busy_sum_us / s->time_sum_us;
        s->busy_share = share < 1.0 ? share : 1.0;
    }
    if (now - s->busy_logged_us >= 1e6) {
        s->busy_logged_us = now;
        ds_log_message(DS_LOG_DEBUG, "slo_aware: LS busy %.2f of the time, BE's units %s half its SLO, %s", s->busy_share,
                       atomic_load_explicit(&s->may_expand, memory_order_relaxed) ? "within" : "not (known) within",
                       reserving(s) ? "reserve mode" : "LS on its tier");
    }
    s->busy_at_us = now;
    int on = reserving(s), want = on;
    if (!on && ls_misses_on_top(s, &t))
        s->top_missed = 1;
    if (!t.any || !atomic_load_explicit(&s->may_expand, memory_order_relaxed))
        want = 0, s->top_missed = 0;
    else if (s->top_missed)
        want = 1;
    else if (s->time_sum_us < BUSY_TAU_US / 2) /* too short a look yet (about 0.7 s) */
        return;
    else if (s->busy_share >= RESERVE_ON)
        want = 1;
    else if (s->busy_share < RESERVE_OFF)
        want = 0;
    if (want == on || atomic_load(&s->moving))
        return;
    atomic_store(&s->reserve, want);
    slo_scan sc;
    scan_all(&sc, s, view);
    set_confined(s, view, &sc, 1, 0);
    place_ls(s, view, &sc);
    if (want) /* a gate closed by an earlier yield would hold BE for as long as LS stays busy */
        for (uint32_t i = 0; i < sc.n; i++)
            if (!(sc.fl[i] & (VC_LS | VC_GONE)))
                ds_vctx_gate_open(sc.vs[i]);
    atomic_store(&s->reset, 1);
    ds_log_message(DS_LOG_INFO, "slo_aware: %s (LS serving requests %.0f%% of the time)",
                   want ? "reserve mode: LS urgent on the whole GPU, BE on the complement"
                        : "LS back on its own tier",
                   100.0 * s->busy_share);
}

static void slo_tick(void *st, const ds_policy_view *view, double now_us)
{
    slo_state *s = st;
    choose_mode(s, view, now_us);
    size_ls(s, view, now_us);
    after_ls(s, view, now_us);
    settle(s, view, now_us);
    fit_windows(s, view);
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
