/*
 * slo_aware, the default policy (DetShare sections 4.2 and 4.4). The rules;
 * docs/design.md section 4.8 gives each in full, with the measurements
 * behind its constants.
 *  1. LS runs on a LOW tier at the highest stream priority, BE on the
 *     tier's complement (disjoint SMs), with a window of half of
 *     be_window_us beyond two of its longest units.
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
 * Parameters (ds_policy_param_set): ls_sms, idle_us, be_window_us,
 * gate_interval_us, right_size, target, shrink_requests, dwell_us; a new
 * value applies from the next decision that uses it, and ls_sms, right_size,
 * target or a policy switch restart sizing from the ls_sms tier.
 */

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <detshare/policy.h>

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

/* Requests after a change that are not judged: after a step up they were
 * queued, or already late, before it; after a step down the first one also
 * creates LS's stream on the new tier. */
#define GRACE_UP 4
#define GRACE_DOWN 1
/* Hold before retrying a step down that failed: 2^(failures + this) x
 * shrink_requests, at most 2^MAX_BACKOFF_SHIFT x. */
#define BACKOFF_SHIFT 3
#define MAX_BACKOFF_SHIFT 8
/* BE's unit must fit in this share of LS's slack before BE expands: a request
 * that arrives while the unit runs waits for it (and for the gate to reopen
 * after it), and those requests are LS's tail; the rest covers the error of a
 * p99 taken over at most DS_REQUEST_WINDOW requests. (H200, W1: with the
 * whole slack, BE's GEMMs expanded ~10 times per 1600 requests, LS's p99 on
 * the same 96 SMs rose 10-20% over static's and BE gained nothing.) */
#define SLACK_SHARE 0.5
/* The error budget (see the file's comment) holds this many requests' worth
 * of the target's allowance of late requests, times the late count's
 * dispersion. */
#define BUDGET_REQUESTS 512.0
/* The late count's dispersion (its variance over its mean) is estimated from
 * LS's runs of late requests with DISPERSION_PRIOR runs of one late request
 * assumed before the first, and taken at most as DISPERSION_MAX. */
#define DISPERSION_PRIOR 4.0
#define DISPERSION_MAX 4.0
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
 * largest tier; the clear-miss test (PROBE_FAIL_SD) is what guards against
 * noise (at 16: at least 4 late where 1% are allowed). (H100, decode at 20%
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
/* A step down for the target (a probe, the file's comment) fails as soon as
 * its late count is PROBE_FAIL_SD standard deviations (Poisson) and one
 * request over the target's allowance (1 - target) x n; it holds after
 * PROBE_HOLD x shrink_requests within PROBE_HOLD_SD of it, and fails if it
 * has not held after PROBE_MAX x shrink_requests. */
#define PROBE_FAIL_SD 2.0
#define PROBE_HOLD_SD 1.0
#define PROBE_HOLD 2u
#define PROBE_MAX 4u
/* Overload (the file's comment): the step below is checked once LS has had
 * at least CAP_STAY x shrink_requests judged requests on the largest step it
 * may take and its late count there is clearly over the target's allowance
 * (CAP_ABORT_SD standard deviations and one request); below a capped step,
 * after CAP_DEEPER x shrink_requests. The check stops as soon as its late
 * count is clearly over the reference's (the same test), and holds after
 * CAP_STAY x shrink_requests if it is not. */
#define CAP_STAY 2u
#define CAP_DEEPER 8u
#define CAP_ABORT_SD 2.0

/* Right-sizing state: written by the tick only (the scheduler thread, or the
 * thread calling ds_runtime_poll), reset through `reset`. */
typedef struct sizing {
    int lvl;                                          /* -1: not sizing (the ls_sms tier) */
    uint32_t nlev;                                    /* LOW tiers on the ladder (+1 with the whole GPU) */
    uint32_t low[DS_MAX_PCTX + 1], high[DS_MAX_PCTX + 1];
    int has_full;                                     /* the whole GPU is the ladder's top step */
    double entered_us;                                /* runtime clock at the last change */
    uint64_t base_req, base_over;                     /* LS's counts when judging on this tier began */
    int grace;                                        /* requests not to judge after a change */
    int by_shrink;                                    /* entered by a step down */
    int probing;                                      /* BE still on the larger tier's complement */
    int grown;                                        /* LS has stepped up since sizing began */
    uint32_t fails[DS_MAX_PCTX + 1];                  /* probes of each step that grew back */
    uint64_t retry_req[DS_MAX_PCTX + 1];              /* no step down to it before this many requests
                                                         (a failed step's backoff, or headroom's next window) */
    int warned_top;                                   /* logged that the top step is not enough */
    int cap;          /* overload: highest step LS grows to, as the steps above did not pay (-1: the top) */
    int cap_probe;    /* this step down checks that the step above does not pay (see overload_probe) */
    double ref_share; /* late share of the largest step LS missed its target on, for overload_probe */
    int cap_failed[DS_MAX_PCTX + 1]; /* an overload check of the step failed: not again in this overload */
    double budget;                                    /* late requests LS may still have (the error budget) */
    uint64_t seen_req, seen_over;                     /* LS's counts when the budget was last updated */
    uint64_t start_over, start_runs;                  /* LS's late requests and runs of them when sizing began */
    double dispersion;                                /* of LS's late count since (see late_dispersion) */
} sizing;

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
    sizing sz;
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
    s->sz.lvl = -1;
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

static int is_ls(const ds_vctx_state *st) { return st->cls == DS_CLASS_LATENCY_SENSITIVE; }

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
 * shares SMs with LS (the whole GPU) with gates. */
static void place_be(slo_state *s, const ds_policy_view *view, ds_vctx_t v, double unit_us, int confined, int ls_live,
                     int gates)
{
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
            place_be(s, view, sc->vs[i], sc->unit[i], confined, sc->ls_live, gates);
    if (yield && gates)
        for (uint32_t i = 0; i < sc->n; i++)
            if (sc->fl[i] & VC_YIELD)
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
        place_be(s, view, v, vs.unit_us, atomic_load(&s->confined), sc.ls_live, gates_on(s, view));
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
    if (!ds_policy_state(view, ev->vctx, &me))
        return (ds_decision){.kind = DS_DISPATCH_HERE};
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
/* right-sizing                                                              */

/* The ladder: LOW tiers with a complement, by SM count; the whole GPU on top
 * when `full` (BE's units fit LS's slack, with gates). */
static void build_ladder(sizing *z, const ds_policy_view *view, int full)
{
    z->nlev = 0;
    uint32_t n = ds_view_num_pctx(view);
    for (uint32_t i = 0; i < n && z->nlev < DS_MAX_PCTX; i++) {
        const ds_pctx_info *p = ds_view_pctx(view, i);
        if (!p || p->anchor != DS_ANCHOR_LOW || p->complement < 0)
            continue;
        uint32_t k = z->nlev++;
        while (k > 0 && ds_view_pctx(view, z->low[k - 1])->sm_count > p->sm_count) {
            z->low[k] = z->low[k - 1];
            z->high[k] = z->high[k - 1];
            k--;
        }
        z->low[k] = i;
        z->high[k] = (uint32_t)p->complement;
    }
    z->has_full = full && z->nlev > 0;
    if (z->has_full) {
        z->low[z->nlev] = z->high[z->nlev] = ds_view_full_pctx(view);
        z->nlev++;
    }
}

/* What LS's recorded requests say, summed over the LS vCtxs with an SLO that
 * recorded any: totals, the sliding windows, and the worst window p99 as a
 * share of its SLO. */
typedef struct ls_figures {
    uint64_t req, over;      /* totals */
    uint64_t runs;           /* runs of consecutive late requests, summed */
    double p99_share;        /* max over the vCtxs of window p99 / SLO */
} ls_figures;

static int ls_counts(const ds_policy_view *view, ls_figures *f)
{
    ds_vctx_t vs[DS_POLICY_LIST_MAX];
    uint32_t n = ds_policy_list(view, vs, DS_POLICY_LIST_MAX);
    int any = 0;
    *f = (ls_figures){0};
    for (uint32_t i = 0; i < n; i++) {
        ds_vctx_state st;
        if (!ds_policy_state(view, vs[i], &st) || !is_ls(&st) || !st.slo_us || !st.requests)
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

/* The step is judged from LS's counts now on (see size_ls). */
static void judge_from(sizing *z, uint64_t req, uint64_t over)
{
    z->base_req = req;
    z->base_over = over;
}

/* The budget's most, in late requests (see the file's comment). */
static double budget_max(const sizing *z, double target) { return (1.0 - target) * BUDGET_REQUESTS * z->dispersion; }

/* The dispersion of LS's late count (variance over mean) from the runs its
 * late requests came in since sizing began. Taken as a two-state Markov
 * chain (a late request follows a late one with probability q, an on-time
 * one with probability p, rare), the lag-k correlation is (q - p)^k, about
 * q^k, so a count over n requests has about (1 + q) / (1 - q) times the
 * variance of independent ones (Klotz, "Statistical inference in Bernoulli
 * trials with dependence", Ann. Statist. 1(2), 1973), which is 2L - 1 with
 * L = 1 / (1 - q) the mean run length. L is late requests
 * over runs, with DISPERSION_PRIOR singleton runs before the first; the result
 * lies in [1, DISPERSION_MAX]. */
static double late_dispersion(const sizing *z, const ls_figures *f)
{
    double late = f->over >= z->start_over ? (double)(f->over - z->start_over) : 0.0;
    double runs = f->runs >= z->start_runs ? (double)(f->runs - z->start_runs) : 0.0;
    double d = 2.0 * (late + DISPERSION_PRIOR) / (runs + DISPERSION_PRIOR) - 1.0;
    return d < 1.0 ? 1.0 : d > DISPERSION_MAX ? DISPERSION_MAX : d;
}

/* Requests not judged (see size_ls) leave the budget as it is. */
static void budget_skip(sizing *z, uint64_t req, uint64_t over)
{
    z->seen_req = req;
    z->seen_over = over;
}

/* Adds the requests LS served since the last update to the budget: each
 * earns 1 - target, each late one costs 1. */
static void budget_update(sizing *z, uint64_t req, uint64_t over, double target)
{
    double top = budget_max(z, target);
    if (req >= z->seen_req && over >= z->seen_over) /* else an LS vCtx went away: its counts left the sums */
        z->budget += (1.0 - target) * (double)(req - z->seen_req) - (double)(over - z->seen_over);
    z->budget = z->budget > top ? top : z->budget < -top ? -top : z->budget;
    z->seen_req = req;
    z->seen_over = over;
}

enum { STEP_UP, STEP_DOWN, STEP_START };

/* Headroom for step `to` below the current one: LS's window p99 (as a share
 * of the SLO) scaled to its SMs stays within the SLO, with latency taken to
 * grow as the square root of the SM ratio (between a memory-bound kernel,
 * which barely slows on fewer SMs, and a compute-bound one, which slows in
 * proportion). */
static int headroom(slo_state *s, const ds_policy_view *view, const sizing *z, int to, double p99_share)
{
    if (reserving(s)) /* LS keeps the whole GPU: only BE's share changes */
        return p99_share <= 1.0;
    const ds_pctx_info *cur = ds_view_pctx(view, z->low[z->lvl]), *next = ds_view_pctx(view, z->low[to]);
    return !cur || !next || p99_share * sqrt((double)cur->sm_count / next->sm_count) <= 1.0;
}

/* Moves LS to step `lvl` of the ladder. A step up moves BE first: BE is
 * placed on the new (smaller) complement and yields where it is bound
 * elsewhere, and LS stays on its tier until BE is off the SMs it gains
 * (move_done; on the whole GPU, until BE has nothing in flight), so that no
 * BE kernel starts on LS's SMs while LS has work in flight. A step down
 * frees SMs: LS moves at once. */
static void enter_level(slo_state *s, const ds_policy_view *view, int lvl, double now, uint64_t req, uint64_t over,
                        int kind)
{
    sizing *z = &s->sz;
    uint32_t old_low = low_tier(s), old_high = high_tier(s), full = ds_view_full_pctx(view);
    int by_shrink = kind == STEP_DOWN;
    z->lvl = lvl;
    z->entered_us = now;
    judge_from(z, req, over);
    /* after a step up the first requests were queued, or late, before it;
     * after a step down the first one also creates LS's stream there */
    z->grace = by_shrink ? GRACE_DOWN : GRACE_UP;
    z->by_shrink = by_shrink;
    /* A step down is a probe: BE keeps the larger tier's complement until
     * the smaller tier has held, so that growing back moves no BE work (BE's
     * running kernels would delay LS on the SMs it gets back). */
    /* In reserve mode LS stays on the whole GPU: a step moves only BE, which
     * shares SMs with LS under stream priority and so need not yield first;
     * a step down is judged with BE on its new complement (no probe). */
    int reserve = reserving(s) && z->low[lvl] != full;
    z->probing = by_shrink && z->high[lvl + 1] != full && !reserve;
    uint32_t high = z->high[lvl + (z->probing ? 1 : 0)];
    int confined = atomic_load(&s->confined) || shares_gpu(s, view);
    /* expanded BE is gated before every kernel and yields at LS's next launch */
    int moving = kind == STEP_UP && confined && z->low[lvl] != old_low && high != old_high && !reserve;
    atomic_store(&s->moving, moving);
    if (moving) /* toward the whole GPU BE stays put, gated, until it has nothing in flight */
        atomic_store(&s->tiers, tiers_pack(old_low, high == full ? old_high : high));
    else
        atomic_store(&s->tiers, tiers_pack(z->low[lvl], high));
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
                   step_sms(view, z->low[lvl]), what[kind], (unsigned long long)req,
                   moving ? "; BE moves off first" : "", reserve ? "; reserve mode: LS on the whole GPU" : "");
}

/* A step up's move is done once BE is off the SMs LS gains: bound on the new
 * complement (a tick saw it there: settle) for longer than its window (it
 * rebinds at its next launch, which its window lets through only once at
 * most a window of work is queued on the old binding); or with nothing in
 * flight. */
static int move_done(slo_state *s, const ds_policy_view *view, double now)
{
    const sizing *z = &s->sz;
    if (z->high[z->lvl] != ds_view_full_pctx(view) && !atomic_load(&s->unsettled) &&
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
static void finish_move(slo_state *s, const ds_policy_view *view, double now, uint64_t req, uint64_t over)
{
    sizing *z = &s->sz;
    atomic_store(&s->tiers, tiers_pack(z->low[z->lvl], z->high[z->lvl]));
    slo_scan sc;
    scan_all(&sc, s, view);
    int confined = atomic_load(&s->confined) || shares_gpu(s, view);
    set_confined(s, view, &sc, confined, confined);
    place_ls(s, view, &sc);
    /* the move ends after BE's placement above, which keeps the window it
     * rebound with: the tick that sees it settled times its leftovers by that
     * window, and fit_windows widens it after */
    atomic_store(&s->moving, 0);
    z->entered_us = now;
    judge_from(z, req, over);
    z->grace = GRACE_UP;
    ds_log_message(DS_LOG_DEBUG, "slo_aware: LS on its new tier (%u SMs), BE off it", step_sms(view, z->low[z->lvl]));
}

/* The current step did not hold: LS steps up. A step down for the target
 * that had not held for long (by_shrink) backs off before LS steps down to
 * it again, growth from a step held longer does not; an overload check (`overload`)
 * is not made again until the overload ends. For the target the larger step
 * starts with a full budget: the lates that spent it were the smaller
 * step's (half back, they grew LS on past steps that met the target: H200,
 * W1 at 30% load, 9a5ce4e, 48 -> 64 -> 80 -> 96 SMs within 800 requests);
 * in an overload, with at least half. */
static void step_up(slo_state *s, const ds_policy_view *view, double now, uint64_t req, uint64_t over, int overload)
{
    sizing *z = &s->sz;
    z->grown = 1;
    if (overload) {
        z->cap_failed[z->lvl] = 1;
    } else if (z->by_shrink) { /* a step down that did not hold for long; else the load rose */
        uint32_t fl = ++z->fails[z->lvl];
        uint32_t shift = fl + BACKOFF_SHIFT < MAX_BACKOFF_SHIFT ? fl + BACKOFF_SHIFT : MAX_BACKOFF_SHIFT;
        z->retry_req[z->lvl] = req + ((uint64_t)atomic_load(&s->shrink_requests) << shift);
    }
    double top_budget = budget_max(z, atomic_load_explicit(&s->target, memory_order_relaxed));
    if (!overload)
        z->budget = top_budget;
    else if (z->budget < top_budget / 2)
        z->budget = top_budget / 2;
    enter_level(s, view, z->lvl + 1, now, req, over, STEP_UP);
}

/* A probe (a step down with BE still on the larger step's complement)
 * holds: BE gets the SMs it freed. */
static void confirm_probe(slo_state *s, const ds_policy_view *view, uint64_t req)
{
    sizing *z = &s->sz;
    z->probing = 0;
    atomic_store(&s->tiers, tiers_pack(z->low[z->lvl], z->high[z->lvl]));
    slo_scan sc;
    scan_all(&sc, s, view);
    set_confined(s, view, &sc, atomic_load(&s->confined), 0);
    ds_log_message(DS_LOG_INFO, "slo_aware: LS tier %u SMs held (probe, %llu requests): BE takes its complement",
                   step_sms(view, z->low[z->lvl]), (unsigned long long)req);
}

/* Late requests out of n that count as no more than a late share `ref`:
 * ref's count plus `sd` of its standard deviations (Poisson; at least 1). */
static double cap_allowed(double ref, double n, double sd)
{
    double m = ref * n;
    return m + sd * sqrt(m > 1 ? m : 1);
}

/* `late` of n is clearly over a late share: `sd` standard deviations and
 * one request over its count. */
static int clearly_over(double share, double n, double late, double sd)
{
    return late > cap_allowed(share, n, sd) + 1.0;
}

/* `late` of n is clearly over the reference share (ref_share). */
static int clearly_worse(const sizing *z, double n, double late)
{
    return clearly_over(z->ref_share, n, late, CAP_ABORT_SD);
}

/* No overload (again): no cap, no check under way, every step checkable. */
static void overload_end(sizing *z)
{
    z->cap = -1;
    z->cap_probe = 0;
    z->warned_top = 0;
    memset(z->cap_failed, 0, sizeof z->cap_failed);
}

/* Overload: LS misses its target on the largest step it may take (at_top:
 * the ladder's top; else the cap) with `late` of its n judged requests over
 * the SLO. Once that is a clear miss (clearly_over the target's allowance
 * after CAP_STAY x shrink_requests on the top, CAP_DEEPER x below a cap),
 * the step below is checked (overload_probe). On a capped step that does clearly
 * worse than the reference the cap goes and LS grows. */
static void overload(slo_state *s, const ds_policy_view *view, double now, uint64_t req, uint64_t over, double n,
                     double late, int at_top)
{
    sizing *z = &s->sz;
    double late_share = 1.0 - atomic_load_explicit(&s->target, memory_order_relaxed);
    uint32_t need = atomic_load_explicit(&s->shrink_requests, memory_order_relaxed);
    uint32_t sms = step_sms(view, z->low[z->lvl]);
    if (at_top && !z->warned_top) {
        ds_log_message(DS_LOG_INFO, "slo_aware: LS misses its attainment target %.4f on the largest tier (%u SMs)",
                       1.0 - late_share, sms);
        z->warned_top = 1;
    }
    if (!at_top && n >= (double)CAP_STAY * need && clearly_worse(z, n, late)) {
        ds_log_message(DS_LOG_INFO, "slo_aware: LS's late share on %u SMs (%.4f) is above %.4f, the larger tier's: "
                       "it grows again", sms, late / n, z->ref_share);
        z->cap = -1;
        step_up(s, view, now, req, over, 1); /* shown worse: not checked again in this overload */
        return;
    }
    double stay = (double)(at_top ? CAP_STAY : CAP_DEEPER) * need;
    if (z->lvl <= 0 || n < stay || !clearly_over(late_share, n, late, CAP_ABORT_SD) ||
        z->high[z->lvl] == ds_view_full_pctx(view) || z->cap_failed[z->lvl - 1])
        return;
    /* the reference: the top step's share, or a capped step's where lower */
    if (at_top || late / n < z->ref_share)
        z->ref_share = late / n;
    ds_log_message(DS_LOG_INFO, "slo_aware: LS misses its target on %u SMs (late share %.4f): checking whether %u "
                   "SMs do as well", sms, z->ref_share, step_sms(view, z->low[z->lvl - 1]));
    enter_level(s, view, z->lvl - 1, now, req, over, STEP_DOWN);
    z->cap_probe = 1;
}

/* The step below an overloaded one (see overload), judged against the
 * larger step's late share (ref_share) instead of the target: it fails as
 * soon as its late count is clearly over the reference's (clearly_worse),
 * and LS grows back; the step is not checked again in this overload
 * (step_up). Else, after CAP_STAY x shrink_requests, LS stays: the step is
 * the cap, and BE gets the SMs it freed. */
static void overload_probe(slo_state *s, const ds_policy_view *view, double now, uint64_t req, uint64_t over,
                           double n, double late)
{
    sizing *z = &s->sz;
    double stay = (double)CAP_STAY * atomic_load_explicit(&s->shrink_requests, memory_order_relaxed);
    if (clearly_worse(z, n, late)) {
        z->cap_probe = 0;
        step_up(s, view, now, req, over, 1);
        return;
    }
    if (n < stay)
        return;
    z->cap_probe = 0;
    z->cap = z->lvl;
    if (z->probing)
        confirm_probe(s, view, req);
    z->entered_us = now;
    judge_from(z, req, over);
    ds_log_message(DS_LOG_INFO, "slo_aware: LS capped at %u SMs: late share %.4f there against %.4f on the larger "
                   "tier; BE takes the rest", step_sms(view, z->low[z->lvl]), late / n, z->ref_share);
}

/* One tick of right-sizing: see the file's comment. */
static void size_ls(slo_state *s, const ds_policy_view *view, double now)
{
    sizing *z = &s->sz;
    if (atomic_exchange(&s->reset, 0) && z->lvl >= 0) {
        z->lvl = -1;
        atomic_store(&s->moving, 0);
        atomic_store(&s->tiers, atomic_load(&s->fixed_tiers));
    }
    if (!atomic_load_explicit(&s->right_size, memory_order_relaxed))
        return;
    ls_figures f;
    if (!ls_counts(view, &f))
        return;
    uint64_t req = f.req, over = f.over;
    double target = atomic_load_explicit(&s->target, memory_order_relaxed), late_share = 1.0 - target;
    if (z->lvl < 0) { /* first requests: sizing starts from the ls_sms tier, with a full budget */
        slo_scan sc;
        build_ladder(z, view, gates_on(s, view) && expansion_safe(s, view, &sc, now, 0));
        memset(z->fails, 0, sizeof z->fails);
        memset(z->retry_req, 0, sizeof z->retry_req);
        z->grown = 0;
        overload_end(z);
        uint32_t splits = z->nlev - (uint32_t)z->has_full, start = 0;
        if (splits == 0)
            return;
        while (start + 1 < splits && z->low[start] != tiers_low(atomic_load(&s->fixed_tiers)))
            start++;
        z->start_over = over;
        z->start_runs = f.runs;
        z->dispersion = 1.0;
        z->budget = budget_max(z, target);
        budget_skip(z, req, over);
        enter_level(s, view, (int)start, now, req, over, STEP_START);
        return;
    }
    z->dispersion = late_dispersion(z, &f); /* from every request, judged or not */
    if (atomic_load(&s->moving)) { /* a step up: LS follows once BE is off its new SMs; nothing is judged meanwhile */
        if (move_done(s, view, now))
            finish_move(s, view, now, req, over);
        else
            judge_from(z, req, over);
        budget_skip(z, req, over);
        return;
    }
    if (req < z->base_req) /* an LS vCtx went away: its counts left the sums */
        judge_from(z, req, over);
    /* BE on its way to the complement (at the start, after a step up): its
     * work queued before, up to its window, may still hold LS's SMs. LS's
     * requests meanwhile say nothing about the tier: not judged. */
    if (atomic_load(&s->confined) && !shares_gpu(s, view) &&
        (atomic_load(&s->unsettled) || now < atomic_load(&s->settled_us))) {
        judge_from(z, req, over);
        budget_skip(z, req, over);
        return;
    }
    if (z->grace) {
        if (req - z->base_req >= (uint64_t)z->grace) {
            z->grace = 0;
            judge_from(z, req, over);
        }
        budget_skip(z, req, over);
        return;
    }
    budget_update(z, req, over, target); /* the judged requests */
    /* the requests judged on this tier: n, `late` of them over the SLO */
    double n = (double)(req - z->base_req), late = (double)(over - z->base_over);
    uint32_t need = atomic_load_explicit(&s->shrink_requests, memory_order_relaxed);
    if (z->cap_probe) { /* overload: judged against the step above, not the target */
        overload_probe(s, view, now, req, over, n, late);
        return;
    }
    /* Grow: the budget is overdrawn and this tier had a part in it (a late
     * judged request), or a probe (a step down not yet confirmed) is clearly
     * over the target's allowance, or has not held after PROBE_MAX x
     * shrink_requests; it holds after PROBE_HOLD x shrink_requests within
     * PROBE_HOLD_SD of the allowance. */
    double top_budget = budget_max(z, target);
    int probe_failed = z->probing && (clearly_over(late_share, n, late, PROBE_FAIL_SD) ||
                                      (n >= (double)PROBE_MAX * need &&
                                       late > cap_allowed(late_share, n, PROBE_HOLD_SD)));
    if (probe_failed || (z->budget < 0 && late >= 1)) {
        int top = (int)z->nlev - 1;
        if (z->has_full && z->lvl == top - 1) { /* the whole GPU only while BE's units still fit the slack */
            slo_scan sc;
            if (!expansion_safe(s, view, &sc, now, 0))
                top--;
        }
        if (z->lvl >= top && !reserving(s) && z->low[z->lvl] != ds_view_full_pctx(view) &&
            atomic_load_explicit(&s->may_expand, memory_order_relaxed)) {
            s->top_missed = 1; /* choose_mode, next: LS on the whole GPU, BE on the complement */
            return;
        }
        if (z->lvl >= top || z->lvl == z->cap) {
            overload(s, view, now, req, over, n, late, z->lvl >= top);
            return;
        }
        step_up(s, view, now, req, over, 0);
        return;
    }
    if (z->budget >= top_budget && (z->cap >= 0 || z->warned_top)) /* LS meets its target again: the load fell */
        overload_end(z);
    if (z->probing && n >= (double)PROBE_HOLD * need && late <= cap_allowed(late_share, n, PROBE_HOLD_SD)) {
        confirm_probe(s, view, req); /* the step down holds */
        return;
    }
    if (z->by_shrink && n >= 4.0 * need) { /* and has held for long */
        z->fails[z->lvl] = 0;
        z->by_shrink = 0;
    }
    /* Shrink: a full budget (no late request for a while), a stay of
     * shrink_requests and dwell_us, and no recent failure of the step below;
     * on a tier entered by a step down, a window of requests too: the p99
     * below is then the tier's own, not the larger tier's before it */
    double stay = z->by_shrink && need < DS_REQUEST_WINDOW ? DS_REQUEST_WINDOW : need;
    if (z->lvl <= 0 || z->probing || n < stay || z->budget < top_budget ||
        now - z->entered_us < atomic_load(&s->dwell_us) || req < z->retry_req[z->lvl - 1])
        return;
    if (!headroom(s, view, z, z->lvl - 1, f.p99_share)) {
        z->retry_req[z->lvl - 1] = req + DS_REQUEST_WINDOW; /* judged again on a new window */
        return;
    }
    /* The descent from the first tier (until LS first steps up; see the
     * top of this file) goes past several tiers at once, to the smallest the
     * headroom allows: ls_sms is a cautious guess. The probe catches a jump
     * too far (it fails within about a hundred requests), and from then on
     * LS steps down one tier at a time. */
    int to = z->lvl - 1;
    while (!z->grown && to > 0 && req >= z->retry_req[to - 1] && headroom(s, view, z, to - 1, f.p99_share))
        to--;
    enter_level(s, view, to, now, req, over, STEP_DOWN);
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
        if (ds_policy_state(view, vs[i], &st) && !is_ls(&st) && st.pending_pctx == high &&
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
    const sizing *z = &s->sz;
    if (s->top_base == UINT64_MAX) /* LS's window holds another configuration's requests: counted from now */
        s->top_base = t->req, s->top_base_over = t->over;
    uint64_t nreq = t->req - s->top_base, nover = t->over - s->top_base_over;
    if (z->lvl < 0 || z->nlev == 0 || nreq < TOP_WINDOW)
        return 0;
    uint32_t top = z->nlev - 1 - (uint32_t)z->has_full;
    double late_share = 1.0 - atomic_load_explicit(&s->target, memory_order_relaxed);
    return low_tier(s) == z->low[top] && clearly_over(late_share, (double)nreq, (double)nover, PROBE_FAIL_SD);
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
