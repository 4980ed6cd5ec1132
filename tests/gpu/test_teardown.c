/*
 * g. Teardown with work in flight (DESIGN invariant 6): completes or reports
 * it, never hangs.
 */
#include "gpu_fixture.h"

/* A 300 ms kernel in flight: ds_vctx_destroy waits for it and succeeds. */
Test(teardown, destroy_waits_for_work, .timeout = 60)
{
    gpu_env e;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_CUDA;
    cfg.teardown_timeout_ms = 10000; /* explicit: DS_TEARDOWN_TIMEOUT_MS must not shorten it */
    gpu_open(&e, &cfg);
    ds_vctx_t v = gpu_vctx(&e, "long", DS_CLASS_BEST_EFFORT, -1);
    CUdeviceptr done = gpu_alloc(&e, sizeof(uint32_t));
    const ds_dim3 one = {1, 1, 1};

    /* Warm the function (lazy loading) so the 300 ms are the kernel's own. */
    long long ns = 0;
    CUdeviceptr none = 0;
    void *pw[] = {&ns, &none};
    GPU_DS(ds_launch(v, e.spin, one, one, 0, pw, NULL));
    GPU_DS(ds_vctx_synchronize(v));

    ns = 300000000ll; /* 300 ms */
    void *params[] = {&ns, &done};
    double t0 = gpu_now_ms();
    GPU_DS(ds_launch(v, e.spin, one, one, 0, params, NULL));
    ds_status st = ds_vctx_destroy(v);
    double waited = gpu_now_ms() - t0;
    cr_assert_eq(st, DS_SUCCESS, "ds_vctx_destroy -> %s: %s", ds_status_name(st), ds_last_error_message());
    cr_log_info("ds_vctx_destroy returned after %.1f ms", waited);
    cr_assert_geq(waited, 250.0, "destroy returned after %.1f ms, before the 300 ms kernel could finish", waited);
    cr_assert_lt(waited, 5000.0, "destroy took %.1f ms", waited);
    uint32_t flag = 0;
    gpu_read(&e, &flag, done, sizeof flag);
    cr_assert_eq(flag, 1, "the kernel had not finished when ds_vctx_destroy returned DS_SUCCESS");
    GPU_DS_EQ(ds_vctx_synchronize(v), DS_ERR_INVALID_HANDLE);
    gpu_free(&e, done);
    gpu_close(&e);
}

/* teardown_timeout_ms = 50 and a 1 s kernel: DS_ERR_TIMEOUT quickly, the
 * handle is dead afterwards, and the runtime still tears down. */
Test(teardown, destroy_times_out, .timeout = 60)
{
    gpu_env e;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_CUDA;
    cfg.teardown_timeout_ms = 50;
    gpu_open(&e, &cfg);
    ds_vctx_t v = gpu_vctx(&e, "stuck", DS_CLASS_BEST_EFFORT, -1);
    const ds_dim3 one = {1, 1, 1};
    long long ns = 0;
    CUdeviceptr none = 0;
    void *params[] = {&ns, &none};
    GPU_DS(ds_launch(v, e.spin, one, one, 0, params, NULL)); /* warm */
    GPU_DS(ds_vctx_synchronize(v));

    ns = 1000000000ll; /* 1 s */
    GPU_DS(ds_launch(v, e.spin, one, one, 0, params, NULL));
    double t0 = gpu_now_ms();
    ds_status st = ds_vctx_destroy(v);
    double waited = gpu_now_ms() - t0;
    cr_log_info("ds_vctx_destroy -> %s after %.1f ms", ds_status_name(st), waited);
    cr_assert_eq(st, DS_ERR_TIMEOUT, "ds_vctx_destroy -> %s (%s), want DS_ERR_TIMEOUT", ds_status_name(st),
                 ds_last_error_message());
    cr_assert_geq(waited, 45.0, "returned after %.1f ms: did not wait for the 50 ms timeout", waited);
    cr_assert_lt(waited, 500.0, "returned after %.1f ms (timeout 50 ms)", waited);

    GPU_DS_EQ(ds_launch(v, e.spin, one, one, 0, params, NULL), DS_ERR_INVALID_HANDLE);
    GPU_DS_EQ(ds_vctx_synchronize(v), DS_ERR_INVALID_HANDLE);
    GPU_DS_EQ(ds_vctx_remap(v, 0), DS_ERR_INVALID_HANDLE);
    CUstream s = NULL;
    GPU_DS_EQ(ds_vctx_acquire_stream(v, &s), DS_ERR_INVALID_HANDLE);
    ds_vctx_stats stats = DS_VCTX_STATS_INIT;
    GPU_DS_EQ(ds_vctx_get_stats(v, &stats), DS_ERR_INVALID_HANDLE);
    GPU_DS_EQ(ds_vctx_destroy(v), DS_ERR_INVALID_HANDLE);

    /* The kernel is most likely still running: the runtime must tear down
     * anyway, without hanging. The module goes with the primary context the
     * runtime releases (this process holds no other reference to it), so it
     * is not unloaded under the running kernel here. */
    ds_runtime_t rt = e.rt;
    e.rt = NULL;
    e.module = NULL;
    t0 = gpu_now_ms();
    st = ds_runtime_destroy(rt);
    double took = gpu_now_ms() - t0;
    cr_log_info("ds_runtime_destroy -> %s after %.1f ms", ds_status_name(st), took);
    cr_assert(st == DS_SUCCESS || st == DS_ERR_TIMEOUT, "ds_runtime_destroy -> %s: %s", ds_status_name(st),
              ds_last_error_message());
    cr_assert_lt(took, 5000.0, "ds_runtime_destroy took %.1f ms", took);
    GPU_DS_EQ(ds_runtime_destroy(rt), DS_ERR_INVALID_HANDLE);
}
