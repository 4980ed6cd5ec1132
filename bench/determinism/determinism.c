/*
 * determinism: are a tenant's results bitwise independent of its co-tenants
 * and of where libdetshare runs it? (docs/benchmarks.md, W3)
 *
 * The LS tenant runs an LM head (bf16 weights [vocab 128256][hidden 4096] x a
 * batch of 1-16 activations, fp32 accumulation in a fixed order, kernels.cu),
 * a float32 softmax over the vocabulary and an argmax, all through ds_launch
 * on one vCtx. Each trial's batch size and inputs come from a seeded PRNG.
 *
 *   standalone   --trials trials alone on the whole GPU: the reference (hashes
 *                of the logits' and probabilities' bytes, argmax per row).
 *   detshare     the same trials while a BE vCtx on another thread runs a
 *                randomly varying load (random kernel sizes and durations,
 *                sometimes idle, sometimes moving itself). Before each trial
 *                the LS vCtx is remapped (ds_vctx_remap, policy "manual") to
 *                the next pCtx of a rotation over the whole pool; every tenth
 *                trial a built-in policy is switched in instead and places it.
 *                The pCtx each trial ran on is read back (ds_vctx_get_pctx).
 *   slicing      the baseline: the same trials, same load, with the LM head's
 *                hidden-dimension reduction split into K chunks computed
 *                separately and summed in chunk order, K chosen per trial from
 *                the SMs the BE load leaves free at launch time (as kernel-
 *                slicing systems size their slices). Partials in fp32
 *                ("slicing") and rounded to bf16 like a split-K epilogue with
 *                a bf16 workspace ("slicing_bf16_partials").
 *   cublas_audit cuBLAS GEMMs (several shapes; bf16, fp16, fp32 with TF32 off
 *                and on) in sections on every pCtx and on the default stream,
 *                compared bit for bit, with and without cublasSetSmCountTarget.
 *
 * A trial is a bitwise mismatch when its logits or probabilities differ in any
 * bit from the standalone run of the same trial; argmax_changed when any row's
 * token differs. Output: --out FILE (JSON shaped as docs/benchmarks.md says), then a
 * table. Without a GPU: the simulated device (outputs computed on the host
 * from what the simulator recorded, see det_sim.c), no cuBLAS audit.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <detshare/detshare.h>
#include <detshare/policy.h>
#include <detshare/sim.h>

#include "bench.h"
#include "determinism.h"

#ifndef DET_SOURCE_DIR
#define DET_SOURCE_DIR "."
#endif

#define DEFAULT_TRIALS 1000
#define POLICY_EVERY 10 /* every tenth co-located trial: a built-in policy places the LS vCtx */
#define MAX_LISTED 16   /* mismatching trial indices kept for the result file */

static const char *const POLICIES[] = {"slo_aware", "tpot_first", "shared", "priority", "static", "temporal"};
#define NUM_POLICIES (sizeof POLICIES / sizeof POLICIES[0])

/* Chunk counts a slicing system picks from (see slices_for_load). */
static const uint32_t SLICE_CHOICES[] = {1, 2, 3, 4, 6, 8, 12, 16};
#define NUM_SLICE_CHOICES (sizeof SLICE_CHOICES / sizeof SLICE_CHOICES[0])

typedef struct options {
    ds_device_kind device;
    uint64_t seed;
    const char *out;
    uint32_t trials;
    int skip_cublas;
    int check;
} options;

/* ------------------------------------------------------------------------ */
/* output checks and their hashes (determinism.h, det_hash.h)               */

int det_check_and_hash(const float *logits, const float *probs, const int32_t *tokens, uint32_t batch,
                       uint32_t vocab, det_output *out)
{
    for (uint32_t b = 0; b < batch; b++) {
        const float *l = logits + (size_t)b * vocab, *p = probs + (size_t)b * vocab;
        double sum = 0.0;
        float lo = INFINITY, hi = -INFINITY;
        uint32_t best = 0;
        for (uint32_t i = 0; i < vocab; i++) {
            if (!isfinite(l[i]) || !(p[i] >= 0.f && p[i] <= 1.f)) {
                fprintf(stderr, "row %u, index %u: logit %g, probability %g\n", b, i, l[i], p[i]);
                return -1;
            }
            lo = fminf(lo, l[i]);
            hi = fmaxf(hi, l[i]);
            sum += p[i];
            if (p[i] > p[best])
                best = i;
        }
        if (!(hi > lo)) {
            fprintf(stderr, "row %u: every logit is %g\n", b, lo);
            return -1;
        }
        if (!(fabs(sum - 1.0) < 1e-3)) {
            fprintf(stderr, "row %u: probabilities sum to %.6f\n", b, sum);
            return -1;
        }
        if (tokens[b] != (int32_t)best) {
            fprintf(stderr, "row %u: token %d, but the largest probability is at %u\n", b, tokens[b], best);
            return -1;
        }
        out->argmax[b] = tokens[b];
    }
    for (uint32_t b = batch; b < DET_MAX_BATCH; b++)
        out->argmax[b] = -1;
    const size_t bytes = (size_t)batch * vocab * sizeof(float);
    out->logits_hash = det_hash_bytes(DET_HASH_INIT, logits, bytes);
    out->probs_hash = det_hash_bytes(DET_HASH_INIT, probs, bytes);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* JSON (with arrays, which bench_json does not write)                       */

typedef struct jw {
    FILE *f;
    int depth;
    int has[32];
} jw;

static void jw_escaped(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void jw_member(jw *j, const char *key)
{
    if (j->has[j->depth])
        fputc(',', j->f);
    j->has[j->depth] = 1;
    fputc('\n', j->f);
    for (int i = 0; i <= j->depth; i++)
        fputs("  ", j->f);
    if (key) {
        jw_escaped(j->f, key);
        fputs(": ", j->f);
    }
}

static void jw_open(jw *j, const char *key, char c)
{
    if (j->depth >= 30)
        return;
    if (j->depth >= 0)
        jw_member(j, key);
    fputc(c, j->f);
    j->has[++j->depth] = 0;
}

static void jw_close(jw *j, char c)
{
    int had = j->has[j->depth--];
    if (had) {
        fputc('\n', j->f);
        for (int i = 0; i <= j->depth; i++)
            fputs("  ", j->f);
    }
    fputc(c, j->f);
}

static void jw_str(jw *j, const char *k, const char *v)
{
    jw_member(j, k);
    jw_escaped(j->f, v);
}

static void jw_num(jw *j, const char *k, double v)
{
    jw_member(j, k);
    if (isfinite(v))
        fprintf(j->f, "%.10g", v);
    else
        fputs("null", j->f);
}

static void jw_int(jw *j, const char *k, long long v)
{
    jw_member(j, k);
    fprintf(j->f, "%lld", v);
}

static void jw_bool(jw *j, const char *k, int v)
{
    jw_member(j, k);
    fputs(v ? "true" : "false", j->f);
}

/* An array of small integers on one line. */
static void jw_int_line(jw *j, const char *k, const int *v, size_t n)
{
    jw_member(j, k);
    fputc('[', j->f);
    for (size_t i = 0; i < n; i++)
        fprintf(j->f, i ? ", %d" : "%d", v[i]);
    fputc(']', j->f);
}

/* ------------------------------------------------------------------------ */
/* best-effort tenant                                                        */

typedef struct be_tenant {
    det_backend *b;
    ds_vctx_t v;
    const ds_runtime_info *info;
    uint64_t seed;
    atomic_int stop;
    atomic_uint busy_sms; /* SMs the BE kernel running now occupies; 0 idle */
    int rc;
    uint64_t kernels, stream_kernels, idles, remaps;
    pthread_t thread;
} be_tenant;

static void sleep_us(double us)
{
    struct timespec ts = {(time_t)(us / 1e6), (long)(fmod(us, 1e6) * 1e3)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static double log_uniform(bench_rng *r, double lo, double hi)
{
    return lo * exp(log(hi / lo) * bench_rng_uniform(r));
}

/* A randomly varying load: kernels of random width (5-125% of the device's
 * SMs) and duration (10 us - 2 ms per block), compute- or memory-bound,
 * sometimes idle for 50 us - 3 ms, sometimes moving itself to another pCtx. */
static int be_loop(be_tenant *be)
{
    bench_rng r;
    bench_rng_seed(&r, be->seed ^ 0xBEBEBEBEull);
    if (be->b->ops->thread_init(be->b))
        return -1;
    const uint32_t sms = be->info->sm_count;
    while (!atomic_load(&be->stop)) {
        const double u = bench_rng_uniform(&r);
        if (u < 0.15) {
            atomic_store(&be->busy_sms, 0);
            be->idles++;
            sleep_us(log_uniform(&r, 50.0, 3000.0));
            continue;
        }
        if (u < 0.25) {
            BENCH_DS_CHECK(ds_vctx_remap(be->v, (uint32_t)(bench_rng_next(&r) % be->info->num_pctx)));
            be->remaps++;
        }
        const int kind = bench_rng_uniform(&r) < 0.2 ? DET_BE_STREAM : DET_BE_BURN;
        uint32_t grid = (uint32_t)(sms * (0.05 + 1.2 * bench_rng_uniform(&r)));
        grid = grid ? grid : 1;
        if (be->b->ops->be_launch(be->b, be->v, kind, grid, log_uniform(&r, 10.0, 2000.0)))
            return -1;
        uint32_t p = 0;
        BENCH_DS_CHECK(ds_vctx_get_pctx(be->v, &p));
        const uint32_t pctx_sms = be->info->pctx[p].sm_count;
        atomic_store(&be->busy_sms, grid < pctx_sms ? grid : pctx_sms);
        be->kernels++;
        be->stream_kernels += kind == DET_BE_STREAM;
        BENCH_DS_CHECK(ds_vctx_synchronize(be->v));
    }
    atomic_store(&be->busy_sms, 0);
    return 0;
}

static void *be_main(void *arg)
{
    be_tenant *be = arg;
    be->rc = be_loop(be);
    if (be->rc)
        fprintf(stderr, "determinism: the BE tenant stopped on an error\n");
    return NULL;
}

/* The slicing system's choice: enough chunks that one chunk's share of the
 * device fits in the SMs free now (smallest K in SLICE_CHOICES with
 * K >= sms / free); the whole kernel when the BE tenant is idle. */
static uint32_t slices_for_load(uint32_t sms, uint32_t busy)
{
    const uint32_t free = busy < sms ? sms - busy : 0;
    if (free >= sms)
        return 1;
    const double want = free ? (double)sms / free : 1e30;
    for (size_t i = 0; i < NUM_SLICE_CHOICES; i++)
        if (SLICE_CHOICES[i] >= want)
            return SLICE_CHOICES[i];
    return SLICE_CHOICES[NUM_SLICE_CHOICES - 1];
}

/* ------------------------------------------------------------------------ */
/* results                                                                   */

typedef struct config_result {
    const char *name;
    uint32_t trials;
    uint32_t bitwise_mismatch_trials;
    uint32_t argmax_changed_trials;
    uint32_t listed[MAX_LISTED];
    uint32_t n_listed;
    double seconds;
    /* detshare */
    uint32_t per_pctx[DS_MAX_PCTX];
    uint32_t per_policy[NUM_POLICIES + 1]; /* last: manual (forced remaps) */
    uint32_t remaps_not_honoured;
    /* slicing */
    int bf16_partials;
    uint32_t k_hist[DET_MAX_SLICES + 1];
    uint32_t k_mismatch[DET_MAX_SLICES + 1];
    uint32_t k_argmax[DET_MAX_SLICES + 1];
} config_result;

typedef struct report {
    const options *opt;
    ds_runtime_info info;
    int simulated;
    uint32_t vocab_compared;
    char command[4096];
    uint32_t batch_hist[DET_MAX_BATCH + 1];
    uint8_t *trial_pctx; /* detshare: the pCtx each trial ran on */
    int8_t *trial_policy; /* detshare: the policy switched in for it, -1 = manual (forced remap) */
    double standalone_seconds;
    config_result detshare, slicing, slicing_bf16;
    be_tenant *be;
    det_audit_row *audit;
    size_t audit_count;
    const char *audit_skipped;
} report;

static void compare(config_result *c, const det_output *ref, const det_output *got, uint32_t trial, uint32_t k)
{
    const int bits = got->logits_hash != ref->logits_hash || got->probs_hash != ref->probs_hash;
    int arg = 0;
    for (int b = 0; b < DET_MAX_BATCH; b++)
        arg |= got->argmax[b] != ref->argmax[b];
    c->trials++;
    c->bitwise_mismatch_trials += (uint32_t)bits;
    c->argmax_changed_trials += (uint32_t)arg;
    if (bits && c->n_listed < MAX_LISTED)
        c->listed[c->n_listed++] = trial;
    if (k <= DET_MAX_SLICES) {
        c->k_mismatch[k] += (uint32_t)bits;
        c->k_argmax[k] += (uint32_t)arg;
    }
}

/* ------------------------------------------------------------------------ */
/* trials                                                                    */

typedef struct bench {
    ds_runtime_t rt;
    det_backend *b;
    ds_vctx_t ls;
    uint32_t full;
    det_trial *plan;
    det_output *ref;
    report *r;
} bench;

static int run_trial(bench *bn, const det_trial *t, uint32_t slices, int bf16, det_output *out, uint32_t *pctx)
{
    if (bn->b->ops->ls_submit(bn->b, bn->ls, t, slices, bf16))
        return -1;
    /* After the launches: the pCtx the trial ran on (a pending remap was
     * applied at the first of them). */
    BENCH_DS_CHECK(ds_vctx_get_pctx(bn->ls, pctx));
    return bn->b->ops->ls_collect(bn->b, bn->ls, t, out);
}

static int warm_up(bench *bn)
{
    det_output o;
    uint32_t p;
    det_trial t = {0, DET_MAX_BATCH, 0xFEEDull};
    for (uint32_t i = 0; i < 3; i++) {
        t.batch = i == 1 ? 1 : DET_MAX_BATCH;
        if (run_trial(bn, &t, 1, 0, &o, &p) || run_trial(bn, &t, 4, 1, &o, &p))
            return -1;
    }
    t.batch = 5;
    return bn->b->ops->self_check(bn->b, bn->ls, &t);
}

static int run_standalone(bench *bn)
{
    uint64_t t0 = bench_now_ns();
    BENCH_DS_CHECK(ds_vctx_remap(bn->ls, bn->full));
    for (uint32_t i = 0; i < bn->r->opt->trials; i++) {
        uint32_t p;
        if (run_trial(bn, &bn->plan[i], 1, 0, &bn->ref[i], &p))
            return -1;
    }
    bn->r->standalone_seconds = (double)(bench_now_ns() - t0) / 1e9;
    printf("standalone: %u trials in %.1f s\n", bn->r->opt->trials, bn->r->standalone_seconds);
    fflush(stdout);
    return 0;
}

static int run_detshare(bench *bn)
{
    config_result *c = &bn->r->detshare;
    const uint32_t npctx = bn->r->info.num_pctx;
    bench_rng pr;
    bench_rng_seed(&pr, bn->r->opt->seed ^ 0x90119ull);
    uint64_t t0 = bench_now_ns();
    uint32_t rotation = 0;
    for (uint32_t i = 0; i < bn->r->opt->trials; i++) {
        int policy = -1;
        uint32_t want = 0;
        if (i % POLICY_EVERY == POLICY_EVERY - 1) {
            policy = (int)(bench_rng_next(&pr) % NUM_POLICIES);
            BENCH_DS_CHECK(ds_runtime_set_policy(bn->rt, POLICIES[policy]));
        } else {
            want = rotation++ % npctx;
            BENCH_DS_CHECK(ds_vctx_remap(bn->ls, want));
        }
        det_output o;
        uint32_t p = 0;
        if (run_trial(bn, &bn->plan[i], 1, 0, &o, &p))
            return -1;
        if (policy >= 0)
            BENCH_DS_CHECK(ds_runtime_set_policy(bn->rt, "manual"));
        else if (p != want)
            c->remaps_not_honoured++;
        c->per_pctx[p < DS_MAX_PCTX ? p : 0]++;
        bn->r->trial_pctx[i] = (uint8_t)p;
        bn->r->trial_policy[i] = (int8_t)policy;
        c->per_policy[policy >= 0 ? (uint32_t)policy : NUM_POLICIES]++;
        compare(c, &bn->ref[i], &o, i, 1);
    }
    c->seconds = (double)(bench_now_ns() - t0) / 1e9;
    printf("detshare: %u trials in %.1f s: %u bitwise mismatches, %u argmax changes\n", c->trials, c->seconds,
           c->bitwise_mismatch_trials, c->argmax_changed_trials);
    fflush(stdout);
    return 0;
}

static int run_slicing(bench *bn, config_result *c, be_tenant *be)
{
    uint64_t t0 = bench_now_ns();
    BENCH_DS_CHECK(ds_vctx_remap(bn->ls, bn->full));
    for (uint32_t i = 0; i < bn->r->opt->trials; i++) {
        const uint32_t k = slices_for_load(bn->r->info.sm_count, atomic_load(&be->busy_sms));
        det_output o;
        uint32_t p;
        if (run_trial(bn, &bn->plan[i], k, c->bf16_partials, &o, &p))
            return -1;
        c->k_hist[k]++;
        compare(c, &bn->ref[i], &o, i, k);
    }
    c->seconds = (double)(bench_now_ns() - t0) / 1e9;
    printf("%s: %u trials in %.1f s: %u bitwise mismatches, %u argmax changes\n", c->name, c->trials, c->seconds,
           c->bitwise_mismatch_trials, c->argmax_changed_trials);
    fflush(stdout);
    return 0;
}

static int be_start(be_tenant *be)
{
    int e = pthread_create(&be->thread, NULL, be_main, be);
    if (e) {
        fprintf(stderr, "determinism: pthread_create: %s\n", strerror(e));
        return -1;
    }
    /* Let the load get going before the first measured trial. */
    sleep_us(20000);
    return 0;
}

static int be_stop(be_tenant *be)
{
    atomic_store(&be->stop, 1);
    int e = pthread_join(be->thread, NULL);
    if (e) {
        fprintf(stderr, "determinism: pthread_join: %s\n", strerror(e));
        return -1;
    }
    return be->rc;
}

/* ------------------------------------------------------------------------ */
/* report                                                                    */

static int all_tiers_visited(const report *r)
{
    for (uint32_t p = 0; p < r->info.num_pctx; p++)
        if (!r->detshare.per_pctx[p])
            return 0;
    return 1;
}

static void json_config(jw *j, const report *r, const config_result *c)
{
    jw_open(j, c->name, '{');
    jw_int(j, "bitwise_mismatch_trials", c->bitwise_mismatch_trials);
    jw_int(j, "argmax_changed_trials", c->argmax_changed_trials);
    jw_int(j, "trials", c->trials);
    jw_num(j, "seconds", c->seconds);
    jw_open(j, "mismatch_trial_indices_first", '[');
    for (uint32_t i = 0; i < c->n_listed; i++)
        jw_int(j, NULL, c->listed[i]);
    jw_close(j, ']');
    if (c == &r->detshare) {
        jw_open(j, "trials_per_pctx", '{');
        for (uint32_t p = 0; p < r->info.num_pctx; p++) {
            char key[16];
            snprintf(key, sizeof key, "%u", p);
            jw_int(j, key, c->per_pctx[p]);
        }
        jw_close(j, '}');
        jw_bool(j, "all_tiers_visited", all_tiers_visited(r));
        jw_open(j, "trials_per_policy", '{');
        jw_int(j, "manual (forced remap)", c->per_policy[NUM_POLICIES]);
        for (size_t i = 0; i < NUM_POLICIES; i++)
            jw_int(j, POLICIES[i], c->per_policy[i]);
        jw_close(j, '}');
        jw_int(j, "remaps_not_honoured", c->remaps_not_honoured);
        int *tmp = malloc((size_t)c->trials * sizeof *tmp);
        if (tmp) {
            for (uint32_t i = 0; i < c->trials; i++)
                tmp[i] = r->trial_pctx[i];
            jw_int_line(j, "trial_pctx", tmp, c->trials);
            for (uint32_t i = 0; i < c->trials; i++)
                tmp[i] = r->trial_policy[i];
            jw_int_line(j, "trial_policy", tmp, c->trials);
            free(tmp);
            jw_open(j, "trial_policy_names", '[');
            for (size_t i = 0; i < NUM_POLICIES; i++)
                jw_str(j, NULL, POLICIES[i]);
            jw_close(j, ']');
        }
    } else {
        jw_str(j, "partials", c->bf16_partials ? "bf16" : "fp32");
        jw_open(j, "k_histogram", '{');
        for (uint32_t k = 1; k <= DET_MAX_SLICES; k++)
            if (c->k_hist[k]) {
                char key[16];
                snprintf(key, sizeof key, "%u", k);
                jw_open(j, key, '{');
                jw_int(j, "trials", c->k_hist[k]);
                jw_int(j, "bitwise_mismatch_trials", c->k_mismatch[k]);
                jw_int(j, "argmax_changed_trials", c->k_argmax[k]);
                jw_close(j, '}');
            }
        jw_close(j, '}');
    }
    jw_close(j, '}');
}

static void json_audit(jw *j, const report *r)
{
    jw_open(j, "cublas_audit", '[');
    for (size_t i = 0; i < r->audit_count; i++) {
        const det_audit_row *a = &r->audit[i];
        jw_open(j, NULL, '{');
        jw_str(j, "shape", a->shape);
        jw_str(j, "dtype", a->dtype);
        jw_int(j, "pctx", a->pctx);
        jw_str(j, "stream", a->pctx < 0 ? "default" : "section");
        jw_int(j, "sms", a->sms);
        jw_int(j, "sm_count_target", a->sm_count_target);
        jw_bool(j, "bitwise_equal", a->bitwise_equal);
        jw_int(j, "mismatched_elements", (long long)a->mismatched_elements);
        jw_num(j, "max_abs_diff", a->max_abs_diff);
        jw_num(j, "ms", a->ms);
        jw_close(j, '}');
    }
    jw_close(j, ']');
    if (r->audit_skipped)
        jw_str(j, "cublas_audit_skipped", r->audit_skipped);
}

static int write_json(const report *r, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "determinism: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    char commit[128], date[64], driver[128];
    bench_commit(DET_SOURCE_DIR, commit, sizeof commit);
    bench_date_utc(date, sizeof date);
    bench_driver_string(r->info.driver_version, driver, sizeof driver);

    jw j = {f, -1, {0}};
    jw_open(&j, NULL, '{');
    jw_str(&j, "benchmark", "determinism");
    jw_str(&j, "device", r->info.device_name);
    jw_str(&j, "driver", driver);
    jw_int(&j, "sms", r->info.sm_count);
    jw_str(&j, "commit", commit);
    jw_str(&j, "command", r->command);
    jw_str(&j, "date", date);
    jw_bool(&j, "simulated", r->simulated);
    jw_int(&j, "trials", r->opt->trials);
    jw_int(&j, "seed", (long long)r->opt->seed);
    jw_int(&j, "hidden", DET_HIDDEN);
    jw_int(&j, "vocab", DET_VOCAB);
    jw_int(&j, "vocab_compared", r->vocab_compared);
    if (r->simulated)
        jw_str(&j, "numerics", "host-computed from the simulator's kernel records (first vocab_compared rows)");
    json_config(&j, r, &r->detshare);
    json_config(&j, r, &r->slicing);
    json_config(&j, r, &r->slicing_bf16);
    json_audit(&j, r);
    jw_num(&j, "standalone_seconds", r->standalone_seconds);
    jw_open(&j, "batch_histogram", '{');
    for (uint32_t b = 1; b <= DET_MAX_BATCH; b++) {
        char key[8];
        snprintf(key, sizeof key, "%u", b);
        jw_int(&j, key, r->batch_hist[b]);
    }
    jw_close(&j, '}');
    jw_open(&j, "pool", '[');
    for (uint32_t p = 0; p < r->info.num_pctx; p++) {
        jw_open(&j, NULL, '{');
        jw_int(&j, "index", p);
        jw_int(&j, "sms", r->info.pctx[p].sm_count);
        jw_str(&j, "anchor", bench_anchor_name(r->info.pctx[p].anchor));
        jw_close(&j, '}');
    }
    jw_close(&j, ']');
    jw_open(&j, "be_load", '{');
    jw_int(&j, "kernels", (long long)r->be->kernels);
    jw_int(&j, "memory_bound_kernels", (long long)r->be->stream_kernels);
    jw_int(&j, "idle_periods", (long long)r->be->idles);
    jw_int(&j, "self_remaps", (long long)r->be->remaps);
    jw_close(&j, '}');
    jw_close(&j, '}');
    fputc('\n', f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "determinism: error writing %s\n", path);
        return -1;
    }
    return 0;
}

static void print_table(const report *r)
{
    printf("\n%-22s %7s %24s %22s\n", "config", "trials", "bitwise_mismatch_trials", "argmax_changed_trials");
    const config_result *cs[] = {&r->detshare, &r->slicing, &r->slicing_bf16};
    for (int i = 0; i < 3; i++)
        printf("%-22s %7u %24u %22u\n", cs[i]->name, cs[i]->trials, cs[i]->bitwise_mismatch_trials,
               cs[i]->argmax_changed_trials);
    printf("detshare trials per pCtx:");
    for (uint32_t p = 0; p < r->info.num_pctx; p++)
        printf(" %u(%u SMs)=%u", p, r->info.pctx[p].sm_count, r->detshare.per_pctx[p]);
    printf("\nslicing K histogram:");
    for (uint32_t k = 1; k <= DET_MAX_SLICES; k++)
        if (r->slicing.k_hist[k] || r->slicing_bf16.k_hist[k])
            printf(" K=%u:%u+%u", k, r->slicing.k_hist[k], r->slicing_bf16.k_hist[k]);
    printf("\n");
    if (r->audit_skipped) {
        printf("cuBLAS audit: skipped (%s)\n", r->audit_skipped);
    } else {
        size_t n = 0, eq = 0, nt = 0, eqt = 0;
        for (size_t i = 0; i < r->audit_count; i++) {
            if (r->audit[i].sm_count_target) {
                nt++;
                eqt += (size_t)r->audit[i].bitwise_equal;
            } else {
                n++;
                eq += (size_t)r->audit[i].bitwise_equal;
            }
        }
        printf("cuBLAS audit: %zu/%zu runs bitwise equal to the default stream (sections on every pCtx); "
               "%zu/%zu with cublasSetSmCountTarget(pCtx SMs)\n",
               eq, n, eqt, nt);
    }
    printf("%u trials, LM head %ux%u (%u vocab rows compared), batch 1-%d%s\n", r->opt->trials, DET_VOCAB,
           DET_HIDDEN, r->vocab_compared, DET_MAX_BATCH, r->simulated ? "  [SIMULATED DEVICE]" : "");
}

/* ------------------------------------------------------------------------ */
/* command line                                                              */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: determinism [options]\n"
            "  --device cuda|sim   device (default cuda; without a GPU: the simulator)\n"
            "  --seed N            seed of the trials' batch sizes and inputs (default 1)\n"
            "  --out FILE          write the JSON result there (docs/benchmarks.md, W3)\n"
            "  --trials N          trials per configuration (default %d)\n"
            "  --skip-cublas       leave out the cuBLAS audit\n"
            "  --check             exit 3 unless detshare has no mismatch, slicing has some and every\n"
            "                      pCtx was visited\n"
            "  --help              this text\n",
            DEFAULT_TRIALS);
}

static int parse_u64(const char *flag, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    return bench_parse_u64("determinism", flag, s, min, max, out);
}

static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){DS_DEVICE_CUDA, 1, NULL, DEFAULT_TRIALS, 0, 0};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        char buf[64];
        const char *val = NULL;
        const char *eq = strncmp(flag, "--", 2) == 0 ? strchr(flag, '=') : NULL;
        if (eq && (size_t)(eq - flag) < sizeof buf) {
            memcpy(buf, flag, (size_t)(eq - flag));
            buf[eq - flag] = '\0';
            flag = buf;
            val = eq + 1;
        }
        if (!strcmp(flag, "--help") || !strcmp(flag, "-h"))
            return 1;
        if (!strcmp(flag, "--skip-cublas")) {
            o->skip_cublas = 1;
            continue;
        }
        if (!strcmp(flag, "--check")) {
            o->check = 1;
            continue;
        }
        if (strcmp(flag, "--device") && strcmp(flag, "--seed") && strcmp(flag, "--out") && strcmp(flag, "--trials")) {
            fprintf(stderr, "determinism: unknown option %s (see --help)\n", argv[i]);
            return -1;
        }
        if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "determinism: %s needs a value (see --help)\n", flag);
                return -1;
            }
            val = argv[++i];
        }
        uint64_t u;
        if (!strcmp(flag, "--device")) {
            if (strcmp(val, "cuda") && strcmp(val, "sim")) {
                fprintf(stderr, "determinism: --device: '%s' is neither cuda nor sim\n", val);
                return -1;
            }
            o->device = !strcmp(val, "sim") ? DS_DEVICE_SIM : DS_DEVICE_CUDA;
            if (!strcmp(val, "cuda"))
                bench_require_cuda();
        } else if (!strcmp(flag, "--seed")) {
            if (parse_u64(flag, val, 0, UINT64_MAX, &o->seed))
                return -1;
        } else if (!strcmp(flag, "--out")) {
            o->out = val;
        } else {
            if (parse_u64(flag, val, 1, 10000000, &u))
                return -1;
            o->trials = (uint32_t)u;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* main flow                                                                 */

static int make_plan(bench *bn)
{
    const uint32_t n = bn->r->opt->trials;
    bn->plan = calloc(n, sizeof *bn->plan);
    bn->ref = calloc(n, sizeof *bn->ref);
    bn->r->trial_pctx = calloc(n, sizeof *bn->r->trial_pctx);
    bn->r->trial_policy = calloc(n, sizeof *bn->r->trial_policy);
    if (!bn->plan || !bn->ref || !bn->r->trial_pctx || !bn->r->trial_policy) {
        fprintf(stderr, "determinism: out of memory for %u trials\n", n);
        return -1;
    }
    bench_rng r;
    bench_rng_seed(&r, bn->r->opt->seed);
    for (uint32_t i = 0; i < n; i++) {
        bn->plan[i].index = i;
        bn->plan[i].batch = 1 + (uint32_t)(bench_rng_next(&r) % DET_MAX_BATCH);
        bn->plan[i].x_seed = bench_rng_next(&r);
        bn->r->batch_hist[bn->plan[i].batch]++;
    }
    return 0;
}

static int create_vctx(ds_runtime_t rt, const char *name, ds_vctx_class cls, uint32_t pctx, ds_vctx_t *v)
{
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = name;
    a.cls = cls;
    a.initial_pctx = (int32_t)pctx;
    if (cls == DS_CLASS_LATENCY_SENSITIVE)
        a.slo_us = 5000;
    BENCH_DS_CHECK(ds_vctx_create(rt, &a, v));
    return 0;
}

static int run(bench *bn, be_tenant *be, int ordinal)
{
    report *r = bn->r;
    ds_vctx_t bev = NULL;
    int rc = -1, be_running = 0;
    if (create_vctx(bn->rt, "ls", DS_CLASS_LATENCY_SENSITIVE, bn->full, &bn->ls) ||
        create_vctx(bn->rt, "be", DS_CLASS_BEST_EFFORT, bn->full, &bev))
        goto out;
    if ((r->simulated ? det_sim_create(bn->rt, &bn->b) : det_cuda_create(bn->rt, ordinal, bn->ls, &bn->b)))
        goto out;
    r->vocab_compared = bn->b->vocab;
    if (make_plan(bn) || warm_up(bn) || run_standalone(bn))
        goto out;

    be->b = bn->b;
    be->v = bev;
    be->info = &r->info;
    be->seed = r->opt->seed;
    atomic_init(&be->stop, 0);
    atomic_init(&be->busy_sms, 0);
    r->be = be;
    if (be_start(be))
        goto out;
    be_running = 1;
    if (run_detshare(bn))
        goto out;
    if (ds_runtime_set_policy(bn->rt, "manual") != DS_SUCCESS || run_slicing(bn, &r->slicing, be) ||
        run_slicing(bn, &r->slicing_bf16, be))
        goto out;
    be_running = 0;
    if (be_stop(be))
        goto out;
    printf("BE load: %llu kernels (%llu memory-bound), %llu idle periods, %llu self-remaps\n",
           (unsigned long long)be->kernels, (unsigned long long)be->stream_kernels, (unsigned long long)be->idles,
           (unsigned long long)be->remaps);

    if (r->simulated) {
        r->audit_skipped = "no GPU";
    } else if (r->opt->skip_cublas) {
        r->audit_skipped = "--skip-cublas";
    } else {
        uint64_t t0 = bench_now_ns();
        if (det_cublas_audit(bn->rt, &r->info, bn->ls, bn->b, &r->audit, &r->audit_count))
            goto out;
        printf("cuBLAS audit: %zu runs in %.1f s\n", r->audit_count, (double)(bench_now_ns() - t0) / 1e9);
    }
    rc = 0;
out:
    if (be_running && be_stop(be))
        rc = -1;
    if (bn->b)
        bn->b->ops->destroy(bn->b);
    bn->b = NULL;
    if (bev && ds_vctx_destroy(bev) != DS_SUCCESS)
        rc = -1;
    if (bn->ls && ds_vctx_destroy(bn->ls) != DS_SUCCESS)
        rc = -1;
    return rc;
}

static uint32_t full_pctx(const ds_runtime_info *info)
{
    for (uint32_t i = 0; i < info->num_pctx; i++)
        if (info->pctx[i].anchor == DS_ANCHOR_FULL)
            return i;
    return 0;
}

int main(int argc, char **argv)
{
    if (bench_version_flag("determinism", argc, argv))
        return 0;
    options o;
    static report r; /* large; zeroed */
    bench_command(argc, argv, r.command, sizeof r.command);
    int prc = parse_args(argc, argv, &o);
    if (prc > 0) {
        usage(stdout);
        return 0;
    }
    if (prc < 0)
        return 2;
    ds_log_set_handler(bench_log_to_stderr, NULL, DS_LOG_WARN);

    /* Tenants are threads that sleep and poll: simulated time follows the
     * wall clock. */
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.clock = DS_SIM_CLOCK_REALTIME;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = o.device;
    cfg.policy = "manual"; /* forced remaps must stick; policies are switched in now and then */
    ds_runtime_t rt;
    if (bench_runtime_open(&cfg, &sim, &rt, &r.simulated))
        return 1;
    r.opt = &o;
    r.info = (ds_runtime_info)DS_RUNTIME_INFO_INIT;
    int rc = ds_runtime_info_get(rt, &r.info) == DS_SUCCESS ? 0 : -1;
    if (rc)
        fprintf(stderr, "determinism: ds_runtime_info_get: %s\n", ds_last_error_message());
    r.detshare.name = "detshare";
    r.slicing.name = "slicing";
    r.slicing_bf16.name = "slicing_bf16_partials";
    r.slicing_bf16.bf16_partials = 1;
    static be_tenant be;
    r.be = &be;
    bench bn = {.rt = rt, .r = &r};
    if (rc == 0) {
        bench_print_pool(&r.info, r.simulated);
        bn.full = full_pctx(&r.info);
        if (o.trials - o.trials / POLICY_EVERY < r.info.num_pctx)
            printf("note: %u trials may not visit all %u pCtxs\n", o.trials, r.info.num_pctx);
        rc = run(&bn, &be, cfg.device_ordinal);
    }
    free(bn.plan);
    free(bn.ref);
    if (rc == 0 && o.out) {
        if (write_json(&r, o.out) == 0)
            printf("wrote %s\n", o.out);
        else
            rc = -1;
    }
    if (rc == 0)
        print_table(&r);
    free(r.audit);
    free(r.trial_pctx);
    free(r.trial_policy);
    ds_status st = ds_runtime_destroy(rt);
    if (st != DS_SUCCESS) {
        fprintf(stderr, "determinism: ds_runtime_destroy -> %s: %s\n", ds_status_name(st), ds_last_error_message());
        rc = -1;
    }
    if (rc)
        return 1;
    if (o.check) {
        const int ok = r.detshare.bitwise_mismatch_trials == 0 && r.detshare.argmax_changed_trials == 0 &&
                       r.detshare.remaps_not_honoured == 0 && all_tiers_visited(&r) &&
                       r.slicing.bitwise_mismatch_trials > 0 && r.slicing_bf16.bitwise_mismatch_trials > 0;
        if (!ok) {
            fprintf(stderr, "determinism: --check failed: detshare %u mismatches, %u argmax changes, %u remaps not "
                            "honoured, all pCtxs visited: %s; slicing %u and %u mismatches\n",
                    r.detshare.bitwise_mismatch_trials, r.detshare.argmax_changed_trials,
                    r.detshare.remaps_not_honoured, all_tiers_visited(&r) ? "yes" : "no",
                    r.slicing.bitwise_mismatch_trials, r.slicing_bf16.bitwise_mismatch_trials);
            return 3;
        }
    }
    return 0;
}
