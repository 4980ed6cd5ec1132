/*
 * The model the serve benchmark (docs/benchmarks.md, W5) runs, behind one
 * interface with two back ends:
 *  - engine_cuda.c: a Llama-3-8B-shaped decoder in bf16 with random weights:
 *    cuBLAS GEMMs in sections, this example's own kernels (kernels.cu:
 *    embedding, RMSNorm, RoPE, KV-cache writes, prefill and decode attention
 *    over the KV cache, SwiGLU, argmax) through ds_launch; decode steps
 *    replayed as one ds_graph per batch-size bucket;
 *  - engine_sim.c: simulated kernels whose block counts and durations are
 *    modelled on the real ones, for machines without a GPU.
 *
 * Shapes (Llama-3-8B, Meta's model card): hidden 4096, 32 query heads and 8
 * KV heads of 128, MLP 14336 (SwiGLU), vocabulary 128256, RMSNorm (eps 1e-5),
 * RoPE (theta 500000). Only the layer count is a parameter.
 *
 * KV cache: max_batch + 1 slots of max_ctx positions each; a request owns one
 * slot from its first prefill chunk to its last output token. Slot max_batch
 * is scratch: decode buckets pad with it.
 *
 * Threads: prefill_* and decode_* may run on two threads at once (each on its
 * own vCtx: the multiplexed modes) or alternate on one thread and one vCtx
 * (`single`); each side keeps its own buffers and cuBLAS handle. Two calls of
 * one side never overlap. The KV slots of the requests in a prefill chunk and
 * those in a decode step are disjoint.
 *
 * Every function returns 0, or -1 after printing what failed.
 * Launch configurations never depend on the SMs a pCtx has: outputs are
 * bitwise independent of placement.
 */
#ifndef SERVE_ENGINE_H
#define SERVE_ENGINE_H

#include <stdint.h>

#include <detshare/detshare.h>

#define SERVE_HIDDEN 4096
#define SERVE_HEADS 32
#define SERVE_KV_HEADS 8
#define SERVE_HEAD_DIM 128
#define SERVE_MLP 14336
#define SERVE_VOCAB 128256
#define SERVE_RMS_EPS 1e-5f
#define SERVE_ROPE_THETA 500000.0f

/** Most requests one decode step or prefill chunk carries. */
#define SERVE_MAX_BATCH 256

typedef struct serve_model {
    uint32_t layers;       /* decoder layers (Llama-3-8B: 32) */
    uint32_t max_ctx;      /* KV positions per slot: prompt + output tokens */
    uint32_t max_batch;    /* KV slots for requests (<= SERVE_MAX_BATCH); the largest decode bucket */
    uint32_t chunk_tokens; /* prefill tokens per chunk (the chunked-prefill budget) */
    uint64_t seed;         /* weights */
} serve_model;

/** Most decode buckets: 1, 2, 4, then 8 to SERVE_MAX_BATCH in steps of 8. */
#define SERVE_MAX_BUCKETS (3 + SERVE_MAX_BATCH / 8)

/** Decode batch-size buckets: 1, 2, 4, 8, then multiples of 8 up to max_batch.
 *  Returns the smallest bucket >= bs (bs in [1, max_batch]). */
uint32_t serve_bucket(uint32_t bs, uint32_t max_batch);
/** How many buckets there are up to max_batch (>= 1). */
uint32_t serve_bucket_count(uint32_t max_batch);
/** Bucket number i in ascending order (i < serve_bucket_count(max_batch)). */
uint32_t serve_bucket_at(uint32_t i, uint32_t max_batch);
/** The position of serve_bucket(bs, max_batch) in that order. */
uint32_t serve_bucket_index(uint32_t bs, uint32_t max_batch);

/** One request's share of a prefill chunk: prompt tokens [start, start + ntok)
 *  of the request in KV slot `slot`, whose earlier positions are already in
 *  the cache. */
typedef struct serve_segment {
    uint32_t slot;
    uint32_t start;
    uint32_t ntok;
    uint32_t last;         /* 1: the prompt ends here; this segment yields the first output token */
    const int32_t *tokens; /* ntok token ids (read during prefill_submit only) */
} serve_segment;

typedef struct serve_engine serve_engine;

typedef struct serve_ops {
    const char *name;
    /** First call on every thread that submits (binds cudart to the device). */
    int (*thread_init)(serve_engine *e);
    /** Queues prefill of one chunk on v and returns without waiting: for all
     *  segments together (n in [1, SERVE_MAX_BATCH], sum of ntok <=
     *  chunk_tokens, start + ntok <= max_ctx), embedding, every layer (the KV
     *  cache of each slot written at its positions, causal attention over
     *  positions [0, start + ntok) of its slot), and for segments with last=1
     *  the LM head and argmax of their last token. */
    int (*prefill_submit)(serve_engine *e, ds_vctx_t v, const serve_segment *segs, uint32_t n);
    /** After v was synchronized: the first output token of each segment of the
     *  last prefill_submit with last=1, in segment order (*count of them). */
    int (*prefill_result)(serve_engine *e, int32_t *tokens, uint32_t *count);
    /** Queues one decode step on v for bs requests (bs in [1, max_batch]):
     *  request i in KV slot slots[i] feeds tokens[i] at position pos[i] (its
     *  tokens so far: pos[i] + 1 <= max_ctx) and attends over [0, pos[i]].
     *  Replays the vCtx's ds_graph of serve_bucket(bs), made at first use;
     *  returns without waiting. */
    int (*decode_submit)(serve_engine *e, ds_vctx_t v, uint32_t bs, const uint32_t *slots,
                         const int32_t *tokens, const uint32_t *pos);
    /** After v was synchronized: the bs next tokens of the last decode_submit. */
    int (*decode_result)(serve_engine *e, int32_t *tokens);
    /** Forgets what belongs to v (its decode graphs); call before ds_vctx_destroy(v).
     *  0 also if nothing did. */
    int (*vctx_release)(serve_engine *e, ds_vctx_t v);
    void (*destroy)(serve_engine *e);
} serve_ops;

struct serve_engine {
    const serve_ops *ops;
    serve_model model;
};

/** Real model on the runtime's GPU (device ordinal as in ds_runtime_config).
 *  Call on the thread that created the runtime, after ds_runtime_create. */
int serve_engine_cuda_create(ds_runtime_t rt, int ordinal, const serve_model *m, serve_engine **out);

/** Test hook of the CUDA back end (serve_check): copies the fp32 logits of the
 *  last prefill (decode 0: one row per segment with last=1) or decode step
 *  (decode 1: one row per bucket row), rows x SERVE_VOCAB, into host, after the
 *  caller synchronized that side's vCtx. 0, or -1 after printing. */
int serve_engine_cuda_last_logits(serve_engine *e, int decode, float *host, uint32_t rows);

/** Simulated stand-in on the runtime's simulated device. */
int serve_engine_sim_create(ds_runtime_t rt, const serve_model *m, serve_engine **out);

#endif /* SERVE_ENGINE_H */
