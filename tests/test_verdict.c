/* The right-sizing verdict of colocate and serve (bench/common/verdict.h):
 * which baselines meet the target, when a baseline out-meets or dominates the
 * judged configuration (ranges apart over the repetitions), the BE tolerance,
 * both readings (ok, ok_medians), and the JSON keys of a judged configuration
 * other than slo_aware (the A/A check). Built with the examples. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "verdict.h"

/* Three configurations: two splits and the judged one (index 2). */
enum { SMALL, LARGE, JUDGED, N };

typedef struct fixture {
    const char *names[N];
    int baseline[N];
    ranged lat[N], be[N], att[N];
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
    f->att[SMALL] = (ranged){0.980, 0.975, 0.985};
    f->att[LARGE] = (ranged){0.991, 0.990, 0.993};
    f->att[JUDGED] = (ranged){0.992, 0.989, 0.994};
    f->in = (verdict_input){.n = N, .names = f->names, .baseline = f->baseline, .judged = JUDGED,
                            .lat = f->lat, .be = f->be, .att = f->att, .target = 0.99};
}

static void judge(fixture *f) { verdict_judge(&f->in, &f->v); }

Test(verdict, the_best_meeting_split_and_a_judged_one_on_par_with_it)
{
    fixture f;
    setup(&f);
    judge(&f);
    cr_assert(!f.v.meeting[SMALL] && f.v.meeting[LARGE]);
    cr_assert_eq(f.v.n_meeting, 1);
    cr_assert_eq(f.v.best, LARGE);
    cr_assert(f.v.meets);
    cr_assert_float_eq(f.v.be_minus_best, -0.005, 1e-12);
    cr_assert_eq(f.v.n_outmet, 0);
    cr_assert_eq(f.v.n_dominated, 0);
    cr_assert(f.v.ok && f.v.ok_medians);
}

Test(verdict, a_miss_within_the_meeting_splits_range_fails_only_the_medians_reading)
{
    fixture f;
    setup(&f);
    f.att[JUDGED] = (ranged){0.989, 0.986, 0.991}; /* overlaps static@64's 0.990-0.993 */
    judge(&f);
    cr_assert(!f.v.meets);
    cr_assert_eq(f.v.n_outmet, 0);
    cr_assert(f.v.ok, "the claim that static@64 meets and slo_aware does not needs the ranges apart");
    cr_assert(!f.v.ok_medians);
}

Test(verdict, a_miss_with_the_ranges_apart_fails)
{
    fixture f;
    setup(&f);
    f.att[JUDGED] = (ranged){0.985, 0.983, 0.988}; /* below static@64's 0.990-0.993 */
    judge(&f);
    cr_assert(!f.v.meets);
    cr_assert(f.v.outmet_by[LARGE] && !f.v.outmet_by[SMALL]);
    cr_assert_eq(f.v.n_outmet, 1);
    cr_assert(!f.v.ok && !f.v.ok_medians);
}

Test(verdict, nobody_out_meets_where_no_baseline_meets)
{
    fixture f;
    setup(&f);
    f.att[LARGE] = (ranged){0.985, 0.984, 0.989};
    f.att[JUDGED] = (ranged){0.970, 0.965, 0.975};
    judge(&f);
    cr_assert_eq(f.v.n_meeting, 0);
    cr_assert_eq(f.v.best, N);
    cr_assert(isnan(f.v.be_minus_best));
    cr_assert_eq(f.v.n_outmet, 0);
    cr_assert(f.v.ok && f.v.ok_medians);
}

Test(verdict, be_more_than_the_tolerance_below_the_best_fails_both_readings)
{
    fixture f;
    setup(&f);
    f.be[JUDGED] = (ranged){0.61, 0.60, 0.62}; /* static@64 0.64: -0.03 */
    judge(&f);
    cr_assert(f.v.meets);
    cr_assert(f.v.be_minus_best < -VERDICT_BE_TOLERANCE);
    cr_assert(!f.v.ok && !f.v.ok_medians);
}

Test(verdict, dominance_needs_both_medians_and_one_range_apart)
{
    fixture f;
    setup(&f);
    /* the judged one on a larger tier than it needs: static@64's tail is as
     * good (medians) and its BE better with the ranges apart */
    f.lat[JUDGED] = (ranged){1.42, 1.30, 1.60};
    f.be[JUDGED] = (ranged){0.50, 0.49, 0.51};
    judge(&f);
    cr_assert(f.v.dominated_by[LARGE] && !f.v.dominated_by[SMALL]);
    cr_assert(!f.v.ok && !f.v.ok_medians);
    /* a better median tail on the judged side: not dominated */
    f.lat[JUDGED].med = 1.39;
    judge(&f);
    cr_assert_eq(f.v.n_dominated, 0);
    /* BE ranges overlapping and tails overlapping: no claim either way */
    f.lat[JUDGED].med = 1.42;
    f.be[JUDGED] = (ranged){0.635, 0.62, 0.645};
    judge(&f);
    cr_assert_eq(f.v.n_dominated, 0);
}

Test(verdict, one_run_every_meeting_baseline_out_meets_a_miss)
{
    fixture f;
    setup(&f);
    for (int i = 0; i < N; i++) {
        f.lat[i].min = f.lat[i].max = f.lat[i].med;
        f.be[i].min = f.be[i].max = f.be[i].med;
        f.att[i].min = f.att[i].max = f.att[i].med;
    }
    f.att[JUDGED] = (ranged){0.9895, 0.9895, 0.9895};
    judge(&f);
    cr_assert(f.v.outmet_by[LARGE]);
    cr_assert(!f.v.ok);
}

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

Test(verdict, json_names_the_judged_and_its_keys)
{
    fixture f;
    setup(&f);
    f.att[JUDGED] = (ranged){0.985, 0.983, 0.988};
    judge(&f);
    char *s = json_of(&f);
    cr_assert(strstr(s, "\"judged\": \"slo_aware\"") || strstr(s, "\"judged\":\"slo_aware\""), "%s", s);
    cr_assert(strstr(s, "slo_aware_outmet_by"), "%s", s);
    cr_assert(strstr(s, "\"static@64\""), "%s", s);
    cr_assert(strstr(s, "ok_medians"), "%s", s);
    free(s);
    /* the A/A check judges a split under its own key prefix */
    f.names[JUDGED] = "static";
    f.in.key = "judged";
    judge(&f);
    s = json_of(&f);
    cr_assert(strstr(s, "judged_meets") && strstr(s, "judged_dominated_by"), "%s", s);
    cr_assert_null(strstr(s, "slo_aware_"), "%s", s);
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

Test(verdict, a_miss_that_is_ok_says_why)
{
    fixture f;
    setup(&f);
    /* nobody meets the target: ok, and the line says no baseline meets it either */
    f.att[LARGE] = (ranged){0.985, 0.984, 0.989};
    f.att[JUDGED] = (ranged){0.970, 0.965, 0.975};
    judge(&f);
    cr_assert(!f.v.meets && f.v.ok);
    char *s = line_of(&f);
    cr_assert(strstr(s, "slo_aware misses the target (0.9700)"), "%s", s);
    cr_assert(strstr(s, "-> ok: no baseline meets it either (medians alone: ok)"), "%s", s);
    free(s);
    /* static@64 meets, the ranges overlap: ok on the ranges, and the line says so */
    setup(&f);
    f.att[JUDGED] = (ranged){0.989, 0.986, 0.991};
    judge(&f);
    cr_assert(!f.v.meets && f.v.ok && !f.v.ok_medians);
    s = line_of(&f);
    cr_assert(strstr(s, "-> ok: no baseline that meets it has its attainment range above slo_aware's (medians "
                        "alone: NOT ok)"),
              "%s", s);
    free(s);
    /* a judged configuration that meets needs no reason, and a NOT ok none either */
    setup(&f);
    judge(&f);
    s = line_of(&f);
    cr_assert(strstr(s, "slo_aware meets the target") && strstr(s, "-> ok (medians alone: ok)"), "%s", s);
    free(s);
    setup(&f);
    f.att[JUDGED] = (ranged){0.985, 0.983, 0.988};
    judge(&f);
    s = line_of(&f);
    cr_assert(strstr(s, "out-met by: static@64") && strstr(s, "-> NOT ok (medians alone: NOT ok)"), "%s", s);
    free(s);
}
