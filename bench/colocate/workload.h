/*
 * What the two tenants of the colocate benchmark (docs/benchmarks.md, W1) run, behind
 * one interface with two back ends:
 *  - workload_cuda.c: real work, cuBLAS GEMMs in sections plus this example's
 *    own kernels (kernels.cu) through ds_launch;
 *  - workload_sim.c: simulated kernels whose block counts and block durations
 *    are modelled on the real ones, for machines without a GPU.
 *
 * LS request (one decode step of a batch of COLO_BATCH sequences):
 *   COLO_LS_LAYERS GEMMs [batch x hidden] x [hidden x hidden]  (section, cuBLAS)
 *   RMSNorm                                                    (ds_launch)
 *   LM head GEMM [batch x hidden] x [hidden x vocab] -> fp32   (section, cuBLAS)
 *   softmax (fp32), argmax                                     (ds_launch)
 * BE step (training-like, never idles), colo_be_config.kind:
 *  COLO_BE_TRAINING (default, --be training):
 *   one COLO_BE_BIG^3 GEMM and two COLO_BE_SMALL^3 GEMMs       (section, cuBLAS)
 *   gradient-norm reduction (two kernels), AdamW update       (ds_launch)
 *  COLO_BE_PERSISTENT (--be persistent):
 *   one persistent tiled kernel (colo_persistent)              (ds_launch)
 *   whose grid is the whole device's SMs x the blocks that fit on one SM
 *   (read once at start, never from a pCtx), each block looping over
 *   COLO_PERSIST_TILES_PER_BLOCK tiles, so one block keeps its SM for about
 *   colo_be_config.block_ms: a GPU never preempts a running block, so stream
 *   priority cannot get LS onto those SMs before the blocks end.
 *
 * Every function returns 0, or -1 after printing what failed.
 * Launch configurations are constants, never derived from the SMs a pCtx has:
 * that is what keeps results bitwise independent of placement.
 */
#ifndef COLOCATE_WORKLOAD_H
#define COLOCATE_WORKLOAD_H

#include <stdint.h>

#include <detshare/detshare.h>

#define COLO_BATCH 8
#define COLO_HIDDEN 4096
#define COLO_VOCAB 32000
#define COLO_LS_LAYERS 4
#define COLO_BE_BIG 8192
#define COLO_BE_SMALL 4096
#define COLO_BE_PARAMS (32ull << 20) /* optimizer state: 4 fp32 arrays of this many */
#define COLO_BE_GRID 1056u           /* elementwise/reduction grid: 8 blocks per SM of a 132-SM GPU */
#define COLO_ROW_THREADS 1024u       /* threads of the per-row LS kernels */
#define COLO_BE_THREADS 256u
#define COLO_PERSIST_THREADS 256u      /* threads of a colo_persistent block */
#define COLO_PERSIST_TILES_PER_BLOCK 8u /* tiles each block loops over (one wave: grid = what fits) */

/** What the BE tenant runs (--be). */
typedef enum colo_be_kind {
    COLO_BE_TRAINING = 0,   /* GEMMs and an optimizer step: blocks of tens to hundreds of us */
    COLO_BE_PERSISTENT = 1, /* one persistent kernel per step: blocks of block_ms */
} colo_be_kind;

typedef struct colo_be_config {
    colo_be_kind kind;
    double block_ms; /* COLO_BE_PERSISTENT: one block's duration alone on the whole GPU */
} colo_be_config;

/** The BE tenant as created (workload.be_info), for the result file. */
typedef struct colo_be_info {
    uint32_t grid;          /* COLO_BE_PERSISTENT: blocks per launch */
    uint32_t blocks_per_sm; /* ... resident per SM at once (occupancy) */
    uint32_t sm_count;      /* ... SMs of the whole device, read once at start */
    uint32_t tiles;         /* ... tiles per launch (grid x COLO_PERSIST_TILES_PER_BLOCK) */
    uint32_t tile_iters;    /* ... FMA iterations per tile (calibrated on a GPU; 0 simulated) */
    double block_ms;        /* ... one block's duration alone on the whole GPU: measured on a GPU,
                               the model's on the simulated device */
} colo_be_info;

typedef struct workload workload;

/** A BE tenant's progress: steps [0, completed) have finished on the device,
 *  steps [completed, submitted) may still be running. */
typedef struct be_progress {
    uint64_t submitted;
    uint64_t completed;
} be_progress;

typedef struct workload_ops {
    const char *name;
    /** First call on every tenant thread (binds cudart to the device). */
    int (*thread_init)(workload *w);
    /** Queues one LS request on v; returns without waiting for it. */
    int (*ls_submit)(workload *w, ds_vctx_t v);
    /** After the LS vCtx was synchronized: a hash of the last request's output
     *  (softmax probabilities and tokens). *available = 0 where the device
     *  computes no data (simulator). */
    int (*ls_fingerprint)(workload *w, uint64_t *hash, int *available);
    /** Queues BE step p->submitted on v and counts it. */
    int (*be_submit)(workload *w, ds_vctx_t v, be_progress *p);
    /** Blocks until fewer than two BE steps are in flight, updating
     *  p->completed, so the device always has the next step queued while the
     *  host never runs more than two steps ahead. */
    int (*be_retire)(workload *w, ds_vctx_t v, be_progress *p);
    /** After the runs, no BE work in flight: *same = 1 if the BE output has
     *  the bits it had before any run (--be persistent on a GPU), 0 if not,
     *  -1 where not checked (training BE, simulator). */
    int (*be_verify)(workload *w, int *same);
    void (*destroy)(workload *w);
} workload_ops;

struct workload {
    const workload_ops *ops;
    colo_be_config be;   /* as asked for */
    colo_be_info be_info; /* as created */
};

/** Real work on the runtime's GPU (device ordinal as in ds_runtime_config).
 *  Call on the thread that created the runtime, after ds_runtime_create.
 *  BE is the training step (COLO_BE_TRAINING). */
int workload_cuda_create(ds_runtime_t rt, int ordinal, workload **out);

/** The same with BE as `be` says; a persistent BE kernel is calibrated here,
 *  alone on the whole GPU. */
int workload_cuda_create_be(ds_runtime_t rt, int ordinal, const colo_be_config *be, workload **out);

/** Simulated stand-ins on the runtime's simulated device; BE is the training
 *  step. */
int workload_sim_create(ds_runtime_t rt, workload **out);

/** The same with BE as `be` says. */
int workload_sim_create_be(ds_runtime_t rt, const colo_be_config *be, workload **out);

#endif /* COLOCATE_WORKLOAD_H */
