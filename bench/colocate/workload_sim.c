/*
 * Simulated back end of the colocate workload (workload.h): each real kernel
 * becomes a simulated kernel with the block count it has on a 132-SM H100/H200
 * and a block duration chosen so that the kernel takes about as long as the
 * real one does alone on the whole GPU. Own kernels go through ds_launch,
 * cuBLAS stand-ins through ds_sim_launch_on_stream inside a section, exactly
 * where the CUDA back end calls cuBLAS.
 *
 * --be persistent: one simulated kernel per BE step, as colo_persistent is
 * launched on a GPU: the device's SMs x PERSIST_BLOCKS_PER_SM blocks (what
 * fits of 256-thread blocks on an H100 SM), each lasting colo_be_config's
 * block_ms and taking a whole SM's share of its capacity, so nothing else
 * runs on an SM until its blocks end: the model's blocks are never
 * preempted, as a GPU's are not.
 */
#include <stdio.h>
#include <stdlib.h>

#include <detshare/sim.h>

#include "bench.h"
#include "workload.h"

/* Blocks of colo_persistent resident per SM (the occupancy of a 256-thread
 * block with few registers on an H100: 2048 threads per SM). */
#define PERSIST_BLOCKS_PER_SM 8u

enum sim_kernel {
    K_LS_GEMM,
    K_LS_NORM,
    K_LS_HEAD,
    K_LS_SOFTMAX,
    K_LS_ARGMAX,
    K_BE_GEMM_BIG,
    K_BE_GEMM,
    K_BE_SUMSQ,
    K_BE_SUMSQ_FINAL,
    K_BE_ADAMW,
    K_COUNT
};

typedef struct sim_kernel_spec {
    const char *name;
    uint32_t blocks;
    uint32_t threads;
    double block_us;
} sim_kernel_spec;

/* Durations on 132 SMs, one block per SM at a time: waves x block_us. */
static const sim_kernel_spec SPECS[K_COUNT] = {
    /* 32 MiB of bf16 weights at ~3.3 TB/s: ~10 us, one wave */
    [K_LS_GEMM] = {"ls_gemm_8x4096x4096", 132, 128, 10.0},
    [K_LS_NORM] = {"colo_rmsnorm", COLO_BATCH, COLO_ROW_THREADS, 5.0},
    /* 250 MiB of LM-head weights: ~80 us, two waves */
    [K_LS_HEAD] = {"ls_gemm_8x4096x32000", 264, 128, 40.0},
    [K_LS_SOFTMAX] = {"colo_softmax", COLO_BATCH, COLO_ROW_THREADS, 5.0},
    [K_LS_ARGMAX] = {"colo_argmax", COLO_BATCH, COLO_ROW_THREADS, 5.0},
    /* 1.1 TFLOP of bf16 tensor-core work: ~1.6 ms, 16 waves */
    [K_BE_GEMM_BIG] = {"be_gemm_8192", 2112, 256, 100.0},
    /* 0.14 TFLOP: ~0.16 ms, 4 waves */
    [K_BE_GEMM] = {"be_gemm_4096", 528, 256, 40.0},
    [K_BE_SUMSQ] = {"colo_sumsq_partial", COLO_BE_GRID, COLO_BE_THREADS, 10.0},
    [K_BE_SUMSQ_FINAL] = {"colo_sumsq_final", 1, COLO_BE_THREADS, 5.0},
    /* 32M fp32 parameters, 28 bytes each moved: ~0.25 ms, 8 waves */
    [K_BE_ADAMW] = {"colo_adamw", COLO_BE_GRID, COLO_BE_THREADS, 30.0},
};

typedef struct workload_sim {
    workload base;
    ds_runtime_t rt;
    CUfunction fn[K_COUNT];
    CUfunction persistent; /* --be persistent */
    uint64_t ls_requests; /* used by one LS thread at a time */
} workload_sim;

/* Each simulated kernel takes one parameter, a sequence number, so traces
 * show which request or step a kernel belongs to. */
static int launch_own(workload_sim *w, ds_vctx_t v, enum sim_kernel k, uint64_t tag)
{
    void *params[] = {&tag};
    ds_dim3 grid = {SPECS[k].blocks, 1, 1}, block = {SPECS[k].threads, 1, 1};
    BENCH_DS_CHECK(ds_launch(v, w->fn[k], grid, block, 0, params, NULL));
    return 0;
}

/* What cuBLAS would launch on the section's stream. */
static int launch_on_stream(workload_sim *w, CUstream s, enum sim_kernel k, uint64_t tag)
{
    void *params[] = {&tag};
    ds_dim3 grid = {SPECS[k].blocks, 1, 1}, block = {SPECS[k].threads, 1, 1};
    BENCH_DS_CHECK(ds_sim_launch_on_stream(w->rt, s, w->fn[k], grid, block, params));
    return 0;
}

static int sim_thread_init(workload *base)
{
    (void)base;
    return 0;
}

static int sim_ls_submit(workload *base, ds_vctx_t v)
{
    workload_sim *w = (workload_sim *)base;
    uint64_t tag = w->ls_requests++;
    CUstream s;
    BENCH_DS_CHECK(ds_vctx_acquire_stream(v, &s));
    for (int l = 0; l < COLO_LS_LAYERS; l++)
        if (launch_on_stream(w, s, K_LS_GEMM, tag))
            return -1;
    BENCH_DS_CHECK(ds_vctx_release_stream(v));
    if (launch_own(w, v, K_LS_NORM, tag))
        return -1;
    BENCH_DS_CHECK(ds_vctx_acquire_stream(v, &s));
    if (launch_on_stream(w, s, K_LS_HEAD, tag))
        return -1;
    BENCH_DS_CHECK(ds_vctx_release_stream(v));
    if (launch_own(w, v, K_LS_SOFTMAX, tag) || launch_own(w, v, K_LS_ARGMAX, tag))
        return -1;
    return 0;
}

static int sim_ls_fingerprint(workload *base, uint64_t *hash, int *available)
{
    (void)base;
    *hash = 0;
    *available = 0; /* simulated kernels compute nothing */
    return 0;
}

static int sim_be_submit(workload *base, ds_vctx_t v, be_progress *p)
{
    workload_sim *w = (workload_sim *)base;
    uint64_t tag = p->submitted;
    if (w->base.be.kind == COLO_BE_PERSISTENT) {
        void *params[] = {&tag};
        ds_dim3 grid = {w->base.be_info.grid, 1, 1}, block = {256, 1, 1};
        BENCH_DS_CHECK(ds_launch(v, w->persistent, grid, block, 0, params, NULL));
        p->submitted++;
        return 0;
    }
    CUstream s;
    BENCH_DS_CHECK(ds_vctx_acquire_stream(v, &s));
    if (launch_on_stream(w, s, K_BE_GEMM_BIG, tag) || launch_on_stream(w, s, K_BE_GEMM, tag) ||
        launch_on_stream(w, s, K_BE_GEMM, tag))
        return -1;
    BENCH_DS_CHECK(ds_vctx_release_stream(v));
    if (launch_own(w, v, K_BE_SUMSQ, tag) || launch_own(w, v, K_BE_SUMSQ_FINAL, tag) ||
        launch_own(w, v, K_BE_ADAMW, tag))
        return -1;
    p->submitted++;
    return 0;
}

/* The public API has no per-step event on the simulated device, so this
 * synchronizes every other step: two steps are queued, then both drained.
 * The device idles only while the host queues the next step (microseconds
 * against a ~2 ms step). */
static int sim_be_retire(workload *base, ds_vctx_t v, be_progress *p)
{
    (void)base;
    if (p->submitted - p->completed < 2)
        return 0;
    BENCH_DS_CHECK(ds_vctx_synchronize(v));
    p->completed = p->submitted;
    return 0;
}

static int sim_be_verify(workload *base, int *same)
{
    (void)base;
    *same = -1; /* simulated kernels compute nothing */
    return 0;
}

static void sim_destroy(workload *base)
{
    free(base); /* the simulated kernels live until the runtime is destroyed */
}

static const workload_ops SIM_OPS = {
    "simulated",
    sim_thread_init,
    sim_ls_submit,
    sim_ls_fingerprint,
    sim_be_submit,
    sim_be_retire,
    sim_be_verify,
    sim_destroy,
};

static int create_kernels(workload_sim *w)
{
    const uint32_t param_size = sizeof(uint64_t);
    for (int k = 0; k < K_COUNT; k++)
        if (bench_sim_kernel(w->rt, SPECS[k].name, SPECS[k].block_us, 1, 1, &param_size, &w->fn[k]))
            return -1;
    if (w->base.be.kind != COLO_BE_PERSISTENT)
        return 0;
    /* The grid from the whole device, once (as on a GPU). */
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    BENCH_DS_CHECK(ds_runtime_info_get(w->rt, &info));
    colo_be_info *bi = &w->base.be_info;
    bi->sm_count = info.sm_count;
    bi->blocks_per_sm = PERSIST_BLOCKS_PER_SM;
    bi->grid = bi->sm_count * bi->blocks_per_sm;
    bi->tiles = bi->grid * COLO_PERSIST_TILES_PER_BLOCK;
    bi->tile_iters = 0;
    bi->block_ms = w->base.be.block_ms;
    printf("BE persistent kernel (simulated): %u blocks (%u SMs x %u per SM) of %.3f ms\n", bi->grid, bi->sm_count,
           bi->blocks_per_sm, bi->block_ms);
    return bench_sim_kernel(w->rt, "colo_persistent", bi->block_ms * 1e3, PERSIST_BLOCKS_PER_SM, 1, &param_size,
                            &w->persistent);
}

int workload_sim_create_be(ds_runtime_t rt, const colo_be_config *be, workload **out)
{
    workload_sim *w = calloc(1, sizeof *w);
    if (!w) {
        fprintf(stderr, "workload_sim_create_be: out of memory\n");
        return -1;
    }
    w->base.ops = &SIM_OPS;
    w->base.be = *be;
    w->rt = rt;
    if (create_kernels(w)) {
        free(w);
        return -1;
    }
    *out = &w->base;
    return 0;
}

int workload_sim_create(ds_runtime_t rt, workload **out)
{
    const colo_be_config training = {COLO_BE_TRAINING, 0.0};
    return workload_sim_create_be(rt, &training, out);
}
