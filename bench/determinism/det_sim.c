/*
 * Simulated back end of the determinism benchmark (determinism.h).
 *
 * Simulated kernels compute nothing, so the LS tenant's outputs are computed
 * on the host, but from what the simulated device recorded, not from what the
 * host meant to launch: after each trial the kernel trace is read back and
 *   - the inputs come from the seed and batch in the fill kernel's recorded
 *     parameters;
 *   - each LM-head launch contributes the dot products over its recorded chunk
 *     [k0, k1), reduced in the order the real kernel (kernels.cu) uses for the
 *     recorded block shape: DET_HEAD_WARPS rows at a time, one per group of
 *     block.x / DET_HEAD_WARPS lanes, each lane striding over k, then a xor
 *     butterfly over the lanes;
 *   - a combine launch sums the recorded chunks in chunk order (bf16-rounded
 *     partials if its parameter says so); softmax and argmax follow in a fixed
 *     order.
 * So a launch whose shape changed on the way (a slicing system) changes the
 * bits, as on a GPU, and libdetshare's remaps, which never change a launch,
 * do not. Only the first SIM_VOCAB rows of the LM head are computed, to keep
 * the host work small; the simulated kernels have the real grids.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <detshare/sim.h>

#include "bench.h"
#include "determinism.h"

#define SIM_VOCAB 256
#define TRACE_CAP 512
#define MAX_LANES 64

/* Parameters of every simulated LS kernel, in order (the trace keeps them
 * concatenated): tag, seed, batch, a, b, c. */
enum { P_TAG = 0, P_SEED = 8, P_BATCH = 16, P_A = 20, P_B = 24, P_C = 28, P_BYTES = 32 };
#define SLOT_LOGITS 0xFFFFFFFFu

enum sim_kernel { K_POISON, K_FILL_X, K_HEAD, K_COMBINE, K_SOFTMAX, K_ARGMAX, K_COUNT };

typedef struct spec {
    const char *name;
    double block_us;
} spec;

/* Block durations that make the kernels about as long as the real ones alone
 * on a 132-SM H100/H200 (LM head: ~31 waves of 10 us for 1 GiB of weights). */
static const spec SPECS[K_COUNT] = {
    [K_POISON] = {"det_fill_u32", 0.5}, [K_FILL_X] = {"det_fill_bf16", 0.5}, [K_HEAD] = {"det_lm_head", 10.0},
    [K_COMBINE] = {"det_combine", 1.0}, [K_SOFTMAX] = {"det_softmax", 10.0}, [K_ARGMAX] = {"det_argmax", 8.0},
};

/* Best-effort kernels: one per block duration (a simulated kernel's block
 * duration is fixed at creation); be_launch picks the nearest. */
static const double BE_BLOCK_US[] = {10.0, 30.0, 100.0, 300.0, 1000.0, 2000.0};
#define NUM_BE (sizeof BE_BLOCK_US / sizeof BE_BLOCK_US[0])

typedef struct det_sim {
    det_backend base;
    ds_runtime_t rt;
    CUfunction fn[K_COUNT];
    CUfunction be[NUM_BE];
    CUfunction be_stream;
    float *w;        /* [SIM_VOCAB][hidden], bf16 values held as float */
    float *x;        /* [MAX_BATCH][hidden] */
    float *partials; /* [MAX_SLICES][MAX_BATCH][SIM_VOCAB] */
    float *logits, *probs;
    int32_t tokens[DET_MAX_BATCH];
    uint64_t group;  /* tag of the trial in flight */
    ds_sim_kernel_record *trace;
} det_sim;

/* ------------------------------------------------------------------------ */
/* host numerics                                                             */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static float round_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return f; /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* The values det_fill_bf16 writes (kernels.cu). */
static float fill_value(uint64_t seed, uint64_t i, float scale)
{
    const float u = ((float)(mix64(seed ^ mix64(i)) >> 41) + 0.5f) * (2.0f / 8388608.0f) - 1.0f;
    return round_bf16(scale * u);
}

/* One row's dot product over [k0, k1) in the real kernel's order for `lanes`
 * lanes (a power of two): lane l takes k = k0 + 8 l + 8 lanes i + j. */
static float dot_range(const float *w, const float *x, int k0, int k1, uint32_t lanes)
{
    float s[MAX_LANES];
    for (uint32_t l = 0; l < lanes; l++) {
        float a = 0.f;
        for (int k = k0 + (int)l * DET_VEC; k < k1; k += (int)lanes * DET_VEC)
            for (int j = 0; j < DET_VEC; j++)
                a += w[k + j] * x[k + j]; /* the host's own fixed order; no FMA needed */
        s[l] = a;
    }
    for (uint32_t off = lanes / 2; off > 0; off >>= 1) {
        float t[MAX_LANES];
        for (uint32_t l = 0; l < lanes; l++)
            t[l] = s[l] + s[l ^ off];
        memcpy(s, t, lanes * sizeof *s);
    }
    return s[0];
}

static void host_softmax_argmax(det_sim *d, uint32_t batch)
{
    for (uint32_t b = 0; b < batch; b++) {
        const float *row = d->logits + (size_t)b * SIM_VOCAB;
        float *out = d->probs + (size_t)b * SIM_VOCAB;
        float m = -INFINITY, s = 0.f;
        for (int i = 0; i < SIM_VOCAB; i++)
            m = fmaxf(m, row[i]);
        for (int i = 0; i < SIM_VOCAB; i++)
            s += expf(row[i] - m);
        const float inv = 1.0f / s;
        int best = 0;
        for (int i = 0; i < SIM_VOCAB; i++) {
            out[i] = expf(row[i] - m) * inv;
            if (out[i] > out[best])
                best = i;
        }
        d->tokens[b] = best;
    }
}

/* ------------------------------------------------------------------------ */
/* launches                                                                  */

static int launch(det_sim *d, ds_vctx_t v, enum sim_kernel k, uint32_t grid, uint32_t threads, uint64_t seed,
                  uint32_t batch, uint32_t a, uint32_t b, uint32_t c)
{
    uint64_t tag = d->group;
    void *params[] = {&tag, &seed, &batch, &a, &b, &c};
    const ds_dim3 g = {grid, 1, 1}, blk = {threads, 1, 1};
    BENCH_DS_CHECK(ds_launch(v, d->fn[k], g, blk, 0, params, NULL));
    return 0;
}

static int sim_ls_submit(det_backend *base, ds_vctx_t v, const det_trial *t, uint32_t slices, int bf16_partials)
{
    det_sim *d = (det_sim *)base;
    if (t->batch < 1 || t->batch > DET_MAX_BATCH || slices > DET_MAX_SLICES) {
        fprintf(stderr, "ls_submit: batch %u or slices %u out of range\n", t->batch, slices);
        return -1;
    }
    d->group++;
    /* Each trial reads back only its own records. */
    BENCH_DS_CHECK(ds_sim_trace_clear(d->rt));
    const uint32_t head_grid = DET_HEAD_GRID(DET_VOCAB);
    if (launch(d, v, K_POISON, DET_FILL_GRID, DET_FILL_THREADS, 0, t->batch, 0, 0, 0) ||
        launch(d, v, K_FILL_X, DET_FILL_GRID, DET_FILL_THREADS, t->x_seed, t->batch, 0, 0, 0))
        return -1;
    if (slices <= 1) {
        if (launch(d, v, K_HEAD, head_grid, DET_HEAD_THREADS, 0, t->batch, 0, DET_HIDDEN, SLOT_LOGITS))
            return -1;
    } else {
        for (uint32_t s = 0; s < slices; s++)
            if (launch(d, v, K_HEAD, head_grid, DET_HEAD_THREADS, 0, t->batch,
                       (uint32_t)det_slice_bound(DET_HIDDEN, slices, s),
                       (uint32_t)det_slice_bound(DET_HIDDEN, slices, s + 1), s))
                return -1;
        if (launch(d, v, K_COMBINE, DET_FILL_GRID, DET_FILL_THREADS, 0, t->batch, slices, bf16_partials != 0, 0))
            return -1;
    }
    if (launch(d, v, K_SOFTMAX, t->batch, DET_ROW_THREADS, 0, t->batch, 0, 0, 0) ||
        launch(d, v, K_ARGMAX, t->batch, DET_ROW_THREADS, 0, t->batch, 0, 0, 0))
        return -1;
    return 0;
}

static uint32_t u32_at(const ds_sim_kernel_record *r, int off)
{
    uint32_t v;
    memcpy(&v, r->params + off, 4);
    return v;
}

static uint64_t u64_at(const ds_sim_kernel_record *r, int off)
{
    uint64_t v;
    memcpy(&v, r->params + off, 8);
    return v;
}

/* Computes the trial's outputs from its kernel records (see the top). */
static int replay(det_sim *d, const det_trial *t, const ds_sim_kernel_record *rec, size_t n)
{
    const size_t nbv = (size_t)t->batch * SIM_VOCAB;
    int have_x = 0, have_logits = 0, have_softmax = 0;
    uint32_t heads = 0;
    for (size_t i = 0; i < n; i++) {
        const ds_sim_kernel_record *r = &rec[i];
        int k = -1;
        for (int j = 0; j < K_COUNT; j++)
            if (r->function == d->fn[j])
                k = j;
        if (k < 0 || r->param_bytes < P_BYTES || u64_at(r, P_TAG) != d->group)
            continue; /* the BE tenant's, or an earlier trial's */
        if (r->end_us < 0) {
            fprintf(stderr, "sim: kernel %s of trial %u had not finished after synchronize\n", r->name, t->index);
            return -1;
        }
        const uint32_t batch = u32_at(r, P_BATCH);
        if (batch != t->batch) {
            fprintf(stderr, "sim: kernel %s recorded batch %u, trial %u has %u\n", r->name, batch, t->index,
                    t->batch);
            return -1;
        }
        if (k == K_FILL_X) {
            const uint64_t seed = u64_at(r, P_SEED);
            for (size_t e = 0; e < (size_t)batch * DET_HIDDEN; e++)
                d->x[e] = fill_value(seed, e, DET_X_SCALE);
            have_x = 1;
        } else if (k == K_HEAD) {
            const int k0 = (int)u32_at(r, P_A), k1 = (int)u32_at(r, P_B);
            const uint32_t slot = u32_at(r, P_C);
            const uint32_t lanes = r->block.x / DET_HEAD_WARPS;
            if (!have_x || k0 < 0 || k1 > DET_HIDDEN || k0 >= k1 || k0 % DET_VEC || k1 % DET_VEC || lanes == 0 ||
                lanes > MAX_LANES || (lanes & (lanes - 1)) || r->block.x % DET_HEAD_WARPS ||
                (slot != SLOT_LOGITS && slot >= DET_MAX_SLICES)) {
                fprintf(stderr, "sim: LM head launch of trial %u: block %u, chunk [%d, %d), slot %u: invalid\n",
                        t->index, r->block.x, k0, k1, slot);
                return -1;
            }
            float *out = slot == SLOT_LOGITS ? d->logits : d->partials + (size_t)slot * nbv;
            for (uint32_t b = 0; b < batch; b++)
                for (int row = 0; row < SIM_VOCAB; row++)
                    out[(size_t)b * SIM_VOCAB + row] =
                        dot_range(d->w + (size_t)row * DET_HIDDEN, d->x + (size_t)b * DET_HIDDEN, k0, k1, lanes);
            heads++;
            have_logits = slot == SLOT_LOGITS;
        } else if (k == K_COMBINE) {
            const uint32_t slices = u32_at(r, P_A), bf16 = u32_at(r, P_B);
            if (slices != heads || slices < 1 || slices > DET_MAX_SLICES) {
                fprintf(stderr, "sim: combine of %u chunks after %u LM-head launches (trial %u)\n", slices, heads,
                        t->index);
                return -1;
            }
            for (size_t e = 0; e < nbv; e++) {
                float s = 0.f;
                for (uint32_t c = 0; c < slices; c++) {
                    float p = d->partials[(size_t)c * nbv + e];
                    if (bf16)
                        p = round_bf16(p);
                    s = c == 0 ? p : s + p;
                }
                d->logits[e] = s;
            }
            have_logits = 1;
        } else if (k == K_SOFTMAX) {
            if (!have_logits) {
                fprintf(stderr, "sim: softmax before the logits (trial %u)\n", t->index);
                return -1;
            }
            host_softmax_argmax(d, t->batch);
            have_softmax = 1;
        }
    }
    if (!have_softmax) {
        fprintf(stderr, "sim: trial %u: no softmax launch recorded\n", t->index);
        return -1;
    }
    return 0;
}

static int sim_ls_collect(det_backend *base, ds_vctx_t v, const det_trial *t, det_output *out)
{
    det_sim *d = (det_sim *)base;
    BENCH_DS_CHECK(ds_vctx_synchronize(v));
    size_t n = 0;
    BENCH_DS_CHECK(ds_sim_trace_get(d->rt, d->trace, TRACE_CAP, &n));
    /* Poison, as on the GPU: a trial that computes nothing fails the checks. */
    const size_t nbv = (size_t)t->batch * SIM_VOCAB;
    for (size_t e = 0; e < nbv; e++)
        d->logits[e] = d->probs[e] = NAN;
    for (uint32_t b = 0; b < t->batch; b++)
        d->tokens[b] = -1;
    if (replay(d, t, d->trace, n))
        return -1;
    if (det_check_and_hash(d->logits, d->probs, d->tokens, t->batch, SIM_VOCAB, out)) {
        fprintf(stderr, "ls_collect: trial %u (batch %u) produced invalid outputs\n", t->index, t->batch);
        return -1;
    }
    return 0;
}

static int sim_self_check(det_backend *base, ds_vctx_t v, const det_trial *t)
{
    det_sim *d = (det_sim *)base;
    const size_t nbv = (size_t)t->batch * SIM_VOCAB;
    float *unsliced = malloc(nbv * sizeof *unsliced);
    det_output o;
    int rc = -1;
    if (!unsliced) {
        fprintf(stderr, "self_check: out of memory\n");
        return -1;
    }
    if (sim_ls_submit(base, v, t, 1, 0) || sim_ls_collect(base, v, t, &o))
        goto out;
    memcpy(unsliced, d->logits, nbv * sizeof *unsliced);
    if (sim_ls_submit(base, v, t, 3, 0) || sim_ls_collect(base, v, t, &o))
        goto out;
    size_t differ = 0;
    double max_diff = 0.0;
    for (size_t i = 0; i < nbv; i++) {
        differ += d->logits[i] != unsliced[i];
        double diff = fabs((double)d->logits[i] - (double)unsliced[i]);
        max_diff = diff > max_diff ? diff : max_diff;
    }
    if (!(max_diff < 1e-4)) {
        fprintf(stderr, "self_check: the 3-chunk logits differ from the unsliced ones by up to %.3g\n", max_diff);
        goto out;
    }
    printf("self-check (host numerics of the simulated device): 3-chunk slicing changed %zu of %zu logits "
           "(max |diff| %.3g)\n",
           differ, nbv, max_diff);
    rc = 0;
out:
    free(unsliced);
    return rc;
}

static int sim_be_launch(det_backend *base, ds_vctx_t v, int kind, uint32_t grid, double block_us)
{
    det_sim *d = (det_sim *)base;
    CUfunction f = d->be_stream;
    if (kind != DET_BE_STREAM) {
        size_t best = 0;
        for (size_t i = 1; i < NUM_BE; i++)
            if (fabs(log(BE_BLOCK_US[i] / block_us)) < fabs(log(BE_BLOCK_US[best] / block_us)))
                best = i;
        f = d->be[best];
    }
    uint64_t tag = 0;
    void *params[] = {&tag};
    const ds_dim3 g = {grid, 1, 1}, b = {DET_BE_THREADS, 1, 1};
    BENCH_DS_CHECK(ds_launch(v, f, g, b, 0, params, NULL));
    return 0;
}

static int sim_thread_init(det_backend *base)
{
    (void)base;
    return 0;
}

static void sim_destroy(det_backend *base)
{
    det_sim *d = (det_sim *)base;
    free(d->w);
    free(d->x);
    free(d->partials);
    free(d->logits);
    free(d->probs);
    free(d->trace);
    free(d); /* the simulated kernels live until the runtime is destroyed */
}

static const det_backend_ops SIM_OPS = {
    "simulated", sim_thread_init, sim_ls_submit, sim_ls_collect, sim_self_check, sim_be_launch, sim_destroy,
};

/* Parameter sizes of the simulated kernels, in bytes: a kernel of n
 * parameters takes the first n. */
static const uint32_t PARAM_SIZES[] = {8, 8, 4, 4, 4, 4};

static int setup(det_sim *d)
{
    d->w = malloc((size_t)SIM_VOCAB * DET_HIDDEN * sizeof *d->w);
    d->x = malloc((size_t)DET_MAX_BATCH * DET_HIDDEN * sizeof *d->x);
    d->partials = malloc((size_t)DET_MAX_SLICES * DET_MAX_BATCH * SIM_VOCAB * sizeof *d->partials);
    d->logits = malloc((size_t)DET_MAX_BATCH * SIM_VOCAB * sizeof *d->logits);
    d->probs = malloc((size_t)DET_MAX_BATCH * SIM_VOCAB * sizeof *d->probs);
    d->trace = malloc(TRACE_CAP * sizeof *d->trace);
    if (!d->w || !d->x || !d->partials || !d->logits || !d->probs || !d->trace) {
        fprintf(stderr, "det_sim_create: out of memory\n");
        return -1;
    }
    /* The first SIM_VOCAB rows of the GPU's weights: the same seed and index. */
    for (size_t e = 0; e < (size_t)SIM_VOCAB * DET_HIDDEN; e++)
        d->w[e] = fill_value(DET_W_SEED, e, DET_W_SCALE);
    for (int k = 0; k < K_COUNT; k++)
        if (bench_sim_kernel(d->rt, SPECS[k].name, SPECS[k].block_us, 1, 6, PARAM_SIZES, &d->fn[k]))
            return -1;
    for (size_t i = 0; i < NUM_BE; i++) {
        char name[32];
        snprintf(name, sizeof name, "det_be_burn_%gus", BE_BLOCK_US[i]);
        if (bench_sim_kernel(d->rt, name, BE_BLOCK_US[i], 1, 1, PARAM_SIZES, &d->be[i]))
            return -1;
    }
    return bench_sim_kernel(d->rt, "det_be_stream", 40.0, 1, 1, PARAM_SIZES, &d->be_stream);
}

int det_sim_create(ds_runtime_t rt, det_backend **out)
{
    det_sim *d = calloc(1, sizeof *d);
    if (!d) {
        fprintf(stderr, "det_sim_create: out of memory\n");
        return -1;
    }
    d->base.ops = &SIM_OPS;
    d->base.vocab = SIM_VOCAB;
    d->rt = rt;
    if (setup(d)) {
        sim_destroy(&d->base);
        return -1;
    }
    *out = &d->base;
    return 0;
}
