/* slo_aware's right-sizing on the simulated device (virtual time, one
 * thread): LS requests are recorded with ds_vctx_request_begin/end; BE
 * starts on the complement beside LS; the LS tier shrinks under slack, grows
 * on violations within its stated reaction time, stays through bursts of
 * lates that keep within its target, does not oscillate under a steady load,
 * gives back under overload the tiers that do not help LS (a slightly
 * worse one until the difference is significant), and BE never
 * starts on LS's SMs while LS has work in flight. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <detshare/policy.h>

#include "common.h"

/* The ladder of LOW tiers right-sizing walks, each with its complement. */
static const uint32_t LADDER[] = {16, 32, 48, 64, 80, 96};
#define LADDER_N (sizeof LADDER / sizeof LADDER[0])
#define LS_BLOCK_US 20.0
#define REQUEST_GAP_US 1000.0

static ds_runtime_t ladder_runtime(void)
{
    static ds_tier_spec tiers[1 + 2 * LADDER_N];
    tiers[0] = (ds_tier_spec){.anchor = DS_ANCHOR_FULL};
    for (size_t i = 0; i < LADDER_N; i++) {
        tiers[1 + 2 * i] = (ds_tier_spec){.sm_count = LADDER[i], .anchor = DS_ANCHOR_LOW};
        tiers[2 + 2 * i] = (ds_tier_spec){.sm_count = 132 - LADDER[i], .anchor = DS_ANCHOR_HIGH};
    }
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, "slo_aware");
    cfg.tiers = tiers;
    cfg.num_tiers = 1 + 2 * LADDER_N;
    return t_runtime_create(&cfg);
}

static double now_us(ds_runtime_t rt)
{
    double t = 0;
    ds_sim_now_us(rt, &t);
    return t;
}

/* One co-located run: LS requests every REQUEST_GAP_US, each one kernel of
 * `blocks` blocks of LS_BLOCK_US (one block per SM at a time: on S SMs it
 * takes ceil(blocks / S) waves), submitted and waited for; BE fills the time
 * between with kernels of `be_block_us` blocks over the whole GPU. */
typedef struct bench {
    ds_runtime_t rt;
    ds_vctx_t ls, be;
    CUfunction lsk, bek;
    ds_launch_hints be_hint;
    uint32_t be_blocks;
    double next_us;
    uint32_t last_sms;   /* SMs of the LS tier at the last request */
    int changes;         /* LS tier changes seen between requests */
    uint64_t late;       /* requests over the SLO */
    uint32_t slo_us;
} bench;

/* SMs of the pCtx v is bound to. */
static uint32_t bound_sms(bench *b, ds_vctx_t v)
{
    ds_vctx_stats st = t_vctx_stats(v);
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    cr_assert_eq(ds_runtime_info_get(b->rt, &info), DS_SUCCESS);
    return info.pctx[st.pctx].sm_count;
}

static uint32_t ls_tier_sms(bench *b) { return bound_sms(b, b->ls); }

/* T_TRACE set: the policy's log lines on stderr, to follow a test's steps. */
static void trace_log(ds_log_level level, const char *msg, void *user)
{
    (void)level;
    (void)user;
    fprintf(stderr, "%s\n", msg);
}

static void bench_open(bench *b, double be_block_us, uint32_t slo_us)
{
    if (getenv("T_TRACE"))
        ds_log_set_handler(trace_log, NULL, getenv("T_DEBUG") ? DS_LOG_DEBUG : DS_LOG_INFO);
    memset(b, 0, sizeof *b);
    b->slo_us = slo_us;
    b->rt = ladder_runtime();
    b->lsk = t_sim_kernel(b->rt, "ls", LS_BLOCK_US, 0, NULL);
    b->bek = t_sim_kernel(b->rt, "be", be_block_us, 0, NULL);
    b->ls = t_ls_vctx(b->rt, slo_us);
    b->be = t_vctx(b->rt, "be", DS_CLASS_BEST_EFFORT, 0, -1);
    b->be_hint = (ds_launch_hints)DS_LAUNCH_HINTS_INIT;
    b->be_hint.expected_us = 2 * be_block_us;
    b->be_blocks = 264;
    b->next_us = now_us(b->rt) + REQUEST_GAP_US;
}

/* bench_open with sizing starting from the tier of `ls_sms` SMs. */
static void bench_open_from(bench *b, double be_block_us, uint32_t slo_us, uint32_t ls_sms)
{
    bench_open(b, be_block_us, slo_us);
    char v[16];
    snprintf(v, sizeof v, "%u", ls_sms);
    cr_assert_eq(ds_policy_param_set(b->rt, "slo_aware", "ls_sms", v), DS_SUCCESS, "%s", ds_last_error_message());
}

/* BE until the next request is due, then the request: one kernel `k` of
 * `blocks` blocks. Returns its latency. */
static double bench_request_k(bench *b, CUfunction k, uint32_t blocks)
{
    while (now_us(b->rt) < b->next_us) {
        cr_assert_eq(ds_launch(b->be, b->bek, t_dim(b->be_blocks), t_dim(128), 0, NULL, &b->be_hint), DS_SUCCESS,
                     "%s", ds_last_error_message());
        ds_runtime_poll(b->rt);
    }
    /* the next request at least a gap later, even when BE's window waits
     * overran this one's due time: requests stay spaced as in a real stream */
    b->next_us = (b->next_us > now_us(b->rt) ? b->next_us : now_us(b->rt)) + REQUEST_GAP_US;
    ds_request_t req;
    cr_assert_eq(ds_vctx_request_begin(b->ls, &req), DS_SUCCESS);
    cr_assert_eq(ds_launch(b->ls, k, t_dim(blocks), t_dim(64), 0, NULL, NULL), DS_SUCCESS, "%s",
                 ds_last_error_message());
    uint32_t sms = ls_tier_sms(b); /* where this request runs */
    if (b->last_sms && sms != b->last_sms) {
        b->changes++;
        if (getenv("T_TRACE"))
            fprintf(stderr, "request at %.0f us: LS %u -> %u SMs\n", now_us(b->rt), b->last_sms, sms);
    }
    b->last_sms = sms;
    cr_assert_eq(ds_vctx_synchronize(b->ls), DS_SUCCESS);
    double lat;
    cr_assert_eq(ds_vctx_request_end(b->ls, req, &lat), DS_SUCCESS);
    b->late += lat > b->slo_us;
    if (getenv("T_TRACE") && lat > b->slo_us)
        fprintf(stderr, "late request at %.0f us on %u SMs: %.0f us\n", now_us(b->rt), sms, lat);
    ds_runtime_poll(b->rt);
    return lat;
}

/* A request of LS's usual kernel. */
static double bench_request(bench *b, uint32_t blocks) { return bench_request_k(b, b->lsk, blocks); }

/* n requests of `blocks` blocks each. */
static void bench_requests(bench *b, int n, uint32_t blocks)
{
    for (int i = 0; i < n; i++)
        bench_request(b, blocks);
}

/* Up to `most` requests of kernel k (`blocks` blocks) until LS is on `sms`
 * SMs after one: the index of that request, -1 if none. */
static int bench_until_on(bench *b, CUfunction k, uint32_t blocks, uint32_t sms, int most)
{
    for (int i = 0; i < most; i++)
        if (bench_request_k(b, k, blocks), ls_tier_sms(b) == sms)
            return i;
    return -1;
}

/* n requests of `blocks` blocks with LS on `sms` SMs throughout: no tier
 * change, no late request. */
static void bench_stays(bench *b, int n, uint32_t blocks, uint32_t sms)
{
    int changes = b->changes;
    uint64_t late = b->late;
    bench_requests(b, n, blocks);
    cr_assert_eq(ls_tier_sms(b), sms, "LS on %u SMs, not %u", ls_tier_sms(b), sms);
    cr_assert_eq(b->changes, changes, "%d tier changes", b->changes - changes);
    cr_assert_eq(b->late, late, "%llu late", (unsigned long long)(b->late - late));
}

static void bench_close(bench *b)
{
    ds_vctx_synchronize(b->be);
    cr_assert_eq(ds_runtime_destroy(b->rt), DS_SUCCESS);
}

/* BE blocks of 2 ms never fit LS's 100 us SLO: BE stays on the complement,
 * and LS's latency depends on its tier alone (128 blocks: 40 us on 64 SMs,
 * 60 on 48, 80 on 32, 160 on 16: compute-bound, slower in proportion to
 * fewer SMs). From the ls_sms tier (64) LS steps down after shrink_requests
 * (128), in its descent past several tiers at once: 64's p99 (0.4 of the
 * SLO) x sqrt(64 / 16) leaves headroom for 16, whose probe fails at once
 * (every request late: the fourth fails it, and LS grows at the next tick)
 * and LS grows to 32, where it stays without a late request: 32's p99 (0.8)
 * x sqrt(32 / 16) leaves no headroom for 16 again. */
Test(slo_aware, shrinks_to_the_smallest_tier_that_meets_the_slo)
{
    bench b;
    bench_open(&b, 2000.0, 100);
    bench_request(&b, 128);
    cr_assert_eq(ls_tier_sms(&b), 64, "sizing starts from the ls_sms tier");
    bench_requests(&b, 9, 128);
    /* the first requests wait for BE's 2 ms kernels still on LS's SMs */
    uint64_t late_start = b.late;
    int on_32 = bench_until_on(&b, b.lsk, 128, 32, 300);
    cr_assert(on_32 >= 0, "LS on 32 SMs within 300 requests (%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(b.changes, 2, "64 -> 16 -> 32 (%d changes)", b.changes);
    cr_assert_leq(b.late - late_start, 8, "the failed probe of 16 SMs cost %llu late requests",
                  (unsigned long long)(b.late - late_start));
    bench_stays(&b, 1000, 128, 32);
    bench_close(&b);
}

/* The descent from the ls_sms tier goes past several tiers at once when
 * the headroom allows, as it does where LS's kernels barely slow on fewer
 * SMs (memory-bound, as LLM decode): 32 blocks of 40 us take 40 us on 32 SMs
 * or more and 80 on 16 (SLO 100 us). 64's p99 (0.4 of the SLO) x sqrt(64 /
 * 16) leaves headroom for 16: LS steps from 64 to 16 in one move after
 * shrink_requests (128), its probe holds, and no request is late. (One tier
 * per probe, 64 -> 48 -> 32 -> 16 took three probes and two windows.) */
Test(slo_aware, descends_past_several_tiers_at_once_with_headroom)
{
    bench b;
    bench_open(&b, 2000.0, 100);
    bench_requests(&b, 10, 32); /* the first requests wait for BE's 2 ms kernels still on LS's SMs */
    uint64_t late_start = b.late;
    int on_16 = bench_until_on(&b, b.lsk, 32, 16, 300);
    cr_assert(on_16 >= 0 && on_16 < 200, "LS on 16 SMs after %d requests (%u SMs)", on_16, ls_tier_sms(&b));
    cr_assert_eq(b.changes, 1, "64 -> 16 in one move (%d changes)", b.changes);
    cr_assert_eq(b.late, late_start, "%llu late", (unsigned long long)(b.late - late_start));
    bench_stays(&b, 1000, 32, 16); /* its probe holds */
    bench_close(&b);
}

/* The error budget starts full: a cluster of three late requests soon
 * after the start (512 blocks, 160 us on 64 SMs, against an SLO of 100 us),
 * as a burst of arrivals makes on a tier that meets its target, spends 3 of
 * its 5.12 and LS stays on the ls_sms tier. */
Test(slo_aware, a_cluster_of_lates_at_the_start_keeps_the_tier)
{
    bench b;
    bench_open(&b, 2000.0, 100);
    bench_requests(&b, 30, 128);
    uint64_t late_before = b.late;
    bench_requests(&b, 3, 512);
    cr_assert_eq(b.late - late_before, 3, "the cluster (%llu late)", (unsigned long long)(b.late - late_before));
    bench_requests(&b, 100, 128);
    cr_assert_eq(ls_tier_sms(&b), 64, "LS stayed on the ls_sms tier (%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(b.changes, 0, "%d tier changes", b.changes);
    bench_close(&b);
}

/* Headroom is judged once per window of requests, not at every tick: with
 * an SLO of 90 us, three requests of 256 blocks (80 us on 64 SMs: 0.89 of
 * the SLO, x sqrt(64 / 48) leaves no headroom) early on are the window's p99
 * (its third largest). The first check (after shrink_requests, 128) fails;
 * the three leave the sliding window after 256 requests, but the next check
 * comes a window after the first. */
Test(slo_aware, headroom_is_judged_once_per_window)
{
    bench b;
    bench_open(&b, 2000.0, 90);
    bench_requests(&b, 30, 128);
    bench_requests(&b, 3, 256);
    int i = 33, left_at = -1;
    for (; i < 370; i++) {
        bench_request(&b, 128);
        if (left_at < 0 && t_vctx_stats(b.ls).request_p99_us < 60.0)
            left_at = i;
    }
    cr_assert(left_at > 0 && left_at < 300, "the three left the window (after request %d)", left_at);
    cr_assert_eq(ls_tier_sms(&b), 64, "headroom not judged again within a window of the first check (%u SMs)",
                 ls_tier_sms(&b));
    cr_assert_eq(b.late, 0, "%llu late", (unsigned long long)b.late);
    for (; i < 600; i++)
        bench_request(&b, 128);
    cr_assert_lt(ls_tier_sms(&b), 64, "a window later, with headroom, LS steps down (%u SMs)", ls_tier_sms(&b));
    bench_close(&b);
}

/* Converged on 32 SMs from 48: 1000 requests of 128 blocks (60 us on 48
 * SMs, 80 on 32, SLO 100 us) put LS on 32 SMs after shrink_requests (128),
 * with a full error budget and no late request, its probe there held
 * (after 256). (From 64, the descent's failed probe of 16 SMs would leave a
 * run of 8 lates in the budget's dispersion: see
 * shrinks_to_the_smallest_tier_that_meets_the_slo.) */
static void bench_open_on_32(bench *b)
{
    bench_open_from(b, 2000.0, 100, 48);
    bench_requests(b, 1000, 128);
    cr_assert_eq(ls_tier_sms(b), 32);
}

/* slo_aware's error budget as its comment states it, kept here from every
 * request's latency (all judged here once converged): each request earns
 * 1 - 0.99, each late one costs 1; at most 0.01 x 512 = 5.12. */
#define BUDGET_TOP (0.01 * 512)

static double budget_after(double left, int late)
{
    left += 0.01 - (late ? 1.0 : 0.0);
    return left > BUDGET_TOP ? BUDGET_TOP : left < -BUDGET_TOP ? -BUDGET_TOP : left;
}

/* Converged on 32 SMs, LS's requests double (256 blocks: 160 us on 32, 120
 * on 48, 80 on 64): every request is late. Stated reaction: at the first
 * tick after the late request that overdraws the error budget (full after
 * a long stay without lates: the 6th late), BE then moves off the SMs LS
 * gains (what it has in flight, at most its window on the complement, then
 * half of be_window_us queued when it rebinds) before LS takes them, plus
 * the grace of 4 requests after each step up. Never before the budget is
 * overdrawn. */
Test(slo_aware, grows_on_violations_within_its_reaction_time)
{
    bench b;
    bench_open_on_32(&b);
    /* BE's unit on the 32-SM tier's 100-SM complement: 264 blocks of 2 ms in
     * 3 waves; its window there keeps the next unit queued: half of
     * be_window_us (2000) beyond two units */
    const double be_unit_us = 3 * 2000.0;
    double be_window_us = t_vctx_stats(b.be).window_us;
    cr_assert_geq(be_window_us, 1000.0 + 2 * be_unit_us, "BE's window on the complement (%.0f us) holds two units",
                  be_window_us);
    int lates = 0, grown_after = -1, due_after = -1;
    double due_us = -1, grown_us = -1, gap_us = 0, last_us = now_us(b.rt);
    double budget = BUDGET_TOP; /* full: no late request on 32 SMs for hundreds of requests */
    for (int i = 0; i < 40 && grown_after < 0; i++) {
        double before = now_us(b.rt);
        gap_us = before - last_us > gap_us ? before - last_us : gap_us; /* BE's window waits space requests */
        last_us = before;
        double lat = bench_request(&b, 256);
        if (ls_tier_sms(&b) > 32) { /* this request already ran on the grown tier */
            grown_after = lates;
            grown_us = before;
        }
        lates += lat > b.slo_us;
        budget = budget_after(budget, lat > b.slo_us);
        if (due_us < 0 && budget < 0) {
            due_us = now_us(b.rt);
            due_after = lates;
        }
    }
    cr_assert_eq(due_after, 6, "a full budget is overdrawn by the 6th late request (%d)", due_after);
    cr_assert_geq(grown_after, due_after, "LS grew before its budget was overdrawn (%d late before)", grown_after);
    const double reaction_us = 250.0 + be_window_us + 1000.0 + 250.0;
    cr_assert_leq(grown_us - due_us, reaction_us + gap_us,
                  "LS grew %.0f us after the late request that overdrew its budget: more than a tick, BE's "
                  "work in flight (its window), its window while it moves and the tick that sees it moved "
                  "(%.0f us), and one request gap (%.0f us)",
                  grown_us - due_us, reaction_us, gap_us);
    /* 48 SMs are still too few: the grace, six more lates (each step starts
     * with a full budget) and the move */
    bench_requests(&b, 40, 256);
    cr_assert_eq(ls_tier_sms(&b), 64, "up to the tier that meets the SLO again (%u SMs)", ls_tier_sms(&b));
    uint64_t late_before = b.late;
    bench_requests(&b, 300, 256);
    cr_assert_eq(b.late - late_before, 0, "it stays there: 48 failed, so it is not retried soon");
    cr_assert_eq(ls_tier_sms(&b), 64);
    bench_close(&b);
}

/* Each step up starts its tier with a full error budget: the lates that
 * spent the budget were the smaller tier's. Converged on 32 SMs, a run of
 * slow requests (150 us on any tier, SLO 100 us) grows LS to 48 at the
 * sixth; 50 requests of 128 blocks later (60 us on 48), four slow ones in a
 * row cost 4 of 48's 5.12 and LS stays. (With half the budget back, as
 * before, the third of them grew LS on to 64, a tier it did not need.) */
Test(slo_aware, a_step_up_starts_with_a_full_budget)
{
    bench b;
    bench_open_on_32(&b);
    CUfunction slow = t_sim_kernel(b.rt, "ls_slow", 150.0, 0, NULL);
    int grown = bench_until_on(&b, slow, 16, 48, 12);
    cr_assert(grown >= 5, "LS grew to 48 SMs at the sixth late request (%d, %u SMs)", grown, ls_tier_sms(&b));
    bench_requests(&b, 50, 128);
    cr_assert_eq(ls_tier_sms(&b), 48);
    for (int i = 0; i < 4; i++)
        bench_request_k(&b, slow, 16);
    bench_requests(&b, 100, 128);
    cr_assert_eq(ls_tier_sms(&b), 48, "four lates on 48 SMs within its own budget: LS stays (%u SMs)",
                 ls_tier_sms(&b));
    bench_close(&b);
}

/* Late requests that come in runs widen the error budget: converged on 32
 * SMs, every 400th request starts a run of 3 slow ones (150 us against an
 * SLO of 100; 0.75% late), so the late count's dispersion comes to 2 x 3 -
 * 1 = 5, taken as 4, and the budget may fill up to 4 x 5.12 as the requests
 * between runs earn it. Then two runs 40 requests apart (6 lates in 46
 * requests) leave LS on its tier. (With a budget of 5.12 whatever the runs,
 * the second run overdrew it and LS grew to 48 SMs off a tier that meets
 * the target.) */
Test(slo_aware, runs_of_lates_widen_the_error_budget)
{
    bench b;
    bench_open_on_32(&b);
    CUfunction slow = t_sim_kernel(b.rt, "ls_slow", 150.0, 0, NULL);
    int changes = b.changes;
    uint64_t late_before = b.late;
    for (int i = 0; i < 6000; i++)
        i % 400 < 3 ? bench_request_k(&b, slow, 16) : bench_request(&b, 128);
    cr_assert_eq(b.changes, changes, "runs of 3 within the target: LS stays (%d changes, %u SMs)",
                 b.changes - changes, ls_tier_sms(&b));
    for (int i = 0; i < 46; i++)
        i < 3 || i >= 43 ? bench_request_k(&b, slow, 16) : bench_request(&b, 128);
    bench_requests(&b, 200, 128);
    cr_assert_eq(b.late - late_before, 15 * 3 + 6, "%llu late", (unsigned long long)(b.late - late_before));
    cr_assert_eq(ls_tier_sms(&b), 32, "two runs close together within a budget widened by the runs: LS stays "
                 "(%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(b.changes, changes);
    bench_close(&b);
}

/* Growth from a tier LS held for long is the load rising, not a failed
 * step down: it does not back the step down off. Converged on 32 SMs and
 * held there for 4 x shrink_requests since its probe held, 20
 * requests of 192 blocks (120 us on 32, 80 on 48; SLO 100) grow LS to 48;
 * once the requests are back to 128 blocks, LS returns to 32 as soon as
 * its budget is full again (the run of 8 lates widened it to 3.8 x 5.12)
 * and a window of requests has passed for headroom (its p99 still held the
 * lates). (Backed off, it stayed on 48 for 2^4 x 128 = 2048 requests.) */
Test(slo_aware, growth_from_a_tier_held_long_does_not_back_off)
{
    bench b;
    bench_open_on_32(&b);
    bench_requests(&b, 600, 128); /* the step down to 32 came after about 140, its probe held 256 later */
    bench_requests(&b, 20, 192);
    cr_assert_eq(ls_tier_sms(&b), 48, "the load rose: LS grew (%u SMs)", ls_tier_sms(&b));
    int back = bench_until_on(&b, b.lsk, 128, 32, 1000);
    cr_assert(back >= 256 && back < 1000, "LS back on 32 SMs after %d requests: a budget and a window, not "
              "the 2048 of a backoff", back);
    bench_requests(&b, 600, 128);
    cr_assert_eq(ls_tier_sms(&b), 32, "the step down holds (%u SMs)", ls_tier_sms(&b));
    bench_close(&b);
}

/* Converged on 32 SMs (80 us per request against an SLO of 100), LS meets
 * its target with lates that come in bursts: every 600 requests, 5 in a
 * row (160 us each), 0.83% of the requests. Each burst spends all but 0.17
 * of a full budget (5.12) and the 600 requests after it earn it back, so LS
 * stays on 32 SMs: a burst is not a drop in attainment. (A test on the last
 * 256 requests that grows at their fifth late one grows at every burst.) */
Test(slo_aware, stays_on_its_tier_through_bursts_within_the_target)
{
    bench b;
    bench_open_on_32(&b);
    int changes = b.changes;
    uint64_t late_before = b.late;
    for (int i = 0; i < 3000; i++)
        bench_request(&b, i % 600 < 5 ? 256 : 128);
    cr_assert_eq(b.late - late_before, 25, "5 bursts of 5 late requests (%llu late)",
                 (unsigned long long)(b.late - late_before));
    cr_assert_eq(b.changes, changes, "LS stayed on its tier (%d changes, %u SMs)", b.changes - changes,
                 ls_tier_sms(&b));
    bench_close(&b);
}

/* A steady load on the edge between two tiers (64 blocks, SLO 70 us: 40 us
 * on 32 SMs, 80 on 16, and 32's p99 leaves headroom for trying 16): each
 * probe of 16 fails at its fourth late request (two standard deviations and
 * one request over the target's allowance; the descent from 64 tries it
 * first); the probes thin out
 * exponentially instead of alternating, and BE keeps 32's complement during
 * a probe. */
Test(slo_aware, does_not_oscillate_under_a_steady_load)
{
    bench b;
    bench_open(&b, 2000.0, 70);
    int changes_at_1500 = 0;
    for (int i = 0; i < 3000; i++) {
        bench_request(&b, 64);
        if (i == 1500)
            changes_at_1500 = b.changes;
    }
    cr_assert_eq(ls_tier_sms(&b), 32);
    cr_assert_geq(b.changes, 4, "64 -> 16 (the descent) -> 32, and a probe of 16 that grew back (%d)", b.changes);
    cr_assert_leq(b.changes, 6, "%d tier changes in 3000 requests", b.changes);
    cr_assert_leq(b.changes - changes_at_1500, 2, "%d changes in the last 1500 requests",
                  b.changes - changes_at_1500);
    cr_assert_leq((double)b.late / 3000.0, 0.01, "attainment stays at the target (%llu late)",
                  (unsigned long long)b.late);
    bench_close(&b);
}

/* A tier within the target holds its probe: every SLOW_PERIOD-th request is
 * late on any tier (one kernel of 150 us against an SLO of 100 us), 0.8% of
 * them, and the others take 128 blocks (40 us on 64 SMs, 60 on 48, 80 on
 * 32, 160 on 16). The budget refills between the slow ones, and from 48
 * LS steps down to 32, whose probe holds wherever the slow requests fall in
 * it: within 128 requests at most two are late (the rule before failed a
 * probe at its second late request and held only after 64 with none, so
 * that a slow request among a probe's first 64 failed it). 16 is never
 * tried (no headroom). */
#define SLOW_PERIOD 125

Test(slo_aware, a_tier_within_the_target_holds_its_probe)
{
    bench b;
    bench_open_from(&b, 2000.0, 100, 48);
    CUfunction slow = t_sim_kernel(b.rt, "ls_slow", 150.0, 0, NULL);
    for (int phase = 0; phase < SLOW_PERIOD; phase += 25) {
        if (phase) {
            bench_close(&b);
            bench_open_from(&b, 2000.0, 100, 48);
            slow = t_sim_kernel(b.rt, "ls_slow", 150.0, 0, NULL);
        }
        int slow_n = 0;
        for (int i = 0; i < 2500; i++) {
            int is_slow = (i + phase) % SLOW_PERIOD == 0;
            slow_n += is_slow;
            is_slow ? bench_request_k(&b, slow, 16) : bench_request(&b, 128);
        }
        cr_assert_eq(ls_tier_sms(&b), 32, "phase %d: LS on 32 SMs (%u)", phase, ls_tier_sms(&b));
        cr_assert_eq(b.changes, 1, "phase %d: 48 -> 32 and its probe held (%d changes)", phase, b.changes);
        /* the first requests wait for BE's kernels still on LS's SMs */
        cr_assert_leq((int)b.late, slow_n + 4, "phase %d: %llu late, %d slow", phase, (unsigned long long)b.late,
                      slow_n);
    }
    bench_close(&b);
}

/* Short BE kernels (10 us blocks) fit LS's slack: BE uses the whole GPU
 * between requests and yields at its next kernel boundary (its gate) when
 * one arrives, so no BE kernel starts on the SMs of an LS kernel while that
 * kernel is in flight, whatever tier LS is sized to. */
Test(slo_aware, never_puts_be_on_ls_sms_while_ls_has_work_in_flight)
{
    bench b;
    bench_open(&b, 10.0, 100);
    bench_requests(&b, 300, 128);
    ds_vctx_synchronize(b.be);
    size_t n;
    ds_sim_kernel_record *r = t_trace(b.rt, &n);
    int ls_kernels = 0, be_whole = 0, be_during = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(r[i].name, "ls") != 0) {
            be_whole += t_popcount(r[i].sm_mask) == 132;
            continue;
        }
        ls_kernels++;
        for (size_t j = 0; j < n; j++) {
            if (strcmp(r[j].name, "be") != 0 || r[j].start_us <= r[i].submit_us + 1e-6 || r[j].start_us >= r[i].end_us)
                continue;
            be_during++;
            for (size_t w = 0; w < DS_MAX_SMS / 64; w++)
                cr_assert_eq(r[j].sm_mask[w] & r[i].sm_mask[w], 0,
                             "BE kernel at %.1f us on SMs of the LS kernel in flight [%.1f, %.1f]", r[j].start_us,
                             r[i].submit_us, r[i].end_us);
        }
    }
    cr_assert_eq(ls_kernels, 300);
    cr_assert_gt(be_whole, 100, "BE used the whole GPU between requests (%d kernels)", be_whole);
    (void)be_during; /* BE yields at its gate for the length of each LS kernel */
    free(r);
    cr_assert_eq(ds_runtime_destroy(b.rt), DS_SUCCESS);
}

/* Beside an LS vCtx, BE starts on the complement and expands only once its
 * units are known to fit LS's slack; BE's 2 ms kernels never do. So neither
 * tenant moves before sizing starts, LS never runs on the whole GPU, and no
 * request waits for a BE kernel on LS's SMs (128 blocks on 64 SMs: 40 us
 * against an SLO of 100 us). */
Test(slo_aware, be_starts_on_the_complement_beside_ls)
{
    bench b;
    bench_open(&b, 2000.0, 100);
    bench_requests(&b, 100, 128);
    ds_vctx_stats ls = t_vctx_stats(b.ls), be = t_vctx_stats(b.be);
    cr_assert_eq(ls_tier_sms(&b), 64, "LS on the ls_sms tier");
    cr_assert_eq(bound_sms(&b, b.be), 132 - 64, "BE on its complement");
    cr_assert_eq(ls.remaps, 0, "LS did not move (%llu remaps)", (unsigned long long)ls.remaps);
    cr_assert_eq(be.remaps, 0, "BE did not move (%llu remaps)", (unsigned long long)be.remaps);
    cr_assert_eq(b.late, 0, "%llu requests waited for BE", (unsigned long long)b.late);
    bench_close(&b);
}

/* With right_size 0 the tier is ls_sms's, whatever the requests say. */
Test(slo_aware, right_size_off_keeps_the_ls_sms_tier)
{
    bench b;
    bench_open(&b, 2000.0, 100);
    cr_assert_eq(ds_policy_param_set(b.rt, "slo_aware", "right_size", "0"), DS_SUCCESS);
    bench_requests(&b, 200, 128);
    cr_assert_eq(ls_tier_sms(&b), 64, "the default ls_sms tier (%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(b.changes, 0);
    double target = 0;
    cr_assert_eq(ds_policy_param_get(b.rt, "slo_aware", "target", &target), DS_SUCCESS);
    cr_assert_float_eq(target, 0.99, 1e-12);
    cr_assert_eq(ds_policy_param_set(b.rt, "slo_aware", "target", "0.2"), DS_ERR_INVALID_ARGUMENT,
                 "below the parameter's range");
    bench_close(&b);
}

/* Overload, where a larger tier does not help: every 10th request is one
 * kernel of 16 blocks of 150 us (150 us on any tier, against an SLO of 100
 * us: late everywhere); the others take 128 blocks of 20 us (40 us on 64 SMs
 * or more, 60 on 48, 80 on 32, 160 on 16). LS misses its target on every
 * tier, grows to the top (96) and, once that is a clear miss (256 requests,
 * 10% late), checks the step below against the top's late share: 80 does as
 * well, so LS stays there (the cap) and BE takes its complement. Below a cap
 * the next check comes 1024 requests later, down to 32; 16 is worse (every
 * request late) and that check stops at its fourth late request. No request
 * is late beyond the slow ones and that check's few. */
#define SLOW_EVERY 10

static double bench_mixed(bench *b, CUfunction slow, int i, uint32_t blocks)
{
    return i % SLOW_EVERY == SLOW_EVERY - 1 ? bench_request_k(b, slow, 16) : bench_request(b, blocks);
}

Test(slo_aware, gives_back_a_larger_tier_that_does_not_help)
{
    bench b;
    bench_open(&b, 2000.0, 100);
    CUfunction slow = t_sim_kernel(b.rt, "ls_slow", 150.0, 0, NULL);
    uint32_t most = 0;
    int i = 0, top_at = -1, capped_at = -1, slow_n = 0;
    for (; i < 1200; i++) {
        slow_n += i % SLOW_EVERY == SLOW_EVERY - 1;
        bench_mixed(&b, slow, i, 128);
        uint32_t sms = ls_tier_sms(&b);
        most = sms > most ? sms : most;
        if (sms == 96 && top_at < 0)
            top_at = i;
        if (top_at >= 0 && sms == 80 && capped_at < 0)
            capped_at = i;
    }
    cr_assert_eq(most, 96, "LS grew to the top while it missed its target (%u SMs at most)", most);
    cr_assert(top_at > 0 && top_at < 200, "top reached after %d requests", top_at);
    cr_assert(capped_at - top_at >= 256 && capped_at - top_at < 300,
              "the step below checked after 256 requests on the top (%d)", capped_at - top_at);
    cr_assert_eq(ls_tier_sms(&b), 80, "the check held: LS on 80 (%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(bound_sms(&b, b.be), 132 - 80, "BE on 80's complement (%u SMs)", bound_sms(&b, b.be));
    for (; i < 6000; i++) {
        slow_n += i % SLOW_EVERY == SLOW_EVERY - 1;
        bench_mixed(&b, slow, i, 128);
    }
    cr_assert_eq(ls_tier_sms(&b), 32, "down to the smallest tier as good as the top (%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(bound_sms(&b, b.be), 132 - 32, "BE on its complement (%u SMs)", bound_sms(&b, b.be));
    /* 64 -> 80 -> 96, 96 -> 80 -> 64 -> 48 -> 32, 32 -> 16 and back */
    cr_assert_eq(b.changes, 8, "%d tier changes", b.changes);
    /* the check of 16: its first request (not judged), the four late ones that stop it, and those before the
     * tick after */
    cr_assert_leq((int)b.late, slow_n + 8, "%llu late of which %d slow", (unsigned long long)b.late, slow_n);
    bench_close(&b);
}

/* Overload, where the larger tier helps: with an SLO of 50 us, 192 blocks
 * of 20 us take 40 us on 96 SMs and 60 on 80 or 64; every 10th request is
 * late everywhere (16 blocks of 150 us). LS grows to 96, still misses its
 * target there, checks 80, which is clearly worse (every request late):
 * the check stops at its fourth late request, LS grows back to 96 and,
 * the overload lasting, does not check again. */
Test(slo_aware, keeps_a_larger_tier_that_helps_under_overload)
{
    bench b;
    bench_open(&b, 2000.0, 50);
    CUfunction slow = t_sim_kernel(b.rt, "ls_slow", 150.0, 0, NULL);
    int probes = 0, on80 = 0, slow_n = 0, i = 0, probe_at[3] = {0};
    uint64_t late_at_top = 0;
    for (; i < 3000; i++) {
        slow_n += i % SLOW_EVERY == SLOW_EVERY - 1;
        uint32_t before = ls_tier_sms(&b);
        bench_mixed(&b, slow, i, 192);
        uint32_t sms = ls_tier_sms(&b);
        if (before == 96 && sms == 80 && probes < 3)
            probe_at[probes++] = i;
        on80 += sms == 80 && probes > 0; /* from the first check on */
        if (i == 300)
            late_at_top = b.late;
    }
    cr_assert_eq(ls_tier_sms(&b), 96, "LS on the tier that serves its requests (%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(probes, 1, "one check of 80 in 3000 requests (%d, the first after %d)", probes, probe_at[0]);
    cr_assert_leq(on80, 12, "%d requests on 80 SMs in the check", on80);
    cr_assert_leq((int)(b.late - late_at_top), (3000 - 300) / SLOW_EVERY + 8, "%llu late after request 300",
                  (unsigned long long)(b.late - late_at_top));
    bench_close(&b);
}

/* Overload, where the step below is slightly worse than the top: with an
 * SLO of 50 us, every 10th request is late everywhere (16 blocks of 150
 * us), every 40th takes 176 blocks of 20 us (40 us on 96 SMs, 60 on 80: late
 * there) and the others 160 (40 us on 80 SMs or more, 60 on 64). LS grows
 * to 96 (10% late), checks 80 (12.5% late): within the test of the check
 * over its 256 requests (2 standard deviations and one request over the
 * top's share: at most 36 late, 32 are), so LS is capped there and BE takes
 * 80's complement. The capped tier keeps being judged against the top's
 * share, and once the 2.5 points are significant (about 770 requests: 96
 * late against 95.3 allowed) the cap goes, LS grows back to 96 and, the
 * overload lasting, 80 is not checked again. */
Test(slo_aware, a_cap_on_a_slightly_worse_tier_goes_once_that_is_clear)
{
    bench b;
    bench_open(&b, 2000.0, 50);
    CUfunction slow = t_sim_kernel(b.rt, "ls_slow", 150.0, 0, NULL);
    int capped_at = -1, back_at = -1, top_at = -1;
    for (int i = 0; i < 4000; i++) {
        bench_mixed(&b, slow, i, i % 40 == 0 ? 176 : 160);
        uint32_t sms = ls_tier_sms(&b);
        if (sms == 96 && top_at < 0)
            top_at = i;
        if (top_at >= 0 && sms == 80 && capped_at < 0 && bound_sms(&b, b.be) == 132 - 80)
            capped_at = i;
        if (capped_at >= 0 && sms == 96 && back_at < 0)
            back_at = i;
        if (back_at >= 0)
            cr_assert_eq(sms, 96, "80, shown worse, is not checked again (%u SMs at request %d)", sms, i);
    }
    cr_assert(top_at > 0, "LS grew to the top");
    cr_assert(capped_at > top_at, "the check of 80 held: LS capped there with BE on its complement");
    cr_assert(back_at - capped_at >= 256 && back_at - capped_at < 1200,
              "the cap went once 80's 2.5 points were significant: %d requests after it held", back_at - capped_at);
    bench_close(&b);
}

/* A cap goes when the capped step does clearly worse than the reference:
 * LS capped on 80 (bench_open_capped_on_80), its usual requests grow to 288 blocks (60 us on 96 SMs, 80 on 80):
 * every request late on 80, and LS grows back to 96 once that is clear; the
 * overload lasting, 80 is not checked again. */
/* SLO 70 us, every 10th request late everywhere, the others 128 blocks (40
 * us on 64 SMs or more): LS grows to 96, checks 80 and is capped there, BE
 * on 80's complement. Returns the slow kernel; *i counts the requests. */
static CUfunction bench_open_capped_on_80(bench *b, int *i)
{
    bench_open(b, 2000.0, 70);
    CUfunction slow = t_sim_kernel(b->rt, "ls_slow", 150.0, 0, NULL);
    int seen_top = 0;
    for (*i = 0; *i < 1000 && !(seen_top && ls_tier_sms(b) == 80); (*i)++) {
        bench_mixed(b, slow, *i, 128);
        seen_top |= ls_tier_sms(b) == 96;
    }
    cr_assert(seen_top && ls_tier_sms(b) == 80, "80 checked (%u SMs after %d requests)", ls_tier_sms(b), *i);
    for (int j = 0; j < 300; j++, (*i)++)
        bench_mixed(b, slow, *i, 128);
    cr_assert_eq(ls_tier_sms(b), 80, "capped there while 80 does as well (%u SMs)", ls_tier_sms(b));
    cr_assert_eq(bound_sms(b, b->be), 132 - 80, "BE on 80's complement (%u SMs)", bound_sms(b, b->be));
    return slow;
}

Test(slo_aware, a_cap_goes_when_the_capped_tier_falls_behind)
{
    bench b;
    int i;
    CUfunction slow = bench_open_capped_on_80(&b, &i);
    int grown = -1;
    for (int j = 0; j < 600 && grown < 0; j++, i++) {
        bench_mixed(&b, slow, i, 288);
        if (ls_tier_sms(&b) == 96)
            grown = j;
    }
    cr_assert(grown >= 0, "LS grew back to 96 (%u SMs)", ls_tier_sms(&b));
    cr_assert_leq(grown, 300, "after %d requests (256 judged on the capped tier, a move)", grown);
    /* still overloaded on 96 (the slow requests): 80, shown worse, is not checked again */
    int changes = b.changes;
    for (int j = 0; j < 1200; j++, i++)
        bench_mixed(&b, slow, i, 288);
    cr_assert_eq(b.changes, changes, "LS stayed on 96 (%d changes, %u SMs)", b.changes - changes, ls_tier_sms(&b));
    bench_close(&b);
}

/* A cap goes when the overload ends: LS capped on 80 (SLO 70 us), then no
 * slow requests: LS meets its target, its budget fills and it shrinks (to
 * 48: 128 blocks take 60 us there, 80 on 32). When its requests then grow to
 * 288 blocks (60 us on 96 SMs, 80 or more below), LS grows past the old cap
 * to 96. */
Test(slo_aware, a_cap_goes_when_the_overload_ends)
{
    bench b;
    int i;
    bench_open_capped_on_80(&b, &i);
    bench_requests(&b, 2000, 128);
    cr_assert_eq(ls_tier_sms(&b), 48, "the overload over, LS shrank (%u SMs)", ls_tier_sms(&b));
    int grown = bench_until_on(&b, b.lsk, 288, 96, 600);
    cr_assert(grown >= 0, "LS grew past the old cap (%u SMs)", ls_tier_sms(&b));
    bench_close(&b);
}

/* Reserve mode: LS in flight most of the time leaves BE little idle time to
 * expand into, so LS runs urgent on the whole GPU and BE on the complement,
 * sharing SMs with LS under stream priority. LS's request: 576 blocks of 100
 * us, about 900 us on 64 SMs and 500 us on the whole GPU, every 1000 us
 * (SLO 3000 us); BE's kernels of 20-us blocks (a 10-us wait for LS at
 * most) fit half of LS's SLO. After about a second of LS busy more than 60%
 * of the time, LS's kernels run on all 132 SMs and BE's on a complement;
 * sizing restarts and shrinks what LS keeps to itself; no request is late.
 * With BE's blocks of 2 ms (a kernel far over half the SLO) LS stays on its
 * tier: a running BE block would hold LS's SMs that long. A BE vCtx idle
 * for a second does not count. */
static void busy_ls(bench *b, double be_block_us, int n)
{
    if (!b->rt)
        bench_open(b, be_block_us, 3000);
    CUfunction k = t_sim_kernel(b->rt, "lsl", 100.0, 0, NULL);
    for (int i = 0; i < n; i++) {
        /* BE keeps work queued however long LS's requests take */
        for (int j = 0; j < 4; j++)
            cr_assert_eq(ds_launch(b->be, b->bek, t_dim(b->be_blocks), t_dim(128), 0, NULL, &b->be_hint),
                         DS_SUCCESS, "%s", ds_last_error_message());
        /* scheduler passes every 100 us while the request runs (as the
         * runtime's scheduler thread makes them), its time reported at its end */
        ds_request_t req;
        cr_assert_eq(ds_vctx_request_begin(b->ls, &req), DS_SUCCESS);
        cr_assert_eq(ds_launch(b->ls, k, t_dim(576), t_dim(64), 0, NULL, NULL), DS_SUCCESS, "%s",
                     ds_last_error_message());
        for (int t = 0; t < 4; t++) {
            ds_sim_sleep_until(b->rt, now_us(b->rt) + 100.0);
            ds_runtime_poll(b->rt);
        }
        cr_assert_eq(ds_vctx_synchronize(b->ls), DS_SUCCESS);
        double lat;
        cr_assert_eq(ds_vctx_request_end(b->ls, req, &lat), DS_SUCCESS);
        b->late += lat > b->slo_us;
        b->last_sms = ls_tier_sms(b);
        ds_sim_sleep_until(b->rt, now_us(b->rt) + 100.0); /* LS idle a little between requests */
        ds_runtime_poll(b->rt);
    }
}

Test(slo_aware, a_busy_ls_takes_the_whole_gpu_with_be_on_the_complement)
{
    bench b = {0};
    bench_open(&b, 20.0, 3000);
    /* a second BE tenant that ran long kernels and then waits: its unit
     * does not keep LS off the whole GPU once it has been idle a while */
    ds_vctx_t idle = t_vctx(b.rt, "be-idle", DS_CLASS_BEST_EFFORT, 0, -1);
    CUfunction longk = t_sim_kernel(b.rt, "be-long", 2000.0, 0, NULL);
    for (int i = 0; i < 300; i++) { /* its 2-ms blocks known, far over half of LS's SLO */
        cr_assert_eq(ds_launch(idle, longk, t_dim(132), t_dim(128), 0, NULL, NULL), DS_SUCCESS);
        ds_runtime_poll(b.rt);
    }
    cr_assert_eq(ds_vctx_synchronize(idle), DS_SUCCESS);
    busy_ls(&b, 20.0, 1500);
    uint64_t late = b.late;
    busy_ls(&b, 20.0, 1500);
    cr_assert_eq(b.late, late, "%llu late requests in reserve mode", (unsigned long long)(b.late - late));
    cr_assert_eq(ls_tier_sms(&b), 132, "LS urgent on the whole GPU (%u SMs)", ls_tier_sms(&b));
    uint32_t be_sms = bound_sms(&b, b.be);
    cr_assert(be_sms < 132 && be_sms >= 132 - 64, "BE on a complement of the ls_sms tier or smaller (%u SMs)", be_sms);
    /* the last requests: LS's kernels on every SM, faster than on its tier */
    ds_vctx_synchronize(b.be);
    size_t n;
    ds_sim_kernel_record *r = t_trace(b.rt, &n);
    int whole = 0, last = 0;
    double sum = 0;
    for (size_t i = n; i-- > 0 && last < 100;)
        if (strcmp(r[i].name, "lsl") == 0) {
            last++;
            whole += t_popcount(r[i].sm_mask) == 132;
            sum += r[i].end_us - r[i].start_us;
        }
    free(r);
    cr_assert_eq(whole, 100, "the last 100 LS kernels on the whole GPU (%d)", whole);
    cr_assert_lt(sum / last, 700.0, "LS's kernel took %.0f us on average (900 on 64 SMs)", sum / last);
    bench_close(&b);
}

Test(slo_aware, a_busy_ls_beside_long_be_kernels_keeps_its_tier)
{
    bench b = {0};
    busy_ls(&b, 2000.0, 1500);
    cr_assert_lt(ls_tier_sms(&b), 132, "LS on its own tier (%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(bound_sms(&b, b.be) + ls_tier_sms(&b), 132, "BE on LS's complement");
    bench_close(&b);
}

/* The reserve parameter: 0 keeps the same busy LS on its own tier (an
 * experiment's switch, e.g. decode beside a latency-sensitive prefill);
 * set back to 1, reserve mode comes once LS's busy share is measured again. */
Test(slo_aware, reserve_0_keeps_a_busy_ls_on_its_tier_until_set_back_to_1)
{
    bench b = {0};
    bench_open(&b, 20.0, 3000);
    cr_assert_eq(ds_policy_param_set(b.rt, "slo_aware", "reserve", "0"), DS_SUCCESS);
    busy_ls(&b, 20.0, 1500);
    cr_assert_lt(ls_tier_sms(&b), 132, "LS on its own tier with reserve 0 (%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(ds_policy_param_set(b.rt, "slo_aware", "reserve", "1"), DS_SUCCESS);
    busy_ls(&b, 20.0, 1500);
    cr_assert_eq(ls_tier_sms(&b), 132, "LS urgent on the whole GPU with reserve 1 (%u SMs)", ls_tier_sms(&b));
    bench_close(&b);
}

/* Reserve mode also where LS's largest tier is not enough: 264 blocks of 100
 * us take 300 us on 96 SMs (the ladder's top), 200 us on the whole GPU,
 * against an SLO of 250 us, with LS idle 70% of the time. LS grows to 96,
 * still misses its target, and runs urgent on the whole GPU beside BE's
 * short kernels, from then on within its SLO. */
Test(slo_aware, ls_missing_its_target_on_the_largest_tier_takes_the_whole_gpu)
{
    bench b;
    bench_open(&b, 20.0, 250);
    CUfunction k = t_sim_kernel(b.rt, "lsl", 100.0, 0, NULL);
    int on = bench_until_on(&b, k, 264, 132, 3000);
    cr_assert(on >= 0, "LS on the whole GPU (%u SMs)", ls_tier_sms(&b));
    uint64_t late = b.late;
    for (int i = 0; i < 300; i++)
        bench_request_k(&b, k, 264);
    cr_assert_eq(ls_tier_sms(&b), 132, "LS stays on the whole GPU (%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(b.late, late, "%llu late requests on the whole GPU", (unsigned long long)(b.late - late));
    uint32_t be_sms = bound_sms(&b, b.be);
    cr_assert(be_sms < 132, "BE on a complement (%u SMs)", be_sms);
    bench_close(&b);
}

/* The same LS started on the largest tier, beside BE whose units are known:
 * every request there is late, and a handful says so (sizing's growth check
 * here; where sizing judges nothing, ls_misses_on_top after 16 since the
 * activation). A decode step of 20-50 ms at 7-15 steps a second must not
 * wait seconds to leave a tier that cannot serve it. */
Test(slo_aware, ls_on_a_largest_tier_that_misses_leaves_it_within_a_few_requests)
{
    bench b;
    bench_open_from(&b, 20.0, 250, 96);
    for (int i = 0; i < 300; i++) { /* BE's units known: BE may expand between LS's requests */
        cr_assert_eq(ds_launch(b.be, b.bek, t_dim(b.be_blocks), t_dim(128), 0, NULL, &b.be_hint), DS_SUCCESS);
        ds_runtime_poll(b.rt);
    }
    CUfunction k = t_sim_kernel(b.rt, "lsl", 100.0, 0, NULL);
    int on = bench_until_on(&b, k, 264, 132, 200);
    cr_assert(on >= 0 && on <= 24, "LS on the whole GPU after %d requests (now %u SMs)", on, ls_tier_sms(&b));
    bench_close(&b);
}

/* A latency-sensitive prefill vCtx: phase prefill, its SLO a TTFT of 50 ms. */
static ds_vctx_t prefill_vctx(bench *b)
{
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = "prefill";
    a.cls = DS_CLASS_LATENCY_SENSITIVE;
    a.phase = DS_PHASE_PREFILL;
    a.slo_us = 50000;
    ds_vctx_t pf;
    cr_assert_eq(ds_vctx_create(b->rt, &a, &pf), DS_SUCCESS);
    return pf;
}

/* A latency-sensitive prefill vCtx (phase prefill, its SLO a TTFT) runs
 * beside BE on the complement of decode's tier (decode_sms's, 32 SMs),
 * urgent and never held (no window, no gates), and its launches do not take
 * it onto decode's tier; its requests do not size that tier. BE keeps its
 * window and gates. */
Test(slo_aware, a_latency_sensitive_prefill_runs_urgent_and_unheld_on_the_complement)
{
    bench b;
    bench_open(&b, 20.0, 250);
    ds_vctx_t pf = prefill_vctx(&b);
    CUfunction chunk = t_sim_kernel(b.rt, "chunk", 2000.0, 0, NULL);
    for (int i = 0; i < 20; i++) { /* a block for each SM of the complement */
        cr_assert_eq(ds_launch(pf, chunk, t_dim(100), t_dim(128), 0, NULL, NULL), DS_SUCCESS);
        bench_request(&b, 64);
    }
    for (int i = 0; i < 50; i++) /* TTFTs all late: they must not grow decode's tier */
        cr_assert_eq(ds_vctx_request_record(pf, 1e6), DS_SUCCESS);
    bench_requests(&b, 20, 64);
    ds_vctx_stats p = t_vctx_stats(pf), be = t_vctx_stats(b.be);
    uint32_t decode_sms = ls_tier_sms(&b);
    cr_assert_eq(decode_sms, 32, "decode keeps its tier (%u SMs): prefill's lates do not size it", decode_sms);
    cr_assert_eq(bound_sms(&b, pf) + decode_sms, 132, "prefill on the complement (%u SMs)", bound_sms(&b, pf));
    cr_assert(p.urgent, "prefill above BE in stream priority");
    cr_assert_eq(p.window_us, 0, "prefill has no window (%u us)", p.window_us);
    cr_assert_eq(p.gate_interval_us, DS_GATES_NONE, "prefill has no gates");
    cr_assert(!be.urgent && be.window_us > 0, "BE keeps its window (%u us)", be.window_us);
    /* no prefill chunk ran on decode's SMs: on the complement of ls_sms's 64
     * SMs until decode's first requests moved it to 32, then on 32's */
    ds_vctx_synchronize(pf);
    size_t n, on_new = 0;
    ds_sim_kernel_record *r = t_trace(b.rt, &n);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(r[i].name, "chunk") != 0)
            continue;
        uint32_t sms = t_popcount(r[i].sm_mask);
        cr_assert(sms == 132 - decode_sms || (sms == 132 - 64 && !on_new), "a chunk on %u SMs", sms);
        on_new += sms == 132 - decode_sms;
    }
    cr_assert(on_new >= 15, "%zu of 20 chunks on the complement of decode's 32 SMs", on_new);
    free(r);
    ds_vctx_destroy(pf);
    bench_close(&b);
}

/* Beside a latency-sensitive prefill, decode's sizing starts on the
 * decode_sms tier (32 SMs by default) instead of ls_sms's (64), with prefill
 * on the complement: decode's kernels are bound by memory bandwidth,
 * prefill's by compute. The parameter moves the start (48), and with
 * right_size 0 the LS tier is ls_sms's, prefill or not. */
Test(slo_aware, decode_starts_on_decode_sms_beside_a_latency_sensitive_prefill)
{
    bench b;
    bench_open(&b, 20.0, 250);
    bench_requests(&b, 10, 64);
    cr_assert_eq(ls_tier_sms(&b), 64, "without prefill LS starts on ls_sms's tier (%u SMs)", ls_tier_sms(&b));
    ds_vctx_t pf = prefill_vctx(&b);
    bench_requests(&b, 10, 64);
    cr_assert_eq(ls_tier_sms(&b), 32, "beside prefill decode starts on 32 SMs (%u)", ls_tier_sms(&b));
    CUfunction chunk = t_sim_kernel(b.rt, "chunk", 200.0, 0, NULL);
    cr_assert_eq(ds_launch(pf, chunk, t_dim(100), t_dim(128), 0, NULL, NULL), DS_SUCCESS);
    ds_vctx_synchronize(pf);
    cr_assert_eq(bound_sms(&b, pf), 100, "prefill on the complement (%u SMs)", bound_sms(&b, pf));
    cr_assert_eq(ds_policy_param_set(b.rt, "slo_aware", "decode_sms", "48"), DS_SUCCESS);
    bench_requests(&b, 10, 64);
    cr_assert_eq(ls_tier_sms(&b), 48, "decode_sms 48 (%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(ds_policy_param_set(b.rt, "slo_aware", "right_size", "0"), DS_SUCCESS);
    bench_requests(&b, 10, 64);
    cr_assert_eq(ls_tier_sms(&b), 64, "right_size 0: ls_sms's tier (%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(b.late, 0, "%llu late", (unsigned long long)b.late);
    ds_vctx_destroy(pf);
    bench_close(&b);
}

/* prefill_whole 1: a latency-sensitive prefill runs urgent on the whole GPU
 * (beside decode's tier, as one engine's prefill has it), still unheld and
 * ungated; decode keeps its tier, BE its complement. 2: there, below decode
 * in stream priority. Set while prefill exists, the parameter moves it at
 * once; set back to 0, prefill returns to the complement. */
Test(slo_aware, prefill_whole_runs_a_latency_sensitive_prefill_on_the_whole_gpu)
{
    bench b;
    bench_open(&b, 20.0, 250);
    ds_vctx_t pf = prefill_vctx(&b);
    cr_assert_eq(bound_sms(&b, pf), 132 - ls_tier_sms(&b), "prefill starts on the complement");
    cr_assert_eq(ds_policy_param_set(b.rt, "slo_aware", "prefill_whole", "1"), DS_SUCCESS);
    CUfunction chunk = t_sim_kernel(b.rt, "chunk", 2000.0, 0, NULL);
    for (int i = 0; i < 20; i++) {
        cr_assert_eq(ds_launch(pf, chunk, t_dim(132), t_dim(128), 0, NULL, NULL), DS_SUCCESS);
        bench_request(&b, 64);
    }
    ds_vctx_synchronize(pf);
    ds_vctx_stats p = t_vctx_stats(pf), be = t_vctx_stats(b.be);
    cr_assert_eq(ls_tier_sms(&b), 32, "decode keeps its tier (%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(bound_sms(&b, pf), 132, "prefill on the whole GPU (%u SMs)", bound_sms(&b, pf));
    cr_assert(p.urgent && p.window_us == 0 && p.gate_interval_us == DS_GATES_NONE, "prefill urgent and unheld");
    cr_assert_eq(bound_sms(&b, b.be), 132 - ls_tier_sms(&b), "BE on the complement (%u SMs)", bound_sms(&b, b.be));
    cr_assert(!be.urgent, "BE below prefill and decode in stream priority");
    size_t n, whole = 0;
    ds_sim_kernel_record *r = t_trace(b.rt, &n);
    for (size_t i = 0; i < n; i++)
        whole += strcmp(r[i].name, "chunk") == 0 && t_popcount(r[i].sm_mask) == 132;
    free(r);
    cr_assert_eq(whole, 20, "%zu of 20 chunks on the whole GPU", whole);
    cr_assert_eq(ds_policy_param_set(b.rt, "slo_aware", "prefill_whole", "2"), DS_SUCCESS); /* below decode */
    cr_assert_eq(ds_launch(pf, chunk, t_dim(132), t_dim(128), 0, NULL, NULL), DS_SUCCESS); /* moves at a launch */
    ds_vctx_synchronize(pf);
    p = t_vctx_stats(pf);
    cr_assert(!p.urgent && bound_sms(&b, pf) == 132, "prefill_whole 2: on the whole GPU, not urgent");
    cr_assert_eq(ds_policy_param_set(b.rt, "slo_aware", "prefill_whole", "0"), DS_SUCCESS);
    cr_assert_eq(ds_launch(pf, chunk, t_dim(132), t_dim(128), 0, NULL, NULL), DS_SUCCESS); /* moves at a launch */
    ds_vctx_synchronize(pf);
    cr_assert_eq(bound_sms(&b, pf), 132 - ls_tier_sms(&b), "prefill back on the complement (%u SMs)",
                 bound_sms(&b, pf));
    ds_vctx_destroy(pf);
    bench_close(&b);
}

/* prefill_press: LS prefill overdrawing its TTFT budget (10 late TTFTs
 * against a full budget of 5.12), or with lates clearly over the target's
 * allowance (4 of 20: within the budget), presses decode's tier down: with
 * the headroom of descends_past_several_tiers_at_once_with_headroom, LS
 * steps from 64 to 16 SMs after a quarter of shrink_requests (32), not 128,
 * and its probe holds without a late request. Without the parameter the
 * same TTFTs change nothing: the step comes after 128 requests. */
static int steps_down_after(int press, int on_time, int lates)
{
    bench b;
    bench_open(&b, 2000.0, 100);
    cr_assert_eq(ds_policy_param_set(b.rt, "slo_aware", "prefill_press", press ? "1" : "0"), DS_SUCCESS);
    cr_assert_eq(ds_policy_param_set(b.rt, "slo_aware", "decode_sms", "64"), DS_SUCCESS); /* the descent's start */
    ds_vctx_t pf = prefill_vctx(&b);
    bench_requests(&b, 10, 32); /* sizing starts; the first requests wait for BE's 2 ms kernels */
    for (int i = 0; i < on_time + lates; i++)
        cr_assert_eq(ds_vctx_request_record(pf, i < on_time ? 1000.0 : 1e6), DS_SUCCESS);
    uint64_t late_start = b.late;
    int on_16 = bench_until_on(&b, b.lsk, 32, 16, 300);
    cr_assert(on_16 >= 0, "LS on 16 SMs within 300 requests (%u SMs)", ls_tier_sms(&b));
    cr_assert_eq(b.changes, 1, "64 -> 16 in one move (%d changes)", b.changes);
    bench_stays(&b, 300, 32, 16);
    cr_assert_eq(b.late, late_start, "%llu late", (unsigned long long)(b.late - late_start));
    ds_vctx_destroy(pf);
    bench_close(&b);
    return on_16;
}

Test(slo_aware, prefill_press_steps_decode_down_sooner_where_prefill_misses_its_ttft)
{
    int overdrawn = steps_down_after(1, 0, 10), clear = steps_down_after(1, 16, 4), calm = steps_down_after(0, 0, 10);
    cr_assert(overdrawn < 60, "pressed (budget overdrawn): LS on 16 SMs after %d requests", overdrawn);
    cr_assert(clear < 60, "pressed (lates clearly over): LS on 16 SMs after %d requests", clear);
    cr_assert(calm >= 110, "not pressed: after %d requests (shrink_requests 128)", calm);
    cr_assert(steps_down_after(1, 20, 1) >= 110, "one late TTFT in 21 does not press");
}
