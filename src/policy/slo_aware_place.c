/*
 * Where slo_aware's vCtxs run (rules 1, 4 and 5 of slo_aware.c's header): the
 * scans a decision works from; BE on the complement or the whole GPU, with its
 * window and gates, and its yield; LS on its tier, its units marked where BE
 * may share its SMs; and the tick's upkeep of BE on the complement (settle,
 * fit_windows). When BE yields or expands, and which tier LS takes, the hooks
 * (slo_aware.c) and the modes and tiers files choose; these functions apply it.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>

#include <detshare/policy.h>

#include "slo_state.h"

/* BE's window on the complement holds this many of its units beyond half of
 * be_window_us (window_confined). */
#define CONFINED_UNITS 2.0

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

/* BE was confined from the whole GPU less than its window ago: what it
 * queued there (a gate before every kernel) may still run on any SM. */
static int draining(slo_state *s, const ds_policy_view *view)
{
    double until = atomic_load_explicit(&s->drain_until_us, memory_order_relaxed);
    return until > 0 && ds_view_now_us(view) < until;
}

/* Lists the live vCtxs into sc (slo_scan, slo_state.h); reads none of them. */
void ds_slo_scan_list(slo_scan *sc, slo_state *s, const ds_policy_view *view)
{
    sc->n = ds_policy_list(view, sc->vs, DS_POLICY_LIST_MAX);
    sc->ls_live = 0;
    sc->top = shares_gpu(s, view) || draining(s, view);
    sc->full = ds_view_full_pctx(view);
    sc->prefill_pctx = prefill_pctx(s, view);
}

/* Records what the snapshot of vs[i] says (st NULL: gone). BE yields when it
 * is bound, or about to be bound, anywhere but the complement. */
static void scan_note(slo_scan *sc, uint32_t i, const ds_vctx_state *st, uint32_t high)
{
    if (!st)
        sc->fl[i] = VC_GONE;
    else if (is_ls(st))
        sc->fl[i] = VC_LS, sc->ls_live = 1;
    else if (is_prefill_ls(st) && sc->prefill_pctx == sc->full)
        /* on the whole GPU by design: neither yields nor drains */
        sc->fl[i] = VC_PREFILL | (st->pctx != sc->full || st->pending_pctx != sc->full ? VC_YIELD : 0);
    else {
        sc->fl[i] = (st->pctx != high || st->pending_pctx != high || sc->top) && !st->gate_closed ? VC_YIELD : 0;
        sc->fl[i] |= st->pctx == sc->full || st->pending_pctx == sc->full ? VC_FULL : 0;
        sc->fl[i] |= is_prefill_ls(st) ? VC_PREFILL : 0;
    }
    if (st && !is_ls(st))
        sc->unit[i] = st->unit_us;
}

/* Snapshots vs[i] into st and records it; returns whether it is live. */
int ds_slo_scan_one(slo_scan *sc, const ds_policy_view *view, uint32_t i, uint32_t high, ds_vctx_state *st)
{
    int live = ds_policy_state(view, sc->vs[i], st);
    scan_note(sc, i, live ? st : NULL, high);
    return live;
}

/* Snapshots every listed vCtx (nothing else needed). */
void ds_slo_scan_all(slo_scan *sc, slo_state *s, const ds_policy_view *view)
{
    uint32_t high = high_tier(s);
    ds_slo_scan_list(sc, s, view);
    for (uint32_t i = 0; i < sc->n; i++) {
        ds_vctx_state st;
        ds_slo_scan_one(sc, view, i, high, &st);
    }
}

/* Scans the vCtxs for an LS launch (self: the launching vCtx, whose snapshot
 * is `me`) and returns whether some BE vCtx is active where it may occupy
 * LS's SMs (bound, or about to be bound, off the complement, or anywhere
 * when LS is on the whole GPU); the scan records who must yield. */
int ds_slo_scan_be_on_ls(slo_state *s, const ds_policy_view *view, slo_scan *sc, ds_vctx_t self,
                         const ds_vctx_state *me)
{
    uint32_t high = high_tier(s), idle = idle_us(s);
    double now = -1;
    int any = 0;
    ds_slo_scan_list(sc, s, view);
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

/* BE on the complement (disjoint from LS: no gates needed), or where it
 * shares SMs with LS (the whole GPU) with gates. A latency-sensitive prefill
 * vCtx: on prefill_pctx, without window or gates. */
void ds_slo_place_be(slo_state *s, const ds_policy_view *view, ds_vctx_t v, double unit_us, int confined, int ls_live,
                     int gates, int prefill)
{
    if (prefill) {
        ds_vctx_place(v, prefill_pctx(s, view), prefill_urgent(s), 0);
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
void ds_slo_track_all_ls(slo_state *s, const ds_policy_view *view, int on)
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
void ds_slo_set_confined(slo_state *s, const ds_policy_view *view, const slo_scan *sc, int confined, int yield)
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
            ds_slo_place_be(s, view, sc->vs[i], sc->unit[i], confined, sc->ls_live, gates, sc->fl[i] & VC_PREFILL);
    if (yield && gates)
        for (uint32_t i = 0; i < sc->n; i++)
            if ((sc->fl[i] & (VC_YIELD | VC_PREFILL)) == VC_YIELD)
                ds_vctx_gate_close(sc->vs[i]);
}

/* Where LS runs: its tier, or in reserve mode the whole GPU (its tier's SMs
 * are then the ones BE's complement leaves it alone). */
static uint32_t ls_pctx(slo_state *s, const ds_policy_view *view)
{
    return reserving(s) ? ds_view_full_pctx(view) : low_tier(s);
}

/* Places one LS vCtx on the LS tier (one being created: set_confined's
 * scan does not list it yet, so its marks are set here). */
void ds_slo_place_one_ls(slo_state *s, const ds_policy_view *view, ds_vctx_t v)
{
    track_ls(s, view, v, 0);
    ds_vctx_place(v, ls_pctx(s, view), 1, 0);
}

/* Places every LS vCtx of the scan on the LS tier; set_confined, called
 * with the same scan, sets their marks. */
void ds_slo_place_ls(slo_state *s, const ds_policy_view *view, const slo_scan *sc)
{
    for (uint32_t i = 0; i < sc->n; i++)
        if (sc->fl[i] & VC_LS)
            ds_vctx_place(sc->vs[i], ls_pctx(s, view), 1, 0);
}

/* Every BE vCtx bound and bound-to-be on the complement: LS launches need
 * not check them. */
void ds_slo_settle(slo_state *s, const ds_policy_view *view, double now)
{
    if (!atomic_load(&s->unsettled) || !atomic_load(&s->confined) || shares_gpu(s, view) || draining(s, view))
        return;
    uint32_t high = high_tier(s);
    slo_scan sc;
    ds_slo_scan_list(&sc, s, view);
    double unit = 0, window = 0;
    for (uint32_t i = 0; i < sc.n; i++) {
        ds_vctx_state st;
        if (!ds_slo_scan_one(&sc, view, i, high, &st) || (sc.fl[i] & VC_LS))
            continue;
        uint32_t home = (sc.fl[i] & VC_PREFILL) ? sc.prefill_pctx : high;
        if (st.pctx != home || st.pending_pctx != home)
            return;
        unit = st.unit_us > unit ? st.unit_us : unit;
        window = st.window_us > window ? st.window_us : window;
    }
    /* what BE queued before its move may run for its window plus one unit */
    atomic_store(&s->left_us, now + window);
    atomic_store(&s->settled_us, now + window + unit);
    atomic_store(&s->unsettled, 0);
    if (atomic_load(&s->ls_track)) /* BE on disjoint SMs: LS's marks would only cost it */
        ds_slo_track_all_ls(s, view, 0);
}

/* BE on the complement keeps a window of CONFINED_UNITS of its units beyond
 * half of be_window_us as its units change (window_confined). */
void ds_slo_fit_windows(slo_state *s, const ds_policy_view *view)
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
