/* Gates, the resident control kernel and the watchdog on the
 * simulated device: gate ordering (queued work stops at its next gate and
 * resumes in program order, all of it, once), the owner waiting at its next
 * launch, teardown with closed gates, the hardware-queue limit, expiry, the
 * RCK's mirrored gates, boundary timestamps and heartbeat, the watchdog, and
 * slo_aware yielding BE through gates where slo_aware_nogates does not. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <detshare/policy.h>

#include "common.h"
#include "core/clock.h"
#include "sim/sim.h"

/* A runtime in virtual time, scheduler passes driven by the test. */
static ds_runtime_t gate_runtime(ds_gate_mode gates, ds_rck_mode rck, const char *policy)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, policy);
    cfg.gates = gates;
    cfg.rck = rck;
    return t_runtime_create(&cfg);
}

static double now_us(ds_runtime_t rt)
{
    double t = 0;
    ds_sim_now_us(rt, &t);
    return t;
}

static void sleep_to(ds_runtime_t rt, double t) { cr_assert_eq(ds_sim_sleep_until(rt, t), DS_SUCCESS); }

static ds_runtime_stats rt_stats(ds_runtime_t rt)
{
    ds_runtime_stats s = DS_RUNTIME_STATS_INIT;
    cr_assert_eq(ds_runtime_get_stats(rt, &s), DS_SUCCESS, "%s", ds_last_error_message());
    return s;
}

/* A kernel with one int parameter (an id the trace keeps). */
static CUfunction id_kernel(ds_runtime_t rt, const char *name, double block_us)
{
    const uint32_t sizes[1] = {sizeof(int)};
    return t_sim_kernel(rt, name, block_us, 1, sizes);
}

static void launch_id(ds_vctx_t v, CUfunction f, uint32_t blocks, int id)
{
    void *params[] = {&id};
    cr_assert_eq(ds_launch(v, f, t_dim(blocks), t_dim(128), 0, params, NULL), DS_SUCCESS, "%s",
                 ds_last_error_message());
}

static int rec_id(const ds_sim_kernel_record *r)
{
    int id;
    memcpy(&id, r->params, sizeof id);
    return id;
}

/* ---- API ------------------------------------------------------------------ */

Test(gates, api_errors_and_defaults)
{
    cr_assert_eq(ds_vctx_gate_close(NULL), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_vctx_gate_open(NULL), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_vctx_set_gate_interval(NULL, 0), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_runtime_get_stats(NULL, NULL), DS_ERR_INVALID_HANDLE);

    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.sim = &sim;
    ds_runtime_t rt = NULL;
    cfg.gates = (ds_gate_mode)7;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_ERR_INVALID_ARGUMENT);
    cfg.gates = DS_GATES_AUTO;
    cfg.rck = (ds_rck_mode)3;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_ERR_INVALID_ARGUMENT);
    cfg.rck = DS_RCK_OFF;
    cfg.gates = DS_GATES_RCK;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_ERR_INVALID_ARGUMENT, "RCK gates need the RCK");
    cr_assert_null(rt);

    /* the default: host-written gates, no RCK */
    rt = gate_runtime(DS_GATES_AUTO, DS_RCK_OFF, NULL);
    ds_runtime_stats s = rt_stats(rt);
    cr_assert_eq(s.gates, DS_GATES_HOST);
    cr_assert_eq(s.rck_running, 0);
    cr_assert_eq(s.heartbeat_age_us, -1.0);
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    cr_assert_eq(ds_runtime_info_get(rt, &info), DS_SUCCESS);
    cr_assert_eq(s.max_closed_gates, info.max_connections - 2, "one queue free, one margin");
    cr_assert_eq(ds_runtime_get_stats(rt, NULL), DS_ERR_INVALID_ARGUMENT);
    ds_runtime_stats bad = DS_RUNTIME_STATS_INIT;
    bad.size = 8;
    cr_assert_eq(ds_runtime_get_stats(rt, &bad), DS_ERR_ABI_MISMATCH);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_stats vs = t_vctx_stats(v);
    cr_assert_eq(vs.gate_interval_us, DS_GATES_NONE, "no gates until a policy asks");
    cr_assert_eq(vs.gate_closed, 0);
    cr_assert_eq(ds_vctx_gate_open(v), DS_SUCCESS, "opening an open gate does nothing");
    ds_runtime_destroy(rt);

    /* gates off: closing is refused, turning gates off is not */
    rt = gate_runtime(DS_GATES_OFF, DS_RCK_OFF, NULL);
    cr_assert_eq(rt_stats(rt).gates, DS_GATES_OFF);
    v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(ds_vctx_gate_close(v), DS_ERR_NOT_SUPPORTED);
    cr_assert_eq(ds_vctx_set_gate_interval(v, 0), DS_ERR_NOT_SUPPORTED);
    cr_assert_eq(ds_vctx_set_gate_interval(v, DS_GATES_NONE), DS_SUCCESS);
    ds_runtime_destroy(rt);

    /* structs as first published (before the gate fields) are still taken */
    cfg = (ds_runtime_config)DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.sim = &sim;
    cfg.size = DS_RUNTIME_CONFIG_SIZE_V1;
    rt = NULL;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(rt_stats(rt).gates, DS_GATES_HOST, "the new fields take their defaults");
    v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    struct {
        ds_vctx_stats s;
        unsigned char canary[64];
    } old;
    memset(&old, 0xab, sizeof old);
    old.s.size = DS_VCTX_STATS_SIZE_V1;
    old.s.magic = DS_ABI_MAGIC;
    old.s.version = DS_ABI_VERSION;
    cr_assert_eq(ds_vctx_get_stats(v, &old.s), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(old.s.size, DS_VCTX_STATS_SIZE_V1);
    cr_assert_eq(old.s.launches, 0);
    const unsigned char *tail = (const unsigned char *)&old + DS_VCTX_STATS_SIZE_V1;
    for (size_t i = 0; i < sizeof old - DS_VCTX_STATS_SIZE_V1; i++)
        cr_assert_eq(tail[i], 0xab, "byte %zu past the old size was written", i);
    old.s.size = DS_VCTX_STATS_SIZE_V1 + 4;
    cr_assert_eq(ds_vctx_get_stats(v, &old.s), DS_ERR_ABI_MISMATCH, "only published sizes");
    ds_runtime_destroy(rt);

    /* the RCK needs an SM group no LOW tier uses */
    ds_tier_spec all_low[1] = {{132, DS_ANCHOR_LOW}};
    cfg = (ds_runtime_config)DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.sim = &sim;
    cfg.tiers = all_low;
    cfg.num_tiers = 1;
    cfg.rck = DS_RCK_ON;
    rt = NULL;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_ERR_NOT_SUPPORTED, "%s", ds_last_error_message());
    cr_assert_null(rt);
}

/* ---- ordering ------------------------------------------------------------- */

/* BE's ten queued 100-us kernels, one gate before each; the gate closes while
 * the third runs. Nothing more starts; an LS kernel on another pCtx starts at
 * once; after reopening all ten run, in order, each once. */
static void stops_at_next_boundary(ds_gate_mode gates, ds_rck_mode rck)
{
    ds_runtime_t rt = gate_runtime(gates, rck, NULL);
    double t0 = now_us(rt);
    CUfunction bek = id_kernel(rt, "be", 100.0);
    CUfunction lsk = id_kernel(rt, "ls", 10.0);
    ds_vctx_t be = t_vctx(rt, "be", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_t ls = t_vctx(rt, "ls", DS_CLASS_LATENCY_SENSITIVE, 0, (int32_t)t_pctx(rt, DS_ANCHOR_LOW, 16));
    cr_assert_eq(ds_vctx_set_gate_interval(be, 0), DS_SUCCESS);
    for (int i = 0; i < 10; i++)
        launch_id(be, bek, 64, i);
    sleep_to(rt, t0 + 250.0); /* kernels 0 and 1 done, 2 running */
    cr_assert_eq(ds_vctx_gate_close(be), DS_SUCCESS);
    cr_assert_eq(ds_vctx_gate_close(be), DS_SUCCESS, "closing a closed gate does nothing");
    sleep_to(rt, t0 + 2000.0);
    double t_ls = now_us(rt);
    launch_id(ls, lsk, 16, 100);
    sleep_to(rt, t0 + 2100.0);

    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    int started = 0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(r[i].name, "be") && r[i].start_us >= 0) {
            started++;
            cr_assert_leq(r[i].start_us, t0 + 250.0, "BE kernel %d started at %.0f, after the close",
                          rec_id(&r[i]), r[i].start_us - t0);
        }
    cr_assert_eq(started, 3, "the running kernel finished, nothing after it started (%d)", started);
    const ds_sim_kernel_record *l = t_find(r, n, "ls");
    cr_assert_eq(l->start_us, t_ls, "LS on another pCtx started at once (%.1f us)", l->start_us - t_ls);
    free(r);
    ds_vctx_stats s = t_vctx_stats(be);
    cr_assert_eq(s.gate_closed, 1);
    cr_assert_eq(s.gate_closes, 1);
    cr_assert_eq(s.gates, 10, "a gate before each of the ten kernels");
    cr_assert_eq(rt_stats(rt).gates_closed, 1);

    cr_assert_eq(ds_vctx_gate_open(be), DS_SUCCESS);
    cr_assert_eq(ds_vctx_synchronize(be), DS_SUCCESS);
    r = t_trace(rt, &n);
    int next = 0;
    double prev_end = -1;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(r[i].name, "be"))
            continue;
        cr_assert_eq(rec_id(&r[i]), next, "launch order kept");
        cr_assert_geq(r[i].start_us, prev_end, "kernel %d started before %d ended", next, next - 1);
        cr_assert_geq(r[i].end_us, 0.0, "kernel %d ran", next);
        prev_end = r[i].end_us;
        next++;
    }
    cr_assert_eq(next, 10, "every kernel ran exactly once (%d)", next);
    free(r);
    s = t_vctx_stats(be);
    cr_assert_eq(s.gate_closed, 0);
    cr_assert_geq(s.gate_closed_us, 1700, "closed from 250 us to past 2100 us (%llu)",
                  (unsigned long long)s.gate_closed_us);
    cr_assert_eq(rt_stats(rt).gates_closed, 0);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

Test(gates, host_gate_stops_queued_work_at_next_boundary) { stops_at_next_boundary(DS_GATES_HOST, DS_RCK_OFF); }

Test(gates, rck_gate_stops_queued_work_at_next_boundary) { stops_at_next_boundary(DS_GATES_RCK, DS_RCK_ON); }

Test(gates, interval_places_gates_by_predicted_work)
{
    ds_runtime_t rt = gate_runtime(DS_GATES_HOST, DS_RCK_OFF, NULL);
    CUfunction k = id_kernel(rt, "k", 10.0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(ds_vctx_set_gate_interval(v, 100), DS_SUCCESS);
    ds_launch_hints h = DS_LAUNCH_HINTS_INIT;
    h.expected_us = 30; /* 30 us predicted each: a gate every 4 kernels */
    int id = 0;
    void *params[] = {&id};
    for (id = 0; id < 17; id++) /* ends just past a gate: 30 us since it */
        cr_assert_eq(ds_launch(v, k, t_dim(1), t_dim(32), 0, params, &h), DS_SUCCESS);
    cr_assert_eq(t_vctx_stats(v).gates, 5, "gates before kernels 0, 4, 8, 12, 16 (%llu)",
                 (unsigned long long)t_vctx_stats(v).gates);
    cr_assert_eq(ds_vctx_set_gate_interval(v, DS_GATES_NONE), DS_SUCCESS);
    for (id = 0; id < 20; id++)
        cr_assert_eq(ds_launch(v, k, t_dim(1), t_dim(32), 0, params, &h), DS_SUCCESS);
    cr_assert_eq(t_vctx_stats(v).gates, 5, "no gates once the interval is DS_GATES_NONE");
    /* turned back on with only 30 us of work since the last gate: the next
     * kernel still gets one (the queue is stoppable from its first launch) */
    cr_assert_eq(ds_vctx_set_gate_interval(v, 100), DS_SUCCESS);
    cr_assert_eq(ds_launch(v, k, t_dim(1), t_dim(32), 0, params, &h), DS_SUCCESS);
    cr_assert_eq(t_vctx_stats(v).gates, 6, "re-armed");
    ds_runtime_destroy(rt);
}

/* ---- the owner waits -------------------------------------------------------- */

typedef struct opener {
    ds_vctx_t v;
    atomic_int opened;
} opener;

static void *open_later(void *arg)
{
    opener *o = arg;
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    atomic_store(&o->opened, 1);
    ds_vctx_gate_open(o->v);
    return NULL;
}

Test(gates, owner_waits_at_its_next_launch_while_closed, .timeout = 30)
{
    ds_runtime_t rt = gate_runtime(DS_GATES_HOST, DS_RCK_OFF, NULL);
    CUfunction k = id_kernel(rt, "k", 10.0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(ds_vctx_set_gate_interval(v, 0), DS_SUCCESS);
    cr_assert_eq(ds_vctx_gate_close(v), DS_SUCCESS);
    opener o = {v, 0};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, open_later, &o), 0);
    launch_id(v, k, 1, 1);
    cr_assert_eq(atomic_load(&o.opened), 1, "ds_launch returned before the gate opened");
    pthread_join(th, NULL);
    CUstream s;
    cr_assert_eq(ds_vctx_gate_close(v), DS_SUCCESS);
    o.opened = 0;
    cr_assert_eq(pthread_create(&th, NULL, open_later, &o), 0);
    cr_assert_eq(ds_vctx_acquire_stream(v, &s), DS_SUCCESS);
    cr_assert_eq(atomic_load(&o.opened), 1, "a section waits for the gate too");
    cr_assert_eq(ds_vctx_release_stream(v), DS_SUCCESS);
    pthread_join(th, NULL);
    cr_assert_eq(t_vctx_stats(v).gate_holds, 2);
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    ds_runtime_destroy(rt);
}

/* ---- teardown --------------------------------------------------------------- */

static void teardown_with_closed_gates(ds_gate_mode gates, ds_rck_mode rck)
{
    ds_runtime_t rt = gate_runtime(gates, rck, NULL);
    CUfunction k = id_kernel(rt, "a", 100.0);
    CUfunction k2 = id_kernel(rt, "b", 100.0);
    ds_vctx_t a = t_vctx(rt, "a", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_t b = t_vctx(rt, "b", DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(ds_vctx_set_gate_interval(a, 0), DS_SUCCESS);
    cr_assert_eq(ds_vctx_set_gate_interval(b, 0), DS_SUCCESS);
    cr_assert_eq(ds_vctx_gate_close(a), DS_SUCCESS);
    cr_assert_eq(ds_vctx_gate_close(b), DS_SUCCESS);
    /* closed before anything was queued: only the owner's hold stops it, so
     * queue first with the gate open, then close */
    cr_assert_eq(ds_vctx_gate_open(a), DS_SUCCESS);
    cr_assert_eq(ds_vctx_gate_open(b), DS_SUCCESS);
    for (int i = 0; i < 5; i++) {
        launch_id(a, k, 8, i);
        launch_id(b, k2, 8, i);
    }
    cr_assert_eq(ds_vctx_gate_close(a), DS_SUCCESS);
    cr_assert_eq(ds_vctx_gate_close(b), DS_SUCCESS);
    sleep_to(rt, now_us(rt) + 1000.0);
    cr_assert_eq(ds_vctx_destroy(a), DS_SUCCESS, "%s", ds_last_error_message());
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    int ran = 0;
    for (size_t i = 0; i < n; i++)
        ran += !strcmp(r[i].name, "a") && r[i].end_us >= 0;
    cr_assert_eq(ran, 5, "destroy opened a's gate and its queued work finished (%d)", ran);
    free(r);
    cr_assert_eq(rt_stats(rt).gates_closed, 1);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS, "%s", ds_last_error_message());
}

Test(gates, teardown_opens_closed_host_gates, .timeout = 30)
{
    teardown_with_closed_gates(DS_GATES_HOST, DS_RCK_OFF);
}

Test(gates, teardown_opens_closed_rck_gates, .timeout = 30) { teardown_with_closed_gates(DS_GATES_RCK, DS_RCK_ON); }

/* ---- hardware queues -------------------------------------------------------- */

static void five_connections(void) { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "5", 1); }

Test(gates, close_refused_past_the_connection_budget, .init = five_connections)
{
    ds_runtime_t rt = gate_runtime(DS_GATES_HOST, DS_RCK_OFF, NULL);
    ds_runtime_stats s = rt_stats(rt);
    cr_assert_eq(s.max_closed_gates, 3, "5 connections: one free, one margin");
    ds_vctx_t v[4];
    for (int i = 0; i < 4; i++)
        v[i] = t_vctx(rt, "be", DS_CLASS_BEST_EFFORT, 0, -1);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(ds_vctx_gate_close(v[i]), DS_SUCCESS);
    t_log_capture(DS_LOG_WARN);
    cr_assert_eq(ds_vctx_gate_close(v[3]), DS_ERR_LIMIT);
    cr_assert(strstr(ds_last_error_message(), "CUDA_DEVICE_MAX_CONNECTIONS"), "%s", ds_last_error_message());
    cr_assert_eq(t_log_count(DS_LOG_WARN), 1, "the first refusal is logged");
    cr_assert_eq(t_vctx_stats(v[3]).gate_closed, 0, "refused: stays open");
    s = rt_stats(rt);
    cr_assert_eq(s.gate_refusals, 1);
    cr_assert_eq(s.gates_closed, 3);
    cr_assert_eq(ds_vctx_gate_open(v[0]), DS_SUCCESS);
    cr_assert_eq(ds_vctx_gate_close(v[3]), DS_SUCCESS, "room again");
    ds_runtime_destroy(rt);
}

Test(gates, rck_takes_a_connection, .init = five_connections)
{
    ds_runtime_t rt = gate_runtime(DS_GATES_RCK, DS_RCK_ON, NULL);
    cr_assert_eq(rt_stats(rt).max_closed_gates, 2);
    ds_runtime_destroy(rt);
}

/* ---- expiry ----------------------------------------------------------------- */

Test(gates, runtime_reopens_a_gate_closed_past_the_teardown_timeout)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, NULL);
    cfg.teardown_timeout_ms = 50;
    ds_runtime_t rt = t_runtime_create(&cfg);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(ds_vctx_gate_close(v), DS_SUCCESS);
    /* the limit is wall time: simulated time passing does not expire it */
    sleep_to(rt, now_us(rt) + 100000.0);
    cr_assert_eq(ds_runtime_poll(rt), DS_SUCCESS);
    cr_assert_eq(t_vctx_stats(v).gate_closed, 1, "100 simulated ms, little wall time");
    struct timespec ts = {0, 60 * 1000 * 1000};
    nanosleep(&ts, NULL);
    t_log_capture(DS_LOG_WARN);
    cr_assert_eq(ds_runtime_poll(rt), DS_SUCCESS);
    cr_assert_eq(t_vctx_stats(v).gate_closed, 0, "reopened after 60 ms > 50 ms of wall time");
    cr_assert_eq(rt_stats(rt).gate_expiries, 1);
    cr_assert(strstr(t_log_last(), "reopened"), "%s", t_log_last());
    ds_runtime_destroy(rt);
}

/* A tenant that closes its own gate and then launches: nobody opens it, so
 * the launch (or section) waits out the teardown timeout and returns
 * DS_ERR_TIMEOUT, within 2x the timeout in wall time whatever the simulated
 * clock does; the unit is not submitted and the gate is open afterwards. */
static void own_gate_times_out(ds_sim_clock clock, double time_scale, int scheduler, int section,
                               uint32_t timeout_ms)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.clock = clock;
    sim.time_scale = time_scale;
    ds_runtime_config cfg = t_polled_config(&sim, NULL);
    if (scheduler)
        cfg.scheduler_period_us = 0; /* the default period, on its own thread */
    cfg.teardown_timeout_ms = timeout_ms;
    ds_runtime_t rt = t_runtime_create(&cfg);
    CUfunction k = id_kernel(rt, "k", 10.0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(ds_vctx_gate_close(v), DS_SUCCESS);
    t_log_capture(DS_LOG_WARN);
    int id = 7;
    void *params[] = {&id};
    CUstream s = NULL;
    double t0 = ds__wall_ms();
    ds_status st = section ? ds_vctx_acquire_stream(v, &s)
                           : ds_launch(v, k, t_dim(1), t_dim(128), 0, params, NULL);
    double waited = ds__wall_ms() - t0;
    cr_assert_eq(st, DS_ERR_TIMEOUT, "%s: %s", ds_status_string(st), ds_last_error_message());
    cr_assert(strstr(ds_last_error_message(), "teardown timeout"), "%s", ds_last_error_message());
    cr_assert_lt(waited, 2.0 * timeout_ms, "waited %.0f ms wall, timeout %u ms", waited, timeout_ms);
    cr_assert_gt(waited, 0.9 * timeout_ms, "waited only %.0f ms wall, timeout %u ms", waited, timeout_ms);
    cr_assert_eq(s, NULL, "no stream handed out");
    cr_assert_eq(t_vctx_stats(v).gate_closed, 0, "the runtime reopened the gate");
    cr_assert_geq(rt_stats(rt).gate_expiries, 1);
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(n, 0, "the timed-out launch was not submitted");
    free(r);
    launch_id(v, k, 1, 8); /* the gate is open: the caller's retry goes through */
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS, "%s", ds_last_error_message());
}

Test(gates, own_gate_launch_times_out_virtual_clock_polled, .timeout = 30)
{
    own_gate_times_out(DS_SIM_CLOCK_VIRTUAL, 1.0, 0, 0, 200);
}

Test(gates, own_gate_launch_times_out_virtual_clock_scheduler, .timeout = 30)
{
    own_gate_times_out(DS_SIM_CLOCK_VIRTUAL, 1.0, 1, 0, 500);
}

Test(gates, own_gate_section_times_out_slow_realtime_clock, .timeout = 30)
{
    /* one simulated us takes 10 wall us: the device clock alone would wait 10x */
    own_gate_times_out(DS_SIM_CLOCK_REALTIME, 10.0, 1, 1, 200);
}

Test(gates, own_gate_launch_times_out_fast_realtime_clock, .timeout = 30)
{
    own_gate_times_out(DS_SIM_CLOCK_REALTIME, 0.1, 0, 0, 200);
}

/* ---- watchdog --------------------------------------------------------------- */

typedef struct watch {
    atomic_int congestions;
    ds_vctx_t last;
    double late_us;
} watch;

static ds_decision here(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    (void)st, (void)view, (void)ev;
    return (ds_decision){.kind = DS_DISPATCH_HERE};
}

static void on_congestion(void *st, const ds_policy_view *view, ds_vctx_t v, double late_us)
{
    (void)view;
    watch *w = st;
    w->last = v;
    w->late_us = late_us;
    atomic_fetch_add(&w->congestions, 1);
}

static void use_watch_policy(ds_runtime_t rt, watch *w)
{
    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    ops.name = "watch";
    ops.on_launch = here;
    ops.on_congestion = on_congestion;
    cr_assert_eq(ds_policy_register(rt, &ops, w), DS_SUCCESS);
    cr_assert_eq(ds_runtime_set_policy(rt, "watch"), DS_SUCCESS);
}

/* Polls every ms of simulated time up to `until`. */
static void poll_until(ds_runtime_t rt, double until)
{
    while (now_us(rt) < until) {
        sleep_to(rt, now_us(rt) + 1000.0);
        ds_runtime_poll(rt);
    }
}

Test(watchdog, work_far_past_its_profile_raises_congestion)
{
    ds_runtime_t rt = gate_runtime(DS_GATES_HOST, DS_RCK_OFF, NULL);
    watch w = {0};
    use_watch_policy(rt, &w);
    CUfunction slow = id_kernel(rt, "slow", 60000.0); /* runs 60 ms */
    CUfunction fine = id_kernel(rt, "fine", 3000.0);  /* runs as predicted */
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_launch_hints h = DS_LAUNCH_HINTS_INIT;
    h.expected_us = 3000; /* predicted 3 ms: tracked by a mark at once */
    int id = 1;
    void *params[] = {&id};
    double t0 = now_us(rt);
    cr_assert_eq(ds_launch(v, fine, t_dim(1), t_dim(32), 0, params, &h), DS_SUCCESS);
    poll_until(rt, t0 + 10000.0);
    cr_assert_eq(atomic_load(&w.congestions), 0, "3 ms predicted, 3 ms run: no event");
    cr_assert_eq(ds_launch(v, slow, t_dim(1), t_dim(32), 0, params, &h), DS_SUCCESS);
    double t1 = now_us(rt);
    poll_until(rt, t1 + 20000.0);
    cr_assert_eq(atomic_load(&w.congestions), 0, "not yet past 4 x 3 ms + 10 ms");
    poll_until(rt, t1 + 30000.0);
    cr_assert_eq(atomic_load(&w.congestions), 1, "one event for the overrunning work");
    cr_assert_eq(w.last, v);
    cr_assert_gt(w.late_us, 17000.0, "late by %.0f us", w.late_us);
    cr_assert_eq(t_vctx_stats(v).overruns, 1);
    cr_assert_eq(rt_stats(rt).overruns, 1);
    poll_until(rt, t1 + 55000.0);
    cr_assert_eq(atomic_load(&w.congestions), 1, "once per overrunning mark");
    ds_runtime_destroy(rt);
}

Test(watchdog, gate_closed_time_is_not_an_overrun)
{
    ds_runtime_t rt = gate_runtime(DS_GATES_HOST, DS_RCK_OFF, NULL);
    watch w = {0};
    use_watch_policy(rt, &w);
    CUfunction k = id_kernel(rt, "k", 1000.0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(ds_vctx_set_gate_interval(v, 0), DS_SUCCESS);
    ds_launch_hints h = DS_LAUNCH_HINTS_INIT;
    h.expected_us = 2000;
    int id = 0;
    void *params[] = {&id};
    for (id = 0; id < 3; id++)
        cr_assert_eq(ds_launch(v, k, t_dim(1), t_dim(32), 0, params, &h), DS_SUCCESS);
    cr_assert_eq(ds_vctx_gate_close(v), DS_SUCCESS);
    poll_until(rt, now_us(rt) + 30000.0);
    cr_assert_eq(atomic_load(&w.congestions), 0, "work held by its gate waits on purpose");
    cr_assert_eq(ds_vctx_gate_open(v), DS_SUCCESS);
    poll_until(rt, now_us(rt) + 10000.0);
    cr_assert_eq(atomic_load(&w.congestions), 0);
    ds_runtime_destroy(rt);
}

static ds_runtime_t rck_runtime(uint32_t timeout_ms, uint32_t presume_ms)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, NULL);
    cfg.gates = DS_GATES_RCK;
    cfg.rck = DS_RCK_ON;
    cfg.heartbeat_timeout_ms = timeout_ms;
    cfg.fault_presume_ms = presume_ms;
    return t_runtime_create(&cfg);
}

Test(watchdog, missing_heartbeat_raises_congestion_then_presumes_a_fault, .timeout = 30)
{
    ds_runtime_t rt = rck_runtime(5, 40);
    watch w = {0};
    use_watch_policy(rt, &w);
    ds_runtime_stats s = rt_stats(rt);
    cr_assert_eq(s.rck_running, 1, "the RCK is resident");
    cr_assert_gt(s.rck_sm_count, 0);
    CUfunction k = id_kernel(rt, "k", 100000.0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_launch_hints h = DS_LAUNCH_HINTS_INIT;
    h.expected_us = 100000;
    launch_id(v, k, 1, 1);
    poll_until(rt, now_us(rt) + 5000.0);
    /* in virtual time the RCK runs at the instants the device simulates
     * (here each ms): a beat at each, at most one per 100 us */
    uint64_t beats = rt_stats(rt).rck_beats;
    cr_assert_geq(beats, 4, "beating (%llu)", (unsigned long long)beats);
    cr_assert_eq(rt_stats(rt).heartbeat_misses, 0);

    CUdevice dev;
    cr_assert_eq(ds__runtime_sim_device(rt, &dev), DS_SUCCESS);
    ds__sim_rck_stall(dev, 1); /* as if a kernel had trapped */
    double t_stall = now_us(rt);
    poll_until(rt, t_stall + 4000.0);
    cr_assert_eq(rt_stats(rt).heartbeat_misses, 0, "4 ms < 5 ms");
    poll_until(rt, t_stall + 8000.0);
    s = rt_stats(rt);
    cr_assert_eq(s.heartbeat_misses, 1);
    cr_assert_geq(s.heartbeat_age_us, 5000.0);
    cr_assert_eq(atomic_load(&w.congestions), 1, "raised for the vCtx with work in flight");
    cr_assert_eq(w.last, v);
    cr_assert_eq(ds_launch(v, k, t_dim(1), t_dim(32), 0, NULL, &h) == DS_ERR_DEVICE_FAULT, 0,
                 "not presumed a fault yet");
    while (now_us(rt) < t_stall + 45000.0 && ds_runtime_poll(rt) == DS_SUCCESS)
        sleep_to(rt, now_us(rt) + 1000.0);
    cr_assert_eq(ds_runtime_poll(rt), DS_ERR_DEVICE_FAULT);
    cr_assert_leq(now_us(rt) - t_stall, 42000.0, "presumed within fault_presume_ms (%.0f us)",
                  now_us(rt) - t_stall);
    cr_assert_eq(ds_vctx_synchronize(v), DS_ERR_DEVICE_FAULT);
    cr_assert(strstr(ds_last_error_message(), "heartbeat"), "%s", ds_last_error_message());
    cr_assert_eq(ds_runtime_destroy(rt), DS_ERR_DEVICE_FAULT, "torn down, and it says why");
}

Test(watchdog, heartbeat_only_without_presumed_faults, .timeout = 30)
{
    ds_runtime_t rt = rck_runtime(5, DS_FAULT_PRESUME_NEVER);
    CUdevice dev;
    cr_assert_eq(ds__runtime_sim_device(rt, &dev), DS_SUCCESS);
    poll_until(rt, now_us(rt) + 2000.0);
    ds__sim_rck_stall(dev, 1);
    poll_until(rt, now_us(rt) + 100000.0);
    cr_assert_eq(rt_stats(rt).heartbeat_misses, 1, "one event per silence");
    cr_assert_eq(ds_runtime_poll(rt), DS_SUCCESS, "DS_FAULT_PRESUME_NEVER: the driver decides");
    ds__sim_rck_stall(dev, 0);
    poll_until(rt, now_us(rt) + 2000.0);
    cr_assert_lt(rt_stats(rt).heartbeat_age_us, 1000.0, "beating again");
    ds__sim_rck_stall(dev, 1);
    poll_until(rt, now_us(rt) + 10000.0);
    cr_assert_eq(rt_stats(rt).heartbeat_misses, 2, "a new silence, a new event");
    ds__sim_rck_stall(dev, 0);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

/* In real time the heartbeat has a watcher thread of its own, which makes no
 * driver call: a fault is presumed even when no scheduler pass runs (on a GPU
 * the passes block in the driver while it recovers from the fault). */
Test(watchdog, heartbeat_thread_presumes_a_fault_without_any_pass, .timeout = 30)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.clock = DS_SIM_CLOCK_REALTIME;
    ds_runtime_config cfg = t_polled_config(&sim, NULL); /* no scheduler thread, and no poll below */
    cfg.rck = DS_RCK_ON;
    cfg.heartbeat_timeout_ms = 5;
    cfg.fault_presume_ms = 40;
    ds_runtime_t rt = t_runtime_create(&cfg);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    cr_assert_eq(ds_vctx_remap(v, 0), DS_SUCCESS, "beating: no fault");
    CUdevice dev;
    cr_assert_eq(ds__runtime_sim_device(rt, &dev), DS_SUCCESS);
    ds__sim_rck_stall(dev, 1);
    double t0 = now_us(rt);
    ds_status st = DS_SUCCESS;
    while (st == DS_SUCCESS && now_us(rt) - t0 < 2e6) {
        ts.tv_nsec = 1000 * 1000;
        nanosleep(&ts, NULL);
        st = ds_vctx_remap(v, 0); /* no driver call: it sees the runtime's flag */
    }
    double took = now_us(rt) - t0;
    cr_assert_eq(st, DS_ERR_DEVICE_FAULT);
    cr_assert(took >= 40000.0 && took < 1000000.0, "presumed after %.1f ms", took / 1e3);
    cr_assert(strstr(ds_last_error_message(), "heartbeat"), "%s", ds_last_error_message());
    cr_assert_eq(rt_stats(rt).heartbeat_misses, 1);
    cr_assert_eq(ds_runtime_destroy(rt), DS_ERR_DEVICE_FAULT);
}

/* ---- RCK boundary timestamps feed the profiles -------------------------- */

static void no_sampling(void) { setenv("DS_SAMPLE_PERIOD", "0", 1); }

Test(rck, boundary_timestamps_become_profile_samples, .init = no_sampling)
{
    ds_runtime_t rt = rck_runtime(0, 0);
    CUfunction k = id_kernel(rt, "k", 100.0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(ds_vctx_set_gate_interval(v, 0), DS_SUCCESS);
    double mean = 0, tail = 0;
    const ds_policy_view *view = (const ds_policy_view *)rt;
    uint32_t full = ds_view_full_pctx(view);
    cr_assert_eq(ds_view_predict(view, k, t_dim(64), t_dim(128), full, &mean, &tail), 0,
                 "no events are timed (DS_SAMPLE_PERIOD=0)");
    for (int i = 0; i < 20; i++)
        launch_id(v, k, 64, i);
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    cr_assert_eq(ds_runtime_poll(rt), DS_SUCCESS);
    ds_runtime_stats s = rt_stats(rt);
    cr_assert_geq(s.boundaries, 20, "%llu", (unsigned long long)s.boundaries);
    cr_assert_geq(s.rck_profile_samples, 18, "%llu", (unsigned long long)s.rck_profile_samples);
    cr_assert_eq(ds_view_predict(view, k, t_dim(64), t_dim(128), full, &mean, &tail), 1);
    cr_assert_float_eq(mean, 100.0, 1e-6, "the RCK's durations are the kernel's (%.3f us)", mean);
    cr_assert_eq(t_vctx_stats(v).sampled_kernels, 0);
    ds_runtime_destroy(rt);
}

/* ---- slo_aware yields BE through gates -------------------------------------- */

/* BE alone for 10 ms after its first 256 units, by then expanded to the
 * whole GPU, then one long LS kernel. Counts the BE kernels that start while
 * LS runs. LS's SLO (10 ms) leaves room for BE's units on the whole GPU, and
 * without gates for its window too (expansion_safe): BE starts confined
 * beside LS, and expands once its units are known (256 of them) to fit. */
static int be_starts_during_ls(const char *policy)
{
    ds_runtime_t rt = gate_runtime(DS_GATES_HOST, DS_RCK_OFF, policy);
    CUfunction bek = id_kernel(rt, "be", 100.0);
    CUfunction lsk = id_kernel(rt, "ls", 600.0);
    ds_vctx_t ls = t_ls_vctx(rt, 10000);
    ds_vctx_t be = t_vctx(rt, "be", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_launch_hints h = DS_LAUNCH_HINTS_INIT;
    h.expected_us = 100;
    int id = 0;
    void *params[] = {&id};
    double t_known = -1;
    while (t_known < 0 || now_us(rt) < t_known + 10000.0) {
        cr_assert_eq(ds_launch(be, bek, t_dim(132), t_dim(128), 0, params, &h), DS_SUCCESS);
        id++;
        ds_runtime_poll(rt);
        if (id == T_SLO_BE_UNITS)
            t_known = now_us(rt);
    }
    cr_assert_eq(t_vctx_stats(be).pctx, ds_view_full_pctx((const ds_policy_view *)rt), "BE expanded (on pCtx %u)",
                 t_vctx_stats(be).pctx);
    launch_id(ls, lsk, 64, 0);
    for (int i = 0; i < 40; i++) {
        cr_assert_eq(ds_launch(be, bek, t_dim(132), t_dim(128), 0, params, &h), DS_SUCCESS);
        id++;
        ds_runtime_poll(rt);
    }
    cr_assert_eq(ds_vctx_synchronize(ls), DS_SUCCESS);
    cr_assert_eq(ds_vctx_synchronize(be), DS_SUCCESS);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    const ds_sim_kernel_record *l = t_find(r, n, "ls");
    int during = 0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(r[i].name, "be") && r[i].start_us > l->submit_us && r[i].start_us < l->end_us)
            during++;
    ds_vctx_stats bs = t_vctx_stats(be);
    if (!strcmp(policy, "slo_aware"))
        cr_assert_geq(bs.gate_closes, 1, "BE yielded through its gate");
    else
        cr_assert_eq(bs.gate_closes, 0, "no gates in slo_aware_nogates");
    free(r);
    ds_runtime_destroy(rt);
    return during;
}

Test(policy_gates, slo_aware_stops_be_queue_while_ls_runs_nogates_does_not, .timeout = 60)
{
    int gated = be_starts_during_ls("slo_aware");
    int windowed = be_starts_during_ls("slo_aware_nogates");
    cr_assert_eq(gated, 0, "with gates no queued BE kernel starts while LS runs (%d did)", gated);
    cr_assert_gt(windowed, 0, "without gates BE's queued window runs on (%d started)", windowed);
}
