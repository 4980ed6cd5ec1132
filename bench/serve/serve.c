/*
 * serve: trace-driven LLM serving with prefill/decode multiplexing, alone and
 * beside a training tenant (W5 in docs/benchmarks.md).
 *
 * A Llama-3-8B-shaped engine (engine.h; --layers of its 32 layers) serves
 * requests replayed from an LLM inference trace (trace.h; the Azure 2023
 * "code" trace in data/traces/ by default) with iteration-level continuous
 * batching and chunked prefill, in the modes of loop.h: single,
 * pdmux_static (SGLang's PD multiplexing, pdmux.h), slo_aware,
 * slo_aware_nogates and tpot_first; beside the BE tenant also priority and
 * static@N (N = 16, 32, 48, 64, 80, 96), the baselines of slo_aware's
 * right-sizing. In one run:
 *
 *  1. capacity: `single` serving --requests requests that all arrive at once;
 *     its requests/s is load 1.0 (unless --capacity-rps);
 *  2. SLOs: `single` at load 0.1 (--slo-requests requests): TTFT SLO = 5x its
 *     p50 TTFT, TPOT SLO = 2x its p50 TPOT (unless --slo-ttft-ms/--slo-tpot-ms),
 *     then kept for every mode and load;
 *  3. the sweep: every mode at every --loads value, --reps repetitions, each
 *     repetition on its own window of the trace (requests [rep * N, rep * N +
 *     N)), inter-arrival times scaled to load x capacity; with --settle S, each
 *     run of the sweep and of co-location first serves S settle requests in
 *     the same arrival stream (repetition rep replays [rep * (S + N), rep *
 *     (S + N) + S + N)), unmeasured: a policy that sizes from the SLO
 *     attainment it has recorded (slo_aware's decode tier) is judged after it
 *     has sized, as bench/colocate's settle phase does. The figures then
 *     cover the window alone: the last N requests, from the first one's
 *     arrival, the decode steps whose tokens came out after it, BE's steps
 *     and decode's SMs from then on;
 *  4. co-location (--colocate LOAD, 0 = off): every mode at that load beside
 *     W1's BE training tenant (bench/colocate), and the BE tenant alone;
 *     figures normalized to the same mode alone at that load and repetition
 *     (priority and static@N run beside BE only: no such norms), BE's
 *     throughput to BE alone (be_tput_norm).
 *  5. the right-sizing verdict (in "colocated"): decode records each step's
 *     inter-token interval as a request on its vCtx (slo_us = the TPOT SLO),
 *     from which slo_aware sizes decode's tier; tpot_attainment is the share
 *     of those steps within the SLO (the decode vCtx's ds_vctx_stats). The
 *     verdict judges it as Wilson's 95% interval over the steps of all
 *     repetitions: the baselines priority and static@N whose interval's
 *     lower end reaches --target clearly meet it; slo_aware should meet it
 *     (upper end) where one does, give BE at most 0.03 less than the best
 *     of them, and be dominated by none on TPOT p99 and be_tput_norm (as
 *     good on both medians, better on one with the ranges over the
 *     repetitions apart): bench/common/verdict.h, the rule colocate uses too.
 * The pool: the whole GPU, LOW tiers of 16-96 SMs (steps of 16) with their
 * HIGH complements, pdmux_static's splits (open_runtime).
 * Figures per mode and load are medians over repetitions with their range.
 * Output: --out FILE (JSON, shaped as docs/benchmarks.md W5 says), plots with
 * python3 bench/dsbench plot-serve, and a table printed last.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <detshare/detshare.h>
#include <detshare/policy.h>
#include <detshare/sim.h>

#include <cuda_runtime_api.h>

#include "bench.h"
#include "verdict.h"
#include "engine.h"
#include "loop.h"
#include "pdmux.h"
#include "trace.h"

#ifndef SERVE_SOURCE_DIR
#define SERVE_SOURCE_DIR "."
#endif

#define MAX_LOADS 12
#define MAX_REPS 9
#define SLO_REQUESTS_GPU 50  /* the SLO run's requests by default on a GPU ... */
#define SLO_REQUESTS_SIM 16  /* ... and on the simulated device */
#define SLO_LOAD 0.1          /* docs/benchmarks.md W5: SLOs from `single` at 10% of its capacity */
#define TTFT_SLO_FACTOR 5.0   /* x single's p50 TTFT there */
#define TPOT_SLO_FACTOR 2.0   /* x single's p50 TPOT there */
#define SINGLE_OK_SHARE 0.90  /* "single still meets its SLOs on 90% of requests" */
/* SGLang's chunked_prefill_size for GPUs of 60-90 GB (server_args.py). */
#define DEFAULT_CHUNK 8192
#define DEFAULT_TARGET 0.99        /* --target */

typedef struct options {
    ds_device_kind device;
    uint64_t seed;
    const char *out;
    const char *trace;
    int poisson;
    uint32_t layers, max_batch, chunk, max_ctx, ls_sms;
    /* ls_sms: the runtime's ls_sms and slo_aware's decode_sms (0: the policies' defaults);
     * tpot_ls_sms: tpot_first's ls_sms, prefill_sms half of it (0: ls_sms) */
    uint32_t tpot_ls_sms;
    uint32_t be_window_us; /* be_window_us of slo_aware(_nogates) and tpot_first; 0 = theirs */
    int prefill_whole;     /* prefill_whole of slo_aware(_nogates); -1 = theirs */
    int prefill_press;     /* prefill_press of slo_aware(_nogates); -1 = theirs */
    int reserve;           /* reserve of slo_aware(_nogates); -1 = theirs */
    size_t requests, slo_requests; /* 0: the device's default */
    size_t settle;                 /* settle requests before each sweep and co-located run's window */
    double loads[MAX_LOADS];
    size_t nloads;
    unsigned reps;
    double slo_ttft_ms, slo_tpot_ms; /* 0: measured */
    double capacity_rps;             /* 0: measured */
    double colocate;                 /* load of the co-located runs, 0 = none */
    double target;                   /* TPOT attainment target: slo_aware's `target` and the verdict's */
    int modes[MODE_COUNT];
} options;

/* tpot_first's prefill_sms from --tpot-ls-sms or --ls-sms (half of it, at
 * least 1); 0 when neither was given (the policy's default). */
static uint32_t tpot_prefill_sms(const options *o)
{
    uint32_t n = o->tpot_ls_sms ? o->tpot_ls_sms : o->ls_sms;
    return n == 0 ? 0 : n / 2 ? n / 2 : 1;
}

/* In the load sweep (alone): the selected modes but priority and static@N,
 * which run beside the BE tenant only. */
static int swept(const options *o, int m) { return o->modes[m] && !serve_mode_colocated_only((serve_mode)m); }

/* ------------------------------------------------------------------------ */
/* figures                                                                   */

typedef struct figures {
    double ttft_p50, ttft_p99, tpot_p50, tpot_p99; /* ms */
    double ttft_viol, tpot_viol;                   /* fractions of requests */
    double goodput, tok_s;                         /* requests/s meeting both SLOs, output tokens/s */
    double both_ok;                                /* fraction of requests meeting both SLOs */
    double makespan_s;
    double decode_bs_mean;
    double tpot_att;        /* decode steps within the TPOT SLO / decode steps (two-thread modes; else NAN) */
    double be_steps_per_s;
    double decode_steps;    /* decode steps recorded as requests (not in FIGS) */
    double decode_within;   /* those within the TPOT SLO (not in FIGS; the verdict's count) */
    double decode_sms_mean; /* decode's SMs, time-weighted (with a timeline; else NAN; not in FIGS) */
} figures;

/* The figures every result carries, by key, for medians and ranges. */
static const struct {
    const char *key;
    size_t off;
} FIGS[] = {
    {"ttft_p50_ms", offsetof(figures, ttft_p50)},   {"ttft_p99_ms", offsetof(figures, ttft_p99)},
    {"tpot_p50_ms", offsetof(figures, tpot_p50)},   {"tpot_p99_ms", offsetof(figures, tpot_p99)},
    {"ttft_slo_violation", offsetof(figures, ttft_viol)},
    {"tpot_slo_violation", offsetof(figures, tpot_viol)},
    {"goodput_rps", offsetof(figures, goodput)},    {"output_tokens_per_s", offsetof(figures, tok_s)},
    {"slo_attainment", offsetof(figures, both_ok)}, {"makespan_s", offsetof(figures, makespan_s)},
    {"decode_batch_mean", offsetof(figures, decode_bs_mean)}, {"tpot_attainment", offsetof(figures, tpot_att)},
};
#define NUM_FIGS (sizeof FIGS / sizeof FIGS[0])

static double *fig(figures *f, size_t k) { return (double *)((char *)f + FIGS[k].off); }
static double fig_c(const figures *f, size_t k) { return *(const double *)((const char *)f + FIGS[k].off); }

typedef struct cell {
    unsigned nrep;
    figures rep[MAX_REPS];
    figures med, lo, hi;
    double *ttft_ms, *tpot_ms; /* repetition 0, per request */
    size_t nttft, ntpot;
    serve_outcome tl;          /* repetition 0's timeline */
    uint64_t pdmux_changes, remaps[2];
} cell;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Figures of one run; ttft_ms/tpot_ms (n entries each) get the per-request
 * values (TPOT only for requests with more than one output token). */
static void compute(const serve_req_result *r, size_t n, double makespan_us, double ttft_slo_ms,
                    double tpot_slo_ms, figures *f, double *ttft_ms, double *tpot_ms, size_t *ntpot)
{
    size_t nt = 0, good = 0, late_ttft = 0, late_tpot = 0;
    double tokens = 0;
    for (size_t i = 0; i < n; i++) {
        double ttft = (r[i].first_us - r[i].arrival_us) / 1e3;
        ttft_ms[i] = ttft;
        int ok_ttft = ttft <= ttft_slo_ms, ok_tpot = 1;
        if (r[i].output > 1) {
            double tpot = (r[i].done_us - r[i].first_us) / 1e3 / (double)(r[i].output - 1);
            tpot_ms[nt++] = tpot;
            ok_tpot = tpot <= tpot_slo_ms;
        }
        late_ttft += !ok_ttft;
        late_tpot += !ok_tpot;
        good += ok_ttft && ok_tpot;
        tokens += r[i].output;
    }
    double span_s = makespan_us / 1e6;
    f->makespan_s = span_s;
    f->ttft_viol = (double)late_ttft / (double)n;
    f->tpot_viol = (double)late_tpot / (double)n;
    f->both_ok = (double)good / (double)n;
    f->goodput = span_s > 0 ? (double)good / span_s : 0;
    f->tok_s = span_s > 0 ? tokens / span_s : 0;
    bench_summary ttft, tpot;
    bench_summarize(ttft_ms, n, &ttft);
    bench_summarize(tpot_ms, nt, &tpot);
    f->ttft_p50 = ttft.p50;
    f->ttft_p99 = ttft.p99;
    f->tpot_p50 = tpot.p50;
    f->tpot_p99 = tpot.p99;
    *ntpot = nt;
}

/* Median and range over the cell's repetitions. */
static void summarize(cell *c)
{
    double v[MAX_REPS];
    for (size_t k = 0; k < NUM_FIGS; k++) {
        for (unsigned i = 0; i < c->nrep; i++)
            v[i] = fig_c(&c->rep[i], k);
        qsort(v, c->nrep, sizeof v[0], cmp_double);
        *fig(&c->lo, k) = c->nrep ? v[0] : NAN;
        *fig(&c->hi, k) = c->nrep ? v[c->nrep - 1] : NAN;
        *fig(&c->med, k) = bench_percentile(v, c->nrep, 0.5);
    }
    for (unsigned i = 0; i < c->nrep; i++)
        v[i] = c->rep[i].be_steps_per_s;
    qsort(v, c->nrep, sizeof v[0], cmp_double);
    c->med.be_steps_per_s = bench_percentile(v, c->nrep, 0.5);
    unsigned k = 0;
    for (unsigned i = 0; i < c->nrep; i++)
        if (isfinite(c->rep[i].decode_sms_mean))
            v[k++] = c->rep[i].decode_sms_mean;
    qsort(v, k, sizeof v[0], cmp_double);
    c->med.decode_sms_mean = k ? bench_percentile(v, k, 0.5) : NAN;
}

/* ------------------------------------------------------------------------ */
/* the run                                                                   */

typedef struct bench {
    options *o;
    serve_env env;
    ds_runtime_info info;
    int simulated;
    serve_trace trace;
    serve_arrival *arr;
    serve_req_result *res;
    double *ttft_ms, *tpot_ms;
    size_t nmax; /* entries of arr, res, ttft_ms and tpot_ms: the largest run's requests */
    double capacity_rps;
    double ttft_slo_ms, tpot_slo_ms;
    figures slo_run;
    size_t capped_max;
    int mode_w; /* width of the mode column: the longest of the modes run and be_alone */
    cell cells[MAX_LOADS][MODE_COUNT];
    cell coloc[MODE_COUNT];
    double be_alone[MAX_REPS];
    unsigned be_alone_n;
    char command[2048];
} bench;

/* The decoding vCtx's SMs over [start_ms, end_ms] of the run's timeline,
 * time-weighted ("decode", or "serve" in single); NAN without a timeline. */
static double decode_sms_mean(const bench *b, const serve_outcome *out, double start_ms, double end_ms)
{
    for (size_t t = 0; t < out->timelines; t++) {
        const serve_timeline *tl = &out->timeline[t];
        if (strcmp(tl->name, "decode") && strcmp(tl->name, "serve"))
            continue;
        double acc = 0, covered = 0;
        for (size_t i = 0; i < tl->n; i++) {
            double t0 = tl->t_ms[i] > start_ms ? tl->t_ms[i] : start_ms;
            double t1 = i + 1 < tl->n ? tl->t_ms[i + 1] : end_ms;
            if (t1 > end_ms)
                t1 = end_ms;
            if (t1 <= t0 || tl->pctx[i] >= b->info.num_pctx)
                continue;
            acc += b->info.pctx[tl->pctx[i]].sm_count * (t1 - t0);
            covered += t1 - t0;
        }
        return covered > 0 ? acc / covered : NAN;
    }
    return NAN;
}

/* One run of `mode` at `rate_rps` on repetition rep's trace window: settle
 * requests, then the n measured. */
static int run_one(bench *b, serve_mode mode, double rate_rps, unsigned rep, size_t n, size_t settle, int with_be,
                   int timeline, figures *f, cell *keep)
{
    serve_window_info wi;
    if (settle + n > b->nmax) { /* a run the arrays were not sized for: refused, never written past */
        fprintf(stderr, "serve: a run of %zu requests does not fit the %zu the run's arrays hold\n", settle + n,
                b->nmax);
        return -1;
    }
    if (serve_trace_window(&b->trace, (size_t)rep * (settle + n), settle + n, rate_rps, b->o->poisson,
                           b->o->seed + rep, b->o->max_ctx, b->arr, &wi)) {
        fprintf(stderr, "serve: cannot make a window of %zu requests from the trace\n", settle + n);
        return -1;
    }
    if (wi.capped > b->capped_max)
        b->capped_max = wi.capped;
    serve_outcome out = {.req = b->res};
    b->env.token_seed = b->o->seed * 0x9e3779b97f4a7c15ull + rep;
    if (serve_run(&b->env, mode, with_be, b->arr, settle + n, settle, timeline, &out)) {
        serve_outcome_free(&out);
        return -1;
    }
    size_t ntpot;
    compute(b->res, n, out.makespan_us, b->ttft_slo_ms, b->tpot_slo_ms, f, b->ttft_ms, b->tpot_ms, &ntpot);
    f->decode_bs_mean = out.decode_bs_mean;
    f->be_steps_per_s = out.be_steps_per_s;
    /* TPOT attainment: the decode vCtx's own request counts (ds_vctx_stats) in the window */
    f->decode_steps = mode == MODE_SINGLE ? 0 : (double)out.decode_steps;
    f->decode_within = mode == MODE_SINGLE ? 0 : (double)(out.decode_steps - out.decode_over_slo);
    f->tpot_att = mode != MODE_SINGLE && out.decode_steps > 0
                      ? 1.0 - (double)out.decode_over_slo / (double)out.decode_steps
                      : NAN;
    f->decode_sms_mean = decode_sms_mean(b, &out, out.open_us / 1e3, (out.open_us + out.makespan_us) / 1e3);
    if (keep) {
        keep->ttft_ms = malloc(n * sizeof(double));
        keep->tpot_ms = malloc((ntpot ? ntpot : 1) * sizeof(double));
        if (keep->ttft_ms && keep->tpot_ms) {
            memcpy(keep->ttft_ms, b->ttft_ms, n * sizeof(double));
            memcpy(keep->tpot_ms, b->tpot_ms, ntpot * sizeof(double));
            keep->nttft = n;
            keep->ntpot = ntpot;
        }
        keep->tl = out;
        keep->tl.req = NULL;
        keep->pdmux_changes = out.pdmux_changes;
        keep->remaps[0] = out.stats[0].remaps;
        keep->remaps[1] = out.stats[1].remaps;
    } else {
        serve_outcome_free(&out);
    }
    printf("  %-*s rate %7.2f/s rep %u: TTFT p50 %8.2f p99 %8.2f ms, TPOT p50 %6.2f p99 %6.2f ms, "
           "goodput %6.2f/s\n",
           b->mode_w, serve_mode_name(mode), rate_rps, rep, f->ttft_p50, f->ttft_p99, f->tpot_p50, f->tpot_p99,
           f->goodput);
    if (with_be)
        printf("  %-*s   beside BE: BE %.1f steps/s, decode steps within the TPOT SLO %.4f of %.0f, "
               "decode on %.0f SMs (mean)\n",
               b->mode_w, "", f->be_steps_per_s, f->tpot_att, f->decode_steps, f->decode_sms_mean);
    fflush(stdout);
    return 0;
}

static size_t requests_default(const bench *b) { return b->o->requests ? b->o->requests : b->simulated ? 24 : 200; }

/* Requests of the SLO run (--slo-requests, else the device's default): one
 * definition for the run and for the arrays it fills. (Sizing the arrays from
 * the flag alone left them --requests long when the default was larger, 50 on
 * a GPU: the SLO run then wrote past them.) */
static size_t slo_requests(const bench *b)
{
    return b->o->slo_requests ? b->o->slo_requests : b->simulated ? SLO_REQUESTS_SIM : SLO_REQUESTS_GPU;
}

static int calibrate(bench *b)
{
    options *o = b->o;
    size_t n = requests_default(b);
    /* SLOs are unknown yet: compute() needs some; the figures used here
     * (makespan, p50s) do not depend on them. */
    b->ttft_slo_ms = b->tpot_slo_ms = INFINITY;
    if (o->capacity_rps > 0) {
        b->capacity_rps = o->capacity_rps;
    } else {
        figures f;
        printf("capacity: single, %zu requests arriving at once\n", n);
        if (run_one(b, MODE_SINGLE, 0, 0, n, 0, 0, 0, &f, NULL))
            return -1;
        b->capacity_rps = (double)n / f.makespan_s;
    }
    printf("capacity: %.2f requests/s (load 1.0)\n", b->capacity_rps);
    if (o->slo_ttft_ms > 0 && o->slo_tpot_ms > 0) {
        b->ttft_slo_ms = o->slo_ttft_ms;
        b->tpot_slo_ms = o->slo_tpot_ms;
    } else {
        size_t ns = slo_requests(b);
        printf("SLOs: single at load %.2f, %zu requests\n", SLO_LOAD, ns);
        if (run_one(b, MODE_SINGLE, SLO_LOAD * b->capacity_rps, 0, ns, 0, 0, 0, &b->slo_run, NULL))
            return -1;
        b->ttft_slo_ms = o->slo_ttft_ms > 0 ? o->slo_ttft_ms : TTFT_SLO_FACTOR * b->slo_run.ttft_p50;
        b->tpot_slo_ms = o->slo_tpot_ms > 0 ? o->slo_tpot_ms : TPOT_SLO_FACTOR * b->slo_run.tpot_p50;
    }
    b->env.tpot_slo_us = (uint32_t)llround(b->tpot_slo_ms * 1e3);
    b->env.ttft_slo_us = (uint32_t)fmin(llround(b->ttft_slo_ms * 1e3), (double)UINT32_MAX);
    printf("SLOs: TTFT %.2f ms, TPOT %.2f ms\n", b->ttft_slo_ms, b->tpot_slo_ms);
    return 0;
}

static int sweep(bench *b)
{
    options *o = b->o;
    size_t n = requests_default(b);
    for (unsigned rep = 0; rep < o->reps; rep++)
        for (size_t l = 0; l < o->nloads; l++) {
            printf("load %.2f, repetition %u\n", o->loads[l], rep);
            for (int m = 0; m < MODE_COUNT; m++) {
                if (!swept(o, m))
                    continue;
                cell *c = &b->cells[l][m];
                if (run_one(b, (serve_mode)m, o->loads[l] * b->capacity_rps, rep, n, o->settle, 0, rep == 0,
                            &c->rep[c->nrep], rep == 0 ? c : NULL))
                    return -1;
                c->nrep++;
            }
        }
    for (size_t l = 0; l < o->nloads; l++)
        for (int m = 0; m < MODE_COUNT; m++)
            if (swept(o, m))
                summarize(&b->cells[l][m]);
    return 0;
}

static size_t colocate_load_index(const options *o)
{
    for (size_t l = 0; l < o->nloads; l++)
        if (fabs(o->loads[l] - o->colocate) < 1e-9)
            return l;
    return o->nloads;
}

static int colocated(bench *b)
{
    options *o = b->o;
    size_t n = requests_default(b);
    size_t li = colocate_load_index(o);
    for (unsigned rep = 0; rep < o->reps; rep++) {
        printf("co-located with the BE tenant, load %.2f, repetition %u\n", o->colocate, rep);
        for (int m = 0; m < MODE_COUNT; m++) {
            if (!o->modes[m])
                continue;
            cell *c = &b->coloc[m];
            if (run_one(b, (serve_mode)m, o->colocate * b->capacity_rps, rep, n, o->settle, 1, 1, &c->rep[c->nrep],
                        NULL))
                return -1;
            c->nrep++;
        }
        /* BE alone over the window single took alone at this load. */
        double window_us = b->cells[li][MODE_SINGLE].rep[rep].makespan_s * 1e6;
        if (!(window_us > 0))
            window_us = 2e6;
        if (serve_be_alone(&b->env, window_us, &b->be_alone[b->be_alone_n]))
            return -1;
        printf("  %-*s %.1f steps/s over %.2f s\n", b->mode_w, "be_alone", b->be_alone[b->be_alone_n],
               window_us / 1e6);
        b->be_alone_n++;
    }
    for (int m = 0; m < MODE_COUNT; m++)
        if (o->modes[m])
            summarize(&b->coloc[m]);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* normalized co-location figures                                            */

typedef struct coloc_norm {
    double tpot_p99, ttft_p99, goodput, be_tput; /* medians over repetitions (NAN: no reference) */
    double tpot_p99_lo, tpot_p99_hi, be_tput_lo, be_tput_hi;
    double be_reps[MAX_REPS]; /* be_tput_norm per repetition, in order */
    unsigned nbe;
} coloc_norm;

/* Sorts v[0..n) and gives its median, or NAN when empty. */
static double median_of(double *v, unsigned n)
{
    qsort(v, n, sizeof v[0], cmp_double);
    return n ? bench_percentile(v, n, 0.5) : NAN;
}

/* Mode m beside BE over itself alone at that load (not for priority and
 * static@N: they run beside BE only) and over BE alone (every mode). */
static void coloc_normalize(const bench *b, int m, coloc_norm *out)
{
    size_t li = colocate_load_index(b->o);
    const cell *alone = &b->cells[li][m], *with = &b->coloc[m];
    double tp[MAX_REPS], tt[MAX_REPS], gp[MAX_REPS], be[MAX_REPS];
    unsigned n = with->nrep < alone->nrep ? with->nrep : alone->nrep;
    unsigned nb = with->nrep < b->be_alone_n ? with->nrep : b->be_alone_n;
    for (unsigned i = 0; i < n; i++) {
        tp[i] = with->rep[i].tpot_p99 / alone->rep[i].tpot_p99;
        tt[i] = with->rep[i].ttft_p99 / alone->rep[i].ttft_p99;
        gp[i] = alone->rep[i].goodput > 0 ? with->rep[i].goodput / alone->rep[i].goodput : NAN;
    }
    for (unsigned i = 0; i < nb; i++)
        out->be_reps[i] = be[i] = b->be_alone[i] > 0 ? with->rep[i].be_steps_per_s / b->be_alone[i] : NAN;
    out->nbe = nb;
    out->tpot_p99 = median_of(tp, n);
    out->ttft_p99 = median_of(tt, n);
    out->goodput = median_of(gp, n);
    out->be_tput = median_of(be, nb);
    out->tpot_p99_lo = n ? tp[0] : NAN;
    out->tpot_p99_hi = n ? tp[n - 1] : NAN;
    out->be_tput_lo = nb ? be[0] : NAN;
    out->be_tput_hi = nb ? be[nb - 1] : NAN;
}

/* ------------------------------------------------------------------------ */
/* the co-located right-sizing verdict                                      */

/* Judged (common/verdict.h) on the co-located figures: the decode steps
 * within the TPOT SLO and all decode steps, summed over the repetitions (the
 * counts behind tpot_attainment), TPOT p99 in ms and be_tput_norm (median and
 * range over the repetitions). The baselines are priority and static@N;
 * slo_aware is judged against those that ran. */
typedef struct serve_verdict {
    verdict v;
    verdict_input in;
    const char *names[MODE_COUNT];
    int baseline[MODE_COUNT];
    ranged lat[MODE_COUNT], be[MODE_COUNT];
    double within[MODE_COUNT], total[MODE_COUNT];
} serve_verdict;

_Static_assert(MODE_COUNT <= VERDICT_MAX, "the verdict looks at every mode");

static void judge(const bench *b, serve_verdict *sv)
{
    const options *o = b->o;
    for (int m = 0; m < MODE_COUNT; m++) {
        sv->names[m] = serve_mode_name((serve_mode)m);
        sv->baseline[m] = o->modes[m] && serve_mode_colocated_only((serve_mode)m);
        sv->lat[m] = sv->be[m] = (ranged){NAN, NAN, NAN};
        sv->within[m] = sv->total[m] = NAN;
        if (!o->modes[m])
            continue;
        coloc_norm cn;
        coloc_normalize(b, m, &cn);
        const cell *c = &b->coloc[m];
        ranged lat = {c->med.tpot_p99, INFINITY, -INFINITY};
        double within = 0.0, total = 0.0;
        for (unsigned i = 0; i < c->nrep; i++) {
            lat.min = fmin(lat.min, c->rep[i].tpot_p99);
            lat.max = fmax(lat.max, c->rep[i].tpot_p99);
            within += c->rep[i].decode_within;
            total += c->rep[i].decode_steps;
        }
        sv->lat[m] = lat;
        sv->be[m] = (ranged){cn.be_tput, cn.be_tput_lo, cn.be_tput_hi};
        sv->within[m] = within;
        sv->total[m] = total;
    }
    sv->in = (verdict_input){.n = MODE_COUNT, .names = sv->names, .baseline = sv->baseline,
                             .judged = o->modes[MODE_SLO_AWARE] ? (size_t)MODE_SLO_AWARE : (size_t)MODE_COUNT,
                             .lat = sv->lat, .be = sv->be, .within = sv->within, .total = sv->total,
                             .target = o->target};
    if (verdict_judge(&sv->in, &sv->v))
        fprintf(stderr, "serve: the verdict cannot judge these figures (decode step counts or --target)\n");
}

static void json_verdict(bench_json *j, const serve_verdict *sv)
{
    bench_json_object(j, "verdict");
    bench_json_string(j, "attainment", "decode steps within the TPOT SLO of all decode steps, summed over the "
                                       "repetitions (the counts behind tpot_attainment)");
    verdict_json(j, &sv->in, &sv->v);
    bench_json_end(j);
}

static void print_verdict(const bench *b, const serve_verdict *sv)
{
    printf("verdict at load %.2f (target %.4g): ", b->o->colocate, sv->v.target);
    verdict_print(stdout, &sv->in, &sv->v);
    printf("\n");
}

/* The highest load at which single meets both SLOs on SINGLE_OK_SHARE of its
 * requests (median over repetitions); -1 if none. */
static int single_ok_load(const bench *b)
{
    int best = -1;
    for (size_t l = 0; l < b->o->nloads; l++) {
        if (b->cells[l][MODE_SINGLE].med.both_ok >= SINGLE_OK_SHARE && (best < 0 || b->o->loads[l] > b->o->loads[best]))
            best = (int)l;
    }
    return best;
}

/* Goodput as a capacity (DistServe's definition): the highest load at which
 * the mode meets both SLOs on SINGLE_OK_SHARE of its requests (median
 * attainment over repetitions), interpolated linearly between the two sweep
 * loads around the crossing. *censored: met at every load (the value is the
 * highest load), or at none (0). */
static double capacity_at_target(const bench *b, int m, int *censored)
{
    size_t idx[MAX_LOADS], n = b->o->nloads;
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    for (size_t i = 1; i < n; i++) /* by load; n is tiny */
        for (size_t k = i; k > 0 && b->o->loads[idx[k]] < b->o->loads[idx[k - 1]]; k--) {
            size_t t = idx[k];
            idx[k] = idx[k - 1];
            idx[k - 1] = t;
        }
    *censored = 0;
    double prev_load = 0, prev_att = 1;
    for (size_t i = 0; i < n; i++) {
        double load = b->o->loads[idx[i]], att = b->cells[idx[i]][m].med.both_ok;
        if (att < SINGLE_OK_SHARE) {
            if (i == 0) {
                *censored = 1;
                return 0;
            }
            return prev_load + (load - prev_load) * (prev_att - SINGLE_OK_SHARE) / (prev_att - att);
        }
        prev_load = load;
        prev_att = att;
    }
    *censored = 1;
    return prev_load;
}

/* ------------------------------------------------------------------------ */
/* output                                                                    */

static void json_figures(bench_json *j, const cell *c)
{
    for (size_t k = 0; k < NUM_FIGS; k++)
        bench_json_number(j, FIGS[k].key, fig_c(&c->med, k));
    bench_json_object(j, "range");
    for (size_t k = 0; k < NUM_FIGS; k++) {
        double v[2] = {fig_c(&c->lo, k), fig_c(&c->hi, k)};
        bench_json_number_array(j, FIGS[k].key, v, 2);
    }
    bench_json_end(j);
    bench_json_array(j, "reps");
    for (unsigned i = 0; i < c->nrep; i++) {
        bench_json_object(j, NULL);
        for (size_t k = 0; k < NUM_FIGS; k++)
            bench_json_number(j, FIGS[k].key, fig_c(&c->rep[i], k));
        if (c->rep[i].be_steps_per_s > 0)
            bench_json_number(j, "be_steps_per_s", c->rep[i].be_steps_per_s);
        if (c->rep[i].decode_steps > 0)
            bench_json_number(j, "decode_steps", c->rep[i].decode_steps);
        if (isfinite(c->rep[i].decode_sms_mean))
            bench_json_number(j, "decode_sms_mean", c->rep[i].decode_sms_mean);
        bench_json_end(j);
    }
    bench_json_end(j);
}

static void json_timeline(bench_json *j, const bench *b, const cell *c, int mode, double load)
{
    bench_json_string(j, "mode", serve_mode_name((serve_mode)mode));
    bench_json_number(j, "load", load);
    bench_json_array(j, "pctx");
    for (uint32_t i = 0; i < b->info.num_pctx; i++) {
        bench_json_object(j, NULL);
        bench_json_int(j, "index", i);
        bench_json_int(j, "sms", b->info.pctx[i].sm_count);
        bench_json_string(j, "anchor", bench_anchor_name(b->info.pctx[i].anchor));
        bench_json_end(j);
    }
    bench_json_end(j);
    bench_json_object(j, "vctx");
    for (size_t t = 0; t < c->tl.timelines; t++) {
        const serve_timeline *tl = &c->tl.timeline[t];
        bench_json_array(j, tl->name);
        for (size_t i = 0; i < tl->n; i++) {
            double v[2] = {tl->t_ms[i], tl->pctx[i]};
            bench_json_number_array(j, NULL, v, 2);
        }
        bench_json_end(j);
    }
    bench_json_end(j);
}

static const int LIB_MODES[] = {MODE_SLO_AWARE, MODE_SLO_NOGATES, MODE_TPOT_FIRST};

/* with_colocated: the "colocated" section too (its runs are done). */
static int write_json(const bench *b, const char *path, int cdf_load, int with_colocated)
{
    const options *o = b->o;
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "serve: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    bench_json j;
    bench_json_begin(&j, f);
    bench_json_provenance(&j, "serve", &b->info, SERVE_SOURCE_DIR, b->command, b->simulated);
    bench_json_object(&j, "model");
    bench_json_string(&j, "shapes", "Llama-3-8B: hidden 4096, 32 heads, 8 KV heads, head dim 128, MLP 14336, "
                                    "vocab 128256, bf16, random weights, greedy");
    bench_json_int(&j, "layers", b->env.engine->model.layers);
    bench_json_int(&j, "layers_full_model", 32);
    bench_json_int(&j, "max_ctx", b->env.engine->model.max_ctx);
    bench_json_int(&j, "max_batch", b->env.engine->model.max_batch);
    bench_json_int(&j, "chunk_tokens", b->env.engine->model.chunk_tokens);
    bench_json_string(&j, "engine", b->env.engine->ops->name);
    bench_json_end(&j);
    bench_json_object(&j, "workload");
    bench_json_string(&j, "trace", o->trace);
    bench_json_string(&j, "arrivals", o->poisson ? "poisson (trace lengths)" : "trace, inter-arrivals scaled");
    bench_json_int(&j, "requests_per_run", (long long)requests_default(b));
    bench_json_int(&j, "repetitions", o->reps);
    bench_json_string(&j, "repetition_windows",
                      o->settle ? "repetition r replays trace requests [r*(S+N), r*(S+N)+S+N) in the sweep and "
                                  "co-location: S = settle_requests, unmeasured, then the N measured"
                                : "repetition r replays trace requests [r*N, r*N+N)");
    bench_json_int(&j, "requests_capped_max", (long long)b->capped_max);
    bench_json_string(&j, "cap_rule", "prompt + output cut to max_ctx, output first");
    bench_json_uint(&j, "seed", o->seed);
    bench_json_number(&j, "capacity_rps", b->capacity_rps);
    bench_json_string(&j, "load_definition", "request rate / capacity_rps (single serving all requests at once)");
    bench_json_end(&j);
    bench_json_int(&j, "settle_requests", (long long)o->settle);
    bench_json_object(&j, "slo");
    bench_json_number(&j, "ttft_ms", b->ttft_slo_ms);
    bench_json_number(&j, "tpot_ms", b->tpot_slo_ms);
    bench_json_string(&j, "from", o->slo_ttft_ms > 0 && o->slo_tpot_ms > 0
                                        ? "given (--slo-ttft-ms, --slo-tpot-ms)"
                                        : "single at load 0.1: TTFT 5x its p50, TPOT 2x its p50");
    if (!(o->slo_ttft_ms > 0 && o->slo_tpot_ms > 0)) {
        bench_json_number(&j, "single_ttft_p50_ms", b->slo_run.ttft_p50);
        bench_json_number(&j, "single_tpot_p50_ms", b->slo_run.tpot_p50);
    }
    bench_json_end(&j);
    bench_json_object(&j, "pool");
    for (uint32_t i = 0; i < b->info.num_pctx; i++) {
        char key[16];
        snprintf(key, sizeof key, "%u", i);
        bench_json_object(&j, key);
        bench_json_int(&j, "sms", b->info.pctx[i].sm_count);
        bench_json_string(&j, "anchor", bench_anchor_name(b->info.pctx[i].anchor));
        bench_json_end(&j);
    }
    bench_json_end(&j);
    bench_json_object(&j, "policy_params");
    if (o->ls_sms)
        bench_json_int(&j, "slo_aware_decode_sms", o->ls_sms);
    else
        bench_json_string(&j, "slo_aware_decode_sms", "policy default (32)");
    if (tpot_prefill_sms(o))
        bench_json_int(&j, "tpot_first_prefill_sms", tpot_prefill_sms(o));
    else
        bench_json_string(&j, "tpot_first_prefill_sms", "policy default (96)");
    bench_json_number(&j, "slo_aware_target", o->target);
    bench_json_string(&j, "slo_aware_right_size", "policy default (1: decode's tier sized from its recorded TPOTs)");
    if (o->be_window_us)
        bench_json_int(&j, "be_window_us", o->be_window_us);
    else
        bench_json_string(&j, "be_window_us", "policy default (2000)");
    if (o->prefill_whole >= 0)
        bench_json_int(&j, "prefill_whole", o->prefill_whole);
    else
        bench_json_string(&j, "prefill_whole", "policy default (0: prefill on decode's complement)");
    if (o->prefill_press >= 0)
        bench_json_int(&j, "prefill_press", o->prefill_press);
    else
        bench_json_string(&j, "prefill_press", "policy default (0)");
    if (o->reserve >= 0)
        bench_json_int(&j, "reserve", o->reserve);
    else
        bench_json_string(&j, "reserve", "policy default (1: reserve mode where decode is busy or misses)");
    bench_json_end(&j);
    bench_json_object(&j, "pdmux_static");
    bench_json_string(&j, "source", "sgl-project/sglang python/sglang/srt/multiplex: pdmux_context.py "
                                    "e5988975a9f3819425d3822b7b16f31a007e854f, multiplexing_mixin.py "
                                    "03dff85f5100bcb788f43b068cee6429510844f5");
    bench_json_array(&j, "groups");
    for (uint32_t g = 0; g < b->env.pd->groups; g++) {
        double v[2] = {b->env.pd->prefill_sms[g], b->env.pd->decode_sms[g]};
        bench_json_number_array(&j, NULL, v, 2);
    }
    bench_json_end(&j);
    bench_json_end(&j);
    bench_json_array(&j, "modes");
    for (int m = 0; m < MODE_COUNT; m++)
        if (o->modes[m]) {
            bench_json_object(&j, NULL);
            bench_json_string(&j, "name", serve_mode_name((serve_mode)m));
            bench_json_string(&j, "policy", serve_mode_policy((serve_mode)m));
            if (serve_mode_static_sms((serve_mode)m))
                bench_json_int(&j, "ls_sms", serve_mode_static_sms((serve_mode)m));
            if (serve_mode_colocated_only((serve_mode)m))
                bench_json_bool(&j, "colocated_only", 1);
            bench_json_end(&j);
        }
    bench_json_end(&j);
    bench_json_array(&j, "loads");
    for (size_t l = 0; l < o->nloads; l++) {
        bench_json_object(&j, NULL);
        bench_json_number(&j, "load", o->loads[l]);
        bench_json_number(&j, "rate_rps", o->loads[l] * b->capacity_rps);
        bench_json_object(&j, "modes");
        for (int m = 0; m < MODE_COUNT; m++) {
            if (!swept(o, m))
                continue;
            bench_json_object(&j, serve_mode_name((serve_mode)m));
            json_figures(&j, &b->cells[l][m]);
            bench_json_uint(&j, "prefill_remaps_rep0", b->cells[l][m].remaps[0]);
            bench_json_uint(&j, "decode_remaps_rep0", b->cells[l][m].remaps[1]);
            if (m == MODE_PDMUX)
                bench_json_uint(&j, "group_changes_rep0", b->cells[l][m].pdmux_changes);
            bench_json_end(&j);
        }
        bench_json_end(&j);
        bench_json_end(&j);
    }
    bench_json_end(&j);
    bench_json_object(&j, "capacity_at_slo");
    bench_json_string(&j, "definition", "highest load (and rate) at which the mode meets both SLOs on 90% of its "
                                        "requests (median over repetitions), interpolated between sweep loads; "
                                        "censored: met at every load or at none");
    for (int m = 0; m < MODE_COUNT; m++) {
        if (!swept(o, m))
            continue;
        int cens;
        double load = capacity_at_target(b, m, &cens);
        bench_json_object(&j, serve_mode_name((serve_mode)m));
        bench_json_number(&j, "load", load);
        bench_json_number(&j, "rate_rps", load * b->capacity_rps);
        bench_json_bool(&j, "censored", cens);
        bench_json_end(&j);
    }
    bench_json_end(&j);
    if (cdf_load >= 0) {
        bench_json_object(&j, "cdf");
        bench_json_number(&j, "load", o->loads[cdf_load]);
        bench_json_object(&j, "modes");
        for (int m = 0; m < MODE_COUNT; m++) {
            const cell *c = &b->cells[cdf_load][m];
            if (!swept(o, m) || !c->ttft_ms)
                continue;
            bench_json_object(&j, serve_mode_name((serve_mode)m));
            bench_json_number_array(&j, "ttft_ms", c->ttft_ms, c->nttft);
            bench_json_number_array(&j, "tpot_ms", c->tpot_ms, c->ntpot);
            bench_json_end(&j);
        }
        bench_json_end(&j);
        bench_json_end(&j);
        /* The timeline of the first library mode run, and of every mode. */
        int tm = -1;
        for (size_t i = 0; i < sizeof LIB_MODES / sizeof LIB_MODES[0] && tm < 0; i++)
            if (o->modes[LIB_MODES[i]])
                tm = LIB_MODES[i];
        if (tm >= 0) {
            bench_json_object(&j, "timeline");
            json_timeline(&j, b, &b->cells[cdf_load][tm], tm, o->loads[cdf_load]);
            bench_json_end(&j);
        }
        bench_json_array(&j, "timelines");
        for (int m = 0; m < MODE_COUNT; m++)
            if (swept(o, m)) {
                bench_json_object(&j, NULL);
                json_timeline(&j, b, &b->cells[cdf_load][m], m, o->loads[cdf_load]);
                bench_json_end(&j);
            }
        bench_json_end(&j);
    }
    if (with_colocated) {
        bench_json_object(&j, "colocated");
        bench_json_number(&j, "load", o->colocate);
        bench_json_string(&j, "be", "W1's BE training tenant (bench/colocate): GEMMs 8192^3 + 2x 4096^3, "
                                    "gradient norm, AdamW");
        double v[MAX_REPS];
        memcpy(v, b->be_alone, b->be_alone_n * sizeof v[0]);
        qsort(v, b->be_alone_n, sizeof v[0], cmp_double);
        bench_json_number(&j, "be_alone_steps_per_s", bench_percentile(v, b->be_alone_n, 0.5));
        bench_json_number_array(&j, "be_alone_steps_per_s_reps", b->be_alone, b->be_alone_n);
        bench_json_string(&j, "norm", "each mode beside BE / the same mode alone at this load, per repetition; "
                                      "medians (none for priority and static@N: they run beside BE only); "
                                      "be_tput_norm: BE steps/s / BE alone");
        bench_json_string(&j, "tpot_attainment", "decode steps within the TPOT SLO / decode steps, from the decode "
                                                 "vCtx's ds_vctx_stats (requests, requests_over_slo): each step is "
                                                 "recorded with ds_vctx_request_record as the inter-token interval "
                                                 "its requests saw");
        bench_json_number(&j, "tpot_slo_us", b->env.tpot_slo_us);
        bench_json_number(&j, "ttft_slo_us", b->env.ttft_slo_us); /* the prefill vCtx's slo_us */
        /* The references of the norms: each mode alone at this load (the
         * sweep's figures there). */
        bench_json_object(&j, "serve_alone");
        for (int m = 0; m < MODE_COUNT; m++) {
            if (!swept(o, m))
                continue;
            bench_json_object(&j, serve_mode_name((serve_mode)m));
            json_figures(&j, &b->cells[colocate_load_index(o)][m]);
            bench_json_end(&j);
        }
        bench_json_end(&j);
        bench_json_object(&j, "modes");
        for (int m = 0; m < MODE_COUNT; m++) {
            if (!o->modes[m])
                continue;
            coloc_norm cn;
            coloc_normalize(b, m, &cn);
            bench_json_object(&j, serve_mode_name((serve_mode)m));
            json_figures(&j, &b->coloc[m]);
            bench_json_number(&j, "tpot_p99_norm", cn.tpot_p99);
            double r1[2] = {cn.tpot_p99_lo, cn.tpot_p99_hi}, r2[2] = {cn.be_tput_lo, cn.be_tput_hi};
            bench_json_number_array(&j, "tpot_p99_norm_range", r1, 2);
            bench_json_number(&j, "ttft_p99_norm", cn.ttft_p99);
            bench_json_number(&j, "goodput_norm", cn.goodput);
            bench_json_number(&j, "be_tput_norm", cn.be_tput);
            bench_json_number_array(&j, "be_tput_norm_range", r2, 2);
            bench_json_number_array(&j, "be_tput_norm_reps", cn.be_reps, cn.nbe);
            bench_json_number(&j, "be_steps_per_s", b->coloc[m].med.be_steps_per_s);
            bench_json_number(&j, "decode_sms_mean", b->coloc[m].med.decode_sms_mean);
            bench_json_string(&j, "policy", serve_mode_policy((serve_mode)m));
            if (serve_mode_static_sms((serve_mode)m))
                bench_json_int(&j, "ls_sms", serve_mode_static_sms((serve_mode)m));
            bench_json_end(&j);
        }
        bench_json_end(&j);
        serve_verdict vd;
        judge(b, &vd);
        json_verdict(&j, &vd);
        bench_json_end(&j);
    }
    int rc = bench_json_finish(&j);
    if (fclose(f) != 0 || rc != 0) {
        fprintf(stderr, "serve: error writing %s\n", path);
        return -1;
    }
    return 0;
}

static void print_table(const bench *b, int ok_load)
{
    const options *o = b->o;
    char settle[64] = "";
    if (o->settle)
        snprintf(settle, sizeof settle, " (after %zu settle requests)", o->settle);
    printf("\nserve (W5): %s%s, %u layers, SLOs TTFT %.1f ms / TPOT %.2f ms, capacity %.2f req/s, "
           "%zu requests%s x %u repetitions (medians)\n",
           b->info.device_name, b->simulated ? " [SIMULATED]" : "", b->env.engine->model.layers, b->ttft_slo_ms,
           b->tpot_slo_ms, b->capacity_rps, requests_default(b), settle, o->reps);
    printf("%5s %-*s %9s %9s %7s %7s %6s %6s %9s %8s\n", "load", b->mode_w, "mode", "TTFTp50", "TTFTp99",
           "TPOTp50", "TPOTp99", "TTFT>", "TPOT>", "goodput", "tok/s");
    for (size_t l = 0; l < o->nloads; l++)
        for (int m = 0; m < MODE_COUNT; m++) {
            if (!swept(o, m))
                continue;
            const figures *f = &b->cells[l][m].med;
            printf("%5.2f %-*s %9.1f %9.1f %7.2f %7.2f %5.1f%% %5.1f%% %9.2f %8.0f\n", o->loads[l], b->mode_w,
                   serve_mode_name((serve_mode)m), f->ttft_p50, f->ttft_p99, f->tpot_p50, f->tpot_p99,
                   100 * f->ttft_viol, 100 * f->tpot_viol, f->goodput, f->tok_s);
        }
    printf("load            request rate / capacity (%.2f req/s = 1.0)\n"
           "TTFTp50/p99     time to first token, arrival to the first output token: median, 99th percentile (ms)\n"
           "TPOTp50/p99     time per output token after the first (ms; requests of more than one token)\n"
           "TTFT>, TPOT>    share of requests over the TTFT SLO (%.1f ms), over the TPOT SLO (%.2f ms)\n"
           "goodput         requests/s meeting both SLOs; tok/s: output tokens per second\n",
           b->capacity_rps, b->ttft_slo_ms, b->tpot_slo_ms);
    /* The comparisons docs/benchmarks.md (W5) asks for, as measured. */
    printf("\nchecks:\n");
    for (size_t l = 0; l < o->nloads; l++) {
        const figures *sa = &b->cells[l][MODE_SLO_AWARE].med, *tf = &b->cells[l][MODE_TPOT_FIRST].med;
        if (o->modes[MODE_SLO_AWARE] && o->modes[MODE_TPOT_FIRST] && sa->tpot_viol > 0)
            printf("  load %.2f: tpot_first TPOT violations %.3f = %.2fx slo_aware's %.3f (goal <= 0.79x)\n",
                   o->loads[l], tf->tpot_viol, tf->tpot_viol / sa->tpot_viol, sa->tpot_viol);
    }
    if (ok_load >= 0) {
        const cell *row = b->cells[ok_load];
        double best = 0;
        int bm = -1;
        for (size_t i = 0; i < sizeof LIB_MODES / sizeof LIB_MODES[0]; i++)
            if (o->modes[LIB_MODES[i]] && row[LIB_MODES[i]].med.goodput > best) {
                best = row[LIB_MODES[i]].med.goodput;
                bm = LIB_MODES[i];
            }
        if (bm >= 0)
            printf("  load %.2f (highest where single meets both SLOs on >= 90%%): best library mode %s goodput "
                   "%.2f/s = %.2fx single (goal >= 1.5x), %.2fx pdmux_static (goal >= 1.1x)\n",
                   o->loads[ok_load], serve_mode_name((serve_mode)bm), best, best / row[MODE_SINGLE].med.goodput,
                   o->modes[MODE_PDMUX] ? best / row[MODE_PDMUX].med.goodput : NAN);
    } else {
        printf("  single meets both SLOs on >= 90%% of requests at none of the loads\n");
    }
    printf("  highest load meeting both SLOs on >= 90%% of requests (goodput as a capacity):");
    for (int m = 0; m < MODE_COUNT; m++) {
        if (!swept(o, m))
            continue;
        int cens;
        double load = capacity_at_target(b, m, &cens);
        printf(" %s %s%.2f", serve_mode_name((serve_mode)m), cens ? (load > 0 ? ">=" : "<") : "",
               cens && load == 0 ? o->loads[0] : load);
    }
    printf("\n");
    if (o->colocate > 0) {
        printf("\nbeside the BE tenant at load %.2f (medians):\n", o->colocate);
        printf("%-*s %8s %8s %8s %8s %8s %8s %8s %7s\n", b->mode_w, "mode", "TPOTp99", "TPOTatt", "TPOTp99x",
               "TTFTp99", "TTFTp99x", "goodputx", "decSMs", "BE");
        for (int m = 0; m < MODE_COUNT; m++) {
            if (!o->modes[m])
                continue;
            coloc_norm cn;
            coloc_normalize(b, m, &cn);
            const figures *f = &b->coloc[m].med;
            printf("%-*s %8.2f %8.4f %8.2f %8.1f %8.2f %8.2f %8.1f %7.3f%s\n", b->mode_w,
                   serve_mode_name((serve_mode)m), f->tpot_p99, f->tpot_att, cn.tpot_p99, f->ttft_p99, cn.ttft_p99,
                   cn.goodput, f->decode_sms_mean, cn.be_tput,
                   cn.tpot_p99 <= 1.2 && cn.be_tput >= 0.7 ? "   (TPOT p99 <= 1.2x, BE >= 0.7)" : "");
        }
        printf("TPOTp99, TTFTp99  beside BE (ms); TPOTatt: decode steps within the TPOT SLO\n"
               "...x              TPOTp99x, TTFTp99x, goodputx: over the same mode alone at this load (nan:\n"
               "                  priority and static@N run beside BE only)\n"
               "decSMs            decode's SMs, time-weighted mean\n"
               "BE                BE training steps/s over BE alone (1.000 = full speed)\n");
        serve_verdict v;
        judge(b, &v);
        print_verdict(b, &v);
    }
}

/* ------------------------------------------------------------------------ */
/* command line                                                              */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: serve [options]\n"
            "  --device cuda|sim     device (default cuda; without a GPU: the simulator)\n"
            "  --seed N              seed (prompt tokens, Poisson arrivals; default 1)\n"
            "  --out FILE            the JSON result (W5 in docs/benchmarks.md); checked writable\n"
            "                        before the run\n"
            "  --trace FILE          CSV with TIMESTAMP, ContextTokens, GeneratedTokens\n"
            "                        (default data/traces/azure_llm_2023_code.csv)\n"
            "  --arrivals trace|poisson  trace arrival times scaled to the load (default), or a\n"
            "                        Poisson process with the trace's lengths\n"
            "  --layers N            decoder layers of the 32 (default 8)\n"
            "  --max-batch N         running batch and KV slots (default 64)\n"
            "  --chunk N             prefill token budget per iteration (default %d, SGLang's for\n"
            "                        60-90 GB GPUs)\n"
            "  --max-ctx N           KV positions per request (default 8192)\n"
            "  --requests N          requests per run (default 200 on a GPU, 24 simulated)\n"
            "  --slo-requests N      requests of the SLO run (default 50 on a GPU, 16 simulated)\n"
            "  --settle N            requests served before each sweep and co-located run's window,\n"
            "                        in the same arrival stream, unmeasured: slo_aware sizes decode's\n"
            "                        tier first (default 0)\n"
            "  --loads L1,L2,...     loads as fractions of capacity (default 0.25,0.5,0.75,1.0)\n"
            "  --reps N              repetitions, each on its own trace window (default 3)\n"
            "  --modes a,b,...       subset of single,pdmux_static,slo_aware,slo_aware_nogates,\n"
            "                        tpot_first (default: these five; single is always run: it sets\n"
            "                        load and SLOs), and of the right-sizing baselines, run beside\n"
            "                        the BE tenant only (needs --colocate): priority (decode at the\n"
            "                        highest priority on the whole GPU, prefill and BE beside it)\n"
            "                        and static@N, N in 16,32,48,64,80,96 (decode on the LOW tier\n"
            "                        of N SMs, prefill and BE on its complement; `static`: all six)\n"
            "  --colocate L          also run every mode at load L beside W1's BE tenant (default\n"
            "                        0.5; 0 = no co-location); L joins the loads\n"
            "  --target X            TPOT attainment target (decode steps within the TPOT SLO):\n"
            "                        slo_aware's right-sizing `target` and the verdict's (default %.2f)\n"
            "  --slo-ttft-ms X --slo-tpot-ms Y  fixed SLOs instead of measured ones\n"
            "  --capacity-rps X      load 1.0 in requests/s instead of measuring it\n"
            "  --ls-sms N            slo_aware's first decode tier (its ls_sms and decode_sms: the\n"
            "                        LOW tier nearest N SMs; it right-sizes from there) and\n"
            "                        tpot_first's unless --tpot-ls-sms (default: the policies',\n"
            "                        decode_sms 32)\n"
            "  --tpot-ls-sms N       tpot_first's ls_sms and prefill_sms N/2: prefill on the LOW\n"
            "                        tier nearest N/2 SMs, decode on its complement (default: its\n"
            "                        prefill_sms, 96)\n"
            "  --be-window-us N      be_window_us of slo_aware, slo_aware_nogates and tpot_first\n"
            "                        (default: theirs, 2000)\n"
            "  --prefill-whole 0|1|2 prefill_whole of slo_aware and slo_aware_nogates: where\n"
            "                        prefill runs: 0 urgent on decode's complement, 1 urgent on\n"
            "                        the whole GPU, 2 there below decode (default: theirs, 0)\n"
            "  --prefill-press 0|1   prefill_press of slo_aware and slo_aware_nogates: 1 lets\n"
            "                        prefill's TTFT misses step decode's tier down sooner\n"
            "                        (default: theirs, 0)\n"
            "  --reserve 0|1         reserve of slo_aware and slo_aware_nogates: 0 keeps decode\n"
            "                        on its tier where it would run urgent on the whole GPU\n"
            "                        (busy over 60%% of the time, or missing on its largest\n"
            "                        tier) (default: theirs, 1)\n"
            "  --help                this text\n",
            DEFAULT_CHUNK, DEFAULT_TARGET);
}

static int parse_double(const char *flag, const char *s, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= min && v <= max)) {
        fprintf(stderr, "serve: %s: '%s' is not a number in [%g, %g]\n", flag, s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_u32(const char *flag, const char *s, uint64_t min, uint64_t max, uint32_t *out)
{
    uint64_t u;
    if (bench_parse_u64("serve", flag, s, min, max, &u))
        return -1;
    *out = (uint32_t)u;
    return 0;
}

static int parse_loads(const char *s, options *o)
{
    o->nloads = 0;
    for (const char *p = s; *p;) {
        size_t len = strcspn(p, ",");
        char buf[32];
        if (len == 0 || len >= sizeof buf || o->nloads == MAX_LOADS) {
            fprintf(stderr, "serve: --loads: '%s' is not a list of up to %d loads\n", s, MAX_LOADS);
            return -1;
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        if (parse_double("--loads", buf, 1e-3, 10, &o->loads[o->nloads]))
            return -1;
        o->nloads++;
        p += len + (p[len] == ',');
    }
    return o->nloads ? 0 : -1;
}

static int parse_modes(const char *s, options *o)
{
    memset(o->modes, 0, sizeof o->modes);
    o->modes[MODE_SINGLE] = 1;
    for (const char *p = s; *p;) {
        size_t len = strcspn(p, ",");
        int m = 0;
        while (m < MODE_COUNT && !(strlen(serve_mode_name((serve_mode)m)) == len &&
                                   !strncmp(serve_mode_name((serve_mode)m), p, len)))
            m++;
        if (m == MODE_COUNT && len == 6 && !strncmp(p, "static", 6)) { /* every static@N */
            for (int k = MODE_STATIC_FIRST; k <= MODE_STATIC_LAST; k++)
                o->modes[k] = 1;
        } else if (m == MODE_COUNT) {
            if (len > 7 && !strncmp(p, "static@", 7))
                fprintf(stderr, "serve: --modes: '%.*s': static@N takes N in 16, 32, 48, 64, 80, 96\n", (int)len,
                        p);
            else
                fprintf(stderr, "serve: --modes: unknown mode '%.*s' (see --help)\n", (int)len, p);
            return -1;
        } else {
            o->modes[m] = 1;
        }
        p += len + (p[len] == ',');
    }
    return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    static const char *const with_value[] = {
        "--device", "--seed", "--out", "--trace", "--arrivals", "--layers", "--max-batch", "--chunk",
        "--max-ctx", "--requests", "--slo-requests", "--settle", "--loads", "--reps", "--modes", "--colocate",
        "--slo-ttft-ms", "--slo-tpot-ms", "--capacity-rps", "--ls-sms", "--tpot-ls-sms", "--be-window-us",
        "--target",      "--prefill-whole", "--prefill-press", "--reserve"};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (!strcmp(flag, "--help") || !strcmp(flag, "-h"))
            return 1;
        size_t k = 0;
        while (k < sizeof with_value / sizeof with_value[0] && strcmp(flag, with_value[k]))
            k++;
        if (k == sizeof with_value / sizeof with_value[0]) {
            fprintf(stderr, "serve: unknown option %s (see --help)\n", flag);
            return -1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "serve: %s needs a value (see --help)\n", flag);
            return -1;
        }
        const char *v = argv[++i];
        uint64_t u;
        int rc = 0;
        if (!strcmp(flag, "--device")) {
            if (strcmp(v, "cuda") && strcmp(v, "sim")) {
                fprintf(stderr, "serve: --device: '%s' is neither cuda nor sim\n", v);
                return -1;
            }
            o->device = !strcmp(v, "sim") ? DS_DEVICE_SIM : DS_DEVICE_CUDA;
            if (!strcmp(v, "cuda"))
                bench_require_cuda();
        } else if (!strcmp(flag, "--seed")) {
            rc = bench_parse_u64("serve", flag, v, 0, UINT64_MAX, &o->seed);
        } else if (!strcmp(flag, "--out")) {
            o->out = v;
        } else if (!strcmp(flag, "--trace")) {
            o->trace = v;
        } else if (!strcmp(flag, "--arrivals")) {
            if (strcmp(v, "trace") && strcmp(v, "poisson")) {
                fprintf(stderr, "serve: --arrivals: '%s' is neither trace nor poisson\n", v);
                return -1;
            }
            o->poisson = !strcmp(v, "poisson");
        } else if (!strcmp(flag, "--layers")) {
            rc = parse_u32(flag, v, 1, 32, &o->layers);
        } else if (!strcmp(flag, "--max-batch")) {
            rc = parse_u32(flag, v, 1, SERVE_MAX_BATCH, &o->max_batch);
        } else if (!strcmp(flag, "--chunk")) {
            rc = parse_u32(flag, v, 16, 65536, &o->chunk);
        } else if (!strcmp(flag, "--max-ctx")) {
            rc = parse_u32(flag, v, 16, 131072, &o->max_ctx);
        } else if (!strcmp(flag, "--requests")) {
            rc = bench_parse_u64("serve", flag, v, 1, 100000, &u);
            o->requests = (size_t)u;
        } else if (!strcmp(flag, "--slo-requests")) {
            rc = bench_parse_u64("serve", flag, v, 2, 100000, &u);
            o->slo_requests = (size_t)u;
        } else if (!strcmp(flag, "--settle")) {
            rc = bench_parse_u64("serve", flag, v, 0, 100000, &u);
            o->settle = (size_t)u;
        } else if (!strcmp(flag, "--loads")) {
            rc = parse_loads(v, o);
        } else if (!strcmp(flag, "--reps")) {
            rc = bench_parse_u64("serve", flag, v, 1, MAX_REPS, &u);
            o->reps = (unsigned)u;
        } else if (!strcmp(flag, "--modes")) {
            rc = parse_modes(v, o);
        } else if (!strcmp(flag, "--colocate")) {
            rc = parse_double(flag, v, 0, 10, &o->colocate);
        } else if (!strcmp(flag, "--slo-ttft-ms")) {
            rc = parse_double(flag, v, 1e-3, 1e7, &o->slo_ttft_ms);
        } else if (!strcmp(flag, "--slo-tpot-ms")) {
            rc = parse_double(flag, v, 1e-3, 1e7, &o->slo_tpot_ms);
        } else if (!strcmp(flag, "--capacity-rps")) {
            rc = parse_double(flag, v, 1e-3, 1e7, &o->capacity_rps);
        } else if (!strcmp(flag, "--ls-sms")) {
            rc = parse_u32(flag, v, 1, DS_MAX_SMS, &o->ls_sms);
        } else if (!strcmp(flag, "--tpot-ls-sms")) {
            rc = parse_u32(flag, v, 1, 256, &o->tpot_ls_sms);
        } else if (!strcmp(flag, "--target")) {
            rc = parse_double(flag, v, 0.5, 0.9999, &o->target); /* slo_aware's range for `target` */
        } else if (!strcmp(flag, "--prefill-whole") || !strcmp(flag, "--prefill-press") ||
                   !strcmp(flag, "--reserve")) {
            int whole = !strcmp(flag, "--prefill-whole");
            int *dst = whole ? &o->prefill_whole : !strcmp(flag, "--reserve") ? &o->reserve : &o->prefill_press;
            uint32_t u = 0;
            rc = parse_u32(flag, v, 0, whole ? 2 : 1, &u);
            if (!rc)
                *dst = (int)u;
        } else { /* --be-window-us */
            rc = parse_u32(flag, v, 1, 1000000000, &o->be_window_us);
        }
        if (rc)
            return -1;
    }
    if ((o->slo_ttft_ms > 0) != (o->slo_tpot_ms > 0)) {
        fprintf(stderr, "serve: give both --slo-ttft-ms and --slo-tpot-ms, or neither\n");
        return -1;
    }
    for (int m = 0; m < MODE_COUNT; m++)
        if (o->modes[m] && serve_mode_colocated_only((serve_mode)m) && !(o->colocate > 0)) {
            fprintf(stderr, "serve: --modes: %s runs beside the BE tenant only: give --colocate L\n",
                    serve_mode_name((serve_mode)m));
            return -1;
        }
    if (o->colocate > 0 && colocate_load_index(o) == o->nloads) {
        if (o->nloads == MAX_LOADS) {
            fprintf(stderr, "serve: --colocate: no room for its load among --loads\n");
            return -1;
        }
        o->loads[o->nloads++] = o->colocate;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */

/* Appends `t` to tiers[0..*n) unless the same tier (SMs and anchor) is there. */
static void add_tier(ds_tier_spec *tiers, uint32_t *n, ds_tier_spec t)
{
    for (uint32_t i = 0; i < *n; i++)
        if (tiers[i].anchor == t.anchor && (t.anchor == DS_ANCHOR_FULL || tiers[i].sm_count == t.sm_count))
            return;
    tiers[(*n)++] = t;
}

/* The runtime on the pool serve needs: the whole GPU; the ladder, LOW tiers
 * of 16, 32, 48, 64, 80 and 96 SMs with their HIGH complements (slo_aware's
 * right-sizing and tpot_first use them, static@N is each one); and
 * pdmux_static's splits (LOW prefill, HIGH decode), each tier once: 21 pCtxs
 * on 132 SMs. slo_aware's ladder is every LOW tier with a complement, so
 * pdmux_static's prefill tiers (72-112 SMs) are steps of it too. */
static int open_runtime(const options *o, bench *b, ds_runtime_t *rt)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    /* Virtual time (bench_runtime_open_turns): the serving threads take turns
     * on the device and sleep and wait on its clock, so a run repeats itself
     * exactly for a seed. */
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = o->device;
    cfg.ls_sms = o->ls_sms;
    cfg.policy = "priority";
    /* The pool depends on the SM count: the GPU's as cudart reports it, else
     * (no GPU: the runtime falls back to the simulator) the simulator's. */
    int dev_sms = 0;
    uint32_t sms = sim.sm_count;
    if (o->device == DS_DEVICE_CUDA &&
        cudaDeviceGetAttribute(&dev_sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess && dev_sms > 0)
        sms = (uint32_t)dev_sms;
    ds_tier_spec base[1 + 2 * SERVE_LADDER_STEPS] = {{.sm_count = sms, .anchor = DS_ANCHOR_FULL}};
    uint32_t nbase = 1;
    for (uint32_t i = 0; i < SERVE_LADDER_STEPS; i++) {
        uint32_t low = SERVE_LADDER_SMS[i];
        if (low + 8 <= sms) {
            add_tier(base, &nbase, (ds_tier_spec){.sm_count = low, .anchor = DS_ANCHOR_LOW});
            add_tier(base, &nbase, (ds_tier_spec){.sm_count = sms - low, .anchor = DS_ANCHOR_HIGH});
        }
    }
    ds_tier_spec all[DS_MAX_PCTX], tiers[DS_MAX_PCTX];
    uint32_t na = pdmux_pool_tiers(sms, base, nbase, all, DS_MAX_PCTX), nt = 0;
    if (na == 0) {
        fprintf(stderr, "serve: no pool for %u SMs\n", sms);
        return -1;
    }
    for (uint32_t i = 0; i < na; i++)
        add_tier(tiers, &nt, all[i]);
    cfg.tiers = tiers;
    cfg.num_tiers = nt;
    if (bench_runtime_open_turns(&cfg, &sim, rt, &b->simulated))
        return -1;
    b->info = (ds_runtime_info){.size = sizeof b->info, .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION};
    BENCH_DS_CHECK(ds_runtime_info_get(*rt, &b->info));
    bench_print_pool(&b->info, b->simulated);
    return 0;
}

/* The library policies' parameters for serving (--ls-sms is the runtime's
 * ls_sms already; static's ls_sms is set per static@N run): --target is
 * slo_aware's (and slo_aware_nogates') attainment target. */
static int set_policy_params(const options *o, ds_runtime_t rt)
{
    char v[32];
    snprintf(v, sizeof v, "%.17g", o->target);
    BENCH_DS_CHECK(ds_policy_param_set(rt, "slo_aware", "target", v));
    BENCH_DS_CHECK(ds_policy_param_set(rt, "slo_aware_nogates", "target", v));
    if (o->be_window_us) {
        snprintf(v, sizeof v, "%u", o->be_window_us);
        BENCH_DS_CHECK(ds_policy_param_set(rt, "slo_aware", "be_window_us", v));
        BENCH_DS_CHECK(ds_policy_param_set(rt, "slo_aware_nogates", "be_window_us", v));
        BENCH_DS_CHECK(ds_policy_param_set(rt, "tpot_first", "be_window_us", v));
    }
    const struct {
        const char *name;
        int value;
    } prefill[] = {{"prefill_whole", o->prefill_whole}, {"prefill_press", o->prefill_press}, {"reserve", o->reserve}};
    for (size_t k = 0; k < sizeof prefill / sizeof prefill[0]; k++) {
        if (prefill[k].value < 0)
            continue;
        snprintf(v, sizeof v, "%d", prefill[k].value);
        BENCH_DS_CHECK(ds_policy_param_set(rt, "slo_aware", prefill[k].name, v));
        BENCH_DS_CHECK(ds_policy_param_set(rt, "slo_aware_nogates", prefill[k].name, v));
    }
    if (o->ls_sms) { /* decode's first tier, prefill or not */
        snprintf(v, sizeof v, "%u", o->ls_sms);
        BENCH_DS_CHECK(ds_policy_param_set(rt, "slo_aware", "decode_sms", v));
        BENCH_DS_CHECK(ds_policy_param_set(rt, "slo_aware_nogates", "decode_sms", v));
    }
    if (tpot_prefill_sms(o)) {
        snprintf(v, sizeof v, "%u", o->tpot_ls_sms ? o->tpot_ls_sms : o->ls_sms);
        BENCH_DS_CHECK(ds_policy_param_set(rt, "tpot_first", "ls_sms", v));
        snprintf(v, sizeof v, "%u", tpot_prefill_sms(o));
        BENCH_DS_CHECK(ds_policy_param_set(rt, "tpot_first", "prefill_sms", v));
    }
    return 0;
}

/* Says on stderr, once per run, what would otherwise pass unnoticed: a trace
 * shorter than the requests the run replays (windows wrap around its end and
 * repeat requests), and requests longer than --max-ctx (cut to fit, with
 * serve_trace_window's rule), with their count. */
static int warn_trace_use(bench *b, size_t n)
{
    const options *o = b->o;
    size_t needed = (size_t)o->reps * (o->settle + n);
    if (n > needed)
        needed = n;
    if (!(o->slo_ttft_ms > 0 && o->slo_tpot_ms > 0) && slo_requests(b) > needed)
        needed = slo_requests(b);
    if (needed > b->trace.n)
        fprintf(stderr,
                "serve: warning: the trace has %zu requests and this run replays %zu (--requests %zu, --settle %zu, "
                "--reps %u): its windows wrap around the trace's end and repeat requests\n",
                b->trace.n, needed, n, o->settle, o->reps);
    size_t distinct = needed < b->trace.n ? needed : b->trace.n;
    serve_arrival *tmp = calloc(distinct, sizeof *tmp);
    serve_window_info wi;
    if (!tmp || serve_trace_window(&b->trace, 0, distinct, 0, 0, o->seed, o->max_ctx, tmp, &wi)) {
        free(tmp);
        fprintf(stderr, "serve: cannot read %zu requests from the trace\n", distinct);
        return -1;
    }
    uint64_t longest = 0;
    for (size_t i = 0; i < distinct; i++) {
        uint64_t len = (uint64_t)b->trace.prompt[i] + b->trace.output[i];
        if (len > longest)
            longest = len;
    }
    free(tmp);
    if (wi.capped)
        fprintf(stderr,
                "serve: warning: --max-ctx %u: %zu of the %zu trace requests replayed are longer (prompt + output; "
                "the longest %llu tokens): each is cut to fit, output first, then prompt\n",
                o->max_ctx, wi.capped, distinct, (unsigned long long)longest);
    return 0;
}

static int run_all(bench *b, ds_runtime_t rt)
{
    options *o = b->o;
    static pdmux pd;
    serve_model m = {.layers = o->layers, .max_ctx = o->max_ctx, .max_batch = o->max_batch,
                     .chunk_tokens = o->chunk, .seed = o->seed};
    size_t n = requests_default(b);
    if (n + o->settle > 100000) { /* serve_run's bound */
        fprintf(stderr, "serve: --requests %zu + --settle %zu: more than 100000 requests per run\n", n, o->settle);
        return -1;
    }
    b->env.rt = rt;
    b->env.pd = &pd;
    if (pdmux_register(rt, &pd) || set_policy_params(o, rt))
        return -1;
    if (serve_trace_load(o->trace, &b->trace))
        return -1;
    printf("trace: %s, %zu requests\n", o->trace, b->trace.n);
    if (warn_trace_use(b, n))
        return -1;
    if (b->simulated ? serve_engine_sim_create(rt, &m, &b->env.engine)
                     : serve_engine_cuda_create(rt, 0, &m, &b->env.engine))
        return -1;
    if (o->colocate > 0 &&
        (b->simulated ? workload_sim_create(rt, &b->env.be) : workload_cuda_create(rt, 0, &b->env.be)))
        return -1;
    size_t nmax = n + o->settle > slo_requests(b) ? n + o->settle : slo_requests(b);
    b->nmax = nmax;
    b->arr = calloc(nmax, sizeof *b->arr);
    b->res = calloc(nmax, sizeof *b->res);
    b->ttft_ms = calloc(nmax, sizeof *b->ttft_ms);
    b->tpot_ms = calloc(nmax, sizeof *b->tpot_ms);
    if (!b->arr || !b->res || !b->ttft_ms || !b->tpot_ms) {
        fprintf(stderr, "serve: out of memory\n");
        return -1;
    }
    printf("model: Llama-3-8B shapes, %u of 32 layers, max batch %u, chunk %u tokens, engine %s\n", m.layers,
           m.max_batch, m.chunk_tokens, b->env.engine->ops->name);
    if (calibrate(b) || sweep(b))
        return -1;
    int ok = single_ok_load(b);
    int cdf_load = ok >= 0 ? ok : (int)(o->nloads / 2);
    /* Written now too, so a run cut short during co-location keeps the sweep. */
    if (o->out && write_json(b, o->out, cdf_load, 0))
        return -1;
    if (o->colocate > 0 && (colocated(b) || (o->out && write_json(b, o->out, cdf_load, 1))))
        return -1;
    print_table(b, ok);
    return 0;
}

static void bench_free(bench *b)
{
    for (size_t l = 0; l < MAX_LOADS; l++)
        for (int m = 0; m < MODE_COUNT; m++) {
            free(b->cells[l][m].ttft_ms);
            free(b->cells[l][m].tpot_ms);
            serve_outcome_free(&b->cells[l][m].tl);
        }
    if (b->env.be)
        b->env.be->ops->destroy(b->env.be);
    if (b->env.engine)
        b->env.engine->ops->destroy(b->env.engine);
    serve_trace_free(&b->trace);
    free(b->arr);
    free(b->res);
    free(b->ttft_ms);
    free(b->tpot_ms);
}

int main(int argc, char **argv)
{
    if (bench_version_flag("serve", argc, argv))
        return 0;
    static bench b;
    static options o = {.device = DS_DEVICE_CUDA, .seed = 1,
                        .trace = SERVE_SOURCE_DIR "/data/traces/azure_llm_2023_code.csv",
                        .layers = 8, .max_batch = 64, .chunk = DEFAULT_CHUNK, .max_ctx = 8192,
                        .loads = {0.25, 0.5, 0.75, 1.0}, .nloads = 4, .reps = 3,
                        .colocate = 0.5, .target = DEFAULT_TARGET, .prefill_whole = -1, .prefill_press = -1,
                        .reserve = -1,
                        .modes = {1, 1, 1, 1, 1}};
    bench_command(argc, argv, b.command, sizeof b.command);
    int prc = parse_args(argc, argv, &o);
    if (prc > 0) {
        usage(stdout);
        return 0;
    }
    if (prc < 0)
        return 2;
    if (o.out && bench_out_writable("serve", o.out)) /* before the run, not after it */
        return 2;
    b.o = &o;
    b.mode_w = (int)strlen("mode");
    for (int m = 0; m < MODE_COUNT; m++)
        if (o.modes[m] && (int)strlen(serve_mode_name((serve_mode)m)) > b.mode_w)
            b.mode_w = (int)strlen(serve_mode_name((serve_mode)m));
    if (b.mode_w < (int)strlen("be_alone"))
        b.mode_w = (int)strlen("be_alone");
    bench_log_from_env("SERVE_LOG"); /* info: the policies' decisions (slo_aware's decode tier changes) */
    ds_runtime_t rt;
    if (open_runtime(&o, &b, &rt))
        return 1;
    int rc = run_all(&b, rt);
    bench_free(&b);
    ds_status st = ds_runtime_destroy(rt);
    if (st != DS_SUCCESS) {
        fprintf(stderr, "serve: ds_runtime_destroy -> %s: %s\n", ds_status_name(st), ds_last_error_message());
        rc = -1;
    }
    return rc == 0 ? 0 : 1;
}
