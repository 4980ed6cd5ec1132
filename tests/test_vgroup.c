/* vCtx groups on two simulated devices: a tensor-parallel group (one LS vCtx
 * per device) and a data-parallel group (one BE vCtx per device) under
 * slo_aware, with a thread per device as a serving engine has a thread per
 * rank. Every rank's k-th unit runs on the tier of rank 0's k-th unit; a
 * rank that stops or leaves gives the others a clear status within the
 * teardown timeout; a group spans two processes through shared memory. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <detshare/policy.h>

#include "common.h"

#define STEPS 150
#define BE_PER_STEP 3
#define GAP_US 1000.0
#define LS_UNITS STEPS
#define BE_UNITS (STEPS * BE_PER_STEP)

static double wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One rank's device: an LS vCtx (rank `rank` of "tp") and a BE vCtx (of
 * "ddp"), or neither grouped when `grouped` is 0. */
typedef struct rank_run {
    uint32_t rank;
    int grouped;
    const char *ls_sms; /* this device's slo_aware ls_sms (NULL: default) */
    const char *tag;    /* group names' suffix, unique per test */
    uint32_t ls_tier[LS_UNITS], be_tier[BE_UNITS]; /* SMs of the pCtx each unit ran on */
    uint64_t ls_group_units, be_group_units;
    int stop_at;             /* > 0: the thread stops before this step until `resume` */
    atomic_int *resume;
    uint32_t timeout_ms;     /* the runtime's teardown timeout (0: default) */
    int steps;               /* steps run without a failure */
    double failed_at_ms;     /* wall time of the first failure */
    double failed_after_ms;  /* ... from the start of its step */
    char error[256];         /* the first failure's message */
    ds_status last;
} rank_run;

#define TRY(r, call)                                                                                             \
    do {                                                                                                         \
        ds_status st_ = (call);                                                                                  \
        if (st_ != DS_SUCCESS && (r)->last == DS_SUCCESS) {                                                      \
            (r)->last = st_;                                                                                     \
            snprintf((r)->error, sizeof (r)->error, "%s", ds_last_error_message());                              \
            (r)->failed_at_ms = wall_ms();                                                                       \
        }                                                                                                        \
    } while (0)

static uint32_t tier_of(ds_runtime_t rt, ds_vctx_t v)
{
    uint32_t p = 0;
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    if (ds_vctx_get_pctx(v, &p) != DS_SUCCESS || ds_runtime_info_get(rt, &info) != DS_SUCCESS)
        return 0;
    return info.pctx[p].sm_count;
}

static void *rank_main(void *arg)
{
    rank_run *r = arg;
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, "slo_aware");
    if (r->timeout_ms)
        cfg.teardown_timeout_ms = r->timeout_ms;
    ds_runtime_t rt = NULL;
    TRY(r, ds_runtime_create(&cfg, &rt));
    if (!rt)
        return NULL;
    if (r->ls_sms)
        TRY(r, ds_policy_param_set(rt, "slo_aware", "ls_sms", r->ls_sms));
    CUfunction lsk = NULL, bek = NULL;
    ds_sim_kernel_desc d = DS_SIM_KERNEL_DESC_INIT;
    d.name = "decode";
    d.block_us = 20.0;
    TRY(r, ds_sim_kernel_create(rt, &d, &lsk));
    d.name = "train";
    d.block_us = 300.0;
    TRY(r, ds_sim_kernel_create(rt, &d, &bek));
    char tp[48], ddp[48];
    snprintf(tp, sizeof tp, "tp-%s", r->tag);
    snprintf(ddp, sizeof ddp, "ddp-%s", r->tag);
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = "tp";
    a.cls = DS_CLASS_LATENCY_SENSITIVE;
    a.slo_us = 250;
    a.group = r->grouped ? tp : NULL;
    a.group_ranks = 2;
    a.group_rank = r->rank;
    ds_vctx_t ls = NULL, be = NULL;
    TRY(r, ds_vctx_create(rt, &a, &ls));
    a.name = "ddp";
    a.cls = DS_CLASS_BEST_EFFORT;
    a.slo_us = 0;
    a.group = r->grouped ? ddp : NULL;
    TRY(r, ds_vctx_create(rt, &a, &be));
    if (r->last != DS_SUCCESS)
        return NULL;
    ds_launch_hints h = DS_LAUNCH_HINTS_INIT;
    h.expected_us = 300.0;
    double next = t_sim_now(rt) + GAP_US;
    for (int i = 0; i < STEPS && r->last == DS_SUCCESS; i++) {
        if (r->stop_at > 0 && i == r->stop_at) /* a rank whose thread stops */
            while (!atomic_load(r->resume))
                sched_yield();
        double t0 = wall_ms();
        for (int j = 0; j < BE_PER_STEP; j++) {
            TRY(r, ds_launch(be, bek, t_dim(264), t_dim(128), 0, NULL, &h));
            r->be_tier[i * BE_PER_STEP + j] = tier_of(rt, be);
            ds_runtime_poll(rt);
        }
        if (t_sim_now(rt) < next)
            ds_sim_sleep_until(rt, next);
        next = (next > t_sim_now(rt) ? next : t_sim_now(rt)) + GAP_US;
        ds_request_t req;
        double lat = 0;
        TRY(r, ds_vctx_request_begin(ls, &req));
        TRY(r, ds_launch(ls, lsk, t_dim(128), t_dim(64), 0, NULL, NULL));
        r->ls_tier[i] = tier_of(rt, ls);
        TRY(r, ds_vctx_synchronize(ls));
        TRY(r, ds_vctx_request_end(ls, req, &lat));
        ds_runtime_poll(rt);
        if (r->last == DS_SUCCESS)
            r->steps++;
        else
            r->failed_after_ms = r->failed_at_ms - t0;
    }
    if (r->resume) /* the other rank may go on now */
        atomic_store(r->resume, 1);
    r->ls_group_units = t_vctx_stats(ls).group_units;
    r->be_group_units = t_vctx_stats(be).group_units;
    TRY(r, ds_vctx_synchronize(be));
    TRY(r, ds_vctx_destroy(ls));
    TRY(r, ds_vctx_destroy(be));
    TRY(r, ds_runtime_destroy(rt));
    return NULL;
}

static void run_ranks(rank_run *a, rank_run *b)
{
    t_run_pair(rank_main, a, b);
    cr_assert_eq(a->last, DS_SUCCESS, "rank 0: %s", ds_status_name(a->last));
    cr_assert_eq(b->last, DS_SUCCESS, "rank 1: %s", ds_status_name(b->last));
}

static int distinct(const uint32_t *x, int n)
{
    int d = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = x[j] == x[i];
        d += !seen;
    }
    return d;
}

/* Device 1's own slo_aware would run LS on 16 SMs (ls_sms 16); grouped, both
 * of its vCtxs run every unit where rank 0's did, while the tiers move with
 * the load (BE confined beside LS, expanded when LS is idle). Ungrouped, the
 * same two devices place differently: the check can fail. */
Test(vgroup, every_ranks_kth_unit_runs_on_rank_0s_tier)
{
    rank_run *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    a->grouped = b->grouped = 1;
    a->tag = b->tag = "tiers";
    b->rank = 1;
    b->ls_sms = "16";
    run_ranks(a, b);
    for (int k = 0; k < LS_UNITS; k++)
        cr_assert_eq(b->ls_tier[k], a->ls_tier[k], "TP unit %d: rank 1 on %u SMs, rank 0 on %u", k, b->ls_tier[k],
                     a->ls_tier[k]);
    for (int k = 0; k < BE_UNITS; k++)
        cr_assert_eq(b->be_tier[k], a->be_tier[k], "DDP unit %d: rank 1 on %u SMs, rank 0 on %u", k, b->be_tier[k],
                     a->be_tier[k]);
    cr_assert_geq(distinct(a->be_tier, BE_UNITS), 2, "BE stayed on one tier: the check would be trivial");
    cr_assert_eq(a->ls_group_units, LS_UNITS);
    cr_assert_eq(b->ls_group_units, LS_UNITS);
    cr_assert_eq(b->be_group_units, BE_UNITS);

    rank_run *c = calloc(1, sizeof *c), *e = calloc(1, sizeof *e);
    c->tag = e->tag = "control";
    e->rank = 1;
    e->ls_sms = "16";
    run_ranks(c, e);
    cr_assert_eq(e->ls_group_units, 0);
    cr_assert_neq(memcmp(c->ls_tier, e->ls_tier, sizeof c->ls_tier), 0,
                  "ungrouped, the devices' LS tiers agree anyway: the grouped check proves nothing");
    free(a);
    free(b);
    free(c);
    free(e);
}

/* ------------------------------------------------------------------------ */
/* a rank that stops or leaves                                               */

/* Rank 0's thread stops before step 20 (it launches nothing more, its vCtxs
 * stay): rank 1's thread gets DS_ERR_TIMEOUT within the teardown timeout,
 * naming rank 0, at its first unit past what rank 0 decided. Once rank 1
 * has given up, rank 0 resumes and finds rank 1 behind (its step 20's
 * units wait for rank 1, which has stopped) and fails the same way. */
Test(vgroup, a_rank_whose_thread_stops_gives_the_others_a_timeout)
{
    atomic_int resume = 0;
    rank_run *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    a->grouped = b->grouped = 1;
    a->tag = b->tag = "stops";
    b->rank = 1;
    a->stop_at = 20;
    a->resume = b->resume = &resume;
    a->timeout_ms = b->timeout_ms = 300;
    t_run_pair(rank_main, a, b);
    cr_assert_eq(b->last, DS_ERR_TIMEOUT, "rank 1: %s", ds_status_name(b->last));
    cr_assert_eq(b->steps, 20, "rank 1 ran %d steps", b->steps);
    cr_assert(strstr(b->error, "rank 0 has not decided unit"), "%s", b->error);
    cr_assert_lt(b->failed_after_ms, 300.0 + 500.0 * T_SANITIZER_SLOWDOWN, "after %.0f ms", b->failed_after_ms);
    cr_assert_neq(a->last, DS_SUCCESS, "rank 0 went on alone");
    free(a);
    free(b);
}

typedef struct pair {
    ds_runtime_t rt[2];
    ds_vctx_t v[2];
    CUfunction k[2];
} pair;

static void pair_open(pair *p, const char *group, uint32_t timeout_ms)
{
    for (uint32_t r = 0; r < 2; r++) {
        ds_sim_config sim = DS_SIM_CONFIG_INIT;
        ds_runtime_config cfg = t_polled_config(&sim, "slo_aware");
        cfg.teardown_timeout_ms = timeout_ms;
        p->rt[r] = t_runtime_create(&cfg);
        p->k[r] = t_sim_kernel(p->rt[r], "step", 10.0, 0, NULL);
        ds_vctx_attr a = DS_VCTX_ATTR_INIT;
        a.group = group;
        a.group_ranks = 2;
        a.group_rank = r;
        cr_assert_eq(ds_vctx_create(p->rt[r], &a, &p->v[r]), DS_SUCCESS, "%s", ds_last_error_message());
    }
}

static ds_status step(pair *p, uint32_t r)
{
    return ds_launch(p->v[r], p->k[r], t_dim(8), t_dim(32), 0, NULL, NULL);
}

/* Rank 0 stops after 5 units: rank 1's 6th launch fails with DS_ERR_TIMEOUT
 * within the teardown timeout, naming rank 0; once rank 0 destroys its vCtx,
 * rank 1's next launch fails at once with DS_ERR_PEER_LOST. One thread plays
 * both ranks: a stopped thread is one that launches nothing. */
Test(vgroup, a_stopped_rank_0_times_out_and_a_departed_one_fails_fast)
{
    t_log_capture(DS_LOG_WARN);
    pair p;
    pair_open(&p, "stall-0", 300);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(step(&p, 0), DS_SUCCESS);
        cr_assert_eq(step(&p, 1), DS_SUCCESS);
    }
    double t0 = wall_ms();
    cr_assert_eq(step(&p, 1), DS_ERR_TIMEOUT);
    double waited = wall_ms() - t0;
    cr_assert(strstr(ds_last_error_message(), "rank 0 has not decided unit 5"), "%s", ds_last_error_message());
    cr_assert_geq(waited, 290.0);
    cr_assert_lt(waited, 300.0 + 500.0 * T_SANITIZER_SLOWDOWN, "waited %.0f ms", waited);
    cr_assert_eq(ds_vctx_destroy(p.v[0]), DS_SUCCESS);
    t0 = wall_ms();
    cr_assert_eq(step(&p, 1), DS_ERR_PEER_LOST);
    cr_assert_lt(wall_ms() - t0, 100.0 * T_SANITIZER_SLOWDOWN);
    cr_assert(strstr(ds_last_error_message(), "rank 0 left after deciding 5 units"), "%s", ds_last_error_message());
    cr_assert_eq(ds_vctx_destroy(p.v[1]), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(p.rt[0]), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(p.rt[1]), DS_SUCCESS);
}

/* Rank 1 stops: rank 0 runs 256 units ahead (the ring), then times out
 * naming rank 1; once rank 1 destroys its vCtx, rank 0 fails at once. */
Test(vgroup, a_stopped_follower_holds_rank_0_to_the_ring_then_times_out)
{
    t_log_capture(DS_LOG_WARN);
    pair p;
    pair_open(&p, "stall-1", 200);
    cr_assert_eq(step(&p, 0), DS_SUCCESS);
    cr_assert_eq(step(&p, 1), DS_SUCCESS);
    int ok = 0;
    ds_status st;
    while ((st = step(&p, 0)) == DS_SUCCESS && ok < 1000)
        ok++;
    cr_assert_eq(st, DS_ERR_TIMEOUT, "%s", ds_status_name(st));
    cr_assert_eq(ok, 256, "rank 0 ran %d units ahead", ok);
    cr_assert(strstr(ds_last_error_message(), "rank 1 has followed 1 units"), "%s", ds_last_error_message());
    /* the follower catches up on what was decided, then leaves */
    for (int i = 0; i < 10; i++)
        cr_assert_eq(step(&p, 1), DS_SUCCESS);
    cr_assert_eq(ds_vctx_destroy(p.v[1]), DS_SUCCESS);
    double t0 = wall_ms();
    for (int i = 0; i < 20 && (st = step(&p, 0)) == DS_SUCCESS; i++)
        ;
    cr_assert_eq(st, DS_ERR_PEER_LOST, "%s", ds_status_name(st));
    cr_assert_lt(wall_ms() - t0, 100.0 * T_SANITIZER_SLOWDOWN);
    cr_assert(strstr(ds_last_error_message(), "rank 1 left after 11 units"), "%s", ds_last_error_message());
    cr_assert_eq(ds_vctx_destroy(p.v[0]), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(p.rt[0]), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(p.rt[1]), DS_SUCCESS);
}

/* Ranks that end at different times: rank 0 finishes its units and leaves
 * first; rank 1 still runs all of its own, on decisions already made. */
Test(vgroup, ranks_that_end_at_different_times_do_not_fail)
{
    pair p;
    pair_open(&p, "ends", 1000);
    for (int i = 0; i < 50; i++)
        cr_assert_eq(step(&p, 0), DS_SUCCESS);
    cr_assert_eq(ds_vctx_destroy(p.v[0]), DS_SUCCESS);
    for (int i = 0; i < 50; i++)
        cr_assert_eq(step(&p, 1), DS_SUCCESS, "unit %d: %s", i, ds_last_error_message());
    cr_assert_eq(t_vctx_stats(p.v[1]).group_units, 50);
    cr_assert_eq(ds_vctx_destroy(p.v[1]), DS_SUCCESS);
    /* the name is free again */
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.group = "ends";
    a.group_ranks = 3;
    ds_vctx_t v;
    cr_assert_eq(ds_vctx_create(p.rt[0], &a, &v), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(p.rt[0]), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(p.rt[1]), DS_SUCCESS);
}

/* Policy actions that would place a rank > 0 are accepted and ignored: it
 * stays where rank 0's decisions put it. */
Test(vgroup, policy_actions_do_not_place_a_follower)
{
    pair p;
    pair_open(&p, "actions", 1000);
    cr_assert_eq(ds_runtime_set_policy(p.rt[0], "manual"), DS_SUCCESS);
    cr_assert_eq(ds_runtime_set_policy(p.rt[1], "manual"), DS_SUCCESS);
    uint32_t low0 = t_pctx(p.rt[0], DS_ANCHOR_LOW, 64), low1 = t_pctx(p.rt[1], DS_ANCHOR_LOW, 64);
    cr_assert_eq(ds_vctx_remap(p.v[0], low0), DS_SUCCESS);
    cr_assert_eq(ds_vctx_remap(p.v[1], t_pctx(p.rt[1], DS_ANCHOR_HIGH, 68)), DS_SUCCESS);
    cr_assert_eq(ds_vctx_set_window(p.v[1], 500), DS_SUCCESS);
    cr_assert_eq(step(&p, 0), DS_SUCCESS);
    cr_assert_eq(step(&p, 1), DS_SUCCESS);
    uint32_t at = 99;
    cr_assert_eq(ds_vctx_get_pctx(p.v[1], &at), DS_SUCCESS);
    cr_assert_eq(at, low1, "rank 1 on pCtx %u, rank 0's tier is %u here", at, low1);
    cr_assert_eq(t_vctx_stats(p.v[1]).window_us, t_vctx_stats(p.v[0]).window_us, "rank 1 took its own window");
    for (int r = 0; r < 2; r++)
        cr_assert_eq(ds_vctx_destroy(p.v[r]), DS_SUCCESS);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(ds_runtime_destroy(p.rt[r]), DS_SUCCESS);
}

/* Bad group attributes: a clear status and a log line, nothing created. */
Test(vgroup, bad_attributes_are_refused)
{
    t_log_capture(DS_LOG_ERROR);
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    ds_vctx_t v = NULL, w = NULL;
    const char *bad_names[] = {"", "has space", "a/b", "0123456789012345678901234567890123456789012345678"};
    a.group_ranks = 2;
    for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++) {
        a.group = bad_names[i];
        cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_ERR_INVALID_ARGUMENT, "name '%s'", bad_names[i]);
    }
    a.group = "g";
    a.group_ranks = 1;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_ERR_INVALID_ARGUMENT);
    a.group_ranks = DS_VCTX_GROUP_MAX_RANKS + 1;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_ERR_INVALID_ARGUMENT);
    a.group_ranks = 2;
    a.group_rank = 2;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(ds_last_error_message(), "group_rank 2"), "%s", ds_last_error_message());
    a.group_rank = 0;
    a.group_flags = 4;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_ERR_INVALID_ARGUMENT);
    a.group_flags = 0;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_SUCCESS);
    cr_assert_eq(ds_vctx_create(rt, &a, &w), DS_ERR_ALREADY_EXISTS, "rank 0 twice");
    a.group_ranks = 4;
    a.group_rank = 1;
    cr_assert_eq(ds_vctx_create(rt, &a, &w), DS_ERR_INVALID_ARGUMENT, "a different size");
    cr_assert(strstr(ds_last_error_message(), "has 2 ranks"), "%s", ds_last_error_message());
    cr_assert_gt(t_log_count(DS_LOG_ERROR), 0);
    /* the attribute struct before groups is still accepted, as no group */
    ds_vctx_attr old = DS_VCTX_ATTR_INIT;
    old.size = DS_VCTX_ATTR_SIZE_V1;
    cr_assert_eq(ds_vctx_create(rt, &old, &w), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(t_vctx_stats(w).group_units, 0);
    cr_assert_eq(ds_vctx_destroy(w), DS_SUCCESS);
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

/* ------------------------------------------------------------------------ */
/* across processes                                                          */

/* Rank `rank` of the shared group `name` on a device of its own: a BE vCtx
 * (a data-parallel replica, the grouped one) of `units` units beside LS
 * requests of its own device, as in rank_main; each BE unit's tier (SMs)
 * is written to `fd` (-1: none); with `die_at` >= 0 the process kills
 * itself before that unit. Runs in a child process too: no Criterion
 * asserts. Returns 0 on success. */
static int shared_rank(const char *name, uint32_t rank, int units, int die_at, int fd, ds_status *last)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, "slo_aware");
    cfg.teardown_timeout_ms = 10000;
    ds_runtime_t rt = NULL;
    if ((*last = ds_runtime_create(&cfg, &rt)) != DS_SUCCESS)
        return 1;
    if (rank == 1)
        ds_policy_param_set(rt, "slo_aware", "ls_sms", "16");
    CUfunction lsk = NULL, bek = NULL;
    ds_sim_kernel_desc d = DS_SIM_KERNEL_DESC_INIT;
    d.name = "decode";
    d.block_us = 20.0;
    ds_sim_kernel_create(rt, &d, &lsk);
    d.name = "train";
    d.block_us = 300.0;
    ds_sim_kernel_create(rt, &d, &bek);
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = "ls";
    a.cls = DS_CLASS_LATENCY_SENSITIVE;
    a.slo_us = 250;
    ds_vctx_t ls = NULL, be = NULL;
    if ((*last = ds_vctx_create(rt, &a, &ls)) != DS_SUCCESS)
        return 1;
    a.name = "ddp";
    a.cls = DS_CLASS_BEST_EFFORT;
    a.slo_us = 0;
    a.group = name;
    a.group_ranks = 2;
    a.group_rank = rank;
    a.group_flags = DS_VCTX_GROUP_SHARED;
    if ((*last = ds_vctx_create(rt, &a, &be)) != DS_SUCCESS)
        return 1;
    ds_launch_hints h = DS_LAUNCH_HINTS_INIT;
    h.expected_us = 300.0;
    double next = t_sim_now(rt) + GAP_US;
    for (int i = 0; i < units; i++) {
        if (i == die_at)
            raise(SIGKILL);
        if ((*last = ds_launch(be, bek, t_dim(264), t_dim(128), 0, NULL, &h)) != DS_SUCCESS)
            return 1;
        uint32_t sms = tier_of(rt, be);
        if (fd >= 0 && write(fd, &sms, sizeof sms) != (ssize_t)sizeof sms)
            return 1;
        ds_runtime_poll(rt);
        if (i % BE_PER_STEP == BE_PER_STEP - 1) { /* an LS request every GAP_US */
            if (t_sim_now(rt) < next)
                ds_sim_sleep_until(rt, next);
            next = (next > t_sim_now(rt) ? next : t_sim_now(rt)) + GAP_US;
            ds_request_t req;
            double lat = 0;
            ds_vctx_request_begin(ls, &req);
            ds_launch(ls, lsk, t_dim(128), t_dim(64), 0, NULL, NULL);
            ds_vctx_synchronize(ls);
            ds_vctx_request_end(ls, req, &lat);
            ds_runtime_poll(rt);
        }
    }
    ds_vctx_synchronize(be);
    *last = ds_vctx_destroy(be);
    ds_vctx_destroy(ls);
    ds_runtime_destroy(rt);
    return *last != DS_SUCCESS;
}

#define SHARED_UNITS BE_UNITS

static int shm_exists(const char *name)
{
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/detshare.vgroup.%s", name);
    return access(path, F_OK) == 0;
}

/* Rank 0 here, rank 1 in a child process: rank 1's tiers are rank 0's, unit
 * for unit, and the shared-memory object is gone at the end. */
Test(vgroup, a_group_spans_two_processes_through_shared_memory)
{
    char name[48];
    snprintf(name, sizeof name, "xproc-%d", (int)getpid());
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t child = fork();
    cr_assert_neq(child, -1);
    if (child == 0) {
        close(fds[0]);
        ds_status last = DS_SUCCESS;
        int rc = shared_rank(name, 1, SHARED_UNITS, -1, fds[1], &last);
        if (rc)
            fprintf(stderr, "rank 1: %s: %s\n", ds_status_name(last), ds_last_error_message());
        _exit(rc);
    }
    close(fds[1]);
    int mine[2];
    cr_assert_eq(pipe(mine), 0);
    ds_status last = DS_SUCCESS;
    int rc = shared_rank(name, 0, SHARED_UNITS, -1, mine[1], &last);
    cr_assert_eq(rc, 0, "rank 0: %s: %s", ds_status_name(last), ds_last_error_message());
    close(mine[1]);
    uint32_t a[SHARED_UNITS], b[SHARED_UNITS];
    for (int i = 0; i < SHARED_UNITS; i++) {
        cr_assert_eq(read(mine[0], &a[i], sizeof a[i]), (ssize_t)sizeof a[i]);
        cr_assert_eq(read(fds[0], &b[i], sizeof b[i]), (ssize_t)sizeof b[i], "rank 1 wrote %d units", i);
    }
    int status = 0;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 1's process failed (%d)", status);
    for (int i = 0; i < SHARED_UNITS; i++)
        cr_assert_eq(b[i], a[i], "unit %d: rank 1 on %u SMs, rank 0 on %u", i, b[i], a[i]);
    cr_assert_geq(distinct(a, SHARED_UNITS), 2, "one tier throughout (%u SMs): the check would be trivial", a[0]);
    cr_assert(!shm_exists(name), "the group's shared-memory object is left behind");
}

/* Processes that die: (1) a rank whose process died alone leaves its group
 * behind; the next process to join finds every member gone and starts it
 * afresh. (2) rank 1's process dies after 10 units while rank 0 runs: rank
 * 0 fails fast with DS_ERR_PEER_LOST once it needs rank 1 (not after the
 * teardown timeout). SIGCHLD ignored: the dead are reaped at once, as a
 * peer process's would be by its own parent. */
Test(vgroup, a_rank_whose_process_dies_fails_the_others_fast)
{
    t_log_capture(DS_LOG_WARN);
    signal(SIGCHLD, SIG_IGN);
    char name[48];
    snprintf(name, sizeof name, "dies-%d", (int)getpid());
    pid_t child = fork();
    cr_assert_neq(child, -1);
    if (child == 0) {
        ds_status last = DS_SUCCESS;
        _exit(shared_rank(name, 1, 1000, 0, -1, &last));
    }
    waitpid(child, NULL, 0); /* ECHILD once it is gone */
    cr_assert(shm_exists(name), "the dead rank's group should be left behind");

    int go[2];
    cr_assert_eq(pipe(go), 0);
    child = fork();
    cr_assert_neq(child, -1);
    if (child == 0) {
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) != 1)
            _exit(3);
        ds_status last = DS_SUCCESS;
        _exit(shared_rank(name, 1, 1000, 10, -1, &last));
    }
    close(go[0]);
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, "slo_aware");
    cfg.teardown_timeout_ms = 60000;
    ds_runtime_t rt = t_runtime_create(&cfg);
    CUfunction k = t_sim_kernel(rt, "step", 10.0, 0, NULL);
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.group = name;
    a.group_ranks = 2;
    a.group_flags = DS_VCTX_GROUP_SHARED;
    ds_vctx_t v = NULL;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(write(go[1], "g", 1), 1);
    double t0 = wall_ms();
    ds_status st = DS_SUCCESS;
    int ok = 0;
    while (ok < 1000 && (st = ds_launch(v, k, t_dim(8), t_dim(32), 0, NULL, NULL)) == DS_SUCCESS)
        ok++;
    double took = wall_ms() - t0;
    cr_assert_eq(st, DS_ERR_PEER_LOST, "%s after %d units", ds_status_name(st), ok);
    /* it runs ahead of rank 1 by up to the ring (256 units), and learns of
     * the death when it next waits for rank 1 */
    cr_assert(ok >= 10 && ok <= 10 + 256, "rank 0 ran %d units: %s", ok, ds_last_error_message());
    cr_assert(strstr(ds_last_error_message(), "rank 1 left after 10 units"), "%s", ds_last_error_message());
    cr_assert_lt(took, 2000.0 * T_SANITIZER_SLOWDOWN, "not fast: %.0f ms (the timeout is 60 s)", took);
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
    cr_assert(!shm_exists(name), "the group's shared-memory object is left behind");
    signal(SIGCHLD, SIG_DFL);
}

/* What another process left in a shared group's name: an object of the
 * wrong size (another version, or a creator that died before sizing it)
 * and one never initialised. Each is refused with a status that says so,
 * after the bounded wait for a creator still at work; nothing is joined. */
Test(vgroup, a_broken_shared_memory_object_is_refused_clearly)
{
    t_log_capture(DS_LOG_WARN);
    char name[48], path[96];
    snprintf(name, sizeof name, "broken-%d", (int)getpid());
    snprintf(path, sizeof path, "/detshare.vgroup.%s", name);
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.group = name;
    a.group_ranks = 2;
    a.group_flags = DS_VCTX_GROUP_SHARED;
    ds_vctx_t v = NULL;

    int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 100), 0);
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(ds_last_error_message(), "is 100 bytes"), "%s", ds_last_error_message());

    struct stat sb;
    cr_assert_eq(ftruncate(fd, 0), 0);
    /* the right size, all zero: its creator never finished */
    ds_vctx_attr probe = a;
    probe.group = "sizer";
    ds_vctx_t w = NULL;
    cr_assert_eq(ds_vctx_create(rt, &probe, &w), DS_SUCCESS, "%s", ds_last_error_message());
    char sizer[96];
    snprintf(sizer, sizeof sizer, "/dev/shm/detshare.vgroup.sizer");
    cr_assert_eq(stat(sizer, &sb), 0);
    cr_assert_eq(ds_vctx_destroy(w), DS_SUCCESS);
    cr_assert_eq(ftruncate(fd, sb.st_size), 0);
    close(fd);
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_ERR_TIMEOUT);
    cr_assert(strstr(ds_last_error_message(), "never initialised"), "%s", ds_last_error_message());
    shm_unlink(path);
    cr_assert_geq(t_log_count(DS_LOG_ERROR), 1, "the wrong size is logged");
    cr_assert_geq(t_log_count(DS_LOG_WARN), 1, "the timeout is logged");
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

/* ---- graphs cut from a measuring step ------------------------------------------------ */

#define CUT_GRAPHS 32

/* One rank of a group whose vCtx launches a chain of `nk` kernels of
 * `kernel_us` each as a graph cut under a 1,000-us bound. */
typedef struct cut_rank {
    uint32_t rank;
    const char *group; /* NULL: not grouped */
    double kernel_us;
    int nk;
    ds_runtime_t rt;
    CUfunction k;
    int ngraphs;               /* graphs of the chain (0: 1), made in turn */
    int launches;              /* launches of each (0: 4) */
    _Atomic int *go;           /* not NULL: waits for it before its graphs (rank 1), or sets it after (rank 0) */
    _Atomic int *end;          /* not NULL: sets it when done (rank 1), or waits for it before leaving (rank 0) */
    double graphs_ms;          /* making and launching its graphs */
    uint32_t segs_of[CUT_GRAPHS]; /* each graph's segments */
    uint32_t nodes[16];           /* the first graph's segments' nodes */
    uint64_t group_units;
    ds_status last;
    char error[256];
    double failed_at_ms; /* TRY's */
} cut_rank;

/* Bounded, so that a rank that failed before setting it fails the test
 * through its status instead of hanging it. */
static void wait_flag(_Atomic int *f)
{
    for (int i = 0; i < 30000 && !atomic_load(f); i++)
        usleep(1000);
}

static int capture_chain(CUstream s, void *user)
{
    cut_rank *r = user;
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    if (ds_runtime_info_get(r->rt, &in) != DS_SUCCESS)
        return 1;
    for (int i = 0; i < r->nk; i++)
        if (ds_sim_launch_on_stream(r->rt, s, r->k, t_dim(in.sm_count), t_dim(128), NULL) != DS_SUCCESS)
            return 1;
    return 0;
}

static void *cut_main(void *arg)
{
    cut_rank *r = arg;
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, NULL);
    TRY(r, ds_runtime_create(&cfg, &r->rt));
    if (!r->rt)
        return NULL;
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    TRY(r, ds_runtime_info_get(r->rt, &in));
    ds_sim_kernel_desc d = DS_SIM_KERNEL_DESC_INIT;
    d.name = "layer";
    d.block_us = r->kernel_us;
    TRY(r, ds_sim_kernel_create(r->rt, &d, &r->k));
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = "train";
    a.cls = DS_CLASS_BEST_EFFORT;
    for (uint32_t p = 0; p < in.num_pctx; p++)
        if (in.pctx[p].sm_count == in.sm_count)
            a.initial_pctx = (int32_t)p;
    a.group = r->group;
    a.group_ranks = 2;
    a.group_rank = r->rank;
    ds_vctx_t v = NULL;
    TRY(r, ds_vctx_create(r->rt, &a, &v));
    ds_graph_attr ga = DS_GRAPH_ATTR_INIT;
    ga.name = "step";
    ga.segment_us = 1000;
    const int ngraphs = r->ngraphs ? r->ngraphs : 1, launches = r->launches ? r->launches : 4;
    ds_graph_t graphs[CUT_GRAPHS] = {NULL};
    if (r->go && r->rank)
        wait_flag(r->go);
    double t0 = wall_ms();
    for (int k = 0; k < ngraphs && k < CUT_GRAPHS && r->last == DS_SUCCESS; k++) {
        TRY(r, ds_graph_create(v, capture_chain, r, &ga, &graphs[k]));
        for (int i = 0; i < launches && r->last == DS_SUCCESS; i++)
            TRY(r, ds_graph_launch(v, graphs[k]));
    }
    if (r->last == DS_SUCCESS)
        TRY(r, ds_vctx_synchronize(v));
    r->graphs_ms = wall_ms() - t0;
    if (r->go && !r->rank)
        atomic_store(r->go, 1);
    for (int k = 0; k < ngraphs && k < CUT_GRAPHS && r->last == DS_SUCCESS; k++) {
        ds_graph_stats gs = DS_GRAPH_STATS_INIT;
        TRY(r, ds_graph_get_stats(graphs[k], &gs));
        r->segs_of[k] = gs.segments;
    }
    if (r->last == DS_SUCCESS) {
        for (uint32_t k = 0; k < r->segs_of[0] && k < 16; k++) {
            ds_graph_segment sg = DS_GRAPH_SEGMENT_INIT;
            TRY(r, ds_graph_get_segment(graphs[0], k, &sg));
            r->nodes[k] = sg.nodes;
        }
        r->group_units = t_vctx_stats(v).group_units;
    }
    if (r->end && r->rank)
        atomic_store(r->end, 1);
    else if (r->end)
        wait_flag(r->end); /* stays until rank 1 has looked for its cuts */
    if (v)
        TRY(r, ds_vctx_destroy(v));
    TRY(r, ds_runtime_destroy(r->rt));
    return NULL;
}

static void cut_pair(cut_rank *a, cut_rank *b)
{
    t_run_pair(cut_main, a, b);
    cr_assert_eq(a->last, DS_SUCCESS, "rank 0: %s", a->error);
    cr_assert_eq(b->last, DS_SUCCESS, "rank 1: %s", b->error);
}

/* Each rank would cut its own step differently (rank 0's kernels take 250
 * us, four to a segment; rank 1's 100 us, ten to a segment); grouped, rank 1
 * cuts where rank 0 did, so the ranks' steps are the same units. */
Test(vgroup, grouped_graphs_are_cut_where_rank_0_cut)
{
    cut_rank own0 = {.rank = 0, .kernel_us = 250, .nk = 12}, own1 = {.rank = 1, .kernel_us = 100, .nk = 12};
    cut_pair(&own0, &own1);
    cr_assert_eq(own0.segs_of[0], 3, "rank 0 alone: %u segments", own0.segs_of[0]);
    cr_assert_eq(own1.segs_of[0], 2, "rank 1 alone: %u segments", own1.segs_of[0]);

    t_log_capture(DS_LOG_WARN);
    char name[48];
    snprintf(name, sizeof name, "cut-%d", (int)getpid());
    cut_rank r0 = {.rank = 0, .group = name, .kernel_us = 250, .nk = 12};
    cut_rank r1 = {.rank = 1, .group = name, .kernel_us = 100, .nk = 12};
    cut_pair(&r0, &r1);
    cr_assert_eq(r0.segs_of[0], 3);
    cr_assert_eq(r1.segs_of[0], 3, "rank 1 takes rank 0's cut: %u segments", r1.segs_of[0]);
    for (uint32_t k = 0; k < 3; k++)
        cr_assert_eq(r1.nodes[k], r0.nodes[k], "segment %u: %u nodes on rank 1, %u on rank 0", k, r1.nodes[k],
                     r0.nodes[k]);
    cr_assert_eq(r0.group_units, 1 + 3 * 3, "a measuring step, then three steps of three units");
    cr_assert_eq(r1.group_units, r0.group_units);
    cr_assert_eq(t_log_count(DS_LOG_WARN), 0, "the ranks' units pair: nothing to warn of");
}

/* A rank whose step has other cut points than rank 0's (another graph) is
 * told once and keeps its own cut; nothing fails and nothing waits out the
 * timeout. */
Test(vgroup, a_graph_with_other_cut_points_keeps_its_own_cut)
{
    t_log_capture(DS_LOG_WARN);
    char name[48];
    snprintf(name, sizeof name, "cut-other-%d", (int)getpid());
    cut_rank r0 = {.rank = 0, .group = name, .kernel_us = 250, .nk = 12};
    cut_rank r1 = {.rank = 1, .group = name, .kernel_us = 100, .nk = 13};
    double t0 = wall_ms();
    cut_pair(&r0, &r1);
    cr_assert_lt(wall_ms() - t0, 5000.0, "no wait for a cut that never comes");
    cr_assert_eq(r0.segs_of[0], 3);
    cr_assert_eq(r1.segs_of[0], 2, "rank 1 cuts its 13 kernels from its own times: %u segments", r1.segs_of[0]);
    cr_assert_geq(t_log_count(DS_LOG_WARN), 1, "the other cut points are logged");
}

/* Rank 0 measures 20 graphs before rank 1 measures its first: the table
 * holds the last 16 cuts, so rank 1's first four are gone. Rank 1 sees that
 * at once (cuts its own, logged) instead of waiting out the timeout for
 * each, and takes rank 0's cut for the other sixteen. */
Test(vgroup, a_rank_further_behind_than_the_cut_table_holds_does_not_wait_for_overwritten_cuts)
{
    t_log_capture(DS_LOG_WARN);
    char name[48];
    snprintf(name, sizeof name, "cut-behind-%d", (int)getpid());
    _Atomic int go = 0, end = 0;
    cut_rank r0 = {.rank = 0, .group = name, .kernel_us = 250, .nk = 12, .ngraphs = 20, .launches = 1,
                   .go = &go, .end = &end};
    cut_rank r1 = {.rank = 1, .group = name, .kernel_us = 100, .nk = 12, .ngraphs = 20, .launches = 1,
                   .go = &go, .end = &end};
    cut_pair(&r0, &r1);
    cr_assert_lt(r1.graphs_ms, 5000.0, "rank 1 waited out a timeout: %.0f ms for its 20 graphs", r1.graphs_ms);
    for (int k = 0; k < 20; k++) {
        cr_assert_eq(r0.segs_of[k], 3, "rank 0's graph %d: %u segments", k, r0.segs_of[k]);
        cr_assert_eq(r1.segs_of[k], k < 4 ? 2u : 3u, "rank 1's graph %d: %u segments (%s)", k, r1.segs_of[k],
                     k < 4 ? "its own cut: rank 0's was overwritten" : "rank 0's cut");
    }
    cr_assert_eq(t_log_count(DS_LOG_WARN), 4, "each overwritten cut is logged: %d warnings", t_log_count(DS_LOG_WARN));
}
