/*
 * Semantic determinism on the real GPU (docs/benchmarks.md, W3, small): an LM head
 * (bf16 [128256][4096] weights, batch 1-16, fp32 accumulation in a fixed
 * order), softmax and argmax, all through ds_launch on one vCtx, with the
 * benchmark's own kernels (bench/determinism/kernels.cu, embedded here as
 * gpu_det_fatbin).
 *
 * TRIALS trials run alone on the whole GPU (the reference), then again while a
 * BE vCtx on another thread runs a random load (random widths and durations,
 * idle gaps, moving itself between pCtxs), the LS vCtx being remapped before
 * each trial to the next pCtx of a rotation over the whole pool (policy
 * "manual"), with a built-in policy switched in for every tenth trial. Every
 * co-located trial must give the reference's bits: row 0's logits compared
 * element by element, every row's logits and probabilities through a 64-bit
 * hash of their bytes, every token.
 *
 * The comparison can fail: every output is checked to be real (poisoned with
 * NaN before each trial; finite, not constant, probabilities summing to 1,
 * tokens equal to the host's argmax; a few logits against double-precision
 * dot products on the host), and a positive control runs the same trial with
 * the reduction split in 3 chunks and requires the bits to change.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_fixture.h"

#include "../../bench/determinism/det_hash.h"
#include "../../bench/determinism/det_kernels.h"

extern const unsigned char gpu_det_fatbin[];
extern const size_t gpu_det_fatbin_size;

#define TRIALS 50
#define POLICY_EVERY 10
#define DET_SEED 0xD37E5EEDull

static const char *const POLICIES[] = {"slo_aware", "tpot_first", "shared", "priority", "static", "temporal"};
#define NUM_POLICIES (sizeof POLICIES / sizeof POLICIES[0])

typedef struct det_env {
    gpu_env e;
    CUmodule mod;
    CUfunction fill_bf16, fill_u32, lm_head, combine, softmax, argmax, be_burn;
    CUdeviceptr w, x, logits, probs, tokens, partials, be_buf;
    float *h_logits, *h_probs;
    int32_t h_tokens[DET_MAX_BATCH];
} det_env;

typedef struct ref_out {
    uint32_t batch;
    uint64_t seed;
    uint64_t logits_hash, probs_hash;
    int32_t tokens[DET_MAX_BATCH];
    float *row0; /* logits of batch row 0, [DET_VOCAB] */
} ref_out;

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */

static CUfunction det_fn(det_env *d, const char *name)
{
    CUfunction f = NULL;
    GPU_CU(&d->e, cuModuleGetFunction(&f, d->mod, name));
    cr_assert_not_null(f, "cuModuleGetFunction(%s) gave NULL", name);
    return f;
}

static void launch(ds_vctx_t v, CUfunction f, uint32_t grid, uint32_t threads, void **params)
{
    GPU_DS(ds_launch(v, f, (ds_dim3){grid, 1, 1}, (ds_dim3){threads, 1, 1}, 0, params, NULL));
}

static void fill_u32(det_env *d, ds_vctx_t v, CUdeviceptr p, unsigned long long n, unsigned value)
{
    void *params[] = {&p, &n, &value};
    launch(v, d->fill_u32, DET_FILL_GRID, DET_FILL_THREADS, params);
}

static void fill_bf16(det_env *d, ds_vctx_t v, CUdeviceptr p, unsigned long long n, unsigned long long seed,
                      float scale)
{
    void *params[] = {&p, &n, &seed, &scale};
    launch(v, d->fill_bf16, DET_FILL_GRID, DET_FILL_THREADS, params);
}

static int slice_bound(uint32_t slices, uint32_t c)
{
    return (int)(((long long)(DET_HIDDEN / DET_VEC) * c) / slices) * DET_VEC;
}

static void head(det_env *d, ds_vctx_t v, CUdeviceptr out, int batch, int k0, int k1)
{
    int hidden = DET_HIDDEN, vocab = DET_VOCAB;
    void *params[] = {&d->w, &d->x, &out, &batch, &hidden, &vocab, &k0, &k1};
    launch(v, d->lm_head, DET_HEAD_GRID(DET_VOCAB), DET_HEAD_THREADS, params);
}

/* One trial on v: poison, inputs, LM head (split in `slices` chunks if > 1),
 * softmax, argmax; then wait and read everything back. */
static void trial(det_env *d, ds_vctx_t v, uint32_t batch, uint64_t seed, uint32_t slices, uint32_t *pctx)
{
    const unsigned long long nbv = (unsigned long long)batch * DET_VOCAB;
    int b = (int)batch, vocab = DET_VOCAB;
    fill_u32(d, v, d->logits, nbv, DET_POISON_F32);
    fill_u32(d, v, d->probs, nbv, DET_POISON_F32);
    fill_u32(d, v, d->tokens, batch, DET_POISON_TOKEN);
    fill_bf16(d, v, d->x, (unsigned long long)batch * DET_HIDDEN, seed, DET_X_SCALE);
    if (slices <= 1) {
        head(d, v, d->logits, b, 0, DET_HIDDEN);
    } else {
        for (uint32_t s = 0; s < slices; s++)
            head(d, v, d->partials + (CUdeviceptr)s * nbv * sizeof(float), b, slice_bound(slices, s),
                 slice_bound(slices, s + 1));
        int k = (int)slices, bf16 = 0;
        unsigned long long n = nbv;
        void *params[] = {&d->partials, &k, &n, &d->logits, &bf16};
        launch(v, d->combine, DET_FILL_GRID, DET_FILL_THREADS, params);
    }
    void *sp[] = {&d->logits, &d->probs, &vocab};
    void *ap[] = {&d->probs, &d->tokens, &vocab};
    launch(v, d->softmax, batch, DET_ROW_THREADS, sp);
    launch(v, d->argmax, batch, DET_ROW_THREADS, ap);
    GPU_DS(ds_vctx_get_pctx(v, pctx));
    GPU_DS(ds_vctx_synchronize(v));
    gpu_read(&d->e, d->h_logits, d->logits, nbv * sizeof(float));
    gpu_read(&d->e, d->h_probs, d->probs, nbv * sizeof(float));
    gpu_read(&d->e, d->h_tokens, d->tokens, batch * sizeof(int32_t));
}

/* The outputs are real: finite, not constant, rows of probabilities summing
 * to 1, tokens at the largest probability (lowest index on ties). */
static void check_real(const det_env *d, uint32_t batch, uint32_t trial_index)
{
    for (uint32_t b = 0; b < batch; b++) {
        const float *l = d->h_logits + (size_t)b * DET_VOCAB, *p = d->h_probs + (size_t)b * DET_VOCAB;
        double sum = 0.0;
        float lo = INFINITY, hi = -INFINITY;
        uint32_t best = 0;
        for (uint32_t i = 0; i < DET_VOCAB; i++) {
            cr_assert(isfinite(l[i]) && p[i] >= 0.f && p[i] <= 1.f,
                      "trial %u row %u index %u: logit %g, probability %g", trial_index, b, i, l[i], p[i]);
            lo = fminf(lo, l[i]);
            hi = fmaxf(hi, l[i]);
            sum += p[i];
            if (p[i] > p[best])
                best = i;
        }
        cr_assert_gt(hi, lo, "trial %u row %u: every logit is %g", trial_index, b, lo);
        cr_assert_lt(fabs(sum - 1.0), 1e-3, "trial %u row %u: probabilities sum to %.6f", trial_index, b, sum);
        cr_assert_eq(d->h_tokens[b], (int32_t)best, "trial %u row %u: token %d, largest probability at %u",
                     trial_index, b, d->h_tokens[b], best);
    }
}

static void record(const det_env *d, uint32_t batch, ref_out *o)
{
    const size_t bytes = (size_t)batch * DET_VOCAB * sizeof(float);
    o->logits_hash = det_hash_bytes(DET_HASH_INIT, d->h_logits, bytes);
    o->probs_hash = det_hash_bytes(DET_HASH_INIT, d->h_probs, bytes);
    memcpy(o->tokens, d->h_tokens, batch * sizeof(int32_t));
}

static float bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A few logits of the last trial against double-precision dot products. */
static void check_against_host(det_env *d, uint32_t batch)
{
    static const uint32_t rows[] = {0, 7, DET_VOCAB / 3, DET_VOCAB - 1};
    uint16_t *x = malloc((size_t)batch * DET_HIDDEN * sizeof *x), *w = malloc(DET_HIDDEN * sizeof *w);
    cr_assert(x && w);
    gpu_read(&d->e, x, d->x, (size_t)batch * DET_HIDDEN * sizeof *x);
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        gpu_read(&d->e, w, d->w + (CUdeviceptr)rows[r] * DET_HIDDEN * sizeof *w, DET_HIDDEN * sizeof *w);
        for (uint32_t b = 0; b < batch; b++) {
            double ref = 0.0, mag = 0.0;
            for (int k = 0; k < DET_HIDDEN; k++) {
                const double p = (double)bf16_to_float(w[k]) * (double)bf16_to_float(x[(size_t)b * DET_HIDDEN + k]);
                ref += p;
                mag += fabs(p);
            }
            const double got = d->h_logits[(size_t)b * DET_VOCAB + rows[r]];
            cr_assert_gt(mag, 0.0);
            cr_assert_leq(fabs(got - ref), 1e-5 * mag, "logit[%u][%u] = %.9g, host double %.9g", b, rows[r], got,
                          ref);
        }
    }
    free(x);
    free(w);
}

/* ------------------------------------------------------------------------ */
/* best-effort load on its own thread                                        */

typedef struct be_load {
    det_env *d;
    ds_vctx_t v;
    uint32_t num_pctx, sms;
    atomic_int stop;
    ds_status first_error;
    const char *where;
    unsigned kernels, idles;
} be_load;

#define BE_TRY(be, call)                                                                          \
    do {                                                                                          \
        ds_status s_ = (call);                                                                    \
        if (s_ != DS_SUCCESS) {                                                                   \
            (be)->first_error = s_;                                                               \
            (be)->where = #call;                                                                  \
            return NULL;                                                                          \
        }                                                                                         \
    } while (0)

static void *be_main(void *arg)
{
    be_load *be = arg;
    gpu_rng r = {DET_SEED ^ 0xBEull};
    unsigned long long n = DET_BE_BUF_FLOATS;
    while (!atomic_load(&be->stop)) {
        const uint32_t u = gpu_rng_below(&r, 100);
        if (u < 15) { /* idle 50 us - 2 ms */
            be->idles++;
            gpu_sleep_us(50 + gpu_rng_below(&r, 1950));
            continue;
        }
        if (u < 30)
            BE_TRY(be, ds_vctx_remap(be->v, gpu_rng_below(&r, be->num_pctx)));
        /* 5-125% of the device's SMs, blocks of ~10 us - 2 ms */
        const uint32_t grid = 1 + be->sms / 20 + gpu_rng_below(&r, be->sms * 6 / 5);
        unsigned iters = 4000 + gpu_rng_below(&r, 800000);
        void *params[] = {&be->d->be_buf, &n, &iters};
        BE_TRY(be, ds_launch(be->v, be->d->be_burn, (ds_dim3){grid, 1, 1}, (ds_dim3){DET_BE_THREADS, 1, 1}, 0,
                             params, NULL));
        be->kernels++;
        BE_TRY(be, ds_vctx_synchronize(be->v));
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */

static void det_open(det_env *d)
{
    memset(d, 0, sizeof *d);
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_CUDA;
    cfg.policy = "manual"; /* forced remaps must stick */
    gpu_open(&d->e, &cfg);
    GPU_CU(&d->e, cuModuleLoadData(&d->mod, gpu_det_fatbin));
    d->fill_bf16 = det_fn(d, "det_fill_bf16");
    d->fill_u32 = det_fn(d, "det_fill_u32");
    d->lm_head = det_fn(d, "det_lm_head");
    d->combine = det_fn(d, "det_combine");
    d->softmax = det_fn(d, "det_softmax");
    d->argmax = det_fn(d, "det_argmax");
    d->be_burn = det_fn(d, "det_be_burn");
    const size_t bv = (size_t)DET_MAX_BATCH * DET_VOCAB;
    d->w = gpu_alloc(&d->e, (size_t)DET_VOCAB * DET_HIDDEN * 2);
    d->x = gpu_alloc(&d->e, (size_t)DET_MAX_BATCH * DET_HIDDEN * 2);
    d->logits = gpu_alloc(&d->e, bv * 4);
    d->probs = gpu_alloc(&d->e, bv * 4);
    d->tokens = gpu_alloc(&d->e, DET_MAX_BATCH * 4);
    d->partials = gpu_alloc(&d->e, 3 * bv * 4);
    d->be_buf = gpu_alloc(&d->e, (size_t)DET_BE_BUF_FLOATS * 4);
    d->h_logits = malloc(bv * sizeof(float));
    d->h_probs = malloc(bv * sizeof(float));
    cr_assert(d->h_logits && d->h_probs);
}

static void det_close(det_env *d)
{
    CUdeviceptr bufs[] = {d->w, d->x, d->logits, d->probs, d->tokens, d->partials, d->be_buf};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu_free(&d->e, bufs[i]);
    GPU_CU(&d->e, cuModuleUnload(d->mod));
    free(d->h_logits);
    free(d->h_probs);
    gpu_close(&d->e);
}

Test(determinism, lm_head_bitwise_under_colocation_and_remaps, .timeout = 240)
{
    det_env d;
    det_open(&d);
    const ds_runtime_info *info = &d.e.info;
    uint32_t full = 0;
    for (uint32_t i = 0; i < info->num_pctx; i++)
        if (info->pctx[i].anchor == DS_ANCHOR_FULL)
            full = i;
    ds_vctx_t ls = gpu_vctx(&d.e, "ls", DS_CLASS_LATENCY_SENSITIVE, (int32_t)full);
    ds_vctx_t bev = gpu_vctx(&d.e, "be", DS_CLASS_BEST_EFFORT, (int32_t)full);

    /* weights: random, non-zero; set up through the LS vCtx */
    fill_bf16(&d, ls, d.w, (unsigned long long)DET_VOCAB * DET_HIDDEN, DET_W_SEED, DET_W_SCALE);
    fill_u32(&d, ls, d.be_buf, DET_BE_BUF_FLOATS, 0x3F800000u);
    GPU_DS(ds_vctx_synchronize(ls));

    gpu_rng r = {DET_SEED};
    static ref_out ref[TRIALS];
    for (int i = 0; i < TRIALS; i++) {
        ref[i].batch = 1 + gpu_rng_below(&r, DET_MAX_BATCH);
        ref[i].seed = gpu_rng_next(&r);
        ref[i].row0 = malloc(DET_VOCAB * sizeof(float));
        cr_assert_not_null(ref[i].row0);
    }
    ref[0].batch = DET_MAX_BATCH; /* the widest batch at least once */

    /* warm-up (module loading), then the reference, alone on the whole GPU */
    uint32_t p;
    trial(&d, ls, ref[0].batch, ref[0].seed, 1, &p);
    trial(&d, ls, ref[0].batch, ref[0].seed, 3, &p);
    for (int i = 0; i < TRIALS; i++) {
        trial(&d, ls, ref[i].batch, ref[i].seed, 1, &p);
        cr_assert_eq(p, full);
        check_real(&d, ref[i].batch, (uint32_t)i);
        if (i == 0)
            check_against_host(&d, ref[i].batch);
        record(&d, ref[i].batch, &ref[i]);
        memcpy(ref[i].row0, d.h_logits, DET_VOCAB * sizeof(float));
    }

    /* co-located: BE load on another thread, LS remapped before each trial */
    be_load be = {.d = &d, .v = bev, .num_pctx = info->num_pctx, .sms = info->sm_count,
                  .first_error = DS_SUCCESS, .where = ""};
    atomic_init(&be.stop, 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, be_main, &be), 0);
    gpu_sleep_us(20000);
    uint32_t visits[DS_MAX_PCTX] = {0};
    uint32_t rotation = 0, mismatches = 0, policy_trials = 0;
    for (int i = 0; i < TRIALS; i++) {
        int policy = -1;
        uint32_t want = 0;
        if (i % POLICY_EVERY == POLICY_EVERY - 1) {
            policy = (int)gpu_rng_below(&r, NUM_POLICIES);
            GPU_DS(ds_runtime_set_policy(d.e.rt, POLICIES[policy]));
            policy_trials++;
        } else {
            want = rotation++ % info->num_pctx;
            GPU_DS(ds_vctx_remap(ls, want));
        }
        trial(&d, ls, ref[i].batch, ref[i].seed, 1, &p);
        if (policy >= 0)
            GPU_DS(ds_runtime_set_policy(d.e.rt, "manual"));
        else
            cr_assert_eq(p, want, "trial %d ran on pCtx %u, remap asked %u", i, p, want);
        cr_assert_lt(p, info->num_pctx);
        visits[p]++;
        check_real(&d, ref[i].batch, (uint32_t)i);
        ref_out got;
        record(&d, ref[i].batch, &got);
        size_t row0_diff = 0;
        for (uint32_t k = 0; k < DET_VOCAB; k++) {
            uint32_t a, b;
            memcpy(&a, &d.h_logits[k], 4);
            memcpy(&b, &ref[i].row0[k], 4);
            row0_diff += a != b;
        }
        const int tokens_differ = memcmp(got.tokens, ref[i].tokens, ref[i].batch * sizeof(int32_t)) != 0;
        if (row0_diff || got.logits_hash != ref[i].logits_hash || got.probs_hash != ref[i].probs_hash ||
            tokens_differ) {
            mismatches++;
            cr_log_error("trial %d (batch %u) on pCtx %u (%u SMs%s%s): %zu of row 0's logits differ, logits hash %s, "
                         "probs hash %s, tokens %s",
                         i, ref[i].batch, p, info->pctx[p].sm_count, policy >= 0 ? ", policy " : "",
                         policy >= 0 ? POLICIES[policy] : "", row0_diff,
                         got.logits_hash != ref[i].logits_hash ? "differs" : "equal",
                         got.probs_hash != ref[i].probs_hash ? "differs" : "equal", tokens_differ ? "differ" : "equal");
        }
    }

    /* positive control: the same trial with the reduction split in 3 chunks
     * (what a kernel-slicing system does) must change the bits, but not the
     * numbers beyond rounding */
    GPU_DS(ds_vctx_remap(ls, full));
    trial(&d, ls, ref[0].batch, ref[0].seed, 3, &p);
    check_real(&d, ref[0].batch, 0);
    ref_out sliced;
    record(&d, ref[0].batch, &sliced);
    size_t changed = 0;
    double max_diff = 0.0;
    for (uint32_t k = 0; k < DET_VOCAB; k++) {
        changed += d.h_logits[k] != ref[0].row0[k];
        const double diff = fabs((double)d.h_logits[k] - (double)ref[0].row0[k]);
        max_diff = diff > max_diff ? diff : max_diff;
    }

    atomic_store(&be.stop, 1);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(be.first_error, DS_SUCCESS, "BE thread: %s -> %s", be.where, ds_status_name(be.first_error));

    cr_log_info("%d trials co-located (%u under a switched-in policy), BE %u kernels, %u idle gaps; pCtx visits:",
                TRIALS, policy_trials, be.kernels, be.idles);
    for (uint32_t i = 0; i < info->num_pctx; i++) {
        cr_log_info("  pCtx %u (%u SMs): %u trials", i, info->pctx[i].sm_count, visits[i]);
        cr_assert_gt(visits[i], 0, "pCtx %u was never visited", i);
    }
    cr_log_info("control: 3-chunk slicing changed %zu of %u row-0 logits (max |diff| %.3g)", changed, DET_VOCAB,
                max_diff);
    cr_assert_gt(be.kernels, 0, "the BE load never ran");
    cr_assert_eq(mismatches, 0, "%u of %d co-located trials differ from their standalone run", mismatches, TRIALS);
    cr_assert(sliced.logits_hash != ref[0].logits_hash && changed > 0,
              "control: splitting the reduction left every bit unchanged; the comparison could not fail");
    cr_assert_lt(max_diff, 1e-4, "control: split reduction off by %.3g", max_diff);

    for (int i = 0; i < TRIALS; i++)
        free(ref[i].row0);
    GPU_DS(ds_vctx_destroy(bev));
    GPU_DS(ds_vctx_destroy(ls));
    det_close(&d);
}
