/*
 * Program order on the real driver (DESIGN invariant 2): across remaps to
 * random pCtxs (d), and across sections whose kernels go straight to the
 * driver on the acquired stream (e).
 */
#include <string.h>

#include "gpu_fixture.h"

#define ORDER_SEED 0x5EEDull

/* d. 200 launches, a remap to a random pCtx before each, random spins. */
Test(order, remaps_keep_program_order, .timeout = 120)
{
    gpu_env e;
    gpu_open(&e, NULL);
    enum { N = 200 };
    ds_vctx_t v = gpu_vctx(&e, "order", DS_CLASS_BEST_EFFORT, -1);
    CUdeviceptr counter = gpu_alloc(&e, sizeof(int));
    CUdeviceptr log = gpu_alloc(&e, APPEND_LOG_CAP * sizeof(int));
    gpu_fill32(&e, log, 0xFFFFFFFFu, APPEND_LOG_CAP);

    gpu_rng rng = {ORDER_SEED};
    cr_log_info("seed 0x%llx", (unsigned long long)ORDER_SEED);
    uint32_t bound = 0;
    GPU_DS(ds_vctx_get_pctx(v, &bound));
    uint64_t changes = 0;
    uint32_t visited = 1u << bound;
    const ds_dim3 one = {1, 1, 1};
    for (int id = 0; id < N; id++) {
        uint32_t to = gpu_rng_below(&rng, e.info.num_pctx);
        GPU_DS(ds_vctx_remap(v, to));
        if (to != bound)
            changes++;
        long long spin_ns = (long long)gpu_rng_below(&rng, 50001); /* 0-50 us */
        void *params[] = {&counter, &log, &id, &spin_ns};
        GPU_DS(ds_launch(v, e.append, one, one, 0, params, NULL));
        GPU_DS(ds_vctx_get_pctx(v, &bound));
        cr_assert_eq(bound, to, "launch %d ran bound to pCtx %u, remap asked %u", id, bound, to);
        visited |= 1u << bound;
    }
    GPU_DS(ds_vctx_synchronize(v));

    int count = -1;
    gpu_read(&e, &count, counter, sizeof count);
    cr_assert_eq(count, N, "%d kernels ran, %d launched", count, N);
    int got[N];
    gpu_read(&e, got, log, sizeof got);
    for (int i = 0; i < N; i++)
        cr_assert_eq(got[i], i, "log[%d] = %d: kernels ran out of program order", i, got[i]);

    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    GPU_DS(ds_vctx_get_stats(v, &st));
    cr_assert_gt(st.remaps, 0);
    cr_assert_eq(st.remaps, changes, "remaps %llu, pCtx changes requested %llu", (unsigned long long)st.remaps,
                 (unsigned long long)changes);
    cr_assert_eq(st.launches, N);
    cr_assert_eq(st.streams, (uint32_t)__builtin_popcount(visited), "streams %u, pCtxs visited %d", st.streams,
                 __builtin_popcount(visited));
    cr_log_info("%llu remaps over %u pCtxs, %u streams", (unsigned long long)st.remaps, e.info.num_pctx,
                st.streams);
    GPU_DS(ds_vctx_destroy(v));
    gpu_free(&e, log);
    gpu_free(&e, counter);
    gpu_close(&e);
}

/*
 * e. sections keep order. Per round r (slots 3r, 3r+1, 3r+2):
 *   ds_launch   sec_write:  spin, then buf[3r]   = value_r
 *   section     sec_derive: read buf[3r], spin, buf[3r+1] = 3 * value_r + 1   (raw cuLaunchKernel)
 *   ds_launch   sec_check:  read both, spin, buf[3r+2] = 2 * buf[3r+1] + buf[3r]
 * with a remap before the section and another before the check. Each reader
 * reads before it spins and each writer writes after, so any two of them
 * running out of order or overlapping leaves the sentinel's traces.
 */
Test(order, sections_keep_order, .timeout = 120)
{
    gpu_env e;
    gpu_open(&e, NULL);
    enum { ROUNDS = 24 };
    const int32_t sentinel = -1000000;
    const long long spin_ns = 300000; /* 0.3 ms */
    ds_vctx_t v = gpu_vctx(&e, "sections", DS_CLASS_LATENCY_SENSITIVE, -1);
    CUdeviceptr buf = gpu_alloc(&e, 3 * ROUNDS * sizeof(int32_t));
    gpu_fill32(&e, buf, (uint32_t)sentinel, 3 * ROUNDS);
    gpu_rng rng = {ORDER_SEED ^ 0xABCDull};
    const ds_dim3 one = {1, 1, 1};
    uint32_t bound = 0;
    GPU_DS(ds_vctx_get_pctx(v, &bound));
    uint64_t changes = 0;

    for (int r = 0; r < ROUNDS; r++) {
        int slot0 = 3 * r, slot1 = 3 * r + 1, slot2 = 3 * r + 2;
        int value = 1000 + 17 * r;
        void *pw[] = {&buf, &slot0, &value, (void *)&spin_ns};
        GPU_DS(ds_launch(v, e.sec_write, one, one, 0, pw, NULL));

        /* Remap, then open the section: the hand-off happens at the acquire. */
        uint32_t to = (bound + 1 + gpu_rng_below(&rng, e.info.num_pctx - 1)) % e.info.num_pctx;
        GPU_DS(ds_vctx_remap(v, to));
        changes++;
        CUstream s = NULL;
        GPU_DS(ds_vctx_acquire_stream(v, &s));
        cr_assert_not_null(s);
        GPU_DS(ds_vctx_get_pctx(v, &bound));
        cr_assert_eq(bound, to, "round %d: section opened on pCtx %u, remap asked %u", r, bound, to);
        /* A remap asked while the section is open waits for its end. */
        uint32_t later = (to + 1) % e.info.num_pctx;
        GPU_DS(ds_vctx_remap(v, later));
        void *pd[] = {&buf, &slot0, &slot1, (void *)&spin_ns};
        GPU_CU(&e, cuLaunchKernel(e.sec_derive, 1, 1, 1, 1, 1, 1, 0, s, pd, NULL));
        GPU_DS(ds_vctx_get_pctx(v, &bound));
        cr_assert_eq(bound, to, "round %d: remapped inside a section", r);
        if (r == 0) { /* once is enough (each refusal is logged) */
            CUstream s2 = NULL;
            GPU_DS_EQ(ds_vctx_acquire_stream(v, &s2), DS_ERR_BUSY);
        }
        GPU_DS(ds_vctx_release_stream(v));
        if (r == 0)
            GPU_DS_EQ(ds_vctx_release_stream(v), DS_ERR_BUSY);

        /* `later` is applied at this launch. */
        void *pc[] = {&buf, &slot0, &slot1, &slot2, (void *)&spin_ns};
        GPU_DS(ds_launch(v, e.sec_check, one, one, 0, pc, NULL));
        GPU_DS(ds_vctx_get_pctx(v, &bound));
        cr_assert_eq(bound, later, "round %d: check ran on pCtx %u, remap asked %u", r, bound, later);
        changes++;
    }
    GPU_DS(ds_vctx_synchronize(v));

    int32_t got[3 * ROUNDS];
    gpu_read(&e, got, buf, sizeof got);
    for (int r = 0; r < ROUNDS; r++) {
        int32_t value = 1000 + 17 * r;
        cr_assert_eq(got[3 * r], value, "round %d: write gave %d", r, got[3 * r]);
        cr_assert_eq(got[3 * r + 1], 3 * value + 1,
                     "round %d: section kernel read %d, not the value written before it (%d)", r,
                     (got[3 * r + 1] - 1) / 3, value);
        cr_assert_eq(got[3 * r + 2], 2 * (3 * value + 1) + value,
                     "round %d: check after the section got %d, want %d", r, got[3 * r + 2],
                     2 * (3 * value + 1) + value);
    }
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    GPU_DS(ds_vctx_get_stats(v, &st));
    cr_assert_eq(st.sections, ROUNDS);
    cr_assert_eq(st.launches, 2 * ROUNDS, "raw launches inside sections are not ds_launches");
    cr_assert_eq(st.remaps, changes);
    GPU_DS(ds_vctx_destroy(v));
    gpu_free(&e, buf);
    gpu_close(&e);
}
