/*
 * Gates on the GPU. A best-effort (BE) vCtx on the whole GPU queues
 * kernels that fill every SM, a gate before each; its gate closes while one
 * runs. Then:
 *  - BE's queued kernels do not start (a counter their first block bumps
 *    stays put for milliseconds);
 *  - an LS kernel launched on the 16-SM LOW pCtx starts, as the host sees it
 *    (ds_launch to a flag in pinned host memory), within 20 us at the median;
 *    for contrast the same measurement while BE runs ungated is logged;
 *  - after the gate opens, BE's kernels run in order, all of them, once.
 * Once with host-written gates (the default), once with RCK-driven ones.
 * Then the hardware-queue budget: as many closed gates as the runtime allows
 * (CUDA_DEVICE_MAX_CONNECTIONS - 2) leave the LS stream alone, one more is
 * refused. A tenant that closes its own gate and then launches gets
 * DS_ERR_TIMEOUT after teardown_timeout_ms. With the RCK running, cuMemFree
 * and whole-context syncs would wait for it: those tests free nothing before ds_runtime_destroy (the process
 * ends with the test).
 */
#include <stdlib.h>
#include <string.h>

#include "gpu_fixture.h"

#define BE_KERNELS 20
#define BE_SPIN_NS 300000ll /* each BE kernel holds every SM for 300 us */
#define LS_TRIALS 20

typedef struct gates_env {
    gpu_env e;
    CUdeviceptr buf; /* counter, then the log */
    volatile unsigned int *flag_host;
    CUdeviceptr flag_dev;
    uint32_t full;
    int low;
} gates_env;

/* Everything on the device is made before the runtime (and with it the RCK)
 * starts (gpu_prepare); the module is loaded eagerly for the same reason
 * (eager_modules). */
static void open_env(gates_env *g, ds_gate_mode gates, ds_rck_mode rck)
{
    memset(g, 0, sizeof *g);
    gpu_env *e = &g->e;
    gpu_prepare(e);
    GPU_CU(e, cuMemAlloc(&g->buf, (1 + APPEND_LOG_CAP) * sizeof(int)));
    GPU_CU(e, cuMemsetD32(g->buf, 0, 1 + APPEND_LOG_CAP));
    GPU_CU(e, cuStreamSynchronize(NULL)); /* the memset, on the legacy stream */
    void *p = NULL;
    cr_assert_not_null(e->cu->cuMemHostAlloc, "driver without cuMemHostAlloc");
    GPU_CU(e, cuMemHostAlloc(&p, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    memset(p, 0, 64);
    g->flag_host = p;
    GPU_CU(e, cuMemHostGetDevicePointer(&g->flag_dev, p, 0));

    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_CUDA;
    cfg.gates = gates;
    cfg.rck = rck;
    cfg.teardown_timeout_ms = 5000;
    gpu_start(e, &cfg);
    g->full = UINT32_MAX;
    for (uint32_t i = 0; i < e->info.num_pctx; i++)
        if (e->info.pctx[i].anchor == DS_ANCHOR_FULL)
            g->full = i;
    g->low = gpu_find_low(&e->info, 16);
    cr_assert_neq(g->full, UINT32_MAX);
    cr_assert_geq(g->low, 0);
    ds_runtime_stats s = DS_RUNTIME_STATS_INIT;
    GPU_DS(ds_runtime_get_stats(e->rt, &s));
    cr_assert_eq(s.gates, gates == DS_GATES_AUTO ? DS_GATES_HOST : gates);
    cr_log_info("gates %s, RCK %s (%u SMs); up to %u gates closed at once; LS on pCtx %d (%u SMs), BE on pCtx %u "
                "(%u SMs)",
                s.gates == DS_GATES_RCK ? "RCK-written" : "host-written", s.rck_running ? "running" : "off",
                s.rck_sm_count, s.max_closed_gates, g->low, e->info.pctx[g->low].sm_count, g->full,
                e->info.pctx[g->full].sm_count);
}

/* Destroys the runtime first (the RCK stops), then frees. */
static void close_env(gates_env *g)
{
    gpu_stop(&g->e, DS_SUCCESS);
    GPU_CU(&g->e, cuMemFree(g->buf));
    GPU_CU(&g->e, cuMemFreeHost((void *)g->flag_host));
    gpu_finish(&g->e);
}

static void eager_modules(void) { setenv("CUDA_MODULE_LOADING", "EAGER", 1); }

static int be_count(gates_env *g)
{
    int n = 0;
    gpu_read(&g->e, &n, g->buf, sizeof n);
    return n;
}

static void be_launch(gates_env *g, ds_vctx_t be, int id, long long ns, uint32_t blocks)
{
    CUdeviceptr log = g->buf + sizeof(int);
    void *p[] = {&g->buf, &log, &id, &ns};
    GPU_DS(ds_launch(be, g->e.gate_fill, (ds_dim3){blocks, 1, 1}, (ds_dim3){1024, 1, 1}, 0, p, NULL));
}

/* Host time from ds_launch of LS's kernel to its flag on the host (us), -1 past
 * 200 ms. */
static double ls_start_us(gates_env *g, ds_vctx_t ls, unsigned int value)
{
    void *p[] = {&g->flag_dev, &value};
    uint64_t t0 = gpu_now_ns();
    GPU_DS(ds_launch(ls, g->e.host_flag, (ds_dim3){1, 1, 1}, (ds_dim3){32, 1, 1}, 0, p, NULL));
    while (*g->flag_host != value)
        if (gpu_now_ns() - t0 > 200000000ull)
            return -1;
    return (double)(gpu_now_ns() - t0) / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

static unsigned int flag_value = 1;

static void gate_scenario(gates_env *g)
{
    gpu_env *e = &g->e;
    uint32_t fill_blocks = 2 * e->info.sm_count;
    ds_vctx_t be = gpu_vctx(e, "be", DS_CLASS_BEST_EFFORT, (int32_t)g->full);
    ds_vctx_t ls = gpu_vctx(e, "ls", DS_CLASS_LATENCY_SENSITIVE, g->low);
    GPU_DS(ds_vctx_set_urgent(ls, 1));
    GPU_DS(ds_vctx_set_gate_interval(be, 0));

    /* warm up both, then the contrast: LS while BE runs ungated */
    for (int i = 0; i < 5; i++)
        cr_assert_gt(ls_start_us(g, ls, flag_value++), 0.0);
    be_launch(g, be, -1, 1000, fill_blocks);
    GPU_DS(ds_vctx_synchronize(be));
    double contrast[5];
    for (int i = 0; i < 6; i++)
        be_launch(g, be, -1, BE_SPIN_NS, fill_blocks);
    gpu_sleep_us(100);
    for (int i = 0; i < 5; i++) {
        contrast[i] = ls_start_us(g, ls, flag_value++);
        gpu_sleep_us(137);
    }
    GPU_DS(ds_vctx_synchronize(be));
    int base = be_count(g); /* the warm-up's kernels, logged as -1 */

    /* BE queues its kernels; the gate closes while the second runs */
    for (int i = 0; i < BE_KERNELS; i++)
        be_launch(g, be, i, BE_SPIN_NS, fill_blocks);
    gpu_sleep_us(450);
    GPU_DS(ds_vctx_gate_close(be));
    gpu_sleep_us(1000);
    int c1 = be_count(g) - base;
    cr_assert(c1 >= 1 && c1 < 5, "%d BE kernels had started 1 ms after the close", c1);
    double lat[LS_TRIALS];
    for (int i = 0; i < LS_TRIALS; i++) {
        lat[i] = ls_start_us(g, ls, flag_value++);
        cr_assert_gt(lat[i], 0.0, "LS trial %d did not start within 200 ms", i);
        gpu_sleep_us(50);
    }
    gpu_sleep_us(2000);
    int c2 = be_count(g) - base;
    cr_assert_eq(c2, c1, "BE kernels started while its gate was closed (%d -> %d)", c1, c2);
    double worst = 0;
    for (int i = 0; i < LS_TRIALS; i++)
        worst = lat[i] > worst ? lat[i] : worst;
    double med = median(lat, LS_TRIALS), cmed = median(contrast, 5);
    cr_log_info("BE gate closed: %d of %d BE kernels started; LS launch-to-start (host-observed) median %.1f us, "
                "max %.1f us; while BE ran ungated: median %.1f us",
                c1, BE_KERNELS, med, worst, cmed);
    cr_assert_leq(med, 20.0, "LS started %.1f us after its launch (median) with BE's gate closed", med);

    /* reopened: all of BE's kernels, in order, once */
    GPU_DS(ds_vctx_gate_open(be));
    GPU_DS(ds_vctx_synchronize(be));
    int log[1 + 8 + BE_KERNELS];
    cr_assert_leq(base, 8);
    gpu_read(e, log, g->buf, sizeof log);
    cr_assert_eq(log[0] - base, BE_KERNELS, "%d of %d BE kernels ran", log[0] - base, BE_KERNELS);
    for (int i = 0; i < BE_KERNELS; i++)
        cr_assert_eq(log[1 + base + i], i, "BE kernel %d ran %d-th", log[1 + base + i], i);
    ds_vctx_stats s = DS_VCTX_STATS_INIT;
    GPU_DS(ds_vctx_get_stats(be, &s));
    cr_assert_eq(s.gate_closes, 1);
    cr_assert_eq(s.gates, 1 + 6 + BE_KERNELS, "a gate before every BE kernel");
    cr_log_info("BE gate closed %.2f ms; %llu gates placed", s.gate_closed_us / 1e3,
                (unsigned long long)s.gates);
}

Test(gates, host_gate_holds_be_and_lets_ls_start, .timeout = 60)
{
    gates_env g;
    open_env(&g, DS_GATES_AUTO, DS_RCK_OFF);
    gate_scenario(&g);
    close_env(&g);
}

Test(gates, rck_gate_holds_be_and_lets_ls_start, .timeout = 60, .init = eager_modules)
{
    gates_env g;
    open_env(&g, DS_GATES_RCK, DS_RCK_ON);
    gate_scenario(&g);
    ds_runtime_stats s = DS_RUNTIME_STATS_INIT;
    GPU_DS(ds_runtime_get_stats(g.e.rt, &s));
    cr_log_info("RCK: %llu beats, heartbeat %.0f us old, %llu boundaries timestamped, %llu profile samples from "
                "them",
                (unsigned long long)s.rck_beats, s.heartbeat_age_us, (unsigned long long)s.boundaries,
                (unsigned long long)s.rck_profile_samples);
    cr_assert_eq(s.rck_running, 1);
    cr_assert_gt(s.rck_beats, 0);
    cr_assert_geq(s.boundaries, BE_KERNELS, "the RCK saw every gate pass");
    cr_assert_eq(s.heartbeat_misses, 0);
    close_env(&g);
}

/* The hardware-queue budget (devprobe: with the default 8 connections, 7
 * blocked streams left an LS stream alone and 8 stalled it). */
Test(gates, closed_gates_within_the_budget_leave_ls_alone, .timeout = 60)
{
    gates_env g;
    open_env(&g, DS_GATES_AUTO, DS_RCK_OFF);
    gpu_env *e = &g.e;
    ds_runtime_stats s = DS_RUNTIME_STATS_INIT;
    GPU_DS(ds_runtime_get_stats(e->rt, &s));
    uint32_t m = s.max_closed_gates;
    cr_assert_eq(m, e->info.max_connections - 2);
    if (m > 14)
        m = 14; /* CUDA_DEVICE_MAX_CONNECTIONS set high: 14 make the point */
    ds_vctx_t ls = gpu_vctx(e, "ls", DS_CLASS_LATENCY_SENSITIVE, g.low);
    GPU_DS(ds_vctx_set_urgent(ls, 1));
    for (int i = 0; i < 3; i++)
        cr_assert_gt(ls_start_us(&g, ls, flag_value++), 0.0);
    ds_vctx_t be[16];
    for (uint32_t i = 0; i <= m; i++) {
        be[i] = gpu_vctx(e, "be", DS_CLASS_BEST_EFFORT, (int32_t)g.full);
        GPU_DS(ds_vctx_set_gate_interval(be[i], 0));
        be_launch(&g, be[i], (int)(2 * i), 3000000, 4); /* 3 ms: still running at the close */
        be_launch(&g, be[i], (int)(2 * i + 1), 1000, 4);
    }
    for (uint32_t i = 0; i < m; i++)
        GPU_DS(ds_vctx_gate_close(be[i]));
    if (m == s.max_closed_gates)
        GPU_DS_EQ(ds_vctx_gate_close(be[m]), DS_ERR_LIMIT);
    gpu_sleep_us(5000); /* first kernels done: each gated stream now waits */
    double lat[10];
    for (int i = 0; i < 10; i++) {
        lat[i] = ls_start_us(&g, ls, flag_value++);
        cr_assert_gt(lat[i], 0.0, "LS stalled with %u gates closed", m);
    }
    double med = median(lat, 10);
    cr_log_info("%u gates closed (CUDA_DEVICE_MAX_CONNECTIONS=%u): LS launch-to-start median %.1f us, max %.1f us; "
                "one more close refused",
                m, e->info.max_connections, med, lat[9]);
    cr_assert_leq(med, 20.0);
    int started = be_count(&g);
    cr_assert_eq(started, (int)(m + 2), "the first kernel of each, and both of the refused one");
    for (uint32_t i = 0; i <= m; i++)
        GPU_DS(ds_vctx_gate_open(be[i]));
    for (uint32_t i = 0; i <= m; i++)
        GPU_DS(ds_vctx_synchronize(be[i]));
    cr_assert_eq(be_count(&g), (int)(2 * (m + 1)), "every BE kernel ran once");
    close_env(&g);
}

/* A tenant that closes its own gate and then launches (or opens a section):
 * nobody opens the gate, so the call waits out teardown_timeout_ms and returns
 * DS_ERR_TIMEOUT within 2x that in wall time; the kernel is not submitted
 * (its flag in pinned host memory never changes), the runtime has reopened
 * the gate, and the caller's retry runs. */
static void own_gate_times_out(int section)
{
    const uint32_t timeout_ms = 300;
    gates_env g;
    memset(&g, 0, sizeof g);
    gpu_env *e = &g.e;
    gpu_prepare(e);
    void *p = NULL;
    GPU_CU(e, cuMemHostAlloc(&p, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    memset(p, 0, 64);
    g.flag_host = p;
    GPU_CU(e, cuMemHostGetDevicePointer(&g.flag_dev, p, 0));
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_CUDA;
    cfg.teardown_timeout_ms = timeout_ms;
    gpu_start(e, &cfg);

    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = "own-gate";
    a.cls = DS_CLASS_BEST_EFFORT;
    ds_vctx_t v;
    GPU_DS(ds_vctx_create(e->rt, &a, &v));
    GPU_DS(ds_vctx_gate_close(v));
    unsigned int value = 7;
    void *params[] = {&g.flag_dev, &value};
    CUstream s = NULL;
    uint64_t t0 = gpu_now_ns();
    ds_status st = section ? ds_vctx_acquire_stream(v, &s)
                           : ds_launch(v, e->host_flag, (ds_dim3){1, 1, 1}, (ds_dim3){32, 1, 1}, 0, params, NULL);
    double waited_ms = (double)(gpu_now_ns() - t0) / 1e6;
    cr_log_info("%s at its own closed gate: %s after %.1f ms (teardown_timeout_ms %u)",
                section ? "ds_vctx_acquire_stream" : "ds_launch", ds_status_name(st), waited_ms, timeout_ms);
    cr_assert_eq(st, DS_ERR_TIMEOUT, "%s: %s", ds_status_name(st), ds_last_error_message());
    cr_assert_lt(waited_ms, 2.0 * timeout_ms, "waited %.1f ms", waited_ms);
    cr_assert_gt(waited_ms, 0.9 * timeout_ms, "waited only %.1f ms", waited_ms);
    cr_assert_null(s, "no stream handed out");
    ds_vctx_stats vs = DS_VCTX_STATS_INIT;
    GPU_DS(ds_vctx_get_stats(v, &vs));
    cr_assert_eq(vs.gate_closed, 0, "the runtime reopened the gate");
    GPU_DS(ds_vctx_synchronize(v));
    cr_assert_eq(*g.flag_host, 0u, "the timed-out launch was not submitted");
    /* the retry goes through */
    GPU_DS(ds_launch(v, e->host_flag, (ds_dim3){1, 1, 1}, (ds_dim3){32, 1, 1}, 0, params, NULL));
    GPU_DS(ds_vctx_synchronize(v));
    cr_assert_eq(*g.flag_host, value);
    GPU_DS(ds_vctx_destroy(v));
    gpu_stop(e, DS_SUCCESS);
    GPU_CU(e, cuMemFreeHost((void *)g.flag_host));
    gpu_finish(e);
}

Test(gates, launch_at_own_closed_gate_times_out, .timeout = 60) { own_gate_times_out(0); }

Test(gates, section_at_own_closed_gate_times_out, .timeout = 60) { own_gate_times_out(1); }
