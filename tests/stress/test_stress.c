/*
 * Stress on the simulated device: 64 vCtxs on 32 tenant threads
 * issue 1M launches and sections in total, with random remaps, gate closes,
 * opens and interval changes from the tenants and from another thread, and
 * live policy switches across every built-in policy from a third thread. Every launch carries (vCtx, thread,
 * sequence) as parameters; a checker thread reads the device's kernel trace
 * as it is produced and verifies, per vCtx, that no work is lost, duplicated
 * or reordered: sequence numbers arrive exactly once and in program order,
 * and each kernel starts no earlier than its predecessor ended (program order
 * of execution across remaps and sections). A watchdog fails the test if no
 * launch completes for 20 s (a deadlock).
 *
 * Clock: DS_SIM_CLOCK_REALTIME with time_scale 0.001 (one simulated us is one
 * wall ns). The point is concurrency: tenants, the scheduler thread, policy
 * hooks and switches all run at once on wall time, and kernels finish almost
 * at once so queues stay short. In VIRTUAL time the clock moves only when
 * some host thread waits, so with 32 threads idle timers and holds would be
 * driven by whichever thread happens to synchronize.
 *
 * Size: DS_STRESS_LAUNCHES (default 1000000), DS_STRESS_THREADS (32),
 * DS_STRESS_VCTXS (64). CI runs the default under the plain and ASan builds
 * (LeakSanitizer checks the teardown) and a smaller count under TSan.
 */
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <detshare/policy.h>

#include "common.h"
#include "sim/sim_internal.h"

enum { MAX_VCTXS = 256, MAX_THREADS = 128, TRACE_CAP = 1 << 16, DRAIN = 8192 };

typedef struct kparams {
    uint32_t vctx, thread;
    uint64_t seq;
} kparams;

typedef struct vstate {
    ds_vctx_t v;
    _Atomic uint64_t issued; /* launches + sections of the owner (its next seq) */
    /* checker only */
    uint64_t next_seq;
    double last_end_us;
    uint64_t checked;
} vstate;

typedef struct stress {
    ds_runtime_t rt;
    CUfunction k[3];
    uint32_t num_pctx;
    uint32_t threads, vctxs;
    uint64_t per_thread;
    vstate vs[MAX_VCTXS];
    _Atomic uint64_t progress; /* launches + sections issued */
    _Atomic uint64_t consumed; /* records the checker has verified */
    _Atomic int tenants_done;
    _Atomic uint64_t timeouts; /* units resubmitted after DS_ERR_TIMEOUT */
    _Atomic int stop;
    _Atomic int failed;
    char why[512];
    pthread_mutex_t why_lock;
    uint64_t policy_switches, remote_remaps, gate_closes, gate_refusals;
} stress;

static unsigned env_u(const char *name, unsigned def)
{
    const char *s = getenv(name);
    return s && *s ? (unsigned)strtoul(s, NULL, 10) : def;
}

static double wall_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void fail(stress *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(stress *s, const char *fmt, ...)
{
    pthread_mutex_lock(&s->why_lock);
    if (!atomic_load(&s->failed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->why, sizeof s->why, fmt, ap);
        va_end(ap);
        atomic_store(&s->failed, 1);
    }
    pthread_mutex_unlock(&s->why_lock);
    atomic_store(&s->stop, 1);
}

static uint64_t rng(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545F4914F6CDD1Dull;
}

/* ---- tenants ------------------------------------------------------------ */

typedef struct tenant_arg {
    stress *s;
    uint32_t id;
} tenant_arg;

static void *tenant(void *p)
{
    tenant_arg *a = p;
    stress *s = a->s;
    uint64_t r = 0x9E3779B97F4A7C15ull * (a->id + 1);
    uint32_t per = s->vctxs / s->threads; /* vCtxs this thread owns */
    ds_launch_hints hints = DS_LAUNCH_HINTS_INIT;
    for (uint64_t i = 0; i < s->per_thread && !atomic_load_explicit(&s->stop, memory_order_relaxed); i++) {
        /* Flow control of the checker, not of the library: a kernel starved
         * by higher-priority streams keeps the checker's finished prefix
         * from advancing; never let the trace ring wrap over unchecked
         * records (a kernel that never finishes stops progress: watchdog). */
        while (atomic_load_explicit(&s->progress, memory_order_relaxed) -
                       atomic_load_explicit(&s->consumed, memory_order_relaxed) >
                   TRACE_CAP / 2 &&
               !atomic_load_explicit(&s->stop, memory_order_relaxed))
            sched_yield();
        uint32_t vi = a->id * per + (uint32_t)(rng(&r) % per);
        vstate *vs = &s->vs[vi];
        uint64_t x = rng(&r);
        if (x % 64 == 0)
            ds_vctx_remap(vs->v, (uint32_t)(rng(&r) % s->num_pctx));
        kparams kp = {vi, a->id, atomic_load_explicit(&vs->issued, memory_order_relaxed)};
        void *params[] = {&kp.vctx, &kp.thread, &kp.seq};
        CUfunction f = s->k[(x >> 8) % 3];
        ds_dim3 grid = t_dim(1 + (uint32_t)((x >> 16) % 264));
        ds_status st;
        /* DS_ERR_TIMEOUT: the unit waited at a closed gate (or a policy's
         * hold) past the teardown timeout and was not submitted; the
         * contract is to submit it again, which the checker then sees once
         * (a unit that never gets through stops progress: the watchdog). */
        for (;;) {
            if ((x >> 32) % 16 == 0) {
                CUstream cs;
                st = ds_vctx_acquire_stream(vs->v, &cs);
                if (st == DS_SUCCESS) {
                    st = ds_sim_launch_on_stream(s->rt, cs, f, grid, t_dim(128), params);
                    ds_status st2 = ds_vctx_release_stream(vs->v);
                    if (st == DS_SUCCESS)
                        st = st2;
                }
            } else {
                hints.phase = (ds_phase)((x >> 40) % 3);
                hints.expected_us = (uint32_t)((x >> 44) % 50);
                st = ds_launch(vs->v, f, grid, t_dim(128), 0, params, (x >> 48) % 2 ? &hints : NULL);
            }
            if (st != DS_ERR_TIMEOUT)
                break;
            atomic_fetch_add(&s->timeouts, 1);
        }
        if (st != DS_SUCCESS) {
            fail(s, "thread %u vCtx %u seq %llu: %s (%s)", a->id, vi, (unsigned long long)kp.seq,
                 ds_status_name(st), ds_last_error_message());
            break;
        }
        atomic_store_explicit(&vs->issued, kp.seq + 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->progress, 1, memory_order_relaxed);
        if ((x >> 52) % 512 == 0 && ds_vctx_synchronize(vs->v) != DS_SUCCESS)
            fail(s, "ds_vctx_synchronize(%u): %s", vi, ds_last_error_message());
    }
    atomic_fetch_add(&s->tenants_done, 1);
    return NULL;
}

/* ---- disturbers --------------------------------------------------------- */

static void nap_us(long us)
{
    struct timespec t = {0, us * 1000};
    nanosleep(&t, NULL);
}

static void *switcher(void *p)
{
    stress *s = p;
    static const char *policies[] = {"slo_aware", "tpot_first", "shared",           "priority",
                                     "static",    "temporal",   "manual", "slo_aware_nogates", "balance"};
    uint64_t r = 12345;
    while (atomic_load(&s->tenants_done) < (int)s->threads && !atomic_load(&s->stop)) {
        const char *name = policies[rng(&r) % 9];
        if (ds_runtime_set_policy(s->rt, name) != DS_SUCCESS)
            fail(s, "ds_runtime_set_policy(%s): %s", name, ds_last_error_message());
        s->policy_switches++;
        nap_us(2000);
    }
    return NULL;
}

static void *remapper(void *p)
{
    stress *s = p;
    uint64_t r = 777;
    while (atomic_load(&s->tenants_done) < (int)s->threads && !atomic_load(&s->stop)) {
        uint32_t vi = (uint32_t)(rng(&r) % s->vctxs);
        if (ds_vctx_remap(s->vs[vi].v, (uint32_t)(rng(&r) % s->num_pctx)) != DS_SUCCESS)
            fail(s, "ds_vctx_remap from another thread: %s", ds_last_error_message());
        ds_vctx_stats st = DS_VCTX_STATS_INIT;
        ds_vctx_get_stats(s->vs[vi].v, &st);
        s->remote_remaps++;
        /* gates: close (the connection budget may refuse), open, re-space */
        ds_vctx_t g = s->vs[rng(&r) % s->vctxs].v;
        static const uint32_t intervals[] = {0, 50, 500, DS_GATES_NONE};
        ds_status gs;
        switch (rng(&r) % 4) {
        case 0:
            gs = ds_vctx_gate_close(g);
            if (gs == DS_SUCCESS)
                s->gate_closes++;
            else if (gs == DS_ERR_LIMIT)
                s->gate_refusals++;
            else
                fail(s, "ds_vctx_gate_close: %s", ds_last_error_message());
            break;
        case 1:
        case 2:
            if (ds_vctx_gate_open(g) != DS_SUCCESS)
                fail(s, "ds_vctx_gate_open: %s", ds_last_error_message());
            break;
        default:
            if (ds_vctx_set_gate_interval(g, intervals[rng(&r) % 4]) != DS_SUCCESS)
                fail(s, "ds_vctx_set_gate_interval: %s", ds_last_error_message());
        }
        nap_us(200);
    }
    return NULL;
}

/* ---- checker ------------------------------------------------------------ */

typedef struct checker {
    stress *s;
    uint64_t from; /* first record not yet checked */
    ds_sim_kernel_record *buf;
    uint64_t records;
} checker;

/* Checks the finished prefix of the records produced since the last call.
 * Returns the number of records consumed. */
static size_t drain(checker *c)
{
    stress *s = c->s;
    CUdevice dev;
    sim_dev *d;
    if (ds__runtime_sim_device(s->rt, &dev) != DS_SUCCESS || ds__sim_dev_acquire(dev, &d) != CUDA_SUCCESS) {
        fail(s, "checker: simulated device gone");
        return 0;
    }
    size_t n = 0;
    uint64_t next = 0;
    int rc = ds__sim_trace_since(d, c->from, c->buf, DRAIN, &n, &next);
    ds__sim_dev_release(d);
    if (rc != 0) {
        fail(s, "checker fell behind: records from %llu were overwritten (trace ring %d)",
             (unsigned long long)c->from, TRACE_CAP);
        return 0;
    }
    size_t used = 0;
    for (; used < n; used++) {
        const ds_sim_kernel_record *rec = &c->buf[used];
        if (rec->end_us < 0)
            break; /* still running: checked on a later pass */
        kparams kp;
        if (rec->param_bytes != sizeof kp) {
            fail(s, "record %llu: %u parameter bytes", (unsigned long long)rec->seq, rec->param_bytes);
            return used;
        }
        memcpy(&kp, rec->params, sizeof kp);
        if (kp.vctx >= s->vctxs) {
            fail(s, "record %llu: vCtx %u", (unsigned long long)rec->seq, kp.vctx);
            return used;
        }
        vstate *vs = &s->vs[kp.vctx];
        if (kp.seq != vs->next_seq) {
            fail(s, "vCtx %u: got seq %llu, want %llu (%s)", kp.vctx, (unsigned long long)kp.seq,
                 (unsigned long long)vs->next_seq, kp.seq < vs->next_seq ? "duplicated or reordered" : "lost");
            return used;
        }
        if (rec->start_us + 1e-6 < vs->last_end_us) {
            fail(s, "vCtx %u seq %llu started at %.3f us before seq %llu ended at %.3f us (order)", kp.vctx,
                 (unsigned long long)kp.seq, rec->start_us, (unsigned long long)kp.seq - 1, vs->last_end_us);
            return used;
        }
        vs->next_seq++;
        vs->last_end_us = rec->end_us;
        vs->checked++;
    }
    c->from += used;
    c->records += used;
    atomic_fetch_add(&s->consumed, used);
    return used;
}

static void *checker_main(void *p)
{
    checker *c = p;
    while (!atomic_load(&c->s->stop)) {
        if (drain(c) < DRAIN / 2)
            nap_us(500);
        if (atomic_load(&c->s->tenants_done) == (int)c->s->threads)
            break;
    }
    return NULL;
}

/* ---- the test ----------------------------------------------------------- */

Test(stress, many_vctxs_threads_remaps_and_policy_switches, .timeout = 600)
{
    static stress s; /* large: keep it off the stack */
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.why_lock, NULL);
    s.threads = env_u("DS_STRESS_THREADS", 32);
    s.vctxs = env_u("DS_STRESS_VCTXS", 64);
    uint64_t total = env_u("DS_STRESS_LAUNCHES", 1000000);
    cr_assert(s.threads >= 1 && s.threads <= MAX_THREADS && s.vctxs <= MAX_VCTXS && s.vctxs % s.threads == 0,
              "DS_STRESS_THREADS %u must divide DS_STRESS_VCTXS %u (<= %d)", s.threads, s.vctxs, MAX_VCTXS);
    s.per_thread = total / s.threads;

    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.clock = DS_SIM_CLOCK_REALTIME;
    sim.time_scale = 0.001;
    sim.trace_capacity = TRACE_CAP;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.sim = &sim;
    /* Under 32 busy threads slo_aware can keep a BE vCtx's gate closed for
     * long: a short timeout makes such waits end in DS_ERR_TIMEOUT and a
     * resubmission (exercised here) within 0.1 s rather than 10 s. */
    cfg.teardown_timeout_ms = 100;
    cfg.max_vctx = s.vctxs;
    cfg.policy = "slo_aware";
    cr_assert_eq(ds_runtime_create(&cfg, &s.rt), DS_SUCCESS, "%s", ds_last_error_message());
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    cr_assert_eq(ds_runtime_info_get(s.rt, &info), DS_SUCCESS);
    s.num_pctx = info.num_pctx;

    static const uint32_t sizes[] = {4, 4, 8};
    static const double block_us[] = {2, 10, 50};
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "k%d", i);
        ds_sim_kernel_desc d = DS_SIM_KERNEL_DESC_INIT;
        d.name = name;
        d.block_us = block_us[i];
        d.blocks_per_sm = 1u << i;
        d.num_params = 3;
        memcpy(d.param_sizes, sizes, sizeof sizes);
        cr_assert_eq(ds_sim_kernel_create(s.rt, &d, &s.k[i]), DS_SUCCESS, "%s", ds_last_error_message());
    }
    for (uint32_t i = 0; i < s.vctxs; i++) {
        ds_vctx_attr a = DS_VCTX_ATTR_INIT;
        char name[32];
        snprintf(name, sizeof name, "v%u", i);
        a.name = name;
        a.cls = i % 4 == 0 ? DS_CLASS_LATENCY_SENSITIVE : DS_CLASS_BEST_EFFORT;
        a.slo_us = i % 4 == 0 ? 500 : 0;
        a.priority = (int)(i % 3);
        a.phase = (ds_phase)(i % 3);
        cr_assert_eq(ds_vctx_create(s.rt, &a, &s.vs[i].v), DS_SUCCESS, "%s", ds_last_error_message());
        s.vs[i].last_end_us = -1;
    }

    checker c = {&s, 0, calloc(DRAIN, sizeof(ds_sim_kernel_record)), 0};
    cr_assert_not_null(c.buf);
    pthread_t tt[MAX_THREADS], tsw, trm, tck;
    tenant_arg args[MAX_THREADS];
    double t0 = wall_s();
    for (uint32_t i = 0; i < s.threads; i++) {
        args[i] = (tenant_arg){&s, i};
        cr_assert_eq(pthread_create(&tt[i], NULL, tenant, &args[i]), 0);
    }
    cr_assert_eq(pthread_create(&tsw, NULL, switcher, &s), 0);
    cr_assert_eq(pthread_create(&trm, NULL, remapper, &s), 0);
    cr_assert_eq(pthread_create(&tck, NULL, checker_main, &c), 0);

    /* Watchdog: progress must move at least every 20 s. */
    uint64_t last = 0;
    double last_t = wall_s();
    while (atomic_load(&s.tenants_done) < (int)s.threads) {
        nap_us(100000);
        uint64_t p = atomic_load(&s.progress);
        if (p != last) {
            last = p;
            last_t = wall_s();
        } else if (wall_s() - last_t > 20.0) {
            cr_assert_fail("deadlock: no launch completed for 20 s (%llu of %llu done, %d of %u threads "
                           "finished)",
                           (unsigned long long)p, (unsigned long long)(s.per_thread * s.threads),
                           atomic_load(&s.tenants_done), s.threads);
        }
    }
    for (uint32_t i = 0; i < s.threads; i++)
        pthread_join(tt[i], NULL);
    pthread_join(tsw, NULL);
    pthread_join(trm, NULL);
    pthread_join(tck, NULL);
    double t_issue = wall_s() - t0;
    cr_assert(!atomic_load(&s.failed), "%s", s.why);

    /* Everything finishes (gates the remapper left closed open first); the
     * checker reads the rest. */
    for (uint32_t i = 0; i < s.vctxs; i++)
        cr_assert_eq(ds_vctx_gate_open(s.vs[i].v), DS_SUCCESS);
    for (uint32_t i = 0; i < s.vctxs; i++)
        cr_assert_eq(ds_vctx_synchronize(s.vs[i].v), DS_SUCCESS, "%s", ds_last_error_message());
    while (drain(&c) > 0)
        ;
    cr_assert(!atomic_load(&s.failed), "%s", s.why);
    uint64_t issued = 0;
    for (uint32_t i = 0; i < s.vctxs; i++) {
        uint64_t n = atomic_load(&s.vs[i].issued);
        issued += n;
        cr_assert_eq(s.vs[i].checked, n, "vCtx %u: %llu issued, %llu ran", i, (unsigned long long)n,
                     (unsigned long long)s.vs[i].checked);
    }
    cr_assert_eq(issued, s.per_thread * s.threads);
    cr_assert_eq(c.records, issued, "the device ran %llu kernels for %llu issued",
                 (unsigned long long)c.records, (unsigned long long)issued);
    uint64_t remaps = 0, holds = 0, gates = 0, gate_holds = 0, closes = 0;
    for (uint32_t i = 0; i < s.vctxs; i++) {
        ds_vctx_stats st = DS_VCTX_STATS_INIT;
        cr_assert_eq(ds_vctx_get_stats(s.vs[i].v, &st), DS_SUCCESS);
        remaps += st.remaps;
        holds += st.holds;
        gates += st.gates;
        gate_holds += st.gate_holds;
        closes += st.gate_closes;
    }
    cr_log_info("stress: %llu launches+sections on %u vCtxs / %u threads in %.2f s; %llu remaps, %llu holds, "
                "%llu policy switches, %llu cross-thread remap requests; %llu gates placed, %llu gate closes "
                "(%llu by the stress thread, %llu refused for connections), %llu launches held at a gate, "
                "%llu resubmitted after DS_ERR_TIMEOUT",
                (unsigned long long)issued, s.vctxs, s.threads, t_issue, (unsigned long long)remaps,
                (unsigned long long)holds, (unsigned long long)s.policy_switches,
                (unsigned long long)s.remote_remaps, (unsigned long long)gates, (unsigned long long)closes,
                (unsigned long long)s.gate_closes, (unsigned long long)s.gate_refusals,
                (unsigned long long)gate_holds, (unsigned long long)atomic_load(&s.timeouts));
    cr_assert_gt(remaps, 0);
    cr_assert_gt(s.gate_closes, 0, "the stress closed gates");
    cr_assert_gt(gates, 0, "gates were placed in streams");
    free(c.buf);
    cr_assert_eq(ds_runtime_destroy(s.rt), DS_SUCCESS, "%s", ds_last_error_message());
    pthread_mutex_destroy(&s.why_lock);
}
