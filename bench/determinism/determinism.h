/*
 * The determinism benchmark (docs/benchmarks.md, W3): what the trial driver
 * (determinism.c) needs from a device back end, with two back ends:
 *  - det_cuda.c: the LM head of kernels.cu on the GPU, through ds_launch;
 *  - det_sim.c: simulated kernels with the same launch configurations on the
 *    simulated device; the outputs are computed on the host from what the
 *    simulator recorded (launch shape and chunk bounds), since simulated
 *    kernels compute nothing.
 * and the cuBLAS audit (det_cublas.c, GPU only).
 *
 * Every function returns 0, or -1 after printing what failed.
 */
#ifndef DET_DETERMINISM_H
#define DET_DETERMINISM_H

#include <stddef.h>
#include <stdint.h>

#include <detshare/detshare.h>

#include "det_hash.h" /* det_hash_bytes, DET_HASH_INIT (shared with the gpu suite) */
#include "det_kernels.h"

/* One trial's inputs: the batch and the seed of its activations. */
typedef struct det_trial {
    uint32_t index;
    uint32_t batch; /* 1..DET_MAX_BATCH */
    uint64_t x_seed;
} det_trial;

/* What a trial produced, reduced to what the comparison needs. */
typedef struct det_output {
    uint64_t logits_hash; /* over the raw bytes of logits[batch][vocab] */
    uint64_t probs_hash;  /* over the raw bytes of probs[batch][vocab] */
    int32_t argmax[DET_MAX_BATCH];
} det_output;

/* Kinds of best-effort kernels. */
enum { DET_BE_BURN = 0, DET_BE_STREAM = 1 };

typedef struct det_backend det_backend;

typedef struct det_backend_ops {
    const char *name;
    /** First call on every thread that uses the back end. */
    int (*thread_init)(det_backend *b);
    /** Queues one trial on v: poison the outputs, generate the inputs, the LM
     *  head (unsliced when slices <= 1, else split into `slices` chunks of the
     *  hidden dimension and combined), softmax, argmax. Does not wait. */
    int (*ls_submit)(det_backend *b, ds_vctx_t v, const det_trial *t, uint32_t slices, int bf16_partials);
    /** Waits for v, reads the outputs back, checks them (finite, rows of
     *  probabilities summing to 1, tokens = argmax of the probabilities) and
     *  hashes them. */
    int (*ls_collect)(det_backend *b, ds_vctx_t v, const det_trial *t, det_output *out);
    /** One-off check of the numerics against the host (after warm-up): a few
     *  logits against a double-precision dot product, and the sliced result
     *  close to (but not required bitwise equal to) the unsliced one. */
    int (*self_check)(det_backend *b, ds_vctx_t v, const det_trial *t);
    /** Launches one best-effort kernel of `kind` on v with `grid` blocks,
     *  each lasting about block_us (DET_BE_BURN). Does not wait. */
    int (*be_launch)(det_backend *b, ds_vctx_t v, int kind, uint32_t grid, double block_us);
    void (*destroy)(det_backend *b);
} det_backend_ops;

struct det_backend {
    const det_backend_ops *ops;
    uint32_t vocab; /* rows of the LM head whose outputs are compared */
};

/** Real work on the GPU (the runtime's primary context current here). */
int det_cuda_create(ds_runtime_t rt, int ordinal, ds_vctx_t setup_vctx, det_backend **out);
/** Simulated stand-ins. */
int det_sim_create(ds_runtime_t rt, det_backend **out);

/* ------------------------------------------------------------------------ */
/* cuBLAS audit                                                              */

typedef struct det_audit_row {
    char shape[48];     /* "MxKxN" */
    int m, k, n;
    const char *dtype;  /* "bf16", "fp16", "fp32", "tf32" */
    int32_t pctx;       /* pool index, -1 for the default stream */
    uint32_t sms;       /* SMs of that pCtx (device SMs for the default stream) */
    int sm_count_target;/* cublasSetSmCountTarget value, 0 = not set */
    int bitwise_equal;
    size_t mismatched_elements;
    double max_abs_diff;
    double ms;          /* one GEMM, host-timed around a synchronize */
} det_audit_row;

/** Runs the audit on v (remapped to each pCtx in turn, then left on the
 *  FULL one). *rows is malloc'ed. GPU only. */
int det_cublas_audit(ds_runtime_t rt, const ds_runtime_info *info, ds_vctx_t v, det_backend *b,
                     det_audit_row **rows, size_t *count);

/* ------------------------------------------------------------------------ */
/* helpers shared by the back ends (determinism.c)                           */

/** Checks a trial's outputs (see ls_collect) and fills *out. */
int det_check_and_hash(const float *logits, const float *probs, const int32_t *tokens, uint32_t batch,
                       uint32_t vocab, det_output *out);

/** Chunk c's first hidden index when [0, hidden) is split into `slices`
 *  chunks of whole DET_VEC groups (c = slices gives hidden). */
static inline int det_slice_bound(int hidden, uint32_t slices, uint32_t c)
{
    const long long groups = hidden / DET_VEC;
    return (int)((groups * (long long)c) / (long long)slices) * DET_VEC;
}

#endif /* DET_DETERMINISM_H */
