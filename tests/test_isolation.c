/* Head-of-line blocking and isolation, observed on the simulated device
 * through the runtime (bindings chosen by hand; the policies that choose them
 * come with the scheduler). Physics after the isolation table in docs/device-facts.md. */
#include "common.h"

typedef struct {
    double be_start, be_end, ls_start;
} outcome;

/* BE: 16 waves of 1 ms blocks on its pCtx; LS: one 10 us block, launched
 * 100 us later. */
static outcome run(int32_t be_pctx, int32_t ls_pctx, int ls_priority)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    ds_runtime_info_get(rt, &in);
    CUfunction bek = t_sim_kernel(rt, "be", 1000.0, 0, NULL);
    CUfunction lsk = t_sim_kernel(rt, "ls", 10.0, 0, NULL);
    ds_vctx_t be = t_vctx(rt, "be", DS_CLASS_BEST_EFFORT, 0, be_pctx);
    ds_vctx_t ls = t_vctx(rt, "ls", DS_CLASS_LATENCY_SENSITIVE, ls_priority, ls_pctx);
    uint32_t bp;
    ds_vctx_get_pctx(be, &bp);
    cr_assert_eq(ds_launch(be, bek, t_dim(16 * in.pctx[bp].sm_count), t_dim(256), 0, NULL, NULL), DS_SUCCESS);
    ds_sim_sleep_until(rt, 100.0);
    cr_assert_eq(ds_launch(ls, lsk, t_dim(1), t_dim(32), 0, NULL, NULL), DS_SUCCESS);
    ds_vctx_synchronize(ls);
    ds_vctx_synchronize(be);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    outcome o = {t_find(r, n, "be")->start_us, t_find(r, n, "be")->end_us, t_find(r, n, "ls")->start_us};
    free(r);
    ds_runtime_destroy(rt);
    return o;
}

Test(isolation, shared_gpu_ls_waits_behind_be)
{
    outcome o = run(-1, -1, 0);
    cr_assert_geq(o.ls_start, o.be_end - 1000.0 - 1e-6,
                  "same pCtx, same priority: LS waits until BE's last wave (%.0f vs %.0f)", o.ls_start, o.be_end);
}

Test(isolation, stream_priority_waits_one_block)
{
    outcome o = run(-1, -1, 5);
    cr_assert_lt(o.ls_start, 100.0 + 1000.0 + 1e-6, "LS at highest priority takes the next free SM");
    cr_assert_gt(o.ls_start, 100.0 + 1e-6, "but still waits for a running block (%.1f)", o.ls_start);
}

Test(isolation, disjoint_pctxs_start_at_once)
{
    ds_runtime_t rt = t_sim_runtime(0);
    uint32_t ls = t_pctx(rt, DS_ANCHOR_LOW, 16);
    uint32_t be = t_pctx(rt, DS_ANCHOR_HIGH, 116);
    ds_runtime_destroy(rt);
    outcome o = run((int32_t)be, (int32_t)ls, 0);
    cr_assert_float_eq(o.ls_start, 100.0, 1e-6, "LS started at %.2f", o.ls_start);
    cr_assert_lt(o.ls_start, o.be_end);
}

Test(isolation, overlapping_pctxs_do_not_isolate)
{
    /* BE on the whole GPU, LS on 16 of those SMs: no isolation (DEVICE-FACTS). */
    ds_runtime_t rt = t_sim_runtime(0);
    uint32_t ls = t_pctx(rt, DS_ANCHOR_LOW, 16);
    ds_runtime_destroy(rt);
    outcome o = run(-1, (int32_t)ls, 0);
    cr_assert_geq(o.ls_start, o.be_end - 1000.0 - 1e-6, "LS started at %.0f, BE ended at %.0f", o.ls_start,
                  o.be_end);
}
