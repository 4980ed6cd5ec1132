/* Request latency accounting (ds_vctx_request_begin/end/record): totals, the
 * count over the SLO, the sliding window's percentiles, in the stats and in
 * the policy view; bad input refused with nothing recorded. */
#include <math.h>
#include <string.h>

#include <detshare/policy.h>

#include "common.h"

Test(requests, window_percentiles_and_counts_over_the_slo)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_ls_vctx(rt, 250);
    ds_vctx_stats st = t_vctx_stats(v);
    cr_assert_eq(st.requests, 0);
    cr_assert_eq(st.request_window, 0);
    cr_assert_eq(st.request_p99_us, 0.0);
    /* 1..300 us in a shuffled order (37 is coprime to 300) */
    for (uint32_t i = 0; i < 300; i++)
        cr_assert_eq(ds_vctx_request_record(v, (double)((i * 37u) % 300u + 1u)), DS_SUCCESS);
    st = t_vctx_stats(v);
    cr_assert_eq(st.requests, 300);
    cr_assert_eq(st.requests_over_slo, 50, "251..300 are over 250 us (%llu)",
                 (unsigned long long)st.requests_over_slo);
    cr_assert_eq(st.request_window, DS_REQUEST_WINDOW);
    /* the window is the last 256 recorded: compute its percentiles here */
    float w[DS_REQUEST_WINDOW];
    uint32_t over = 0;
    for (uint32_t i = 0; i < DS_REQUEST_WINDOW; i++) {
        w[i] = (float)(((300u - DS_REQUEST_WINDOW + i) * 37u) % 300u + 1u);
        over += w[i] > 250.0f;
    }
    for (uint32_t i = 1; i < DS_REQUEST_WINDOW; i++)
        for (uint32_t j = i; j > 0 && w[j - 1] > w[j]; j--) {
            float t = w[j];
            w[j] = w[j - 1];
            w[j - 1] = t;
        }
    cr_assert_eq(st.request_window_over_slo, over);
    cr_assert_float_eq(st.request_p50_us, w[DS_REQUEST_WINDOW / 2 - 1], 1e-9, "p50 %g", st.request_p50_us);
    cr_assert_float_eq(st.request_p99_us, w[(uint32_t)ceil(0.99 * DS_REQUEST_WINDOW) - 1], 1e-9, "p99 %g",
                       st.request_p99_us);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

Test(requests, late_requests_are_counted_in_runs)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_ls_vctx(rt, 250);
    /* late (L) or not (.), in order: L L . L . . L L L . => 6 late in 3 runs */
    static const double lat[] = {300, 300, 100, 300, 100, 100, 300, 300, 300, 100};
    uint64_t runs[] = {1, 1, 1, 2, 2, 2, 3, 3, 3, 3};
    for (size_t i = 0; i < sizeof lat / sizeof lat[0]; i++) {
        cr_assert_eq(ds_vctx_request_record(v, lat[i]), DS_SUCCESS);
        ds_vctx_stats st = t_vctx_stats(v);
        cr_assert_eq(st.requests_over_slo_runs, runs[i], "after request %zu: %llu runs", i,
                     (unsigned long long)st.requests_over_slo_runs);
    }
    ds_vctx_stats st = t_vctx_stats(v);
    cr_assert_eq(st.requests_over_slo, 6);
    /* without an SLO nothing is late: no runs */
    ds_vctx_t free_v = t_ls_vctx(rt, 0);
    cr_assert_eq(ds_vctx_request_record(free_v, 1e6), DS_SUCCESS);
    cr_assert_eq(t_vctx_stats(free_v).requests_over_slo_runs, 0);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

Test(requests, begin_end_measures_on_the_runtime_clock)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, "manual");
    ds_runtime_t rt = t_runtime_create(&cfg);
    ds_vctx_t v = t_ls_vctx(rt, 0);
    ds_request_t a, b;
    cr_assert_eq(ds_vctx_request_begin(v, &a), DS_SUCCESS);
    cr_assert_neq(a, 0);
    CUfunction k = t_sim_kernel(rt, "k", 40.0, 0, NULL);
    cr_assert_eq(ds_launch(v, k, t_dim(132), t_dim(128), 0, NULL, NULL), DS_SUCCESS);
    cr_assert_eq(ds_vctx_request_begin(v, &b), DS_SUCCESS, "requests may overlap");
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    double la = -1, lb = -1;
    cr_assert_eq(ds_vctx_request_end(v, a, &la), DS_SUCCESS);
    cr_assert_eq(ds_vctx_request_end(v, b, &lb), DS_SUCCESS);
    cr_assert_geq(la, 40.0 - 1e-6, "the request spans the 40 us kernel (%g)", la);
    cr_assert_geq(la, lb);
    ds_vctx_stats st = t_vctx_stats(v);
    cr_assert_eq(st.requests, 2);
    cr_assert_eq(st.requests_over_slo, 0, "no SLO: nothing is over it");
    cr_assert_float_eq(st.request_p99_us, la, 1e-3);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

Test(requests, bad_input_is_refused_and_records_nothing)
{
    t_log_capture(DS_LOG_WARN);
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_ls_vctx(rt, 100);
    ds_request_t r = 7;
    cr_assert_eq(ds_vctx_request_begin(NULL, &r), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(r, 0, "a failed begin leaves no usable request");
    cr_assert_eq(ds_vctx_request_begin(v, NULL), DS_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(t_log_last(), "req is NULL"), "%s", t_log_last());
    double lat = 5;
    cr_assert_eq(ds_vctx_request_end(v, 0, &lat), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(lat, 0.0);
    cr_assert_eq(ds_vctx_request_end(v, (ds_request_t)1e18, NULL), DS_ERR_INVALID_ARGUMENT, "a start in the future");
    cr_assert_not_null(strstr(t_log_last(), "ds_vctx_request_begin"), "%s", t_log_last());
    cr_assert_eq(ds_vctx_request_record(v, NAN), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_vctx_request_record(v, -1.0), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_vctx_request_record(v, INFINITY), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_vctx_request_record(NULL, 1.0), DS_ERR_INVALID_HANDLE);
    ds_vctx_stats st = t_vctx_stats(v);
    cr_assert_eq(st.requests, 0, "nothing was recorded");
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS);
    cr_assert_eq(ds_vctx_request_record(v, 1.0), DS_ERR_INVALID_HANDLE, "a destroyed vCtx");
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

Test(requests, older_stats_and_snapshot_sizes_are_still_filled)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_ls_vctx(rt, 100);
    cr_assert_eq(ds_vctx_request_record(v, 150.0), DS_SUCCESS);
    struct {
        ds_vctx_stats s;
        unsigned char pad[64];
    } old;
    memset(&old, 0xab, sizeof old);
    old.s = (ds_vctx_stats)DS_VCTX_STATS_INIT;
    old.s.size = DS_VCTX_STATS_SIZE_V2;
    old.s.requests = 0xfeedu;
    cr_assert_eq(ds_vctx_get_stats(v, &old.s), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(old.s.size, DS_VCTX_STATS_SIZE_V2);
    cr_assert_eq(old.s.requests, 0xfeedu, "a second-release struct ends before `requests`");
    ds_vctx_stats full = t_vctx_stats(v);
    cr_assert_eq(full.requests, 1);
    cr_assert_eq(full.requests_over_slo, 1);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

/* ---- the policy view -------------------------------------------------------------- */

typedef struct seen {
    int calls;
    ds_vctx_state full, v2;
    ds_status v2_status;
} seen;

static ds_decision look(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    seen *s = st;
    s->calls++;
    s->full = (ds_vctx_state)DS_VCTX_STATE_INIT;
    cr_assert_eq(ds_view_vctx_state(view, ev->vctx, &s->full), DS_SUCCESS, "%s", ds_last_error_message());
    s->v2 = (ds_vctx_state)DS_VCTX_STATE_INIT;
    s->v2.size = DS_VCTX_STATE_SIZE_V2;
    s->v2.requests = 0xfeedu;
    s->v2_status = ds_view_vctx_state(view, ev->vctx, &s->v2);
    return (ds_decision){.kind = DS_DISPATCH_HERE};
}

Test(requests, the_policy_view_sees_them)
{
    ds_runtime_t rt = t_sim_runtime(0);
    seen s = {0};
    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    ops.name = "looker";
    ops.on_launch = look;
    cr_assert_eq(ds_policy_register(rt, &ops, &s), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_runtime_set_policy(rt, "looker"), DS_SUCCESS);
    ds_vctx_t v = t_ls_vctx(rt, 100);
    for (int i = 1; i <= 10; i++)
        cr_assert_eq(ds_vctx_request_record(v, 20.0 * i), DS_SUCCESS);
    CUfunction k = t_sim_kernel(rt, "k", 5.0, 0, NULL);
    cr_assert_eq(ds_launch(v, k, t_dim(4), t_dim(128), 0, NULL, NULL), DS_SUCCESS);
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    cr_assert_eq(s.calls, 1);
    cr_assert_eq(s.full.requests, 10);
    cr_assert_eq(s.full.requests_over_slo, 5, "120..200 us are over 100");
    cr_assert_eq(s.full.requests_over_slo_runs, 1, "in one run");
    cr_assert_eq(s.full.request_window, 10);
    cr_assert_eq(s.full.request_window_over_slo, 5);
    cr_assert_float_eq(s.full.request_p50_us, 100.0, 1e-9);
    cr_assert_float_eq(s.full.request_p99_us, 200.0, 1e-9);
    cr_assert_eq(s.v2_status, DS_SUCCESS, "a second-release snapshot is still filled");
    cr_assert_eq(s.v2.requests, 0xfeedu, "without the fields it does not have");
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}
