/*
 * cuBLAS audit of the determinism benchmark (docs/benchmarks.md, W3): GEMMs of a few
 * LLM shapes and dtypes, each run
 *   - on the default (legacy) stream: the reference, then once more (control:
 *     cuBLAS repeats itself on the same stream);
 *   - in a section (ds_vctx_acquire_stream -> cublasSetStream) on every pCtx of
 *     the pool, as libdetshare runs library work;
 *   - the same with cublasSetSmCountTarget(handle, the pCtx's SM count): what a
 *     library that adapts its kernel choice to the partition does to the bits.
 * Every output is compared bit for bit with the reference.
 *
 * GEMM, row-major: out[m][n] = in[m][k] . W[n][k]^T (a linear layer over m
 * tokens). Column-major cuBLAS sees W as k x n (OP_T), in as k x m, out as n x m.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

#include "bench.h"
#include "cuda_entry.h"
#include "det_cuda.h"
#include "determinism.h"

#define CUBLAS_CHECK(call) BENCH_CUBLAS_CHECK(call)


#define WORKSPACE_BYTES (32u << 20) /* cuBLAS's recommendation on Hopper */

typedef struct shape {
    int m, k, n;
} shape;

static const shape SHAPES[] = {
    {16, 4096, 4096},    /* decode projection */
    {128, 4096, 11008},  /* MLP up-projection, small prefill */
    {1, 4096, 128256},   /* LM head, one token */
    {4096, 4096, 4096},  /* training-sized square */
};
#define NUM_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

typedef struct dtype_spec {
    const char *name;
    cudaDataType ab, c;
    cublasComputeType_t compute;
    int in_bytes, out_bytes;
    int fill;
} dtype_spec;

static const dtype_spec DTYPES[] = {
    {"bf16", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2, 2, DET_FILL_BF16},
    {"fp16", CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, 2, 2, DET_FILL_F16},
    {"fp32", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 4, 4, DET_FILL_F32},               /* tf32 off */
    {"tf32", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4, 4, DET_FILL_F32},     /* tf32 on */
};
#define NUM_DTYPES (sizeof DTYPES / sizeof DTYPES[0])

typedef struct audit {
    ds_runtime_t rt;
    const ds_runtime_info *info;
    ds_vctx_t v;
    det_backend *b;
    cublasHandle_t h;
    void *workspace;
    void *a, *w, *c;        /* device: in, weights, out */
    unsigned char *ref, *got; /* pinned host copies of out */
    det_audit_row *rows;
    size_t count, cap;
} audit;

static double half_to_double(uint16_t h)
{
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0)
        return s * ldexp((double)m, -24);
    if (e == 31)
        return m ? NAN : s * INFINITY;
    return s * ldexp((double)(m | 0x400), e - 25);
}

static double element(const unsigned char *p, size_t i, const dtype_spec *d)
{
    if (d->out_bytes == 4) {
        float f;
        memcpy(&f, p + i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + i * 2, 2);
    if (d->c == CUDA_R_16F)
        return half_to_double(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int gemm(audit *au, const shape *s, const dtype_spec *d)
{
    const float one = 1.f, zero = 0.f;
    CUBLAS_CHECK(cublasGemmEx(au->h, CUBLAS_OP_T, CUBLAS_OP_N, s->n, s->m, s->k, &one, au->w, d->ab, s->k, au->a,
                              d->ab, s->k, &zero, au->c, d->c, s->n, d->compute, CUBLAS_GEMM_DEFAULT));
    return 0;
}

/* Poisons the output (all bits set: NaN in every dtype) on v, so a GEMM that
 * did not run cannot pass for one that did. */
static int poison(audit *au, const shape *s, const dtype_spec *d)
{
    const unsigned long long bytes = (unsigned long long)s->m * s->n * d->out_bytes;
    if (det_cuda_fill(au->b, au->v, au->c, bytes / 4, DET_FILL_U32, 0xFFFFFFFFu, 0.f))
        return -1;
    BENCH_DS_CHECK(ds_vctx_synchronize(au->v));
    return 0;
}

static int run_default_stream(audit *au, const shape *s, const dtype_spec *d, double *ms)
{
    if (poison(au, s, d))
        return -1;
    CUBLAS_CHECK(cublasSetStream(au->h, NULL));
    CUBLAS_CHECK(cublasSetWorkspace(au->h, au->workspace, WORKSPACE_BYTES));
    CUBLAS_CHECK(cublasSetSmCountTarget(au->h, 0));
    uint64_t t0 = bench_now_ns();
    if (gemm(au, s, d))
        return -1;
    CUDA_CHECK(cudaStreamSynchronize(NULL));
    *ms = (double)(bench_now_ns() - t0) / 1e6;
    return 0;
}

/* In a section on pCtx p, with the SM-count target (0: unset). */
static int run_section(audit *au, const shape *s, const dtype_spec *d, uint32_t p, int target, double *ms)
{
    if (poison(au, s, d))
        return -1;
    BENCH_DS_CHECK(ds_vctx_remap(au->v, p));
    CUstream st;
    BENCH_DS_CHECK(ds_vctx_acquire_stream(au->v, &st));
    uint32_t bound = UINT32_MAX;
    int rc = -1;
    if (ds_vctx_get_pctx(au->v, &bound) != DS_SUCCESS || bound != p) {
        fprintf(stderr, "cublas audit: the section runs on pCtx %u, not %u\n", bound, p);
        goto release;
    }
    cublasStatus_t bs = cublasSetStream(au->h, st);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetWorkspace(au->h, au->workspace, WORKSPACE_BYTES);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetSmCountTarget(au->h, target);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublas audit: setting up the handle on pCtx %u -> %s\n", p, cublasGetStatusName(bs));
        goto release;
    }
    uint64_t t0 = bench_now_ns();
    if (gemm(au, s, d))
        goto release;
    cudaError_t e = cudaStreamSynchronize(st);
    *ms = (double)(bench_now_ns() - t0) / 1e6;
    if (e != cudaSuccess) {
        fprintf(stderr, "cublas audit: cudaStreamSynchronize -> %s\n", cudaGetErrorName(e));
        goto release;
    }
    rc = 0;
release:;
    ds_status rs = ds_vctx_release_stream(au->v);
    if (rs != DS_SUCCESS) {
        fprintf(stderr, "cublas audit: ds_vctx_release_stream -> %s\n", ds_status_name(rs));
        rc = -1;
    }
    CUBLAS_CHECK(cublasSetSmCountTarget(au->h, 0));
    CUBLAS_CHECK(cublasSetStream(au->h, NULL));
    return rc;
}

static int add_row(audit *au, const shape *s, const dtype_spec *d, int32_t pctx, uint32_t sms, int target,
                   double ms)
{
    const size_t n = (size_t)s->m * s->n, bytes = n * d->out_bytes;
    CUDA_CHECK(cudaMemcpy(au->got, au->c, bytes, cudaMemcpyDeviceToHost));
    if (au->count == au->cap) {
        size_t cap = au->cap ? 2 * au->cap : 64;
        det_audit_row *r = realloc(au->rows, cap * sizeof *r);
        if (!r) {
            fprintf(stderr, "cublas audit: out of memory\n");
            return -1;
        }
        au->rows = r;
        au->cap = cap;
    }
    det_audit_row *r = &au->rows[au->count++];
    memset(r, 0, sizeof *r);
    snprintf(r->shape, sizeof r->shape, "%dx%dx%d", s->m, s->k, s->n);
    r->m = s->m;
    r->k = s->k;
    r->n = s->n;
    r->dtype = d->name;
    r->pctx = pctx;
    r->sms = sms;
    r->sm_count_target = target;
    r->ms = ms;
    r->bitwise_equal = memcmp(au->got, au->ref, bytes) == 0;
    if (!r->bitwise_equal)
        for (size_t i = 0; i < n; i++) {
            const double a = element(au->got, i, d), b = element(au->ref, i, d);
            if (memcmp(au->got + i * d->out_bytes, au->ref + i * d->out_bytes, d->out_bytes)) {
                r->mismatched_elements++;
                const double diff = fabs(a - b);
                if (!(diff <= r->max_abs_diff)) /* NaN propagates */
                    r->max_abs_diff = diff;
            }
        }
    return 0;
}

/* The reference must be real numbers, not poison or zeros. */
static int check_reference(const audit *au, const shape *s, const dtype_spec *d)
{
    const size_t n = (size_t)s->m * s->n;
    size_t zeros = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = element(au->ref, i, d);
        if (!isfinite(x)) {
            fprintf(stderr, "cublas audit: %dx%dx%d %s: reference element %zu is not finite\n", s->m, s->k, s->n,
                    d->name, i);
            return -1;
        }
        zeros += x == 0.0;
    }
    if (zeros > n / 100) {
        fprintf(stderr, "cublas audit: %dx%dx%d %s: %zu of %zu reference elements are 0\n", s->m, s->k, s->n,
                d->name, zeros, n);
        return -1;
    }
    return 0;
}

static int audit_one(audit *au, const shape *s, const dtype_spec *d)
{
    /* Inputs: random, non-zero, of LLM magnitudes (see det_kernels.h). */
    if (det_cuda_fill(au->b, au->v, au->a, (unsigned long long)s->m * s->k, d->fill, 0xA0 + (uint64_t)s->n, 1.f) ||
        det_cuda_fill(au->b, au->v, au->w, (unsigned long long)s->n * s->k, d->fill, 0xB0 + (uint64_t)s->m,
                      DET_W_SCALE))
        return -1;
    BENCH_DS_CHECK(ds_vctx_synchronize(au->v));
    double ms;
    /* warm-up (cuBLAS loads kernels lazily), then the reference */
    if (run_default_stream(au, s, d, &ms) || run_default_stream(au, s, d, &ms))
        return -1;
    const size_t bytes = (size_t)s->m * s->n * d->out_bytes;
    CUDA_CHECK(cudaMemcpy(au->ref, au->c, bytes, cudaMemcpyDeviceToHost));
    if (check_reference(au, s, d))
        return -1;
    /* control: the default stream once more */
    if (run_default_stream(au, s, d, &ms) || add_row(au, s, d, -1, au->info->sm_count, 0, ms))
        return -1;
    for (int with_target = 0; with_target < 2; with_target++)
        for (uint32_t p = 0; p < au->info->num_pctx; p++) {
            const uint32_t sms = au->info->pctx[p].sm_count;
            const int target = with_target ? (int)sms : 0;
            if (run_section(au, s, d, p, target, &ms) || add_row(au, s, d, (int32_t)p, sms, target, ms))
                return -1;
        }
    return 0;
}

static int audit_setup(audit *au)
{
    size_t a_max = 0, w_max = 0, c_max = 0;
    for (size_t i = 0; i < NUM_SHAPES; i++) {
        const shape *s = &SHAPES[i];
        size_t a = (size_t)s->m * s->k * 4, w = (size_t)s->n * s->k * 4, c = (size_t)s->m * s->n * 4;
        a_max = a > a_max ? a : a_max;
        w_max = w > w_max ? w : w_max;
        c_max = c > c_max ? c : c_max;
    }
    CUBLAS_CHECK(cublasCreate(&au->h));
    CUDA_CHECK(cudaMalloc(&au->workspace, WORKSPACE_BYTES));
    CUDA_CHECK(cudaMalloc(&au->a, a_max));
    CUDA_CHECK(cudaMalloc(&au->w, w_max));
    CUDA_CHECK(cudaMalloc(&au->c, c_max));
    CUDA_CHECK(cudaMallocHost((void **)&au->ref, c_max));
    CUDA_CHECK(cudaMallocHost((void **)&au->got, c_max));
    return 0;
}

static void audit_teardown(audit *au)
{
    cudaDeviceSynchronize();
    if (au->h)
        cublasDestroy(au->h);
    void *dev[] = {au->workspace, au->a, au->w, au->c};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i])
            cudaFree(dev[i]);
    if (au->ref)
        cudaFreeHost(au->ref);
    if (au->got)
        cudaFreeHost(au->got);
}

static int full_pctx(const ds_runtime_info *info)
{
    for (uint32_t i = 0; i < info->num_pctx; i++)
        if (info->pctx[i].anchor == DS_ANCHOR_FULL)
            return (int)i;
    return 0;
}

int det_cublas_audit(ds_runtime_t rt, const ds_runtime_info *info, ds_vctx_t v, det_backend *b,
                     det_audit_row **rows, size_t *count)
{
    audit au;
    memset(&au, 0, sizeof au);
    au.rt = rt;
    au.info = info;
    au.v = v;
    au.b = b;
    int rc = audit_setup(&au);
    for (size_t i = 0; rc == 0 && i < NUM_SHAPES; i++)
        for (size_t j = 0; rc == 0 && j < NUM_DTYPES; j++) {
            rc = audit_one(&au, &SHAPES[i], &DTYPES[j]);
            if (rc == 0) {
                size_t eq = 0, eq_t = 0, n = 0, n_t = 0;
                for (size_t r = au.count; r-- > 0;) {
                    const det_audit_row *row = &au.rows[r];
                    if (row->m != SHAPES[i].m || row->n != SHAPES[i].n || row->k != SHAPES[i].k ||
                        row->dtype != DTYPES[j].name)
                        break;
                    if (row->sm_count_target) {
                        n_t++;
                        eq_t += (size_t)row->bitwise_equal;
                    } else {
                        n++;
                        eq += (size_t)row->bitwise_equal;
                    }
                }
                printf("cublas audit %dx%dx%d %-4s: %zu/%zu bitwise equal (default stream, pCtx sections), "
                       "%zu/%zu with SmCountTarget\n",
                       SHAPES[i].m, SHAPES[i].k, SHAPES[i].n, DTYPES[j].name, eq, n, eq_t, n_t);
                fflush(stdout);
            }
        }
    audit_teardown(&au);
    if (ds_vctx_remap(v, (uint32_t)full_pctx(info)) != DS_SUCCESS)
        rc = -1;
    if (rc) {
        free(au.rows);
        return -1;
    }
    *rows = au.rows;
    *count = au.count;
    return 0;
}
