/*
 * Simulated back end of the serve engine (engine.h): the call structure of
 * engine_cuda.c with simulated kernels whose durations are modelled on a
 * Llama-3-8B-shaped decoder in bf16 on an H100. This example's own kernels go
 * through ds_launch, cuBLAS stand-ins through ds_sim_launch_on_stream inside a
 * section, decode steps are one ds_graph per batch-size bucket and vCtx whose
 * capture function launches the step's kernels on the capture stream.
 *
 * Duration model (numbers in SIM_MODEL below). A kernel of T us on the whole
 * GPU is launched as 132 x w blocks of b us each (w waves, w x b ~ T): on S
 * SMs it takes ceil(132 w / S) x b, i.e. about T x 132 / S rounded up to
 * whole waves. The grid depends only on the kernel's shape (never on the SMs
 * of a pCtx). Each kernel kind exists at 44 block durations (a ladder from 1
 * to 41.5 us) and plan() picks w and b (see SIM_WAVES).
 *
 * Decode graphs replay fixed launches, so their attention cannot follow each
 * request's context as the real kernel (early exit past pos) does: it is
 * modelled at SIM_MODEL.decode_ctx positions for every request of the bucket
 * (padding included), clipped to max_ctx. Prefill is launched directly and
 * uses each segment's real positions.
 *
 * Tokens: the simulator computes no data, so the "argmax" results are a hash
 * of (model seed, KV slot, position, input token): deterministic and
 * independent of placement and timing, and the scheduler has tokens to feed
 * back. They are not what the real model would produce.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <detshare/detshare.h>
#include <detshare/sim.h>

#include "bench.h"
#include "engine.h"

/* ------------------------------------------------------------------------ */
/* the model                                                                 */

/* Where the numbers come from:
 *  - H100 SXM: 132 SMs; dense bf16 tensor-core peak ~989 TFLOPS and HBM3
 *    3.35 TB/s on the data sheet, of which GEMMs reach about 700 TFLOPS and
 *    3.0 TB/s in practice; the model takes ~60% of those (400 TFLOPS, 2.4 TB/s)
 *    as what kernels of an 8B model's shapes sustain.
 *  - prefill (causal, FlashAttention-style) attention: 300 TFLOPS.
 *  - Llama-3-8B shapes (engine.h): hidden 4096, 32 q / 8 kv heads of 128,
 *    MLP 14336, vocabulary 128256, bf16 weights and activations, fp32 logits.
 *  - decode_ctx: mean prompt of the default trace (Azure LLM 2023 "code":
 *    2048 tokens; 28 output tokens on average).
 * To retune against measured kernels (serve_check on a GPU), change this
 * table only. */
static const struct sim_model {
    double sms;            /* blocks per wave: the H100's SM count */
    double gemm_flops;     /* FLOP/s of GEMMs */
    double mem_bw;         /* B/s of memory-bound kernels (GEMMs, attention, elementwise) */
    double attn_flops;     /* FLOP/s of prefill attention */
    double min_us;         /* shortest kernel (launch + tail) */
    double decode_ctx;     /* positions each request of a decode graph attends over */
    double act_bytes;      /* bytes per activation / weight element (bf16) */
    double logit_bytes;    /* bytes per logit (fp32) */
} SIM_MODEL = {
    .sms = 132.0,
    .gemm_flops = 400e12,
    .mem_bw = 2.4e12,
    .attn_flops = 300e12,
    .min_us = 3.0,
    .decode_ctx = 2048.0,
    .act_bytes = 2.0,
    .logit_bytes = 4.0,
};

#define SIM_QKV (SERVE_HIDDEN + 2 * SERVE_KV_HEADS * SERVE_HEAD_DIM) /* 6144 */
#define SIM_KV_BYTES_PER_POS (2.0 * SERVE_KV_HEADS * SERVE_HEAD_DIM * 2.0) /* K and V, per layer: 4 KiB */

/* Waves and block durations. A kernel of T us gets SIM_SHORT_WAVES waves if
 * T <= SIM_SHORT_US, else max(SIM_WAVES, ceil(T / SIM_BLOCK_MAX_US)) waves,
 * and the block duration of the ladder 2^(i/8) us (i = 0 .. SIM_NBLOCK_US-1)
 * nearest T / waves: within 4.4% of T on 132 SMs. On S SMs whole waves of
 * 132 blocks round up: 4 waves stay within 18% of T x 132 / S on every pCtx
 * size serve uses (5% on average), 2 waves within 32%. Few waves because the
 * simulator's cost is per wave (~2 us of host time for 132 SMs), and in
 * DS_SIM_CLOCK_REALTIME the host must keep up with simulated time; blocks
 * of at most ~40 us because that is about a GEMM tile's time on an SM, and
 * the time another tenant's kernel may wait for an SM. */
#define SIM_SHORT_US 8.0
#define SIM_SHORT_WAVES 2.0
#define SIM_WAVES 4.0
#define SIM_BLOCK_MAX_US 40.0
#define SIM_NBLOCK_US 44 /* 1 us .. 2^(43/8) = 41.5 us */

enum sim_kind {
    K_EMBED,
    K_RMSNORM,
    K_GEMM_QKV,
    K_ROPE_KV,
    K_ATTN_PREFILL,
    K_ATTN_DECODE,
    K_GEMM_O,
    K_GEMM_GATE_UP,
    K_SWIGLU,
    K_GEMM_DOWN,
    K_FINAL_NORM,
    K_LM_HEAD,
    K_ARGMAX,
    K_COUNT
};

static const struct {
    const char *name;
    uint32_t threads;
} SIM_KINDS[K_COUNT] = {
    [K_EMBED] = {"serve_embedding", 256},
    [K_RMSNORM] = {"serve_rmsnorm", 256},
    [K_GEMM_QKV] = {"serve_gemm_qkv", 256},
    [K_ROPE_KV] = {"serve_rope_kv_write", 256},
    [K_ATTN_PREFILL] = {"serve_attention_prefill", 128},
    [K_ATTN_DECODE] = {"serve_attention_decode", 128},
    [K_GEMM_O] = {"serve_gemm_o", 256},
    [K_GEMM_GATE_UP] = {"serve_gemm_gate_up", 256},
    [K_SWIGLU] = {"serve_swiglu", 256},
    [K_GEMM_DOWN] = {"serve_gemm_down", 256},
    [K_FINAL_NORM] = {"serve_final_norm", 256},
    [K_LM_HEAD] = {"serve_gemm_lm_head", 256},
    [K_ARGMAX] = {"serve_argmax", 256},
};

/* Durations in us on the whole GPU. */
static double floor_us(double us)
{
    return us > SIM_MODEL.min_us ? us : SIM_MODEL.min_us;
}

/* [m x k] x [k x n], bf16 in and out. */
static double gemm_us(double m, double n, double k)
{
    double flops = 2.0 * m * n * k / SIM_MODEL.gemm_flops;
    double bytes = (m * k + k * n + m * n) * SIM_MODEL.act_bytes / SIM_MODEL.mem_bw;
    return floor_us(1e6 * (flops > bytes ? flops : bytes));
}

static double mem_us(double bytes)
{
    return floor_us(1e6 * bytes / SIM_MODEL.mem_bw);
}

/* Elementwise kernels over `rows` tokens (bytes read plus written). */
static double embed_us(double rows) { return mem_us(2.0 * rows * SERVE_HIDDEN * SIM_MODEL.act_bytes); }
/* residual add fused: read x and residual, write residual and output */
static double rmsnorm_us(double rows) { return mem_us(4.0 * rows * SERVE_HIDDEN * SIM_MODEL.act_bytes); }
/* read q, k, v; write rotated q and k, v into the cache */
static double rope_us(double rows) { return mem_us(2.0 * rows * SIM_QKV * SIM_MODEL.act_bytes); }
/* read gate and up, write their product */
static double swiglu_us(double rows) { return mem_us(3.0 * rows * SERVE_MLP * SIM_MODEL.act_bytes); }
static double argmax_us(double rows) { return mem_us(rows * SERVE_VOCAB * SIM_MODEL.logit_bytes); }

/* Decode attention of `rows` requests over ctx positions each: the KV cache read. */
static double attn_decode_us(double rows, double ctx)
{
    return mem_us(rows * ctx * SIM_KV_BYTES_PER_POS);
}

/* ------------------------------------------------------------------------ */
/* the engine                                                                */


typedef struct sim_launch {
    CUfunction f;
    uint32_t blocks;
} sim_launch;

typedef struct sim_engine sim_engine;

/* What a decode graph's capture function needs; one per bucket, shared by
 * every vCtx's graph of that bucket, alive as long as the engine. */
typedef struct sim_capture {
    sim_engine *e;
    uint32_t bucket;
} sim_capture;

typedef struct sim_vgraphs {
    ds_vctx_t v;
    ds_graph_t g[SERVE_MAX_BUCKETS];
} sim_vgraphs;

struct sim_engine {
    serve_engine base;
    ds_runtime_t rt;
    CUfunction fn[K_COUNT][SIM_NBLOCK_US]; /* kind, block duration 2^(i/8) us */
    sim_capture cap[SERVE_MAX_BUCKETS];

    /* prefill side (one thread at a time) */
    uint64_t prefill_seq;
    uint32_t prefill_count;
    int32_t prefill_tokens[SERVE_MAX_BATCH];

    /* decode side (one thread at a time) */
    uint64_t decode_seq;
    uint32_t decode_bs;
    int32_t decode_tokens[SERVE_MAX_BATCH];

    /* decode graphs per vCtx: decode_submit on a serving thread, vctx_release
     * on the thread that destroys the vCtx */
    pthread_mutex_t mu;
    sim_vgraphs *vg;
    size_t nvg, capvg;
};

/* The launch of kind k lasting us on 132 SMs (see SIM_WAVES). */
static sim_launch plan(const sim_engine *e, enum sim_kind k, double us)
{
    double waves = us <= SIM_SHORT_US ? SIM_SHORT_WAVES : ceil(us / SIM_BLOCK_MAX_US);
    if (us > SIM_SHORT_US && waves < SIM_WAVES)
        waves = SIM_WAVES;
    if (waves > 1e6) /* 10^6 waves = 40 s: far beyond any chunk */
        waves = 1e6;
    double i = floor(8.0 * log2(us / waves) + 0.5);
    if (i < 0)
        i = 0;
    if (i > SIM_NBLOCK_US - 1)
        i = SIM_NBLOCK_US - 1;
    return (sim_launch){e->fn[k][(int)i], (uint32_t)(waves * SIM_MODEL.sms)};
}

/* Each kernel carries one parameter, a tag (submission << 16 | layer, layer
 * 0xffff outside the layers), so traces show which step and layer it is. */
static uint64_t tag_of(uint64_t seq, uint32_t layer)
{
    return seq << 16 | (layer & 0xffffu);
}

static int launch_own(sim_engine *e, ds_vctx_t v, enum sim_kind k, double us, uint64_t tag)
{
    sim_launch l = plan(e, k, us);
    void *params[] = {&tag};
    ds_dim3 grid = {l.blocks, 1, 1}, block = {SIM_KINDS[k].threads, 1, 1};
    BENCH_DS_CHECK(ds_launch(v, l.f, grid, block, 0, params, NULL));
    return 0;
}

static int launch_on_stream(sim_engine *e, CUstream s, enum sim_kind k, double us, uint64_t tag)
{
    sim_launch l = plan(e, k, us);
    void *params[] = {&tag};
    ds_dim3 grid = {l.blocks, 1, 1}, block = {SIM_KINDS[k].threads, 1, 1};
    BENCH_DS_CHECK(ds_sim_launch_on_stream(e->rt, s, l.f, grid, block, params));
    return 0;
}

/* A cuBLAS GEMM in a section. */
static int gemm_section(sim_engine *e, ds_vctx_t v, enum sim_kind k, double us, uint64_t tag)
{
    CUstream s;
    BENCH_DS_CHECK(ds_vctx_acquire_stream(v, &s));
    int rc = launch_on_stream(e, s, k, us, tag);
    BENCH_DS_CHECK(ds_vctx_release_stream(v));
    return rc;
}

/* The stand-in for argmax: splitmix64 of (seed, slot, position, token). */
static int32_t sim_token(const sim_engine *e, uint32_t slot, uint32_t pos, int32_t token)
{
    uint64_t z = e->base.model.seed ^ 0x5e12e5e1a11ull;
    z += (uint64_t)slot * 0x9e3779b97f4a7c15ull;
    z ^= (uint64_t)pos << 20 ^ (uint64_t)(uint32_t)token << 40 ^ (uint64_t)(uint32_t)token;
    return (int32_t)(bench_mix64(z) % SERVE_VOCAB);
}

static int sim_thread_init(serve_engine *base)
{
    (void)base;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* prefill                                                                   */

static int sim_prefill_submit(serve_engine *base, ds_vctx_t v, const serve_segment *segs, uint32_t n)
{
    sim_engine *e = (sim_engine *)base;
    const serve_model *m = &base->model;
    if (!v || !segs || n < 1 || n > SERVE_MAX_BATCH) {
        fprintf(stderr, "serve_engine_sim: prefill_submit: bad arguments (%u segments)\n", n);
        return -1;
    }
    double ntok = 0, attn_flops = 0, kv_bytes = 0;
    uint32_t nlast = 0;
    for (uint32_t i = 0; i < n; i++) {
        const serve_segment *g = &segs[i];
        if (g->slot > m->max_batch || g->ntok == 0 || !g->tokens || g->start > m->max_ctx ||
            g->ntok > m->max_ctx - g->start) {
            fprintf(stderr, "serve_engine_sim: prefill_submit: bad segment %u (slot %u, start %u, %u tokens)\n", i,
                    g->slot, g->start, g->ntok);
            return -1;
        }
        ntok += g->ntok;
        /* causal: token j of the segment attends over start + j + 1 positions */
        double ctx_avg = g->start + (g->ntok + 1) / 2.0;
        attn_flops += 4.0 * g->ntok * ctx_avg * SERVE_HEAD_DIM * SERVE_HEADS;
        kv_bytes += (g->start + (double)g->ntok) * SIM_KV_BYTES_PER_POS;
        nlast += g->last ? 1 : 0;
    }
    if (ntok > m->chunk_tokens) {
        fprintf(stderr, "serve_engine_sim: prefill_submit: %.0f tokens > chunk of %u\n", ntok, m->chunk_tokens);
        return -1;
    }
    /* the results first: nothing later reads segs */
    e->prefill_count = 0;
    for (uint32_t i = 0; i < n; i++)
        if (segs[i].last) {
            const serve_segment *g = &segs[i];
            uint32_t p = g->start + g->ntok - 1;
            e->prefill_tokens[e->prefill_count++] = sim_token(e, g->slot, p, g->tokens[g->ntok - 1]);
        }

    double attn_c = 1e6 * attn_flops / SIM_MODEL.attn_flops, attn_m = 1e6 * kv_bytes / SIM_MODEL.mem_bw;
    double t_attn = floor_us(attn_c > attn_m ? attn_c : attn_m);
    uint64_t seq = e->prefill_seq++;
    if (launch_own(e, v, K_EMBED, embed_us(ntok), tag_of(seq, 0xffff)))
        return -1;
    for (uint32_t l = 0; l < m->layers; l++) {
        uint64_t t = tag_of(seq, l);
        if (launch_own(e, v, K_RMSNORM, rmsnorm_us(ntok), t) ||
            gemm_section(e, v, K_GEMM_QKV, gemm_us(ntok, SIM_QKV, SERVE_HIDDEN), t) ||
            launch_own(e, v, K_ROPE_KV, rope_us(ntok), t) || launch_own(e, v, K_ATTN_PREFILL, t_attn, t) ||
            gemm_section(e, v, K_GEMM_O, gemm_us(ntok, SERVE_HIDDEN, SERVE_HIDDEN), t) ||
            launch_own(e, v, K_RMSNORM, rmsnorm_us(ntok), t) ||
            gemm_section(e, v, K_GEMM_GATE_UP, gemm_us(ntok, 2.0 * SERVE_MLP, SERVE_HIDDEN), t) ||
            launch_own(e, v, K_SWIGLU, swiglu_us(ntok), t) ||
            gemm_section(e, v, K_GEMM_DOWN, gemm_us(ntok, SERVE_HIDDEN, SERVE_MLP), t))
            return -1;
    }
    if (nlast) {
        uint64_t t = tag_of(seq, 0xffff);
        if (launch_own(e, v, K_FINAL_NORM, rmsnorm_us(nlast), t) ||
            gemm_section(e, v, K_LM_HEAD, gemm_us(nlast, SERVE_VOCAB, SERVE_HIDDEN), t) ||
            launch_own(e, v, K_ARGMAX, argmax_us(nlast), t))
            return -1;
    }
    return 0;
}

static int sim_prefill_result(serve_engine *base, int32_t *tokens, uint32_t *count)
{
    sim_engine *e = (sim_engine *)base;
    if (!count || (e->prefill_count && !tokens)) {
        fprintf(stderr, "serve_engine_sim: prefill_result: NULL output\n");
        return -1;
    }
    if (e->prefill_count)
        memcpy(tokens, e->prefill_tokens, e->prefill_count * sizeof *tokens);
    *count = e->prefill_count;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* decode                                                                    */

/* The capture function of bucket cap->bucket's graph: one decode step of that
 * many requests, every kernel on the capture stream (own kernels included,
 * as the real engine captures them). */
static int capture_decode(CUstream s, void *user)
{
    const sim_capture *c = user;
    sim_engine *e = c->e;
    const serve_model *m = &e->base.model;
    double bs = c->bucket;
    double ctx = SIM_MODEL.decode_ctx < m->max_ctx ? SIM_MODEL.decode_ctx : m->max_ctx;
    uint64_t seq = c->bucket; /* a graph's arguments are fixed: tag by bucket */
    if (launch_on_stream(e, s, K_EMBED, embed_us(bs), tag_of(seq, 0xffff)))
        return 1;
    for (uint32_t l = 0; l < m->layers; l++) {
        uint64_t t = tag_of(seq, l);
        if (launch_on_stream(e, s, K_RMSNORM, rmsnorm_us(bs), t) ||
            launch_on_stream(e, s, K_GEMM_QKV, gemm_us(bs, SIM_QKV, SERVE_HIDDEN), t) ||
            launch_on_stream(e, s, K_ROPE_KV, rope_us(bs), t) ||
            launch_on_stream(e, s, K_ATTN_DECODE, attn_decode_us(bs, ctx), t) ||
            launch_on_stream(e, s, K_GEMM_O, gemm_us(bs, SERVE_HIDDEN, SERVE_HIDDEN), t) ||
            launch_on_stream(e, s, K_RMSNORM, rmsnorm_us(bs), t) ||
            launch_on_stream(e, s, K_GEMM_GATE_UP, gemm_us(bs, 2.0 * SERVE_MLP, SERVE_HIDDEN), t) ||
            launch_on_stream(e, s, K_SWIGLU, swiglu_us(bs), t) ||
            launch_on_stream(e, s, K_GEMM_DOWN, gemm_us(bs, SERVE_HIDDEN, SERVE_MLP), t))
            return 1;
    }
    uint64_t t = tag_of(seq, 0xffff);
    if (launch_on_stream(e, s, K_FINAL_NORM, rmsnorm_us(bs), t) ||
        launch_on_stream(e, s, K_LM_HEAD, gemm_us(bs, SERVE_VOCAB, SERVE_HIDDEN), t) ||
        launch_on_stream(e, s, K_ARGMAX, argmax_us(bs), t))
        return 1;
    return 0;
}

/* v's graph of bucket index bi, made at first use. */
static int decode_graph(sim_engine *e, ds_vctx_t v, int bi, ds_graph_t *out)
{
    pthread_mutex_lock(&e->mu);
    sim_vgraphs *vg = NULL;
    for (size_t i = 0; i < e->nvg; i++)
        if (e->vg[i].v == v)
            vg = &e->vg[i];
    if (!vg) {
        if (e->nvg == e->capvg) {
            size_t cap = e->capvg ? 2 * e->capvg : 4;
            sim_vgraphs *p = realloc(e->vg, cap * sizeof *p);
            if (!p) {
                pthread_mutex_unlock(&e->mu);
                fprintf(stderr, "serve_engine_sim: out of memory\n");
                return -1;
            }
            e->vg = p;
            e->capvg = cap;
        }
        vg = &e->vg[e->nvg++];
        memset(vg, 0, sizeof *vg);
        vg->v = v;
    }
    ds_graph_t g = vg->g[bi];
    pthread_mutex_unlock(&e->mu);
    if (g) {
        *out = g;
        return 0;
    }

    char name[32];
    snprintf(name, sizeof name, "serve_decode_bs%u", e->cap[bi].bucket);
    ds_graph_attr a = DS_GRAPH_ATTR_INIT;
    a.name = name;
    /* Every pCtx at once: the warm-up makes each bucket's graph before the
     * window opens, so no run pays an instantiation inside it whatever the
     * policy moves the vCtx to. */
    a.flags = DS_GRAPH_EAGER;
    BENCH_DS_CHECK(ds_graph_create(v, capture_decode, &e->cap[bi], &a, &g));
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->nvg; i++)
        if (e->vg[i].v == v)
            e->vg[i].g[bi] = g; /* the entry may have moved (realloc), not gone: only v's thread releases v */
    pthread_mutex_unlock(&e->mu);
    *out = g;
    return 0;
}

static int sim_decode_submit(serve_engine *base, ds_vctx_t v, uint32_t bs, const uint32_t *slots,
                             const int32_t *tokens, const uint32_t *pos)
{
    sim_engine *e = (sim_engine *)base;
    const serve_model *m = &base->model;
    if (!v || bs < 1 || bs > m->max_batch || !slots || !tokens || !pos) {
        fprintf(stderr, "serve_engine_sim: decode_submit: bad arguments (bs %u, max batch %u)\n", bs, m->max_batch);
        return -1;
    }
    for (uint32_t i = 0; i < bs; i++)
        if (slots[i] > m->max_batch || pos[i] >= m->max_ctx) {
            fprintf(stderr, "serve_engine_sim: decode_submit: request %u: slot %u, position %u (max ctx %u)\n", i,
                    slots[i], pos[i], m->max_ctx);
            return -1;
        }
    int bi = (int)serve_bucket_index(bs, m->max_batch);
    ds_graph_t g;
    if (decode_graph(e, v, bi, &g))
        return -1;
    for (uint32_t i = 0; i < bs; i++)
        e->decode_tokens[i] = sim_token(e, slots[i], pos[i], tokens[i]);
    e->decode_bs = bs;
    e->decode_seq++;
    BENCH_DS_CHECK(ds_graph_launch(v, g));
    return 0;
}

static int sim_decode_result(serve_engine *base, int32_t *tokens)
{
    sim_engine *e = (sim_engine *)base;
    if (!tokens) {
        fprintf(stderr, "serve_engine_sim: decode_result: NULL output\n");
        return -1;
    }
    memcpy(tokens, e->decode_tokens, e->decode_bs * sizeof *tokens);
    return 0;
}

/* ------------------------------------------------------------------------ */

static int sim_vctx_release(serve_engine *base, ds_vctx_t v)
{
    sim_engine *e = (sim_engine *)base;
    sim_vgraphs vg = {0};
    int found = 0;
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->nvg; i++)
        if (e->vg[i].v == v) {
            vg = e->vg[i];
            e->vg[i] = e->vg[--e->nvg];
            found = 1;
            break;
        }
    pthread_mutex_unlock(&e->mu);
    if (!found)
        return 0;
    int rc = 0;
    for (uint32_t i = 0; i < SERVE_MAX_BUCKETS; i++) {
        if (!vg.g[i])
            continue;
        ds_status st = ds_graph_destroy(vg.g[i]);
        if (st == DS_ERR_BUSY && ds_vctx_synchronize(v) == DS_SUCCESS)
            st = ds_graph_destroy(vg.g[i]);
        if (st != DS_SUCCESS) {
            /* ds_vctx_destroy() destroys what is left */
            fprintf(stderr, "serve_engine_sim: ds_graph_destroy (bucket %u) -> %s: %s\n", e->cap[i].bucket,
                    ds_status_name(st), ds_last_error_message());
            rc = -1;
        }
    }
    return rc;
}

static void sim_destroy(serve_engine *base)
{
    sim_engine *e = (sim_engine *)base;
    if (!e)
        return;
    /* graphs not released go with their vCtxs; kernels with the runtime */
    free(e->vg);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static const serve_ops SIM_OPS = {
    "simulated",
    sim_thread_init,
    sim_prefill_submit,
    sim_prefill_result,
    sim_decode_submit,
    sim_decode_result,
    sim_vctx_release,
    sim_destroy,
};

int serve_engine_sim_create(ds_runtime_t rt, const serve_model *m, serve_engine **out)
{
    if (!rt || !m || !out || m->layers < 1 || m->layers > 1024 || m->max_batch < 1 ||
        m->max_batch > SERVE_MAX_BATCH || m->max_ctx < 1 || m->chunk_tokens < 1) {
        fprintf(stderr, "serve_engine_sim_create: bad model (layers %u, max batch %u, max ctx %u, chunk %u)\n",
                m ? m->layers : 0, m ? m->max_batch : 0, m ? m->max_ctx : 0, m ? m->chunk_tokens : 0);
        return -1;
    }
    sim_engine *e = calloc(1, sizeof *e);
    if (!e) {
        fprintf(stderr, "serve_engine_sim_create: out of memory\n");
        return -1;
    }
    e->base.ops = &SIM_OPS;
    e->base.model = *m;
    e->rt = rt;
    pthread_mutex_init(&e->mu, NULL);
    for (uint32_t i = 0; i < serve_bucket_count(m->max_batch); i++)
        e->cap[i] = (sim_capture){e, serve_bucket_at(i, m->max_batch)};
    const uint32_t param_size = sizeof(uint64_t);
    for (int k = 0; k < K_COUNT; k++)
        for (int i = 0; i < SIM_NBLOCK_US; i++)
            if (bench_sim_kernel(rt, SIM_KINDS[k].name, exp2(i / 8.0), 1, 1, &param_size, &e->fn[k][i])) {
                sim_destroy(&e->base);
                return -1;
            }
    *out = &e->base;
    return 0;
}
