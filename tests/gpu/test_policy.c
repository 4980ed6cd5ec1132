/*
 * The built-in policies on the real GPU: the scenarios of tests/test_policy.c
 * (simulated device), measured by the kernels themselves. Every kernel here
 * is `span` (kernels.cu): it writes, into its own span_record, the earliest
 * %globaltimer of its blocks' starts, the %globaltimer when its last block
 * finished, and the set of SMs (%smid) its blocks ran on. %globaltimer is one
 * clock for the whole device, so times of different kernels compare; host
 * times are used only to pace launches, never compared with device times.
 *
 *  a. shared:     an LS 1-block kernel behind a saturating BE kernel starts
 *                 only after BE's first wave of blocks ended.
 *  b. static:     BE never runs on the LS tier's SMs, even while LS is idle.
 *  c. temporal:   kernels of two tenants (two threads) never overlap.
 *  d. slo_aware:  BE is confined off the LS tier within one window of LS
 *                 becoming active, and expands again after LS's idle time.
 *  e. tpot_first: decode never runs on prefill's SMs and its kernels are not
 *                 slowed by prefill.
 *  f. live switch through every built-in: nothing lost or reordered.
 *
 * Measured figures are logged with cr_log_info (test_gpu --verbose).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detshare/policy.h"
#include "gpu_fixture.h"
#include "gpu_sets.h"

/* ------------------------------------------------------------------------ */
/* shared helpers                                                            */

/* Loads every kernel the tests use (first launches load a function lazily)
 * on a throw-away best-effort vCtx, destroyed before the measured vCtxs exist,
 * so that it leaves no trace in the policies' view. */
static void warm(gpu_env *e)
{
    CUdeviceptr scratch = gpu_alloc(e, 256);
    CUdeviceptr be_rec = scratch, ls_rec = scratch + 64, span_rec = scratch + 128, counter = scratch + 192,
                log = scratch + 196;
    ds_vctx_t w = gpu_vctx(e, "warm", DS_CLASS_BEST_EFFORT, -1);
    const ds_dim3 one = {1, 1, 1}, warp = {32, 1, 1};
    long long ns = 0;
    int zero = 0;
    void *pb[] = {&be_rec, &ns};
    void *pl[] = {&ls_rec};
    void *pa[] = {&counter, &log, &zero, &ns};
    GPU_DS(ds_launch(w, e->be_spin, one, (ds_dim3){1024, 1, 1}, 0, pb, NULL));
    GPU_DS(ds_launch(w, e->ls_stamp, one, warp, 0, pl, NULL));
    GPU_DS(ds_launch(w, e->append, one, one, 0, pa, NULL));
    GPU_DS(launch_span(e, w, span_rec, 0, one, warp, 0, NULL));
    GPU_DS(ds_vctx_synchronize(w));
    GPU_DS(ds_vctx_destroy(w));
    gpu_free(e, scratch);
}

/* A tenant thread launching `span` kernels into recs[0..cap) until stopped
 * (or cap reached), synchronising every sync_every launches (0: never). The
 * thread asserts nothing (Criterion asserts belong to the test's thread): it
 * keeps the first failure for the test to report. */
typedef struct streamer {
    gpu_env *e;
    ds_vctx_t v;
    CUdeviceptr recs;
    uint32_t cap;
    ds_dim3 grid, block;
    long long ns;
    const ds_launch_hints *hints;
    uint32_t sync_every;
    unsigned pause_us;     /* host pause after each of those synchronisations */
    pthread_barrier_t *go; /* NULL: start at once */
    atomic_int stop;
    atomic_uint launched;
    gpu_thread_err err;
} streamer;

static void streamer_fail(streamer *s, ds_status st, const char *what, uint32_t i)
{
    gpu_thread_fail(&s->err, st, "%s %u -> %s: %s", what, i, ds_status_name(st), ds_last_error_message());
}

static void *streamer_main(void *arg)
{
    streamer *s = arg;
    if (s->go)
        pthread_barrier_wait(s->go);
    for (;;) {
        if (atomic_load(&s->stop))
            break;
        uint32_t i = atomic_load(&s->launched);
        if (i >= s->cap)
            break;
        ds_status st = launch_span(s->e, s->v, s->recs, (int)i, s->grid, s->block, s->ns, s->hints);
        if (st != DS_SUCCESS) {
            streamer_fail(s, st, "ds_launch", i);
            break;
        }
        atomic_store(&s->launched, i + 1);
        if (s->sync_every && (i + 1) % s->sync_every == 0) {
            st = ds_vctx_synchronize(s->v);
            if (st != DS_SUCCESS) {
                streamer_fail(s, st, "ds_vctx_synchronize after launch", i);
                break;
            }
            if (s->pause_us)
                gpu_sleep_us(s->pause_us);
        }
    }
    ds_status st = ds_vctx_synchronize(s->v);
    if (st != DS_SUCCESS)
        streamer_fail(s, st, "final ds_vctx_synchronize after launch", atomic_load(&s->launched));
    return NULL;
}

static void streamer_start(streamer *s, pthread_t *t)
{
    atomic_init(&s->stop, 0);
    atomic_init(&s->launched, 0);
    s->err = (gpu_thread_err)GPU_THREAD_ERR_INIT;
    cr_assert_eq(pthread_create(t, NULL, streamer_main, s), 0, "pthread_create");
}

static void streamer_join(streamer *s, pthread_t t, const char *who)
{
    atomic_store(&s->stop, 1);
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert_eq(s->err.st, DS_SUCCESS, "%s thread: %s", who, s->err.msg);
}

/* ------------------------------------------------------------------------ */
/* a. shared                                                                 */

#define SHARED_TRIALS 3
#define SHARED_WAVES 16u
#define SHARED_BLOCK_NS (1 * MS)

Test(policy, shared_ls_waits_behind_a_running_be_kernel, .timeout = 120)
{
    gpu_env e;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.policy = "shared";
    gpu_open(&e, &cfg);
    uint32_t full = gpu_full_pctx(&e);

    /* 1024-thread blocks: how many fit on an SM at once (by threads; be_spin
     * uses 14 registers, so threads are the limit) makes one wave. */
    CUdevice dev;
    int threads_per_sm = 0;
    GPU_CU(&e, cuDeviceGet(&dev, 0));
    GPU_CU(&e, cuDeviceGetAttribute(&threads_per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev));
    uint32_t per_sm = threads_per_sm >= 1024 ? (uint32_t)threads_per_sm / 1024 : 1;
    const ds_dim3 be_grid = {SHARED_WAVES * per_sm * e.info.sm_count, 1, 1}, be_block = {1024, 1, 1};
    const ds_dim3 one = {1, 1, 1}, warp = {32, 1, 1};
    cr_log_info("shared: BE %u blocks of 1024 threads x %.1f ms (%u per SM at once: %u waves over %u SMs); "
                "LS 1 block",
                be_grid.x, (double)SHARED_BLOCK_NS / 1e6, per_sm, SHARED_WAVES, e.info.sm_count);

    warm(&e);
    ds_vctx_t be = gpu_vctx_slo(&e, "be", DS_CLASS_BEST_EFFORT, DS_PHASE_NONE, 0);
    ds_vctx_t ls = gpu_vctx_slo(&e, "ls", DS_CLASS_LATENCY_SENSITIVE, DS_PHASE_NONE, 0);
    CUdeviceptr be_rec = gpu_alloc(&e, sizeof(be_record));
    CUdeviceptr ls_rec = gpu_alloc(&e, sizeof(ls_record));

    for (int t = 0; t < SHARED_TRIALS; t++) {
        gpu_fill32(&e, be_rec, 0, sizeof(be_record) / 4);
        gpu_fill32(&e, be_rec, 0xFFFFFFFFu, 2); /* first_start = ~0 */
        gpu_fill32(&e, ls_rec, 0, sizeof(ls_record) / 4);
        long long ns = SHARED_BLOCK_NS;
        void *pb[] = {&be_rec, &ns};
        void *pl[] = {&ls_rec};
        GPU_DS(ds_launch(be, e.be_spin, be_grid, be_block, 0, pb, NULL));
        gpu_sleep_us(200); /* BE's first wave takes every SM */
        GPU_DS(ds_launch(ls, e.ls_stamp, one, warp, 0, pl, NULL));
        GPU_DS(ds_vctx_synchronize(ls));
        GPU_DS(ds_vctx_synchronize(be));
        cr_assert_eq(gpu_bound_pctx(be), full, "shared: BE on pCtx %u, not the whole GPU (%u)", gpu_bound_pctx(be),
                     full);
        cr_assert_eq(gpu_bound_pctx(ls), full, "shared: LS on pCtx %u, not the whole GPU (%u)", gpu_bound_pctx(ls),
                     full);

        be_record b;
        ls_record l;
        gpu_read(&e, &b, be_rec, sizeof b);
        gpu_read(&e, &l, ls_rec, sizeof l);
        cr_assert_eq(l.done, 1, "trial %d: the LS kernel did not run", t);
        cr_assert_neq(b.first_start, ~0ull, "trial %d: the BE kernel did not run", t);
        cr_assert_gt(b.last_end, b.first_start);
        double be_ms = diff_us(b.last_end, b.first_start) / 1e3;
        double ls_after_us = diff_us(l.start, b.first_start);
        double before_end_us = diff_us(b.last_end, l.start);
        cr_log_info("shared trial %d: BE ran %.2f ms; LS started %.1f us after BE's start (%.0f%% of BE), %.1f us "
                    "%s BE's end",
                    t, be_ms, ls_after_us, 100.0 * ls_after_us / (be_ms * 1e3), before_end_us < 0 ? -before_end_us : before_end_us,
                    before_end_us >= 0 ? "before" : "after");
        cr_assert_geq(be_ms * 1e6, (double)(SHARED_WAVES / 2) * (double)SHARED_BLOCK_NS,
                      "trial %d: BE ran only %.2f ms: it did not saturate the GPU", t, be_ms);
        cr_assert_geq(ls_after_us, (double)SHARED_BLOCK_NS / 1e3,
                      "trial %d: the LS kernel started %.1f us after BE's start, before BE's first wave "
                      "(%.0f us blocks) ended: shared gave LS SMs BE held",
                      t, ls_after_us, (double)SHARED_BLOCK_NS / 1e3);
    }
    GPU_DS(ds_vctx_destroy(ls));
    GPU_DS(ds_vctx_destroy(be));
    gpu_free(&e, ls_rec);
    gpu_free(&e, be_rec);
    gpu_close(&e);
}

/* ------------------------------------------------------------------------ */
/* b. static                                                                 */

#define STATIC_LS_SMS 32u
#define STATIC_BE_KERNELS 100u
#define STATIC_BE_BLOCK_NS (500 * US)

Test(policy, static_be_never_uses_ls_sms_even_while_ls_is_idle, .timeout = 120)
{
    gpu_env e;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.policy = "static";
    cfg.ls_sms = STATIC_LS_SMS;
    gpu_open(&e, &cfg);
    int low = gpu_low_nearest(&e.info, STATIC_LS_SMS);
    cr_assert_geq(low, 0, "the pool has no LOW pCtx");
    int high = e.info.pctx[low].complement;
    cr_assert_geq(high, 0, "LOW pCtx %d has no complement", low);
    smset ls_set = probe_tier(&e, low), be_tier = probe_tier(&e, high);
    char buf[512];
    cr_log_info("static: LS tier pCtx %d (%u SMs: %s), BE tier pCtx %d (%u SMs)", low, e.info.pctx[low].sm_count,
                set_str(&ls_set, buf, sizeof buf), high, e.info.pctx[high].sm_count);

    warm(&e);
    ds_vctx_t ls = gpu_vctx_slo(&e, "ls", DS_CLASS_LATENCY_SENSITIVE, DS_PHASE_NONE, 0);
    ds_vctx_t be = gpu_vctx_slo(&e, "be", DS_CLASS_BEST_EFFORT, DS_PHASE_NONE, 0);
    const uint32_t n = 1 + STATIC_BE_KERNELS + 1;
    CUdeviceptr recs = spans_alloc(&e, n);
    const ds_dim3 ls_grid = {2 * e.info.pctx[low].sm_count, 1, 1}, be_grid = {2 * e.info.sm_count, 1, 1},
                  block = {128, 1, 1};

    /* LS runs once, then stays idle. */
    GPU_DS(launch_span(&e, ls, recs, 0, ls_grid, block, 20 * US, NULL));
    GPU_DS(ds_vctx_synchronize(ls));
    /* BE: about 50 ms of kernels (each ~0.5 ms, 2 blocks per SM of the whole GPU). */
    uint64_t t0 = gpu_now_ns();
    for (uint32_t i = 1; i <= STATIC_BE_KERNELS; i++)
        GPU_DS(launch_span(&e, be, recs, (int)i, be_grid, block, STATIC_BE_BLOCK_NS, NULL));
    GPU_DS(ds_vctx_synchronize(be));
    double host_ms = (double)(gpu_now_ns() - t0) / 1e6;
    /* LS idle for 10 more ms: static never lends its SMs. */
    gpu_sleep_us(10000);
    GPU_DS(launch_span(&e, be, recs, (int)n - 1, be_grid, block, STATIC_BE_BLOCK_NS, NULL));
    GPU_DS(ds_vctx_synchronize(be));
    cr_assert_eq(gpu_bound_pctx(ls), (uint32_t)low, "static: LS on pCtx %u, not its tier %d", gpu_bound_pctx(ls), low);
    cr_assert_eq(gpu_bound_pctx(be), (uint32_t)high, "static: BE on pCtx %u, not the complement %d", gpu_bound_pctx(be),
                 high);

    span_record *r = spans_read(&e, recs, n);
    assert_complete(&r[0], 0, blocks_of(ls_grid), "LS kernel");
    smset l0 = set_of(&r[0]);
    cr_assert_eq(set_outside(&l0, &ls_set), 0, "the LS kernel ran on %u SMs outside its tier",
                 set_outside(&l0, &ls_set));
    smset be_union;
    memset(&be_union, 0, sizeof be_union);
    double *durs = calloc(n, sizeof *durs);
    cr_assert_not_null(durs);
    uint32_t min_sms = UINT32_MAX;
    for (uint32_t i = 1; i < n; i++) {
        assert_complete(&r[i], i, blocks_of(be_grid), "BE kernel");
        smset s = set_of(&r[i]);
        cr_assert_eq(set_common(&s, &ls_set), 0, "BE kernel %u (at +%.0f us) ran on %u of the LS tier's SMs", i,
                     diff_us(r[i].start, r[1].start), set_common(&s, &ls_set));
        cr_assert_eq(set_outside(&s, &be_tier), 0, "BE kernel %u ran on %u SMs outside its tier", i,
                     set_outside(&s, &be_tier));
        set_add(&be_union, &s);
        if (set_count(&s) < min_sms)
            min_sms = set_count(&s);
        durs[i - 1] = dur_us(&r[i]);
    }
    double med, max;
    med_max(durs, n - 1, &med, &max);
    cr_log_info("static: %u BE kernels over %.1f ms of device time (%.1f ms host), kernel median %.1f us, max "
                "%.1f us; BE ran on %u SMs in all (at least %u per kernel), none of the LS tier's %u",
                n - 1, diff_us(r[STATIC_BE_KERNELS].end, r[1].start) / 1e3, host_ms, med, max,
                set_count(&be_union), min_sms, set_count(&ls_set));
    cr_assert_leq(set_count(&be_union), e.info.sm_count - set_count(&ls_set));
    free(durs);
    free(r);
    GPU_DS(ds_vctx_destroy(be));
    GPU_DS(ds_vctx_destroy(ls));
    gpu_free(&e, recs);
    gpu_close(&e);
}

/* ------------------------------------------------------------------------ */
/* c. temporal                                                               */

#define TEMPORAL_KERNELS 100u
#define TEMPORAL_BURST 10u
#define TEMPORAL_BLOCK_NS (100 * US)
/* Tolerance when comparing one kernel's end with another's start: the two
 * stamps come from different SMs' reads of %globaltimer. */
#define TEMPORAL_TOL_NS 1000ull

typedef struct tagged {
    const span_record *r;
    int who;
} tagged;

static int cmp_tagged(const void *a, const void *b)
{
    unsigned long long x = ((const tagged *)a)->r->start, y = ((const tagged *)b)->r->start;
    return (x > y) - (x < y);
}

/* One round: tenants a and b on two threads, each TEMPORAL_KERNELS kernels in
 * bursts of TEMPORAL_BURST (synchronised), pausing pause_us after each burst.
 * Asserts that no kernel of a overlaps one of b; logs the hand-overs. */
static void temporal_round(gpu_env *e, ds_vctx_t a, ds_vctx_t b, unsigned pause_us)
{
    CUdeviceptr ra = spans_alloc(e, TEMPORAL_KERNELS), rb = spans_alloc(e, TEMPORAL_KERNELS);
    const ds_dim3 grid = {e->info.sm_count, 1, 1}, block = {128, 1, 1};
    ds_vctx_stats st_a = DS_VCTX_STATS_INIT, st_b = DS_VCTX_STATS_INIT;
    GPU_DS(ds_vctx_get_stats(a, &st_a));
    GPU_DS(ds_vctx_get_stats(b, &st_b));
    const uint64_t holds0 = st_a.holds + st_b.holds;

    pthread_barrier_t go;
    cr_assert_eq(pthread_barrier_init(&go, NULL, 2), 0);
    streamer sa = {.e = e, .v = a, .recs = ra, .cap = TEMPORAL_KERNELS, .grid = grid, .block = block,
                   .ns = TEMPORAL_BLOCK_NS, .sync_every = TEMPORAL_BURST, .pause_us = pause_us, .go = &go};
    streamer sb = {.e = e, .v = b, .recs = rb, .cap = TEMPORAL_KERNELS, .grid = grid, .block = block,
                   .ns = TEMPORAL_BLOCK_NS, .sync_every = TEMPORAL_BURST, .pause_us = pause_us, .go = &go};
    pthread_t ta, tb;
    uint64_t t0 = gpu_now_ns();
    streamer_start(&sa, &ta);
    streamer_start(&sb, &tb);
    /* Both stop on their own after TEMPORAL_KERNELS launches. */
    cr_assert_eq(pthread_join(ta, NULL), 0);
    cr_assert_eq(pthread_join(tb, NULL), 0);
    double host_ms = (double)(gpu_now_ns() - t0) / 1e6;
    pthread_barrier_destroy(&go);
    cr_assert_eq(sa.err.st, DS_SUCCESS, "tenant a: %s", sa.err.msg);
    cr_assert_eq(sb.err.st, DS_SUCCESS, "tenant b: %s", sb.err.msg);
    cr_assert_eq(atomic_load(&sa.launched), TEMPORAL_KERNELS);
    cr_assert_eq(atomic_load(&sb.launched), TEMPORAL_KERNELS);

    span_record *xa = spans_read(e, ra, TEMPORAL_KERNELS), *xb = spans_read(e, rb, TEMPORAL_KERNELS);
    for (uint32_t i = 0; i < TEMPORAL_KERNELS; i++) {
        assert_complete(&xa[i], i, blocks_of(grid), "tenant a kernel");
        assert_complete(&xb[i], i, blocks_of(grid), "tenant b kernel");
    }
    unsigned long long t_first = xa[0].start < xb[0].start ? xa[0].start : xb[0].start;
    for (uint32_t i = 0; i < TEMPORAL_KERNELS; i++)
        for (uint32_t j = 0; j < TEMPORAL_KERNELS; j++) {
            const span_record *p = &xa[i], *q = &xb[j];
            int apart = p->end <= q->start + TEMPORAL_TOL_NS || q->end <= p->start + TEMPORAL_TOL_NS;
            cr_assert(apart, "pause %u us: a's kernel %u [%.1f, %.1f] us overlaps b's kernel %u [%.1f, %.1f] us",
                      pause_us, i, diff_us(p->start, t_first), diff_us(p->end, t_first), j,
                      diff_us(q->start, t_first), diff_us(q->end, t_first));
        }

    /* Hand-overs: kernels of both in start order, where the tenant changes. */
    tagged all[2 * TEMPORAL_KERNELS];
    for (uint32_t i = 0; i < TEMPORAL_KERNELS; i++) {
        all[i] = (tagged){&xa[i], 0};
        all[TEMPORAL_KERNELS + i] = (tagged){&xb[i], 1};
    }
    qsort(all, 2 * TEMPORAL_KERNELS, sizeof all[0], cmp_tagged);
    int switches = 0;
    double min_gap = 1e18, sum_gap = 0, longest_turn = 0;
    unsigned long long turn_start = all[0].r->start;
    for (uint32_t i = 1; i < 2 * TEMPORAL_KERNELS; i++)
        if (all[i].who != all[i - 1].who) {
            double gap = diff_us(all[i].r->start, all[i - 1].r->end);
            double turn = diff_us(all[i - 1].r->end, turn_start);
            switches++;
            sum_gap += gap;
            if (gap < min_gap)
                min_gap = gap;
            if (turn > longest_turn)
                longest_turn = turn;
            turn_start = all[i].r->start;
        }
    double last_turn = diff_us(all[2 * TEMPORAL_KERNELS - 1].r->end, turn_start);
    if (last_turn > longest_turn)
        longest_turn = last_turn;
    GPU_DS(ds_vctx_get_stats(a, &st_a));
    GPU_DS(ds_vctx_get_stats(b, &st_b));
    double kd[2 * TEMPORAL_KERNELS], med, max;
    for (uint32_t i = 0; i < 2 * TEMPORAL_KERNELS; i++)
        kd[i] = dur_us(all[i].r);
    med_max(kd, 2 * TEMPORAL_KERNELS, &med, &max);
    cr_log_info("temporal, pause %u us after each burst of %u: 2 x %u kernels (median %.1f us, max %.1f us) in "
                "%.2f ms of device time (%.1f ms host); no overlap; %d hand-overs (gap min %.1f us, mean %.1f us), "
                "longest turn %.2f ms (slice: be_window_us 2000 us); holds %llu",
                pause_us, TEMPORAL_BURST, TEMPORAL_KERNELS, med, max,
                diff_us(all[2 * TEMPORAL_KERNELS - 1].r->end, t_first) / 1e3, host_ms, switches,
                switches ? min_gap : 0.0, switches ? sum_gap / switches : 0.0, longest_turn / 1e3,
                (unsigned long long)(st_a.holds + st_b.holds - holds0));
    cr_assert_geq(switches, 1);
    cr_assert_gt(st_a.holds + st_b.holds, holds0, "neither tenant was ever held: they did not contend");
    /* Fair turns: a slice (2 ms) plus the drain of what was queued in it
     * (windows of one slice), not the 7-10 ms seen before a waiting tenant
     * went first on a free GPU. */
    cr_assert_lt(longest_turn, 6000.0, "a tenant kept the GPU %.2f ms against a 2 ms slice", longest_turn / 1e3);
    free(xa);
    free(xb);
    gpu_free(e, ra);
    gpu_free(e, rb);
}

Test(policy, temporal_two_tenants_never_overlap, .timeout = 120)
{
    gpu_env e;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.policy = "temporal";
    gpu_open(&e, &cfg);
    uint32_t full = gpu_full_pctx(&e);
    warm(&e);
    ds_vctx_t a = gpu_vctx_slo(&e, "a", DS_CLASS_BEST_EFFORT, DS_PHASE_NONE, 0);
    ds_vctx_t b = gpu_vctx_slo(&e, "b", DS_CLASS_LATENCY_SENSITIVE, DS_PHASE_NONE, 0);
    /* Continuous: the GPU changes hands when a slice ends or the owner drains. */
    temporal_round(&e, a, b, 0);
    /* Idle gaps: the waiting tenant revokes an idle owner (the policy's
     * revocation race with the owner's next launch). */
    temporal_round(&e, a, b, 200);
    cr_assert_eq(gpu_bound_pctx(a), full);
    cr_assert_eq(gpu_bound_pctx(b), full);
    GPU_DS(ds_vctx_destroy(a));
    GPU_DS(ds_vctx_destroy(b));
    gpu_close(&e);
}

/* ------------------------------------------------------------------------ */
/* d. slo_aware                                                              */

#define SLO_BE_CAP 4096u
#define SLO_BE_BLOCK_NS (180 * US) /* a BE kernel runs ~185 us on 68-132 SMs */
#define SLO_BE_EXPECTED_US 200u
#define SLO_LS_CAP 256u
#define SLO_LS_SLO_US 1000u
#define SLO_LS_PERIOD_NS (500 * US)
#define SLO_PHASE_NS (20 * MS)
#define SLO_WINDOW_US 2000.0 /* be_window_us default */
#define SLO_IDLE_US 2000.0   /* idle_us, set by slo_open */
#define SLO_BE_KNOWN 256u   /* BE units before slo_aware counts BE's unit as known */

Test(policy, slo_aware_confines_be_within_one_window_and_expands_after_idle, .timeout = 120)
{
    gpu_env e;
    const slo_tiers t = slo_open(&e, "slo_aware");

    warm(&e);
    ds_vctx_t ls = gpu_vctx_slo(&e, "ls", DS_CLASS_LATENCY_SENSITIVE, DS_PHASE_NONE, SLO_LS_SLO_US);
    ds_vctx_t be = gpu_vctx_slo(&e, "be", DS_CLASS_BEST_EFFORT, DS_PHASE_NONE, 0);
    CUdeviceptr be_recs = spans_alloc(&e, SLO_BE_CAP), ls_recs = spans_alloc(&e, SLO_LS_CAP);
    /* BE: 2 blocks of 128 threads per SM of the GPU, all resident at once
     * on 68 SMs as on 132, so a kernel takes about the same time on both. */
    const ds_dim3 be_grid = {2 * e.info.sm_count, 1, 1}, be_block = {128, 1, 1};
    const ds_dim3 ls_grid = {16, 1, 1}, ls_block = {64, 1, 1};
    ds_launch_hints hints = DS_LAUNCH_HINTS_INIT;
    hints.expected_us = SLO_BE_EXPECTED_US;

    /* Phase 1: BE alone for 20 ms once its unit is known (slo_aware counts
     * BE's unit only after 256 of them: BE_UNIT_LAUNCHES). */
    streamer sb = {.e = &e, .v = be, .recs = be_recs, .cap = SLO_BE_CAP, .grid = be_grid, .block = be_block,
                   .ns = SLO_BE_BLOCK_NS, .hints = &hints};
    pthread_t tb;
    streamer_start(&sb, &tb);
    for (int i = 0; i < 2000 && atomic_load(&sb.launched) < SLO_BE_KNOWN; i++)
        gpu_sleep_us(1000);
    gpu_sleep_us((unsigned)(SLO_PHASE_NS / 1000));
    /* Phase 2: an LS request (one small kernel, waited for) every 500 us for 20 ms. */
    uint32_t nls = 0;
    uint64_t t_ls = gpu_now_ns();
    while (nls < SLO_LS_CAP && gpu_now_ns() - t_ls < (uint64_t)SLO_PHASE_NS) {
        gpu_sleep_until_ns(t_ls + (uint64_t)nls * SLO_LS_PERIOD_NS);
        GPU_DS(launch_span(&e, ls, ls_recs, (int)nls, ls_grid, ls_block, 20 * US, NULL));
        GPU_DS(ds_vctx_synchronize(ls));
        nls++;
    }
    uint32_t ls_pctx = gpu_bound_pctx(ls);
    /* Phase 3: LS idle, BE on for 20 ms more. */
    gpu_sleep_us((unsigned)(SLO_PHASE_NS / 1000));
    streamer_join(&sb, tb, "BE");
    uint32_t nbe = atomic_load(&sb.launched);
    cr_assert_lt(nbe, SLO_BE_CAP, "BE filled its %u records: make SLO_BE_CAP larger", SLO_BE_CAP);
    ds_vctx_stats bst = DS_VCTX_STATS_INIT;
    GPU_DS(ds_vctx_get_stats(be, &bst));

    span_record *rb = spans_read(&e, be_recs, nbe), *rl = spans_read(&e, ls_recs, nls);
    cr_assert_geq(nls, 10);
    slo_assert_ls(&t, rl, nls, blocks_of(ls_grid), ls_pctx);
    for (uint32_t i = 0; i < nbe; i++)
        assert_complete(&rb[i], i, blocks_of(be_grid), "BE kernel");

    const unsigned long long ls_on = rl[0].start, ls_off = rl[nls - 1].end;
    /* One BE kernel: the longest BE kernel before LS became active. */
    const slo_be_before bb = slo_be_before_ls(&t, rb, nbe, ls_on);
    cr_assert_gt(bb.count, 10, "only %d BE kernels ran before LS became active", bb.count);
    char expand_limit[64];
    snprintf(expand_limit, sizeof expand_limit, "idle_us %.0f + 5 ms", SLO_IDLE_US);
    const slo_bounds bounds = {.unit = "kernel", .window_us = SLO_WINDOW_US, .one_us = bb.longest_us,
                               .expand_by_us = SLO_IDLE_US + 5000.0, .expand_limit = expand_limit};
    const slo_be_split sp = slo_assert_be(&t, rb, nbe, ls_on, ls_off, &bounds);
    double lmed, lmax;
    double *ld = calloc(nls, sizeof *ld);
    cr_assert_not_null(ld);
    for (uint32_t i = 0; i < nls; i++)
        ld[i] = dur_us(&rl[i]);
    med_max(ld, nls, &lmed, &lmax);
    free(ld);
    cr_log_info("slo_aware: %u BE kernels (one BE kernel <= %.1f us), %u LS requests over %.1f ms (kernel median "
                "%.1f us, max %.1f us)",
                nbe, bb.longest_us, nls, diff_us(ls_off, ls_on) / 1e3, lmed, lmax);
    cr_log_info("slo_aware: before LS: %d of %d BE kernels on more than %u SMs; while LS was active %u BE kernels on "
                "an LS SM (at most %u), the last %.0f us after LS became active; %d BE kernels confined after that",
                bb.expanded, bb.count, t.high_sms, sp.on_ls, sp.max_on_ls, sp.last_on_ls_us, sp.confined);
    cr_log_info("slo_aware: first BE kernel on more than %u SMs started %.0f us after LS stopped (limit %.0f us); "
                "%d kernels after the limit, all expanded (at least %u SMs); BE remaps %llu, holds %llu, window "
                "now %u us",
                t.high_sms, sp.first_expanded_us, bounds.expand_by_us, sp.expanded_after,
                sp.min_expanded == UINT32_MAX ? 0 : sp.min_expanded, (unsigned long long)bst.remaps,
                (unsigned long long)bst.holds, bst.window_us);
    cr_assert_gt(bb.expanded, 10, "BE used more than the complement's %u SMs in only %d kernels before LS",
                 t.high_sms, bb.expanded);
    cr_assert_gt(sp.confined, 10, "only %d BE kernels ran while LS was active past the limit", sp.confined);
    cr_assert_gt(sp.expanded_after, 10, "only %d BE kernels ran after the expansion limit", sp.expanded_after);
    cr_assert_eq(gpu_bound_pctx(be), t.full, "BE ended on pCtx %u, not the whole GPU", gpu_bound_pctx(be));
    free(rb);
    free(rl);
    GPU_DS(ds_vctx_destroy(be));
    GPU_DS(ds_vctx_destroy(ls));
    gpu_free(&e, be_recs);
    gpu_free(&e, ls_recs);
    gpu_close(&e);
}

/* ------------------------------------------------------------------------ */
/* e. tpot_first                                                             */

#define TPOT_ALONE 50u
#define TPOT_LOADED 200u
#define TPOT_PREFILL_CAP 256u
#define TPOT_PREFILL_WAVES 8u /* of 1 ms blocks on the prefill tier */
#define TPOT_DECODE_BLOCK_NS (50 * US)
#define TPOT_DECODE_PERIOD_NS (200 * US) /* one decode step every 200 us */

Test(policy, tpot_first_decode_not_delayed_by_prefill, .timeout = 120)
{
    gpu_env e;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.policy = "tpot_first"; /* ls_sms default 64: prefill on the LOW tier nearest 32 */
    gpu_open(&e, &cfg);
    int pre_idx = gpu_low_nearest(&e.info, 64 / 2);
    cr_assert_geq(pre_idx, 0, "the pool has no LOW pCtx");
    int dec_idx = e.info.pctx[pre_idx].complement;
    cr_assert_geq(dec_idx, 0, "LOW pCtx %d has no complement", pre_idx);
    smset pre_set = probe_tier(&e, pre_idx), dec_set = probe_tier(&e, dec_idx);
    const uint32_t pre_sms = e.info.pctx[pre_idx].sm_count;
    char buf[512];
    cr_log_info("tpot_first: prefill on pCtx %d (%u SMs: %s), decode on pCtx %d (%u SMs)", pre_idx, pre_sms,
                set_str(&pre_set, buf, sizeof buf), dec_idx, e.info.pctx[dec_idx].sm_count);

    warm(&e);
    ds_vctx_t pre = gpu_vctx_slo(&e, "prefill", DS_CLASS_BEST_EFFORT, DS_PHASE_PREFILL, 0);
    ds_vctx_t dec = gpu_vctx_slo(&e, "decode", DS_CLASS_LATENCY_SENSITIVE, DS_PHASE_DECODE, 0);
    const uint32_t ndec = TPOT_ALONE + TPOT_LOADED;
    CUdeviceptr dec_recs = spans_alloc(&e, ndec), pre_recs = spans_alloc(&e, TPOT_PREFILL_CAP);
    const ds_dim3 dec_grid = {64, 1, 1}, dec_block = {128, 1, 1};
    /* Prefill: 1024-thread blocks of 1 ms, 2 per SM at once: 8 waves. */
    const ds_dim3 pre_grid = {2 * TPOT_PREFILL_WAVES * pre_sms, 1, 1}, pre_block = {1024, 1, 1};

    /* Decode alone. */
    for (uint32_t i = 0; i < TPOT_ALONE; i++) {
        GPU_DS(launch_span(&e, dec, dec_recs, (int)i, dec_grid, dec_block, TPOT_DECODE_BLOCK_NS, NULL));
        GPU_DS(ds_vctx_synchronize(dec));
    }
    /* Prefill saturating its tier (at most 2 kernels queued; the hint lets
     * tpot_first hold it to half a window while decode is active), decode
     * steps meanwhile. */
    ds_launch_hints pre_hints = DS_LAUNCH_HINTS_INIT;
    pre_hints.expected_us = TPOT_PREFILL_WAVES * 1000;
    streamer sp = {.e = &e, .v = pre, .recs = pre_recs, .cap = TPOT_PREFILL_CAP, .grid = pre_grid,
                   .block = pre_block, .ns = 1 * MS, .hints = &pre_hints, .sync_every = 2};
    pthread_t tp;
    streamer_start(&sp, &tp);
    for (int i = 0; i < 5000 && atomic_load(&sp.launched) == 0; i++)
        gpu_sleep_us(100);
    if (atomic_load(&sp.launched) == 0)
        streamer_join(&sp, tp, "prefill"); /* reports its failure */
    cr_assert_gt(atomic_load(&sp.launched), 0, "prefill never launched within 0.5 s");
    gpu_sleep_us(2000);
    uint64_t t_dec = gpu_now_ns();
    for (uint32_t i = TPOT_ALONE; i < ndec; i++) {
        gpu_sleep_until_ns(t_dec + (uint64_t)(i - TPOT_ALONE) * TPOT_DECODE_PERIOD_NS);
        GPU_DS(launch_span(&e, dec, dec_recs, (int)i, dec_grid, dec_block, TPOT_DECODE_BLOCK_NS, NULL));
        GPU_DS(ds_vctx_synchronize(dec));
    }
    streamer_join(&sp, tp, "prefill");
    uint32_t npre = atomic_load(&sp.launched);
    cr_assert_eq(gpu_bound_pctx(pre), (uint32_t)pre_idx, "prefill on pCtx %u, not %d", gpu_bound_pctx(pre), pre_idx);
    cr_assert_eq(gpu_bound_pctx(dec), (uint32_t)dec_idx, "decode on pCtx %u, not %d", gpu_bound_pctx(dec), dec_idx);
    ds_vctx_stats pst = DS_VCTX_STATS_INIT;
    GPU_DS(ds_vctx_get_stats(pre, &pst));

    span_record *rd = spans_read(&e, dec_recs, ndec), *rp = spans_read(&e, pre_recs, npre);
    smset pre_union;
    memset(&pre_union, 0, sizeof pre_union);
    for (uint32_t i = 0; i < npre; i++) {
        assert_complete(&rp[i], i, blocks_of(pre_grid), "prefill kernel");
        smset s = set_of(&rp[i]);
        cr_assert_eq(set_outside(&s, &pre_set), 0, "prefill kernel %u ran on %u SMs outside its tier", i,
                     set_outside(&s, &pre_set));
        set_add(&pre_union, &s);
    }
    double alone[TPOT_ALONE], loaded[TPOT_LOADED];
    int overlapped = 0;
    for (uint32_t i = 0; i < ndec; i++) {
        assert_complete(&rd[i], i, blocks_of(dec_grid), "decode kernel");
        smset s = set_of(&rd[i]);
        cr_assert_eq(set_common(&s, &pre_set), 0, "decode kernel %u ran on %u of prefill's tier's SMs", i,
                     set_common(&s, &pre_set));
        cr_assert_eq(set_common(&s, &pre_union), 0, "decode kernel %u ran on %u SMs prefill's kernels used", i,
                     set_common(&s, &pre_union));
        cr_assert_eq(set_outside(&s, &dec_set), 0, "decode kernel %u ran on %u SMs outside its tier", i,
                     set_outside(&s, &dec_set));
        if (i < TPOT_ALONE) {
            alone[i] = dur_us(&rd[i]);
            continue;
        }
        loaded[i - TPOT_ALONE] = dur_us(&rd[i]);
        for (uint32_t j = 0; j < npre; j++)
            if (rp[j].start <= rd[i].start && rd[i].end <= rp[j].end) {
                overlapped++;
                break;
            }
    }
    double amed, amax, lmed, lmax;
    med_max(alone, TPOT_ALONE, &amed, &amax);
    double loaded_sorted[TPOT_LOADED];
    memcpy(loaded_sorted, loaded, sizeof loaded);
    med_max(loaded_sorted, TPOT_LOADED, &lmed, &lmax);
    double pd_med = 0, pd_max = 0;
    if (npre) {
        double *pd = calloc(npre, sizeof *pd);
        cr_assert_not_null(pd);
        for (uint32_t i = 0; i < npre; i++)
            pd[i] = dur_us(&rp[i]);
        med_max(pd, npre, &pd_med, &pd_max);
        free(pd);
    }
    cr_log_info("tpot_first: decode kernel alone median %.1f us (max %.1f), during prefill median %.1f us (max "
                "%.1f), %d of %u inside a running prefill kernel",
                amed, amax, lmed, lmax, overlapped, TPOT_LOADED);
    cr_log_info("tpot_first: %u prefill kernels (median %.2f ms) on %u SMs; prefill held %llu times; no decode "
                "kernel on prefill's SMs",
                npre, pd_med / 1e3, set_count(&pre_union), (unsigned long long)pst.holds);
    for (uint32_t i = 0; i < TPOT_LOADED; i++)
        cr_assert_leq(loaded[i], 2.0 * amed,
                      "decode kernel %u during prefill took %.1f us, more than 2x its alone median %.1f us", i,
                      loaded[i], amed);
    cr_assert_geq(npre, 2, "prefill launched only %u kernels", npre);
    cr_assert_geq(overlapped, (int)TPOT_LOADED / 2,
                  "only %d of %u decode kernels ran while a prefill kernel ran: prefill did not load the GPU",
                  overlapped, TPOT_LOADED);
    free(rd);
    free(rp);
    GPU_DS(ds_vctx_destroy(dec));
    GPU_DS(ds_vctx_destroy(pre));
    gpu_free(&e, dec_recs);
    gpu_free(&e, pre_recs);
    gpu_close(&e);
}

/* ------------------------------------------------------------------------ */
/* f. live switching                                                         */

#define SWITCH_N 500
#define SWITCH_EVERY 50
#define SWITCH_SEED 0x5117C4ull

static const char *const k_policies[] = {"shared", "static", "temporal", "slo_aware", "tpot_first", "priority",
                                         "manual"};
#define NUM_POLICIES ((int)(sizeof k_policies / sizeof k_policies[0]))

/* The switcher thread: switch k (1, 2, ...) when the launcher asks for it,
 * while the launcher's earlier kernels are still running. */
typedef struct switcher {
    ds_runtime_t rt;
    atomic_int asked; /* highest switch the launcher asked for */
    atomic_int done;  /* highest switch carried out */
    atomic_int quit;
    ds_status st;
    int failed_k;
    char err[256];
} switcher;

static void *switcher_main(void *arg)
{
    switcher *s = arg;
    for (;;) {
        int k = atomic_load(&s->done) + 1;
        while (atomic_load(&s->asked) < k && !atomic_load(&s->quit))
            sched_yield();
        if (atomic_load(&s->asked) < k)
            return NULL;
        ds_status st = ds_runtime_set_policy(s->rt, k_policies[k % NUM_POLICIES]);
        if (st != DS_SUCCESS && s->st == DS_SUCCESS) {
            s->st = st;
            s->failed_k = k;
            snprintf(s->err, sizeof s->err, "%s", ds_last_error_message());
        }
        atomic_store(&s->done, k);
    }
}

Test(policy, live_switch_loses_and_reorders_nothing, .timeout = 120)
{
    gpu_env e;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.policy = k_policies[0];
    gpu_open(&e, &cfg);
    warm(&e);
    ds_vctx_t v = gpu_vctx_slo(&e, "seq", DS_CLASS_BEST_EFFORT, DS_PHASE_NONE, 0);
    CUdeviceptr counter = gpu_alloc(&e, sizeof(int));
    CUdeviceptr log = gpu_alloc(&e, APPEND_LOG_CAP * sizeof(int));
    gpu_fill32(&e, log, 0xFFFFFFFFu, APPEND_LOG_CAP);

    switcher sw = {.rt = e.rt};
    atomic_init(&sw.asked, 0);
    atomic_init(&sw.done, 0);
    atomic_init(&sw.quit, 0);
    sw.st = DS_SUCCESS;
    pthread_t ts;
    cr_assert_eq(pthread_create(&ts, NULL, switcher_main, &sw), 0);

    gpu_rng rng = {SWITCH_SEED};
    const ds_dim3 one = {1, 1, 1};
    uint32_t visited = 0;
    int late = 0;
    for (int id = 0; id < SWITCH_N; id++) {
        if (id > 0 && id % SWITCH_EVERY == 0) {
            int k = id / SWITCH_EVERY;
            atomic_store(&sw.asked, k);
            uint64_t t0 = gpu_now_ns();
            while (atomic_load(&sw.done) < k && gpu_now_ns() - t0 < 5000000000ull)
                sched_yield();
            late += atomic_load(&sw.done) < k;
        }
        long long spin_ns = (long long)gpu_rng_below(&rng, 20001); /* 0-20 us */
        void *params[] = {&counter, &log, &id, &spin_ns};
        GPU_DS(ds_launch(v, e.append, one, one, 0, params, NULL));
        uint32_t p = gpu_bound_pctx(v);
        if (p < 32)
            visited |= 1u << p;
    }
    atomic_store(&sw.quit, 1);
    cr_assert_eq(pthread_join(ts, NULL), 0);
    GPU_DS(ds_vctx_synchronize(v));
    cr_assert_eq(sw.st, DS_SUCCESS, "switch %d to '%s' -> %s: %s", sw.failed_k,
                 k_policies[sw.failed_k % NUM_POLICIES], ds_status_name(sw.st), sw.err);
    cr_assert_eq(late, 0, "%d switches did not happen within 5 s", late);
    const int switches = (SWITCH_N - 1) / SWITCH_EVERY;
    cr_assert_eq(atomic_load(&sw.done), switches);
    const char *name = NULL;
    GPU_DS(ds_runtime_get_policy(e.rt, &name));
    cr_assert_str_eq(name, k_policies[switches % NUM_POLICIES]);

    int count = -1;
    gpu_read(&e, &count, counter, sizeof count);
    cr_assert_eq(count, SWITCH_N, "%d kernels ran, %d launched", count, SWITCH_N);
    int *got = calloc(SWITCH_N, sizeof *got);
    cr_assert_not_null(got);
    gpu_read(&e, got, log, SWITCH_N * sizeof *got);
    for (int i = 0; i < SWITCH_N; i++)
        cr_assert_eq(got[i], i, "log[%d] = %d: a kernel was lost, repeated or reordered across a policy switch", i,
                     got[i]);
    free(got);
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    GPU_DS(ds_vctx_get_stats(v, &st));
    cr_assert_eq(st.launches, SWITCH_N);
    cr_log_info("live switch: %d launches, %d switches through all %d built-ins; %llu remaps over %d pCtxs "
                "(mask 0x%x), %u streams, %llu holds",
                SWITCH_N, switches, NUM_POLICIES, (unsigned long long)st.remaps, __builtin_popcount(visited),
                visited, st.streams, (unsigned long long)st.holds);
    cr_assert_geq(st.remaps, 2, "the switches moved the vCtx only %llu times (static and tpot_first place a BE "
                  "vCtx off the whole GPU)", (unsigned long long)st.remaps);
    GPU_DS(ds_vctx_destroy(v));
    gpu_free(&e, log);
    gpu_free(&e, counter);
    gpu_close(&e);
}
