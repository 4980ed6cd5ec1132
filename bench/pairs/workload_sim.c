/*
 * Simulated back end of the pairs workload (workload.h). The simulated device
 * knows only block durations and occupancy, not memory bandwidth:
 *  - compute kernels are many waves of long blocks, one block per SM (a
 *    4096^3 bf16 GEMM: 528 tiles in 4 waves of 40 us, ~160 us alone);
 *  - memory-bound kernels are modelled as PAIRS_MEM_WAVES waves of short,
 *    densely packed blocks (blocks_per_sm 8) whose total is what the real
 *    kernel takes alone at ~4 TB/s.
 * A kernel here takes longer on fewer SMs in proportion to the SMs it lost,
 * and two memory-bound tenants on disjoint SMs do not slow each other down:
 * the simulator cannot show bandwidth contention, so its compute+memory and
 * memory+memory figures are not evidence of anything a GPU would do. They
 * exercise the program end to end.
 */
#include <stdio.h>
#include <stdlib.h>

#include <detshare/sim.h>

#include "bench.h"
#include "workload.h"

enum sim_kernel { K_GEMM, K_SUMSQ, K_SUMSQ_FINAL, K_ADAMW, K_SUMSQ_MIX, K_ADAMW_MIX, K_COUNT };

typedef struct sim_kernel_spec {
    const char *name;
    uint32_t blocks, threads, blocks_per_sm;
    double block_us;
} sim_kernel_spec;

/* waves of PAIRS_GRID blocks, 8 per SM, on 132 SMs */
#define PAIRS_MEM_WAVES ((PAIRS_GRID + 132 * 8 - 1) / (132 * 8))

static const sim_kernel_spec SPECS[K_COUNT] = {
    [K_GEMM] = {"gemm_4096", 528, 256, 1, 40.0},
    /* 256 MiB read at ~4 TB/s: ~65 us */
    [K_SUMSQ] = {"colo_sumsq_partial", PAIRS_GRID, PAIRS_THREADS, 8, 65.0 / PAIRS_MEM_WAVES},
    [K_SUMSQ_FINAL] = {"colo_sumsq_final", 1, PAIRS_THREADS, 1, 5.0},
    /* 64M parameters x 28 bytes at ~4 TB/s: ~450 us */
    [K_ADAMW] = {"colo_adamw", PAIRS_GRID, PAIRS_THREADS, 8, 450.0 / PAIRS_MEM_WAVES},
    [K_SUMSQ_MIX] = {"colo_sumsq_partial_mix", PAIRS_GRID, PAIRS_THREADS, 8, 33.0 / PAIRS_MEM_WAVES},
    [K_ADAMW_MIX] = {"colo_adamw_mix", PAIRS_GRID, PAIRS_THREADS, 8, 225.0 / PAIRS_MEM_WAVES},
};

typedef struct sim_backend sim_backend;

struct pairs_tenant {
    sim_backend *b;
    pairs_kind kind;
};

struct sim_backend {
    pairs_backend base;
    ds_runtime_t rt;
    CUfunction fn[K_COUNT];
    pairs_tenant tenants[KIND_COUNT][2];
};

static int launch_own(sim_backend *b, ds_vctx_t v, enum sim_kernel k, uint64_t tag)
{
    void *params[] = {&tag};
    ds_dim3 grid = {SPECS[k].blocks, 1, 1}, block = {SPECS[k].threads, 1, 1};
    BENCH_DS_CHECK(ds_launch(v, b->fn[k], grid, block, 0, params, NULL));
    return 0;
}

static int gemms(sim_backend *b, ds_vctx_t v, int count, uint64_t tag)
{
    CUstream s;
    void *params[] = {&tag};
    ds_dim3 grid = {SPECS[K_GEMM].blocks, 1, 1}, block = {SPECS[K_GEMM].threads, 1, 1};
    BENCH_DS_CHECK(ds_vctx_acquire_stream(v, &s));
    for (int i = 0; i < count; i++)
        BENCH_DS_CHECK(ds_sim_launch_on_stream(b->rt, s, b->fn[K_GEMM], grid, block, params));
    BENCH_DS_CHECK(ds_vctx_release_stream(v));
    return 0;
}

static int sim_thread_init(pairs_backend *base)
{
    (void)base;
    return 0;
}

static int sim_tenant_get(pairs_backend *base, pairs_kind kind, int slot, pairs_tenant **out)
{
    sim_backend *b = (sim_backend *)base;
    pairs_tenant *t = &b->tenants[kind][slot & 1];
    t->b = b;
    t->kind = kind;
    *out = t;
    return 0;
}

static int sim_submit(pairs_tenant *t, ds_vctx_t v, step_progress *p)
{
    sim_backend *b = t->b;
    uint64_t tag = p->submitted;
    int rc = 0;
    switch (t->kind) {
    case KIND_COMPUTE:
        rc = gemms(b, v, PAIRS_COMPUTE_GEMMS, tag);
        break;
    case KIND_MEMORY:
        rc = launch_own(b, v, K_SUMSQ, tag) || launch_own(b, v, K_SUMSQ_FINAL, tag) ||
             launch_own(b, v, K_ADAMW, tag);
        break;
    default:
        rc = gemms(b, v, PAIRS_MIX_GEMMS, tag) || launch_own(b, v, K_SUMSQ_MIX, tag) ||
             launch_own(b, v, K_SUMSQ_FINAL, tag) || launch_own(b, v, K_ADAMW_MIX, tag);
        break;
    }
    if (rc)
        return -1;
    p->submitted++;
    return 0;
}

/* No per-step event on the simulated device through the public API: two steps
 * are queued, then both drained. */
static int sim_retire(pairs_tenant *t, ds_vctx_t v, step_progress *p)
{
    (void)t;
    if (p->submitted - p->completed < 2)
        return 0;
    BENCH_DS_CHECK(ds_vctx_synchronize(v));
    p->completed = p->submitted;
    return 0;
}

static void sim_destroy(pairs_backend *base)
{
    free(base);
}

int pairs_sim_create(ds_runtime_t rt, pairs_backend **out)
{
    sim_backend *b = calloc(1, sizeof *b);
    if (!b) {
        fprintf(stderr, "pairs_sim_create: out of memory\n");
        return -1;
    }
    b->base = (pairs_backend){"simulated", sim_thread_init, sim_tenant_get, sim_submit, sim_retire, sim_destroy};
    b->rt = rt;
    const uint32_t param_size = sizeof(uint64_t);
    for (int k = 0; k < K_COUNT; k++)
        if (bench_sim_kernel(rt, SPECS[k].name, SPECS[k].block_us, SPECS[k].blocks_per_sm, 1, &param_size,
                             &b->fn[k])) {
            free(b);
            return -1;
        }
    *out = &b->base;
    return 0;
}
