/*
 * slo_aware's sizing rule (sizing.h): the error budget, the step up, the
 * step down as a probe, overload and its cap, the grace after a change and
 * the dwell before a step down. docs/design.md section 4.9 gives each rule
 * with the measurements behind its constants.
 */

#include "sizing.h"

#include <math.h>
#include <string.h>

/* Requests after a change that are not judged: after a step up they were
 * queued, or already late, before it; after a step down the first one also
 * creates LS's stream on the new tier. */
#define GRACE_UP 4
#define GRACE_DOWN 1
/* Hold before retrying a step down that failed: 2^(failures + this) x
 * shrink_requests, at most 2^MAX_BACKOFF_SHIFT x. */
#define BACKOFF_SHIFT 3
#define MAX_BACKOFF_SHIFT 8
/* The error budget holds this many requests' worth of the target's
 * allowance of late requests, times the late count's dispersion. */
#define BUDGET_REQUESTS 512.0
/* The late count's dispersion (its variance over its mean) is estimated from
 * LS's runs of late requests with DISPERSION_PRIOR runs of one late request
 * assumed before the first, and taken at most as DISPERSION_MAX. */
#define DISPERSION_PRIOR 4.0
#define DISPERSION_MAX 4.0
/* A step down for the target (a probe) fails as soon as its late count is
 * PROBE_FAIL_SD standard deviations (Poisson) and one request over the
 * target's allowance (1 - target) x n; it holds after PROBE_HOLD x
 * shrink_requests within PROBE_HOLD_SD of it, and fails if it has not held
 * after PROBE_MAX x shrink_requests. */
#define PROBE_FAIL_SD 2.0
#define PROBE_HOLD_SD 1.0
#define PROBE_HOLD 2u
#define PROBE_MAX 4u
/* Overload: the step below is checked once LS has had at least
 * OVERLOAD_STAY x shrink_requests judged requests on the largest step it may
 * take (cfg's overload_stay: the reference share is measured over them) and
 * its late count there is clearly over the target's allowance (CAP_ABORT_SD
 * standard deviations and one request); below a capped step, after
 * CAP_DEEPER x shrink_requests. The check stops as soon as its late count is
 * clearly over the reference's (the same test), and holds after CAP_STAY x
 * shrink_requests if it is not; a capped step is left for the one above once
 * it is clearly worse than the reference after CAP_STAY x. */
#define OVERLOAD_STAY 2u
#define CAP_STAY 2u
#define CAP_DEEPER 8u
#define CAP_ABORT_SD 2.0
/* A step down held this many x shrink_requests has held for long: its
 * failures are forgotten, and growth from it does not back off (cfg's
 * held_long; with forget_within_sd >= 0, only while the step's lates are
 * within that many SDs of the target's allowance: a step that has held
 * but runs over it still backs off when LS grows from it). */
#define HELD_LONG 4.0
#define FORGET_WITHIN_SD -1.0

/* Pressed (a latency-sensitive tenant on the complement misses its target),
 * LS steps down after shrink_requests / PRESSED_DIV judged requests, without
 * the dwell: its headroom and full budget still decide, and the probe still
 * catches a step too far. */
#define PRESSED_DIV 4u

void ds_sizing_config_default(ds_sizing_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->target = 0.99;
    cfg->shrink_requests = 128;
    cfg->dwell_us = 20000;
    cfg->request_window = 256;
    cfg->probe_fail_sd = PROBE_FAIL_SD;
    cfg->probe_hold_sd = PROBE_HOLD_SD;
    cfg->probe_hold = PROBE_HOLD;
    cfg->probe_max = PROBE_MAX;
    cfg->cap_sd = CAP_ABORT_SD;
    cfg->dispersion_prior = DISPERSION_PRIOR;
    cfg->dispersion_max = DISPERSION_MAX;
    cfg->descent = 1;
    cfg->held_long = HELD_LONG;
    cfg->forget_within_sd = FORGET_WITHIN_SD;
    cfg->overload_stay = OVERLOAD_STAY;
}

void ds_sizing_init(ds_sizing *z, const ds_sizing_config *cfg)
{
    memset(z, 0, sizeof *z);
    z->cfg = *cfg;
    if (z->cfg.nlev > DS_SIZING_MAX_LEVELS)
        z->cfg.nlev = DS_SIZING_MAX_LEVELS;
    z->lvl = -1;
    z->cap = -1;
    z->dispersion = 1.0;
}

int ds_sizing_is_full(const ds_sizing *z, int k) { return z->cfg.has_full && k == (int)z->cfg.nlev - 1; }

int ds_sizing_level(const ds_sizing *z) { return z->lvl; }

size_t ds_sizing_size(int which)
{
    static const size_t sizes[] = {sizeof(ds_sizing), sizeof(ds_sizing_config), sizeof(ds_sizing_input),
                                   sizeof(ds_sizing_action)};
    return which >= 0 && which < 4 ? sizes[which] : 0;
}

/* The step is judged from LS's counts now on. */
static void judge_from(ds_sizing *z, uint64_t req, uint64_t over)
{
    z->base_req = req;
    z->base_over = over;
}

/* The budget's most, in late requests: (1 - target) x BUDGET_REQUESTS x the
 * late count's dispersion. */
double ds_sizing_budget_max(const ds_sizing *z) { return (1.0 - z->cfg.target) * BUDGET_REQUESTS * z->dispersion; }

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
static double late_dispersion(const ds_sizing *z, const ds_sizing_input *in)
{
    double late = in->over >= z->start_over ? (double)(in->over - z->start_over) : 0.0;
    double runs = in->runs >= z->start_runs ? (double)(in->runs - z->start_runs) : 0.0;
    double prior = z->cfg.dispersion_prior, d = 2.0 * (late + prior) / (runs + prior) - 1.0;
    return d < 1.0 ? 1.0 : d > z->cfg.dispersion_max ? z->cfg.dispersion_max : d;
}

/* Requests not judged leave the budget as it is. */
static void budget_skip(ds_sizing *z, uint64_t req, uint64_t over)
{
    z->seen_req = req;
    z->seen_over = over;
}

/* Adds the requests LS served since the last update to the budget: each
 * earns 1 - target, each late one costs 1. */
static void budget_update(ds_sizing *z, uint64_t req, uint64_t over)
{
    double top = ds_sizing_budget_max(z);
    if (req >= z->seen_req && over >= z->seen_over) /* else an LS vCtx went away: its counts left the sums */
        z->budget += (1.0 - z->cfg.target) * (double)(req - z->seen_req) - (double)(over - z->seen_over);
    z->budget = z->budget > top ? top : z->budget < -top ? -top : z->budget;
    z->seen_req = req;
    z->seen_over = over;
}

/* Late requests out of n that count as no more than a late share `ref`:
 * ref's count plus `sd` of its standard deviations (Poisson; at least 1). */
static double cap_allowed(double ref, double n, double sd)
{
    double m = ref * n;
    return m + sd * sqrt(m > 1 ? m : 1);
}

int ds_sizing_clearly_over(double share, double n, double late, double sd)
{
    return late > cap_allowed(share, n, sd) + 1.0;
}

/* `late` of n is clearly over the reference share (ref_share). */
static int clearly_worse(const ds_sizing *z, double n, double late)
{
    return ds_sizing_clearly_over(z->ref_share, n, late, z->cfg.cap_sd);
}

/* No overload (again): no cap, no check under way, every step checkable. */
static void overload_end(ds_sizing *z)
{
    z->cap = -1;
    z->cap_probe = 0;
    z->warned_top = 0;
    memset(z->cap_failed, 0, sizeof z->cap_failed);
}

/* Headroom for level `to` below the current one: LS's window p99 (as a share
 * of the SLO) scaled to its SMs stays within the SLO, with latency taken to
 * grow as the square root of the SM ratio (between a memory-bound kernel,
 * which barely slows on fewer SMs, and a compute-bound one, which slows in
 * proportion). In reserve mode LS keeps the whole GPU: only BE's share
 * changes. */
static int headroom(const ds_sizing *z, const ds_sizing_input *in, int to)
{
    if (in->reserving)
        return in->p99_share <= 1.0;
    uint32_t cur = z->cfg.sms[z->lvl], next = z->cfg.sms[to];
    return !cur || !next || in->p99_share * sqrt((double)cur / next) <= 1.0;
}

typedef enum { ENTER_UP, ENTER_DOWN, ENTER_START } enter_kind;

/* LS goes to level `lvl`. A step down is a probe: BE keeps the larger
 * level's complement until the smaller one has held, so that growing back
 * moves no BE work. In reserve mode LS stays on the whole GPU and a step
 * moves only BE: a step down is then judged with BE on its new complement
 * (no probe). */
static void enter(ds_sizing *z, const ds_sizing_input *in, int lvl, enter_kind kind)
{
    int by_shrink = kind == ENTER_DOWN;
    z->lvl = lvl;
    z->entered_us = in->now_us;
    judge_from(z, in->req, in->over);
    z->grace = by_shrink ? GRACE_DOWN : GRACE_UP;
    z->by_shrink = by_shrink;
    int reserve = in->reserving && !ds_sizing_is_full(z, lvl);
    z->probing = by_shrink && !ds_sizing_is_full(z, lvl + 1) && !reserve;
}

/* The current level did not hold: LS steps up. A step down for the target
 * that had not held for long (by_shrink) backs off before LS steps down to
 * it again, growth from a step held longer does not; an overload check is
 * not made again until the overload ends. For the target the larger step
 * starts with a full budget: the lates that spent it were the smaller
 * step's (half back, they grew LS on past steps that met the target: H200,
 * W1 at 30% load, 48 -> 64 -> 80 -> 96 SMs within 800 requests); in an
 * overload, with at least half. */
static void step_up(ds_sizing *z, const ds_sizing_input *in, int overload)
{
    z->grown = 1;
    if (overload) {
        z->cap_failed[z->lvl] = 1;
    } else if (z->by_shrink) { /* a step down that did not hold for long; else the load rose */
        uint32_t fl = ++z->fails[z->lvl];
        uint32_t shift = fl + BACKOFF_SHIFT < MAX_BACKOFF_SHIFT ? fl + BACKOFF_SHIFT : MAX_BACKOFF_SHIFT;
        z->retry_req[z->lvl] = in->req + ((uint64_t)z->cfg.shrink_requests << shift);
    }
    double top_budget = ds_sizing_budget_max(z);
    if (!overload)
        z->budget = top_budget;
    else if (z->budget < top_budget / 2)
        z->budget = top_budget / 2;
    enter(z, in, z->lvl + 1, ENTER_UP);
}

/* Overload: LS misses its target on the largest step it may take (at_top:
 * the ladder's top; else the cap) with `late` of its n judged requests over
 * the SLO. Once that is a clear miss (clearly over the target's allowance
 * after overload_stay x shrink_requests on the top, CAP_DEEPER x below a
 * cap), the step below is checked (overload_probe). On a capped step that
 * does clearly worse than the reference the cap goes and LS grows. */
static void overload(ds_sizing *z, const ds_sizing_input *in, double n, double late, int at_top,
                     ds_sizing_action *act)
{
    double late_share = 1.0 - z->cfg.target;
    uint32_t need = z->cfg.shrink_requests;
    if (at_top && !z->warned_top)
        act->warn_top = z->warned_top = 1;
    if (!at_top && n >= (double)CAP_STAY * need && clearly_worse(z, n, late)) {
        z->cap = -1;
        step_up(z, in, 1); /* shown worse: not checked again in this overload */
        act->kind = DS_SIZING_CAP_UP;
        act->capped_worse = 1;
        return;
    }
    double stay = (double)(at_top ? z->cfg.overload_stay : CAP_DEEPER) * need;
    if (z->lvl <= 0 || n < stay || !ds_sizing_clearly_over(late_share, n, late, z->cfg.cap_sd) ||
        ds_sizing_is_full(z, z->lvl) || z->cap_failed[z->lvl - 1])
        return;
    /* the reference: the top step's share, or a capped step's where lower */
    if (at_top || late / n < z->ref_share)
        z->ref_share = late / n;
    enter(z, in, z->lvl - 1, ENTER_DOWN);
    z->cap_probe = 1;
    act->kind = DS_SIZING_CAP_CHECK;
}

/* The step below an overloaded one (see overload), judged against the
 * larger step's late share (ref_share) instead of the target: it fails as
 * soon as its late count is clearly over the reference's, and LS grows
 * back; the step is not checked again in this overload (step_up). Else,
 * after CAP_STAY x shrink_requests, LS stays: the step is the cap, and BE
 * gets the SMs it freed. */
static void overload_probe(ds_sizing *z, const ds_sizing_input *in, double n, double late, ds_sizing_action *act)
{
    double stay = (double)CAP_STAY * z->cfg.shrink_requests;
    if (clearly_worse(z, n, late)) {
        z->cap_probe = 0;
        step_up(z, in, 1);
        act->kind = DS_SIZING_CAP_UP;
        return;
    }
    if (n < stay)
        return;
    z->cap_probe = 0;
    z->cap = z->lvl;
    act->confirm = z->probing;
    z->probing = 0;
    z->entered_us = in->now_us;
    judge_from(z, in->req, in->over);
    act->kind = DS_SIZING_CAPPED;
}

/* First requests: sizing starts from cfg.start with a full budget. */
static void start(ds_sizing *z, const ds_sizing_input *in, ds_sizing_action *act)
{
    memset(z->fails, 0, sizeof z->fails);
    memset(z->retry_req, 0, sizeof z->retry_req);
    z->grown = 0;
    overload_end(z);
    uint32_t splits = z->cfg.nlev - (uint32_t)(z->cfg.has_full && z->cfg.nlev > 0);
    if (splits == 0)
        return;
    z->start_over = in->over;
    z->start_runs = in->runs;
    z->dispersion = 1.0;
    z->budget = ds_sizing_budget_max(z);
    budget_skip(z, in->req, in->over);
    enter(z, in, z->cfg.start < splits ? (int)z->cfg.start : (int)splits - 1, ENTER_START);
    act->kind = DS_SIZING_START;
    act->to = z->lvl;
}

ds_sizing_action ds_sizing_step(ds_sizing *z, const ds_sizing_input *in)
{
    ds_sizing_action act = {.kind = DS_SIZING_STAY, .from = z->lvl, .to = z->lvl};
    uint64_t req = in->req, over = in->over;
    if (z->lvl < 0) {
        start(z, in, &act);
        return act;
    }
    z->dispersion = late_dispersion(z, in); /* from every request, judged or not */
    if (in->phase == DS_SIZING_MOVED) { /* LS on its new level: judged after a grace */
        z->entered_us = in->now_us;
        judge_from(z, req, over);
        z->grace = GRACE_UP;
        budget_skip(z, req, over);
        return act;
    }
    if (req < z->base_req || in->phase == DS_SIZING_HOLD) /* an LS vCtx went away (its counts left the
                                                             sums), or the requests say nothing */
        judge_from(z, req, over);
    if (in->phase == DS_SIZING_HOLD) {
        budget_skip(z, req, over);
        return act;
    }
    if (z->grace) {
        if (req - z->base_req >= (uint64_t)z->grace) {
            z->grace = 0;
            judge_from(z, req, over);
        }
        budget_skip(z, req, over);
        return act;
    }
    budget_update(z, req, over); /* the judged requests */
    /* the requests judged on this level: n, `late` of them over the SLO */
    double n = (double)(req - z->base_req), late = (double)(over - z->base_over);
    double late_share = 1.0 - z->cfg.target;
    uint32_t need = z->cfg.shrink_requests;
    if (z->cap_probe) { /* overload: judged against the step above, not the target */
        overload_probe(z, in, n, late, &act);
        act.to = z->lvl;
        act.n = n, act.late = late, act.ref_share = z->ref_share;
        return act;
    }
    /* Grow: the budget is overdrawn and this level had a part in it (a late
     * judged request), or a probe (a step down not yet confirmed) is clearly
     * over the target's allowance, or has not held after probe_max x
     * shrink_requests; it holds after probe_hold x shrink_requests within
     * probe_hold_sd of the allowance. */
    double top_budget = ds_sizing_budget_max(z);
    int probe_failed = z->probing && (ds_sizing_clearly_over(late_share, n, late, z->cfg.probe_fail_sd) ||
                                      (n >= (double)z->cfg.probe_max * need &&
                                       late > cap_allowed(late_share, n, z->cfg.probe_hold_sd)));
    if (probe_failed || (z->budget < 0 && late >= 1)) {
        int top = (int)z->cfg.nlev - 1;
        if (z->cfg.has_full && z->lvl == top - 1 && !in->full_allowed) /* the whole GPU only while BE's units
                                                                          still fit the slack */
            top--;
        act.n = n, act.late = late;
        if (z->lvl >= top && !in->reserving && !ds_sizing_is_full(z, z->lvl) && in->may_expand) {
            act.kind = DS_SIZING_TOP_MISSED; /* reserve mode next: LS on the whole GPU, BE on the complement */
            return act;
        }
        if (z->lvl >= top || z->lvl == z->cap)
            overload(z, in, n, late, z->lvl >= top, &act);
        else {
            step_up(z, in, 0);
            act.kind = DS_SIZING_UP;
        }
        act.to = z->lvl;
        act.ref_share = z->ref_share;
        return act;
    }
    if (z->budget >= top_budget && (z->cap >= 0 || z->warned_top)) /* LS meets its target again: the load fell */
        overload_end(z);
    if (z->probing && n >= (double)z->cfg.probe_hold * need &&
        late <= cap_allowed(late_share, n, z->cfg.probe_hold_sd)) {
        z->probing = 0; /* the step down holds */
        act.kind = DS_SIZING_PROBE_HELD;
        return act;
    }
    if (z->by_shrink && z->cfg.held_long > 0 && n >= z->cfg.held_long * need &&
        (z->cfg.forget_within_sd < 0 || late <= cap_allowed(late_share, n, z->cfg.forget_within_sd))) {
        z->fails[z->lvl] = 0; /* and has held for long, within its allowance where asked */
        z->by_shrink = 0;
    }
    /* Shrink: a full budget (no late request for a while), a stay of
     * shrink_requests and dwell_us, and no recent failure of the level below;
     * on a level entered by a step down, a window of requests too: the p99
     * below is then the level's own, not the larger level's before it */
    uint32_t window = z->cfg.request_window;
    double stay = z->by_shrink && need < window ? window : need, dwell = z->cfg.dwell_us;
    if (in->pressed)
        stay = (double)need / PRESSED_DIV, dwell = 0;
    if (z->lvl <= 0 || z->probing || n < stay || z->budget < top_budget || in->now_us - z->entered_us < dwell ||
        req < z->retry_req[z->lvl - 1])
        return act;
    if (!headroom(z, in, z->lvl - 1)) {
        z->retry_req[z->lvl - 1] = req + window; /* judged again on a new window */
        return act;
    }
    /* The descent from the first level (until LS first steps up) goes past
     * several levels at once, to the smallest the headroom allows: the start
     * is a cautious guess. The probe catches a jump too far (it fails within
     * about a hundred requests), and from then on LS steps down one level at
     * a time. */
    int to = z->lvl - 1, descent = z->cfg.descent == 2 || (z->cfg.descent == 1 && !z->grown);
    while (descent && to > 0 && req >= z->retry_req[to - 1] && headroom(z, in, to - 1))
        to--;
    enter(z, in, to, ENTER_DOWN);
    act.kind = DS_SIZING_DOWN;
    act.to = to;
    return act;
}
