/*
 * slo_aware's sizing rule on its own (src/policy/sizing.c): request counts
 * in, a decision out, with no runtime. A ladder of 32, 64 and 96 SMs, the
 * default constants (target 0.99, shrink_requests 128, dwell 20 ms), one
 * request every millisecond.
 */
#include <criterion/criterion.h>

#include "../src/policy/sizing.h"

typedef struct feed {
    ds_sizing z;
    ds_sizing_input in;
} feed;

static void start_on(feed *f, uint32_t level, uint32_t nlev)
{
    ds_sizing_config cfg;
    ds_sizing_config_default(&cfg);
    cfg.nlev = nlev;
    for (uint32_t k = 0; k < nlev; k++)
        cfg.sms[k] = 32 * (k + 1);
    cfg.start = level;
    ds_sizing_init(&f->z, &cfg);
    f->in = (ds_sizing_input){.req = 1, .now_us = 0, .p99_share = 0.5};
    ds_sizing_action a = ds_sizing_step(&f->z, &f->in);
    cr_assert_eq(a.kind, DS_SIZING_START);
    cr_assert_eq(a.to, (int)level);
}

/* One request (late or not; a late one its own run), then the rule's step. */
static ds_sizing_action one(feed *f, int late)
{
    f->in.req++;
    f->in.now_us += 1000;
    if (late) {
        f->in.over++;
        f->in.runs++;
    }
    return ds_sizing_step(&f->z, &f->in);
}

/* n requests on time; every decision must be to stay. */
static void on_time(feed *f, int n)
{
    for (int i = 0; i < n; i++) {
        ds_sizing_action a = one(f, 0);
        cr_assert_eq(a.kind, DS_SIZING_STAY, "request %d of %d: decision %d", i, n, a.kind);
    }
}

Test(sizing, an_overdrawn_budget_steps_up)
{
    feed f;
    start_on(&f, 1, 3);
    on_time(&f, 4 + 20); /* the grace after the start, then judged requests */
    /* a full budget is 0.01 x 512 = 5.12 late requests (singleton runs: no dispersion), plus what the
     * judged requests earned: 6 lates in a row still leave it positive, the next ones overdraw it */
    double budget = f.z.budget;
    cr_assert_float_eq(budget, 5.12, 1e-9);
    int lates = 0;
    ds_sizing_action a;
    do {
        a = one(&f, 1);
        lates++;
        if (lates <= 5)
            cr_assert_eq(a.kind, DS_SIZING_STAY, "stepped up after %d lates, within the budget", lates);
    } while (a.kind == DS_SIZING_STAY && lates < 20);
    cr_assert_eq(a.kind, DS_SIZING_UP, "kind %d after %d lates", a.kind, lates);
    cr_assert_eq(lates, 6, "the budget (5.12) is overdrawn by the 6th late request, not after %d", lates);
    cr_assert_eq(a.from, 1);
    cr_assert_eq(a.to, 2);
    cr_assert_eq(f.z.lvl, 2);
    cr_assert_float_eq(f.z.budget, ds_sizing_budget_max(&f.z), 1e-9, "a step up starts with a full budget");
}

Test(sizing, a_full_budget_after_shrink_requests_and_dwell_probes_down)
{
    feed f;
    start_on(&f, 2, 3);
    /* 0.7 of the SLO on 96 SMs: 64 SMs leave headroom (0.7 x sqrt(96/64) = 0.86), 32 do not (1.21) */
    f.in.p99_share = 0.7;
    f.z.cfg.dwell_us = 200000; /* 200 requests: the dwell, not the request count, holds the step down */
    on_time(&f, 199);          /* 199 ms on the level (entered at 0 ms), 195 requests judged */
    ds_sizing_action a = one(&f, 0);
    cr_assert_eq(a.kind, DS_SIZING_DOWN, "kind %d after the dwell", a.kind);
    cr_assert_eq(a.to, 1, "to %d: the headroom allows 64 SMs, not 32", a.to);
    cr_assert(f.z.probing, "a step down is a probe");
    cr_assert(f.z.by_shrink);
}

Test(sizing, a_step_down_waits_for_shrink_requests)
{
    feed f;
    start_on(&f, 2, 3);
    f.z.cfg.dwell_us = 0;
    on_time(&f, 4 + 127); /* 127 judged requests: one short of shrink_requests */
    ds_sizing_action a = one(&f, 0);
    cr_assert_eq(a.kind, DS_SIZING_DOWN, "kind %d after shrink_requests", a.kind);
}

/* Pressed (LS prefill beside decode misses its TTFT target), LS steps down
 * after a quarter of shrink_requests (32) and without the dwell (here 200
 * requests long); unpressed, the same requests keep it where it is. */
Test(sizing, pressed_steps_down_after_a_quarter_of_the_requests_without_the_dwell)
{
    feed f, calm;
    start_on(&f, 2, 3);
    start_on(&calm, 2, 3);
    f.z.cfg.dwell_us = calm.z.cfg.dwell_us = 200000;
    f.in.pressed = 1;
    on_time(&f, 4 + 31); /* the grace after the start, then 31 judged requests */
    on_time(&calm, 4 + 31);
    ds_sizing_action a = one(&f, 0);
    cr_assert_eq(a.kind, DS_SIZING_DOWN, "pressed: kind %d after 32 judged requests", a.kind);
    cr_assert(a.to < 2 && f.z.probing, "a probe down (to level %d)", a.to);
    on_time(&calm, 1 + 100); /* 132 judged requests: past shrink_requests, within the dwell */
    cr_assert_eq(calm.z.lvl, 2);
}

/* On 96 of 3 levels with p99 at 0.7 of the SLO and no dwell: 128 judged
 * requests on time step LS down to 64 SMs, as a probe. */
static void probe_from_96(feed *f)
{
    start_on(f, 2, 3);
    f->in.p99_share = 0.7;
    f->z.cfg.dwell_us = 0;
    on_time(f, 4 + 127);
    cr_assert_eq(one(f, 0).kind, DS_SIZING_DOWN);
}

Test(sizing, a_probe_clearly_over_steps_back_up)
{
    feed f;
    probe_from_96(&f);
    on_time(&f, 1 + 9); /* the grace after a step down, then 9 judged requests */
    /* n judged: 0.01 n allowed, clearly over at 2 SDs (at least 1) and one request: over 3.13 lates of 13;
     * the budget (5.12) is still positive after 4 */
    cr_assert_eq(one(&f, 1).kind, DS_SIZING_STAY);
    cr_assert_eq(one(&f, 1).kind, DS_SIZING_STAY);
    cr_assert_eq(one(&f, 1).kind, DS_SIZING_STAY, "3 lates of 12 are not clearly over 0.12 + 2 + 1");
    cr_assert_gt(f.z.budget, 1.0, "the next late request would overdraw the budget: not the probe's test");
    ds_sizing_action a = one(&f, 1);
    cr_assert_eq(a.kind, DS_SIZING_UP, "kind %d: 4 lates of 13 are clearly over", a.kind);
    cr_assert_eq(a.to, 2);
    cr_assert_eq(f.z.fails[1], 1, "the failed probe counts against 64 SMs");
    cr_assert_eq(f.z.retry_req[1], f.in.req + (128u << 4), "backs off 2^(1 + 3) x shrink_requests");
}

Test(sizing, a_probe_that_holds_gives_be_the_sms)
{
    feed f;
    probe_from_96(&f);
    on_time(&f, 1 + 255); /* grace, then 2 x shrink_requests - 1 judged */
    ds_sizing_action a = one(&f, 0);
    cr_assert_eq(a.kind, DS_SIZING_PROBE_HELD, "kind %d after 2 x shrink_requests on time", a.kind);
    cr_assert(!f.z.probing);
}

/* A probe of 64 SMs holds, then runs over the target's allowance (6 lates in
 * the next 240 requests, the budget not yet overdrawn) until it has held for
 * long (held_long x shrink_requests judged). By default the step forgets its
 * failures: growing from it then does not back off. With forget_within_sd 0
 * it forgets only within the allowance, so growing from it backs off as a
 * failed probe does. */
Test(sizing, a_step_held_long_over_its_allowance_backs_off_with_forget_within_sd_0)
{
    feed f[2];
    for (int v = 0; v < 2; v++) {
        probe_from_96(&f[v]);
        f[v].z.cfg.forget_within_sd = v ? 0.0 : -1.0;
        on_time(&f[v], 1 + 255);
        cr_assert_eq(one(&f[v], 0).kind, DS_SIZING_PROBE_HELD);
        f[v].in.p99_share = 0.9; /* no headroom for 32 SMs: LS stays on 64 */
        for (int i = 0; i < 240; i++)
            cr_assert_eq(one(&f[v], i % 40 == 20).kind, DS_SIZING_STAY, "request %d", i);
        on_time(&f[v], 30); /* 526 judged on 64 SMs, 6 late: over 0.01 x 526 */
        cr_assert_eq(f[v].z.by_shrink, v, "forget_within_sd %d: held long and %s", v ? 0 : -1,
                     v ? "over its allowance, not forgotten" : "forgotten");
        ds_sizing_action a;
        while ((a = one(&f[v], 1)).kind == DS_SIZING_STAY)
            ;
        cr_assert_eq(a.kind, DS_SIZING_UP);
        cr_assert_eq(a.to, 2);
    }
    cr_assert_eq(f[0].z.fails[1], 0, "by default growth from a step held long does not back off");
    cr_assert_eq(f[1].z.fails[1], 1, "with forget_within_sd 0 it counts against 64 SMs");
    cr_assert_eq(f[1].z.retry_req[1], f[1].in.req + (128u << 4), "and backs off 2^(1 + 3) x shrink_requests");
}

Test(sizing, overload_on_the_top_level_checks_the_one_below_and_caps_it)
{
    feed f;
    start_on(&f, 2, 3);
    on_time(&f, 4);
    /* every tenth request late on every level: far over 1%, on the top level too */
    int checked = 0, capped = 0, warned = 0;
    for (int i = 1; i <= 2000 && !capped; i++) {
        ds_sizing_action a = one(&f, i % 10 == 0);
        warned += a.warn_top;
        cr_assert(a.kind != DS_SIZING_UP && a.kind != DS_SIZING_TOP_MISSED, "kind %d at request %d", a.kind, i);
        if (a.kind == DS_SIZING_CAP_CHECK) {
            cr_assert_eq(a.from, 2);
            cr_assert_eq(a.to, 1);
            cr_assert_geq(i, 256, "checked after %d requests, before 2 x shrink_requests", i);
            checked = i;
        }
        if (a.kind == DS_SIZING_CAPPED) {
            cr_assert(checked, "capped before the check");
            cr_assert_eq(a.from, 1);
            cr_assert_geq(i - checked, 1 + 256, "capped after %d requests of the check", i - checked);
            capped = i;
        }
    }
    cr_assert_eq(warned, 1, "the top level's miss is reported once, not %d times", warned);
    cr_assert(checked, "no overload check of 64 SMs");
    cr_assert(capped, "64 SMs, as late as 96, never became the cap");
    cr_assert_eq(f.z.cap, 1);
    cr_assert_eq(f.z.lvl, 1);
}

Test(sizing, a_miss_on_the_largest_tier_asks_for_reserve_mode_where_be_allows)
{
    feed f;
    start_on(&f, 2, 3);
    f.in.may_expand = 1;
    on_time(&f, 4 + 20);
    ds_sizing_action a = {.kind = DS_SIZING_STAY};
    for (int i = 0; i < 6 && a.kind == DS_SIZING_STAY; i++)
        a = one(&f, 1);
    cr_assert_eq(a.kind, DS_SIZING_TOP_MISSED, "kind %d", a.kind);
    cr_assert_eq(f.z.lvl, 2);
}

Test(sizing, held_requests_are_not_judged)
{
    feed f;
    start_on(&f, 1, 3);
    on_time(&f, 4 + 20); /* past the start's grace */
    f.in.phase = DS_SIZING_HOLD;
    for (int i = 0; i < 50; i++)
        cr_assert_eq(one(&f, 1).kind, DS_SIZING_STAY, "a late request judged while BE moves");
    cr_assert_float_eq(f.z.budget, 5.12, 1e-9, "the budget moved while nothing was judged");
    cr_assert_eq(f.z.base_over, f.in.over, "the level is judged from the held requests' counts on");
    f.in.phase = DS_SIZING_JUDGE;
    on_time(&f, 1); /* judged again from here: the held lates are not the level's */
    cr_assert_float_eq(f.z.budget, 5.12, 1e-9);
}
