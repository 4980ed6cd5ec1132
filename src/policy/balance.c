/*
 * balance: places two throughput (training-like) tenants by measurement.
 *
 * Two kernels that each fill the GPU take turns on it whatever the stream
 * setup (shared, priority and temporal all give a sum of normalized
 * throughputs near 1; docs/benchmarks.md, W2). Disjoint SM sets let them overlap, and
 * the overlap pays when their bottlenecks differ: a memory-bound tenant keeps
 * most of its speed on a fraction of the SMs, which a compute-bound tenant
 * uses at about its SM share. Which split pays, and whether any does, depends
 * on the kernels, so the policy measures instead of guessing, as Gandiva's
 * introspective packing does for whole jobs (Xiao et al., OSDI'18: pack,
 * measure, keep the packing only if it raises throughput):
 *
 *   1. each tenant alone on the whole GPU (the other held at its next launch),
 *   2. both on the whole GPU (shared),
 *   3. each complementary pair of pool tiers (LOW + its HIGH complement), both
 *      ways round,
 *
 * once both have submitted BAL_MIN_UNITS units (so that start-up, such as
 * a tenant's first cuBLAS call, is not measured as its speed). Units are
 * kernels + sections + graph launches. A candidate settles for BAL_SETTLE_US
 * or the work predicted in flight when it was entered, whichever is longer
 * (the previous placement's queued work drains where it was queued), then
 * each tenant's units are measured in one of two ways, chosen once per round
 * from the alone candidates:
 *  - short units (both tenants alone submit at least BAL_SHORT_UNITS in
 *    BAL_MEASURE_US): units submitted over a span of BAL_MEASURE_US, in every
 *    candidate;
 *  - long units (a training step that is one graph of 5-150 ms, synchronized
 *    after each): timed from the second change of the tenant's count after
 *    the settle (the first may still be a unit of the previous placement
 *    finishing; the unit submitted at the second runs wholly in this one) to
 *    its last change, units submitted in between over that time, until every
 *    tenant not held has BAL_MEASURE_UNITS units timed over at least
 *    BAL_MEASURE_US, or for BAL_MAX_MEASURE_US (a tenant still without two
 *    changes then gets units over span, about 0).
 * The choice is per pair, not per candidate: a candidate that slows a
 * short-unit tenant (a tenant on 16 SMs) must not stretch into a long
 * measurement, whose learned kernel times would then throttle that tenant
 * through its window in the next candidate (measured on the simulator: the
 * best split then read 1.5 instead of 1.8). A whole round takes about the
 * number of candidates (3 + 2 x the LOW tiers: 9 on the default pool) times
 * (settle + max(BAL_MEASURE_US, BAL_MEASURE_UNITS of the slower tenant's
 * units there)): a quarter of a second for kernels of a millisecond, a few
 * seconds for training steps of tens of milliseconds.
 * A tenant's normalized throughput in a placement is its unit rate
 * there over its rate alone; the placement with the largest sum is kept, a
 * split only if it beats shared by BAL_MARGIN (noise must not buy a split).
 * The choice is logged at INFO and measured again after period_us (a
 * parameter, default 5 s) or when the set of vCtxs changes.
 *
 * Unit rate is a throughput only while submission follows the device: the
 * policy gives every vCtx a window of be_window_us (a parameter), so a tenant
 * that queues ahead is throttled to what completes, and a training loop that
 * waits for its steps already is. Every vCtx is treated as a throughput
 * tenant, whatever its class; with one vCtx, or more than two, every vCtx
 * runs on the whole GPU (shared) and nothing is measured. Launch
 * configurations are never touched (docs/design.md, invariant 1): only bindings.
 *
 * Threads: on_tick (scheduler thread) does all the measuring and placing;
 * on_launch reads one atomic (who is held); create/destroy/activate bump a
 * generation that makes the next tick start over.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <detshare/policy.h>

/* Most vCtxs one decision looks at. */

#define BAL_SETTLE_US 5000.0
#define BAL_MEASURE_US 20000.0
#define BAL_SHORT_UNITS 16           /* this many alone in BAL_MEASURE_US: short units, counted over a span */
#define BAL_MEASURE_UNITS 6          /* else: units timed per tenant and candidate */
#define BAL_MAX_MEASURE_US 3e6       /* a candidate ends after this whatever was timed */
#define BAL_MARGIN 1.05
#define BAL_MIN_UNITS 4 /* units each tenant submits before the first round starts */
#define BAL_HOLD_US 200

/* Candidates (index into balance.cand), and the two states that are not one */
enum { BAL_ALONE_A = 0, BAL_ALONE_B = 1, BAL_SHARED = 2, BAL_FIRST_SPLIT = 3 };
enum { BAL_RUNNING = -1 /* the choice runs */, BAL_WAITING = -2 /* for both to be active */ };
#define BAL_MAX_CAND (BAL_FIRST_SPLIT + 2 * DS_MAX_PCTX)

typedef struct bal_cand {
    uint32_t pctx[2]; /* where a and b run */
} bal_cand;

typedef struct balance {
    _Atomic unsigned generation; /* bumped by create/destroy/activate */
    _Atomic(ds_vctx_t) held;     /* held at its next launch, or NULL */
    _Atomic uint32_t window_us;  /* every vCtx's window (be_window_us) */
    _Atomic double period_us;    /* period_us: a choice is measured again after this */
    /* scheduler thread only: */
    bal_cand cand[BAL_MAX_CAND];
    uint32_t num_cand;
    unsigned seen_generation;
    ds_vctx_t v[2];
    int phase;            /* candidate being measured, BAL_RUNNING or BAL_WAITING */
    double phase_start_us, settle_us, measure_start_us, chosen_at_us;
    uint64_t units0[2];   /* count at the measurement's start (BAL_WAITING: at the wait's) */
    uint64_t seen[2];     /* count at the previous tick */
    unsigned changes[2];  /* changes of its count seen in the measurement */
    uint64_t first_u[2], last_u[2]; /* count at its first and last change in the measurement */
    double first_t[2], last_t[2];   /* when (first_t < 0: no change yet) */
    double rate[BAL_MAX_CAND][2]; /* units per second */
    int timed[BAL_MAX_CAND][2];   /* the rate is from two changes or more */
    int long_units;               /* from the alone rates: time units between changes in every candidate */
} balance;

enum { P_BE_WINDOW_US, P_PERIOD_US };

static const ds_policy_param bal_params[] = {
    [P_BE_WINDOW_US] = {.name = "be_window_us", .help = "window (us) of every vCtx, so that submission follows the "
                                                        "device",
                        .def = 2000, .min = 1, .max = 1e9, .integer = 1},
    [P_PERIOD_US] = {.name = "period_us", .help = "a choice is measured again after this long (us); a round of "
                                                  "measuring takes 0.2 s to a few s, depending on the units' length",
                     .def = 5e6, .min = 1e5, .max = 1e12},
};

static ds_status bal_init(void *user, ds_runtime_t rt, void **state)
{
    (void)user;
    (void)rt;
    balance *b = calloc(1, sizeof *b);
    if (!b)
        return DS_ERR_OUT_OF_MEMORY;
    atomic_init(&b->window_us, (uint32_t)bal_params[P_BE_WINDOW_US].def);
    atomic_init(&b->period_us, bal_params[P_PERIOD_US].def);
    b->phase = BAL_RUNNING;
    *state = b;
    return DS_SUCCESS;
}

static void bal_fini(void *state) { free(state); }

static void bal_param(void *st, const ds_policy_view *view, uint32_t index, double value)
{
    (void)view;
    balance *b = st;
    if (index == P_BE_WINDOW_US)
        atomic_store(&b->window_us, (uint32_t)value);
    else if (index == P_PERIOD_US)
        atomic_store(&b->period_us, value);
}

/* The candidates: the whole GPU for ALONE_* and SHARED, then every LOW tier
 * with its complement, both ways round. */
static void candidates(balance *b, const ds_policy_view *view)
{
    uint32_t full = ds_view_full_pctx(view);
    for (int c = BAL_ALONE_A; c < BAL_FIRST_SPLIT; c++)
        b->cand[c] = (bal_cand){{full, full}};
    uint32_t n = BAL_FIRST_SPLIT, np = ds_view_num_pctx(view);
    for (uint32_t i = 0; i < np && n + 2 <= BAL_MAX_CAND; i++) {
        const ds_pctx_info *p = ds_view_pctx(view, i);
        if (!p || p->anchor != DS_ANCHOR_LOW || p->complement < 0)
            continue;
        uint32_t h = (uint32_t)p->complement;
        b->cand[n++] = (bal_cand){{i, h}};
        b->cand[n++] = (bal_cand){{h, i}};
    }
    b->num_cand = n;
}

static void restart(void *st)
{
    balance *b = st;
    atomic_fetch_add(&b->generation, 1);
}

static void place(balance *b, ds_vctx_t v, uint32_t pctx)
{
    ds_vctx_place(v, pctx, 0, atomic_load_explicit(&b->window_us, memory_order_relaxed));
}

static void place_full(void *st, const ds_policy_view *view, ds_vctx_t v) { place(st, v, ds_view_full_pctx(view)); }

static void bal_activate(void *st, const ds_policy_view *view)
{
    ds_policy_for_each(view, place_full, st);
    restart(st);
}

static void bal_create(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    place_full(st, view, v);
    restart(st);
}

static void bal_destroy(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    (void)view;
    balance *b = st;
    ds_vctx_t x = v;
    atomic_compare_exchange_strong(&b->held, &x, NULL);
    restart(st);
}

static ds_decision bal_launch(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    (void)view;
    balance *b = st;
    if (atomic_load_explicit(&b->held, memory_order_acquire) == ev->vctx)
        return (ds_decision){.kind = DS_DISPATCH_HOLD, .hold_us = BAL_HOLD_US};
    return (ds_decision){.kind = DS_DISPATCH_HERE};
}

/* Units (kernels, sections, graph segments) the vCtx submitted so far; 0 if it is gone. */
static int units(const ds_policy_view *view, ds_vctx_t v, uint64_t *u)
{
    ds_vctx_state vs;
    if (!ds_policy_state(view, v, &vs)) {
        *u = 0;
        return 0;
    }
    *u = vs.launches + vs.sections + vs.graph_units;
    return 1;
}

static const char *name_of(ds_vctx_t v)
{
    const char *name = "?";
    ds_vctx_get_name(v, &name);
    return name;
}

/* Places a and b as candidate c wants (holding one of them for ALONE_*). The
 * work they have in flight still runs where it was queued, possibly on the
 * SMs the other one gets now: the candidate settles for that long (its
 * prediction, at least BAL_SETTLE_US, at most BAL_MAX_MEASURE_US). */
static void enter(balance *b, const ds_policy_view *view, int c, double now)
{
    double drain = BAL_SETTLE_US;
    for (int i = 0; i < 2; i++) {
        ds_vctx_state vs;
        if (ds_policy_state(view, b->v[i], &vs) && vs.inflight_us > drain)
            drain = vs.inflight_us;
        place(b, b->v[i], b->cand[c].pctx[i]);
    }
    ds_vctx_t h = c == BAL_ALONE_A ? b->v[1] : c == BAL_ALONE_B ? b->v[0] : NULL;
    atomic_store_explicit(&b->held, h, memory_order_release);
    b->phase = c;
    b->phase_start_us = now;
    b->settle_us = drain < BAL_MAX_MEASURE_US ? drain : BAL_MAX_MEASURE_US;
    b->measure_start_us = -1;
}

static double sum_norm(const balance *b, int c)
{
    return b->rate[c][0] / b->rate[BAL_ALONE_A][0] + b->rate[c][1] / b->rate[BAL_ALONE_B][1];
}

static void choose(balance *b, const ds_policy_view *view, double now)
{
    int best = BAL_SHARED;
    if (b->timed[BAL_ALONE_A][0] && b->timed[BAL_ALONE_B][1] && b->rate[BAL_ALONE_A][0] > 0 &&
        b->rate[BAL_ALONE_B][1] > 0) {
        double shared = sum_norm(b, BAL_SHARED), top = shared * BAL_MARGIN;
        char splits[40 * BAL_MAX_CAND] = "";
        size_t len = 0;
        for (uint32_t c = BAL_FIRST_SPLIT; c < b->num_cand; c++) {
            double x = sum_norm(b, (int)c);
            if (x > top) {
                top = x;
                best = (int)c;
            }
            int w = snprintf(splits + len, sizeof splits - len, "%s%u+%u %.2f", len ? ", " : "",
                             ds_view_pctx(view, b->cand[c].pctx[0])->sm_count,
                             ds_view_pctx(view, b->cand[c].pctx[1])->sm_count, x);
            if (w > 0 && (size_t)w < sizeof splits - len)
                len += (size_t)w;
        }
        const char *na = name_of(b->v[0]), *nb = name_of(b->v[1]);
        ds_log_message(DS_LOG_INFO,
                       "balance: '%s' on pCtx %u (%u SMs), '%s' on pCtx %u (%u SMs): measured sum of normalized "
                       "throughputs %.2f (shared %.2f; SMs of '%s'+'%s': %s)",
                       na, b->cand[best].pctx[0], ds_view_pctx(view, b->cand[best].pctx[0])->sm_count, nb,
                       b->cand[best].pctx[1], ds_view_pctx(view, b->cand[best].pctx[1])->sm_count,
                       sum_norm(b, best), shared, na, nb, splits);
    } else {
        ds_log_message(DS_LOG_INFO,
                       "balance: '%s' or '%s' submitted too little alone to measure: both on the whole GPU",
                       name_of(b->v[0]), name_of(b->v[1]));
    }
    enter(b, view, best, now);
    b->phase = BAL_RUNNING;
    b->chosen_at_us = now;
}

static void bal_tick(void *st, const ds_policy_view *view, double now)
{
    balance *b = st;
    unsigned g = atomic_load(&b->generation);
    if (g != b->seen_generation) {
        b->seen_generation = g;
        ds_vctx_t vs[3];
        uint32_t n = ds_view_vctxs(view, vs, 3);
        atomic_store(&b->held, NULL);
        b->v[0] = b->v[1] = NULL;
        b->phase = BAL_RUNNING;
        if (n != 2)
            return; /* everyone stays on the whole GPU (create/activate placed them) */
        b->v[0] = vs[0];
        b->v[1] = vs[1];
        candidates(b, view);
        for (int i = 0; i < 2; i++)
            units(view, b->v[i], &b->units0[i]);
        b->phase = BAL_WAITING;
        return;
    }
    if (!b->v[0])
        return;
    uint64_t u[2];
    if (!units(view, b->v[0], &u[0]) || !units(view, b->v[1], &u[1]))
        return; /* being destroyed: its on_vctx_destroy has bumped the generation */
    if (b->phase == BAL_WAITING) {
        if (u[0] - b->units0[0] >= BAL_MIN_UNITS && u[1] - b->units0[1] >= BAL_MIN_UNITS)
            enter(b, view, BAL_ALONE_A, now);
        return;
    }
    if (b->phase == BAL_RUNNING) {
        if (now - b->chosen_at_us >= atomic_load_explicit(&b->period_us, memory_order_relaxed))
            enter(b, view, BAL_ALONE_A, now);
        return;
    }
    if (b->measure_start_us < 0) {
        if (now - b->phase_start_us < b->settle_us)
            return;
        b->measure_start_us = now;
        for (int i = 0; i < 2; i++) {
            b->units0[i] = b->seen[i] = u[i];
            b->first_t[i] = b->last_t[i] = -1;
            b->changes[i] = 0;
        }
        return;
    }
    /* many: short units, counted over the span. Past the alone candidates it is
     * what they showed, whatever this placement does to the tenants. */
    int done = 1, many = b->phase >= BAL_SHARED ? !b->long_units : 1;
    for (int i = 0; i < 2; i++) {
        if (u[i] != b->seen[i] && b->changes[i]++ > 0) { /* timed from the second change */
            if (b->first_t[i] < 0) {
                b->first_t[i] = now;
                b->first_u[i] = u[i];
            }
            b->last_t[i] = now;
            b->last_u[i] = u[i];
        }
        b->seen[i] = u[i];
        int held = (b->phase == BAL_ALONE_A && i == 1) || (b->phase == BAL_ALONE_B && i == 0);
        if (!held && (b->first_t[i] < 0 || b->last_u[i] - b->first_u[i] < BAL_MEASURE_UNITS ||
                      b->last_t[i] - b->first_t[i] < BAL_MEASURE_US))
            done = 0;
        if (b->phase < BAL_SHARED && !held && u[i] - b->units0[i] < BAL_SHORT_UNITS)
            many = 0;
    }
    double span = now - b->measure_start_us;
    if (span < BAL_MEASURE_US || (!many && !done && span < BAL_MAX_MEASURE_US))
        return;
    for (int i = 0; i < 2; i++) {
        /* short units: their count over the span; long ones: timed between changes */
        int timed = !many && b->first_t[i] >= 0 && b->last_t[i] > b->first_t[i];
        b->timed[b->phase][i] = many ? u[i] > b->units0[i] : timed;
        b->rate[b->phase][i] = timed ? (double)(b->last_u[i] - b->first_u[i]) / ((b->last_t[i] - b->first_t[i]) * 1e-6)
                                     : (double)(u[i] - b->units0[i]) / (span * 1e-6);
    }
    if (b->phase == BAL_ALONE_B) /* long units: either tenant submits too few alone to count them in a sample */
        b->long_units = b->rate[BAL_ALONE_A][0] * BAL_MEASURE_US * 1e-6 < BAL_SHORT_UNITS ||
                        b->rate[BAL_ALONE_B][1] * BAL_MEASURE_US * 1e-6 < BAL_SHORT_UNITS;
    if ((uint32_t)b->phase + 1 < b->num_cand)
        enter(b, view, b->phase + 1, now);
    else
        choose(b, view, now);
}

const ds_policy_ops ds_builtin_balance = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "balance",
    .init = bal_init,
    .fini = bal_fini,
    .on_activate = bal_activate,
    .on_vctx_create = bal_create,
    .on_vctx_destroy = bal_destroy,
    .on_launch = bal_launch,
    .on_tick = bal_tick,
    .tick_us = 1000,
    .params = bal_params,
    .num_params = sizeof bal_params / sizeof bal_params[0],
    .on_param = bal_param,
};
