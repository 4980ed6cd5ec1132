/* Device faults: a tenant kernel that faults poisons the shared
 * context; every vCtx's next call returns DS_ERR_DEVICE_FAULT naming the
 * culprit, the scheduler notices within 100 ms without any tenant call, and
 * teardown returns promptly. Modelled on the simulated device with
 * ds_sim_kernel_desc.faults (sticky, like CUDA_ERROR_ILLEGAL_ADDRESS). */
#include <string.h>
#include <time.h>

#include "common.h"
#include "core/clock.h"
#include "core/fault.h"
#include "core/runtime.h"

static ds_runtime_t fault_runtime(ds_sim_clock clock, int32_t sched_period_us)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.clock = clock;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.sim = &sim;
    cfg.policy = "slo_aware";
    cfg.scheduler_period_us = sched_period_us;
    ds_runtime_t rt = NULL;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_SUCCESS, "%s", ds_last_error_message());
    return rt;
}

static CUfunction kernel(ds_runtime_t rt, const char *name, double block_us, int faults)
{
    ds_sim_kernel_desc d = DS_SIM_KERNEL_DESC_INIT;
    d.name = name;
    d.block_us = block_us;
    d.faults = (uint32_t)faults;
    CUfunction f = NULL;
    cr_assert_eq(ds_sim_kernel_create(rt, &d, &f), DS_SUCCESS, "%s", ds_last_error_message());
    return f;
}

/* Wall clock: the scheduler thread alone notices the fault (no tenant call in
 * between) within 100 ms; then every vCtx call fails naming the culprit, and
 * the runtime tears down at once although the good tenant's kernel never
 * finishes. */
Test(fault, scheduler_notices_within_100ms_and_every_vctx_fails, .timeout = 30)
{
    ds_runtime_t rt = fault_runtime(DS_SIM_CLOCK_REALTIME, 0);
    ds_vctx_t good = t_vctx(rt, "good", DS_CLASS_LATENCY_SENSITIVE, 1, -1);
    ds_vctx_t bad = t_vctx(rt, "bad", DS_CLASS_BEST_EFFORT, 0, -1);
    CUfunction slow = kernel(rt, "slow", 5e6, 0); /* 5 s per block */
    CUfunction trap = kernel(rt, "trap", 10, 1);
    cr_assert_eq(ds_launch(good, slow, t_dim(4), t_dim(128), 0, NULL, NULL), DS_SUCCESS, "%s",
                 ds_last_error_message());
    double t0 = ds__wall_ms();
    /* the launch itself succeeds, as on a GPU: the fault is asynchronous */
    cr_assert_eq(ds_launch(bad, trap, t_dim(1), t_dim(32), 0, NULL, NULL), DS_SUCCESS, "%s",
                 ds_last_error_message());
    while (!ds__faulted(rt) && ds__wall_ms() - t0 < 1000)
        ;
    double seen = ds__wall_ms() - t0;
    cr_assert(ds__faulted(rt), "the fault was not noticed within 1 s");
    cr_log_info("fault noticed by the scheduler after %.2f ms", seen);
    cr_assert_lt(seen, 100.0 * T_SANITIZER_SLOWDOWN, "noticed after %.1f ms", seen);

    cr_assert_eq(ds_launch(good, slow, t_dim(1), t_dim(32), 0, NULL, NULL), DS_ERR_DEVICE_FAULT);
    cr_assert(strstr(ds_last_error_message(), "vCtx 'bad'"), "culprit not named: %s", ds_last_error_message());
    cr_assert(strstr(ds_last_error_message(), "CUDA_ERROR_ILLEGAL_ADDRESS"), "%s", ds_last_error_message());
    cr_assert_eq(ds_launch(bad, trap, t_dim(1), t_dim(32), 0, NULL, NULL), DS_ERR_DEVICE_FAULT);
    CUstream s;
    cr_assert_eq(ds_vctx_acquire_stream(good, &s), DS_ERR_DEVICE_FAULT);
    cr_assert_eq(ds_vctx_synchronize(good), DS_ERR_DEVICE_FAULT);
    cr_assert_eq(ds_vctx_synchronize(bad), DS_ERR_DEVICE_FAULT);
    cr_assert_eq(ds_vctx_remap(good, 1), DS_ERR_DEVICE_FAULT);
    cr_assert_eq(ds_runtime_poll(rt), DS_ERR_DEVICE_FAULT);
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    cr_assert_eq(ds_vctx_get_stats(good, &st), DS_SUCCESS, "queries keep working");

    double t1 = ds__wall_ms();
    cr_assert_eq(ds_runtime_destroy(rt), DS_ERR_DEVICE_FAULT, "%s", ds_last_error_message());
    cr_assert_lt(ds__wall_ms() - t1, 1000.0, "teardown waited on work that can never finish");
}

/* Virtual time, no scheduler thread: the first tenant call that touches the
 * device sees the fault; a section open at the time closes and reports it;
 * destroying a vCtx and the runtime returns. */
Test(fault, tenant_call_sees_it_and_sections_close)
{
    ds_runtime_t rt = fault_runtime(DS_SIM_CLOCK_VIRTUAL, -1);
    ds_vctx_t a = t_vctx(rt, "a", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_t b = t_vctx(rt, "b", DS_CLASS_BEST_EFFORT, 0, -1);
    CUfunction ok = kernel(rt, "ok", 10, 0);
    CUfunction trap = kernel(rt, "trap", 10, 1);
    CUstream s;
    cr_assert_eq(ds_vctx_acquire_stream(a, &s), DS_SUCCESS);
    cr_assert_eq(ds_launch(b, ok, t_dim(8), t_dim(32), 0, NULL, NULL), DS_SUCCESS);
    cr_assert_eq(ds_launch(b, trap, t_dim(1), t_dim(32), 0, NULL, NULL), DS_SUCCESS);
    cr_assert_eq(ds_vctx_synchronize(b), DS_ERR_DEVICE_FAULT);
    cr_assert(strstr(ds_last_error_message(), "vCtx 'b'"), "%s", ds_last_error_message());
    cr_assert_eq(ds_vctx_release_stream(a), DS_ERR_DEVICE_FAULT);
    cr_assert_eq(ds_vctx_release_stream(a), DS_ERR_BUSY, "the section was closed");
    cr_assert_eq(ds_launch(a, ok, t_dim(1), t_dim(32), 0, NULL, NULL), DS_ERR_DEVICE_FAULT);
    cr_assert_eq(ds_sim_launch_on_stream(rt, s, ok, t_dim(1), t_dim(32), NULL), DS_ERR_DEVICE_FAULT);
    cr_assert_eq(ds_vctx_destroy(a), DS_ERR_DEVICE_FAULT);
    cr_assert_eq(ds_vctx_destroy(a), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_runtime_destroy(rt), DS_ERR_DEVICE_FAULT);
}

/* Work queued behind the faulting kernel never runs; work before it did. A
 * kernel without `faults` never faults (the default is 0). */
Test(fault, later_work_never_runs_and_default_is_healthy)
{
    ds_runtime_t rt = fault_runtime(DS_SIM_CLOCK_VIRTUAL, -1);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_sim_kernel_desc d = DS_SIM_KERNEL_DESC_INIT;
    cr_assert_eq(d.faults, 0);
    CUfunction before = kernel(rt, "before", 10, 0);
    CUfunction trap = kernel(rt, "trap", 10, 1);
    CUfunction after = kernel(rt, "after", 10, 0);
    cr_assert_eq(ds_launch(v, before, t_dim(1), t_dim(32), 0, NULL, NULL), DS_SUCCESS);
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    cr_assert_eq(ds_launch(v, trap, t_dim(1), t_dim(32), 0, NULL, NULL), DS_SUCCESS);
    ds_status st = ds_launch(v, after, t_dim(1), t_dim(32), 0, NULL, NULL);
    cr_assert_eq(st, DS_ERR_DEVICE_FAULT, "%s", ds_status_name(st));
    size_t n = 0;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_geq(t_find(r, n, "before")->end_us, 0);
    cr_assert_lt(t_find(r, n, "trap")->end_us, 0, "a faulting kernel never ends");
    for (size_t i = 0; i < n; i++)
        cr_assert_neq(strcmp(r[i].name, "after"), 0, "work after the fault reached the device");
    free(r);
    cr_assert_eq(ds_runtime_destroy(rt), DS_ERR_DEVICE_FAULT);
}
