/*
 * The right-sizing verdict that colocate (W1) and serve (W5) print and write
 * (docs/benchmarks.md): the configuration being judged (slo_aware) against
 * the baselines (fixed splits, priority) of one run, from each one's LS tail
 * (lower is better: ls_p99_norm, TPOT p99) and BE throughput (higher is
 * better), median and range over the repetitions, and median SLO attainment.
 *
 *  - baselines meeting: median attainment >= target; the best of them by
 *    median BE throughput;
 *  - slo_aware meets the target (its median attainment); its BE throughput
 *    minus the best's;
 *  - out-met by: where slo_aware's median misses the target, a baseline
 *    meeting it whose attainment range lies above slo_aware's (the claim
 *    "this baseline reaches the target and slo_aware does not" holds only
 *    with the ranges apart: docs/benchmarks.md's rule for claims from tails,
 *    and the one dominance uses; with one run, every baseline meeting it);
 *  - dominated by: a baseline at least as good on both medians and better on
 *    one with the ranges apart (with one run, plain dominance);
 *  - ok: (slo_aware meets, or no baseline out-meets it) and (its BE is
 *    within VERDICT_BE_TOLERANCE of the best's, or no baseline meets) and
 *    nothing dominates it;
 *  - ok_medians: the same with medians alone for the target (slo_aware meets
 *    or no baseline does): where a baseline sits at the target, a coin toss
 *    between repetitions, kept beside `ok` so that both readings show.
 */
#ifndef DETSHARE_EXAMPLES_VERDICT_H
#define DETSHARE_EXAMPLES_VERDICT_H

#include <stddef.h>

#include "bench.h"

#define VERDICT_MAX 32             /* configurations one verdict looks at */
#define VERDICT_BE_TOLERANCE 0.02  /* slo_aware's BE throughput may trail the best baseline's by this much */

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
    const ranged *att;        /* [n] SLO attainment (share of requests within the SLO) */
    double target;            /* attainment target */
    const char *key;          /* prefix of the judged configuration's JSON keys; NULL: "slo_aware" */
} verdict_input;

typedef struct verdict {
    double target;
    int meeting[VERDICT_MAX]; /* baselines whose attainment reaches the target */
    size_t n_meeting;
    size_t best; /* the one of them with the highest median BE; n: none */
    double best_be;
    int judged_ran, meets;
    double be_minus_best;          /* NAN when no baseline meets */
    int outmet_by[VERDICT_MAX];    /* see above */
    size_t n_outmet;
    int dominated_by[VERDICT_MAX]; /* see above */
    size_t n_dominated;
    int ok, ok_medians;
} verdict;

/** Judges in (see the top of this file) into v. */
void verdict_judge(const verdict_input *in, verdict *v);

/** Writes v's fields into the open JSON object: target, baselines_meeting,
 *  best_baseline, best_baseline_be, be_tolerance, dominance, attainment_rule,
 *  judged (its name), then with the judged configuration's key prefix
 *  (in->key: slo_aware_meets, ..._be_minus_best, ..._outmet_by,
 *  ..._dominated_by), ok and ok_medians (null where it did not run). */
void verdict_json(bench_json *j, const verdict_input *in, const verdict *v);

/** Prints to f "baselines meeting: ...; slo_aware meets the target (A), be
 *  +x vs best; out-met by: ...; dominated by: ... -> ok (medians alone: ok)"
 *  (A: its median attainment), no newline. A judged configuration that
 *  misses the target and is still ok says why after "ok": no baseline meets
 *  it either, or none that meets it has its attainment range above. */
void verdict_print(FILE *f, const verdict_input *in, const verdict *v);

#endif /* DETSHARE_EXAMPLES_VERDICT_H */
