/* The verdict's JSON (verdict.h), apart from verdict.c because it needs
 * bench.c's JSON writer and libdsverdict does not. */
#include <stdio.h>

#include "bench.h"
#include "verdict.h"

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

/* {name: [a[i], b[i]]} over the baselines and the judged configuration. */
static void json_pairs(bench_json *j, const char *key, const verdict_input *in, const double *a, const double *b)
{
    bench_json_object(j, key);
    for (size_t i = 0; i < in->n && i < VERDICT_MAX; i++) {
        if (!in->baseline[i] && i != in->judged)
            continue;
        double pair[2] = {a[i], b[i]};
        bench_json_number_array(j, in->names[i], pair, 2);
    }
    bench_json_end(j);
}

void verdict_json(bench_json *j, const verdict_input *in, const verdict *v)
{
    char key[96];
    bench_json_number(j, "target", v->target);
    json_names(j, "baselines_meeting", in, v->meeting);
    json_names(j, "baselines_clearly_meeting", in, v->clearly);
    if (v->best < in->n)
        bench_json_string(j, "best_baseline", in->names[v->best]);
    else
        bench_json_null(j, "best_baseline");
    bench_json_number(j, "best_baseline_be", v->best_be);
    bench_json_number(j, "be_tolerance", VERDICT_BE_TOLERANCE);
    bench_json_string(j, "dominance", "as good on both medians, better on one with the ranges apart");
    bench_json_string(j, "attainment_rule",
                      "attainment: Wilson score 95% interval [lo, hi] of the requests within the SLO over all "
                      "requests of all repetitions; meets: hi >= target, clearly meets: lo >= target. ok: the "
                      "judged meets the target wherever a baseline clearly meets it, its median BE is at least "
                      "the best clearly meeting baseline's minus be_tolerance, and no baseline dominates it");
    bench_json_number(j, "attainment_z", VERDICT_Z);
    json_pairs(j, "attainment_interval", in, v->lo, v->hi);
    json_pairs(j, "attainment_counts", in, in->within, in->total);
    if (v->judged_ran) {
        bench_json_string(j, "judged", in->names[in->judged]);
        bench_json_bool(j, judged_key(in, "meets", key, sizeof key), v->meets);
        bench_json_bool(j, judged_key(in, "clearly_meets", key, sizeof key), v->clearly_meets);
        bench_json_number(j, judged_key(in, "be_minus_best", key, sizeof key), v->be_minus_best);
        json_names(j, judged_key(in, "dominated_by", key, sizeof key), in, v->dominated_by);
        bench_json_bool(j, "ok", v->ok);
    } else { /* the judged configuration did not run: nothing to judge */
        bench_json_null(j, "judged");
        bench_json_null(j, judged_key(in, "meets", key, sizeof key));
        bench_json_null(j, judged_key(in, "clearly_meets", key, sizeof key));
        bench_json_null(j, judged_key(in, "be_minus_best", key, sizeof key));
        bench_json_null(j, judged_key(in, "dominated_by", key, sizeof key));
        bench_json_null(j, "ok");
    }
}
