/* The right-sizing verdict of colocate and serve: see verdict.h. */
#include "verdict.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* `a` dominates `b` over repetitions: at least as good on both medians, and
 * better on one with the ranges apart. */
static int dominates(const ranged *la, const ranged *ba, const ranged *lb, const ranged *bb)
{
    return la->med <= lb->med && ba->med >= bb->med && (la->max < lb->min || ba->min > bb->max);
}

void verdict_judge(const verdict_input *in, verdict *v)
{
    memset(v, 0, sizeof *v);
    v->target = in->target;
    v->best = in->n;
    v->best_be = NAN;
    v->be_minus_best = NAN;
    for (size_t i = 0; i < in->n && i < VERDICT_MAX; i++) {
        if (!in->baseline[i] || i == in->judged || !(in->att[i].med >= in->target))
            continue;
        v->meeting[i] = 1;
        v->n_meeting++;
        if (v->best == in->n || in->be[i].med > v->best_be) {
            v->best = i;
            v->best_be = in->be[i].med;
        }
    }
    v->judged_ran = in->judged < in->n;
    if (!v->judged_ran)
        return;
    const size_t s = in->judged;
    v->meets = in->att[s].med >= in->target;
    if (v->n_meeting)
        v->be_minus_best = in->be[s].med - v->best_be;
    for (size_t i = 0; i < in->n && i < VERDICT_MAX; i++) {
        if (!in->baseline[i] || i == s)
            continue;
        if (!v->meets && v->meeting[i] && in->att[i].min > in->att[s].max) {
            v->outmet_by[i] = 1;
            v->n_outmet++;
        }
        if (dominates(&in->lat[i], &in->be[i], &in->lat[s], &in->be[s])) {
            v->dominated_by[i] = 1;
            v->n_dominated++;
        }
    }
    int be_ok = !v->n_meeting || v->be_minus_best >= -VERDICT_BE_TOLERANCE;
    v->ok = (v->meets || !v->n_outmet) && be_ok && !v->n_dominated;
    v->ok_medians = (v->meets || !v->n_meeting) && be_ok && !v->n_dominated;
}

static void json_names(bench_json *j, const char *key, const verdict_input *in, const int *which)
{
    bench_json_array(j, key);
    for (size_t i = 0; i < in->n && i < VERDICT_MAX; i++)
        if (which[i])
            bench_json_string(j, NULL, in->names[i]);
    bench_json_end(j);
}

/* The judged configuration's JSON key prefix (verdict_input.key). */
static const char *judged_prefix(const verdict_input *in) { return in->key ? in->key : "slo_aware"; }

/* "<prefix>_<what>": the judged configuration's keys. */
static const char *judged_key(const verdict_input *in, const char *what, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s_%s", judged_prefix(in), what);
    return buf;
}

void verdict_json(bench_json *j, const verdict_input *in, const verdict *v)
{
    char key[96];
    bench_json_number(j, "target", v->target);
    json_names(j, "baselines_meeting", in, v->meeting);
    if (v->best < in->n)
        bench_json_string(j, "best_baseline", in->names[v->best]);
    else
        bench_json_null(j, "best_baseline");
    bench_json_number(j, "best_baseline_be", v->best_be);
    bench_json_number(j, "be_tolerance", VERDICT_BE_TOLERANCE);
    bench_json_string(j, "dominance", "as good on both medians, better on one with the ranges apart");
    bench_json_string(j, "attainment_rule",
                      "ok: the judged meets the target (median) or no baseline meeting it has its attainment range "
                      "above the judged's; ok_medians: it meets or no baseline meets");
    if (v->judged_ran) {
        bench_json_string(j, "judged", in->names[in->judged]);
        bench_json_bool(j, judged_key(in, "meets", key, sizeof key), v->meets);
        bench_json_number(j, judged_key(in, "be_minus_best", key, sizeof key), v->be_minus_best);
        json_names(j, judged_key(in, "outmet_by", key, sizeof key), in, v->outmet_by);
        json_names(j, judged_key(in, "dominated_by", key, sizeof key), in, v->dominated_by);
        bench_json_bool(j, "ok", v->ok);
        bench_json_bool(j, "ok_medians", v->ok_medians);
    } else { /* the judged configuration did not run: nothing to judge */
        bench_json_null(j, "judged");
        bench_json_null(j, judged_key(in, "meets", key, sizeof key));
        bench_json_null(j, judged_key(in, "be_minus_best", key, sizeof key));
        bench_json_null(j, judged_key(in, "outmet_by", key, sizeof key));
        bench_json_null(j, judged_key(in, "dominated_by", key, sizeof key));
        bench_json_null(j, "ok");
        bench_json_null(j, "ok_medians");
    }
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
    fprintf(f, "baselines meeting: ");
    print_names(f, in, v->meeting);
    if (v->best < in->n)
        fprintf(f, " (best %s, be %.3f)", in->names[v->best], v->best_be);
    if (!v->judged_ran) {
        fprintf(f, "; %s not run", judged_prefix(in));
        return;
    }
    const char *name = in->names[in->judged];
    fprintf(f, "; %s %s the target (%.4f)", name, v->meets ? "meets" : "misses", in->att[in->judged].med);
    if (v->n_meeting)
        fprintf(f, ", be %+.3f vs best", v->be_minus_best);
    if (!v->meets && v->n_meeting) {
        fprintf(f, "; out-met by: ");
        print_names(f, in, v->outmet_by);
    }
    fprintf(f, "; dominated by: ");
    print_names(f, in, v->dominated_by);
    fprintf(f, " -> %s", v->ok ? "ok" : "NOT ok");
    /* A miss that is still ok says why: nothing did better on attainment. */
    if (v->ok && !v->meets)
        fprintf(f, v->n_meeting ? ": no baseline that meets it has its attainment range above %s's"
                                : ": no baseline meets it either",
                name);
    fprintf(f, " (medians alone: %s)", v->ok_medians ? "ok" : "NOT ok");
}
