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
        if (!in->baseline[i] || i == in->judged || !(in->att[i] >= in->target))
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
    v->meets = in->att[s] >= in->target;
    if (v->n_meeting)
        v->be_minus_best = in->be[s].med - v->best_be;
    for (size_t i = 0; i < in->n && i < VERDICT_MAX; i++)
        if (in->baseline[i] && i != s && dominates(&in->lat[i], &in->be[i], &in->lat[s], &in->be[s])) {
            v->dominated_by[i] = 1;
            v->n_dominated++;
        }
    v->ok = (v->meets || !v->n_meeting) && (!v->n_meeting || v->be_minus_best >= -VERDICT_BE_TOLERANCE) &&
            !v->n_dominated;
}

static void json_names(bench_json *j, const char *key, const verdict_input *in, const int *which)
{
    bench_json_array(j, key);
    for (size_t i = 0; i < in->n && i < VERDICT_MAX; i++)
        if (which[i])
            bench_json_string(j, NULL, in->names[i]);
    bench_json_end(j);
}

void verdict_json(bench_json *j, const verdict_input *in, const verdict *v)
{
    bench_json_number(j, "target", v->target);
    json_names(j, "baselines_meeting", in, v->meeting);
    if (v->best < in->n)
        bench_json_string(j, "best_baseline", in->names[v->best]);
    else
        bench_json_null(j, "best_baseline");
    bench_json_number(j, "best_baseline_be", v->best_be);
    bench_json_number(j, "be_tolerance", VERDICT_BE_TOLERANCE);
    bench_json_string(j, "dominance", "as good on both medians, better on one with the ranges apart");
    if (v->judged_ran) {
        bench_json_bool(j, "slo_aware_meets", v->meets);
        bench_json_number(j, "slo_aware_be_minus_best", v->be_minus_best);
        json_names(j, "slo_aware_dominated_by", in, v->dominated_by);
        bench_json_bool(j, "ok", v->ok);
    } else { /* slo_aware did not run: nothing to judge */
        bench_json_null(j, "slo_aware_meets");
        bench_json_null(j, "slo_aware_be_minus_best");
        bench_json_null(j, "slo_aware_dominated_by");
        bench_json_null(j, "ok");
    }
}

static void print_names(const verdict_input *in, const int *which)
{
    int n = 0;
    for (size_t i = 0; i < in->n && i < VERDICT_MAX; i++)
        if (which[i])
            printf("%s%s", n++ ? ", " : "", in->names[i]);
    if (!n)
        printf("none");
}

void verdict_print(const verdict_input *in, const verdict *v)
{
    printf("baselines meeting: ");
    print_names(in, v->meeting);
    if (v->best < in->n)
        printf(" (best %s, be %.3f)", in->names[v->best], v->best_be);
    if (!v->judged_ran) {
        printf("; slo_aware not run");
        return;
    }
    printf("; slo_aware %s the target (%.4f)", v->meets ? "meets" : "misses", in->att[in->judged]);
    if (v->n_meeting)
        printf(", be %+.3f vs best", v->be_minus_best);
    printf("; dominated by: ");
    print_names(in, v->dominated_by);
    printf(" -> %s", v->ok ? "ok" : "NOT ok");
}
