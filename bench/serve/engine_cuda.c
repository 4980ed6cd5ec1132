/*
 * CUDA back end of the serve engine (engine.h): a Llama-3-8B-shaped decoder in
 * bf16 with random weights. cuBLAS bf16 GEMMs (fp32 compute) in sections, one
 * section per GEMM, so the runtime can move the vCtx between any two; this
 * example's own kernels (kernels.cu) through ds_launch; each decode step one
 * ds_graph_launch of the vCtx's graph for its batch-size bucket.
 *
 * Per layer: RMSNorm, QKV GEMM (one fused [6144 x 4096] weight), RoPE + K/V
 * written into the KV cache, attention (prefill: tensor-core flash attention
 * over the cache; decode: flash-decoding splits, then their merge), O GEMM
 * added into the residual (beta = 1), RMSNorm, gate|up GEMM (one fused [2 x
 * 14336 x 4096] weight), SwiGLU, down GEMM added into the residual. Then the
 * final RMSNorm, the LM head (fp32 logits) and argmax, for the last token of
 * each finished prompt (prefill) or every row of the bucket (decode).
 *
 * Inputs and outputs: each side (prefill, decode) has pinned host buffers
 * mapped into the device. The host writes a step's inputs there; the step's
 * first kernel (serve_stage_i32) copies them to device memory, and argmax
 * writes the output tokens straight into mapped memory, which the host reads
 * after the caller synchronized the vCtx. So a decode graph holds kernel and
 * cuBLAS nodes only (no memcpy nodes in a green-context capture), and no step
 * waits for the runtime's copy thread. Therefore a side's next submit must
 * come after the caller synchronized its previous one (as *_result requires).
 *
 * Linking, contexts, module: as bench/colocate/workload_cuda.c (cudart and
 * cuBLAS only; driver entry points through cudart; the fatbin loaded in the
 * primary context).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cublas_v2.h>

#include "bench.h"
#include "blas.h"
#include "cuda_entry.h"
#include "engine.h"

#define CUDA_CHECK(call) BENCH_CUDA_CHECK(call)
#define CUBLAS_CHECK(call) BENCH_CUBLAS_CHECK(call)
#define CU_CHECK(e, call) BENCH_CU_CHECK((e)->cu, call)

/* Embedded by tools/embed-fatbin.py from kernels.cu (meson.build). */
extern const unsigned char serve_kernels_fatbin[];
extern const size_t serve_kernels_fatbin_size;

/* Shapes of kernels.cu (keep in step with its #defines). */
#define QKV_DIM ((SERVE_HEADS + 2 * SERVE_KV_HEADS) * SERVE_HEAD_DIM) /* 6144 */
#define DECODE_SPLITS 16      /* kernels.cu DECODE_SPLITS */
#define DECODE_THREADS 128
#define PREFILL_ROWS 64       /* query tokens per prefill-attention tile */
#define NORM_THREADS 512
#define ARGMAX_THREADS 1024
#define STAGE_BLOCKS 64
#define STAGE_THREADS 256

/* vCtxs holding decode graphs at once (the benchmark needs two). */
#define MAX_GRAPH_VCTX 4

typedef struct kernels {
    CUfunction fill, stage, embed, rmsnorm, swiglu, argmax, rope_kv, prefill_attn, decode_attn, decode_combine;
} kernels;

typedef struct layer_weights {
    void *attn_norm; /* [4096] */
    void *wqkv;      /* [6144][4096] */
    void *wo;        /* [4096][4096] */
    void *mlp_norm;  /* [4096] */
    void *wgu;       /* [2 * 14336][4096]: gate rows, then up rows */
    void *wdown;     /* [4096][14336] */
} layer_weights;

/* Activations of one pass over `rows` tokens (sized for the side's most). */
typedef struct acts {
    void *x;    /* [rows][4096] residual stream */
    void *xn;   /* [rows][4096] normalized */
    void *qkv;  /* [rows][6144] */
    void *attn; /* [rows][4096] attention output */
    void *gu;   /* [rows][2 * 14336] */
    void *act;  /* [rows][14336] */
} acts;

/* Pinned host memory mapped into the device: host and device addresses. */
typedef struct mapped {
    int32_t *host;
    int32_t *dev;
} mapped;

typedef struct prefill_side {
    bench_blas blas;
    acts a;
    uint32_t max_tiles;
    void *xl;     /* [SERVE_MAX_BATCH][4096]: normalized rows of the last tokens */
    void *logits; /* [SERVE_MAX_BATCH][vocab] fp32 */
    int32_t *meta; /* device copy of the step's metadata (layout in prefill_submit) */
    mapped in;    /* the metadata as the host writes it */
    mapped out;   /* [SERVE_MAX_BATCH] first output tokens */
    uint32_t nlast;
} prefill_side;

typedef struct decode_side {
    bench_blas blas;
    acts a;
    float *part_o;  /* [max_batch][32][DECODE_SPLITS][128] */
    float *part_ml; /* [max_batch][32][DECODE_SPLITS][2] */
    void *logits;   /* [max_batch][vocab] fp32 */
    int32_t *inputs; /* device: slots, tokens, positions, max_batch each */
    mapped in;      /* the same as the host writes them */
    mapped out;     /* [max_batch] next tokens */
    uint32_t last_bs;
} decode_side;

typedef struct serve_engine_cuda serve_engine_cuda;

/* What a decode graph's capture function is handed. */
typedef struct graph_capture {
    serve_engine_cuda *e;
    uint32_t bucket;
} graph_capture;

/* The decode graphs one vCtx made, by bucket index. */
typedef struct vctx_graphs {
    ds_vctx_t v; /* NULL: free entry */
    ds_graph_t g[SERVE_MAX_BUCKETS];
    graph_capture cap[SERVE_MAX_BUCKETS];
} vctx_graphs;

struct serve_engine_cuda {
    serve_engine base;
    int ordinal;
    bench_driver_api cu;
    CUmodule module;
    kernels fn;
    layer_weights *layers;
    void *embedding, *final_norm, *lm_head;
    void *kcache, *vcache;   /* [layers][max_batch + 1][8][max_ctx][128] each */
    size_t kv_layer_elems;   /* elements of one layer's k (or v) cache */
    prefill_side pf;
    decode_side dc;
    pthread_mutex_t graphs_mu; /* the table below (decode and release may be on different threads) */
    int graphs_mu_ok;
    vctx_graphs graphs[MAX_GRAPH_VCTX];
};

/* ------------------------------------------------------------------------ */
/* module, memory                                                            */

static int get_function(serve_engine_cuda *e, const char *name, CUfunction *f)
{
    CU_CHECK(e, e->cu.cuModuleGetFunction(f, e->module, name));
    return 0;
}

static int load_kernels(serve_engine_cuda *e)
{
    CU_CHECK(e, e->cu.cuModuleLoadData(&e->module, serve_kernels_fatbin));
    kernels *k = &e->fn;
    if (get_function(e, "serve_fill_bf16", &k->fill) || get_function(e, "serve_stage_i32", &k->stage) ||
        get_function(e, "serve_embed", &k->embed) || get_function(e, "serve_rmsnorm", &k->rmsnorm) ||
        get_function(e, "serve_swiglu", &k->swiglu) || get_function(e, "serve_argmax", &k->argmax) ||
        get_function(e, "serve_rope_kv", &k->rope_kv) ||
        get_function(e, "serve_prefill_attention", &k->prefill_attn) ||
        get_function(e, "serve_decode_attention", &k->decode_attn) ||
        get_function(e, "serve_decode_combine", &k->decode_combine))
        return -1;
    return 0;
}

static int alloc(void **p, size_t bytes)
{
    CUDA_CHECK(cudaMalloc(p, bytes));
    return 0;
}

static int alloc_mapped(mapped *m, size_t count)
{
    void *h = NULL, *d = NULL;
    CUDA_CHECK(cudaHostAlloc(&h, count * sizeof(int32_t), cudaHostAllocMapped | cudaHostAllocPortable));
    m->host = h;
    memset(h, 0, count * sizeof(int32_t));
    CUDA_CHECK(cudaHostGetDevicePointer(&d, h, 0));
    m->dev = d;
    return 0;
}

static const size_t H = SERVE_HIDDEN;

static int acts_alloc(acts *a, size_t rows)
{
    return alloc(&a->x, rows * H * 2) || alloc(&a->xn, rows * H * 2) || alloc(&a->qkv, rows * QKV_DIM * 2) ||
           alloc(&a->attn, rows * H * 2) || alloc(&a->gu, rows * 2 * SERVE_MLP * 2) ||
           alloc(&a->act, rows * SERVE_MLP * 2);
}

/* One seed per weight buffer from the model's seed. */
static uint64_t seed_of(uint64_t seed, uint64_t id) { return bench_mix64(seed * 0x100000001b3ull + id); }

/* Set-up only (not through a vCtx): the legacy stream of the primary context. */
static int fill(serve_engine_cuda *e, void *p, size_t n, uint64_t id, float scale, float offset)
{
    unsigned long long count = n, s = seed_of(e->base.model.seed, id);
    void *params[] = {&p, &count, &s, &scale, &offset};
    CU_CHECK(e, e->cu.cuLaunchKernel(e->fn.fill, 1024, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    return 0;
}

/* Weights uniform in +-sqrt(3 / fan_in) (variance 1 / fan_in), so every
 * projection keeps its input's scale and activations stay of order 1 through
 * the layers; norm gains 1 +- 0.1; embeddings uniform in +-1. */
static int weights_init(serve_engine_cuda *e)
{
    const serve_model *m = &e->base.model;
    const float s_h = sqrtf(3.f / (float)SERVE_HIDDEN), s_mlp = sqrtf(3.f / (float)SERVE_MLP);
    e->layers = calloc(m->layers, sizeof *e->layers);
    if (!e->layers) {
        fprintf(stderr, "serve_engine_cuda_create: out of memory\n");
        return -1;
    }
    for (uint32_t l = 0; l < m->layers; l++) {
        layer_weights *w = &e->layers[l];
        const uint64_t id = 16 + 8 * (uint64_t)l;
        if (alloc(&w->attn_norm, H * 2) || alloc(&w->wqkv, QKV_DIM * H * 2) || alloc(&w->wo, H * H * 2) ||
            alloc(&w->mlp_norm, H * 2) || alloc(&w->wgu, 2 * SERVE_MLP * H * 2) ||
            alloc(&w->wdown, H * SERVE_MLP * 2))
            return -1;
        if (fill(e, w->attn_norm, H, id, 0.1f, 1.f) || fill(e, w->wqkv, QKV_DIM * H, id + 1, s_h, 0.f) ||
            fill(e, w->wo, H * H, id + 2, s_h, 0.f) || fill(e, w->mlp_norm, H, id + 3, 0.1f, 1.f) ||
            fill(e, w->wgu, 2 * SERVE_MLP * H, id + 4, s_h, 0.f) ||
            fill(e, w->wdown, H * SERVE_MLP, id + 5, s_mlp, 0.f))
            return -1;
    }
    const size_t vh = (size_t)SERVE_VOCAB * H;
    if (alloc(&e->embedding, vh * 2) || alloc(&e->final_norm, H * 2) || alloc(&e->lm_head, vh * 2))
        return -1;
    if (fill(e, e->embedding, vh, 1, 1.f, 0.f) || fill(e, e->final_norm, H, 2, 0.1f, 1.f) ||
        fill(e, e->lm_head, vh, 3, s_h, 0.f))
        return -1;
    return 0;
}

static int buffers_alloc(serve_engine_cuda *e)
{
    const serve_model *m = &e->base.model;
    /* KV cache, zeroed: positions not yet written read as zeros, never NaN */
    e->kv_layer_elems = (size_t)(m->max_batch + 1) * SERVE_KV_HEADS * m->max_ctx * SERVE_HEAD_DIM;
    const size_t kv_bytes = e->kv_layer_elems * m->layers * 2;
    if (alloc(&e->kcache, kv_bytes) || alloc(&e->vcache, kv_bytes))
        return -1;
    CUDA_CHECK(cudaMemset(e->kcache, 0, kv_bytes));
    CUDA_CHECK(cudaMemset(e->vcache, 0, kv_bytes));

    prefill_side *p = &e->pf;
    const size_t T = m->chunk_tokens, V = SERVE_VOCAB;
    /* a segment of n tokens has ceil(n / 64) tiles: at most one partial per segment */
    p->max_tiles = (uint32_t)(T / PREFILL_ROWS + SERVE_MAX_BATCH);
    const size_t meta = 3 * T + SERVE_MAX_BATCH + 4 + 4 * (size_t)p->max_tiles;
    if (bench_blas_create(&p->blas) || acts_alloc(&p->a, T) || alloc(&p->xl, SERVE_MAX_BATCH * H * 2) ||
        alloc(&p->logits, SERVE_MAX_BATCH * V * 4) || alloc((void **)&p->meta, meta * 4) ||
        alloc_mapped(&p->in, meta) || alloc_mapped(&p->out, SERVE_MAX_BATCH))
        return -1;

    decode_side *d = &e->dc;
    const size_t B = m->max_batch;
    const size_t parts = B * SERVE_HEADS * DECODE_SPLITS;
    if (bench_blas_create(&d->blas) || acts_alloc(&d->a, B) || alloc((void **)&d->part_o, parts * SERVE_HEAD_DIM * 4) ||
        alloc((void **)&d->part_ml, parts * 2 * 4) || alloc(&d->logits, B * V * 4) ||
        alloc((void **)&d->inputs, 3 * B * 4) || alloc_mapped(&d->in, 3 * B) || alloc_mapped(&d->out, B))
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* launches and GEMMs                                                        */

/* Where a pass's work goes: through ds_launch and sections on a vCtx (prefill),
 * or straight onto a stream being captured (a decode graph). */
typedef struct target {
    serve_engine_cuda *e;
    ds_vctx_t v;  /* non-NULL: ds_launch, one section per GEMM */
    CUstream s;   /* v NULL: the capture stream */
    bench_blas *blas;
} target;

static int launch(const target *t, CUfunction f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t threads,
                  void **params)
{
    if (t->v) {
        ds_dim3 g = {gx, gy, gz}, b = {threads, 1, 1};
        BENCH_DS_CHECK(ds_launch(t->v, f, g, b, 0, params, NULL));
    } else {
        CU_CHECK(t->e, t->e->cu.cuLaunchKernel(f, gx, gy, gz, threads, 1, 1, 0, t->s, params, NULL));
    }
    return 0;
}

/* A linear layer, row-major: out[n][m] = in[n][k] . weight[m][k]^T (+ out when
 * beta is 1: the residual add), bf16 in, fp32 accumulation, out_type out.
 * Column-major cuBLAS sees weight as k x m (hence OP_T), in as k x n and out
 * as m x n. On a vCtx, one section of its own. */
static int linear(const target *t, int m, int n, int k, const void *weight, const void *in, void *out,
                  cudaDataType out_type, float beta)
{
    if (!t->v)
        return bench_blas_linear(t->blas, m, n, k, weight, in, out, out_type, beta);
    CUstream s;
    BENCH_DS_CHECK(ds_vctx_acquire_stream(t->v, &s));
    int rc = bench_blas_bind(t->blas, s) || bench_blas_linear(t->blas, m, n, k, weight, in, out, out_type, beta);
    BENCH_DS_CHECK(ds_vctx_release_stream(t->v));
    return rc;
}

/* Attention of a pass: prefill tiles or decode splits. */
typedef struct attention {
    const int32_t *tiles; /* prefill: int4 tiles (device), else NULL */
    uint32_t ntiles;
    const int32_t *slots, *pos; /* decode: per row (device) */
    float *part_o, *part_ml;
} attention;

/* Every layer over `rows` tokens in a: x in, x out. tok_slot/tok_pos: each
 * row's KV slot and position (device). */
static int layers_forward(const target *t, const acts *a, uint32_t rows, const int32_t *tok_slot,
                          const int32_t *tok_pos, const attention *at)
{
    serve_engine_cuda *e = t->e;
    const serve_model *m = &e->base.model;
    int max_ctx = (int)m->max_ctx;
    float eps = SERVE_RMS_EPS, theta = SERVE_ROPE_THETA;
    const void *no_rows = NULL;
    const int n = (int)rows;
    for (uint32_t l = 0; l < m->layers; l++) {
        const layer_weights *w = &e->layers[l];
        void *kc = (char *)e->kcache + e->kv_layer_elems * 2 * l;
        void *vc = (char *)e->vcache + e->kv_layer_elems * 2 * l;
        void *norm1[] = {(void *)&a->x, (void *)&no_rows, (void *)&w->attn_norm, (void *)&a->xn, &eps};
        void *rope[] = {(void *)&a->qkv, (void *)&tok_slot, (void *)&tok_pos, &kc, &vc, &max_ctx, &theta};
        void *norm2[] = {(void *)&a->x, (void *)&no_rows, (void *)&w->mlp_norm, (void *)&a->xn, &eps};
        void *swiglu[] = {(void *)&a->gu, (void *)&a->act};
        if (launch(t, e->fn.rmsnorm, rows, 1, 1, NORM_THREADS, norm1) ||
            linear(t, QKV_DIM, n, SERVE_HIDDEN, w->wqkv, a->xn, a->qkv, CUDA_R_16BF, 0.f) ||
            launch(t, e->fn.rope_kv, rows, 1, 1, 128, rope))
            return -1;
        if (at->tiles) {
            void *pa[] = {(void *)&a->qkv, (void *)&at->tiles, &kc, &vc, (void *)&a->attn, &max_ctx};
            if (launch(t, e->fn.prefill_attn, at->ntiles, SERVE_HEADS, 1, 128, pa))
                return -1;
        } else {
            void *da[] = {(void *)&a->qkv, (void *)&at->slots, (void *)&at->pos, &kc, &vc,
                          (void *)&at->part_o, (void *)&at->part_ml, &max_ctx};
            void *dc[] = {(void *)&at->part_o, (void *)&at->part_ml, (void *)&at->pos, (void *)&a->attn};
            if (launch(t, e->fn.decode_attn, DECODE_SPLITS, SERVE_KV_HEADS, rows, DECODE_THREADS, da) ||
                launch(t, e->fn.decode_combine, SERVE_HEADS, rows, 1, SERVE_HEAD_DIM, dc))
                return -1;
        }
        if (linear(t, SERVE_HIDDEN, n, SERVE_HIDDEN, w->wo, a->attn, a->x, CUDA_R_16BF, 1.f) ||
            launch(t, e->fn.rmsnorm, rows, 1, 1, NORM_THREADS, norm2) ||
            linear(t, 2 * SERVE_MLP, n, SERVE_HIDDEN, w->wgu, a->xn, a->gu, CUDA_R_16BF, 0.f) ||
            launch(t, e->fn.swiglu, SERVE_MLP / 8 / 256, rows, 1, 256, swiglu) ||
            linear(t, SERVE_HIDDEN, n, SERVE_MLP, w->wdown, a->act, a->x, CUDA_R_16BF, 1.f))
            return -1;
    }
    return 0;
}

/* Final norm of `rows` rows (gathered through row_index when not NULL), LM
 * head, argmax into out (mapped host memory). */
static int head_forward(const target *t, const void *x, const int32_t *row_index, void *xn, void *logits,
                        uint32_t rows, int32_t *out)
{
    serve_engine_cuda *e = t->e;
    float eps = SERVE_RMS_EPS;
    int vocab = SERVE_VOCAB;
    void *norm[] = {(void *)&x, (void *)&row_index, (void *)&e->final_norm, &xn, &eps};
    void *argmax[] = {&logits, (void *)&out, &vocab};
    if (launch(t, e->fn.rmsnorm, rows, 1, 1, NORM_THREADS, norm) ||
        linear(t, SERVE_VOCAB, (int)rows, SERVE_HIDDEN, e->lm_head, xn, logits, CUDA_R_32F, 0.f) ||
        launch(t, e->fn.argmax, rows, 1, 1, ARGMAX_THREADS, argmax))
        return -1;
    return 0;
}

static int stage(const target *t, int32_t *dst, const int32_t *src, uint32_t count)
{
    int n = (int)count;
    void *params[] = {&dst, (void *)&src, &n};
    return launch(t, t->e->fn.stage, STAGE_BLOCKS, 1, 1, STAGE_THREADS, params);
}

/* ------------------------------------------------------------------------ */
/* prefill                                                                   */

static int check_token(int32_t tok, const char *what)
{
    if (tok < 0 || tok >= SERVE_VOCAB) {
        fprintf(stderr, "%s: token id %d outside the vocabulary\n", what, (int)tok);
        return -1;
    }
    return 0;
}

/* Tiles with more keys first (longest-processing-time order); ties by token. */
static int tile_cmp(const void *pa, const void *pb)
{
    const int32_t *a = pa, *b = pb;
    const int32_t ka = a[2] + a[1], kb = b[2] + b[1];
    if (ka != kb)
        return ka > kb ? -1 : 1;
    return (a[0] > b[0]) - (a[0] < b[0]);
}

/* Metadata, in the order staged (ints): tokens[T], tok_slot[T], tok_pos[T],
 * last_rows[nlast], padding to 4, tiles[ntiles][4] = {first token, rows,
 * position of the first row, slot}. */
static int cuda_prefill_submit(serve_engine *base, ds_vctx_t v, const serve_segment *segs, uint32_t n)
{
    serve_engine_cuda *e = (serve_engine_cuda *)base;
    const serve_model *m = &base->model;
    prefill_side *p = &e->pf;
    if (n < 1 || n > SERVE_MAX_BATCH || !segs) {
        fprintf(stderr, "prefill_submit: %u segments (1 to %d)\n", n, SERVE_MAX_BATCH);
        return -1;
    }
    uint64_t T = 0;
    for (uint32_t i = 0; i < n; i++) {
        const serve_segment *s = &segs[i];
        if (s->slot > m->max_batch || s->ntok < 1 || (uint64_t)s->start + s->ntok > m->max_ctx || !s->tokens) {
            fprintf(stderr, "prefill_submit: segment %u (slot %u, start %u, %u tokens) outside the model's limits\n",
                    i, s->slot, s->start, s->ntok);
            return -1;
        }
        T += s->ntok;
    }
    if (T > m->chunk_tokens) {
        fprintf(stderr, "prefill_submit: %llu tokens, the chunk holds %u\n", (unsigned long long)T,
                m->chunk_tokens);
        return -1;
    }
    int32_t *h = p->in.host;
    int32_t *tok = h, *slot = h + T, *pos = h + 2 * T, *last = h + 3 * T;
    uint32_t t = 0, nlast = 0;
    for (uint32_t i = 0; i < n; i++) {
        const serve_segment *s = &segs[i];
        for (uint32_t j = 0; j < s->ntok; j++, t++) {
            if (check_token(s->tokens[j], "prefill_submit"))
                return -1;
            tok[t] = s->tokens[j];
            slot[t] = (int32_t)s->slot;
            pos[t] = (int32_t)(s->start + j);
        }
        if (s->last)
            last[nlast++] = (int32_t)(t - 1);
    }
    const size_t tiles_off = (3 * T + nlast + 3) / 4 * 4;
    int32_t *tiles = h + tiles_off;
    uint32_t ntiles = 0;
    for (uint32_t i = 0, first = 0; i < n; first += segs[i].ntok, i++)
        for (uint32_t j = 0; j < segs[i].ntok; j += PREFILL_ROWS, ntiles++) {
            int32_t *tl = tiles + 4 * ntiles;
            tl[0] = (int32_t)(first + j);
            tl[1] = (int32_t)(segs[i].ntok - j < PREFILL_ROWS ? segs[i].ntok - j : PREFILL_ROWS);
            tl[2] = (int32_t)(segs[i].start + j);
            tl[3] = (int32_t)segs[i].slot;
        }
    qsort(tiles, ntiles, 4 * sizeof(int32_t), tile_cmp);

    target tg = {e, v, NULL, &p->blas};
    const int32_t *d = p->meta;
    attention at = {.tiles = d + tiles_off, .ntiles = ntiles};
    const int32_t *dtok = d, *dslot = d + T, *dpos = d + 2 * T, *dlast = d + 3 * T;
    void *embed[] = {&e->embedding, (void *)&dtok, &p->a.x};
    p->nlast = 0;
    if (stage(&tg, p->meta, p->in.dev, (uint32_t)(tiles_off + 4 * ntiles)) ||
        launch(&tg, e->fn.embed, (uint32_t)T, 1, 1, 128, embed) ||
        layers_forward(&tg, &p->a, (uint32_t)T, dslot, dpos, &at))
        return -1;
    if (nlast && head_forward(&tg, p->a.x, dlast, p->xl, p->logits, nlast, p->out.dev))
        return -1;
    p->nlast = nlast;
    return 0;
}

static int cuda_prefill_result(serve_engine *base, int32_t *tokens, uint32_t *count)
{
    serve_engine_cuda *e = (serve_engine_cuda *)base;
    const volatile int32_t *out = e->pf.out.host;
    for (uint32_t i = 0; i < e->pf.nlast; i++)
        tokens[i] = out[i];
    *count = e->pf.nlast;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* decode                                                                    */

/* The capture function of the decode graph of one bucket: the whole step on
 * the capture stream, which is in the green context of the pCtx being
 * instantiated. Same work every call (the runtime checks). */
static int decode_capture(CUstream s, void *user)
{
    const graph_capture *c = user;
    serve_engine_cuda *e = c->e;
    decode_side *d = &e->dc;
    const uint32_t B = c->bucket, mb = e->base.model.max_batch;
    target tg = {e, NULL, s, &d->blas};
    if (bench_blas_bind(&d->blas, s))
        return -1;
    const int32_t *slots = d->inputs, *tokens = d->inputs + mb, *pos = d->inputs + 2 * mb;
    attention at = {.slots = slots, .pos = pos, .part_o = d->part_o, .part_ml = d->part_ml};
    void *embed[] = {&e->embedding, (void *)&tokens, &d->a.x};
    if (stage(&tg, d->inputs, d->in.dev, 3 * mb) || launch(&tg, e->fn.embed, B, 1, 1, 128, embed) ||
        layers_forward(&tg, &d->a, B, slots, pos, &at) ||
        head_forward(&tg, d->a.x, NULL, d->a.xn, d->logits, B, d->out.dev))
        return -1;
    return 0;
}

/* The graph of (v, bucket index bi), made at first use. */
static int decode_graph(serve_engine_cuda *e, ds_vctx_t v, int bi, ds_graph_t *out)
{
    pthread_mutex_lock(&e->graphs_mu);
    vctx_graphs *slot = NULL, *free_slot = NULL;
    for (int i = 0; i < MAX_GRAPH_VCTX; i++) {
        if (e->graphs[i].v == v)
            slot = &e->graphs[i];
        else if (!e->graphs[i].v && !free_slot)
            free_slot = &e->graphs[i];
    }
    if (!slot && free_slot) {
        slot = free_slot;
        memset(slot, 0, sizeof *slot);
        slot->v = v;
    }
    pthread_mutex_unlock(&e->graphs_mu);
    if (!slot) {
        fprintf(stderr, "decode_submit: %d vCtxs already hold decode graphs (vctx_release frees them)\n",
                MAX_GRAPH_VCTX);
        return -1;
    }
    if (!slot->g[bi]) {
        slot->cap[bi] = (graph_capture){e, serve_bucket_at(bi, e->base.model.max_batch)};
        char name[32];
        snprintf(name, sizeof name, "decode_b%u", slot->cap[bi].bucket);
        ds_graph_attr a = DS_GRAPH_ATTR_INIT;
        a.name = name;
        /* Every pCtx at once: the serve loop's warm-up makes each bucket's
         * graph before the window opens, so no run pays an instantiation
         * inside it wherever the policy moves the vCtx. */
        a.flags = DS_GRAPH_EAGER;
        BENCH_DS_CHECK(ds_graph_create(v, decode_capture, &slot->cap[bi], &a, &slot->g[bi]));
    }
    *out = slot->g[bi];
    return 0;
}

static int cuda_decode_submit(serve_engine *base, ds_vctx_t v, uint32_t bs, const uint32_t *slots,
                              const int32_t *tokens, const uint32_t *pos)
{
    serve_engine_cuda *e = (serve_engine_cuda *)base;
    const serve_model *m = &base->model;
    decode_side *d = &e->dc;
    if (bs < 1 || bs > m->max_batch) {
        fprintf(stderr, "decode_submit: batch %u outside 1-%u\n", bs, m->max_batch);
        return -1;
    }
    const uint32_t B = serve_bucket(bs, m->max_batch), mb = m->max_batch;
    const uint32_t bi = serve_bucket_index(bs, mb);
    int32_t *in = d->in.host;
    for (uint32_t i = 0; i < B; i++) {
        if (i < bs) {
            if (slots[i] > mb || pos[i] >= m->max_ctx) {
                fprintf(stderr, "decode_submit: request %u: slot %u, position %u outside the model's limits\n", i,
                        slots[i], pos[i]);
                return -1;
            }
            if (check_token(tokens[i], "decode_submit"))
                return -1;
        }
        /* pad rows: the scratch slot, position 0, token 0 */
        in[i] = i < bs ? (int32_t)slots[i] : (int32_t)mb;
        in[mb + i] = i < bs ? tokens[i] : 0;
        in[2 * mb + i] = i < bs ? (int32_t)pos[i] : 0;
    }
    ds_graph_t g;
    if (decode_graph(e, v, bi, &g))
        return -1;
    d->last_bs = 0;
    BENCH_DS_CHECK(ds_graph_launch(v, g));
    d->last_bs = bs;
    return 0;
}

static int cuda_decode_result(serve_engine *base, int32_t *tokens)
{
    serve_engine_cuda *e = (serve_engine_cuda *)base;
    const volatile int32_t *out = e->dc.out.host;
    for (uint32_t i = 0; i < e->dc.last_bs; i++)
        tokens[i] = out[i];
    return 0;
}

/* ------------------------------------------------------------------------ */
/* life cycle                                                                */

static int cuda_vctx_release(serve_engine *base, ds_vctx_t v)
{
    serve_engine_cuda *e = (serve_engine_cuda *)base;
    int rc = 0;
    pthread_mutex_lock(&e->graphs_mu);
    for (int i = 0; i < MAX_GRAPH_VCTX; i++) {
        vctx_graphs *s = &e->graphs[i];
        if (s->v != v)
            continue;
        for (int b = 0; b < SERVE_MAX_BUCKETS; b++)
            if (s->g[b]) {
                ds_status st = ds_graph_destroy(s->g[b]);
                if (st != DS_SUCCESS) {
                    fprintf(stderr, "vctx_release: ds_graph_destroy -> %s: %s\n", ds_status_name(st),
                            ds_last_error_message());
                    rc = -1;
                }
            }
        memset(s, 0, sizeof *s);
    }
    pthread_mutex_unlock(&e->graphs_mu);
    return rc;
}

static int cuda_thread_init(serve_engine *base)
{
    serve_engine_cuda *e = (serve_engine_cuda *)base;
    CUDA_CHECK(cudaSetDevice(e->ordinal));
    return 0;
}

static void free_all(void **ptrs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ptrs[i])
            cudaFree(ptrs[i]);
}

static void acts_free(acts *a)
{
    void *all[] = {a->x, a->xn, a->qkv, a->attn, a->gu, a->act};
    free_all(all, sizeof all / sizeof all[0]);
}

static void mapped_free(mapped *m)
{
    if (m->host)
        cudaFreeHost(m->host);
}

/* Graphs still in the table are dropped, not destroyed: call vctx_release for
 * every vCtx first (ds_vctx_destroy destroys what a vCtx still has). */
static void cuda_destroy(serve_engine *base)
{
    serve_engine_cuda *e = (serve_engine_cuda *)base;
    cudaDeviceSynchronize();
    prefill_side *p = &e->pf;
    decode_side *d = &e->dc;
    bench_blas_destroy(&p->blas);
    bench_blas_destroy(&d->blas);
    acts_free(&p->a);
    acts_free(&d->a);
    void *rest[] = {p->xl, p->logits, p->meta, d->part_o, d->part_ml, d->logits, d->inputs,
                    e->embedding, e->final_norm, e->lm_head, e->kcache, e->vcache};
    free_all(rest, sizeof rest / sizeof rest[0]);
    mapped_free(&p->in);
    mapped_free(&p->out);
    mapped_free(&d->in);
    mapped_free(&d->out);
    if (e->layers) {
        for (uint32_t l = 0; l < base->model.layers; l++) {
            layer_weights *w = &e->layers[l];
            void *all[] = {w->attn_norm, w->wqkv, w->wo, w->mlp_norm, w->wgu, w->wdown};
            free_all(all, sizeof all / sizeof all[0]);
        }
        free(e->layers);
    }
    if (e->module)
        e->cu.cuModuleUnload(e->module);
    if (e->graphs_mu_ok)
        pthread_mutex_destroy(&e->graphs_mu);
    free(e);
}

static const serve_ops CUDA_OPS = {
    "cuda",
    cuda_thread_init,
    cuda_prefill_submit,
    cuda_prefill_result,
    cuda_decode_submit,
    cuda_decode_result,
    cuda_vctx_release,
    cuda_destroy,
};

static int setup(serve_engine_cuda *e)
{
    const serve_model *m = &e->base.model;
    if (m->layers < 1 || m->max_ctx < 1 || m->max_batch < 1 || m->max_batch > SERVE_MAX_BATCH ||
        m->chunk_tokens < 1) {
        fprintf(stderr, "serve_engine_cuda_create: layers %u, max_ctx %u, max_batch %u (1-%d), chunk %u: each must "
                        "be positive\n",
                m->layers, m->max_ctx, m->max_batch, SERVE_MAX_BATCH, m->chunk_tokens);
        return -1;
    }
    if (pthread_mutex_init(&e->graphs_mu, NULL)) {
        fprintf(stderr, "serve_engine_cuda_create: pthread_mutex_init failed\n");
        return -1;
    }
    e->graphs_mu_ok = 1;
    CUDA_CHECK(cudaSetDevice(e->ordinal));
    if (bench_driver_api_load(&e->cu) || load_kernels(e) || weights_init(e) || buffers_alloc(e))
        return -1;
    CUDA_CHECK(cudaDeviceSynchronize());
    return 0;
}

int serve_engine_cuda_create(ds_runtime_t rt, int ordinal, const serve_model *m, serve_engine **out)
{
    (void)rt; /* the runtime already made the primary context current here */
    serve_engine_cuda *e = calloc(1, sizeof *e);
    if (!e) {
        fprintf(stderr, "serve_engine_cuda_create: out of memory\n");
        return -1;
    }
    e->base.ops = &CUDA_OPS;
    e->base.model = *m;
    e->ordinal = ordinal;
    if (setup(e)) {
        cuda_destroy(&e->base);
        return -1;
    }
    *out = &e->base;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* test hook (serve_check; engine.h)                                         */

int serve_engine_cuda_last_logits(serve_engine *base, int decode, float *host, uint32_t rows)
{
    serve_engine_cuda *e = (serve_engine_cuda *)base;
    const void *src = decode ? e->dc.logits : e->pf.logits;
    const uint32_t cap = decode ? base->model.max_batch : SERVE_MAX_BATCH;
    if (rows > cap) {
        fprintf(stderr, "serve_engine_cuda_last_logits: %u rows, at most %u\n", rows, cap);
        return -1;
    }
    CUDA_CHECK(cudaMemcpy(host, src, (size_t)rows * SERVE_VOCAB * sizeof(float), cudaMemcpyDeviceToHost));
    return 0;
}
