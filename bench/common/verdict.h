/*
 * The right-sizing verdict that colocate (W1) and serve (W5) print and write,
 * and that the Python tools call through libdsverdict (bench/dsbench/verdict.py)
 * (docs/benchmarks.md): the configuration being judged (slo_aware) against
 * the baselines (fixed splits, priority) of one run, from each one's LS tail
 * (lower is better: ls_p99_norm, TPOT p99) and BE throughput (higher is
 * better), median and range over the repetitions, and its SLO attainment as
 * counts summed over all repetitions (requests within the SLO, requests).
 *
 *  - attainment interval: Wilson's score interval at 95% (z = VERDICT_Z) of
 *    within / total. E. B. Wilson, "Probable inference, the law of
 *    succession, and statistical inference", JASA 22(158), 209-212, 1927.
 *    Wilson rather than the Wald interval p +- z sqrt(p(1-p)/n), whose
 *    coverage falls far below 95% near 0 and 1 (an attainment target of 0.99
 *    sits there) and which is empty at 0 or n successes: Brown, Cai and
 *    DasGupta, "Interval estimation for a binomial proportion", Statistical
 *    Science 16(2), 101-133, 2001;
 *  - meets the target: the interval's upper end reaches it (hi >= target);
 *    clearly meets: its lower end does (lo >= target);
 *  - best baseline: of the baselines clearly meeting the target, the one
 *    with the highest median BE throughput;
 *  - dominated by: a baseline at least as good on both medians and better on
 *    one with the repetitions' ranges apart (with one run, plain dominance);
 *  - ok: (a) the judged configuration meets the target, or no baseline
 *    clearly meets it; (b) its median BE is at least the best baseline's
 *    minus VERDICT_BE_TOLERANCE, or no baseline clearly meets the target;
 *    (c) no baseline dominates it.
 */
#ifndef DETSHARE_EXAMPLES_VERDICT_H
#define DETSHARE_EXAMPLES_VERDICT_H

#include <stddef.h>
#include <stdio.h>

#define VERDICT_MAX 32             /* configurations one verdict looks at */
#define VERDICT_BE_TOLERANCE 0.03  /* slo_aware's BE throughput may trail the best baseline's by this much */
#define VERDICT_Z 1.959964         /* the normal quantile of a two-sided 95% interval */

/** A figure over the repetitions: median and range (all three equal for one run). */
typedef struct ranged {
    double med, min, max;
} ranged;

/** What is judged: n configurations, index-aligned arrays. */
typedef struct verdict_input {
    size_t n;                 /* <= VERDICT_MAX */
    const char *const *names; /* [n] */
    const int *baseline;      /* [n]: ran, and is a baseline */
    size_t judged;            /* slo_aware's index; n when it did not run */
    const ranged *lat;        /* [n] LS tail: lower is better */
    const ranged *be;         /* [n] BE throughput: higher is better */
    const double *within;     /* [n] requests within the SLO, summed over the repetitions */
    const double *total;      /* [n] requests judged, summed over the repetitions */
    double target;            /* attainment target */
    const char *key;          /* prefix of the judged configuration's JSON keys; NULL: "slo_aware" */
} verdict_input;

typedef struct verdict {
    double target;
    double lo[VERDICT_MAX], hi[VERDICT_MAX]; /* attainment interval of each baseline and the judged */
    int meeting[VERDICT_MAX];                /* baselines whose interval's upper end reaches the target */
    size_t n_meeting;
    int clearly[VERDICT_MAX];                /* baselines whose interval's lower end reaches it */
    size_t n_clearly;
    size_t best; /* the clearly meeting one with the highest median BE; n: none */
    double best_be;
    int judged_ran, meets, clearly_meets;
    double be_minus_best;          /* NAN when no baseline clearly meets */
    int dominated_by[VERDICT_MAX]; /* see above */
    size_t n_dominated;
    int ok;
} verdict;

/** Wilson's score interval of within successes out of total at normal
 *  quantile z, into [*lo, *hi] (clamped to [0, 1]). total 0 gives [0, 1].
 *  0, or -1 (and [NAN, NAN]) where the counts are not finite, negative, or
 *  within > total, or z is not positive. */
int verdict_wilson(double within, double total, double z, double *lo, double *hi);

/** Judges in (see the top of this file) into v. 0, or -1 where the input
 *  cannot be judged (n > VERDICT_MAX, a missing array, a target outside
 *  (0, 1], a judged or baseline configuration whose counts are not counts):
 *  v then holds ok = 0 and nothing judged. */
int verdict_judge(const verdict_input *in, verdict *v);

struct bench_json;

/** Writes v's fields into the open JSON object: target, baselines_meeting,
 *  baselines_clearly_meeting, best_baseline, best_baseline_be, be_tolerance,
 *  dominance, attainment_rule, attainment_interval ({name: [lo, hi]}) and
 *  attainment_counts ({name: [within, total]}) of the baselines and the
 *  judged, judged (its name), then with the judged configuration's key
 *  prefix (in->key: slo_aware_meets, ..._clearly_meets, ..._be_minus_best,
 *  ..._dominated_by) and ok (null where it did not run). In verdict_json.c
 *  (the JSON writer is bench.c's), not in libdsverdict. */
void verdict_json(struct bench_json *j, const verdict_input *in, const verdict *v);

/** Prints to f "baselines clearly meeting: ...; slo_aware meets the target
 *  (A [lo, hi]), be +x vs best; dominated by: ... -> ok" (A: its attainment
 *  over all repetitions), no newline. A judged configuration that misses the
 *  target and is still ok says why after "ok": no baseline clearly meets it. */
void verdict_print(FILE *f, const verdict_input *in, const verdict *v);

/* ------------------------------------------------------------------------ */
/* libdsverdict: the same rule for callers without C structs (ctypes)        */

/** The verdict of ds_verdict_judge_flat: fixed-width fields only, so that a
 *  ctypes Structure mirrors it (bench/dsbench/verdict.py); its size is
 *  ds_verdict_flat_size(). Indices are configuration indices; -1: none. */
typedef struct ds_verdict_flat {
    double target, be_tolerance, z;
    double lo[VERDICT_MAX], hi[VERDICT_MAX];
    int meeting[VERDICT_MAX], clearly[VERDICT_MAX], dominated_by[VERDICT_MAX];
    int n_meeting, n_clearly, n_dominated;
    int best;       /* -1: no baseline clearly meets */
    double best_be; /* NAN without a best */
    int judged_ran, meets, clearly_meets;
    double be_minus_best; /* NAN without a best */
    int ok;
} ds_verdict_flat;

/** verdict_judge on plain arrays of n entries: baseline flags, the judged
 *  index (n: it did not run), the LS tail's and BE's median / min / max,
 *  the within and total counts summed over the repetitions, the target.
 *  0, or -1 on bad input (see verdict_judge; also n = 0 or out NULL). */
int ds_verdict_judge_flat(size_t n, const int *baseline, size_t judged, const double *lat_med,
                          const double *lat_min, const double *lat_max, const double *be_med, const double *be_min,
                          const double *be_max, const double *within, const double *total, double target,
                          ds_verdict_flat *out);

/** sizeof(ds_verdict_flat): a wrapper checks its mirror against it. */
size_t ds_verdict_flat_size(void);

/** verdict_wilson, exported under libdsverdict's prefix. */
int ds_verdict_wilson(double within, double total, double z, double *lo, double *hi);

#endif /* DETSHARE_EXAMPLES_VERDICT_H */
