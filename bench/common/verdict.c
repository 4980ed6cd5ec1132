/* The right-sizing verdict of colocate, serve and the Python tools: see
 * verdict.h. No JSON here (verdict_json.c), so that it builds alone as
 * libdsverdict. */
#include "verdict.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int verdict_wilson(double within, double total, double z, double *lo, double *hi)
{
    *lo = *hi = NAN;
    if (!isfinite(within) || !isfinite(total) || !isfinite(z) || within < 0 || total < 0 || within > total ||
        z <= 0)
        return -1;
    if (total == 0) { /* no requests: nothing is known */
        *lo = 0.0;
        *hi = 1.0;
        return 0;
    }
    const double p = within / total, z2 = z * z;
    const double denom = 1.0 + z2 / total;
    const double center = (p + z2 / (2.0 * total)) / denom;
    const double half = z * sqrt(p * (1.0 - p) / total + z2 / (4.0 * total * total)) / denom;
    /* the ends are exact at 0 and n successes; rounding must not move them */
    *lo = within == 0 ? 0.0 : fmax(0.0, center - half);
    *hi = within == total ? 1.0 : fmin(1.0, center + half);
    return 0;
}

/* `a` dominates `b` over repetitions: at least as good on both medians, and
 * better on one with the ranges apart. */
static int dominates(const ranged *la, const ranged *ba, const ranged *lb, const ranged *bb)
{
    return la->med <= lb->med && ba->med >= bb->med && (la->max < lb->min || ba->min > bb->max);
}

static int judged_ran(const verdict_input *in) { return in->judged < in->n; }

/* A configuration the rule reads the counts of. */
static int counted(const verdict_input *in, size_t i) { return in->baseline[i] || i == in->judged; }

int verdict_judge(const verdict_input *in, verdict *v)
{
    memset(v, 0, sizeof *v);
    v->target = in->target;
    v->best = in->n;
    v->best_be = NAN;
    v->be_minus_best = NAN;
    for (size_t i = 0; i < VERDICT_MAX; i++)
        v->lo[i] = v->hi[i] = NAN;
    if (in->n > VERDICT_MAX || !in->names || !in->baseline || !in->lat || !in->be || !in->within || !in->total ||
        !(in->target > 0.0 && in->target <= 1.0))
        return -1;
    for (size_t i = 0; i < in->n; i++)
        if (counted(in, i) && verdict_wilson(in->within[i], in->total[i], VERDICT_Z, &v->lo[i], &v->hi[i]))
            return -1;
    for (size_t i = 0; i < in->n; i++) {
        if (!in->baseline[i] || i == in->judged)
            continue;
        if (v->hi[i] >= in->target) {
            v->meeting[i] = 1;
            v->n_meeting++;
        }
        if (!(v->lo[i] >= in->target))
            continue;
        v->clearly[i] = 1;
        v->n_clearly++;
        if (v->best == in->n || in->be[i].med > v->best_be) {
            v->best = i;
            v->best_be = in->be[i].med;
        }
    }
    v->judged_ran = judged_ran(in);
    if (!v->judged_ran)
        return 0;
    const size_t s = in->judged;
    v->meets = v->hi[s] >= in->target;
    v->clearly_meets = v->lo[s] >= in->target;
    if (v->n_clearly)
        v->be_minus_best = in->be[s].med - v->best_be;
    for (size_t i = 0; i < in->n; i++) {
        if (!in->baseline[i] || i == s)
            continue;
        if (dominates(&in->lat[i], &in->be[i], &in->lat[s], &in->be[s])) {
            v->dominated_by[i] = 1;
            v->n_dominated++;
        }
    }
    /* (a) and (b) hold where no baseline clearly meets the target */
    int att_ok = !v->n_clearly || v->meets;
    int be_ok = !v->n_clearly || v->be_minus_best >= -VERDICT_BE_TOLERANCE;
    v->ok = att_ok && be_ok && !v->n_dominated;
    return 0;
}

static void print_names(FILE *f, const verdict_input *in, const int *which)
{
    int n = 0;
    for (size_t i = 0; i < in->n && i < VERDICT_MAX; i++)
        if (which[i])
            fprintf(f, "%s%s", n++ ? ", " : "", in->names[i]);
    if (!n)
        fprintf(f, "none");
}

void verdict_print(FILE *f, const verdict_input *in, const verdict *v)
{
    fprintf(f, "baselines clearly meeting: ");
    print_names(f, in, v->clearly);
    if (v->best < in->n)
        fprintf(f, " (best %s, be %.3f)", in->names[v->best], v->best_be);
    if (!v->judged_ran) {
        fprintf(f, "; %s not run", in->key ? in->key : "slo_aware");
        return;
    }
    const size_t s = in->judged;
    const char *name = in->names[s];
    double share = in->total[s] > 0 ? in->within[s] / in->total[s] : NAN;
    fprintf(f, "; %s %s the target (%.4f [%.4f, %.4f])", name,
            v->clearly_meets ? "clearly meets"
            : v->meets       ? "meets"
                             : "misses",
            share, v->lo[s], v->hi[s]);
    if (v->n_clearly)
        fprintf(f, ", be %+.3f vs best", v->be_minus_best);
    fprintf(f, "; dominated by: ");
    print_names(f, in, v->dominated_by);
    fprintf(f, " -> %s", v->ok ? "ok" : "NOT ok");
    /* A miss that is still ok says why: no baseline is known to reach the target. */
    if (v->ok && !v->meets)
        fprintf(f, ": no baseline clearly meets it");
}

/* ------------------------------------------------------------------------ */
/* libdsverdict                                                              */

int ds_verdict_wilson(double within, double total, double z, double *lo, double *hi)
{
    if (!lo || !hi)
        return -1;
    return verdict_wilson(within, total, z, lo, hi);
}

size_t ds_verdict_flat_size(void) { return sizeof(ds_verdict_flat); }

int ds_verdict_judge_flat(size_t n, const int *baseline, size_t judged, const double *lat_med,
                          const double *lat_min, const double *lat_max, const double *be_med, const double *be_min,
                          const double *be_max, const double *within, const double *total, double target,
                          ds_verdict_flat *out)
{
    if (!out)
        return -1;
    memset(out, 0, sizeof *out);
    out->best = -1;
    out->best_be = out->be_minus_best = NAN;
    out->target = target;
    out->be_tolerance = VERDICT_BE_TOLERANCE;
    out->z = VERDICT_Z;
    for (size_t i = 0; i < VERDICT_MAX; i++)
        out->lo[i] = out->hi[i] = NAN;
    if (n == 0 || n > VERDICT_MAX || judged > n || !lat_med || !lat_min || !lat_max || !be_med || !be_min ||
        !be_max)
        return -1;
    const char *names[VERDICT_MAX];
    ranged lat[VERDICT_MAX], be[VERDICT_MAX];
    for (size_t i = 0; i < n; i++) {
        names[i] = "";
        lat[i] = (ranged){lat_med[i], lat_min[i], lat_max[i]};
        be[i] = (ranged){be_med[i], be_min[i], be_max[i]};
    }
    verdict_input in = {.n = n, .names = names, .baseline = baseline, .judged = judged, .lat = lat, .be = be,
                        .within = within, .total = total, .target = target};
    verdict v;
    if (verdict_judge(&in, &v))
        return -1;
    for (size_t i = 0; i < n; i++) {
        out->lo[i] = v.lo[i];
        out->hi[i] = v.hi[i];
        out->meeting[i] = v.meeting[i];
        out->clearly[i] = v.clearly[i];
        out->dominated_by[i] = v.dominated_by[i];
    }
    out->n_meeting = (int)v.n_meeting;
    out->n_clearly = (int)v.n_clearly;
    out->n_dominated = (int)v.n_dominated;
    out->best = v.best < n ? (int)v.best : -1;
    out->best_be = v.best_be;
    out->judged_ran = v.judged_ran;
    out->meets = v.meets;
    out->clearly_meets = v.clearly_meets;
    out->be_minus_best = v.be_minus_best;
    out->ok = v.ok;
    return 0;
}
