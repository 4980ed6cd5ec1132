/* The right-sizing verdict of colocate, serve and the Python tools
 * (bench/common/verdict.h): Wilson's score interval against known values,
 * meeting and clearly meeting the target, the rule's three parts (the target
 * where a baseline clearly meets it, the BE tolerance, dominance), bad input,
 * the JSON keys (also of a judged configuration other than slo_aware: the A/A
 * check), the printed line and libdsverdict's flat entry. Built with the
 * benchmarks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "bench.h"
#include "verdict.h"

/* ------------------------------------------------------------------------ */
/* Wilson's score interval                                                   */

static void wilson(double within, double total, double *lo, double *hi)
{
    cr_assert_eq(verdict_wilson(within, total, VERDICT_Z, lo, hi), 0, "%g of %g", within, total);
}

Test(wilson, known_values)
{
    double lo, hi;
    /* 95 of 100: [0.8883, 0.9785] (Brown, Cai and DasGupta's worked values; R's prop.test without correction) */
    wilson(95, 100, &lo, &hi);
    cr_assert_float_eq(lo, 0.88825, 5e-5, "%.6f", lo);
    cr_assert_float_eq(hi, 0.97846, 5e-5, "%.6f", hi);
    /* 0 of 10: [0, z^2 / (n + z^2)] = [0, 0.2775] */
    wilson(0, 10, &lo, &hi);
    cr_assert_eq(lo, 0.0);
    cr_assert_float_eq(hi, 0.27753, 5e-5, "%.6f", hi);
    /* 10 of 10: [n / (n + z^2), 1] = [0.7225, 1], the upper end exactly 1 */
    wilson(10, 10, &lo, &hi);
    cr_assert_float_eq(lo, 0.72247, 5e-5, "%.6f", lo);
    cr_assert_eq(hi, 1.0);
    /* no requests: nothing known */
    wilson(0, 0, &lo, &hi);
    cr_assert(lo == 0.0 && hi == 1.0);
    /* 5970 of 6000 (0.995): the interval lies inside (0.99, 1) */
    wilson(5970, 6000, &lo, &hi);
    cr_assert(lo > 0.99 && lo < 0.995 && hi > 0.995 && hi < 1.0, "[%.5f, %.5f]", lo, hi);
}

Test(wilson, bad_counts_fail_without_an_interval)
{
    double lo, hi;
    const double bad[][3] = {{11, 10, VERDICT_Z}, {-1, 10, VERDICT_Z}, {1, -1, VERDICT_Z},
                             {NAN, 10, VERDICT_Z}, {1, INFINITY, VERDICT_Z}, {1, 10, 0}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        cr_assert_eq(verdict_wilson(bad[k][0], bad[k][1], bad[k][2], &lo, &hi), -1, "case %zu", k);
        cr_assert(isnan(lo) && isnan(hi), "case %zu", k);
    }
}

/* ------------------------------------------------------------------------ */
/* the rule                                                                  */

/* Three configurations: two splits and the judged one (index 2). */
enum { SMALL, LARGE, JUDGED, N };

/* Three repetitions of 2000 requests. */
#define TOTAL 6000.0

typedef struct fixture {
    const char *names[N];
    int baseline[N];
    ranged lat[N], be[N];
    double within[N], total[N];
    verdict_input in;
    verdict v;
} fixture;

static void setup(fixture *f)
{
    memset(f, 0, sizeof *f);
    f->names[SMALL] = "static@48";
    f->names[LARGE] = "static@64";
    f->names[JUDGED] = "slo_aware";
    f->baseline[SMALL] = f->baseline[LARGE] = 1;
    /* the larger split: better tail, less BE; the judged one sits on it */
    f->lat[SMALL] = (ranged){1.8, 1.7, 1.9};
    f->lat[LARGE] = (ranged){1.4, 1.3, 1.5};
    f->lat[JUDGED] = (ranged){1.45, 1.35, 1.55};
    f->be[SMALL] = (ranged){0.72, 0.71, 0.73};
    f->be[LARGE] = (ranged){0.64, 0.63, 0.65};
    f->be[JUDGED] = (ranged){0.635, 0.63, 0.645};
    for (int i = 0; i < N; i++)
        f->total[i] = TOTAL;
    f->within[SMALL] = 5880;  /* 0.980: [0.976, 0.983], misses */
    f->within[LARGE] = 5970;  /* 0.995: [0.993, 0.997], clearly meets */
    f->within[JUDGED] = 5950; /* 0.9917: [0.9890, 0.9937], meets, not clearly */
    f->in = (verdict_input){.n = N, .names = f->names, .baseline = f->baseline, .judged = JUDGED,
                            .lat = f->lat, .be = f->be, .within = f->within, .total = f->total,
                            .target = 0.99};
}

static void judge(fixture *f) { cr_assert_eq(verdict_judge(&f->in, &f->v), 0); }

Test(verdict, meets_and_clearly_meets_read_the_intervals_ends)
{
    fixture f;
    setup(&f);
    judge(&f);
    cr_assert(!f.v.meeting[SMALL] && !f.v.clearly[SMALL], "[%.4f, %.4f]", f.v.lo[SMALL], f.v.hi[SMALL]);
    cr_assert(f.v.meeting[LARGE] && f.v.clearly[LARGE], "[%.4f, %.4f]", f.v.lo[LARGE], f.v.hi[LARGE]);
    cr_assert_eq(f.v.n_meeting, 1);
    cr_assert_eq(f.v.n_clearly, 1);
    cr_assert_eq(f.v.best, LARGE);
    cr_assert_float_eq(f.v.best_be, 0.64, 1e-12);
    cr_assert(f.v.meets && !f.v.clearly_meets, "[%.4f, %.4f]", f.v.lo[JUDGED], f.v.hi[JUDGED]);
    double lo, hi;
    wilson(5950, TOTAL, &lo, &hi);
    cr_assert(f.v.lo[JUDGED] == lo && f.v.hi[JUDGED] == hi);
}

Test(verdict, a_judged_that_only_meets_passes_where_a_baseline_clearly_meets)
{
    fixture f;
    setup(&f);
    /* 0.9892 of its requests: below the target, by less than they can show (interval [0.9862, 0.9915]) */
    f.within[JUDGED] = 5935;
    judge(&f);
    cr_assert(f.within[JUDGED] / f.total[JUDGED] < f.in.target);
    cr_assert(f.v.clearly[LARGE] && f.v.meets && !f.v.clearly_meets, "[%.4f, %.4f]", f.v.lo[JUDGED],
              f.v.hi[JUDGED]);
    cr_assert_float_eq(f.v.be_minus_best, -0.005, 1e-12);
    cr_assert_eq(f.v.n_dominated, 0);
    cr_assert(f.v.ok, "(a): the judged one's interval reaches the target");
}

Test(verdict, a_miss_fails_where_a_baseline_clearly_meets)
{
    fixture f;
    setup(&f);
    f.within[JUDGED] = 5900; /* 0.9833: [0.9799, 0.9863] */
    judge(&f);
    cr_assert(!f.v.meets && f.v.hi[JUDGED] < 0.99, "%.4f", f.v.hi[JUDGED]);
    cr_assert(!f.v.ok);
}

Test(verdict, a_miss_passes_where_no_baseline_clearly_meets)
{
    fixture f;
    setup(&f);
    f.within[LARGE] = 5950;  /* meets, not clearly */
    f.within[JUDGED] = 5900; /* misses */
    f.lat[JUDGED] = (ranged){1.2, 1.1, 1.3}; /* a better tail than every baseline: dominated by none */
    f.be[JUDGED] = (ranged){0.30, 0.29, 0.31};
    judge(&f);
    cr_assert(f.v.meeting[LARGE] && !f.v.clearly[LARGE]);
    cr_assert_eq(f.v.n_clearly, 0);
    cr_assert_eq(f.v.best, N);
    cr_assert(isnan(f.v.best_be) && isnan(f.v.be_minus_best));
    cr_assert(!f.v.meets);
    cr_assert(f.v.ok, "(a) and (b) hold where no baseline clearly meets the target");
}

Test(verdict, be_more_than_003_below_the_best_clearly_meeting_fails)
{
    fixture f;
    setup(&f);
    f.be[JUDGED] = (ranged){0.609, 0.60, 0.635}; /* static@64 0.64: -0.031; ranges overlap */
    judge(&f);
    cr_assert(f.v.meets);
    cr_assert_float_eq(f.v.be_minus_best, -0.031, 1e-12);
    cr_assert_eq(f.v.n_dominated, 0);
    cr_assert(!f.v.ok, "(b)");
}

Test(verdict, be_less_than_003_below_the_best_clearly_meeting_passes)
{
    fixture f;
    setup(&f);
    f.be[JUDGED] = (ranged){0.611, 0.60, 0.635}; /* static@64 0.64: -0.029; ranges overlap */
    judge(&f);
    cr_assert_float_eq(f.v.be_minus_best, -0.029, 1e-12);
    cr_assert_eq(f.v.n_dominated, 0);
    cr_assert(f.v.ok, "(b)");
}

Test(verdict, the_best_is_taken_among_the_clearly_meeting_only)
{
    fixture f;
    setup(&f);
    /* static@48 (more BE) now meets, not clearly: the BE is still judged against static@64 */
    f.within[SMALL] = 5945;
    f.be[JUDGED] = (ranged){0.62, 0.61, 0.63};
    judge(&f);
    cr_assert(f.v.meeting[SMALL] && !f.v.clearly[SMALL]);
    cr_assert_eq(f.v.best, LARGE);
    cr_assert(f.v.ok, "BE -0.02 against static@64, not -0.10 against static@48");
}

Test(verdict, dominance_needs_both_medians_and_one_range_apart)
{
    fixture f;
    setup(&f);
    /* the judged one on a larger tier than it needs: static@64's tail is as
     * good (medians) and its BE better with the ranges apart */
    f.lat[JUDGED] = (ranged){1.42, 1.30, 1.60};
    f.be[JUDGED] = (ranged){0.615, 0.61, 0.62};
    judge(&f);
    cr_assert(f.v.dominated_by[LARGE] && !f.v.dominated_by[SMALL]);
    cr_assert_float_eq(f.v.be_minus_best, -0.025, 1e-12); /* (a) and (b) hold */
    cr_assert(!f.v.ok, "(c): static@64 dominates it");
    /* a better median tail on the judged side: not dominated */
    f.lat[JUDGED].med = 1.39;
    judge(&f);
    cr_assert_eq(f.v.n_dominated, 0);
    cr_assert(f.v.ok);
    /* BE ranges overlapping and tails overlapping: no claim either way */
    f.lat[JUDGED].med = 1.42;
    f.be[JUDGED] = (ranged){0.635, 0.62, 0.645};
    judge(&f);
    cr_assert_eq(f.v.n_dominated, 0);
}

Test(verdict, a_judged_that_did_not_run_is_not_judged)
{
    fixture f;
    setup(&f);
    f.in.judged = N;
    f.within[JUDGED] = NAN; /* not read */
    judge(&f);
    cr_assert(!f.v.judged_ran && !f.v.ok);
    cr_assert(f.v.clearly[LARGE]);
}

Test(verdict, input_that_cannot_be_judged_is_refused)
{
    fixture f;
    setup(&f);
    f.within[LARGE] = TOTAL + 1;
    cr_assert_eq(verdict_judge(&f.in, &f.v), -1);
    cr_assert(!f.v.ok && !f.v.judged_ran);
    setup(&f);
    f.within[JUDGED] = NAN;
    cr_assert_eq(verdict_judge(&f.in, &f.v), -1);
    setup(&f);
    f.in.target = 0.0;
    cr_assert_eq(verdict_judge(&f.in, &f.v), -1);
    setup(&f);
    f.in.target = 1.5;
    cr_assert_eq(verdict_judge(&f.in, &f.v), -1);
    setup(&f);
    f.in.total = NULL;
    cr_assert_eq(verdict_judge(&f.in, &f.v), -1);
    setup(&f);
    f.in.n = VERDICT_MAX + 1;
    cr_assert_eq(verdict_judge(&f.in, &f.v), -1);
}

/* ------------------------------------------------------------------------ */
/* JSON and the printed line                                                 */

/* The JSON of a verdict, as a string (caller frees). */
static char *json_of(const fixture *f)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    cr_assert_not_null(out);
    bench_json j;
    bench_json_begin(&j, out);
    bench_json_object(&j, "verdict");
    verdict_json(&j, &f->in, &f->v);
    bench_json_end(&j);
    cr_assert_eq(bench_json_finish(&j), 0);
    cr_assert_eq(fclose(out), 0);
    return buf;
}

/* s holds "key": value (with or without the space). */
static int has_member(const char *s, const char *key, const char *value)
{
    char a[256], b[256];
    snprintf(a, sizeof a, "\"%s\": %s", key, value);
    snprintf(b, sizeof b, "\"%s\":%s", key, value);
    return strstr(s, a) || strstr(s, b);
}

Test(verdict, json_names_the_judged_its_keys_and_the_intervals)
{
    fixture f;
    setup(&f);
    judge(&f);
    char *s = json_of(&f);
    cr_assert(has_member(s, "judged", "\"slo_aware\""), "%s", s);
    cr_assert(has_member(s, "slo_aware_meets", "true"), "%s", s);
    cr_assert(has_member(s, "slo_aware_clearly_meets", "false"), "%s", s);
    cr_assert(has_member(s, "best_baseline", "\"static@64\""), "%s", s);
    cr_assert(has_member(s, "be_tolerance", "0.03"), "%s", s);
    cr_assert(has_member(s, "ok", "true"), "%s", s);
    cr_assert(strstr(s, "\"baselines_clearly_meeting\""), "%s", s);
    cr_assert(strstr(s, "\"attainment_interval\"") && strstr(s, "\"attainment_counts\""), "%s", s);
    cr_assert(has_member(s, "static@64", "[0.99"), "the interval [lo, hi]: %s", s);
    cr_assert(has_member(s, "slo_aware", "[5950, 6000]"), "the counts: %s", s);
    cr_assert(strstr(s, "Wilson"), "attainment_rule states the rule: %s", s);
    cr_assert_null(strstr(s, "ok_medians"), "%s", s);
    cr_assert_null(strstr(s, "outmet_by"), "%s", s);
    free(s);
    /* the A/A check judges a split under its own key prefix */
    f.names[JUDGED] = "static";
    f.in.key = "judged";
    judge(&f);
    s = json_of(&f);
    cr_assert(strstr(s, "judged_meets") && strstr(s, "judged_clearly_meets") && strstr(s, "judged_dominated_by"),
              "%s", s);
    cr_assert_null(strstr(s, "slo_aware_"), "%s", s);
    free(s);
    /* not run: its keys are null */
    f.in.judged = N;
    f.in.key = NULL;
    judge(&f);
    s = json_of(&f);
    cr_assert(has_member(s, "ok", "null") && has_member(s, "slo_aware_clearly_meets", "null"), "%s", s);
    free(s);
}

/* The printed verdict line, as a string (caller frees). */
static char *line_of(const fixture *f)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    cr_assert_not_null(out);
    verdict_print(out, &f->in, &f->v);
    cr_assert_eq(fclose(out), 0);
    return buf;
}

Test(verdict, the_line_gives_the_interval_and_why_a_miss_is_ok)
{
    fixture f;
    setup(&f);
    judge(&f);
    char *s = line_of(&f);
    cr_assert(strstr(s, "baselines clearly meeting: static@64 (best static@64, be 0.640)"), "%s", s);
    cr_assert(strstr(s, "slo_aware meets the target (0.9917 [0.9890, 0.9937]), be -0.005 vs best"), "%s", s);
    cr_assert(strstr(s, "dominated by: none -> ok") && !strstr(s, "ok:"), "%s", s);
    free(s);
    /* nobody clearly meets the target: ok, and the line says why */
    f.within[LARGE] = 5950;
    f.within[JUDGED] = 5900;
    judge(&f);
    s = line_of(&f);
    cr_assert(strstr(s, "slo_aware misses the target") && strstr(s, "-> ok: no baseline clearly meets it"), "%s",
              s);
    free(s);
    setup(&f);
    f.within[JUDGED] = 5900;
    judge(&f);
    s = line_of(&f);
    cr_assert(strstr(s, "-> NOT ok") && !strstr(s, "NOT ok:"), "%s", s);
    free(s);
}

/* ------------------------------------------------------------------------ */
/* libdsverdict's flat entry                                                 */

Test(verdict_flat, gives_what_verdict_judge_gives)
{
    fixture f;
    setup(&f);
    f.be[JUDGED] = (ranged){0.609, 0.60, 0.635};
    judge(&f);
    double lm[N], ln[N], lx[N], bm[N], bn[N], bx[N];
    for (int i = 0; i < N; i++) {
        lm[i] = f.lat[i].med, ln[i] = f.lat[i].min, lx[i] = f.lat[i].max;
        bm[i] = f.be[i].med, bn[i] = f.be[i].min, bx[i] = f.be[i].max;
    }
    ds_verdict_flat out;
    cr_assert_eq(ds_verdict_judge_flat(N, f.baseline, JUDGED, lm, ln, lx, bm, bn, bx, f.within, f.total, 0.99, &out),
                 0);
    cr_assert_eq(out.ok, f.v.ok);
    cr_assert(!out.ok);
    cr_assert_eq(out.best, LARGE);
    cr_assert_eq(out.meets, 1);
    cr_assert_eq(out.clearly_meets, 0);
    cr_assert_eq(out.n_clearly, 1);
    cr_assert_eq(out.be_minus_best, f.v.be_minus_best);
    cr_assert_eq(out.be_tolerance, VERDICT_BE_TOLERANCE);
    for (int i = 0; i < N; i++)
        cr_assert(out.lo[i] == f.v.lo[i] && out.hi[i] == f.v.hi[i]);
    cr_assert_eq(ds_verdict_flat_size(), sizeof(ds_verdict_flat));
    /* bad input: -1, and nothing judged */
    f.within[SMALL] = -3;
    cr_assert_eq(ds_verdict_judge_flat(N, f.baseline, JUDGED, lm, ln, lx, bm, bn, bx, f.within, f.total, 0.99, &out),
                 -1);
    cr_assert(!out.ok && !out.judged_ran && out.best == -1);
    cr_assert_eq(ds_verdict_judge_flat(0, f.baseline, 0, lm, ln, lx, bm, bn, bx, f.within, f.total, 0.99, &out), -1);
    cr_assert_eq(ds_verdict_judge_flat(N, f.baseline, N + 1, lm, ln, lx, bm, bn, bx, f.within, f.total, 0.99, &out),
                 -1);
}
