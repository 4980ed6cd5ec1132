/* DESIGN invariant 1 at the driver seam: what reaches the driver is exactly
 * what the caller passed (function, grid, block, shared memory, parameter
 * bytes), whatever the binding and however often the vCtx is remapped. */
#include <stdlib.h>
#include <string.h>

#include <detshare/policy.h>

#include "common.h"

typedef struct {
    int x;
    float y;
    char tag[20];
} blob;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

Test(launch, driver_sees_exactly_the_callers_launch_under_remaps)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    ds_runtime_info_get(rt, &in);
    static const uint32_t sizes[] = {8, 4, sizeof(blob), 2};
    CUfunction k = t_sim_kernel(rt, "echo", 3.0, 4, sizes);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_LATENCY_SENSITIVE, 0, -1);

    enum { N = 500 };
    struct {
        ds_dim3 g, b;
        uint32_t smem;
        uint8_t bytes[8 + 4 + sizeof(blob) + 2];
        uint32_t pctx;
    } want[N];
    for (int i = 0; i < N; i++) {
        if (rnd(3) == 0)
            cr_assert_eq(ds_vctx_remap(v, rnd(in.num_pctx)), DS_SUCCESS);
        uint64_t a = ((uint64_t)rnd(1u << 31) << 32) | rnd(1u << 31);
        int32_t b = (int32_t)rnd(1000) - 500;
        blob c = {(int)rnd(100), (float)rnd(1000) / 7.0f, "tag"};
        c.tag[3 + rnd(10)] = (char)('a' + rnd(26));
        int16_t d = (int16_t)rnd(30000);
        void *params[] = {&a, &b, &c, &d};
        ds_dim3 g = {1 + rnd(300), 1 + rnd(3), 1 + rnd(2)};
        ds_dim3 blk = {1 + rnd(256), 1 + rnd(4), 1};
        uint32_t smem = rnd(4) * 1024;
        cr_assert_eq(ds_launch(v, k, g, blk, smem, params, NULL), DS_SUCCESS, "%s", ds_last_error_message());
        want[i].g = g;
        want[i].b = blk;
        want[i].smem = smem;
        memcpy(want[i].bytes, &a, 8);
        memcpy(want[i].bytes + 8, &b, 4);
        memcpy(want[i].bytes + 12, &c, sizeof c);
        memcpy(want[i].bytes + 12 + sizeof c, &d, 2);
        ds_vctx_get_pctx(v, &want[i].pctx);
    }
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(n, N, "one driver launch per ds_launch: no slicing, no extra kernels");
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    ds_vctx_get_stats(v, &st);
    cr_assert_gt(st.remaps, 50, "the vCtx really moved (%llu remaps)", (unsigned long long)st.remaps);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(r[i].function, k);
        cr_assert(memcmp(&r[i].grid, &want[i].g, sizeof(ds_dim3)) == 0, "launch %d grid", i);
        cr_assert(memcmp(&r[i].block, &want[i].b, sizeof(ds_dim3)) == 0, "launch %d block", i);
        cr_assert_eq(r[i].shared_mem_bytes, want[i].smem);
        cr_assert_eq(r[i].param_bytes, sizeof want[i].bytes);
        cr_assert(memcmp(r[i].params, want[i].bytes, sizeof want[i].bytes) == 0, "launch %d params", i);
        /* it ran where the binding said, and only there */
        cr_assert_leq(t_popcount(r[i].sm_mask), in.pctx[want[i].pctx].sm_count, "launch %d confined", i);
    }
    free(r);
    ds_runtime_destroy(rt);
}

Test(launch, program_order_kept_across_remaps)
{
    /* Kernels of very different lengths, remapped between every launch onto
     * pCtxs of very different sizes: each must still start after the previous
     * one ended (one vCtx is one ordered stream of work). */
    ds_runtime_t rt = t_sim_runtime(0);
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    ds_runtime_info_get(rt, &in);
    CUfunction longk = t_sim_kernel(rt, "long", 500.0, 0, NULL);
    CUfunction shortk = t_sim_kernel(rt, "short", 2.0, 0, NULL);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    for (int i = 0; i < 100; i++) {
        ds_vctx_remap(v, (uint32_t)i % in.num_pctx);
        CUfunction f = i % 3 == 0 ? longk : shortk;
        cr_assert_eq(ds_launch(v, f, t_dim(1 + rnd(400)), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
    }
    ds_vctx_synchronize(v);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(n, 100);
    for (size_t i = 1; i < n; i++)
        cr_assert_geq(r[i].start_us, r[i - 1].end_us, "kernel %zu started at %.1f before %zu ended at %.1f", i,
                      r[i].start_us, i - 1, r[i - 1].end_us);
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    ds_vctx_get_stats(v, &st);
    cr_assert_eq(st.remaps, 99, "100 launches over %u pCtxs in turn", in.num_pctx);
    cr_assert_eq(st.streams, in.num_pctx, "one stream per pCtx visited, created once");
    free(r);
    ds_runtime_destroy(rt);
}

Test(launch, sections_are_ordered_with_launches_and_never_split_by_remaps)
{
    ds_runtime_t rt = t_sim_runtime(0);
    uint32_t low16 = t_pctx(rt, DS_ANCHOR_LOW, 16);
    CUfunction a = t_sim_kernel(rt, "a", 300.0, 0, NULL);
    CUfunction lib = t_sim_kernel(rt, "lib", 100.0, 0, NULL);
    CUfunction b = t_sim_kernel(rt, "b", 10.0, 0, NULL);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(ds_launch(v, a, t_dim(264), t_dim(128), 0, NULL, NULL), DS_SUCCESS);
    CUstream s;
    cr_assert_eq(ds_vctx_acquire_stream(v, &s), DS_SUCCESS);
    /* a remap requested inside a section waits for the section's end */
    cr_assert_eq(ds_vctx_remap(v, low16), DS_SUCCESS);
    cr_assert_eq(ds_sim_launch_on_stream(rt, s, lib, t_dim(132), t_dim(128), NULL), DS_SUCCESS);
    cr_assert_eq(ds_sim_launch_on_stream(rt, s, lib, t_dim(132), t_dim(128), NULL), DS_SUCCESS);
    uint32_t p;
    ds_vctx_get_pctx(v, &p);
    cr_assert_neq(p, low16, "no remap inside a section");
    cr_assert_eq(ds_vctx_release_stream(v), DS_SUCCESS);
    cr_assert_eq(ds_launch(v, b, t_dim(16), t_dim(128), 0, NULL, NULL), DS_SUCCESS);
    ds_vctx_get_pctx(v, &p);
    cr_assert_eq(p, low16, "the remap happened at the next kernel boundary");
    ds_vctx_synchronize(v);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(n, 4);
    cr_assert_str_eq(r[0].name, "a");
    cr_assert_str_eq(r[1].name, "lib");
    cr_assert_str_eq(r[3].name, "b");
    cr_assert_eq(r[1].stream, s);
    cr_assert_eq(r[2].stream, s);
    for (size_t i = 1; i < n; i++)
        cr_assert_geq(r[i].start_us, r[i - 1].end_us, "record %zu out of order", i);
    cr_assert_eq(t_popcount(r[3].sm_mask), 16, "b ran on the 16-SM pCtx");
    free(r);
    ds_runtime_destroy(rt);
}

Test(launch, remap_from_another_thread_is_a_request)
{
    ds_runtime_t rt = t_sim_runtime(0);
    uint32_t low32 = t_pctx(rt, DS_ANCHOR_LOW, 32);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    uint32_t p;
    cr_assert_eq(ds_vctx_remap(v, low32), DS_SUCCESS);
    ds_vctx_get_pctx(v, &p);
    cr_assert_neq(p, low32, "not applied until a kernel boundary");
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    ds_vctx_get_pctx(v, &p);
    cr_assert_eq(p, low32);
    ds_runtime_destroy(rt);
}

Test(launch, every_policy_passes_the_callers_launch_through_unchanged)
{
    static const char *policies[] = {"slo_aware", "tpot_first", "shared", "priority", "static", "temporal", "manual"};
    for (int p = 0; p < 7; p++) {
        ds_sim_config sim = DS_SIM_CONFIG_INIT;
        ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
        cfg.device = DS_DEVICE_SIM;
        cfg.sim = &sim;
        cfg.policy = policies[p];
        cfg.scheduler_period_us = -1;
        ds_runtime_t rt;
        cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_SUCCESS);
        ds_runtime_info in = DS_RUNTIME_INFO_INIT;
        ds_runtime_info_get(rt, &in);
        static const uint32_t sizes[] = {8, 4, sizeof(blob)};
        CUfunction k = t_sim_kernel(rt, "k", 20.0, 3, sizes);
        ds_vctx_t ls = t_vctx(rt, "ls", DS_CLASS_LATENCY_SENSITIVE, 0, -1);
        ds_vctx_t be = t_vctx(rt, "be", DS_CLASS_BEST_EFFORT, 0, -1);
        enum { N = 120 };
        uint8_t want[N][8 + 4 + sizeof(blob)];
        ds_dim3 wg[N], wb[N];
        uint32_t ws[N];
        for (int i = 0; i < N; i++) {
            ds_vctx_t v = rnd(2) ? ls : be;
            if (rnd(4) == 0)
                ds_vctx_remap(v, rnd(in.num_pctx)); /* forced; the policy may move it again */
            uint64_t a = ((uint64_t)rnd(1u << 30) << 32) | (uint64_t)i;
            int32_t b = (int32_t)rnd(1u << 30);
            blob c = {i, (float)i / 3.0f, "x"};
            void *params[] = {&a, &b, &c};
            wg[i] = (ds_dim3){1 + rnd(500), 1 + rnd(2), 1};
            wb[i] = (ds_dim3){32 * (1 + rnd(8)), 1, 1};
            ws[i] = rnd(3) * 4096;
            cr_assert_eq(ds_launch(v, k, wg[i], wb[i], ws[i], params, NULL), DS_SUCCESS, "%s: %s", policies[p],
                         ds_last_error_message());
            memcpy(want[i], &a, 8);
            memcpy(want[i] + 8, &b, 4);
            memcpy(want[i] + 12, &c, sizeof c);
            ds_runtime_poll(rt);
        }
        ds_vctx_synchronize(ls);
        ds_vctx_synchronize(be);
        size_t n;
        ds_sim_kernel_record *r = t_trace(rt, &n);
        cr_assert_eq(n, N, "%s: %zu driver launches for %d ds_launch calls", policies[p], n, N);
        for (size_t j = 0; j < n; j++) {
            uint64_t a;
            memcpy(&a, r[j].params, 8);
            uint32_t i = (uint32_t)(a & 0xffffffffu); /* which call this is (per-tenant order may interleave) */
            cr_assert_lt(i, N);
            cr_assert(memcmp(&r[j].grid, &wg[i], sizeof(ds_dim3)) == 0, "%s: launch %u grid", policies[p], i);
            cr_assert(memcmp(&r[j].block, &wb[i], sizeof(ds_dim3)) == 0, "%s: launch %u block", policies[p], i);
            cr_assert_eq(r[j].shared_mem_bytes, ws[i]);
            cr_assert_eq(r[j].param_bytes, sizeof want[i]);
            cr_assert(memcmp(r[j].params, want[i], sizeof want[i]) == 0, "%s: launch %u params", policies[p], i);
        }
        free(r);
        ds_runtime_destroy(rt);
    }
}

/* The window bounds sections as it bounds kernels: a best-effort vCtx under
 * slo_aware issuing library-style sections (four long kernels each) never has
 * more predicted work in flight than its window plus one section. */
Test(launch, sections_stay_within_the_window)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, "slo_aware");
    ds_runtime_t rt = t_runtime_create(&cfg);
    CUfunction gemm = t_sim_kernel(rt, "gemm", 300.0, 0, NULL);
    ds_vctx_t v = t_vctx(rt, "be", DS_CLASS_BEST_EFFORT, 0, -1);
    CUstream s;
    /* one section measured first, so that sections have a prediction */
    cr_assert_eq(ds_vctx_acquire_stream(v, &s), DS_SUCCESS);
    for (int k = 0; k < 4; k++)
        cr_assert_eq(ds_sim_launch_on_stream(rt, s, gemm, t_dim(264), t_dim(128), NULL), DS_SUCCESS);
    cr_assert_eq(ds_vctx_release_stream(v), DS_SUCCESS);
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    cr_assert_eq(ds_vctx_get_stats(v, &st), DS_SUCCESS);
    cr_assert_gt(st.window_us, 0, "slo_aware gives BE a window");
    double section_us = 4 * 300.0 * 2; /* 264 blocks on 132 SMs: two waves */
    double most = 0;
    for (int i = 0; i < 30; i++) {
        cr_assert_eq(ds_vctx_acquire_stream(v, &s), DS_SUCCESS, "%s", ds_last_error_message());
        for (int k = 0; k < 4; k++)
            cr_assert_eq(ds_sim_launch_on_stream(rt, s, gemm, t_dim(264), t_dim(128), NULL), DS_SUCCESS);
        cr_assert_eq(ds_vctx_release_stream(v), DS_SUCCESS);
        cr_assert_eq(ds_vctx_get_stats(v, &st), DS_SUCCESS);
        if (st.inflight_us > most)
            most = st.inflight_us;
        cr_assert_leq(st.inflight_us, st.window_us + section_us * 1.05,
                      "section %d: %.0f us in flight, window %u us + one section %.0f us", i, st.inflight_us,
                      st.window_us, section_us);
        ds_runtime_poll(rt);
    }
    cr_assert_geq(most, section_us * 0.95, "the sections were predicted (%.0f us in flight at most)", most);
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    ds_runtime_destroy(rt);
}
