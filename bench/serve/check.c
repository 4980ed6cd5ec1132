/*
 * serve_check: the CUDA serve engine's own checks on a GPU (engine_cuda.c,
 * kernels.cu), and the time of each step alone, which calibrates the
 * simulated back end (engine_sim.c).
 *
 *  1. attention: the prefill (tensor-core flash attention) and decode
 *     (flash-decoding) kernels against serve_ref_attention, a plain fp32 loop,
 *     on random Q and KV cache: single and several segments, starts and
 *     lengths that are not multiples of the tiles, a 7000-token context;
 *     the largest absolute error must stay under ATTN_TOLERANCE.
 *  2. KV cache: a prompt prefilled in one chunk and in two (split off the tile
 *     grid) gives the same first token; a decode step after prefilling P[:n]
 *     against prefilling P[:n+1]; logits compared numerically (max abs
 *     difference and the top-2 margin), tokens required equal only where the
 *     margin exceeds the difference. Logits finite and argmax non-degenerate
 *     (several prompts, several distinct tokens).
 *  3. placement: a decode graph and a prefill chunk replayed after
 *     ds_vctx_remap to every pCtx of the pool give bitwise identical tokens
 *     and logits.
 *  4. timings (host clock around submit + ds_vctx_synchronize, after warm-up,
 *     medians): decode steps of buckets 1, 8, 32 and 64 at context 2048 and
 *     prefill chunks of 512, 2048 and 8192 tokens, on every pCtx; the decode
 *     step's achieved bandwidth (weights + KV bytes over time).
 *
 * Without a GPU it prints one line and exits 77 (skipped). Exit 1 when a check
 * fails, 2 on bad arguments.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "bench.h"
#include "cuda_entry.h"
#include "engine.h"

#ifndef SERVE_SOURCE_DIR
#define SERVE_SOURCE_DIR "."
#endif

/* Embedded by tools/embed-fatbin.py from kernels.cu (in the engine's library). */
extern const unsigned char serve_kernels_fatbin[];

#define QKV_DIM 6144
#define DECODE_SPLITS 16 /* kernels.cu */
#define ATTN_TOLERANCE 2e-2
#define ATTN_CTX 8192 /* positions per slot of check 1's own cache */
#define ATTN_SLOTS 3
#define ATTN_MAX_TOKENS 7000

typedef struct options {
    serve_model model;
    uint32_t reps;
    int timings;
    const char *out;
} options;

static int failures;

static void verdict(int ok, const char *what)
{
    printf("  %-58s %s\n", what, ok ? "ok" : "FAILED");
    if (!ok)
        failures++;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, size_t n)
{
    qsort(x, n, sizeof *x, cmp_double);
    return bench_percentile(x, n, 0.5);
}

/* ------------------------------------------------------------------------ */
/* 1. attention kernels against the reference                               */

typedef struct attn_env {
    bench_driver_api cu;
    CUmodule mod;
    CUfunction fill, prefill, decode, combine, ref;
    ds_vctx_t v;
    void *qkv, *kc, *vc, *out, *ref_out, *meta, *part_o, *part_ml;
} attn_env;

typedef struct seg3 {
    int slot, start, ntok;
} seg3;

typedef struct attn_result {
    char name[64];
    double err, ref_max;
} attn_result;

#define MAX_ATTN_RESULTS 8
static attn_result attn_results[MAX_ATTN_RESULTS];
static int n_attn_results;

static int launch(ds_vctx_t v, CUfunction f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t threads, void **params)
{
    ds_dim3 g = {gx, gy, gz}, b = {threads, 1, 1};
    BENCH_DS_CHECK(ds_launch(v, f, g, b, 0, params, NULL));
    return 0;
}

static int fill(attn_env *a, void *p, size_t n, unsigned long long seed, float scale)
{
    unsigned long long count = n;
    float offset = 0.f;
    void *params[] = {&p, &count, &seed, &scale, &offset};
    return launch(a->v, a->fill, 1024, 1, 1, 256, params);
}

static int attn_open(attn_env *a, ds_vctx_t v)
{
    memset(a, 0, sizeof *a);
    a->v = v;
    if (bench_driver_api_load(&a->cu))
        return -1;
    BENCH_CU_CHECK(a->cu, a->cu.cuModuleLoadData(&a->mod, serve_kernels_fatbin));
    BENCH_CU_CHECK(a->cu, a->cu.cuModuleGetFunction(&a->fill, a->mod, "serve_fill_bf16"));
    BENCH_CU_CHECK(a->cu, a->cu.cuModuleGetFunction(&a->prefill, a->mod, "serve_prefill_attention"));
    BENCH_CU_CHECK(a->cu, a->cu.cuModuleGetFunction(&a->decode, a->mod, "serve_decode_attention"));
    BENCH_CU_CHECK(a->cu, a->cu.cuModuleGetFunction(&a->combine, a->mod, "serve_decode_combine"));
    BENCH_CU_CHECK(a->cu, a->cu.cuModuleGetFunction(&a->ref, a->mod, "serve_ref_attention"));
    const size_t cache = (size_t)ATTN_SLOTS * SERVE_KV_HEADS * ATTN_CTX * SERVE_HEAD_DIM * 2;
    const size_t T = ATTN_MAX_TOKENS;
    BENCH_CUDA_CHECK(cudaMalloc(&a->qkv, T * QKV_DIM * 2));
    BENCH_CUDA_CHECK(cudaMalloc(&a->kc, cache));
    BENCH_CUDA_CHECK(cudaMalloc(&a->vc, cache));
    BENCH_CUDA_CHECK(cudaMalloc(&a->out, T * SERVE_HIDDEN * 2));
    BENCH_CUDA_CHECK(cudaMalloc(&a->ref_out, T * SERVE_HIDDEN * 4));
    BENCH_CUDA_CHECK(cudaMalloc(&a->meta, (2 * T + 4 + 4 * (T / 64 + 64)) * 4));
    BENCH_CUDA_CHECK(cudaMalloc(&a->part_o, 8 * SERVE_HEADS * DECODE_SPLITS * SERVE_HEAD_DIM * 4));
    BENCH_CUDA_CHECK(cudaMalloc(&a->part_ml, 8 * SERVE_HEADS * DECODE_SPLITS * 2 * 4));
    /* q scaled by 2 so the softmax is not flat: scores of std ~0.7 */
    if (fill(a, a->qkv, T * QKV_DIM, 101, 2.f) || fill(a, a->kc, cache / 2, 102, 1.f) ||
        fill(a, a->vc, cache / 2, 103, 1.f))
        return -1;
    BENCH_DS_CHECK(ds_vctx_synchronize(v));
    return 0;
}

static void attn_close(attn_env *a)
{
    void *all[] = {a->qkv, a->kc, a->vc, a->out, a->ref_out, a->meta, a->part_o, a->part_ml};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            cudaFree(all[i]);
    if (a->mod)
        a->cu.cuModuleUnload(a->mod);
}

/* Largest |out - ref| and |ref| over rows x 4096 (out bf16, ref fp32). */
static int attn_compare(attn_env *a, int rows, const char *name)
{
    const size_t n = (size_t)rows * SERVE_HIDDEN;
    uint16_t *out = malloc(n * 2);
    float *ref = malloc(n * 4);
    if (!out || !ref) {
        fprintf(stderr, "serve_check: out of memory\n");
        free(out);
        free(ref);
        return -1;
    }
    cudaError_t st = cudaMemcpy(out, a->out, n * 2, cudaMemcpyDeviceToHost);
    if (st == cudaSuccess)
        st = cudaMemcpy(ref, a->ref_out, n * 4, cudaMemcpyDeviceToHost);
    double err = 0, rmax = 0;
    int finite = 1;
    for (size_t i = 0; st == cudaSuccess && i < n; i++) {
        const double o = bench_bf16_to_float(out[i]), r = ref[i];
        if (!isfinite(o) || !isfinite(r))
            finite = 0;
        err = fmax(err, fabs(o - r));
        rmax = fmax(rmax, fabs(r));
    }
    free(out);
    free(ref);
    BENCH_CUDA_CHECK(st);
    char line[160];
    snprintf(line, sizeof line, "%s: max|err| %.2e (max|ref| %.3f)", name, err, rmax);
    verdict(finite && err < ATTN_TOLERANCE, line);
    if (n_attn_results < MAX_ATTN_RESULTS) {
        attn_result *r = &attn_results[n_attn_results++];
        snprintf(r->name, sizeof r->name, "%s", name);
        r->err = finite ? err : NAN;
        r->ref_max = rmax;
    }
    return 0;
}

/* Prefill attention of one chunk of segments against the reference. */
static int attn_prefill_case(attn_env *a, const seg3 *segs, int n, const char *name)
{
    int T = 0;
    for (int i = 0; i < n; i++)
        T += segs[i].ntok;
    int32_t *meta = malloc((2 * (size_t)T + 4 + 4 * ((size_t)T / 64 + (size_t)n + 1)) * 4);
    if (!meta) {
        fprintf(stderr, "serve_check: out of memory\n");
        return -1;
    }
    const int toff = (2 * T + 3) / 4 * 4; /* tiles are int4: 16-byte aligned */
    int32_t *slot = meta, *pos = meta + T, *tiles = meta + toff;
    int t = 0, ntiles = 0;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < segs[i].ntok; j += 64, ntiles++) {
            int32_t *tl = tiles + 4 * ntiles;
            tl[0] = t + j;
            tl[1] = segs[i].ntok - j < 64 ? segs[i].ntok - j : 64;
            tl[2] = segs[i].start + j;
            tl[3] = segs[i].slot;
        }
        for (int j = 0; j < segs[i].ntok; j++, t++) {
            slot[t] = segs[i].slot;
            pos[t] = segs[i].start + j;
        }
    }
    cudaError_t st = cudaMemcpy(a->meta, meta, ((size_t)toff + 4 * (size_t)ntiles) * 4, cudaMemcpyHostToDevice);
    free(meta);
    BENCH_CUDA_CHECK(st);
    int max_ctx = ATTN_CTX;
    const int32_t *dslot = a->meta, *dpos = (const int32_t *)a->meta + T, *dtiles = (const int32_t *)a->meta + toff;
    void *pp[] = {&a->qkv, (void *)&dtiles, &a->kc, &a->vc, &a->out, &max_ctx};
    void *rp[] = {&a->qkv, (void *)&dslot, (void *)&dpos, &a->kc, &a->vc, &a->ref_out, &max_ctx};
    if (launch(a->v, a->prefill, (uint32_t)ntiles, SERVE_HEADS, 1, 128, pp) ||
        launch(a->v, a->ref, (uint32_t)T, SERVE_HEADS, 1, 128, rp))
        return -1;
    BENCH_DS_CHECK(ds_vctx_synchronize(a->v));
    return attn_compare(a, T, name);
}

/* Decode attention of 8 rows (qkv rows 0..7) against the reference. */
static int attn_decode_case(attn_env *a)
{
    int32_t meta[16] = {0, 1, 2, 0, 1, 2, 0, 2, 0, 16, 63, 64, 999, 2048, 6999, ATTN_CTX - 1};
    BENCH_CUDA_CHECK(cudaMemcpy(a->meta, meta, sizeof meta, cudaMemcpyHostToDevice));
    int max_ctx = ATTN_CTX;
    const int32_t *slots = a->meta, *pos = (const int32_t *)a->meta + 8;
    void *dp[] = {&a->qkv, (void *)&slots, (void *)&pos, &a->kc, &a->vc, &a->part_o, &a->part_ml, &max_ctx};
    void *cp[] = {&a->part_o, &a->part_ml, (void *)&pos, &a->out};
    void *rp[] = {&a->qkv, (void *)&slots, (void *)&pos, &a->kc, &a->vc, &a->ref_out, &max_ctx};
    if (launch(a->v, a->decode, DECODE_SPLITS, SERVE_KV_HEADS, 8, 128, dp) ||
        launch(a->v, a->combine, SERVE_HEADS, 8, 1, SERVE_HEAD_DIM, cp) ||
        launch(a->v, a->ref, 8, SERVE_HEADS, 1, 128, rp))
        return -1;
    BENCH_DS_CHECK(ds_vctx_synchronize(a->v));
    return attn_compare(a, 8, "decode: 8 rows, contexts 1..8192");
}

static int check_attention(ds_vctx_t v)
{
    printf("1. attention kernels against the fp32 reference (tolerance %.0e)\n", ATTN_TOLERANCE);
    attn_env a;
    int rc = attn_open(&a, v);
    static const seg3 one[] = {{0, 0, 1}}, hundred[] = {{0, 0, 100}};
    static const seg3 two[] = {{1, 300, 77}, {0, 0, 200}};
    static const seg3 small[] = {{0, 5, 3}, {1, 64, 64}, {2, 127, 130}};
    static const seg3 big[] = {{2, 0, 7000}}, tail[] = {{2, 6000, 1000}};
    if (!rc)
        rc = attn_prefill_case(&a, one, 1, "prefill: 1 token") ||
             attn_prefill_case(&a, hundred, 1, "prefill: 100 tokens") ||
             attn_prefill_case(&a, two, 2, "prefill: 2 segments, one from position 300") ||
             attn_prefill_case(&a, small, 3, "prefill: 3 segments off the tile grid") ||
             attn_prefill_case(&a, big, 1, "prefill: 7000 tokens") ||
             attn_prefill_case(&a, tail, 1, "prefill: 1000 tokens after 6000") || attn_decode_case(&a);
    attn_close(&a);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* engine helpers                                                            */

typedef struct env {
    ds_runtime_t rt;
    ds_runtime_info info;
    serve_engine *e;
    ds_vctx_t v;
    float *logits; /* [SERVE_MAX_BATCH][vocab] host */
} env;

static int prefill(env *x, const serve_segment *segs, uint32_t n, int32_t *first, uint32_t *count)
{
    if (x->e->ops->prefill_submit(x->e, x->v, segs, n))
        return -1;
    BENCH_DS_CHECK(ds_vctx_synchronize(x->v));
    return x->e->ops->prefill_result(x->e, first, count);
}

static int decode(env *x, uint32_t bs, const uint32_t *slots, const int32_t *tokens, const uint32_t *pos,
                  int32_t *out)
{
    if (x->e->ops->decode_submit(x->e, x->v, bs, slots, tokens, pos))
        return -1;
    BENCH_DS_CHECK(ds_vctx_synchronize(x->v));
    return x->e->ops->decode_result(x->e, out);
}

/* Top-1 index, its margin over the second, and the row's mean and std. */
typedef struct row_stats {
    int top;
    double margin, mean, std;
    int finite;
} row_stats;

static row_stats stats_of(const float *row)
{
    row_stats s = {0, 0, 0, 0, 1};
    double best = -INFINITY, second = -INFINITY, sum = 0, sum2 = 0;
    for (int i = 0; i < SERVE_VOCAB; i++) {
        const double v = row[i];
        if (!isfinite(v))
            s.finite = 0;
        sum += v;
        sum2 += v * v;
        if (v > best) {
            second = best;
            best = v;
            s.top = i;
        } else if (v > second) {
            second = v;
        }
    }
    s.margin = best - second;
    s.mean = sum / SERVE_VOCAB;
    s.std = sqrt(fmax(0, sum2 / SERVE_VOCAB - s.mean * s.mean));
    return s;
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

/* ------------------------------------------------------------------------ */
/* 2. KV-cache consistency                                                   */

typedef struct kv_result {
    double chunk_diff, chunk_margin, decode_diff, decode_margin, logit_std;
    int chunk_same, decode_same, distinct, prompts;
} kv_result;

static kv_result kvr;

/* Tokens equal, or the logits' difference at least the margin (then the
 * order of the top two is within rounding, reported, not a failure). */
static void compare_tokens(int32_t a, int32_t b, double diff, double margin, const char *what)
{
    char line[200];
    snprintf(line, sizeof line, "%s: tokens %d / %d, max|dlogit| %.3g, top-2 margin %.3g", what, (int)a, (int)b,
             diff, margin);
    verdict(a == b || diff >= margin, line);
}

static int check_kv(env *x, bench_rng *rng)
{
    const serve_model *m = &x->e->model;
    printf("2. KV cache: chunked prefill and decode against one-chunk prefill\n");
    const uint32_t n = 1000, split = 601; /* 601: not on the 64-token tile grid */
    if (m->max_batch < 4 || m->max_ctx < n + 1 || m->chunk_tokens < n + 1) {
        fprintf(stderr, "serve_check: check 2 needs --max-batch >= 4, --max-ctx and --chunk > %u\n", n);
        return -1;
    }
    int32_t *P = malloc((n + 1) * sizeof *P);
    float *la = malloc((size_t)SERVE_VOCAB * 4 * sizeof(float));
    if (!P || !la) {
        fprintf(stderr, "serve_check: out of memory\n");
        free(P);
        free(la);
        return -1;
    }
    float *lb = la + SERVE_VOCAB, *lc = lb + SERVE_VOCAB, *ld = lc + SERVE_VOCAB;
    for (uint32_t i = 0; i <= n; i++)
        P[i] = (int32_t)(bench_rng_next(rng) % SERVE_VOCAB);
    int32_t ta = -1, tb = -1, tc = -1, td = -1, tmp;
    uint32_t cnt = 0;
    int rc = 0;
    /* (a) P[:n] in one chunk, slot 0 */
    serve_segment s = {.slot = 0, .start = 0, .ntok = n, .last = 1, .tokens = P};
    rc = rc || prefill(x, &s, 1, &ta, &cnt) || serve_engine_cuda_last_logits(x->e, 0, la, 1);
    /* (b) the same in two chunks, slot 1 */
    serve_segment b1 = {.slot = 1, .start = 0, .ntok = split, .last = 0, .tokens = P};
    serve_segment b2 = {.slot = 1, .start = split, .ntok = n - split, .last = 1, .tokens = P + split};
    rc = rc || prefill(x, &b1, 1, &tmp, &cnt);
    if (!rc && cnt != 0) {
        fprintf(stderr, "serve_check: a segment with last=0 gave %u tokens\n", cnt);
        rc = -1;
    }
    rc = rc || prefill(x, &b2, 1, &tb, &cnt) || serve_engine_cuda_last_logits(x->e, 0, lb, 1);
    /* (c) decode P[n] at position n over slot 0's cache */
    const uint32_t slot0 = 0, pos_n = n;
    rc = rc || decode(x, 1, &slot0, &P[n], &pos_n, &tc) || serve_engine_cuda_last_logits(x->e, 1, lc, 1);
    /* (d) P[:n+1] in one chunk, slot 2 */
    serve_segment d = {.slot = 2, .start = 0, .ntok = n + 1, .last = 1, .tokens = P};
    rc = rc || prefill(x, &d, 1, &td, &cnt) || serve_engine_cuda_last_logits(x->e, 0, ld, 1);
    if (!rc) {
        row_stats sa = stats_of(la), sc = stats_of(lc);
        kvr.chunk_diff = max_abs_diff(la, lb, SERVE_VOCAB);
        kvr.chunk_margin = sa.margin;
        kvr.chunk_same = ta == tb;
        kvr.decode_diff = max_abs_diff(lc, ld, SERVE_VOCAB);
        kvr.decode_margin = sc.margin;
        kvr.decode_same = tc == td;
        kvr.logit_std = sa.std;
        char line[160];
        snprintf(line, sizeof line, "logits finite: mean %.3f, std %.3f, top %d", sa.mean, sa.std, sa.top);
        verdict(sa.finite && sc.finite && stats_of(lb).finite && stats_of(ld).finite && sa.std > 0.1, line);
        compare_tokens(ta, tb, kvr.chunk_diff, kvr.chunk_margin, "1000 tokens: one chunk vs 601 + 399");
        compare_tokens(tc, td, kvr.decode_diff, kvr.decode_margin, "decode at 1000 vs prefill of 1001");
    }
    /* non-degenerate argmax: several short prompts in one chunk, distinct tokens */
    if (!rc) {
        serve_segment segs[16];
        int32_t toks[16][50], first[16];
        const uint32_t np = m->max_batch < 16 ? m->max_batch : 16;
        for (uint32_t i = 0; i < np; i++) {
            for (int j = 0; j < 50; j++)
                toks[i][j] = (int32_t)(bench_rng_next(rng) % SERVE_VOCAB);
            segs[i] = (serve_segment){.slot = i, .start = 0, .ntok = 50, .last = 1, .tokens = toks[i]};
        }
        rc = prefill(x, segs, np, first, &cnt);
        if (!rc) {
            int distinct = 0, in_range = cnt == np;
            for (uint32_t i = 0; i < cnt; i++) {
                int seen = 0;
                for (uint32_t j = 0; j < i; j++)
                    seen |= first[j] == first[i];
                distinct += !seen;
                in_range &= first[i] >= 0 && first[i] < SERVE_VOCAB;
            }
            kvr.distinct = distinct;
            kvr.prompts = (int)np;
            char line[160];
            snprintf(line, sizeof line, "%u prompts in one chunk: %d distinct first tokens", np, distinct);
            verdict(in_range && distinct >= (int)np / 2, line);
        }
    }
    free(P);
    free(la);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* 3. placement                                                              */

static int placement_result[2] = {-1, -1}; /* decode, prefill: 1 identical on every pCtx */

static int check_placement(env *x)
{
    const serve_model *m = &x->e->model;
    printf("3. determinism: the same step on every pCtx of the pool\n");
    const uint32_t B = m->max_batch < 8 ? m->max_batch : 8;
    const size_t nl = (size_t)B * SERVE_VOCAB;
    float *ref = malloc(nl * sizeof(float)), *cur = malloc(nl * sizeof(float));
    if (!ref || !cur) {
        fprintf(stderr, "serve_check: out of memory\n");
        free(ref);
        free(cur);
        return -1;
    }
    uint32_t slots[8], pos[8];
    int32_t tokens[8], out_ref[8], out[8];
    const uint32_t pos_of[8] = {1001, 600, 1001, 17, 5, 300, 2047, 1};
    for (uint32_t i = 0; i < B; i++) {
        slots[i] = i;
        pos[i] = pos_of[i] < m->max_ctx ? pos_of[i] : m->max_ctx - 1;
        tokens[i] = (int32_t)(1000 + 7919 * i);
    }
    int rc = 0, same = 1;
    for (uint32_t p = 0; !rc && p < x->info.num_pctx; p++) {
        uint32_t bound = 0;
        rc = ds_vctx_remap(x->v, p) != DS_SUCCESS || decode(x, B, slots, tokens, pos, p ? out : out_ref) ||
             serve_engine_cuda_last_logits(x->e, 1, p ? cur : ref, B) || ds_vctx_get_pctx(x->v, &bound) != DS_SUCCESS;
        if (!rc && bound != p) {
            fprintf(stderr, "serve_check: bound to pCtx %u after a remap to %u\n", bound, p);
            rc = -1;
        }
        if (!rc && p)
            same &= !memcmp(out, out_ref, B * sizeof out[0]) && !memcmp(cur, ref, nl * sizeof(float));
    }
    if (!rc) {
        placement_result[0] = same;
        char line[160];
        snprintf(line, sizeof line, "decode bucket %u on %u pCtxs: tokens and logits bitwise equal", B,
                 x->info.num_pctx);
        verdict(same, line);
    }
    /* a prefill chunk of two segments, each pCtx */
    int32_t *toks = malloc(1000 * sizeof *toks);
    if (!rc && !toks) {
        fprintf(stderr, "serve_check: out of memory\n");
        rc = -1;
    }
    if (!rc) {
        for (int i = 0; i < 1000; i++)
            toks[i] = (int32_t)((i * 2654435761u) % SERVE_VOCAB);
        serve_segment segs[2] = {{.slot = 3 % m->max_batch, .start = 0, .ntok = 700, .last = 1, .tokens = toks},
                                 {.slot = (3 + 1) % m->max_batch, .start = 0, .ntok = 300, .last = 1,
                                  .tokens = toks + 700}};
        same = 1;
        for (uint32_t p = 0; !rc && p < x->info.num_pctx; p++) {
            uint32_t cnt = 0;
            rc = ds_vctx_remap(x->v, p) != DS_SUCCESS || prefill(x, segs, 2, p ? out : out_ref, &cnt) ||
                 serve_engine_cuda_last_logits(x->e, 0, p ? cur : ref, 2);
            if (!rc && p)
                same &= !memcmp(out, out_ref, 2 * sizeof out[0]) && !memcmp(cur, ref, 2 * SERVE_VOCAB * sizeof(float));
        }
        if (!rc) {
            placement_result[1] = same;
            char line[160];
            snprintf(line, sizeof line, "prefill 700 + 300 tokens on %u pCtxs: bitwise equal", x->info.num_pctx);
            verdict(same, line);
        }
    }
    if (rc)
        fprintf(stderr, "serve_check: placement check failed: %s\n", ds_last_error_message());
    free(toks);
    free(ref);
    free(cur);
    ds_vctx_remap(x->v, 0);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* 4. timings                                                                */

#define DECODE_CTX 2048
static const uint32_t DECODE_BUCKETS[] = {1, 8, 32, 64};
static const uint32_t PREFILL_TOKENS[] = {512, 2048, 8192};
#define N_DB (sizeof DECODE_BUCKETS / sizeof DECODE_BUCKETS[0])
#define N_PT (sizeof PREFILL_TOKENS / sizeof PREFILL_TOKENS[0])

typedef struct timing {
    double ms[DS_MAX_PCTX]; /* median; NAN: not run */
    double min_ms[DS_MAX_PCTX];
} timing;

static timing decode_t[N_DB], prefill_t[N_PT];

/* Bytes a decode step of `bucket` rows at context ctx reads: every weight
 * once (embedding rows aside) and each row's K and V. */
static double decode_bytes(const serve_model *m, uint32_t bucket, uint32_t ctx)
{
    const double layer = (double)(6144 + 4096 + 2 * SERVE_MLP + SERVE_MLP) * SERVE_HIDDEN * 2;
    const double head = (double)SERVE_VOCAB * SERVE_HIDDEN * 2;
    const double kv = (double)bucket * m->layers * ctx * SERVE_KV_HEADS * SERVE_HEAD_DIM * 2 * 2;
    return m->layers * layer + head + kv;
}

static double prefill_flops(const serve_model *m, uint32_t n)
{
    const double gemm = 2.0 * n * (6144 + 4096 + 2 * SERVE_MLP + SERVE_MLP) * SERVE_HIDDEN;
    const double attn = 4.0 * (double)n * n / 2 * SERVE_HEAD_DIM * SERVE_HEADS;
    return m->layers * (gemm + attn) + 2.0 * SERVE_VOCAB * SERVE_HIDDEN;
}

static int time_steps(env *x, const options *o)
{
    const serve_model *m = &x->e->model;
    printf("4. timings: medians of %u after warm-up (host clock around submit + synchronize)\n", o->reps);
    double *t = malloc(o->reps * sizeof *t);
    int32_t *toks = malloc(8192 * sizeof *toks);
    if (!t || !toks) {
        fprintf(stderr, "serve_check: out of memory\n");
        free(t);
        free(toks);
        return -1;
    }
    for (int i = 0; i < 8192; i++)
        toks[i] = (int32_t)((i * 7919u) % SERVE_VOCAB);
    for (size_t b = 0; b < N_DB; b++)
        for (uint32_t p = 0; p < DS_MAX_PCTX; p++)
            decode_t[b].ms[p] = decode_t[b].min_ms[p] = NAN;
    for (size_t b = 0; b < N_PT; b++)
        for (uint32_t p = 0; p < DS_MAX_PCTX; p++)
            prefill_t[b].ms[p] = prefill_t[b].min_ms[p] = NAN;
    int rc = 0;
    for (uint32_t p = 0; !rc && p < x->info.num_pctx; p++) {
        if (ds_vctx_remap(x->v, p) != DS_SUCCESS) {
            fprintf(stderr, "serve_check: ds_vctx_remap: %s\n", ds_last_error_message());
            rc = -1;
            break;
        }
        for (size_t bi = 0; !rc && bi < N_DB; bi++) {
            const uint32_t bs = DECODE_BUCKETS[bi];
            if (bs > m->max_batch || DECODE_CTX > m->max_ctx)
                continue;
            uint32_t slots[SERVE_MAX_BATCH], pos[SERVE_MAX_BATCH];
            int32_t in[SERVE_MAX_BATCH], out[SERVE_MAX_BATCH];
            for (uint32_t i = 0; i < bs; i++) {
                slots[i] = i;
                pos[i] = DECODE_CTX - 1;
                in[i] = toks[i];
            }
            for (uint32_t r = 0; !rc && r < 3 + o->reps; r++) {
                const uint64_t t0 = bench_now_ns();
                rc = decode(x, bs, slots, in, pos, out);
                if (r >= 3)
                    t[r - 3] = (double)(bench_now_ns() - t0) / 1e6;
            }
            if (!rc) {
                decode_t[bi].ms[p] = median(t, o->reps);
                decode_t[bi].min_ms[p] = t[0];
                printf("  pCtx %u (%3u SMs): decode bs %-3u %8.3f ms\n", p, x->info.pctx[p].sm_count, bs,
                       decode_t[bi].ms[p]);
            }
        }
        for (size_t ni = 0; !rc && ni < N_PT; ni++) {
            const uint32_t n = PREFILL_TOKENS[ni];
            if (n > m->chunk_tokens || n > m->max_ctx)
                continue;
            serve_segment s = {.slot = 0, .start = 0, .ntok = n, .last = 1, .tokens = toks};
            int32_t first;
            uint32_t cnt;
            for (uint32_t r = 0; !rc && r < 2 + o->reps; r++) {
                const uint64_t t0 = bench_now_ns();
                rc = prefill(x, &s, 1, &first, &cnt);
                if (r >= 2)
                    t[r - 2] = (double)(bench_now_ns() - t0) / 1e6;
            }
            if (!rc) {
                prefill_t[ni].ms[p] = median(t, o->reps);
                prefill_t[ni].min_ms[p] = t[0];
                printf("  pCtx %u (%3u SMs): prefill %-5u %8.3f ms\n", p, x->info.pctx[p].sm_count, n,
                       prefill_t[ni].ms[p]);
            }
        }
    }
    free(t);
    free(toks);
    ds_vctx_remap(x->v, 0);
    if (rc)
        return -1;
    /* the table: one row per step, one column per pCtx */
    printf("  %-22s", "step (ms)");
    for (uint32_t p = 0; p < x->info.num_pctx; p++)
        printf(" %5u SMs", x->info.pctx[p].sm_count);
    printf("\n");
    for (size_t bi = 0; bi < N_DB; bi++) {
        printf("  decode bs %-3u ctx %-4u ", DECODE_BUCKETS[bi], DECODE_CTX);
        for (uint32_t p = 0; p < x->info.num_pctx; p++)
            printf(" %9.3f", decode_t[bi].ms[p]);
        printf("\n");
    }
    for (size_t ni = 0; ni < N_PT; ni++) {
        printf("  prefill %-5u tokens    ", PREFILL_TOKENS[ni]);
        for (uint32_t p = 0; p < x->info.num_pctx; p++)
            printf(" %9.3f", prefill_t[ni].ms[p]);
        printf("\n");
    }
    for (size_t bi = 0; bi < N_DB; bi++)
        if (isfinite(decode_t[bi].ms[0]))
            printf("  decode bs %-3u: %.0f GB/s on the whole GPU (%.2f GB of weights and KV per step)\n",
                   DECODE_BUCKETS[bi], decode_bytes(m, DECODE_BUCKETS[bi], DECODE_CTX) / decode_t[bi].ms[0] / 1e6,
                   decode_bytes(m, DECODE_BUCKETS[bi], DECODE_CTX) / 1e9);
    for (size_t ni = 0; ni < N_PT; ni++)
        if (isfinite(prefill_t[ni].ms[0]))
            printf("  prefill %-5u: %.0f TFLOP/s on the whole GPU\n", PREFILL_TOKENS[ni],
                   prefill_flops(m, PREFILL_TOKENS[ni]) / prefill_t[ni].ms[0] / 1e9);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* result file                                                               */

static int write_json(const env *x, const options *o, const char *command)
{
    FILE *f = fopen(o->out, "w");
    if (!f) {
        fprintf(stderr, "serve_check: cannot write %s\n", o->out);
        return -1;
    }
    const serve_model *m = &x->e->model;
    bench_json j;
    bench_json_begin(&j, f);
    bench_json_provenance(&j, "serve_check", &x->info, SERVE_SOURCE_DIR, command, 0);
    bench_json_object(&j, "model");
    bench_json_uint(&j, "layers", m->layers);
    bench_json_uint(&j, "max_ctx", m->max_ctx);
    bench_json_uint(&j, "max_batch", m->max_batch);
    bench_json_uint(&j, "chunk_tokens", m->chunk_tokens);
    bench_json_end(&j);
    bench_json_int(&j, "failures", failures);
    bench_json_array(&j, "attention");
    for (int i = 0; i < n_attn_results; i++) {
        bench_json_object(&j, NULL);
        bench_json_string(&j, "case", attn_results[i].name);
        bench_json_number(&j, "max_abs_err", attn_results[i].err);
        bench_json_number(&j, "max_abs_ref", attn_results[i].ref_max);
        bench_json_end(&j);
    }
    bench_json_end(&j);
    bench_json_object(&j, "kv_cache");
    bench_json_bool(&j, "chunked_same_token", kvr.chunk_same);
    bench_json_number(&j, "chunked_max_abs_logit_diff", kvr.chunk_diff);
    bench_json_number(&j, "chunked_top2_margin", kvr.chunk_margin);
    bench_json_bool(&j, "decode_same_token", kvr.decode_same);
    bench_json_number(&j, "decode_max_abs_logit_diff", kvr.decode_diff);
    bench_json_number(&j, "decode_top2_margin", kvr.decode_margin);
    bench_json_number(&j, "logit_std", kvr.logit_std);
    bench_json_int(&j, "distinct_first_tokens", kvr.distinct);
    bench_json_int(&j, "prompts", kvr.prompts);
    bench_json_end(&j);
    bench_json_object(&j, "placement");
    bench_json_int(&j, "decode_bitwise_equal", placement_result[0]);
    bench_json_int(&j, "prefill_bitwise_equal", placement_result[1]);
    bench_json_end(&j);
    bench_json_array(&j, "pctx");
    for (uint32_t p = 0; p < x->info.num_pctx; p++) {
        bench_json_object(&j, NULL);
        bench_json_uint(&j, "index", p);
        bench_json_uint(&j, "sm_count", x->info.pctx[p].sm_count);
        bench_json_string(&j, "anchor", bench_anchor_name(x->info.pctx[p].anchor));
        bench_json_end(&j);
    }
    bench_json_end(&j);
    if (o->timings) {
        bench_json_uint(&j, "reps", o->reps);
        bench_json_array(&j, "decode");
        for (size_t bi = 0; bi < N_DB; bi++) {
            bench_json_object(&j, NULL);
            bench_json_uint(&j, "bucket", DECODE_BUCKETS[bi]);
            bench_json_uint(&j, "ctx", DECODE_CTX);
            bench_json_number(&j, "bytes", decode_bytes(m, DECODE_BUCKETS[bi], DECODE_CTX));
            bench_json_number_array(&j, "median_ms", decode_t[bi].ms, x->info.num_pctx);
            double gbps[DS_MAX_PCTX];
            for (uint32_t p = 0; p < x->info.num_pctx; p++)
                gbps[p] = decode_bytes(m, DECODE_BUCKETS[bi], DECODE_CTX) / decode_t[bi].ms[p] / 1e6;
            bench_json_number_array(&j, "gb_per_s", gbps, x->info.num_pctx);
            bench_json_end(&j);
        }
        bench_json_end(&j);
        bench_json_array(&j, "prefill");
        for (size_t ni = 0; ni < N_PT; ni++) {
            bench_json_object(&j, NULL);
            bench_json_uint(&j, "tokens", PREFILL_TOKENS[ni]);
            bench_json_number(&j, "flops", prefill_flops(m, PREFILL_TOKENS[ni]));
            bench_json_number_array(&j, "median_ms", prefill_t[ni].ms, x->info.num_pctx);
            bench_json_end(&j);
        }
        bench_json_end(&j);
    }
    int rc = bench_json_finish(&j);
    if (fclose(f) != 0 || rc != 0) {
        fprintf(stderr, "serve_check: error writing %s\n", o->out);
        return -1;
    }
    printf("wrote %s\n", o->out);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* main                                                                      */

static void usage(FILE *f)
{
    fprintf(f, "usage: serve_check [--layers N (8)] [--max-ctx N (8192)] [--max-batch N (64)] [--chunk N (8192)]\n"
               "                   [--reps N (10)] [--no-timings] [--seed N] [--out FILE]\n");
}

static int parse_args(int argc, char **argv, options *o)
{
    o->model = (serve_model){.layers = 8, .max_ctx = 8192, .max_batch = 64, .chunk_tokens = 8192, .seed = 1};
    o->reps = 10;
    o->timings = 1;
    o->out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        uint64_t v = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return 1;
        if (!strcmp(a, "--no-timings")) {
            o->timings = 0;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "serve_check: %s needs a value\n", a);
            return -1;
        }
        const char *val = argv[++i];
        if (!strcmp(a, "--out")) {
            o->out = val;
            continue;
        }
        if (!strcmp(a, "--layers")) {
            if (bench_parse_u64("serve_check", a, val, 1, 128, &v))
                return -1;
            o->model.layers = (uint32_t)v;
        } else if (!strcmp(a, "--max-ctx")) {
            if (bench_parse_u64("serve_check", a, val, 2048, 1u << 20, &v))
                return -1;
            o->model.max_ctx = (uint32_t)v;
        } else if (!strcmp(a, "--max-batch")) {
            if (bench_parse_u64("serve_check", a, val, 4, SERVE_MAX_BATCH, &v))
                return -1;
            o->model.max_batch = (uint32_t)v;
        } else if (!strcmp(a, "--chunk")) {
            if (bench_parse_u64("serve_check", a, val, 1024, 1u << 20, &v))
                return -1;
            o->model.chunk_tokens = (uint32_t)v;
        } else if (!strcmp(a, "--reps")) {
            if (bench_parse_u64("serve_check", a, val, 1, 10000, &v))
                return -1;
            o->reps = (uint32_t)v;
        } else if (!strcmp(a, "--seed")) {
            if (bench_parse_u64("serve_check", a, val, 0, UINT64_MAX, &v))
                return -1;
            o->model.seed = v;
        } else {
            fprintf(stderr, "serve_check: unknown argument %s\n", a);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (bench_version_flag("serve_check", argc, argv))
        return 0;
    options o;
    char command[1024];
    bench_command(argc, argv, command, sizeof command);
    int prc = parse_args(argc, argv, &o);
    if (prc > 0) {
        usage(stdout);
        return 0;
    }
    if (prc < 0) {
        usage(stderr);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    ds_log_set_handler(bench_log_to_stderr, NULL, DS_LOG_WARN);
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_CUDA;
    cfg.policy = "manual"; /* nothing moves the vCtx but this program's remaps */
    env x;
    memset(&x, 0, sizeof x);
    int simulated = 0;
    if (bench_runtime_open(&cfg, &sim, &x.rt, &simulated))
        return 1;
    if (simulated) {
        printf("serve_check: no GPU, nothing to check (skipped)\n");
        ds_runtime_destroy(x.rt);
        return 77;
    }
    x.info = (ds_runtime_info)DS_RUNTIME_INFO_INIT;
    int rc = ds_runtime_info_get(x.rt, &x.info) != DS_SUCCESS;
    if (!rc)
        bench_print_pool(&x.info, 0);
    ds_vctx_attr attr = DS_VCTX_ATTR_INIT;
    attr.name = "serve_check";
    attr.cls = DS_CLASS_LATENCY_SENSITIVE;
    if (!rc && ds_vctx_create(x.rt, &attr, &x.v) != DS_SUCCESS) {
        fprintf(stderr, "serve_check: ds_vctx_create: %s\n", ds_last_error_message());
        rc = 1;
    }
    if (!rc && cudaSetDevice(cfg.device_ordinal) != cudaSuccess) {
        fprintf(stderr, "serve_check: cudaSetDevice failed\n");
        rc = 1;
    }
    rc = rc || check_attention(x.v);
    if (!rc) {
        const serve_model *m = &o.model;
        printf("engine: %u layers, max_ctx %u, max_batch %u, chunk %u tokens\n", m->layers, m->max_ctx,
               m->max_batch, m->chunk_tokens);
        const uint64_t t0 = bench_now_ns();
        rc = serve_engine_cuda_create(x.rt, cfg.device_ordinal, m, &x.e) || x.e->ops->thread_init(x.e);
        if (!rc)
            printf("  created in %.0f ms\n", (double)(bench_now_ns() - t0) / 1e6);
    }
    bench_rng rng;
    bench_rng_seed(&rng, o.model.seed + 17);
    rc = rc || check_kv(&x, &rng) || check_placement(&x) || (o.timings && time_steps(&x, &o));
    if (!rc && o.out)
        rc = write_json(&x, &o, command);
    if (x.v) {
        ds_vctx_synchronize(x.v);
        if (x.e && x.e->ops->vctx_release(x.e, x.v))
            rc = 1;
        ds_vctx_destroy(x.v);
    }
    if (x.e)
        x.e->ops->destroy(x.e);
    ds_runtime_destroy(x.rt);
    if (rc) {
        printf("serve_check: an error stopped the checks\n");
        return 1;
    }
    printf("serve_check: %s\n", failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
}
