/*
 * slo_aware's LS tier sizing (rules 2 to 4 of slo_aware.c's header). The rule
 * is sizing.c's; here the ladder it walks, the tick's step (ds_slo_size_ls:
 * LS's request counts and the runtime's state in, the decision applied) and
 * the moves: a step up moves BE off the SMs LS gains first, a probe keeps BE
 * on the larger tier's complement until it holds. The placements are
 * slo_aware_place.c's.
 */
#include <stdatomic.h>
#include <stdint.h>

#include <detshare/policy.h>

#include "ladder.h"
#include "sizing.h"
#include "slo_state.h"

_Static_assert(DS_SIZING_MAX_LEVELS >= DS_MAX_PCTX + 1, "a level per LOW tier and the whole GPU");

/* Where sizing starts: beside a latency-sensitive prefill, decode's kernels
 * (bound by memory bandwidth) start on the decode_sms tier and leave the
 * complement to prefill's (bound by compute); else, or with right_size 0,
 * the ls_sms tier. */
static uint32_t start_tiers(slo_state *s, const ds_policy_view *view)
{
    int sized = atomic_load_explicit(&s->right_size, memory_order_relaxed); /* else ls_sms's, fixed */
    return atomic_load(sized && ds_policy_any(view, is_prefill_ls) ? &s->decode_tiers : &s->fixed_tiers);
}

/* The ladder: LOW tiers with a complement, by SM count; the whole GPU on top
 * when `full` (BE's units fit LS's slack, with gates). Starts from the
 * start_tiers tier (the last where it is not on the ladder). */
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
    uint32_t splits = nlev - (uint32_t)cfg->has_full, start = tiers_low(start_tiers(s, view));
    while (cfg->start + 1 < splits && s->lad_low[cfg->start] != start)
        cfg->start++;
}

/* What LS's recorded requests say, summed over the LS vCtxs with an SLO that
 * recorded any (totals, runs of lates, the worst window p99 over its SLO);
 * 0 where none has. */
static int ls_counts(const ds_policy_view *view, ds_sizing_input *f) { return ds_policy_sum_requests(view, is_ls, f); }

/* LS prefill's TTFT error budget, kept like LS's own (sizing.c): each request
 * earns 1 - target late requests, each late one costs one, at most
 * PF_BUDGET_REQUESTS requests' worth; full when sizing starts. Overdrawn, or
 * its lates since sizing started clearly over the target's allowance (a
 * probe's test: a few requests tell), it presses LS's tier down
 * (ds_sizing_input.pressed), where prefill_press is on: the SMs LS gives up
 * go to prefill on the complement. */
#define PF_BUDGET_REQUESTS 512.0
#define PF_CLEAR_SD 2.0

static int prefill_pressed(slo_state *s, const ds_policy_view *view, int restart)
{
    ds_sizing_input pf = {0};
    ds_policy_sum_requests(view, is_prefill_ls, &pf);
    double earn = 1.0 - atomic_load_explicit(&s->target, memory_order_relaxed), full = PF_BUDGET_REQUESTS * earn;
    if (restart || pf.req < s->pf_req || pf.over < s->pf_over) { /* a new start, or a prefill vCtx went */
        s->pf_budget = full, s->pf_req = s->pf_start_req = pf.req, s->pf_over = s->pf_start_over = pf.over;
    }
    s->pf_budget += earn * (double)(pf.req - s->pf_req) - (double)(pf.over - s->pf_over);
    s->pf_budget = s->pf_budget > full ? full : s->pf_budget;
    s->pf_req = pf.req, s->pf_over = pf.over;
    return atomic_load_explicit(&s->prefill_press, memory_order_relaxed) &&
           (s->pf_budget < 0 || ds_sizing_clearly_over(earn, (double)(pf.req - s->pf_start_req),
                                                      (double)(pf.over - s->pf_start_over), PF_CLEAR_SD));
}

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
    ds_slo_scan_all(&sc, s, view);
    /* a step down frees SMs: nobody yields */
    ds_slo_set_confined(s, view, &sc, confined, confined && !by_shrink && !reserve);
    if (moving && high == full)
        for (uint32_t i = 0; i < sc.n; i++)
            if (!(sc.fl[i] & (VC_LS | VC_GONE)))
                ds_vctx_gate_close(sc.vs[i]);
    ds_slo_place_ls(s, view, &sc);
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
    ds_slo_scan_all(&sc, s, view);
    int confined = atomic_load(&s->confined) || shares_gpu(s, view);
    ds_slo_set_confined(s, view, &sc, confined, confined);
    ds_slo_place_ls(s, view, &sc);
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
    ds_slo_scan_all(&sc, s, view);
    ds_slo_set_confined(s, view, &sc, atomic_load(&s->confined), 0);
    ds_log_message(DS_LOG_INFO, "slo_aware: LS tier %u SMs held (probe, %llu requests): BE takes its complement",
                   step_sms(view, s->lad_low[lvl]), (unsigned long long)req);
}

/* One tick of right-sizing: LS's counts and the runtime's state into the
 * rule (ds_sizing_step), its decision applied. */
void ds_slo_size_ls(slo_state *s, const ds_policy_view *view, double now)
{
    ds_sizing *z = &s->sz;
    if (atomic_exchange(&s->reset, 0)) {
        z->lvl = -1;
        atomic_store(&s->moving, 0);
        uint32_t start = start_tiers(s, view);
        if (atomic_exchange(&s->tiers, start) != start) { /* LS, BE and prefill to the start's tiers */
            slo_scan sc;
            ds_slo_scan_all(&sc, s, view);
            ds_slo_place_ls(s, view, &sc);
            ds_slo_set_confined(s, view, &sc, atomic_load(&s->confined), 0);
        }
    }
    if (!atomic_load_explicit(&s->right_size, memory_order_relaxed))
        return;
    ds_sizing_input in = {.now_us = now};
    if (!ls_counts(view, &in))
        return;
    in.pressed = prefill_pressed(s, view, z->lvl < 0);
    if (z->lvl < 0) { /* first requests: a new ladder */
        ds_sizing_config cfg;
        slo_scan sc;
        build_ladder(s, view, gates_on(s, view) && ds_slo_expansion_safe(s, view, &sc, now, 0), &cfg);
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
        in.full_allowed = ds_slo_expansion_safe(s, view, &sc, now, 0);
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
