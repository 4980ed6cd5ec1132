/*
 * CUDA back end of the determinism benchmark (determinism.h): this example's
 * own kernels (kernels.cu), every one launched through ds_launch.
 *
 * Linking: cudart only (plus cuBLAS for the audit). libcuda is never linked:
 * the few driver calls needed to load the fatbin and get CUfunctions come from
 * cudaGetDriverEntryPointByVersion, i.e. from the driver cudart loaded. The
 * fatbin is loaded with the device's primary context current (ds_runtime_create
 * left it current; cudaSetDevice binds cudart to the same context), as
 * ds_launch requires.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "bench.h"
#include "cuda_entry.h"
#include "det_cuda.h"
#include "determinism.h"

#define CU_CHECK(c, call) BENCH_CU_CHECK((c)->cu, call)

/* Embedded by tools/embed-fatbin.py from kernels.cu (meson.build here). */
extern const unsigned char det_kernels_fatbin[];
extern const size_t det_kernels_fatbin_size;

#define BE_STREAM_FLOATS (64ull << 20) /* 256 MiB per buffer */

typedef bench_driver_api driver_api;

typedef struct det_cuda {
    det_backend base;
    int ordinal;
    driver_api cu;
    CUmodule module;
    det_cuda_functions fn;
    void *w;        /* [vocab][hidden] bf16 */
    void *x;        /* [MAX_BATCH][hidden] bf16 */
    void *logits;   /* [MAX_BATCH][vocab] f32 */
    void *probs;    /* [MAX_BATCH][vocab] f32 */
    void *tokens;   /* [MAX_BATCH] int32 */
    void *partials; /* [MAX_SLICES][MAX_BATCH][vocab] f32 */
    void *be_buf, *be_src, *be_dst;
    float *h_logits, *h_probs; /* pinned */
    int32_t *h_tokens;
} det_cuda;


/* ------------------------------------------------------------------------ */
/* driver entry points and module                                            */


static int get_function(det_cuda *c, const char *name, CUfunction *f)
{
    CU_CHECK(c, c->cu.cuModuleGetFunction(f, c->module, name));
    if (!*f) {
        fprintf(stderr, "cuModuleGetFunction(%s) gave NULL\n", name);
        return -1;
    }
    return 0;
}

static int load_kernels(det_cuda *c)
{
    if (bench_driver_api_load(&c->cu))
        return -1;
    CU_CHECK(c, c->cu.cuModuleLoadData(&c->module, det_kernels_fatbin));
    det_cuda_functions *k = &c->fn;
    if (get_function(c, "det_fill_bf16", &k->fill_bf16) || get_function(c, "det_fill_f16", &k->fill_f16) ||
        get_function(c, "det_fill_f32", &k->fill_f32) || get_function(c, "det_fill_u32", &k->fill_u32) ||
        get_function(c, "det_lm_head", &k->lm_head) || get_function(c, "det_combine", &k->combine) ||
        get_function(c, "det_softmax", &k->softmax) || get_function(c, "det_argmax", &k->argmax) ||
        get_function(c, "det_be_burn", &k->be_burn) || get_function(c, "det_be_stream", &k->be_stream))
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* launches                                                                  */

static int launch(ds_vctx_t v, CUfunction f, uint32_t grid, uint32_t threads, void **params)
{
    const ds_dim3 g = {grid, 1, 1}, b = {threads, 1, 1};
    BENCH_DS_CHECK(ds_launch(v, f, g, b, 0, params, NULL));
    return 0;
}

int det_cuda_fill(det_backend *base, ds_vctx_t v, void *p, unsigned long long n, int kind, uint64_t seed,
                  float scale)
{
    det_cuda *c = (det_cuda *)base;
    unsigned long long s = seed;
    void *params[] = {&p, &n, &s, &scale};
    CUfunction f = kind == DET_FILL_BF16 ? c->fn.fill_bf16 : kind == DET_FILL_F16 ? c->fn.fill_f16 : c->fn.fill_f32;
    if (kind == DET_FILL_U32) {
        unsigned value = (unsigned)seed;
        void *p32[] = {&p, &n, &value};
        return launch(v, c->fn.fill_u32, DET_FILL_GRID, DET_FILL_THREADS, p32);
    }
    return launch(v, f, DET_FILL_GRID, DET_FILL_THREADS, params);
}

const det_cuda_functions *det_cuda_get_functions(det_backend *base)
{
    return &((det_cuda *)base)->fn;
}

static int head(det_cuda *c, ds_vctx_t v, void *out, int batch, int k0, int k1)
{
    int hidden = DET_HIDDEN, vocab = DET_VOCAB;
    void *params[] = {&c->w, &c->x, &out, &batch, &hidden, &vocab, &k0, &k1};
    return launch(v, c->fn.lm_head, DET_HEAD_GRID(DET_VOCAB), DET_HEAD_THREADS, params);
}

static int cuda_ls_submit(det_backend *base, ds_vctx_t v, const det_trial *t, uint32_t slices, int bf16_partials)
{
    det_cuda *c = (det_cuda *)base;
    if (t->batch < 1 || t->batch > DET_MAX_BATCH || slices > DET_MAX_SLICES) {
        fprintf(stderr, "ls_submit: batch %u or slices %u out of range\n", t->batch, slices);
        return -1;
    }
    const unsigned long long nbv = (unsigned long long)t->batch * DET_VOCAB;
    int batch = (int)t->batch, vocab = DET_VOCAB;
    if (det_cuda_fill(base, v, c->logits, nbv, DET_FILL_U32, DET_POISON_F32, 0.f) ||
        det_cuda_fill(base, v, c->probs, nbv, DET_FILL_U32, DET_POISON_F32, 0.f) ||
        det_cuda_fill(base, v, c->tokens, t->batch, DET_FILL_U32, DET_POISON_TOKEN, 0.f) ||
        det_cuda_fill(base, v, c->x, (unsigned long long)t->batch * DET_HIDDEN, DET_FILL_BF16, t->x_seed,
                      DET_X_SCALE))
        return -1;
    if (slices <= 1) {
        if (head(c, v, c->logits, batch, 0, DET_HIDDEN))
            return -1;
    } else {
        for (uint32_t s = 0; s < slices; s++) {
            void *dst = (char *)c->partials + (size_t)s * nbv * sizeof(float);
            if (head(c, v, dst, batch, det_slice_bound(DET_HIDDEN, slices, s),
                     det_slice_bound(DET_HIDDEN, slices, s + 1)))
                return -1;
        }
        int k = (int)slices, bf = bf16_partials != 0;
        unsigned long long n = nbv;
        void *params[] = {&c->partials, &k, &n, &c->logits, &bf};
        if (launch(v, c->fn.combine, DET_FILL_GRID, DET_FILL_THREADS, params))
            return -1;
    }
    void *softmax_params[] = {&c->logits, &c->probs, &vocab};
    void *argmax_params[] = {&c->probs, &c->tokens, &vocab};
    if (launch(v, c->fn.softmax, t->batch, DET_ROW_THREADS, softmax_params) ||
        launch(v, c->fn.argmax, t->batch, DET_ROW_THREADS, argmax_params))
        return -1;
    return 0;
}

static int read_back(det_cuda *c, uint32_t batch)
{
    const size_t bytes = (size_t)batch * DET_VOCAB * sizeof(float);
    CUDA_CHECK(cudaMemcpy(c->h_logits, c->logits, bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(c->h_probs, c->probs, bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(c->h_tokens, c->tokens, batch * sizeof(int32_t), cudaMemcpyDeviceToHost));
    return 0;
}

static int cuda_ls_collect(det_backend *base, ds_vctx_t v, const det_trial *t, det_output *out)
{
    det_cuda *c = (det_cuda *)base;
    BENCH_DS_CHECK(ds_vctx_synchronize(v));
    if (read_back(c, t->batch))
        return -1;
    if (det_check_and_hash(c->h_logits, c->h_probs, c->h_tokens, t->batch, DET_VOCAB, out)) {
        fprintf(stderr, "ls_collect: trial %u (batch %u) produced invalid outputs\n", t->index, t->batch);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* self-check against the host                                               */

static int cuda_self_check(det_backend *base, ds_vctx_t v, const det_trial *t)
{
    det_cuda *c = (det_cuda *)base;
    static const uint32_t rows[] = {0, 1, 4097, DET_VOCAB / 2 + 3, DET_VOCAB - 1};
    enum { NROWS = sizeof rows / sizeof rows[0] };
    const size_t nbv = (size_t)t->batch * DET_VOCAB;
    uint16_t *x = malloc((size_t)t->batch * DET_HIDDEN * sizeof *x);
    uint16_t *w = malloc((size_t)NROWS * DET_HIDDEN * sizeof *w);
    float *unsliced = malloc(nbv * sizeof *unsliced);
    int rc = -1;
    det_output o;
    if (!x || !w || !unsliced) {
        fprintf(stderr, "self_check: out of memory\n");
        goto out;
    }
    /* unsliced: logits against double-precision dot products */
    if (cuda_ls_submit(base, v, t, 1, 0) || cuda_ls_collect(base, v, t, &o))
        goto out;
    memcpy(unsliced, c->h_logits, nbv * sizeof *unsliced);
    if (cudaMemcpy(x, c->x, (size_t)t->batch * DET_HIDDEN * sizeof *x, cudaMemcpyDeviceToHost) != cudaSuccess)
        goto cuda_err;
    for (int r = 0; r < NROWS; r++)
        if (cudaMemcpy(w + (size_t)r * DET_HIDDEN, (const uint16_t *)c->w + (size_t)rows[r] * DET_HIDDEN,
                       DET_HIDDEN * sizeof *w, cudaMemcpyDeviceToHost) != cudaSuccess)
            goto cuda_err;
    double worst = 0.0;
    for (int r = 0; r < NROWS; r++)
        for (uint32_t b = 0; b < t->batch; b++) {
            double ref = 0.0, mag = 0.0;
            for (int k = 0; k < DET_HIDDEN; k++) {
                double p = (double)bench_bf16_to_float(w[(size_t)r * DET_HIDDEN + k]) *
                           (double)bench_bf16_to_float(x[(size_t)b * DET_HIDDEN + k]);
                ref += p;
                mag += fabs(p);
            }
            const double got = unsliced[(size_t)b * DET_VOCAB + rows[r]];
            const double err = fabs(got - ref);
            if (!(mag > 0.0) || !(err <= 1e-5 * mag)) {
                fprintf(stderr, "self_check: logit[%u][%u] = %.9g, host says %.9g (sum |terms| %.3g)\n", b, rows[r],
                        got, ref, mag);
                goto out;
            }
            if (err > worst)
                worst = err;
        }
    /* sliced into 3 chunks: the same numbers up to rounding */
    if (cuda_ls_submit(base, v, t, 3, 0) || cuda_ls_collect(base, v, t, &o))
        goto out;
    size_t differ = 0;
    double max_diff = 0.0;
    for (size_t i = 0; i < nbv; i++) {
        double d = fabs((double)c->h_logits[i] - (double)unsliced[i]);
        differ += c->h_logits[i] != unsliced[i];
        if (d > max_diff)
            max_diff = d;
    }
    if (!(max_diff < 1e-4)) {
        fprintf(stderr, "self_check: the 3-chunk logits differ from the unsliced ones by up to %.3g\n", max_diff);
        goto out;
    }
    printf("self-check: %d logits x %u rows within %.2g of the host's double sums; 3-chunk slicing changed "
           "%zu of %zu logits (max |diff| %.3g)\n",
           NROWS, t->batch, worst, differ, nbv, max_diff);
    rc = 0;
    goto out;
cuda_err:
    fprintf(stderr, "self_check: cudaMemcpy failed: %s\n", cudaGetErrorString(cudaGetLastError()));
out:
    free(x);
    free(w);
    free(unsliced);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* best-effort load                                                          */

static int cuda_be_launch(det_backend *base, ds_vctx_t v, int kind, uint32_t grid, double block_us)
{
    det_cuda *c = (det_cuda *)base;
    if (kind == DET_BE_STREAM) {
        unsigned long long n4 = BE_STREAM_FLOATS / 4;
        void *params[] = {&c->be_src, &c->be_dst, &n4};
        return launch(v, c->fn.be_stream, grid, DET_BE_THREADS, params);
    }
    unsigned long long n = DET_BE_BUF_FLOATS;
    double it = block_us * 400.0; /* ~2.5 ns per dependent FMA */
    unsigned iters = it < 1.0 ? 1u : it > 4e9 ? 4000000000u : (unsigned)it;
    void *params[] = {&c->be_buf, &n, &iters};
    return launch(v, c->fn.be_burn, grid, DET_BE_THREADS, params);
}

/* ------------------------------------------------------------------------ */
/* life cycle                                                                */

static int cuda_thread_init(det_backend *base)
{
    CUDA_CHECK(cudaSetDevice(((det_cuda *)base)->ordinal));
    return 0;
}

static void cuda_destroy(det_backend *base)
{
    det_cuda *c = (det_cuda *)base;
    cudaDeviceSynchronize();
    void *dev[] = {c->w, c->x, c->logits, c->probs, c->tokens, c->partials, c->be_buf, c->be_src, c->be_dst};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i])
            cudaFree(dev[i]);
    if (c->h_logits)
        cudaFreeHost(c->h_logits);
    if (c->h_probs)
        cudaFreeHost(c->h_probs);
    if (c->h_tokens)
        cudaFreeHost(c->h_tokens);
    if (c->module)
        c->cu.cuModuleUnload(c->module);
    free(c);
}

static const det_backend_ops CUDA_OPS = {
    "cuda", cuda_thread_init, cuda_ls_submit, cuda_ls_collect, cuda_self_check, cuda_be_launch, cuda_destroy,
};

static int setup(det_cuda *c, ds_vctx_t v)
{
    const size_t bv = (size_t)DET_MAX_BATCH * DET_VOCAB;
    CUDA_CHECK(cudaSetDevice(c->ordinal));
    if (load_kernels(c))
        return -1;
    CUDA_CHECK(cudaMalloc(&c->w, (size_t)DET_VOCAB * DET_HIDDEN * 2));
    CUDA_CHECK(cudaMalloc(&c->x, (size_t)DET_MAX_BATCH * DET_HIDDEN * 2));
    CUDA_CHECK(cudaMalloc(&c->logits, bv * 4));
    CUDA_CHECK(cudaMalloc(&c->probs, bv * 4));
    CUDA_CHECK(cudaMalloc(&c->tokens, DET_MAX_BATCH * 4));
    CUDA_CHECK(cudaMalloc(&c->partials, (size_t)DET_MAX_SLICES * bv * 4));
    CUDA_CHECK(cudaMalloc(&c->be_buf, (size_t)DET_BE_BUF_FLOATS * 4));
    CUDA_CHECK(cudaMalloc(&c->be_src, BE_STREAM_FLOATS * 4));
    CUDA_CHECK(cudaMalloc(&c->be_dst, BE_STREAM_FLOATS * 4));
    CUDA_CHECK(cudaMallocHost((void **)&c->h_logits, bv * 4));
    CUDA_CHECK(cudaMallocHost((void **)&c->h_probs, bv * 4));
    CUDA_CHECK(cudaMallocHost((void **)&c->h_tokens, DET_MAX_BATCH * 4));
    /* Weights (random, non-zero), the BE buffers, and poison everywhere else. */
    if (det_cuda_fill(&c->base, v, c->w, (unsigned long long)DET_VOCAB * DET_HIDDEN, DET_FILL_BF16, DET_W_SEED,
                      DET_W_SCALE) ||
        det_cuda_fill(&c->base, v, c->be_buf, DET_BE_BUF_FLOATS, DET_FILL_F32, 7, 1.f) ||
        det_cuda_fill(&c->base, v, c->be_src, BE_STREAM_FLOATS, DET_FILL_F32, 8, 1.f) ||
        det_cuda_fill(&c->base, v, c->be_dst, BE_STREAM_FLOATS, DET_FILL_F32, 9, 1.f) ||
        det_cuda_fill(&c->base, v, c->partials, (unsigned long long)DET_MAX_SLICES * bv, DET_FILL_U32,
                      DET_POISON_F32, 0.f) ||
        det_cuda_fill(&c->base, v, c->x, (unsigned long long)DET_MAX_BATCH * DET_HIDDEN, DET_FILL_BF16, 10, 1.f))
        return -1;
    BENCH_DS_CHECK(ds_vctx_synchronize(v));
    return 0;
}

int det_cuda_create(ds_runtime_t rt, int ordinal, ds_vctx_t setup_vctx, det_backend **out)
{
    (void)rt; /* the runtime already made the primary context current here */
    det_cuda *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "det_cuda_create: out of memory\n");
        return -1;
    }
    c->base.ops = &CUDA_OPS;
    c->base.vocab = DET_VOCAB;
    c->ordinal = ordinal;
    if (setup(c, setup_vctx)) {
        cuda_destroy(&c->base);
        return -1;
    }
    *out = &c->base;
    return 0;
}
