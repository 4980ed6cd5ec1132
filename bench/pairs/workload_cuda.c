/*
 * CUDA back end of the pairs workload (workload.h): cuBLAS bf16 GEMMs in
 * sections, the colocate example's AdamW and sum-of-squares kernels
 * (../colocate/kernels.cu, embedded here as pairs_kernels_fatbin) through
 * ds_launch. Links cudart and cuBLAS, never libcuda: the driver calls needed to
 * load the fatbin come from cudaGetDriverEntryPointByVersion (cuda_entry.h).
 * cudaSetDevice on each tenant thread binds cudart and cuBLAS to the primary
 * context the runtime made current, as in bench/colocate.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cublas_v2.h>

#include "bench.h"
#include "blas.h"
#include "cuda_entry.h"
#include "workload.h"

#define CUDA_CHECK(call) BENCH_CUDA_CHECK(call)
#define CUBLAS_CHECK(call) BENCH_CUBLAS_CHECK(call)
#define CU_CHECK(b, call) BENCH_CU_CHECK((b)->cu, call)

extern const unsigned char pairs_kernels_fatbin[];
extern const size_t pairs_kernels_fatbin_size;




typedef bench_driver_api driver_api;

typedef struct cuda_backend cuda_backend;

struct pairs_tenant {
    cuda_backend *b;
    pairs_kind kind;
    int ready;
    bench_blas blas;
    void *ga, *gb, *gc[PAIRS_COMPUTE_GEMMS]; /* [N][N] bf16 */
    unsigned long long params;              /* optimizer parameters (0: none) */
    void *param, *m, *v, *grad;             /* [params] fp32 */
    void *partial, *norm2;                  /* [PAIRS_GRID], [1] fp32 */
    cudaEvent_t done[2];
    int use_events;
};

struct cuda_backend {
    pairs_backend base;
    int ordinal;
    driver_api cu;
    CUmodule module;
    CUfunction fill_bf16, fill_f32, adamw, sumsq_partial, sumsq_final;
    pairs_tenant tenants[KIND_COUNT][2];
};

static int alloc(void **p, size_t bytes)
{
    CUDA_CHECK(cudaMalloc(p, bytes));
    return 0;
}

static int fill_bf16(cuda_backend *b, void *p, size_t n, uint64_t seed, float scale)
{
    unsigned long long count = n, s = seed;
    void *params[] = {&p, &count, &s, &scale};
    CU_CHECK(b, b->cu.cuLaunchKernel(b->fill_bf16, 1024, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    return 0;
}

static int fill_f32(cuda_backend *b, void *p, size_t n, uint64_t seed, float scale, float offset)
{
    unsigned long long count = n, s = seed;
    void *params[] = {&p, &count, &s, &scale, &offset};
    CU_CHECK(b, b->cu.cuLaunchKernel(b->fill_f32, 1024, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    return 0;
}

static int gemm_count(pairs_kind k)
{
    return k == KIND_COMPUTE ? PAIRS_COMPUTE_GEMMS : k == KIND_MIX ? PAIRS_MIX_GEMMS : 0;
}

static unsigned long long param_count(pairs_kind k)
{
    return k == KIND_MEMORY ? PAIRS_MEM_PARAMS : k == KIND_MIX ? PAIRS_MIX_PARAMS : 0;
}

static int tenant_setup(cuda_backend *b, pairs_tenant *t, pairs_kind kind, uint64_t seed)
{
    t->b = b;
    t->kind = kind;
    const size_t nn = (size_t)PAIRS_GEMM_N * PAIRS_GEMM_N;
    int g = gemm_count(kind);
    if (g) {
        if (bench_blas_create(&t->blas) || alloc(&t->ga, nn * 2) || alloc(&t->gb, nn * 2) ||
            fill_bf16(b, t->ga, nn, seed + 1, 1.f) || fill_bf16(b, t->gb, nn, seed + 2, 1.f))
            return -1;
        for (int i = 0; i < g; i++)
            if (alloc(&t->gc[i], nn * 2) || fill_bf16(b, t->gc[i], nn, seed + 3 + (uint64_t)i, 1.f))
                return -1;
    }
    t->params = param_count(kind);
    if (t->params) {
        const size_t bytes = t->params * 4;
        if (alloc(&t->param, bytes) || alloc(&t->m, bytes) || alloc(&t->v, bytes) || alloc(&t->grad, bytes) ||
            alloc(&t->partial, PAIRS_GRID * 4) || alloc(&t->norm2, 4))
            return -1;
        /* v stays positive (it is under a square root). */
        if (fill_f32(b, t->param, t->params, seed + 20, 1.f, 0.f) ||
            fill_f32(b, t->m, t->params, seed + 21, 1e-3f, 0.f) ||
            fill_f32(b, t->v, t->params, seed + 22, 5e-4f, 1e-3f) ||
            fill_f32(b, t->grad, t->params, seed + 23, 1e-2f, 0.f) ||
            fill_f32(b, t->partial, PAIRS_GRID, seed + 24, 1.f, 0.f) || fill_f32(b, t->norm2, 1, seed + 25, 1.f, 0.f))
            return -1;
    }
    for (int i = 0; i < 2; i++)
        CUDA_CHECK(cudaEventCreateWithFlags(&t->done[i], cudaEventDisableTiming | cudaEventBlockingSync));
    t->use_events = 1;
    CUDA_CHECK(cudaDeviceSynchronize());
    t->ready = 1;
    return 0;
}

static void tenant_free(pairs_tenant *t)
{
    bench_blas_destroy(&t->blas);
    void *all[] = {t->ga, t->gb, t->gc[0], t->gc[1], t->gc[2], t->gc[3],
                   t->param, t->m, t->v, t->grad, t->partial, t->norm2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            cudaFree(all[i]);
    for (int i = 0; i < 2; i++)
        if (t->done[i])
            cudaEventDestroy(t->done[i]);
}

static int cuda_tenant_get(pairs_backend *base, pairs_kind kind, int slot, pairs_tenant **out)
{
    cuda_backend *b = (cuda_backend *)base;
    pairs_tenant *t = &b->tenants[kind][slot & 1];
    if (!t->ready && tenant_setup(b, t, kind, 1000u * (uint64_t)(kind + 1) + 100u * (uint64_t)(slot & 1)))
        return -1;
    *out = t;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* one step                                                                  */

static int gemms(pairs_tenant *t, ds_vctx_t v)
{
    CUstream s;
    const float one = 1.f, zero = 0.f;
    const int n = PAIRS_GEMM_N;
    BENCH_DS_CHECK(ds_vctx_acquire_stream(v, &s));
    /* The stream can change between sections (a remap): bind it every time. */
    if (bench_blas_bind(&t->blas, s))
        return -1;
    for (int i = 0; i < gemm_count(t->kind); i++)
        CUBLAS_CHECK(cublasGemmEx(t->blas.handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, i & 1 ? t->gb : t->ga,
                                  CUDA_R_16BF, n, i & 1 ? t->ga : t->gb, CUDA_R_16BF, n, &zero, t->gc[i],
                                  CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    BENCH_DS_CHECK(ds_vctx_release_stream(v));
    return 0;
}

static int launch(ds_vctx_t v, CUfunction f, uint32_t grid, void **params)
{
    ds_dim3 g = {grid, 1, 1}, blk = {PAIRS_THREADS, 1, 1};
    BENCH_DS_CHECK(ds_launch(v, f, g, blk, 0, params, NULL));
    return 0;
}

/* Gradient norm, then AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8, wd 0.01). */
static int optimizer(pairs_tenant *t, ds_vctx_t v, uint64_t step)
{
    cuda_backend *b = t->b;
    unsigned long long n = t->params;
    unsigned int parts = PAIRS_GRID;
    float lr = 1e-4f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    float bc1 = 1.f - powf(b1, (float)step), bc2 = 1.f - powf(b2, (float)step);
    if (!(bc1 > 0.f))
        bc1 = 1.f;
    if (!(bc2 > 0.f))
        bc2 = 1.f;
    void *partial_params[] = {&t->grad, &n, &t->partial};
    void *final_params[] = {&t->partial, &parts, &t->norm2};
    void *adamw_params[] = {&t->param, &t->m, &t->v, &t->grad, &n, &lr, &b1, &b2, &eps, &wd, &bc1, &bc2};
    if (launch(v, b->sumsq_partial, PAIRS_GRID, partial_params) || launch(v, b->sumsq_final, 1, final_params) ||
        launch(v, b->adamw, PAIRS_GRID, adamw_params))
        return -1;
    return 0;
}

static int mark_end(pairs_tenant *t, ds_vctx_t v, uint64_t step)
{
    if (!t->use_events)
        return 0;
    CUstream s;
    BENCH_DS_CHECK(ds_vctx_acquire_stream(v, &s));
    cudaError_t e = cudaEventRecord(t->done[step % 2], s);
    BENCH_DS_CHECK(ds_vctx_release_stream(v));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        fprintf(stderr, "pairs: cudaEventRecord on a pCtx stream -> %s; synchronizing every other step instead\n",
                cudaGetErrorName(e));
        t->use_events = 0;
    }
    return 0;
}

static int cuda_submit(pairs_tenant *t, ds_vctx_t v, step_progress *p)
{
    if ((gemm_count(t->kind) && gemms(t, v)) || (t->params && optimizer(t, v, p->submitted + 1)) ||
        mark_end(t, v, p->submitted))
        return -1;
    p->submitted++;
    return 0;
}

static int cuda_retire(pairs_tenant *t, ds_vctx_t v, step_progress *p)
{
    if (!t->use_events) {
        if (p->submitted - p->completed >= 2) {
            BENCH_DS_CHECK(ds_vctx_synchronize(v));
            p->completed = p->submitted;
        }
        return 0;
    }
    while (p->submitted - p->completed >= 2) {
        CUDA_CHECK(cudaEventSynchronize(t->done[p->completed % 2]));
        p->completed++;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* life cycle                                                                */

static int cuda_thread_init(pairs_backend *base)
{
    CUDA_CHECK(cudaSetDevice(((cuda_backend *)base)->ordinal));
    return 0;
}

static void cuda_destroy(pairs_backend *base)
{
    cuda_backend *b = (cuda_backend *)base;
    cudaDeviceSynchronize();
    for (int k = 0; k < KIND_COUNT; k++)
        for (int s = 0; s < 2; s++)
            tenant_free(&b->tenants[k][s]);
    if (b->module)
        b->cu.cuModuleUnload(b->module);
    free(b);
}

static int get_function(cuda_backend *b, const char *name, CUfunction *f)
{
    CU_CHECK(b, b->cu.cuModuleGetFunction(f, b->module, name));
    return 0;
}

static int setup(cuda_backend *b)
{
    CUDA_CHECK(cudaSetDevice(b->ordinal));
    if (bench_driver_api_load(&b->cu))
        return -1;
    CU_CHECK(b, b->cu.cuModuleLoadData(&b->module, pairs_kernels_fatbin));
    if (get_function(b, "colo_fill_bf16", &b->fill_bf16) || get_function(b, "colo_fill_f32", &b->fill_f32) ||
        get_function(b, "colo_adamw", &b->adamw) || get_function(b, "colo_sumsq_partial", &b->sumsq_partial) ||
        get_function(b, "colo_sumsq_final", &b->sumsq_final))
        return -1;
    return 0;
}

int pairs_cuda_create(ds_runtime_t rt, int ordinal, pairs_backend **out)
{
    (void)rt;
    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) {
        fprintf(stderr, "pairs_cuda_create: out of memory\n");
        return -1;
    }
    b->base = (pairs_backend){"cuda", cuda_thread_init, cuda_tenant_get, cuda_submit, cuda_retire, cuda_destroy};
    b->ordinal = ordinal;
    if (setup(b)) {
        cuda_destroy(&b->base);
        return -1;
    }
    *out = &b->base;
    return 0;
}
