/*
 * How BE shares the GPU with LS, judged from measurement (rules 5 and 6 of
 * slo_aware.c's header): what BE may run on LS's SMs against LS's slack
 * (be_bound_us); whether BE may expand to the whole GPU while LS is idle
 * (ds_slo_resume_be, which also reopens BE's gates once LS is quiet, and
 * ds_slo_expansion_safe); and reserve mode, chosen each tick
 * (ds_slo_choose_mode). slo_aware.c acts on them at LS's completions and ticks.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include <detshare/policy.h>

#include "sizing.h"
#include "slo_state.h"

/* BE's unit must fit in this share of LS's slack before BE expands: a request
 * that arrives while the unit runs waits for it (and for the gate to reopen
 * after it), and those requests are LS's tail; the rest covers the error of a
 * p99 taken over at most DS_REQUEST_WINDOW requests. (H200, W1: with the
 * whole slack, BE's GEMMs expanded ~10 times per 1600 requests, LS's p99 on
 * the same 96 SMs rose 10-20% over static's and BE gained nothing.) */
#define SLACK_SHARE 0.5
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
 * expanded; docs/results/h200/ls_cost/README.md, exp11-exp15.) */
#define BE_UNIT_LAUNCHES 256

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
 * docs/results/h200/ls_cost/.) */
int ds_slo_resume_be(slo_state *s, const ds_policy_view *view)
{
    slo_scan sc;
    ds_slo_scan_list(&sc, s, view);
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
int ds_slo_expansion_safe(slo_state *s, const ds_policy_view *view, slo_scan *sc, double now_us, int wait_idle)
{
    uint32_t high = high_tier(s), idle = idle_us(s);
    double scale = complement_scale(s, view), be_unit = gates_on(s, view) ? 0 : window_expanded(s), slack = 1e18;
    ds_slo_scan_list(sc, s, view);
    for (uint32_t i = 0; i < sc->n; i++) {
        ds_vctx_state vs;
        if (!ds_slo_scan_one(sc, view, i, high, &vs))
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
 * expanding: BE's running kernels delay LS's on the SMs they share), and
 * never with the reserve parameter 0. A change
 * restarts sizing from the ls_sms tier: what the ladder learnt was the other
 * mode's. */
void ds_slo_choose_mode(slo_state *s, const ds_policy_view *view, double now)
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
    if (!t.any || !atomic_load_explicit(&s->may_expand, memory_order_relaxed) ||
        !atomic_load_explicit(&s->reserve_allowed, memory_order_relaxed))
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
    ds_slo_scan_all(&sc, s, view);
    ds_slo_set_confined(s, view, &sc, 1, 0);
    ds_slo_place_ls(s, view, &sc);
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
