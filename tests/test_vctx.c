/* vCtx lifecycle and bad input: every error is a clear status, nothing is
 * lost, nothing crashes. */
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const uint32_t one_int[] = {4};

Test(vctx, lifecycle_and_stats)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_vctx(rt, "tenant-a", DS_CLASS_LATENCY_SENSITIVE, 3, -1);
    const char *name = NULL;
    cr_assert_eq(ds_vctx_get_name(v, &name), DS_SUCCESS);
    cr_assert_str_eq(name, "tenant-a");
    CUfunction k = t_sim_kernel(rt, "k", 5.0, 1, one_int);
    for (int i = 0; i < 10; i++) {
        int x = i;
        void *p[] = {&x};
        cr_assert_eq(ds_launch(v, k, t_dim(4), t_dim(128), 0, p, NULL), DS_SUCCESS);
    }
    CUstream s = NULL;
    cr_assert_eq(ds_vctx_acquire_stream(v, &s), DS_SUCCESS);
    cr_assert_not_null(s);
    cr_assert_eq(ds_vctx_release_stream(v), DS_SUCCESS);
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    cr_assert_eq(ds_vctx_get_stats(v, &st), DS_SUCCESS);
    cr_assert_eq(st.launches, 10);
    cr_assert_eq(st.sections, 1);
    cr_assert_eq(st.remaps, 0);
    cr_assert_eq(st.streams, 1);
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

Test(vctx, default_names_are_unique)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t a = t_vctx(rt, NULL, DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_t b = t_vctx(rt, NULL, DS_CLASS_BEST_EFFORT, 0, -1);
    const char *na, *nb;
    ds_vctx_get_name(a, &na);
    ds_vctx_get_name(b, &nb);
    cr_assert_str_neq(na, nb);
    ds_runtime_destroy(rt);
}

static void period32(void) { setenv("DS_SAMPLE_PERIOD", "32", 1); }

Test(vctx, sampled_kernel_time_is_measured, .init = period32)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    CUfunction k = t_sim_kernel(rt, "k100", 100.0, 0, NULL);
    for (int i = 0; i < 200; i++) {
        cr_assert_eq(ds_launch(v, k, t_dim(1), t_dim(32), 0, NULL, NULL), DS_SUCCESS);
        if (i % 16 == 0)
            ds_vctx_synchronize(v);
    }
    ds_vctx_synchronize(v);
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    ds_vctx_get_stats(v, &st);
    cr_assert_geq(st.sampled_kernels, 3, "every 32nd launch is timed");
    /* every 32nd, plus the first few launches of a kernel without a profile
     * (at most one in 8 until 4 samples are in) */
    cr_assert_leq(st.sampled_kernels, 200 / 32 + 1 + 6);
    double mean_us = (double)st.kernel_time_ns / 1e3 / (double)st.sampled_kernels;
    cr_assert_float_eq(mean_us, 100.0, 1.0, "sampled kernels took %.2f us", mean_us);
    ds_runtime_destroy(rt);
}

Test(vctx, bad_handles)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t out = (ds_vctx_t)0x1;
    cr_assert_eq(ds_vctx_create(NULL, NULL, &out), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_vctx_create(rt, NULL, NULL), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(out, (ds_vctx_t)0x1);
    /* a foreign pointer (not a vCtx) */
    uint64_t junk[64] = {0};
    cr_assert_eq(ds_launch((ds_vctx_t)junk, (CUfunction)junk, t_dim(1), t_dim(1), 0, NULL, NULL),
                 DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_vctx_destroy((ds_vctx_t)junk), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_runtime_destroy((ds_runtime_t)junk), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_runtime_destroy(NULL), DS_ERR_INVALID_HANDLE);
    ds_runtime_destroy(rt);
}

Test(vctx, destroyed_handles_are_reported)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_vctx(rt, "gone", DS_CLASS_BEST_EFFORT, 0, -1);
    CUfunction k = t_sim_kernel(rt, "k", 5.0, 0, NULL);
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS);
    cr_assert_eq(ds_launch(v, k, t_dim(1), t_dim(1), 0, NULL, NULL), DS_ERR_INVALID_HANDLE);
    cr_assert(strstr(ds_last_error_message(), "destroyed") != NULL, "%s", ds_last_error_message());
    cr_assert_eq(ds_vctx_destroy(v), DS_ERR_INVALID_HANDLE, "double destroy");
    cr_assert_eq(ds_vctx_remap(v, 0), DS_ERR_INVALID_HANDLE);
    CUstream s;
    cr_assert_eq(ds_vctx_acquire_stream(v, &s), DS_ERR_INVALID_HANDLE);
    ds_runtime_destroy(rt);
}

Test(vctx, launch_after_runtime_destroy)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_vctx(rt, "orphan", DS_CLASS_BEST_EFFORT, 0, -1);
    CUfunction k = t_sim_kernel(rt, "k", 5.0, 0, NULL);
    cr_assert_eq(ds_launch(v, k, t_dim(8), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS, "drains the vCtx's work");
    cr_assert_eq(ds_launch(v, k, t_dim(8), t_dim(64), 0, NULL, NULL), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_vctx_synchronize(v), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_runtime_destroy(rt), DS_ERR_INVALID_HANDLE);
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    cr_assert_eq(ds_runtime_info_get(rt, &in), DS_ERR_INVALID_HANDLE);
}

Test(vctx, bad_launch_configurations_lose_nothing)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    CUfunction k = t_sim_kernel(rt, "k", 5.0, 0, NULL);
    cr_assert_eq(ds_launch(v, k, (ds_dim3){0, 1, 1}, t_dim(32), 0, NULL, NULL), DS_ERR_INVALID_LAUNCH);
    cr_assert_eq(ds_launch(v, k, (ds_dim3){1, 0, 1}, t_dim(32), 0, NULL, NULL), DS_ERR_INVALID_LAUNCH);
    cr_assert_eq(ds_launch(v, k, t_dim(1), (ds_dim3){32, 1, 0}, 0, NULL, NULL), DS_ERR_INVALID_LAUNCH);
    cr_assert_eq(ds_launch(v, k, (ds_dim3){1, 65536, 1}, t_dim(32), 0, NULL, NULL), DS_ERR_INVALID_LAUNCH);
    cr_assert_eq(ds_launch(v, k, t_dim(1), t_dim(2048), 0, NULL, NULL), DS_ERR_INVALID_LAUNCH);
    cr_assert_eq(ds_launch(v, k, t_dim(1), (ds_dim3){32, 32, 2}, 0, NULL, NULL), DS_ERR_INVALID_LAUNCH,
                 "2048 threads in total");
    cr_assert_eq(ds_launch(v, k, t_dim(1), t_dim(32), 1u << 30, NULL, NULL), DS_ERR_INVALID_LAUNCH);
    cr_assert(strstr(ds_last_error_message(), "smem") != NULL, "%s", ds_last_error_message());
    cr_assert_eq(ds_launch(v, NULL, t_dim(1), t_dim(32), 0, NULL, NULL), DS_ERR_INVALID_ARGUMENT);
    ds_launch_hints h = DS_LAUNCH_HINTS_INIT;
    h.size = 3;
    cr_assert_eq(ds_launch(v, k, t_dim(1), t_dim(32), 0, NULL, &h), DS_ERR_ABI_MISMATCH);
    h = (ds_launch_hints)DS_LAUNCH_HINTS_INIT;
    h.expected_us = 5;
    h.phase = DS_PHASE_DECODE;
    cr_assert_eq(ds_launch(v, k, t_dim(1), t_dim(32), 0, NULL, &h), DS_SUCCESS);
    /* the largest legal launch goes through */
    cr_assert_eq(ds_launch(v, k, (ds_dim3){1, 65535, 1}, (ds_dim3){1024, 1, 1}, 0, NULL, NULL), DS_SUCCESS);
    ds_vctx_synchronize(v);
    /* the vCtx still works and only the good launches reached the device */
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    ds_vctx_get_stats(v, &st);
    cr_assert_eq(st.launches, 2);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(n, 2);
    free(r);
    ds_runtime_destroy(rt);
}

Test(vctx, bad_attributes)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = (ds_vctx_t)0x1;
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.size = 8;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_ERR_ABI_MISMATCH);
    a = (ds_vctx_attr)DS_VCTX_ATTR_INIT;
    a.cls = (ds_vctx_class)7;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_ERR_INVALID_ARGUMENT);
    a = (ds_vctx_attr)DS_VCTX_ATTR_INIT;
    a.initial_pctx = 99;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_ERR_INVALID_ARGUMENT);
    a.initial_pctx = -2;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(v, (ds_vctx_t)0x1);
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    ds_vctx_t ok = t_vctx(rt, "ok", DS_CLASS_BEST_EFFORT, 0, -1);
    st.magic = 1;
    cr_assert_eq(ds_vctx_get_stats(ok, &st), DS_ERR_ABI_MISMATCH);
    cr_assert_eq(ds_vctx_get_stats(ok, NULL), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_vctx_remap(ok, 99), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_vctx_get_name(ok, NULL), DS_ERR_INVALID_ARGUMENT);
    ds_runtime_destroy(rt);
}

Test(vctx, sections_nest_only_once)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    CUstream s;
    cr_assert_eq(ds_vctx_release_stream(v), DS_ERR_BUSY, "no section open");
    cr_assert_eq(ds_vctx_acquire_stream(v, NULL), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_vctx_acquire_stream(v, &s), DS_SUCCESS);
    cr_assert_eq(ds_vctx_acquire_stream(v, &s), DS_ERR_BUSY);
    cr_assert_eq(ds_vctx_release_stream(v), DS_SUCCESS);
    ds_runtime_destroy(rt);
}

Test(vctx, max_vctx_limit_and_slot_reuse)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.sim = &sim;
    cfg.max_vctx = 3;
    ds_runtime_t rt;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_SUCCESS);
    ds_vctx_t v[3];
    for (int i = 0; i < 3; i++)
        v[i] = t_vctx(rt, NULL, DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_t extra = NULL;
    cr_assert_eq(ds_vctx_create(rt, NULL, &extra), DS_ERR_LIMIT);
    cr_assert_eq(ds_vctx_destroy(v[1]), DS_SUCCESS);
    cr_assert_eq(ds_vctx_create(rt, NULL, &extra), DS_SUCCESS);
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    ds_runtime_info_get(rt, &in);
    cr_assert_eq(in.connections_needed, 4, "3 live vCtxs + the runtime's stream");
    ds_runtime_destroy(rt);
}

Test(vctx, warns_when_connections_run_short)
{
    t_log_capture(DS_LOG_WARN);
    ds_runtime_t rt = t_sim_runtime(0);
    for (int i = 0; i < 7; i++)
        t_vctx(rt, NULL, DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(t_log_count(DS_LOG_WARN), 0, "7 vCtxs + 1 fit in 8 connections");
    t_vctx(rt, "eighth", DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(t_log_count(DS_LOG_WARN), 1);
    cr_assert(strstr(t_log_last(), "CUDA_DEVICE_MAX_CONNECTIONS") != NULL, "%s", t_log_last());
    ds_runtime_destroy(rt);
}
