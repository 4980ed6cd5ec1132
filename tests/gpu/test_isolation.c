/*
 * f. Isolation on the real GPU (DEVICE-FACTS "Isolation"). A best-effort vCtx
 * saturates its pCtx with waves of 1 ms blocks; then a latency-sensitive vCtx
 * launches a 1-block kernel. Both kernels timestamp themselves with
 * %globaltimer (one clock on the device, so the times compare):
 *  - disjoint: BE on the complement of the small LOW pCtx, LS on the LOW one.
 *    The LS kernel must start before the BE kernel ends and within 1 ms of its
 *    start, on an SM the BE kernel never used. Asserted on every trial.
 *  - shared: both on the FULL pCtx, same priority. The LS kernel waits behind
 *    BE's blocks; reported, and asserted only to start later than in the
 *    disjoint case.
 */
#include <stdlib.h>
#include <string.h>

#include "gpu_fixture.h"

#define TRIALS 5
#define BE_BLOCK_NS 1000000ll    /* 1 ms per block */
#define BE_WAVES_PER_SM 16u      /* blocks per SM of the BE pCtx */
#define LS_DELAY_US 200u         /* host wait between the two launches */

typedef struct trial {
    long long ls_after_be_start_ns; /* LS start - BE first block start */
    long long be_end_after_ls_ns;   /* BE last block end - LS start */
    long long be_duration_ns;
    int ls_sm_used_by_be;
} trial;

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static void run_trial(gpu_env *e, ds_vctx_t be, ds_vctx_t ls, uint32_t be_sms, CUdeviceptr be_rec,
                      CUdeviceptr ls_rec, trial *out)
{
    /* be_record: first_start = ~0, last_end = 0, bitmap = 0. */
    gpu_fill32(e, be_rec, 0, sizeof(be_record) / 4);
    gpu_fill32(e, be_rec, 0xFFFFFFFFu, 2); /* first_start */
    gpu_fill32(e, ls_rec, 0, sizeof(ls_record) / 4);

    long long ns = BE_BLOCK_NS;
    void *pb[] = {&be_rec, &ns};
    void *pl[] = {&ls_rec};
    const ds_dim3 be_grid = {BE_WAVES_PER_SM * be_sms, 1, 1}, be_block = {1024, 1, 1};
    const ds_dim3 one = {1, 1, 1}, warp = {32, 1, 1};
    GPU_DS(ds_launch(be, e->be_spin, be_grid, be_block, 0, pb, NULL));
    gpu_sleep_us(LS_DELAY_US); /* let BE's first wave take its SMs */
    GPU_DS(ds_launch(ls, e->ls_stamp, one, warp, 0, pl, NULL));
    GPU_DS(ds_vctx_synchronize(ls));
    GPU_DS(ds_vctx_synchronize(be));

    be_record b;
    ls_record l;
    gpu_read(e, &b, be_rec, sizeof b);
    gpu_read(e, &l, ls_rec, sizeof l);
    cr_assert_eq(l.done, 1, "LS kernel did not run");
    cr_assert_neq(b.first_start, ~0ull, "BE kernel did not run");
    cr_assert_gt(b.last_end, b.first_start);
    out->ls_after_be_start_ns = (long long)(l.start - b.first_start);
    out->be_end_after_ls_ns = (long long)(b.last_end - l.start);
    out->be_duration_ns = (long long)(b.last_end - b.first_start);
    out->ls_sm_used_by_be = l.smid < 256 && ((b.sm_bitmap[l.smid / 32] >> (l.smid % 32)) & 1u);
    uint32_t be_sm_count = 0;
    for (int i = 0; i < 8; i++)
        be_sm_count += (uint32_t)__builtin_popcount(b.sm_bitmap[i]);
    cr_assert_eq(be_sm_count, be_sms, "BE kernel ran on %u SMs, its pCtx has %u", be_sm_count, be_sms);
}

static void warm(gpu_env *e, ds_vctx_t v, CUdeviceptr be_rec, CUdeviceptr ls_rec)
{
    /* First launches of a function load it (lazy loading): keep that out of
     * the measured trials. */
    long long ns = 0;
    void *pb[] = {&be_rec, &ns};
    void *pl[] = {&ls_rec};
    const ds_dim3 one = {1, 1, 1};
    GPU_DS(ds_launch(v, e->be_spin, one, (ds_dim3){1024, 1, 1}, 0, pb, NULL));
    GPU_DS(ds_launch(v, e->ls_stamp, one, (ds_dim3){32, 1, 1}, 0, pl, NULL));
    GPU_DS(ds_vctx_synchronize(v));
}

Test(isolation, disjoint_pctx_vs_shared, .timeout = 120)
{
    gpu_env e;
    gpu_open(&e, NULL);
    int low = gpu_find_low(&e.info, 16);
    cr_assert_geq(low, 0, "the pool has no LOW pCtx with a complement");
    int high = e.info.pctx[low].complement;
    uint32_t full = UINT32_MAX;
    for (uint32_t i = 0; i < e.info.num_pctx; i++)
        if (e.info.pctx[i].anchor == DS_ANCHOR_FULL)
            full = i;
    cr_assert_neq(full, UINT32_MAX, "no FULL pCtx");
    cr_log_info("LS on pCtx %d (%u SMs), BE on its complement %d (%u SMs); shared: pCtx %u (%u SMs)", low,
                e.info.pctx[low].sm_count, high, e.info.pctx[high].sm_count, full, e.info.pctx[full].sm_count);

    CUdeviceptr be_rec = gpu_alloc(&e, sizeof(be_record));
    CUdeviceptr ls_rec = gpu_alloc(&e, sizeof(ls_record));
    ds_vctx_t be = gpu_vctx(&e, "be", DS_CLASS_BEST_EFFORT, high);
    ds_vctx_t ls = gpu_vctx(&e, "ls", DS_CLASS_LATENCY_SENSITIVE, low);
    warm(&e, be, be_rec, ls_rec);
    warm(&e, ls, be_rec, ls_rec);

    /* Disjoint SM sets. */
    long long disjoint_delay[TRIALS];
    for (int t = 0; t < TRIALS; t++) {
        trial r;
        run_trial(&e, be, ls, e.info.pctx[high].sm_count, be_rec, ls_rec, &r);
        cr_log_info("disjoint trial %d: LS started %.1f us after BE's start, %.1f us before its end (BE ran %.2f ms)",
                    t, (double)r.ls_after_be_start_ns / 1e3, (double)r.be_end_after_ls_ns / 1e3,
                    (double)r.be_duration_ns / 1e6);
        /* The BE kernel really was long: 16 blocks per SM of 1 ms, two
         * 1024-thread blocks per SM at most: about 8 ms. */
        cr_assert_geq(r.be_duration_ns, 4000000ll, "BE kernel took only %.2f ms: not saturating",
                      (double)r.be_duration_ns / 1e6);
        cr_assert_gt(r.be_end_after_ls_ns, 0, "trial %d: LS started %.1f us AFTER the BE kernel ended", t,
                     -(double)r.be_end_after_ls_ns / 1e3);
        cr_assert_lt(r.ls_after_be_start_ns, 1000000ll, "trial %d: LS started %.1f us after BE's start (limit 1 ms)",
                     t, (double)r.ls_after_be_start_ns / 1e3);
        cr_assert_eq(r.ls_sm_used_by_be, 0, "trial %d: LS ran on an SM the BE kernel used", t);
        disjoint_delay[t] = r.ls_after_be_start_ns;
    }

    /* Both on the whole GPU, same priority. */
    GPU_DS(ds_vctx_remap(be, full));
    GPU_DS(ds_vctx_remap(ls, full));
    warm(&e, be, be_rec, ls_rec);
    warm(&e, ls, be_rec, ls_rec);
    long long shared_delay[TRIALS];
    for (int t = 0; t < TRIALS; t++) {
        trial r;
        run_trial(&e, be, ls, e.info.pctx[full].sm_count, be_rec, ls_rec, &r);
        cr_log_info("shared trial %d: LS started %.1f us after BE's start, %.1f us %s its end (BE ran %.2f ms)", t,
                    (double)r.ls_after_be_start_ns / 1e3, (double)llabs(r.be_end_after_ls_ns) / 1e3,
                    r.be_end_after_ls_ns >= 0 ? "before" : "after", (double)r.be_duration_ns / 1e6);
        shared_delay[t] = r.ls_after_be_start_ns;
    }
    qsort(disjoint_delay, TRIALS, sizeof disjoint_delay[0], cmp_ll);
    qsort(shared_delay, TRIALS, sizeof shared_delay[0], cmp_ll);
    cr_log_info("LS start after BE start, median: disjoint %.1f us, shared %.1f us",
                (double)disjoint_delay[TRIALS / 2] / 1e3, (double)shared_delay[TRIALS / 2] / 1e3);
    cr_assert_gt(shared_delay[TRIALS / 2], disjoint_delay[TRIALS / 2],
                 "sharing the whole GPU did not delay the LS kernel (median %.1f us vs %.1f us disjoint)",
                 (double)shared_delay[TRIALS / 2] / 1e3, (double)disjoint_delay[TRIALS / 2] / 1e3);

    GPU_DS(ds_vctx_destroy(ls));
    GPU_DS(ds_vctx_destroy(be));
    gpu_free(&e, ls_rec);
    gpu_free(&e, be_rec);
    gpu_close(&e);
}
