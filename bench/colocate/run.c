/* One configuration of the colocate benchmark: see run.h. */
#include "run.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* BE steps before the window opens: cuBLAS heuristics, clocks and caches
 * settle, and the window starts with BE already in its steady state. */
#define BE_WARMUP_STEPS 4
/* Gap between publishing t0 and t0 itself, so both tenants see it coming. */
#define WINDOW_LEAD_NS 1000000ull
/* Gap between the last warm-up request and the settle schedule's start. */
#define SETTLE_LEAD_NS 100000ull

/* What the main thread and the tenant threads share. */
typedef struct run_sync {
    atomic_int be_ready; /* BE finished its warm-up (or failed) */
    atomic_int ls_ready; /* LS finished its warm-up (or failed) */
    atomic_int stop;     /* BE: stop after the current step */
    atomic_int failed;   /* some thread failed: everybody winds down */
    atomic_int ls_done, be_done; /* the tenant thread has given its turn up for good */
    _Atomic uint64_t t0_ns;
    ds_runtime_t rt;     /* simulated clock (bench_clock_sim): polled by the waits */
} run_sync;

/* Host times (ns, CLOCK_MONOTONIC) of one LS request of the window (run.h):
 * due; start = max(due, previous done); wake; submitted; done. */
enum { T_DUE, T_START, T_WAKE, T_SUBMITTED, T_DONE, T_COUNT };
typedef struct ls_times {
    uint64_t at[T_COUNT];
} ls_times;

/* One LS request for env->trace_path. */
typedef struct ls_trace {
    double due_us, latency_us;
    uint32_t pctx;
} ls_trace;

typedef struct ls_task {
    const colo_env *env;
    ds_vctx_t v;
    run_sync *sync;
    ls_times *times; /* [env->requests] */
    ls_trace *trace; /* NULL, or [env->settle + env->requests]: settle, then window */
    uint64_t fingerprint;
    int fingerprint_ok;
    colo_placement place;
    uint32_t turn; /* simulated clock: the thread's place (bench_turn_*) */
} ls_task;

typedef struct be_task {
    const colo_env *env;
    ds_vctx_t v;
    run_sync *sync;
    uint64_t start_ns;
    uint64_t *done_ns; /* host time at which step i was seen complete */
    size_t done_count, done_cap;
    colo_placement place; /* steps submitted inside the window */
    uint32_t turn;
} be_task;

/* Lets `us` pass. On the simulated clock (sync->rt) the waiting thread takes
 * turns with the tenants and runs the runtime's scheduler pass (the runtime
 * has no scheduler thread there), so passes come at simulated instants, 100
 * us apart, and the run repeats itself exactly. */
static void pause_us(const run_sync *sync, long us)
{
    if (sync->rt) {
        ds_runtime_poll(sync->rt);
        bench_sleep_until_ns(bench_now_ns() + (uint64_t)us * 1000u);
        return;
    }
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* Waits until *flag is set or some thread failed. 0 if the flag was set. */
static int wait_flag(run_sync *sync, atomic_int *flag)
{
    while (!atomic_load(flag) && !atomic_load(&sync->failed))
        pause_us(sync, 100);
    return atomic_load(&sync->failed) ? -1 : 0;
}

/* Joins a tenant thread: on the simulated clock only once it has given its
 * turn up (*done), since pthread_join is a wait the simulator does not see. */
static void join_tenant(run_sync *sync, pthread_t th, atomic_int *done)
{
    while (sync->rt && !atomic_load(done))
        pause_us(sync, 100);
    pthread_join(th, NULL);
}

/* Where v's latest kernel went (the policy may move it at any launch),
 * counted into p (NULL: not counted). Returns that pCtx, UINT32_MAX if
 * unknown. */
static uint32_t sample_placement(ds_vctx_t v, colo_placement *p)
{
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    if (ds_vctx_get_stats(v, &st) != DS_SUCCESS || st.pctx >= DS_MAX_PCTX)
        return UINT32_MAX;
    if (p) {
        p->pctx[st.pctx]++;
        p->urgent += st.urgent != 0;
        p->samples++;
    }
    return st.pctx;
}

static int ls_request(workload *w, ds_vctx_t v)
{
    if (w->ops->ls_submit(w, v))
        return -1;
    BENCH_DS_CHECK(ds_vctx_synchronize(v));
    return 0;
}

/* ------------------------------------------------------------------------ */
/* LS tenant                                                                 */

/* Serves n requests due at base + arrival_us[i], each recorded with
 * ds_vctx_request_record (latency from its due time). With times (the
 * window), also the timeline of each request and where it was placed; with
 * trace, each request's due time, latency and pCtx. */
static int ls_serve(ls_task *t, uint64_t base, const double *arrival_us, size_t n, ls_times *times,
                    ls_trace *trace)
{
    workload *w = t->env->work;
    uint64_t prev_done = base;
    for (size_t i = 0; i < n; i++) {
        uint64_t due = base + (uint64_t)(arrival_us[i] * 1e3);
        bench_sleep_until_ns(due);
        uint64_t wake = bench_now_ns();
        if (atomic_load(&t->sync->failed))
            return -1;
        if (w->ops->ls_submit(w, t->v))
            return -1;
        uint64_t submitted = bench_now_ns();
        if (times || trace) {
            uint32_t pctx = sample_placement(t->v, times ? &t->place : NULL);
            if (trace)
                trace[i] = (ls_trace){.due_us = arrival_us[i], .pctx = pctx};
        }
        BENCH_DS_CHECK(ds_vctx_synchronize(t->v));
        uint64_t done = bench_now_ns();
        double latency_us = (double)(done - due) / 1e3;
        BENCH_DS_CHECK(ds_vctx_request_record(t->v, latency_us));
        if (times)
            times[i] = (ls_times){{due, due > prev_done ? due : prev_done, wake, submitted, done}};
        if (trace)
            trace[i].latency_us = latency_us;
        prev_done = done;
    }
    return 0;
}

static int ls_body(ls_task *t)
{
    const colo_env *env = t->env;
    workload *w = env->work;
    if (w->ops->thread_init(w))
        return -1;
    for (unsigned i = 0; i < env->ls_warmup; i++)
        if (ls_request(w, t->v))
            return -1;
    if (env->settle &&
        ls_serve(t, bench_now_ns() + SETTLE_LEAD_NS, env->settle_arrival_us, env->settle, NULL, t->trace))
        return -1;
    atomic_store(&t->sync->ls_ready, 1);
    uint64_t t0;
    while ((t0 = atomic_load(&t->sync->t0_ns)) == 0 && !atomic_load(&t->sync->failed))
        pause_us(t->sync, 50);
    if (atomic_load(&t->sync->failed) ||
        ls_serve(t, t0, env->arrival_us, env->requests, t->times, t->trace ? t->trace + env->settle : NULL))
        return -1;
    return w->ops->ls_fingerprint(w, &t->fingerprint, &t->fingerprint_ok);
}

static void *ls_main(void *arg)
{
    ls_task *t = arg;
    if (bench_turn_attach(t->turn) || ls_body(t))
        atomic_store(&t->sync->failed, 1);
    atomic_store(&t->sync->ls_ready, 1);
    atomic_store(&t->sync->ls_done, 1);
    bench_turn_release(t->turn);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* BE tenant                                                                 */

static int be_record(be_task *t, uint64_t completed)
{
    uint64_t now = bench_now_ns();
    while (t->done_count < completed) {
        if (t->done_count == t->done_cap) {
            size_t cap = t->done_cap ? 2 * t->done_cap : 4096;
            uint64_t *p = realloc(t->done_ns, cap * sizeof *p);
            if (!p) {
                fprintf(stderr, "colocate: out of memory for %zu BE step times\n", cap);
                return -1;
            }
            t->done_ns = p;
            t->done_cap = cap;
        }
        t->done_ns[t->done_count++] = now;
    }
    return 0;
}

static int be_body(be_task *t)
{
    workload *w = t->env->work;
    if (w->ops->thread_init(w))
        return -1;
    be_progress p = {0, 0};
    t->start_ns = bench_now_ns();
    const uint64_t window_ns = (uint64_t)(t->env->window_us * 1e3);
    while (!atomic_load(&t->sync->stop) && !atomic_load(&t->sync->failed)) {
        if (w->ops->be_submit(w, t->v, &p))
            return -1;
        uint64_t t0 = atomic_load(&t->sync->t0_ns), now = bench_now_ns();
        if (t0 && now >= t0 && now - t0 <= window_ns)
            sample_placement(t->v, &t->place);
        if (w->ops->be_retire(w, t->v, &p) || be_record(t, p.completed))
            return -1;
        if (p.completed >= BE_WARMUP_STEPS)
            atomic_store(&t->sync->be_ready, 1);
    }
    BENCH_DS_CHECK(ds_vctx_synchronize(t->v));
    return be_record(t, p.submitted);
}

static void *be_main(void *arg)
{
    be_task *t = arg;
    if (bench_turn_attach(t->turn) || be_body(t))
        atomic_store(&t->sync->failed, 1);
    atomic_store(&t->sync->be_ready, 1);
    atomic_store(&t->sync->be_done, 1);
    bench_turn_release(t->turn);
    return NULL;
}

/* Steps completed by time t, interpolated linearly between the completions
 * seen around t (the host sees completions one or two at a time, so a plain
 * count would carry up to two steps of error at each end of the window). */
static double be_progress_at(const be_task *t, uint64_t at)
{
    size_t n = 0;
    while (n < t->done_count && t->done_ns[n] <= at)
        n++;
    uint64_t prev = n ? t->done_ns[n - 1] : t->start_ns;
    if (n == t->done_count || at <= prev)
        return (double)n;
    size_t next = n; /* completions seen at the same instant count together */
    while (next + 1 < t->done_count && t->done_ns[next + 1] == t->done_ns[n])
        next++;
    double frac = (double)(at - prev) / (double)(t->done_ns[n] - prev);
    return (double)n + frac * (double)(next + 1 - n);
}

/* ------------------------------------------------------------------------ */
/* one configuration                                                         */

typedef struct run_state {
    run_sync sync;
    ls_task ls;
    be_task be;
    pthread_t ls_thread, be_thread;
    int ls_started, be_started;
} run_state;

/* Starts a tenant thread, its place in the turns (*turn) reserved first. */
static int start_thread(pthread_t *th, void *(*fn)(void *), void *arg, int *started, uint32_t *turn)
{
    if (bench_turn_reserve(turn))
        return -1;
    int e = pthread_create(th, NULL, fn, arg);
    if (e != 0) {
        fprintf(stderr, "colocate: pthread_create: %s\n", strerror(e));
        bench_turn_release(*turn);
        return -1;
    }
    *started = 1;
    return 0;
}

/* Starts the tenants, opens the window, waits for the LS schedule (or the
 * window, without LS), stops BE. Returns t0, or 0 on failure. */
static uint64_t run_window(const colo_env *env, const colo_plan *plan, run_state *s)
{
    run_sync *sync = &s->sync;
    if (plan->run_be && (start_thread(&s->be_thread, be_main, &s->be, &s->be_started, &s->be.turn) ||
                         wait_flag(sync, &sync->be_ready)))
        goto fail;
    if (plan->run_ls && (start_thread(&s->ls_thread, ls_main, &s->ls, &s->ls_started, &s->ls.turn) ||
                         wait_flag(sync, &sync->ls_ready)))
        goto fail;
    uint64_t t0 = bench_now_ns() + WINDOW_LEAD_NS;
    atomic_store(&sync->t0_ns, t0);
    if (s->ls_started) {
        join_tenant(sync, s->ls_thread, &sync->ls_done);
        s->ls_started = 0;
    } else if (sync->rt) {
        while (bench_now_ns() < t0 + (uint64_t)(env->window_us * 1e3))
            pause_us(sync, 100);
    } else {
        bench_sleep_until_ns(t0 + (uint64_t)(env->window_us * 1e3));
    }
    atomic_store(&sync->stop, 1);
    if (s->be_started) {
        join_tenant(sync, s->be_thread, &sync->be_done);
        s->be_started = 0;
    }
    return atomic_load(&sync->failed) ? 0 : t0;
fail:
    atomic_store(&sync->failed, 1);
    return 0;
}

static void join_all(run_state *s)
{
    atomic_store(&s->sync.failed, 1);
    if (s->ls_started)
        join_tenant(&s->sync, s->ls_thread, &s->sync.ls_done);
    if (s->be_started)
        join_tenant(&s->sync, s->be_thread, &s->sync.be_done);
}

/* The pCtx most samples ran on; `fallback` (the binding at the end) without samples. */
static uint32_t most_used(const colo_placement *p, uint32_t fallback)
{
    uint32_t best = fallback;
    uint64_t most = 0;
    for (uint32_t i = 0; i < DS_MAX_PCTX; i++)
        if (p->pctx[i] > most) {
            most = p->pctx[i];
            best = i;
        }
    return best;
}

/* Summary of one span (from - to, us) of every request's timeline. */
static int span_summary(const ls_times *tm, size_t n, size_t from, size_t to, double *buf, bench_summary *out)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (double)(tm[i].at[to] - tm[i].at[from]) / 1e3;
    return bench_summarize(buf, n, out);
}

static int collect_ls(const colo_env *env, const colo_plan *plan, const ls_task *t, colo_result *out)
{
    const size_t n = env->requests;
    double *buf = malloc(n * sizeof *buf);
    if (!buf) {
        fprintf(stderr, "colocate: out of memory for %zu latencies\n", n);
        return -1;
    }
    size_t over = 0, runs = 0;
    int prev_late = 0;
    double service = 0.0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t *at = t->times[i].at;
        buf[i] = (double)(at[T_DONE] - at[T_DUE]) / 1e3;
        int late = plan->ls.slo_us && buf[i] > (double)plan->ls.slo_us;
        runs += late && !prev_late;
        over += (size_t)late;
        prev_late = late;
        service += (double)(at[T_DONE] - at[T_START]) / 1e3;
    }
    out->ls_over_slo_frac = (double)over / (double)n;
    out->ls_within = n - over;
    out->ls_counted = n;
    out->ls_late_run_mean = runs ? (double)over / (double)runs : NAN;
    out->ls_service_mean_us = service / (double)n;
    int rc = bench_summarize(buf, n, &out->ls_latency_us);
    if (rc == 0)
        rc = span_summary(t->times, n, T_DUE, T_START, buf, &out->ls_queue_wait_us);
    if (rc == 0)
        rc = span_summary(t->times, n, T_START, T_SUBMITTED, buf, &out->ls_submit_delay_us);
    if (rc == 0)
        rc = span_summary(t->times, n, T_DUE, T_WAKE, buf, &out->ls_wake_delay_us);
    if (rc == 0)
        rc = span_summary(t->times, n, T_WAKE, T_SUBMITTED, buf, &out->ls_enqueue_us);
    if (rc == 0)
        rc = span_summary(t->times, n, T_SUBMITTED, T_DONE, buf, &out->ls_device_us);
    free(buf);
    return rc;
}

static int collect(const colo_env *env, const colo_plan *plan, run_state *s, uint64_t t0, colo_result *out)
{
    out->window_s = env->window_us / 1e6;
    if (out->has_ls) {
        out->ls_place = s->ls.place;
        out->ls_pctx = most_used(&s->ls.place, out->ls_stats.pctx);
        if (collect_ls(env, plan, &s->ls, out))
            return -1;
        out->ls_fingerprint = s->ls.fingerprint;
        out->ls_fingerprint_ok = s->ls.fingerprint_ok;
    }
    if (out->has_be) {
        uint64_t t1 = t0 + (uint64_t)(env->window_us * 1e3);
        out->be_steps = be_progress_at(&s->be, t1) - be_progress_at(&s->be, t0);
        out->be_steps_per_s = out->be_steps / out->window_s;
        out->be_place = s->be.place;
        out->be_pctx = most_used(&s->be.place, out->be_stats.pctx);
    }
    return 0;
}

/* env->trace_path: every settle and window request of LS (run.h). */
static int write_trace(const colo_env *env, const colo_plan *plan, const ls_trace *trace)
{
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    BENCH_DS_CHECK(ds_runtime_info_get(env->rt, &info));
    FILE *f = fopen(env->trace_path, "w");
    if (!f) {
        fprintf(stderr, "colocate: cannot write %s\n", env->trace_path);
        return -1;
    }
    fprintf(f, "phase,index,due_us,latency_us,over_slo,pctx,sms\n");
    for (size_t i = 0; i < env->settle + env->requests; i++) {
        int window = i >= env->settle;
        const ls_trace *e = &trace[i];
        int known = e->pctx < info.num_pctx;
        fprintf(f, "%s,%zu,%.3f,%.3f,%d,%d,%u\n", window ? "window" : "settle", window ? i - env->settle : i,
                e->due_us, e->latency_us, plan->ls.slo_us && e->latency_us > (double)plan->ls.slo_us,
                known ? (int)e->pctx : -1, known ? info.pctx[e->pctx].sm_count : 0);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "colocate: error writing %s\n", env->trace_path);
        return -1;
    }
    return 0;
}

static int create_vctx(const colo_env *env, const ds_vctx_attr *a, ds_vctx_t *v)
{
    BENCH_DS_CHECK(ds_vctx_create(env->rt, a, v));
    return 0;
}

static int read_stats(ds_vctx_t v, ds_vctx_stats *st)
{
    *st = (ds_vctx_stats)DS_VCTX_STATS_INIT;
    if (v)
        BENCH_DS_CHECK(ds_vctx_get_stats(v, st));
    return 0;
}

static int destroy_vctx(ds_vctx_t v)
{
    if (v)
        BENCH_DS_CHECK(ds_vctx_destroy(v));
    return 0;
}

int colo_run(const colo_env *env, const colo_plan *plan, colo_result *out)
{
    memset(out, 0, sizeof *out);
    uint32_t turn = 0;
    out->has_ls = plan->run_ls;
    out->has_be = plan->run_be;
    out->ls_priority = plan->ls.priority;
    out->be_priority = plan->be.priority;
    run_state *s = calloc(1, sizeof *s);
    ls_times *times = calloc(env->requests ? env->requests : 1, sizeof *times);
    ls_trace *trace = env->trace_path && plan->run_ls ? calloc(env->settle + env->requests, sizeof *trace) : NULL;
    int rc = -1;
    if (!s || !times || (env->trace_path && plan->run_ls && !trace)) {
        fprintf(stderr, "colocate: out of memory\n");
        goto done;
    }
    s->ls = (ls_task){.env = env, .sync = &s->sync, .times = times, .trace = trace};
    s->be = (be_task){.env = env, .sync = &s->sync};
    /* On the simulated clock this thread takes turns with the tenants. */
    s->sync.rt = bench_clock_sim_rt();
    if (bench_turn_reserve(&turn) || bench_turn_attach(turn))
        goto done;
    /* The policy first: it places each vCtx as it is created. */
    if (plan->policy && ds_runtime_set_policy(env->rt, plan->policy) != DS_SUCCESS) {
        fprintf(stderr, "colocate: ds_runtime_set_policy(%s) -> %s\n", plan->policy, ds_last_error_message());
        goto done;
    }
    if ((plan->run_ls && create_vctx(env, &plan->ls, &s->ls.v)) ||
        (plan->run_be && create_vctx(env, &plan->be, &s->be.v)))
        goto done;
    uint64_t t0 = run_window(env, plan, s);
    join_all(s);
    if (t0 != 0 && read_stats(s->ls.v, &out->ls_stats) == 0 && read_stats(s->be.v, &out->be_stats) == 0 &&
        collect(env, plan, s, t0, out) == 0 && (!trace || write_trace(env, plan, trace) == 0))
        rc = 0;
done:
    if (s) {
        if (destroy_vctx(s->ls.v) || destroy_vctx(s->be.v))
            rc = -1;
        free(s->be.done_ns);
        bench_turn_release(turn);
    }
    free(s);
    free(times);
    free(trace);
    return rc;
}

int colo_calibrate(const colo_env *env, const ds_vctx_attr *ls, unsigned warmup, unsigned samples,
                   double *mean_us, uint64_t *fingerprint, int *fingerprint_ok)
{
    workload *w = env->work;
    ds_vctx_t v;
    BENCH_DS_CHECK(ds_vctx_create(env->rt, ls, &v));
    int rc = w->ops->thread_init(w);
    for (unsigned i = 0; rc == 0 && i < warmup; i++)
        rc = ls_request(w, v);
    uint64_t t = bench_now_ns();
    for (unsigned i = 0; rc == 0 && i < samples; i++)
        rc = ls_request(w, v);
    *mean_us = (double)(bench_now_ns() - t) / 1e3 / (double)(samples ? samples : 1);
    if (rc == 0)
        rc = w->ops->ls_fingerprint(w, fingerprint, fingerprint_ok);
    BENCH_DS_CHECK(ds_vctx_destroy(v));
    return rc;
}
