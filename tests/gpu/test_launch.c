/*
 * ds_launch on the real driver: what reaches the kernel is exactly what the
 * caller passed, across remaps (DESIGN invariant 1; c), and bad input is
 * refused with the documented statuses (h).
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "gpu_fixture.h"

typedef struct echo_case {
    ds_dim3 grid, block;
    uint32_t smem;
    int32_t a;
    double b;
} echo_case;

static echo_struct make_struct(uint32_t k)
{
    echo_struct s;
    memset(&s, 0, sizeof s);
    s.x = (int32_t)(0x7ff00000u ^ (k * 2654435761u));
    s.y = -3.25f * (float)(k + 1);
    for (int i = 0; i < (int)sizeof s.z; i++)
        s.z[i] = (char)((k * 31u + (unsigned)i * 7u) & 0xff); /* includes zero and high bytes */
    return s;
}

/* c. invariant 1 */
Test(launch, echo_exact_across_remaps, .timeout = 120)
{
    gpu_env e;
    gpu_open(&e, NULL);
    const echo_case cases[] = {
        {{1, 1, 1}, {1, 1, 1}, 0, 0, 0.0},
        {{3, 2, 1}, {32, 4, 2}, 1, -1, -1.5e300},
        {{2, 2, 2}, {1024, 1, 1}, 4096, 2147483647, 3.141592653589793},
        {{7, 1, 3}, {8, 8, 16}, 49152, -2147483647 - 1, 5e-324 /* denormal */},
        {{65, 1, 1}, {33, 3, 1}, 12345, 42, -0.0},
        {{1, 65535, 1}, {1, 1, 1}, 8, 7, 1e308},
        {{1, 1, 64}, {2, 2, 64}, 1000, -7, NAN},
    };
    const uint32_t ncases = sizeof cases / sizeof cases[0];
    ds_vctx_t v = gpu_vctx(&e, "echo", DS_CLASS_LATENCY_SENSITIVE, -1);
    CUdeviceptr out = gpu_alloc(&e, sizeof(echo_out));
    uint32_t bound = 0;
    GPU_DS(ds_vctx_get_pctx(v, &bound));
    uint64_t expected_remaps = 0;

    for (uint32_t round = 0; round < 3; round++) {
        for (uint32_t k = 0; k < ncases; k++) {
            const echo_case *c = &cases[k];
            uint32_t to = (bound + 1 + (round + k) % (e.info.num_pctx - 1)) % e.info.num_pctx;
            cr_assert_neq(to, bound);
            GPU_DS(ds_vctx_remap(v, to));
            expected_remaps++;

            /* Poison what echo writes (a stale or missing write shows), zero
             * the counters it adds to. */
            gpu_fill32(&e, out, 0xA5A5A5A5u, offsetof(echo_out, blocks) / 4);
            gpu_fill32(&e, out + offsetof(echo_out, blocks), 0,
                       (sizeof(echo_out) - offsetof(echo_out, blocks)) / 4);
            echo_struct s = make_struct(k + 100 * round);
            int32_t a = c->a;
            double b = c->b;
            void *params[] = {&out, &a, &b, &s};
            GPU_DS(ds_launch(v, e.echo, c->grid, c->block, c->smem, params, NULL));
            GPU_DS(ds_vctx_get_pctx(v, &bound));
            cr_assert_eq(bound, to, "case %u: bound to pCtx %u after the launch, remap asked %u", k, bound, to);
            GPU_DS(ds_vctx_synchronize(v));

            echo_out o;
            gpu_read(&e, &o, out, sizeof o);
            cr_assert_eq(o.done, ECHO_DONE, "case %u round %u: echo did not finish (done 0x%x)", k, round, o.done);
            cr_assert_eq(o.grid[0], c->grid.x, "case %u: grid.x %u != %u", k, o.grid[0], c->grid.x);
            cr_assert_eq(o.grid[1], c->grid.y, "case %u: grid.y %u != %u", k, o.grid[1], c->grid.y);
            cr_assert_eq(o.grid[2], c->grid.z, "case %u: grid.z %u != %u", k, o.grid[2], c->grid.z);
            cr_assert_eq(o.block[0], c->block.x, "case %u: block.x %u != %u", k, o.block[0], c->block.x);
            cr_assert_eq(o.block[1], c->block.y, "case %u: block.y %u != %u", k, o.block[1], c->block.y);
            cr_assert_eq(o.block[2], c->block.z, "case %u: block.z %u != %u", k, o.block[2], c->block.z);
            cr_assert_eq(o.dynamic_smem, c->smem, "case %u: dynamic smem %u != %u", k, o.dynamic_smem, c->smem);
            cr_assert_eq(o.smem_ok, 1, "case %u: dynamic shared memory not usable", k);
            cr_assert_eq(o.a, a, "case %u: a %d != %d", k, o.a, a);
            cr_assert_eq(memcmp(&o.b, &b, sizeof b), 0, "case %u: b %.17g != %.17g (bitwise)", k, o.b, b);
            cr_assert_eq(memcmp(&o.s, &s, sizeof s), 0, "case %u: struct parameter differs", k);
            uint64_t blocks = (uint64_t)c->grid.x * c->grid.y * c->grid.z;
            uint64_t threads = blocks * c->block.x * c->block.y * c->block.z;
            cr_assert_eq(o.blocks, blocks, "case %u: %llu blocks ran, grid has %llu", k, o.blocks,
                         (unsigned long long)blocks);
            cr_assert_eq(o.threads, threads, "case %u: %llu threads ran, launch has %llu", k, o.threads,
                         (unsigned long long)threads);
        }
    }
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    GPU_DS(ds_vctx_get_stats(v, &st));
    cr_assert_eq(st.launches, 3ull * ncases);
    cr_assert_eq(st.remaps, expected_remaps, "remaps %llu, expected %llu", (unsigned long long)st.remaps,
                 (unsigned long long)expected_remaps);
    cr_assert_eq(st.pctx, bound);
    GPU_DS(ds_vctx_destroy(v));
    gpu_free(&e, out);
    gpu_close(&e);
}

/* h. bad input on the real driver */
Test(launch, bad_input, .timeout = 60)
{
    gpu_env e;
    gpu_open(&e, NULL);
    ds_vctx_t v = gpu_vctx(&e, "bad", DS_CLASS_BEST_EFFORT, -1);
    CUdeviceptr done = gpu_alloc(&e, 4);
    long long ns = 0;
    void *params[] = {&ns, &done};
    const ds_dim3 one = {1, 1, 1};

    GPU_DS_EQ(ds_launch(v, e.spin, (ds_dim3){0, 1, 1}, one, 0, params, NULL), DS_ERR_INVALID_LAUNCH);
    GPU_DS_EQ(ds_launch(v, e.spin, (ds_dim3){1, 0, 1}, one, 0, params, NULL), DS_ERR_INVALID_LAUNCH);
    GPU_DS_EQ(ds_launch(v, e.spin, (ds_dim3){1, 1, 0}, one, 0, params, NULL), DS_ERR_INVALID_LAUNCH);
    GPU_DS_EQ(ds_launch(v, e.spin, one, (ds_dim3){2048, 1, 1}, 0, params, NULL), DS_ERR_INVALID_LAUNCH);
    GPU_DS_EQ(ds_launch(v, e.spin, one, (ds_dim3){0, 1, 1}, 0, params, NULL), DS_ERR_INVALID_LAUNCH);
    GPU_DS_EQ(ds_launch(v, e.spin, one, (ds_dim3){64, 64, 1}, 0, params, NULL), DS_ERR_INVALID_LAUNCH);
    GPU_DS_EQ(ds_launch(v, e.spin, one, one, 16u << 20, params, NULL), DS_ERR_INVALID_LAUNCH);
    GPU_DS_EQ(ds_launch(v, NULL, one, one, 0, params, NULL), DS_ERR_INVALID_ARGUMENT);
    GPU_DS_EQ(ds_launch(NULL, e.spin, one, one, 0, params, NULL), DS_ERR_INVALID_HANDLE);

    /* Nothing above reached the device or the counters; the vCtx still works. */
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    GPU_DS(ds_vctx_get_stats(v, &st));
    cr_assert_eq(st.launches, 0, "%llu launches counted after refused ones", (unsigned long long)st.launches);
    GPU_DS(ds_launch(v, e.spin, one, one, 0, params, NULL));
    GPU_DS(ds_vctx_synchronize(v));
    uint32_t flag = 0;
    gpu_read(&e, &flag, done, sizeof flag);
    cr_assert_eq(flag, 1, "the valid launch after the refused ones did not run");

    /* After ds_runtime_destroy every handle of it is invalid. */
    gpu_free(&e, done);
    GPU_CU(&e, cuModuleUnload(e.module));
    e.module = NULL;
    ds_runtime_t rt = e.rt;
    e.rt = NULL;
    GPU_DS(ds_runtime_destroy(rt));
    GPU_DS_EQ(ds_launch(v, e.spin, one, one, 0, params, NULL), DS_ERR_INVALID_HANDLE);
    GPU_DS_EQ(ds_vctx_remap(v, 0), DS_ERR_INVALID_HANDLE);
    GPU_DS_EQ(ds_vctx_synchronize(v), DS_ERR_INVALID_HANDLE);
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    GPU_DS_EQ(ds_runtime_info_get(rt, &info), DS_ERR_INVALID_HANDLE);
    GPU_DS_EQ(ds_runtime_destroy(rt), DS_ERR_INVALID_HANDLE);
}
