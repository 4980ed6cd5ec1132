/* Several devices in one process: a runtime per device, side by side. Each
 * simulated runtime drives a device of its own (detshare/sim.h), so two of
 * them stand for a two-GPU machine. What is per runtime: the device, its pool
 * of pCtxs, the scheduler (here each thread polls its own), the policies
 * and their parameters, the vCtxs and their sizing state. What is per
 * process: the log handler and level, the allocator hooks, the driver
 * library, and the last error of each thread. The tests check that one
 * device's load, parameters and teardown leave the other's results
 * unchanged, bit for bit in virtual time, with a thread per device. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <detshare/policy.h>

#include "common.h"

#define REQUESTS 400
#define GAP_US 1000.0

/* One device's tenants: LS requests of one 128-block kernel of 20 us blocks
 * every GAP_US, recorded against a 250 us SLO; with `be`, BE kernels of
 * 264 blocks fill the time between. */
typedef struct device_run {
    const char *ls_sms; /* slo_aware's ls_sms on this device (NULL: default) */
    int be;             /* BE fills the gaps */
    int destroy_at;     /* destroy the runtime after this many requests (0: at the end) */
    double lat[REQUESTS];
    uint32_t tier_sms; /* LS's tier at the end */
    size_t kernels;    /* kernel records on this device */
    int foreign;       /* records of the other device's kernel names */
    ds_status last;    /* the first failure, DS_SUCCESS if none */
} device_run;

#define TRY(r, call)                                                                                             \
    do {                                                                                                         \
        ds_status st_ = (call);                                                                                  \
        if (st_ != DS_SUCCESS && (r)->last == DS_SUCCESS)                                                        \
            (r)->last = st_;                                                                                     \
    } while (0)

/* Criterion's asserts belong to the test's thread: a device thread records
 * what it saw and the test judges it after the join. */
static void *device_main(void *arg)
{
    device_run *r = arg;
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, "slo_aware");
    ds_runtime_t rt = NULL;
    TRY(r, ds_runtime_create(&cfg, &rt));
    if (!rt)
        return NULL;
    if (r->ls_sms)
        TRY(r, ds_policy_param_set(rt, "slo_aware", "ls_sms", r->ls_sms));
    CUfunction lsk = NULL, bek = NULL;
    ds_sim_kernel_desc d = DS_SIM_KERNEL_DESC_INIT;
    d.name = r->be ? "ls_a" : "ls_b";
    d.block_us = 20.0;
    TRY(r, ds_sim_kernel_create(rt, &d, &lsk));
    d.name = r->be ? "be_a" : "be_b";
    d.block_us = 500.0;
    TRY(r, ds_sim_kernel_create(rt, &d, &bek));
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = "ls";
    a.cls = DS_CLASS_LATENCY_SENSITIVE;
    a.slo_us = 250;
    ds_vctx_t ls = NULL, be = NULL;
    TRY(r, ds_vctx_create(rt, &a, &ls));
    a.name = "be";
    a.cls = DS_CLASS_BEST_EFFORT;
    a.slo_us = 0;
    TRY(r, ds_vctx_create(rt, &a, &be));
    ds_launch_hints h = DS_LAUNCH_HINTS_INIT;
    h.expected_us = 1000.0;
    double next = t_sim_now(rt) + GAP_US;
    int n = r->destroy_at ? r->destroy_at : REQUESTS;
    for (int i = 0; i < n && r->last == DS_SUCCESS; i++) {
        while (r->be && t_sim_now(rt) < next) {
            TRY(r, ds_launch(be, bek, t_dim(264), t_dim(128), 0, NULL, &h));
            ds_runtime_poll(rt);
        }
        if (t_sim_now(rt) < next)
            ds_sim_sleep_until(rt, next);
        next = (next > t_sim_now(rt) ? next : t_sim_now(rt)) + GAP_US;
        ds_request_t req;
        TRY(r, ds_vctx_request_begin(ls, &req));
        TRY(r, ds_launch(ls, lsk, t_dim(128), t_dim(64), 0, NULL, NULL));
        TRY(r, ds_vctx_synchronize(ls));
        TRY(r, ds_vctx_request_end(ls, req, &r->lat[i]));
        ds_runtime_poll(rt);
    }
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    TRY(r, ds_vctx_get_stats(ls, &st));
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    TRY(r, ds_runtime_info_get(rt, &info));
    r->tier_sms = info.pctx[st.pctx].sm_count;
    TRY(r, ds_vctx_synchronize(be));
    size_t cnt = 0, cap = 1 << 16; /* the records kept (the device keeps fewer) */
    ds_sim_kernel_record *rec = calloc(cap, sizeof *rec);
    if (!rec)
        TRY(r, DS_ERR_OUT_OF_MEMORY);
    else
        TRY(r, ds_sim_trace_get(rt, rec, cap, &cnt));
    r->kernels = cnt;
    for (size_t i = 0; i < cnt; i++)
        r->foreign += strcmp(rec[i].name, r->be ? "ls_b" : "ls_a") == 0 ||
                      strcmp(rec[i].name, r->be ? "be_b" : "be_a") == 0;
    free(rec);
    TRY(r, ds_runtime_destroy(rt));
    return NULL;
}

/* Runs the two devices' threads at once. */
static void run_both(device_run *a, device_run *b)
{
    t_run_pair(device_main, a, b);
    cr_assert_eq(a->last, DS_SUCCESS, "device A: %s", ds_status_name(a->last));
    cr_assert_eq(b->last, DS_SUCCESS, "device B: %s", ds_status_name(b->last));
}

/* Device B's LS alone, on a device of its own, beside nothing. */
static device_run *alone_b(void)
{
    device_run *b = calloc(1, sizeof *b);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, device_main, b), 0);
    pthread_join(t, NULL);
    cr_assert_eq(b->last, DS_SUCCESS, "device B alone: %s", ds_status_name(b->last));
    return b;
}

/* Device A carries LS beside a saturating BE under slo_aware with its LS
 * tier fixed small (ls_sms 16); device B runs LS alone with the defaults.
 * B's latencies are those of B alone, request for request, bit for bit: a
 * device's load, parameters and sizing stay on that device. Each device's
 * trace holds its own kernels only. */
Test(multi_device, two_runtimes_side_by_side_leave_each_other_unchanged)
{
    device_run *ref = alone_b();
    device_run *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    a->be = 1;
    a->ls_sms = "16";
    run_both(a, b);
    cr_assert_eq(memcmp(b->lat, ref->lat, sizeof b->lat), 0, "device B's latencies changed beside device A");
    cr_assert_eq(b->tier_sms, ref->tier_sms, "device B's tier: %u SMs, alone %u", b->tier_sms, ref->tier_sms);
    cr_assert_neq(a->tier_sms, 0);
    cr_assert_eq(a->foreign, 0, "device A's trace holds %d of device B's kernels", a->foreign);
    cr_assert_eq(b->foreign, 0, "device B's trace holds %d of device A's kernels", b->foreign);
    cr_assert_gt(a->kernels, b->kernels, "device A ran BE too (%zu against %zu kernels)", a->kernels, b->kernels);
    free(ref);
    free(a);
    free(b);
}

/* Destroying device A's runtime while device B's thread is mid-run leaves B
 * running to the end with the results of B alone. */
Test(multi_device, destroying_one_runtime_leaves_the_other_running)
{
    device_run *ref = alone_b();
    device_run *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    a->be = 1;
    a->destroy_at = 40;
    run_both(a, b);
    cr_assert_eq(memcmp(b->lat, ref->lat, sizeof b->lat), 0, "device B's latencies changed when A went");
    free(ref);
    free(a);
    free(b);
}

/* Parameters are per runtime: a value set on one device's policy is not the
 * other's. */
Test(multi_device, policy_parameters_are_per_runtime)
{
    ds_runtime_t x = t_sim_runtime(0), y = t_sim_runtime(0);
    cr_assert_eq(ds_policy_param_set(x, "slo_aware", "ls_sms", "32"), DS_SUCCESS);
    double vx = 0, vy = 0;
    cr_assert_eq(ds_policy_param_get(x, "slo_aware", "ls_sms", &vx), DS_SUCCESS);
    cr_assert_eq(ds_policy_param_get(y, "slo_aware", "ls_sms", &vy), DS_SUCCESS);
    cr_assert_eq(vx, 32.0);
    cr_assert_eq(vy, 64.0, "the other runtime keeps its default (%g)", vy);
    cr_assert_eq(ds_runtime_destroy(x), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(y), DS_SUCCESS);
}
