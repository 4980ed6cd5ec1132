/* The balance policy on the simulated device in real time (scheduler thread
 * on, two tenant threads): it must find the split that pays and keep shared
 * where none does.
 *
 * Tenants (blocks of one per SM):
 *   wide   528 blocks of 200 us (4 waves on 132 SMs, 5 on 116, 6 on 100);
 *   narrow 16 blocks of 100 us: as fast on 16 SMs as on 132.
 * Each thread keeps a few kernels in flight and then waits (wide 2, narrow 4,
 * so that the device sets the pace rather than the host).
 * Shared, a narrow kernel queued behind a wide one waits for the wide one's
 * blocks ahead of it (up to 200 us for 100 us of work). On the 16 + 116
 * split, narrow keeps all its speed and wide 4/5 of its: a sum of normalized
 * throughputs near 1.8, which no other placement reaches. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <detshare/policy.h>

#include "common.h"

typedef struct tenant {
    ds_vctx_t v;
    CUfunction f;
    uint32_t blocks, burst;
    atomic_int *stop;
    ds_status st;
} tenant;

static void *tenant_main(void *p)
{
    tenant *t = p;
    while (!atomic_load(t->stop) && t->st == DS_SUCCESS) {
        /* `burst` kernels in flight, then wait: submission follows the device */
        for (uint32_t i = 0; i < t->burst && t->st == DS_SUCCESS; i++)
            t->st = ds_launch(t->v, t->f, t_dim(t->blocks), t_dim(128), 0, NULL, NULL);
        if (t->st == DS_SUCCESS)
            t->st = ds_vctx_synchronize(t->v);
    }
    return NULL;
}

/* The policy's last "balance: ..." log line (INFO, scheduler thread). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_choice[512];

static void keep_choice(ds_log_level level, const char *msg, void *user)
{
    (void)level;
    (void)user;
    if (strncmp(msg, "balance: ", 9) != 0)
        return;
    pthread_mutex_lock(&g_lock);
    snprintf(g_choice, sizeof g_choice, "%s", msg);
    pthread_mutex_unlock(&g_lock);
}

static void watch_choice(void)
{
    pthread_mutex_lock(&g_lock);
    g_choice[0] = 0;
    pthread_mutex_unlock(&g_lock);
    ds_log_set_handler(keep_choice, NULL, DS_LOG_INFO);
}

static const char *choice(void)
{
    static char copy[512];
    pthread_mutex_lock(&g_lock);
    snprintf(copy, sizeof copy, "%s", g_choice);
    pthread_mutex_unlock(&g_lock);
    return copy;
}

static void sleep_ms(double ms)
{
    struct timespec d = {(time_t)(ms / 1e3), (long)((ms - 1e3 * (double)(time_t)(ms / 1e3)) * 1e6)};
    nanosleep(&d, NULL);
}

static double sim_now(ds_runtime_t rt)
{
    double t = 0;
    ds_sim_now_us(rt, &t);
    return t;
}

typedef struct outcome {
    double rate[2];     /* kernels finished per ms in the last `tail_ms` */
    uint32_t sms[2];    /* most SMs one of its kernels used in that tail */
    int overlap;        /* a kernel of one shared an SM with the other's, in the tail */
} outcome;

/* A runtime on the simulated device in real time, scheduler thread on. */
static ds_runtime_t realtime_runtime(const char *policy)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.clock = DS_SIM_CLOCK_REALTIME;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.sim = &sim;
    cfg.policy = policy;
    return t_runtime_create(&cfg);
}

/* Two kernel records ran at the same time on at least one common SM. */
static int shared_an_sm(const ds_sim_kernel_record *a, const ds_sim_kernel_record *b)
{
    if (a->start_us >= b->end_us || b->start_us >= a->end_us)
        return 0;
    for (size_t w = 0; w < DS_MAX_SMS / 64; w++)
        if (a->sm_mask[w] & b->sm_mask[w])
            return 1;
    return 0;
}

/* Block durations are multiplied by this (1: the kernels described at the top). */
static double g_scale = 1.0;

/* Runs the tenants named in `which` (bit 0 wide, bit 1 narrow, or a second
 * wide one with `twin`) under policy for run_ms of real time (under balance,
 * then until its choice is logged and tail_ms + 20 ms more), and measures the
 * last tail_ms from the trace. */
static outcome run_pair(const char *policy, int which, int twin, double run_ms, double tail_ms)
{
    ds_runtime_t rt = realtime_runtime(policy);
    atomic_int stop = 0;
    const char *names[2] = {"wide", twin ? "wide2" : "narrow"};
    tenant ts[2] = {{NULL, t_sim_kernel(rt, names[0], 200.0 * g_scale, 0, NULL), 528, 2, &stop, DS_SUCCESS},
                    {NULL, t_sim_kernel(rt, names[1], (twin ? 200.0 : 100.0) * g_scale, 0, NULL), twin ? 528u : 16u,
                     twin ? 2u : 4u, &stop, DS_SUCCESS}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        if (which & (1 << i))
            ts[i].v = t_vctx(rt, names[i], DS_CLASS_BEST_EFFORT, 0, -1);
    for (int i = 0; i < 2; i++)
        if (ts[i].v)
            cr_assert_eq(pthread_create(&th[i], NULL, tenant_main, &ts[i]), 0);
    sleep_ms(run_ms);
    if (strcmp(policy, "balance") == 0) {
        /* measure only what runs after the choice (and 20 ms of hand-over) */
        for (int i = 0; i < 1000 && !choice()[0]; i++)
            sleep_ms(10);
        sleep_ms(20 + tail_ms);
    }
    double t_end = sim_now(rt);
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++)
        if (ts[i].v) {
            pthread_join(th[i], NULL);
            cr_assert_eq(ts[i].st, DS_SUCCESS, "%s: %s", names[i], ds_last_error_message());
        }
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    outcome o;
    memset(&o, 0, sizeof o);
    double t0 = t_end - tail_ms * 1e3;
    for (size_t i = 0; i < n; i++) {
        if (r[i].start_us < t0 || r[i].end_us < 0 || r[i].end_us > t_end)
            continue;
        int k = strcmp(r[i].name, "wide") != 0;
        o.rate[k] += 1.0 / tail_ms;
        uint32_t s = t_popcount(r[i].sm_mask);
        if (s > o.sms[k])
            o.sms[k] = s;
        for (size_t j = 0; j < n && !k; j++)
            if (strcmp(r[j].name, "wide") != 0 && r[j].start_us >= t0 && r[j].end_us >= 0 &&
                shared_an_sm(&r[i], &r[j]))
                o.overlap = 1;
    }
    free(r);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS, "%s", ds_last_error_message());
    return o;
}

static outcome run(const char *policy, int which, double run_ms, double tail_ms)
{
    return run_pair(policy, which, 0, run_ms, tail_ms);
}

/* The figures mean something only while the simulated device, not the host,
 * sets the pace: wide finishes two 800 us kernels per sync, about 1.2 per ms
 * alone and 1.0 on 116 SMs. Under a sanitizer on a busy two-core machine the
 * host can be the limit, and the policy's 20 ms samples then measure the
 * host's contention (the simulated device is a host thread). Builds with a
 * sanitizer therefore run the scenario for errors and races only, and
 * elsewhere an attempt is judged only if it was device-paced,
 * and a judged attempt that fails is repeated (ATTEMPTS in all): noise passes
 * one of them, a broken policy fails every one. If no attempt was
 * device-paced the throughput is not judged: the runs still check for errors
 * and, under TSan, races, and the test reports a skip (never a pass). */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif
/* One attempt and no test log under a sanitizer: the point there is errors
 * and races. (meson runs this binary with CRITERION_JOBS=1: see
 * tests/meson.build, which also runs it alone.) Five otherwise: with another
 * test beside it on a two-core machine, an attempt that passed the pace check
 * still failed by noise (a choice's measured sum 0.30 off the one it reached),
 * and with three attempts, two of them host-paced, the one judged decided the
 * test (CI, 2026-11-29). A judged attempt that passes ends the test, so the
 * extra attempts cost time only on a contended host. */
#define ATTEMPTS (SANITIZED ? 1 : 5)

/* Wide alone and placed (under shared or balance), narrow alone (< 0: not
 * run): near the device's pace (1.2, 1.0 and 10 kernels per ms)? */
static int device_paced(double wide_alone, double wide_placed, double narrow_alone)
{
    if (SANITIZED)
        return 0;
    double k = 1.0 / g_scale;
    if (wide_alone >= 0.85 * k && wide_placed >= 0.6 * k && (narrow_alone < 0 || narrow_alone >= 6.0 * k))
        return 1;
    fprintf(stderr, "test_balance: wide finished %.3f kernels per ms alone and %.3f placed, narrow %.3f alone "
            "(device pace about %.3f, %.3f and %.3f): the host set the pace\n",
            wide_alone, wide_placed, narrow_alone, 1.2 * k, 1.0 * k, 10 * k);
    return 0;
}

/* No attempt could be judged: a skip, with the reason, never a pass. */
static void not_judged(const char *what)
{
    if (SANITIZED)
        cr_skip_test("%s is not judged under a sanitizer (the runs checked errors and races only)", what);
    cr_skip_test("the host set the pace in every attempt: %s is not judged", what);
}

/* The sum of normalized throughputs the policy measured for its choice, or -1. */
static double measured_sum(const char *msg)
{
    const char *p = strstr(msg, "measured sum of normalized throughputs ");
    double x;
    return p && sscanf(p, "measured sum of normalized throughputs %lf", &x) == 1 ? x : -1;
}

/* NULL if the attempt shows the split that pays, else what it lacked. */
static const char *judge_split(const outcome *bal, double sum_bal, double sum_sh, const char *msg)
{
    if (!strstr(msg, "balance: 'wide' on pCtx"))
        return "no choice logged";
    double off = measured_sum(msg) - sum_bal;
    if (off < -0.25 || off > 0.25)
        return "the sum measured for the choice is off the one it reached by more than 0.25";
    if (bal->sms[1] > 16)
        return "narrow spread past 16 SMs";
    if (bal->sms[0] < 100)
        return "wide not on the complement";
    if (bal->overlap)
        return "the two shared SMs";
    if (sum_bal <= 1.5)
        return "the split did not pay (sum <= 1.5)";
    if (sum_bal <= sum_sh + 0.2)
        return "the split did not beat shared by 0.2";
    return NULL;
}

/* Alone, shared and under balance at g_scale; times in ms at scale 1. */
static void split_that_pays(void)
{
    int judged = 0;
    double k = g_scale;
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
        outcome wide = run("shared", 1, 150 * k, 100 * k), narrow = run("shared", 2, 150 * k, 100 * k);
        cr_assert_gt(wide.rate[0], 0);
        cr_assert_gt(narrow.rate[1], 0);
        outcome sh = run("shared", 3, 200 * k, 100 * k);
        watch_choice();
        /* at scale 1 about 225 ms of measuring, then 150 ms of the choice */
        outcome bal = run("balance", 3, 200 * (k > 1 ? 1 : k), 150 * k);
        const char *msg = choice();
        if (!SANITIZED)
            cr_log_info("attempt %d: kernels per ms: wide alone %.2f, narrow alone %.2f, shared %.2f + %.2f, "
                        "balance %.2f + %.2f",
                        attempt + 1, wide.rate[0], narrow.rate[1], sh.rate[0], sh.rate[1], bal.rate[0],
                        bal.rate[1]);
        if (!device_paced(wide.rate[0], sh.rate[0] < bal.rate[0] ? sh.rate[0] : bal.rate[0], narrow.rate[1]))
            continue;
        judged++;
        double sum_sh = sh.rate[0] / wide.rate[0] + sh.rate[1] / narrow.rate[1];
        double sum_bal = bal.rate[0] / wide.rate[0] + bal.rate[1] / narrow.rate[1];
        const char *why = judge_split(&bal, sum_bal, sum_sh, msg);
        cr_log_info("attempt %d: sum of normalized throughputs shared %.2f, balance %.2f on %u+%u SMs: %s (%s)",
                    attempt + 1, sum_sh, sum_bal, bal.sms[0], bal.sms[1], why ? why : "ok", msg);
        if (!why)
            return;
    }
    cr_assert_eq(judged, 0, "every device-paced attempt failed (see the attempts above)");
    not_judged("the throughput");
}

Test(balance, finds_the_split_that_pays_and_keeps_it, .timeout = 120) { split_that_pays(); }

/* The same tenants with every block 20x longer: a kernel of wide is 16 ms
 * alone and 130 ms on 16 SMs, as long as a whole training step that is one
 * graph. A fixed 20 ms sample would count 0 or 1 of them; the policy must
 * time them and still find the split, within the round's bound (every
 * candidate until 6 units of each are timed, or 3 s: about 4 s here). */
Test(balance, finds_the_split_with_long_units, .timeout = 240)
{
    g_scale = 20.0;
    split_that_pays();
}

/* Two tenants whose every unit is one long kernel, synchronized after each
 * like a training loop whose step is one graph: 'a' 16 blocks of 20 ms, 'b'
 * 16 blocks of 40 ms, one wave on any pCtx of the pool. Every placement keeps
 * both at full speed (even shared, 32 of the 132 SMs are all they use), so
 * every measured sum of normalized throughputs (the choice's, shared's and
 * each split's) must be near 2: a fixed 20 ms sample counts 0 or 1 of these
 * units, and logs that one submitted too little alone, or sums of noise. The
 * round has a bound: 4 units of each before it starts (0.16 s), then 9
 * candidates of about BAL_MEASURE_UNITS + 2 = 8 units of 'b' (0.32 s; 'a'
 * alone, 0.16 s): about 3 s, LONG_BOUND_S with a margin, where candidates
 * that ran to their 3 s cap would take 27 s. After the choice neither tenant
 * is held or slowed. */
#define LONG_A_US 20000.0
#define LONG_B_US 40000.0
#define LONG_BOUND_S 5.0
#define LONG_TAIL_MS 400.0

/* The sums a choice line gives (the choice's, shared's, then each split's)
 * into sums (room for cap) and the chosen pCtxs' SM counts; how many were
 * read, or -1 if the line is not a measured choice. */
static int measured_sums(const char *msg, double *sums, int cap, unsigned sms[2])
{
    unsigned pa, pb;
    if (cap < 2 || sscanf(msg,
                          "balance: 'a' on pCtx %u (%u SMs), 'b' on pCtx %u (%u SMs): measured sum of normalized "
                          "throughputs %lf (shared %lf;",
                          &pa, &sms[0], &pb, &sms[1], &sums[0], &sums[1]) != 6)
        return -1;
    const char *p = strstr(msg, "'a'+'b': ");
    if (!p)
        return -1;
    p += strlen("'a'+'b': ");
    int n = 2, used = 0;
    unsigned x, y;
    while (n < cap && sscanf(p, "%u+%u %lf%n", &x, &y, &sums[n], &used) == 3) {
        n++;
        p += used;
        if (strncmp(p, ", ", 2) != 0)
            break;
        p += 2;
    }
    return n;
}

/* NULL if the attempt shows long units measured and placed as they should be, else what it lacked. */
static const char *judge_long(const char *msg, double choice_s, const uint32_t done[2], char *why, size_t len)
{
    double sums[2 + 2 * DS_MAX_PCTX];
    unsigned sms[2];
    int n = measured_sums(msg, sums, (int)(sizeof sums / sizeof sums[0]), sms);
    if (n < 0)
        return msg[0] ? "no measured choice" : "no choice logged";
    if (n < 3)
        return "no split measured";
    for (int i = 0; i < n; i++)
        if (sums[i] < 1.8 || sums[i] > 2.2) {
            snprintf(why, len, "measured sum %d of %d is %.2f, not near 2", i + 1, n, sums[i]);
            return why;
        }
    if (sms[0] < 16 || sms[1] < 16)
        return "a tenant on fewer SMs than its 16 blocks";
    if (choice_s > LONG_BOUND_S) {
        snprintf(why, len, "the choice took %.2f s (bound %.1f s)", choice_s, LONG_BOUND_S);
        return why;
    }
    /* kernels that ran wholly in the tail: 20 and 10 at full speed */
    if (done[0] < 0.8 * LONG_TAIL_MS * 1e3 / LONG_A_US || done[1] < 0.8 * LONG_TAIL_MS * 1e3 / LONG_B_US) {
        snprintf(why, len, "after the choice 'a' finished %u and 'b' %u kernels in %.0f ms", done[0], done[1],
                 LONG_TAIL_MS);
        return why;
    }
    return NULL;
}

Test(balance, times_long_units_and_chooses_in_bounded_time, .timeout = 120)
{
    int judged = 0;
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
        watch_choice();
        ds_runtime_t rt = realtime_runtime("balance");
        atomic_int stop = 0;
        const char *names[2] = {"a", "b"};
        tenant ts[2] = {{NULL, t_sim_kernel(rt, names[0], LONG_A_US, 0, NULL), 16, 1, &stop, DS_SUCCESS},
                        {NULL, t_sim_kernel(rt, names[1], LONG_B_US, 0, NULL), 16, 1, &stop, DS_SUCCESS}};
        pthread_t th[2];
        double t0 = sim_now(rt);
        for (int i = 0; i < 2; i++)
            ts[i].v = t_vctx(rt, names[i], DS_CLASS_BEST_EFFORT, 0, -1);
        for (int i = 0; i < 2; i++)
            cr_assert_eq(pthread_create(&th[i], NULL, tenant_main, &ts[i]), 0);
        /* the choice (or 4 x the bound), then 20 ms of hand-over and the tail */
        double choice_s = -1;
        while (choice_s < 0 && sim_now(rt) - t0 < 4e6 * LONG_BOUND_S) {
            sleep_ms(5);
            if (choice()[0])
                choice_s = (sim_now(rt) - t0) * 1e-6;
        }
        const char *msg = choice();
        if (choice_s >= 0)
            sleep_ms(20 + LONG_TAIL_MS);
        double t_end = sim_now(rt);
        atomic_store(&stop, 1);
        for (int i = 0; i < 2; i++) {
            pthread_join(th[i], NULL);
            cr_assert_eq(ts[i].st, DS_SUCCESS, "%s: %s", names[i], ds_last_error_message());
        }
        size_t n;
        ds_sim_kernel_record *r = t_trace(rt, &n);
        uint32_t done[2] = {0, 0};
        for (size_t i = 0; i < n; i++)
            if (r[i].start_us >= t_end - LONG_TAIL_MS * 1e3 && r[i].end_us >= 0 && r[i].end_us <= t_end)
                done[strcmp(r[i].name, "a") != 0]++;
        free(r);
        cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS, "%s", ds_last_error_message());
        if (SANITIZED)
            continue;
        judged++;
        char buf[160];
        const char *why = judge_long(msg, choice_s, done, buf, sizeof buf);
        cr_log_info("attempt %d: choice after %.2f s, then %u + %u kernels in %.0f ms: %s (%s)", attempt + 1,
                    choice_s, done[0], done[1], LONG_TAIL_MS, why ? why : "ok", msg);
        if (!why)
            return;
    }
    cr_assert_eq(judged, 0, "every attempt failed (see the attempts above)");
    not_judged("the choice");
}

Test(balance, keeps_shared_when_no_split_pays, .timeout = 120)
{
    /* two wide tenants: any split gives each about its SM share, a sum near 1 */
    int judged = 0;
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
        outcome alone = run("shared", 1, 150, 100);
        watch_choice();
        outcome bal = run_pair("balance", 3, 1, 200, 100);
        const char *msg = choice();
        if (!device_paced(alone.rate[0], 2 * bal.rate[0], -1))
            continue;
        judged++;
        int ok = strstr(msg, "balance: 'wide' on pCtx 0 (132 SMs), 'wide2' on pCtx 0 (132 SMs)") != NULL &&
                 bal.sms[0] == 132;
        cr_log_info("attempt %d: %s (%s)", attempt + 1, ok ? "ok" : "a split was kept", msg);
        if (ok)
            return;
    }
    cr_assert_eq(judged, 0, "every device-paced attempt kept a split (see the attempts above)");
    not_judged("the choice");
}

Test(balance, one_tenant_is_never_held_or_moved, .timeout = 30)
{
    ds_runtime_t rt = realtime_runtime("balance");
    CUfunction f = t_sim_kernel(rt, "k", 50.0, 0, NULL);
    ds_vctx_t v = t_vctx(rt, "only", DS_CLASS_BEST_EFFORT, 0, 1);
    double t0 = sim_now(rt);
    while (sim_now(rt) - t0 < 60000.0) {
        cr_assert_eq(ds_launch(v, f, t_dim(264), t_dim(128), 0, NULL, NULL), DS_SUCCESS);
        cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    }
    ds_vctx_stats s = DS_VCTX_STATS_INIT;
    cr_assert_eq(ds_vctx_get_stats(v, &s), DS_SUCCESS);
    cr_assert_eq(s.holds, 0, "never held");
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(t_popcount(r[n - 1].sm_mask), 132, "placed on the whole GPU");
    free(r);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}
