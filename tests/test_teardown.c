/* DESIGN invariant 6: destroying a vCtx or the runtime with work in flight
 * completes or reports it, never hangs, never leaks driver objects. */
#include "common.h"

Test(teardown, vctx_destroy_completes_in_flight_work)
{
    ds_runtime_t rt = t_sim_runtime(0);
    CUfunction k = t_sim_kernel(rt, "k", 1000.0, 0, NULL);
    ds_vctx_t v = t_vctx(rt, "busy", DS_CLASS_BEST_EFFORT, 0, -1);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(ds_launch(v, k, t_dim(264), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(n, 5);
    for (size_t i = 0; i < n; i++)
        cr_assert_geq(r[i].end_us, 0.0, "kernel %zu ran to completion", i);
    double now;
    ds_sim_now_us(rt, &now);
    cr_assert_geq(now, 5 * 2 * 1000.0, "destroy waited for 5 kernels of 2 waves");
    free(r);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

Test(teardown, runtime_destroy_with_live_vctxs_remaps_and_sections)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    ds_runtime_info_get(rt, &in);
    CUfunction k = t_sim_kernel(rt, "k", 200.0, 0, NULL);
    ds_vctx_t v[6];
    for (int i = 0; i < 6; i++) {
        v[i] = t_vctx(rt, NULL, i % 2 ? DS_CLASS_LATENCY_SENSITIVE : DS_CLASS_BEST_EFFORT, i, -1);
        for (uint32_t j = 0; j < in.num_pctx; j++) {
            ds_vctx_remap(v[i], j);
            cr_assert_eq(ds_launch(v[i], k, t_dim(300), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
        }
    }
    CUstream s;
    cr_assert_eq(ds_vctx_acquire_stream(v[0], &s), DS_SUCCESS); /* left open on purpose */
    t_log_capture(DS_LOG_WARN);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
    cr_assert_geq(t_log_count(DS_LOG_WARN), 1, "the open section is reported");
    size_t n = 0;
    cr_assert_eq(ds_sim_trace_get(rt, NULL, 0, &n), DS_ERR_INVALID_HANDLE);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(ds_vctx_synchronize(v[i]), DS_ERR_INVALID_HANDLE);
}

Test(teardown, many_runtimes_in_one_process_do_not_leak_or_interfere)
{
    for (int round = 0; round < 20; round++) {
        ds_runtime_t a = t_sim_runtime(0), b = t_sim_runtime(64);
        CUfunction ka = t_sim_kernel(a, "ka", 50.0, 0, NULL);
        CUfunction kb = t_sim_kernel(b, "kb", 50.0, 0, NULL);
        ds_vctx_t va = t_vctx(a, NULL, DS_CLASS_BEST_EFFORT, 0, -1);
        ds_vctx_t vb = t_vctx(b, NULL, DS_CLASS_BEST_EFFORT, 0, -1);
        cr_assert_eq(ds_launch(va, ka, t_dim(132), t_dim(32), 0, NULL, NULL), DS_SUCCESS);
        cr_assert_eq(ds_launch(vb, kb, t_dim(64), t_dim(32), 0, NULL, NULL), DS_SUCCESS);
        /* a kernel of one runtime is not a kernel of the other's device */
        cr_assert_eq(ds_launch(va, kb, t_dim(1), t_dim(32), 0, NULL, NULL), DS_ERR_DRIVER);
        cr_assert_eq(ds_runtime_destroy(b), DS_SUCCESS);
        cr_assert_eq(ds_launch(va, ka, t_dim(1), t_dim(32), 0, NULL, NULL), DS_SUCCESS);
        cr_assert_eq(ds_runtime_destroy(a), DS_SUCCESS);
    }
}
